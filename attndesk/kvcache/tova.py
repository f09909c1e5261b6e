"""TOVA (Oren et al. 2024): at each step evict the key the newest query attends to least.

Score of a key: the latest query's weight on it, averaged over every query head (one ranking for
all K/V heads of the layer). After the prefill that query is the prompt's last (its own key kept
first: kvpress's ``TOVAPress``); at decode row t it is row t - 1 of the compressed run, and keys
t - 1 and t are kept first (row t's own weights exist only after it attends).
"""

from __future__ import annotations

import numpy as np

from .base import Policy, View


class TOVA(Policy):
    name = "tova"
    title = "TOVA"
    about = "evict the key the latest query attends to least"
    kind = "adaptive"

    def _scores_from(self, view: View, weights: np.ndarray, n: int) -> np.ndarray:
        """weights [layers, H, m] of the latest query -> [layers, KV, n] (keys past m at 0)."""
        mean = weights.astype(np.float64).mean(1)  # [layers, m]
        out = np.zeros((view.layers, view.kv_heads, n))
        out[..., : mean.shape[-1]] = mean[:, None, :]
        return out

    def prefill_scores(self, view: View, opts) -> np.ndarray:
        p = view.prompt
        last = np.stack([w[:, p - 1, :p] for w in view.prefill.weights])
        return self._scores_from(view, last, p)

    def prefill_protected(self, view: View, opts) -> np.ndarray:
        return np.broadcast_to(np.arange(view.prompt) == view.prompt - 1, (view.layers, view.kv_heads, view.prompt))

    def row_scores(self, view: View, t: int, opts) -> np.ndarray:
        return self._scores_from(view, view.rows[t - 1], t + 1)

    def row_protected(self, view: View, t: int, budget: int, opts) -> np.ndarray:
        return np.broadcast_to(np.arange(t + 1) >= t - 1, (view.layers, view.kv_heads, t + 1))


POLICY = TOVA()
