"""The one result record of a toy-model run: plain numpy and Python, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import AttentionConfig

if TYPE_CHECKING:  # only for annotations: result.py stays import-light
    from .blocked import ExactAttention
    from .plan import RunPlan
    from .pyramid import AttentionPyramid

STAGES = ("embed", "projections", "scores", "mask+softmax", "weighted sum", "merge+output projection")


@dataclass
class AttentionResult:
    """Everything a view needs to draw one run.

    Shapes (batch of one, L query tokens, Lk key tokens, H heads, E embed dim):
    ``weights`` [H, L, Lk] float32; ``output`` [L, E] (or [L, hidden_dim] single-head);
    ``mask`` [L, Lk] bool, True = may attend (None when nothing is masked).

    Memory-bounded runs (``plan.kind != "full"``, chosen when the full weights would not fit
    the memory budget) differ only in what ``weights``/``mask`` hold:

    - ``plan.kind == "pyramid"``: ``weights`` is the display overview, float32 [H, R, C] where
      each cell is the MAX of an f x f tile of the real matrix (f = ``pyramid.factor``;
      R = ceil(L/f), C = ceil(Lk/f)), and ``mask`` is [R, C] (False where the whole tile is
      masked). Safe to draw as-is; NOT indexable by token position. ``pyramid`` holds the tile
      max and mean of every head and of the head mean at several levels, and exact values of any
      cell/rows/region (``pyramid.value``, ``pyramid.region``).
    - ``plan.kind == "blocked"``: ``weights`` is the full [H, L, Lk] matrix in ``plan.storage``
      (float16 to halve it, or float32); ``mask`` is [L, Lk]; ``pyramid`` is built as well.

    In both, ``exact`` recomputes exact weights on demand; ``weight_at(h, q, k)`` works for
    every kind of run, and ``exact_weights`` says whether ``weights`` is the exact float32 matrix.
    ``timings`` keeps the same stage names; on the blocked paths the time spent building the
    overview is in ``extra["overview_seconds"]`` and included in "total".
    """

    tokens: list[str]
    token_ids: np.ndarray  # [L] int64
    weights: np.ndarray  # [H, L, Lk] float32
    output: np.ndarray  # [L, E]
    timings: dict[str, float]  # stage -> seconds, in STAGES order, then "total"
    flops: int
    peak_bytes: int
    device: str
    config: AttentionConfig
    mask: np.ndarray | None = None  # [L, Lk] bool
    key_tokens: list[str] | None = None  # cross-attention: the key/value sequence
    key_token_ids: np.ndarray | None = None
    intermediates: dict[str, np.ndarray] | None = None
    notices: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    plan: "RunPlan | None" = None  # what the run kept (None: a full run made before plans existed)
    pyramid: "AttentionPyramid | None" = None  # the overview + exact access (memory-bounded runs only)
    exact: "ExactAttention | None" = None  # exact recomputation (memory-bounded runs only)

    @property
    def num_heads(self) -> int:
        return int(self.weights.shape[0])

    @property
    def exact_weights(self) -> bool:
        """True when ``weights`` is the exact float32 [H, L, Lk] matrix (every full run)."""
        kept_all = self.plan is None or self.plan.kind != "pyramid"
        return kept_all and self.weights.dtype == np.float32

    @property
    def shape(self) -> tuple[int, int]:
        """(queries L, keys Lk) of the attention matrix, whatever ``weights`` holds."""
        return (len(self.tokens), len(self.keys))

    def weight_at(self, head: int | str, q: int, k: int) -> float:
        """The exact weight of query q on key k for ``head`` (an int, or "mean" over heads)."""
        if self.exact is not None and not self.exact_weights:
            return self.exact.value(head, q, k)
        if head == "mean":
            return float(self.weights[:, q, k].astype(np.float64).mean())
        return float(self.weights[int(head), q, k])

    @property
    def keys(self) -> list[str]:
        """Token labels of the key axis (the query tokens for self-attention)."""
        return self.key_tokens if self.key_tokens is not None else self.tokens

    @property
    def total_seconds(self) -> float:
        return float(self.timings.get("total", sum(self.timings.values())))

    @property
    def gflops_per_second(self) -> float:
        total = self.total_seconds
        return self.flops / total / 1e9 if total > 0 else 0.0
