"""Synthetic attention maps for the page tests: softmax rows of seeded random scores, causal."""

from __future__ import annotations

import numpy as np

from attndesk.attention.types import AttentionMap, head_name
from attndesk.render.page import PageMap


def softmax_map(
    heads: int,
    tokens: int,
    *,
    seed: int = 0,
    causal: bool = True,
    title: str = "self-attention",
    layer: int | None = None,
) -> AttentionMap:
    rng = np.random.default_rng(seed)
    scores = rng.normal(0.0, 2.0, size=(heads, tokens, tokens))
    mask = np.tril(np.ones((tokens, tokens), dtype=bool)) if causal else None
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = (weights / weights.sum(-1, keepdims=True)).astype(np.float32)
    words = [f"t{i}" for i in range(tokens)]
    return AttentionMap(
        queries=words,
        keys=words,
        weights=weights,
        mask=mask,
        title=title,
        summary=f"{tokens} tokens · {heads} heads",
        file_tag="synthetic",
        head_labels=None if layer is None else [head_name(layer, h) for h in range(heads)],
    )


def model_page_maps(layers: int, heads: int, tokens: int) -> list[PageMap]:
    return [
        PageMap(softmax_map(heads, tokens, seed=n, layer=n, title=f"synthetic · layer {n}"), "self", n)
        for n in range(layers)
    ]
