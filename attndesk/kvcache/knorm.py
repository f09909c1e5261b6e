"""Knorm (Devoto et al. 2024): keep the keys of smallest L2 norm (score = -||k||), per K/V head."""

from __future__ import annotations

import numpy as np

from .base import Policy, View


class Knorm(Policy):
    name = "knorm"
    title = "Knorm"
    about = "the keys of smallest norm"
    kind = "prefill"

    def prefill_scores(self, view: View, opts) -> np.ndarray:
        return -np.stack([np.linalg.norm(k.astype(np.float64), axis=-1) for k in view.prefill.k])


POLICY = Knorm()
