"""The corpus pass: every text of a corpus through a model with attndesk's attention, reduced to
per-head metrics (entropy, distance, self/previous/first shares, TransformerLens' detection
scores, a role), per-text metrics and a query/key atlas, stored as Parquet + DuckDB.

>>> from attndesk.corpus import analyze_corpus, open_corpus          # doctest: +SKIP
>>> store = analyze_corpus("texts.txt", "out/")                      # doctest: +SKIP
>>> store.heads.head()                                               # doctest: +SKIP

Qt-free: a window drives it through ``progress`` (``CorpusProgress``) and ``cancel`` (an Event).
"""

from .engine import ATLAS_POINTS, ENGINES, CorpusProgress, analyze_corpus
from .store import CorpusStore, open_corpus

__all__ = ["ATLAS_POINTS", "CorpusProgress", "CorpusStore", "ENGINES", "analyze_corpus", "open_corpus"]
