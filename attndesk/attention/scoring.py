"""What turns Q K^T into attention weights besides the projections: one ``Scoring`` value.

Every attention path (the reference ``attention.attend``, the fast path, the blocked path, the
pretrained backend, the online-softmax walk and the trainer's layers) takes the score modifiers
as one ``Scoring``, applied in the reference order:

    s = Q K^T * scale
    s = softcap * tanh(s / softcap)        (soft-capping, when ``softcap``)
    s = s - slope_h |i - j|                (ALiBi, when ``slopes`` [H])
    s = -inf where |i - j| >= window       (a sliding ``window``, with the caller's mask)
    w = softmax(s), with a sink logit s_h per head in the denominator when ``sinks``:
        w_ij = exp(s_ij) / (exp(s_h) + sum_k exp(s_ik))

A sink takes weight and gives no value, so a row then sums to less than 1 (its share goes to
the sink); the maximum subtracted for stability includes the sink. A row with no key left gets
zeros, never NaN, with or without a sink. ``softmax_rows`` is the one softmax of every path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

_NEG_INF = float("-inf")

Sinks = tuple[float, ...] | torch.Tensor  # one logit per query head; a tensor may be a learned parameter


@dataclass(frozen=True, eq=False)
class Scoring:
    """The score modifiers of one attention layer: ``scale``, a soft-cap C, ALiBi ``slopes`` [H]
    (bias -slope_h |i - j|), a sliding ``window`` W (key j visible to query i when |i - j| < W)
    and per-head sink logits ``sinks`` [H] (None: a plain softmax)."""

    scale: float = 1.0
    softcap: float | None = None
    slopes: tuple[float, ...] | None = None
    window: int | None = None
    sinks: Sinks | None = None

    @classmethod
    def of(
        cls,
        head_dim: int,
        *,
        scale: float | None = None,
        softcap: float | None = None,
        slopes: Iterable[float] | None = None,
        window: int | None = None,
        sinks: Sinks | Sequence[float] | None = None,
    ) -> Scoring:
        """The Scoring of separate keywords (the public functions' door): ``scale`` None is 1/sqrt(d)."""
        return cls(
            scale=1.0 / math.sqrt(head_dim) if scale is None else float(scale),
            softcap=None if softcap is None else float(softcap),
            slopes=None if slopes is None else tuple(float(s) for s in slopes),
            window=None if window is None else int(window),
            sinks=None if sinks is None else (sinks if isinstance(sinks, torch.Tensor) else tuple(map(float, sinks))),
        )

    @property
    def fusable(self) -> bool:
        """Whether a 0/-inf key bias may enter the GEMM (it must stay -inf through scale and cap)."""
        return self.softcap is None and self.scale > 0 and math.isfinite(self.scale)

    @property
    def learned(self) -> bool:
        """Whether a modifier needs a gradient (a sink logit being trained): the reference path only."""
        return isinstance(self.sinks, torch.Tensor) and self.sinks.requires_grad and torch.is_grad_enabled()

    def sink_of(self, head: int) -> float | None:
        """Head ``head``'s sink logit, or None without sinks."""
        if self.sinks is None:
            return None
        return float(self.sinks[head])

    def sink_column(self, heads: int, dtype: torch.dtype, device=None) -> torch.Tensor | None:
        """The sink logits as [H, 1, 1] (broadcast over a head's rows), or None without sinks."""
        if self.sinks is None:
            return None
        sinks = torch.as_tensor(self.sinks, device=device)
        if sinks.shape != (heads,):
            raise ValueError(f"need one sink logit per query head ({heads}), got shape {tuple(sinks.shape)}")
        return sinks.to(dtype)[:, None, None]


def softmax_rows(
    scores: torch.Tensor,
    blocked: torch.Tensor | None = None,
    empty: torch.Tensor | None = None,
    *,
    out: torch.Tensor | None = None,
    sink: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """The one masked softmax: -inf where ``blocked`` (True = masked), softmax over the last axis,
    zeros on the ``empty`` rows (a query with no key left attends to nothing: never NaN).

    ``sink`` (a logit, or a tensor broadcastable to [..., 1]) joins each row's denominator and
    takes its share of the weight. With ``out`` (the fast path's buffers; may be ``scores``
    itself, row-wise safe) everything happens in place; without, nothing does (safe under
    autograd). Half precision is softmaxed in float32, as transformers' eager attention does.
    """
    inplace = out is not None
    if blocked is not None:
        scores = scores.masked_fill_(blocked, _NEG_INF) if inplace else scores.masked_fill(blocked, _NEG_INF)
    if sink is not None:
        weights = _sink_softmax(scores, sink, out)
    elif scores.dtype in (torch.float16, torch.bfloat16):
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
        weights = out.copy_(weights) if out is not None else weights
    else:
        weights = torch.softmax(scores, dim=-1, out=out) if inplace else torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill_(empty, 0.0) if inplace else weights.masked_fill(empty, 0.0)
    return weights


def _sink_softmax(scores: torch.Tensor, sink: torch.Tensor | float, out: torch.Tensor | None) -> torch.Tensor:
    """exp(s - m) / (exp(sink - m) + sum exp(s - m)) with m the row maximum including the sink
    (finite, so a row of -inf gives zeros: exp(-inf) / exp(sink - m))."""
    half = scores.dtype in (torch.float16, torch.bfloat16)
    work = scores.float() if half else scores
    sink_t = torch.as_tensor(sink, dtype=work.dtype, device=work.device)
    top = torch.maximum(work.amax(dim=-1, keepdim=True), sink_t)
    if out is not None and not half:
        e = torch.sub(work, top, out=out).exp_()
        return e.div_(e.sum(dim=-1, keepdim=True).add_(torch.exp(sink_t - top)))
    e = torch.exp(work - top)
    weights = e / (e.sum(dim=-1, keepdim=True) + torch.exp(sink_t - top))
    if half:
        weights = weights.to(scores.dtype)
        return out.copy_(weights) if out is not None else weights
    return weights


def sink_share(scores: torch.Tensor, sink: torch.Tensor | float) -> torch.Tensor:
    """The weight the sink takes in each row, [..., 1]: exp(sink - m) / (exp(sink - m) + sum exp(s - m))
    (1 on a row with no key left)."""
    work = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    sink_t = torch.as_tensor(sink, dtype=work.dtype, device=work.device)
    top = torch.maximum(work.amax(dim=-1, keepdim=True), sink_t)
    own = torch.exp(sink_t - top)
    return (own / (torch.exp(work - top).sum(dim=-1, keepdim=True) + own)).to(scores.dtype)


__all__ = ["Scoring", "Sinks", "sink_share", "softmax_rows"]
