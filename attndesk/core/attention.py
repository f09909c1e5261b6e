"""Scaled dot-product attention and the single- and multi-head self-attention layers.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

A mask removes key positions *before* the softmax (True = may attend). A query row whose keys are
all masked gets all-zero weights and a zero output (never NaN, never a spread over padding).

Inference runs in place where it can (scaling folded into the query projection, masking and the
NaN fix-up on the score buffer itself): at long lengths the [B, H, L, L] passes dominate.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .timing import NULL_TIMER

Keep = dict  # stage name -> tensor, filled when a caller asks for intermediates


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, *, inplace: bool = False) -> torch.Tensor:
    """softmax over the last axis after removing masked keys; rows with no key become all zero.

    ``inplace`` lets the masking reuse ``scores`` (callers pass it when no gradient is needed
    and nobody else holds the buffer).
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    blocked = ~mask
    scores = scores.masked_fill_(blocked, float("-inf")) if inplace else scores.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    row_has_key = mask.any(dim=-1, keepdim=True)  # small: [..., Lq or 1, 1]
    if not bool(row_has_key.all()):
        # softmax of an all -inf row is NaN; such a query attends to nothing.
        weights = weights.masked_fill_(~row_has_key, 0.0) if inplace else weights.masked_fill(~row_has_key, 0.0)
    return weights


def _apply_dropout(weights: torch.Tensor, dropout) -> torch.Tensor:
    if dropout is None:
        return weights
    if callable(dropout):  # an nn.Dropout honours its module's train/eval mode
        return dropout(weights)
    return F.dropout(weights, p=float(dropout), training=True)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout: float | Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scale) V with a boolean mask; returns (output [..., Lq, d_v], weights [..., Lq, Lk]).

    query [..., Lq, d_k], key [..., Lk, d_k], value [..., Lk, d_v]. ``mask`` is bool, broadcastable
    to [..., Lq, Lk], True = may attend. ``scale`` defaults to 1/sqrt(d_k); 1.0 is the unscaled
    variant. ``dropout`` is a probability (always applied) or a module such as nn.Dropout
    (applied in its training mode only), acting on the weights as in the Transformer paper.
    """
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = torch.matmul(query, key.transpose(-2, -1))  # [..., Lq, Lk]
    grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad)
    if scale != 1.0:
        scores = scores * scale if grad else scores.mul_(scale)
    weights = masked_softmax(scores, mask, inplace=not grad)
    weights = _apply_dropout(weights, dropout)
    return torch.matmul(weights, value), weights


def attend_heads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    scale: float,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
    timer=NULL_TIMER,
    keep: Keep | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-head core, timed stage by stage: q [B, H, Lq, d], k/v [B, H, Lk, d] -> (context, weights).

    ``scale`` is the factor still to apply to Q K^T (1.0 when the caller folded it into q).
    With ``keep`` every stage's matrix is stored unmodified: scores, scaled, masked (-inf where
    masked), weights, context.
    """
    grad = torch.is_grad_enabled() and q.requires_grad
    with timer.stage("scores"):
        scores = torch.matmul(q, k.transpose(-2, -1))  # [B, H, Lq, Lk]
        if keep is not None:
            keep["scores"] = scores.clone()
        if scale != 1.0:
            scores = scores * scale if grad else scores.mul_(scale)
        if keep is not None:
            keep["scaled"] = scores.clone()
    with timer.stage("mask+softmax"):
        if keep is not None:
            keep["masked"] = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
        weights = masked_softmax(scores, mask, inplace=not grad and keep is None)
        if dropout is not None:
            weights = dropout(weights)
        if keep is not None:
            keep["weights"] = weights
    with timer.stage("weighted sum"):
        context = torch.matmul(weights, v)  # [B, H, Lq, d]
        if keep is not None:
            keep["context"] = context
    return context, weights


def _broadcast_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Accept [Lq, Lk], [B, Lq, Lk] or [B, 1|H, Lq, Lk] masks: make a 3-D one broadcast over heads."""
    if mask is not None and mask.dim() == 3:
        return mask[:, None]  # [B, Lq, Lk] -> [B, 1, Lq, Lk]
    return mask


class SingleHeadAttention(nn.Module):
    """One head: three Linear layers (embed_dim -> hidden_dim), softmax(Q K^T / sqrt(hidden_dim)) V."""

    def __init__(self, embed_dim: int, hidden_dim: int, bias: bool = True):
        super().__init__()
        self.embed_dim, self.hidden_dim = embed_dim, hidden_dim
        self.q_proj = nn.Linear(embed_dim, hidden_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, hidden_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, hidden_dim, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        timer=NULL_TIMER,
        keep: Keep | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, embed_dim] -> (output [B, L, hidden_dim], weights [B, L, L])."""
        scale = 1.0 / math.sqrt(self.hidden_dim) if scale is None else float(scale)
        with timer.stage("projections"):
            q, k, v = (rearrange(p(x), "b l d -> b 1 l d") for p in (self.q_proj, self.k_proj, self.v_proj))
        if keep is not None:
            keep.update(q=q, k=k, v=v)
        context, weights = attend_heads(q, k, v, _broadcast_mask(mask), scale=scale, timer=timer, keep=keep)
        with timer.stage("merge+output projection"):
            output = rearrange(context, "b 1 l d -> b l d")
        return output, rearrange(weights, "b 1 q k -> b q k")


class MultiHeadAttention(nn.Module):
    """Multi-head attention with four Linear layers (q_proj, k_proj, v_proj, out_proj: E -> E).

    Project, split the last axis into heads (``b l (h d) -> b h l d``), attend per head with
    d = E / H, merge back (``b h l d -> b l (h d)``), then the output projection.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"{num_heads} heads do not divide embed_dim {embed_dim}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _fused_qkv(self, x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention inference: one GEMM for Q, K and V, with the score scale folded into Q."""
        weight = torch.cat([self.q_proj.weight * scale, self.k_proj.weight, self.v_proj.weight])  # [3E, E]
        bias = None
        if self.q_proj.bias is not None:
            bias = torch.cat([self.q_proj.bias * scale, self.k_proj.bias, self.v_proj.bias])
        qkv = F.linear(x, weight, bias)  # [B, L, 3E]
        q, k, v = rearrange(qkv, "b l (three h d) -> three b h l d", three=3, h=self.num_heads)
        return q, k, v

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        head_mask: torch.Tensor | None = None,
        timer=NULL_TIMER,
        keep: Keep | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [B, Lq, E], key/value [B, Lk, E] (default: query, i.e. self-attention).

        mask: bool broadcastable to [B, H, Lq, Lk] (or [B, Lq, Lk]), True = may attend.
        head_mask: [H] factors on each head's context before the merge (0 ablates a head).
        Returns (output [B, Lq, E], weights [B, H, Lq, Lk]).
        """
        key = query if key is None else key
        value = key if value is None else value
        scale = 1.0 / math.sqrt(self.head_dim) if scale is None else float(scale)
        fold = (
            key is query and value is query and keep is None
            and not (torch.is_grad_enabled() and query.requires_grad)
            and not any(p.requires_grad and torch.is_grad_enabled() for p in self.parameters())
        )
        with timer.stage("projections"):
            if fold:
                q, k, v = self._fused_qkv(query, scale)
            else:
                split = "b l (h d) -> b h l d"
                q = rearrange(self.q_proj(query), split, h=self.num_heads)
                k = rearrange(self.k_proj(key), split, h=self.num_heads)
                v = rearrange(self.v_proj(value), split, h=self.num_heads)
        if keep is not None:
            keep.update(q=q, k=k, v=v)
        dropout = self.dropout if self.training and self.dropout.p > 0 else None
        context, weights = attend_heads(
            q, k, v, _broadcast_mask(mask), scale=1.0 if fold else scale, dropout=dropout, timer=timer, keep=keep
        )
        with timer.stage("merge+output projection"):
            if head_mask is not None:
                context = context * head_mask.to(context.dtype)[:, None, None]  # [H] -> [H, 1, 1]
            output = self.out_proj(rearrange(context, "b h l d -> b l (h d)"))
        if keep is not None:
            keep["output"] = output
        return output, weights
