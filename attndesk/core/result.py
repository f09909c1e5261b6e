"""The one result record of a toy-model run: plain numpy and Python, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import AttentionConfig

STAGES = ("embed", "projections", "scores", "mask+softmax", "weighted sum", "merge+output projection")


@dataclass
class AttentionResult:
    """Everything a view needs to draw one run.

    Shapes (batch of one, L query tokens, Lk key tokens, H heads, E embed dim):
    ``weights`` [H, L, Lk] float32; ``output`` [L, E] (or [L, hidden_dim] single-head);
    ``mask`` [L, Lk] bool, True = may attend (None when nothing is masked).
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

    @property
    def num_heads(self) -> int:
        return int(self.weights.shape[0])

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
