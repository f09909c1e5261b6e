"""KeyDiff (Park et al. 2025): keep the keys least similar to the head's mean direction.

Score = -cos(k_j, a) with the anchor a = mean_j (k_j / ||k_j||), per K/V head over the prompt
(kvpress's ``KeyDiffPress``; the paper's block-wise variant is kvpress's BlockPress around it)."""

from __future__ import annotations

import numpy as np

from .base import Policy, View


class KeyDiff(Policy):
    name = "keydiff"
    title = "KeyDiff"
    about = "the keys least similar to the mean key direction"
    kind = "prefill"

    def prefill_scores(self, view: View, opts) -> np.ndarray:
        out = []
        for k in view.prefill.k:
            k64 = k.astype(np.float64)
            norms = np.linalg.norm(k64, axis=-1, keepdims=True)
            anchor = (k64 / np.maximum(norms, 1e-12)).mean(1, keepdims=True)
            cos = (k64 * anchor).sum(-1) / np.maximum(norms[..., 0] * np.linalg.norm(anchor, axis=-1), 1e-8)
            out.append(-cos)
        return np.stack(out)


POLICY = KeyDiff()
