"""DuoAttention's split (Xiao et al. 2024): retrieval heads keep every key, streaming heads keep
``sinks`` + a window of recent keys.

Which heads retrieve: those whose prompt rows put the most weight outside their own sinks and
window (the retrieval share, from the prefill: DuoAttention learns it, kvpress loads it). How
many: as many as the budget pays for on average, R = floor(KV x layers x (b - s) / (n - s)) with
s = sinks + window and n the keys so far; the others stream. ``window`` None: a quarter of the
budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.runs.fields import param

from .base import Policy, View, group_mean, top_keys


@dataclass(frozen=True)
class DuoOptions:
    sinks: int = param(4, kind=int, low=0, label="Sinks", tip="streaming heads' first keys", flag="--sinks")
    window: int | None = param(
        None,
        kind=int,
        low=1,
        none="a quarter of the budget",
        label="Window",
        tip="streaming heads' recent keys",
        flag="--window",
    )


class Duo(Policy):
    name = "duo"
    title = "DuoAttention split"
    about = "retrieval heads keep everything, streaming heads sinks + a window"
    kind = "prefill"
    options = DuoOptions

    def _window(self, budget: int, opts: DuoOptions) -> int:
        return max(1, budget // 4) if opts.window is None else opts.window

    def head_scores(self, view: View, window: int, opts: DuoOptions) -> np.ndarray:
        """[layers, KV]: the prompt rows' mean weight outside sinks + window (the retrieval share;
        once per run and window: every decode row's allocation reads it)."""
        key = ("duo_head_scores", window)
        if key not in view.cache:
            view.cache[key] = self._head_scores(view, window, opts)
        return view.cache[key]

    def _head_scores(self, view: View, window: int, opts: DuoOptions) -> np.ndarray:
        p = view.prompt
        i, j = np.arange(p)[:, None], np.arange(p)[None, :]
        outside = (j <= i) & (j >= opts.sinks) & (i - j >= window)
        return np.stack(
            [group_mean((w.astype(np.float64) * outside).sum(-1).mean(-1), view.kv_heads) for w in view.prefill.weights]
        )

    def prefill_scores(self, view: View, opts: DuoOptions) -> np.ndarray:
        return np.broadcast_to(np.arange(view.prompt, dtype=np.float64), (view.layers, view.kv_heads, view.prompt))

    def prefill_protected(self, view: View, opts: DuoOptions) -> np.ndarray:
        return np.broadcast_to(np.arange(view.prompt) < opts.sinks, (view.layers, view.kv_heads, view.prompt))

    def allocate(self, view, scores, candidates, budget, protected, opts: DuoOptions) -> np.ndarray:
        layers, kv, n = scores.shape
        window = self._window(view.budget or budget, opts)
        stream = opts.sinks + window
        heads = layers * kv
        retrieval = heads if n <= stream else int(np.clip(np.floor(heads * (budget - stream) / (n - stream)), 0, heads))
        ranking = self.head_scores(view, window, opts).reshape(-1)
        chosen = np.zeros(heads, bool)
        chosen[np.argsort(-ranking, kind="stable")[:retrieval]] = True
        kept = top_keys(scores, candidates, min(budget, stream), protected)
        kept[chosen.reshape(layers, kv)] = candidates[chosen.reshape(layers, kv)]
        # the split at the first decode step (later steps, with fewer keys to spend, retrieve with fewer heads)
        view.cache.setdefault("extra", {}).setdefault("retrieval_heads", chosen.reshape(layers, kv))
        return kept


POLICY = Duo()
