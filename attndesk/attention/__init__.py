"""The exact attention kernel and its variants: torch + numpy, no Qt, nothing of a run above it.

Modules: ``kernel`` (``attend``, the reference; the single- and multi-head layers), ``scoring``
(``Scoring``: every score modifier as one value; ``softmax_rows``, the one softmax), ``sinks`` (the
softmax-sink variants), ``fastpath`` (exact attention one query block at a time), ``blocked`` (the
blocked path of long runs, ``ExactAttention``), ``masks`` (True = may attend), ``positional``
(sinusoidal encodings), ``rope``, ``alibi``, and ``types`` (``Head``, ``Intermediates`` with the
step-through's stage names, ``AttentionMap``: the records every layer above shares).
"""
