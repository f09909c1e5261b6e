"""SnapKV (Li et al. 2024): the prompt's last ``window`` queries vote for the earlier keys.

Score of key j < P - window: the window queries' mean weight on j, smoothed by an average pool of
``kernel`` keys (zero-padded, divided by ``kernel``), then averaged over the group's query heads;
the window's own keys are kept first. kvpress's ``SnapKVPress`` (weights recomputed with
1/sqrt(d) there, the model's own weights here: the same for LLaMA-style models).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.errors import ConfigError
from attndesk.runs.fields import param

from .base import Policy, View, group_mean


@dataclass(frozen=True)
class SnapKVOptions:
    window: int = param(64, kind=int, low=1, label="Window", tip="the prompt's last queries that vote", flag="--window")
    kernel: int = param(5, kind=int, low=1, label="Pool", tip="the average pool's width over keys", flag="--kernel")


def pooled_window_scores(view: View, window: int, kernel: int) -> np.ndarray:
    """float64 [layers, KV, P]: SnapKV's scores, the window's keys at +inf."""
    p = view.prompt
    out = []
    for weights in view.prefill.weights:
        votes = weights[:, p - window :, : p - window].astype(np.float64).mean(1)  # [H, P - w]
        padded = np.pad(votes, ((0, 0), (kernel // 2, kernel // 2)))
        sums = np.cumsum(np.pad(padded, ((0, 0), (1, 0))), axis=-1)
        pooled = (sums[:, kernel:] - sums[:, :-kernel]) / kernel  # [H, P - w + 2 (k // 2) - k + 1]
        scores = group_mean(pooled[:, : p - window], view.kv_heads)
        out.append(np.concatenate([scores, np.full((view.kv_heads, window), np.inf)], axis=-1))
    return np.stack(out)


def check_window(view: View, window: int, name: str) -> None:
    if view.prompt <= window:
        raise ConfigError(
            f"{name}'s window of {window} queries needs a longer prompt ({view.prompt} tokens): give window= below it"
        )


class SnapKV(Policy):
    name = "snapkv"
    title = "SnapKV"
    about = "keys the prompt's last queries attend to, pooled"
    kind = "prefill"
    options = SnapKVOptions

    def check(self, view: View, budget: int, opts: SnapKVOptions) -> None:
        check_window(view, opts.window, self.name)

    def prefill_scores(self, view: View, opts: SnapKVOptions) -> np.ndarray:
        return pooled_window_scores(view, opts.window, opts.kernel)


POLICY = SnapKV()
