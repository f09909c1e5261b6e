"""PyramidKV (Cai et al. 2024): SnapKV's scores with budgets that shrink linearly with depth.

Layer l keeps round(max - l (max - min) / (layers - 1)) keys, where with budget b (per head on
average), window w and steepness ``beta``: capacity = w + b, min = b / beta, max = 2 b - min (capped
at P - w, min then 2 b - max); when P >= max >= min >= w does not hold every layer keeps b.
kvpress's ``PyramidKVPress`` with compression ratio 1 - b / P.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.runs.fields import param

from .base import top_keys
from .snapkv import SnapKV, SnapKVOptions


@dataclass(frozen=True)
class PyramidKVOptions(SnapKVOptions):
    """SnapKV's window and pool, and the pyramid's steepness."""

    beta: int = param(20, kind=int, low=1, label="Beta", tip="the pyramid's steepness", flag="--beta")


def layer_budgets(prompt: int, budget: float, layers: int, window: int, beta: int) -> list[int]:
    """Keys kept by each layer (kvpress's formula, the kept share ``budget / prompt`` as its 1 - ratio)."""
    capacity = window + budget
    low = (capacity - window) / beta
    high = (capacity - window) * 2 - low
    if high >= prompt - window:
        high = prompt - window
        low = (capacity - window) * 2 - high
    if not (prompt >= high >= low >= window):
        return [max(1, round(budget))] * layers
    step = (high - low) / (layers - 1) if layers > 1 else 0.0
    return [round(high - layer * step) for layer in range(layers)]


class PyramidKV(SnapKV):
    """SnapKV's check and scores; its own budgets per layer."""

    name = "pyramidkv"
    title = "PyramidKV"
    about = "SnapKV's scores, more keys in early layers than late ones"
    options = PyramidKVOptions

    def allocate(self, view, scores, candidates, budget, protected, opts: PyramidKVOptions) -> np.ndarray:
        budgets = layer_budgets(scores.shape[-1], budget, scores.shape[0], opts.window, opts.beta)
        view.cache.setdefault("extra", {}).setdefault("layer_budgets", budgets)  # at the first decode step
        return top_keys(scores, candidates, np.asarray(budgets)[:, None], protected)


POLICY = PyramidKV()
