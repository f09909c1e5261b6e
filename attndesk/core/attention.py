"""Scaled dot-product attention and the single- and multi-head self-attention layers.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

A mask removes key positions *before* the softmax (True = may attend). A query row whose keys are
all masked gets all-zero weights and a zero output (never NaN, never a spread over padding).

Two exact paths compute the same numbers:
- the reference path (autograd, dropout, CUDA, stage timing, kept intermediates): whole-tensor
  matmul -> mask -> softmax -> matmul, in place on the score buffer where no gradient is needed;
- the CPU inference fast path (``_blocked_attention``): at long lengths the [B, H, L, L] passes
  dominate, so it walks one head and one block of query rows at a time, keeping that block's
  scores in cache from the GEMM through the softmax, which writes each weight exactly once,
  straight into the returned buffer; one GEMM per head then forms the weighted sum. A key
  padding mask becomes an additive 0/-inf bias inside the score GEMM (no pass over the scores
  at all); float32 GEMMs go through oneDNN, which uses AVX-512 where MKL's fp32 GEMM does not on
  AMD CPUs (about 2x here). Its many short parallel regions suffer when other processes hold the
  cores and libgomp spins 300,000 rounds before yielding; GOMP_SPINCOUNT=2000, set before torch
  loads, avoids that (benchmarks/bench_core.py sets it).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .checks import boolean, real_number, whole_number
from .errors import ConfigError
from .memory import require_free_memory
from .timing import NULL_TIMER, NullTimer

Keep = dict  # stage name -> tensor, filled when a caller asks for intermediates

# The fast path pays a few Python-level calls per head and block: below this many score entries
# ([..., Lq, Lk] in total) the whole-tensor reference path is quicker.
FAST_PATH_MIN_ELEMENTS = 1 << 19  # e.g. 8 heads x 256 x 256
# Bytes of scores per query block: big enough that the per-call overheads vanish, small enough that
# a block stays in the L2/L3 caches between its GEMM and its softmax (4 MiB measured best here).
BLOCK_BYTES = 4 << 20
_FAST_DTYPES = (torch.float32, torch.float64)

_onednn_op = None  # resolved lazily by _onednn(): the op, or False where it is missing or wrong


def _onednn():
    """oneDNN's linear (x @ w^T + b) for float32 CPU tensors, or None where unavailable.

    Probed once against torch.mm so a build whose op misbehaves falls back to MKL silently.
    """
    global _onednn_op
    if _onednn_op is None:
        _onednn_op = False
        try:
            op = torch.ops.mkldnn._linear_pointwise
            if torch.backends.mkldnn.is_available():
                gen = torch.Generator().manual_seed(0)
                a, b = torch.randn(37, 19, generator=gen), torch.randn(23, 19, generator=gen)
                bias = torch.zeros(23).masked_fill_(torch.arange(23) % 5 == 0, float("-inf"))
                got = op(a, b, bias, "none", [None], "")
                want = torch.addmm(bias, a, b.t())
                if got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                    _onednn_op = op
        except (AttributeError, RuntimeError):
            _onednn_op = False
    return _onednn_op or None


def _no_grad_needed(*tensors: torch.Tensor) -> bool:
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _linear(x: torch.Tensor, layer: nn.Linear, weight: torch.Tensor | None = None, bias=...) -> torch.Tensor:
    """layer(x), through oneDNN when nothing needs a gradient and x is float32 on the CPU."""
    weight = layer.weight if weight is None else weight
    bias = layer.bias if bias is ... else bias
    if x.dim() >= 2 and x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32:
        params = (x, weight) if bias is None else (x, weight, bias)
        op = _onednn() if _no_grad_needed(*params) else None
        if op is not None:
            return op(x, weight, bias, "none", [None], "")
    return F.linear(x, weight, bias)


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


def _fast_path_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether _blocked_attention computes exactly what the reference path would, and pays off."""
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2 or not _no_grad_needed(q, k, v):
        return False
    if any(t.device.type != "cpu" or t.dtype != q.dtype for t in (k, v)) or q.dtype not in _FAST_DTYPES:
        return False
    lq, lk = q.shape[-2], k.shape[-2]
    if lq == 0 or lk == 0 or v.shape[-2] != lk or q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        return False
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        if mask is not None:
            if mask.dtype != torch.bool or mask.device.type != "cpu" or mask.dim() < 2:
                return False
            # the mask may broadcast into the scores but must not grow them
            if torch.broadcast_shapes(mask.shape, (*lead, lq, lk)) != (*lead, lq, lk):
                return False
    except RuntimeError:
        return False
    return math.prod(lead) * lq * lk >= FAST_PATH_MIN_ELEMENTS


def _blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    *,
    block_bytes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference-only exact attention, one head and one block of query rows at a time.

    q [..., Lq, d], k [..., Lk, d], v [..., Lk, d_v] (CPU, float32/float64, no gradient);
    ``mask`` bool broadcastable to [..., Lq, Lk] (2-D or more), True = may attend; ``scale``
    multiplies Q K^T. Returns (context [..., Lq, d_v], weights [..., Lq, Lk]) equal to the
    reference path's. Callers check _fast_path_ok first.
    """
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_items = math.prod(lead)
    # [*lead, L, d] -> [N, L, d]: a view unless an input was broadcast
    qf = q.expand(*lead, lq, q.shape[-1]).reshape(n_items, lq, q.shape[-1])
    kf = k.expand(*lead, lk, k.shape[-1]).reshape(n_items, lk, k.shape[-1])
    vf = v.expand(*lead, lk, dv).reshape(n_items, lk, dv)
    weights = q.new_empty(n_items, lq, lk)
    context = q.new_empty(n_items, lq, dv)

    onednn = _onednn() if q.dtype == torch.float32 else None
    if onednn is not None:
        # oneDNN computes x @ w^T: K is already [Lk, d]; V is wanted as [d_v, Lk] (small copy)
        kf = kf.contiguous()
        vt = vf.transpose(1, 2).contiguous()  # [N, d_v, Lk]

    key_bias = row_empty = blocked = None
    if mask is not None:
        mq = mask.shape[-2]
        has_key = mask.any(dim=-1, keepdim=True)  # [..., mq, 1], small
        any_empty = not bool(has_key.all())
        row_empty = (~has_key).expand(*lead, mq, 1) if any_empty else None
        blocked = (~mask).expand(*lead, mq, lk)  # the only pass over the (small) mask
        # A key-only mask (same for every query row) becomes an additive 0/-inf bias on the score
        # GEMM; -inf * scale stays -inf only for a positive scale.
        key_only = mq == 1 and scale > 0 and math.isfinite(scale)
    inf = float("-inf")
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    rows = max(8, min(lq, block_bytes // max(1, lk * q.element_size())))

    for n, index in enumerate(itertools.product(*(range(s) for s in lead))):
        qn, kn = qf[n], kf[n]
        block_mask = block_empty = None
        if mask is not None:
            block_mask = blocked[index]  # [mq, Lk], True = masked
            block_empty = None if row_empty is None else row_empty[index]  # [mq, 1]
            if key_only:
                if block_empty is not None and bool(block_empty.all()):
                    weights[n].zero_()  # no key at all: zero weights, zero context
                    context[n].zero_()
                    continue
                key_bias = torch.zeros(lk, dtype=q.dtype).masked_fill_(block_mask[0], inf)
                block_mask = block_empty = None
        for start in range(0, lq, rows):
            stop = min(start + rows, lq)
            out = weights[n, start:stop]  # [rows, Lk], contiguous
            if onednn is not None:
                scores = onednn(qn[start:stop], kn, key_bias, "none", [None], "")
            elif key_bias is not None:
                scores = torch.addmm(key_bias, qn[start:stop], kn.t(), out=out)
            else:
                scores = torch.mm(qn[start:stop], kn.t(), out=out)
            if scale != 1.0:
                scores.mul_(scale)
            if block_mask is not None:
                scores.masked_fill_(block_mask if block_mask.shape[0] == 1 else block_mask[start:stop], inf)
            torch._softmax(scores, -1, False, out=out)  # in place when scores is out: row-wise safe
            if block_empty is not None:
                out.masked_fill_(block_empty if block_empty.shape[0] == 1 else block_empty[start:stop], 0.0)
        # One GEMM per head for the weighted sum: as fast as per block, and fewer parallel regions
        # (each one costs a thread hand-off, expensive when other processes share the cores).
        if onednn is not None:
            context[n] = onednn(weights[n], vt[n], None, "none", [None], "")
        else:
            torch.mm(weights[n], vf[n], out=context[n])
    return context.view(*lead, lq, dv), weights.view(*lead, lq, lk)


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
    fast = dropout is None and _fast_path_ok(query, key, value, mask)
    copies = 1 if fast else 2 if dropout is None else 4
    _check_matrix_size(_score_shape(query, key), query.element_size(), copies, "the attention weights", query.device)
    if fast:
        return _blocked_attention(query, key, value, mask, scale)
    scores = torch.matmul(query, key.transpose(-2, -1))  # [..., Lq, Lk]
    grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad)
    if scale != 1.0:
        scores = scores * scale if grad else scores.mul_(scale)
    weights = masked_softmax(scores, mask, inplace=not grad)
    weights = _apply_dropout(weights, dropout)
    return torch.matmul(weights, value), weights


def _group_queries(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """q [..., H, Lq, d] -> [..., KV, G, Lq, d]: query head h = kv * G + g reads K/V head kv = h // G."""
    heads = q.shape[-3]
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{kv_heads} key/value heads do not divide {heads} query heads")
    return rearrange(q, "... (kv g) l d -> ... kv g l d", kv=kv_heads)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    dropout: float | Callable[[torch.Tensor], torch.Tensor] | None = None,
    keep: Keep | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of H query heads over KV key/value heads, every variant in one pass.

    q [..., H, Lq, d], k [..., KV, Lk, d], v [..., KV, Lk, d_v] with KV dividing H: query head h
    reads K/V head h // (H // KV) (grouped-query; KV == 1 is multi-query; KV == H is plain
    multi-head). The scores go through, in this order:

        s = Q K^T * scale              (scale defaults to 1/sqrt(d))
        s = softcap * tanh(s / softcap) (soft-capping, when given)
        s = s + bias                   (an additive bias such as ALiBi, broadcast to [..., H, Lq, Lk])
        s = -inf where ``mask`` is False (bool, broadcast to [..., H, Lq, Lk], True = may attend)
        w = softmax(s) over keys       (a row with no key left gets zeros, never NaN)
        w = dropout(w)                 (a probability, or a module honouring its train/eval mode)

    Returns (context [..., H, Lq, d_v], weights [..., H, Lq, Lk]). ``keep`` (a dict) receives
    each stage under its ``Intermediates`` name: scores, scaled, capped, bias, masked, weights, context.
    Half-precision inputs take their softmax in float32, as transformers' eager attention does.
    """
    kv_heads = k.shape[-3]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    qg = _group_queries(q, kv_heads)  # [..., KV, G, Lq, d]
    shape = (*torch.broadcast_shapes(q.shape[:-3], k.shape[:-3]), q.shape[-3], q.shape[-2], k.shape[-2])
    copies = 4 + (softcap is not None) + (bias is not None) + (dropout is not None) * 2  # each stage is a new buffer
    _check_matrix_size(shape, max(q.element_size(), 4), copies, "the attention weights", q.device)
    scores = torch.matmul(qg, k.unsqueeze(-3).transpose(-2, -1))  # [..., KV, G, Lq, Lk]
    scores = rearrange(scores, "... kv g q k -> ... (kv g) q k")  # [..., H, Lq, Lk]
    if keep is not None:
        keep["scores"] = scores
    scores = scores * scale
    if keep is not None:
        keep["scaled"] = scores
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
        if keep is not None:
            keep["capped"] = scores
    if bias is not None:
        if keep is not None:
            keep["bias"] = torch.broadcast_to(bias, scores.shape)
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if keep is not None:
        keep["masked"] = scores
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else None)
    # a row whose keys were all removed is all -inf: softmax gives NaN, the row attends to nothing
    weights = weights.masked_fill(torch.isneginf(scores).all(dim=-1, keepdim=True), 0.0).to(q.dtype)
    weights = _apply_dropout(weights, dropout)
    if keep is not None:
        keep["weights"] = weights
    wg = rearrange(weights, "... (kv g) q k -> ... kv g q k", kv=kv_heads)
    context = torch.matmul(wg, v.unsqueeze(-3))  # [..., KV, G, Lq, d_v]
    context = rearrange(context, "... kv g q d -> ... (kv g) q d")  # [..., H, Lq, d_v]
    if keep is not None:
        keep["context"] = context
    return context, weights


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
    masked), weights, context. Untimed CPU inference without ``keep`` or dropout takes the
    blocked fast path (its stages interleave block by block, so a real timer gets the
    stage-by-stage reference path).
    """
    fast = dropout is None and keep is None and isinstance(timer, NullTimer) and _fast_path_ok(q, k, v, mask)
    # the fast path fills one weights buffer; the reference path holds scores and weights, the
    # dropout noise and its output, and the kept stages
    copies = 1 if fast else 2 + (dropout is not None) * 2 + (keep is not None) * 4
    _check_matrix_size(_score_shape(q, k), q.element_size(), copies, "the attention weights", q.device)
    if fast:
        return _blocked_attention(q, k, v, mask, scale)
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


def _check_layer_size(what: str, layers: int, embed_dim: int, width: int) -> None:
    """Refuse a layer whose Linear weights cannot fit in free memory, before torch allocates them."""
    item = torch.get_default_dtype().itemsize
    need = layers * (embed_dim * width + width) * item
    require_free_memory(need, f"the weights of {what} ({layers} Linear layers of {embed_dim:,} x {width:,})", "use smaller dims")


def _score_shape(q: torch.Tensor, k: torch.Tensor) -> tuple[int, ...]:
    """[..., Lq, Lk]: the shape of the scores of q [..., Lq, d] against k [..., Lk, d]."""
    return (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])


def _check_matrix_size(shape: tuple[int, ...], item: int, copies: int, what: str, device: torch.device) -> None:
    """The whole-matrix paths allocate ``copies`` [..., Lq, Lk] buffers at once: refuse one that
    cannot fit in free memory (the planner sends long runs through query blocks before this)."""
    need = math.prod(shape) * item * copies
    require_free_memory(need, f"{what} {list(shape)} ({copies} buffers)",
                        "shorten the sequence or use fewer heads (the toy pipeline plans long runs in blocks)",
                        device=str(device))


class SingleHeadAttention(nn.Module):
    """One head: three Linear layers (embed_dim -> hidden_dim), softmax(Q K^T / sqrt(hidden_dim)) V."""

    def __init__(self, embed_dim: int, hidden_dim: int, bias: bool = True):
        super().__init__()
        whole_number("embed_dim", embed_dim)
        whole_number("hidden_dim", hidden_dim)
        boolean("bias", bias)
        _check_layer_size(f"SingleHeadAttention({embed_dim:,}, {hidden_dim:,})", 3, embed_dim, hidden_dim)
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
            q, k, v = (rearrange(_linear(x, p), "b l d -> b 1 l d") for p in (self.q_proj, self.k_proj, self.v_proj))
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
        whole_number("embed_dim", embed_dim)
        whole_number("num_heads", num_heads)
        real_number("dropout", dropout, low=0.0, high=1.0, high_open=True)
        boolean("bias", bias)
        if embed_dim % num_heads:
            raise ConfigError(f"{num_heads} heads do not divide embed_dim {embed_dim}")
        _check_layer_size(f"MultiHeadAttention({embed_dim:,}, {num_heads:,})", 4, embed_dim, embed_dim)
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
        qkv = _linear(x, self.q_proj, weight, bias)  # [B, L, 3E]
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
                q = rearrange(_linear(query, self.q_proj), split, h=self.num_heads)
                k = rearrange(_linear(key, self.k_proj), split, h=self.num_heads)
                v = rearrange(_linear(value, self.v_proj), split, h=self.num_heads)
        if keep is not None:
            keep.update(q=q, k=k, v=v)
        dropout = self.dropout if self.training and self.dropout.p > 0 else None
        context, weights = attend_heads(
            q, k, v, _broadcast_mask(mask), scale=1.0 if fold else scale, dropout=dropout, timer=timer, keep=keep
        )
        with timer.stage("merge+output projection"):
            if head_mask is not None:
                context = context * head_mask.to(context.dtype)[:, None, None]  # [H] -> [H, 1, 1]
            output = _linear(rearrange(context, "b h l d -> b l (h d)"), self.out_proj)
        if keep is not None:
            keep["output"] = output
        return output, weights
