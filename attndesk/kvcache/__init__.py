"""KV-cache eviction policies and the exact compressed run (Qt-free).

Eviction is a mask over keys per layer, K/V head and query row; attndesk computes every attention
weight itself, so the compressed model's output is exact, not estimated.

>>> from attndesk.kvcache import POLICIES, simulate
>>> run = simulate(model, "The cat sat.", policy="streaming", budget=64, generate=0)  # doctest: +SKIP
>>> run.keep      # bool [layers, kv_heads, queries, keys]: the key is visible to that query row
>>> run.logits    # float32 [queries, vocab], the compressed run's
>>> run.full_logits, run.kl   # the full cache's logits; KL(full || compressed) per row (float64)
>>> run.ids       # the tokens the rows read: the input, then the generated ones (greedy, compressed)
>>> run.error     # float64 [layers, heads, queries]: each head's attention-output error

Rows are query positions in reading order: the prompt's, then one per decode step. A policy that
compresses after the prefill leaves the prompt's rows full (causal) and prunes from the first
decode step; a decode step keeps at most ``budget`` keys per K/V head (on average over layers and
K/V heads for PyramidKV, AdaKV and the DuoAttention split, which move budget between them).
``streaming`` takes ``sinks`` (default 4): key j is visible to query i when j <= i and
(j < sinks or i - j < budget - sinks). ``POLICIES[name].option_fields()`` lists a policy's options
(``param`` fields: what the CLI and a form read); ``docs/kvcache.md`` defines every policy.

Modules: ``base`` (what every policy shares), ``registry`` (``POLICIES``), one module per policy
(``recency``, ``random_keys``, ``streaming``, ``h2o``, ``tova``, ``snapkv``, ``pyramidkv``, ``adakv``,
``knorm``, ``keydiff``, ``expected_attention``, ``duo``, ``oracle``), ``model`` (the forward with
per-head key masks), ``simulate`` (the compressed run), ``retrieval`` (retrieval-head scores),
``sinks`` (attention sinks and massive activations), ``regressions`` (two published eviction bugs
reproduced), and the window's KV cache tab's work: ``lab`` (one run) and ``sweep`` (every policy
at every budget); over a corpus, ``corpus_sweep`` (every text x policy x budget on the corpus pass's
engines) and ``sweep_store`` (its Parquet + DuckDB store and curves).
"""

import importlib

from .base import Policy, resolve_budget, top_keys
from .model import KVModel, kv_model
from .registry import POLICIES
from .simulate import KVRun, simulate

# loaded on first use: the sweep over a corpus and its store read pandas, pyarrow and DuckDB
_LAZY = {"sweep_corpus": "corpus_sweep", "KVSweepStore": "sweep_store", "open_kv_sweep": "sweep_store"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)


__all__ = [
    "POLICIES",
    "KVModel",
    "KVRun",
    "KVSweepStore",
    "Policy",
    "kv_model",
    "open_kv_sweep",
    "resolve_budget",
    "simulate",
    "sweep_corpus",
    "top_keys",
]
