"""H2O / observed attention (Zhang et al. 2023): keep the heavy hitters, the keys that have received
the most attention, beside a window of recent keys.

Score of key j at row t: the attention it received from rows j..t-1 of the compressed run (the
prefill's rows for the prompt), summed over the rows and averaged over the group's query heads;
with ``normalize`` divided by the number of those rows (kvpress's ``ObservedAttentionPress``, whose
prefill keep set this equals with ``recent=0``). The ``recent`` newest keys are kept first.

The grace rule: a new key is kept first while it is among the ``recent`` newest (at least itself,
for its own row). Without it (``grace=False``) a new key enters the ranking at once with score 0 and
is the first evicted: the cache keeps its prompt forever (docs/kvcache.md shows the picture).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.runs.fields import param

from .base import Policy, View, group_mean


@dataclass(frozen=True)
class H2OOptions:
    recent: int | None = param(
        None,
        kind=int,
        low=0,
        none="half the budget",
        label="Recent",
        tip="newest keys kept before the heavy hitters",
        flag="--recent",
    )
    grace: bool = param(
        True, kind=bool, label="Grace for new keys", tip="new keys are kept while they are recent", flag="--no-grace"
    )
    normalize: bool = param(
        True,
        kind=bool,
        label="Mean, not sum",
        tip="divide a key's received attention by the rows that could see it",
        flag="--sum",
    )


class H2O(Policy):
    name = "h2o"
    title = "H2O (observed attention)"
    about = "heavy hitters by received attention + a recent window"
    kind = "adaptive"
    options = H2OOptions

    def _received(self, view: View, t: int) -> np.ndarray:
        """[layers, KV, t + 1]: attention summed over rows 0..t-1, and how many rows could see each key."""
        memo = view.cache.get("received")
        if memo is None or memo[0] > t:
            p = view.prompt
            total = np.stack([group_mean(w.sum(1), view.kv_heads) for w in view.prefill.weights])  # [layers, KV, P]
            memo = (p, total)
        done, total = memo
        if total.shape[-1] < t + 1:
            total = np.concatenate([total, np.zeros((*total.shape[:2], t + 1 - total.shape[-1]))], axis=-1)
        for row in range(done, t):
            weights = view.rows[row]  # [layers, H, row + 1]
            total[..., : row + 1] += np.stack([group_mean(w, view.kv_heads) for w in weights])
        view.cache["received"] = (t, total)
        return total[..., : t + 1]

    def row_scores(self, view: View, t: int, opts: H2OOptions) -> np.ndarray:
        received = self._received(view, t).copy()
        if opts.normalize:
            seen = t - np.arange(t + 1)  # rows j..t-1 saw key j
            received = np.where(seen > 0, received / np.maximum(seen, 1), 0.0)
        return received

    def _recent(self, budget: int, opts: H2OOptions) -> int:
        return budget // 2 if opts.recent is None else opts.recent

    def row_protected(self, view: View, t: int, budget: int, opts: H2OOptions) -> np.ndarray | None:
        if not opts.grace:
            return None
        recent = max(1, self._recent(budget, opts))
        return np.broadcast_to(np.arange(t + 1) > t - recent, (view.layers, view.kv_heads, t + 1))

    def prefill_scores(self, view: View, opts: H2OOptions) -> np.ndarray:
        return self.row_scores(view, view.prompt, opts)[..., : view.prompt]

    def prefill_protected(self, view: View, opts: H2OOptions) -> np.ndarray | None:
        recent = 0 if opts.recent is None else opts.recent
        return np.broadcast_to(
            np.arange(view.prompt) >= view.prompt - recent, (view.layers, view.kv_heads, view.prompt)
        )


POLICY = H2O()
