"""A toy model's run: its settings, its plan, the run itself and its result (no Qt).

Modules: ``fields`` (the field spec: ``param``, ``Param``), ``config`` (``AttentionConfig``, built
from it), ``memory`` (what a run will allocate), ``plan`` (full weights, blocks or a pyramid,
decided before the run), ``pipeline`` (``run_attention``: text in, every number a view needs out),
``pyramid`` (the display pyramid of long runs), ``result`` (``AttentionResult``), ``select`` (a map
-> the matrices a view draws) and ``tokenizer`` (the toy model's word tokenizer).
"""
