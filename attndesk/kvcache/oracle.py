"""The oracle: each decode row keeps the keys the full run's same query attends to most (its weights
summed over the group's query heads). No cache: a key evicted at one row may come back at the next.
It is the upper bound of a per-row selection of ``budget`` keys, not a policy a server can run."""

from __future__ import annotations

import numpy as np

from .base import Policy, View, group_mean


class Oracle(Policy):
    name = "oracle"
    title = "Oracle"
    about = "the keys the full run's query attends to most (an upper bound)"
    kind = "oracle"

    def prefill_scores(self, view: View, opts) -> np.ndarray:
        p = view.prompt
        return np.stack([group_mean(w[:, p - 1, :p], view.kv_heads) for w in view.prefill.weights])


POLICY = Oracle()
