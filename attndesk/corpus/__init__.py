"""The corpus pass: every text of a corpus through a model with attndesk's attention, reduced to
per-head metrics (entropy, distance, self/previous/first shares, TransformerLens' detection
scores, a role), per-text metrics and a query/key atlas, stored as Parquet + DuckDB.

>>> from attndesk.corpus import analyze_corpus, open_corpus          # doctest: +SKIP
>>> store = analyze_corpus("texts.txt", "out/")                      # doctest: +SKIP
>>> store.heads.head()                                               # doctest: +SKIP

Its modules: ``sources`` (where texts come from), ``shards`` (the files of a run in progress),
``batch`` (one shard through the model), ``metrics`` (per-text, per-head metrics), ``engine``
(``analyze_corpus``, the local engine), ``ray_engine`` (the same shards on Ray), ``compact``
(finished shards into the store's tables), ``store`` (``CorpusStore``: Parquet + DuckDB),
``atlas`` (the query/key atlas, UMAP), and for a vision model ``images`` (a folder of images or
the sample images; one shard of them through ``run_image``) and ``image_metrics`` (per-image,
per-head metrics, their summary and roles).

Qt-free: a window drives it through a job context, ``ctx=`` (progress, cancel, and each
``CorpusProgress`` as a report), or the older ``progress`` and ``cancel`` (an Event) keywords.
The names below are imported on first use, so ``attndesk.corpus.metrics`` alone (a window's list
of metrics) does not load pandas, pyarrow and DuckDB.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "ATLAS_POINTS": "engine",
    "CorpusProgress": "engine",
    "ENGINES": "engine",
    "analyze_corpus": "engine",
    "finished_shards": "shards",
    "CorpusStore": "store",
    "open_corpus": "store",
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)


__all__ = [
    "ATLAS_POINTS",
    "ENGINES",
    "CorpusProgress",
    "CorpusStore",
    "analyze_corpus",
    "finished_shards",
    "open_corpus",
]
