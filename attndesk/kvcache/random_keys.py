"""The random baseline: each prompt key gets a uniform random score once, after the prefill.

With a seed the scores are torch's ``torch.rand(1, KV, P)`` from a generator seeded with it, drawn
again for every layer (kvpress's ``RandomPress(seed=...)`` draws the same)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attndesk.runs.fields import param

from .base import Policy, View


@dataclass(frozen=True)
class RandomOptions:
    seed: int = param(0, kind=int, low=0, label="Seed", tip="the random scores' seed", flag="--seed")


class RandomKeys(Policy):
    name = "random"
    title = "Random"
    about = "random prompt keys (a baseline)"
    kind = "prefill"
    options = RandomOptions

    def prefill_scores(self, view: View, opts: RandomOptions) -> np.ndarray:
        out = []
        for _ in range(view.layers):
            generator = torch.Generator().manual_seed(opts.seed)
            out.append(torch.rand(1, view.kv_heads, view.prompt, generator=generator)[0].double().numpy())
        return np.stack(out)


POLICY = RandomKeys()
