"""The recency baseline: the ``budget`` most recent keys, evicting as it reads from the first row
(StreamingLLM without sinks: the window attention that collapses once the first token leaves)."""

from __future__ import annotations

import numpy as np

from .base import Policy, View
from .streaming import window_keep


class Recency(Policy):
    name = "recency"
    title = "Recent window"
    about = "the most recent keys only (no sinks), evicting from the first row"
    kind = "stream"

    def row_scores(self, view: View, t: int, opts) -> np.ndarray:
        return np.broadcast_to(np.arange(t + 1, dtype=np.float64), (view.layers, view.kv_heads, t + 1))

    def stream_keep(self, view: View, n: int, budget: int, opts) -> np.ndarray:
        return window_keep(view, n, budget, 0)

    def prefill_scores(self, view: View, opts) -> np.ndarray:
        return self.row_scores(view, view.prompt - 1, opts)


POLICY = Recency()
