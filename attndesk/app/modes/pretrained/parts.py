"""Which weights of a real-model run the whole-run teaching tabs (rollout, head statistics) read:
the part the window shows. An encoder or decoder has one part (its self-attention); an
encoder-decoder three: its encoder's, its decoder's (causal, over the target) and the
cross-attention (target rows over source columns). Qt-free: the tabs call it on the GUI thread
(slices, no copies) and hand the arrays to side jobs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.models import PretrainedResult

PART_NAMES = {"self": "self-attention", "decoder": "decoder self-attention", "cross": "cross-attention"}
NO_CROSS_ROLLOUT = (
    "Rollout does not apply to cross-attention: it multiplies each layer's square token × token "
    "attention into the next, and cross-attention maps target rows onto source columns (T × L), "
    "so there is no chain from layer to layer. Choose “encoder self-attention” or “decoder "
    "self-attention” in the heatmap header to trace those."
)
CROSS_STATS_NOTE = (
    "cross-attention: rows are target tokens, columns source tokens, so distance and the self / "
    "previous / next shares compare positions in two different texts (read them as alignment only)"
)


@dataclass(frozen=True, eq=False)
class PartWeights:
    """Every layer's weights of one part: ``weights`` [N, H, Lq, Lk], the key tokens ``tokens``
    (rollout's and the statistics' labels), and what the part is called."""

    part: str
    weights: np.ndarray
    tokens: list[str]
    queries: list[str]
    name: str

    @property
    def square(self) -> bool:
        return self.weights.shape[-1] == self.weights.shape[-2] and self.part != "cross"


def part_weights(run: PretrainedResult, part: str) -> PartWeights:
    """The part ``part`` of ``run`` (an encoder's or decoder's own self-attention when it has no such part)."""
    part = part if part in run.parts() else "self"
    target = list(run.target_tokens or [])
    queries, keys = {"self": (run.tokens, run.tokens), "decoder": (target, target), "cross": (target, run.tokens)}[part]
    name = PART_NAMES[part]
    if part == "self" and run.family == "encoder-decoder":
        name = "encoder self-attention"
    return PartWeights(part, run.part_weights(part), list(keys), list(queries), name)


__all__ = ["CROSS_STATS_NOTE", "NO_CROSS_ROLLOUT", "PART_NAMES", "PartWeights", "part_weights"]
