"""Attention sinks in the softmax: a per-head logit that takes weight and gives no value.

Two variants, both a logit s_h per query head added to the softmax's denominator:

    w_ij = exp(x_ij) / (exp(s_h) + sum_k exp(x_ik))

- ``learned``: per-head sink logits, as GPT-OSS learns them. In the toy model they are the
  configured value (``sink_logit``) or drawn per head from the seed; the trainer learns them.
- ``off-by-one``: softmax with +1 in the denominator (a sink logit fixed at 0 in every head), so
  a head can attend to nothing by giving every key a low score.

A row's weights then sum to 1 - (the sink's share) < 1: the rest went to the sink, which
contributes no value. ``scoring.softmax_rows`` does the arithmetic (the row maximum it subtracts
includes the sink); this module says which logits each variant gives.
"""

from __future__ import annotations

import torch
from torch import nn

SINK_KINDS = ("none", "learned", "off-by-one")
SINK_LABELS = {"none": "none", "learned": "learned per-head sink", "off-by-one": "off-by-one softmax (+1)"}
SINK_TIPS = {
    "none": "the plain softmax: every row's weights sum to 1",
    "learned": "a logit s_h per head joins the denominator, exp(s_h) + Σ exp(x): the sink takes weight "
    "and gives no value (GPT-OSS)",
    "off-by-one": "1 + Σ exp(x) in the denominator: a sink logit fixed at 0, so a head may attend to nothing",
}
INIT_STD = 1.0  # the toy model's random sink logits: N(0, 1) per head, from the seed


def sink_logits(kind: str, heads: int, *, value: float | None = None, seed: int = 0) -> tuple[float, ...] | None:
    """The toy model's sink logits [H] for ``kind``: None (no sink), zeros (off-by-one), or the
    learned kind's ``value`` in every head (None: drawn N(0, 1) per head from ``seed``)."""
    if kind == "none":
        return None
    if kind == "off-by-one":
        return (0.0,) * heads
    if kind != "learned":
        raise ValueError(f"sink kind is one of {', '.join(SINK_KINDS)}, got {kind!r}")
    if value is not None:
        return (float(value),) * heads
    gen = torch.Generator().manual_seed(int(seed))
    return tuple(float(x) for x in torch.randn(heads, generator=gen, dtype=torch.float64) * INIT_STD)


def sink_parameter(kind: str, heads: int) -> torch.Tensor | None:
    """The trainer's sinks for ``kind``: a learned parameter [H] starting at 0, a fixed zero
    buffer for off-by-one, None without."""
    if kind == "none":
        return None
    if kind == "off-by-one":
        return torch.zeros(heads)
    if kind != "learned":
        raise ValueError(f"sink kind is one of {', '.join(SINK_KINDS)}, got {kind!r}")
    return nn.Parameter(torch.zeros(heads))


__all__ = ["INIT_STD", "SINK_KINDS", "SINK_LABELS", "SINK_TIPS", "sink_logits", "sink_parameter"]
