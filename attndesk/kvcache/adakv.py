"""AdaKV (Feng et al. 2024): one budget for the whole layer, spent on the heads whose keys score
highest. Each K/V head first keeps its top max(1, int(alpha b)) keys (the safeguard), then the
layer keeps its KV x b best-scored keys over all heads together. The scores are another policy's
(``scorer``). kvpress's ``AdaKVPress`` around that scorer's press.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.runs.fields import param

from . import expected_attention, keydiff, knorm, snapkv
from .base import Policy, View, top_keys

SCORERS: dict[str, Policy] = {m.POLICY.name: m.POLICY for m in (snapkv, knorm, keydiff, expected_attention)}


@dataclass(frozen=True)
class AdaKVOptions:
    scorer: str = param(
        "snapkv", kind=str, choices=tuple(SCORERS), label="Scorer", tip="whose key scores", flag="--scorer"
    )
    alpha: float = param(
        0.2, kind=float, low=0.0, high=1.0, label="Safeguard", tip="share of the budget each head keeps", flag="--alpha"
    )
    window: int = param(64, kind=int, low=1, label="Window", tip="snapkv's voting queries", flag="--window")
    kernel: int = param(5, kind=int, low=1, label="Pool", tip="snapkv's pool width", flag="--kernel")


def _scorer(opts: AdaKVOptions) -> tuple[Policy, object]:
    inner = SCORERS[opts.scorer]
    given = {"window": opts.window, "kernel": opts.kernel} if opts.scorer == "snapkv" else {}
    return inner, inner.parse(given)


class AdaKV(Policy):
    name = "adakv"
    title = "AdaKV"
    about = "one budget per layer, spent on the heads that need it (another policy's scores)"
    kind = "prefill"
    options = AdaKVOptions

    def check(self, view: View, budget: int, opts: AdaKVOptions) -> None:
        inner, inner_opts = _scorer(opts)
        inner.check(view, budget, inner_opts)

    def prefill_scores(self, view: View, opts: AdaKVOptions) -> np.ndarray:
        inner, inner_opts = _scorer(opts)
        return inner.prefill_scores(view, inner_opts)

    def allocate(self, view, scores, candidates, budget, protected, opts: AdaKVOptions) -> np.ndarray:
        layers, kv, n = scores.shape
        safe = max(1, int(budget * opts.alpha)) if opts.alpha > 0 else 0
        guard = top_keys(scores, candidates, safe, protected)
        flat = lambda a: a.reshape(layers, kv * n)  # noqa: E731 - the layer's heads side by side
        kept = top_keys(flat(scores), flat(candidates), kv * budget, flat(guard))
        return kept.reshape(layers, kv, n)


POLICY = AdaKV()
