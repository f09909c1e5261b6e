"""StreamingLLM (Xiao et al. 2023): the first ``sinks`` keys (attention sinks) and a window of the
most recent keys, evicting as it reads from the first row.

Keep rule: key j is visible to query i when j <= i and (j < sinks or i - j < budget - sinks).
kvpress's ``StreamingLLMPress`` keeps the same set of the prompt after the prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.errors import ConfigError
from attndesk.runs.fields import param

from .base import Policy, View


@dataclass(frozen=True)
class StreamingOptions:
    sinks: int = param(
        4, kind=int, low=0, label="Sinks", tip="first keys always kept (attention sinks)", flag="--sinks"
    )


def window_keep(view: View, n: int, window: int, sinks: int) -> np.ndarray:
    """bool [layers, KV, n, n]: key j visible to row i when j <= i and (j < sinks or i - j < window)."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    rows = (j <= i) & ((j < sinks) | (i - j < window))
    return np.broadcast_to(rows, (view.layers, view.kv_heads, n, n)).copy()


class Streaming(Policy):
    name = "streaming"
    title = "StreamingLLM"
    about = "attention sinks + a window of recent keys, evicting from the first row"
    kind = "stream"
    options = StreamingOptions

    def check(self, view: View, budget: int, opts: StreamingOptions) -> None:
        if opts.sinks >= budget:
            raise ConfigError(
                f"streaming keeps {opts.sinks} sinks in a budget of {budget}: the budget must exceed the sinks"
            )

    def row_scores(self, view: View, t: int, opts: StreamingOptions) -> np.ndarray:
        positions = np.arange(t + 1, dtype=np.float64)  # the newest first
        return np.broadcast_to(positions, (view.layers, view.kv_heads, t + 1))

    def row_protected(self, view: View, t: int, budget: int, opts: StreamingOptions) -> np.ndarray:
        return np.broadcast_to(np.arange(t + 1) < opts.sinks, (view.layers, view.kv_heads, t + 1))

    def stream_keep(self, view: View, n: int, budget: int, opts: StreamingOptions) -> np.ndarray:
        return window_keep(view, n, budget - opts.sinks, opts.sinks)

    def prefill_scores(self, view: View, opts: StreamingOptions) -> np.ndarray:
        return self.row_scores(view, view.prompt - 1, opts)

    def prefill_protected(self, view: View, opts: StreamingOptions) -> np.ndarray:
        return self.row_protected(view, view.prompt - 1, 0, opts)


POLICY = Streaming()
