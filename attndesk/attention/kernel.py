"""Scaled dot-product attention and the single- and multi-head attention layers.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

A mask removes key positions *before* the softmax (True = may attend). A query row whose keys are
all masked gets all-zero weights and a zero output (never NaN, never a spread over padding).

Two exact paths compute the same numbers:
- the reference path, ``attend``: whole-tensor matmul -> scale -> soft-cap -> bias -> mask ->
  softmax -> dropout -> matmul, every stage keepable (autograd, dropout, CUDA, intermediates);
- the CPU inference fast path, ``fastpath.fast_attention``: query blocks in cache, fused key
  padding, oneDNN GEMMs, only the keys a window can see. Untimed or timed, it is the same path.

The layers add what real models add around that: grouped-query K/V heads (``kv_heads``), rotary
position embedding of Q and K (``position="rope"``), ALiBi (``position="alibi"``), a sliding
``window``, a ``softcap`` on the scores and per-head ``sinks`` in the softmax: the score
modifiers travel together as one ``scoring.Scoring``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attndesk.checks import boolean, real_number, whole_number
from attndesk.errors import ConfigError
from attndesk.system.free_memory import require_free_memory
from attndesk.system.timing import NULL_TIMER

from .alibi import alibi_slopes, slope_bias
from .fastpath import BLOCK_BYTES, FAST_DTYPES, DenseRule, block_rows_for, fast_attention, onednn
from .masks import window_mask
from .rope import apply_rope, rope_cos_sin
from .scoring import Scoring, Sinks, sink_share, softmax_rows

Keep = dict  # stage name -> tensor, filled when a caller asks for intermediates

# The fast path pays a few Python-level calls per head and block: below this many score entries
# ([..., Lq, Lk] in total) the whole-tensor reference path is quicker. It also needs each head's
# [Lq, Lk] to be large, from an eighth of this (256 x 256): a batch of many short sequences loops
# over every one of them (256 sequences x 4 heads of 40 x 40 took 10x the reference path's CPU,
# docs/benchmarks.md), so it stays on the reference path until its scores reach 32x this, where
# the reference path's few whole copies of them would cost more memory than the fast path's one.
FAST_PATH_MIN_ELEMENTS = 1 << 19  # e.g. 8 heads x 256 x 256
LAYER_POSITIONS = ("none", "rope", "alibi")  # what a layer itself does about positions


def _no_grad_needed(*tensors: torch.Tensor) -> bool:
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _linear(x: torch.Tensor, layer: nn.Linear, weight: torch.Tensor | None = None, bias=...) -> torch.Tensor:
    """layer(x), through oneDNN when nothing needs a gradient and x is float32 on the CPU."""
    weight = layer.weight if weight is None else weight
    bias = layer.bias if bias is ... else bias
    if x.dim() >= 2 and x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32:
        params = (x, weight) if bias is None else (x, weight, bias)
        op = onednn() if _no_grad_needed(*params) else None
        if op is not None:
            return op(x, weight, bias, "none", [None], "")
    return F.linear(x, weight, bias)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, *, inplace: bool = False) -> torch.Tensor:
    """softmax over the last axis after removing masked keys; rows with no key become all zero.

    ``inplace`` lets the masking reuse ``scores`` (callers pass it when no gradient is needed
    and nobody else holds the buffer). The same function as every path's (``softmax_rows``).
    """
    if mask is None:
        return softmax_rows(scores)
    empty = ~mask.any(dim=-1, keepdim=True)  # small: [..., Lq or 1, 1]
    return softmax_rows(scores, ~mask, empty if bool(empty.any()) else None, out=scores if inplace else None)


def _apply_dropout(weights: torch.Tensor, dropout) -> torch.Tensor:
    if dropout is None:
        return weights
    if callable(dropout):  # an nn.Dropout honours its module's train/eval mode
        return dropout(weights)
    return F.dropout(weights, p=float(dropout), training=True)


def _group_queries(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """q [..., H, Lq, d] -> [..., KV, G, Lq, d]: query head h = kv * G + g reads K/V head kv = h // G."""
    heads = q.shape[-3]
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{kv_heads} key/value heads do not divide {heads} query heads")
    return rearrange(q, "... (kv g) l d -> ... kv g l d", kv=kv_heads)


def _broadcasts_into(t: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether ``t`` broadcasts to ``target``'s shape without growing it (so an in-place op works)."""
    try:
        return torch.broadcast_shapes(t.shape, target.shape) == target.shape
    except RuntimeError:
        return False


def _rows_without_keys(mask: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor | None:
    """[..., Lq, 1] True where the mask and a -inf bias leave a query no key; None when none is left empty."""
    if mask is None and bias is None:
        return None
    allowed = mask
    if bias is not None:
        finite = ~torch.isneginf(bias)
        allowed = finite if allowed is None else allowed & finite
    assert allowed is not None  # a mask or a bias, checked above
    empty = ~allowed.any(dim=-1, keepdim=True)
    return empty if bool(empty.any()) else None


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    scoring: Scoring | None = None,
    dropout: float | Callable[[torch.Tensor], torch.Tensor] | None = None,
    keep: Keep | None = None,
    timer=NULL_TIMER,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of H query heads over KV key/value heads, every variant in one pass (the reference).

    q [..., H, Lq, d], k [..., KV, Lk, d], v [..., KV, Lk, d_v] with KV dividing H: query head h
    reads K/V head h // (H // KV) (grouped-query; KV == 1 is multi-query; KV == H is plain
    multi-head). The scores go through, in this order:

        s = Q K^T * scale              (scale defaults to 1/sqrt(d))
        s = softcap * tanh(s / softcap) (soft-capping, when given)
        s = s + bias                   (an additive bias such as ALiBi, broadcast to [..., H, Lq, Lk])
        s = -inf where ``mask`` is False (bool, broadcast to [..., H, Lq, Lk], True = may attend)
        w = softmax(s) over keys       (a row with no key left gets zeros, never NaN)
        w = dropout(w)                 (a probability, or a module honouring its train/eval mode)

    ``scoring`` gives the modifiers as one value instead of ``scale`` / ``softcap`` (not both):
    its ALiBi ``slopes`` add to ``bias``, its ``window`` narrows ``mask`` and its ``sinks`` [H]
    join each head's softmax denominator (kept: the sink's share ``sink`` [..., H, Lq, 1] and
    its logit ``sink_logit`` [..., H, 1, 1]).

    Returns (context [..., H, Lq, d_v], weights [..., H, Lq, Lk]). ``keep`` (a dict) receives each
    stage under its ``Intermediates`` name; ``timer`` times "attention" and "weighted sum". Half
    precision takes its softmax in float32, as transformers' eager attention does.
    """
    kv_heads = k.shape[-3]
    scoring = _scoring_at_door(q, scale, softcap, scoring)
    scale, softcap = scoring.scale, scoring.softcap
    bias, mask, sink = _modifiers(q, k, scoring, bias, mask)
    _check_stages_fit(q, k, softcap is not None, bias is not None, dropout is not None)
    with timer.stage("attention"):
        scores = _raw_scores(q, k, kv_heads)  # [..., H, Lq, Lk]
        _keep(keep, "scores", scores)
        # in place on the fresh score buffer unless a kept stage or a gradient needs the earlier values
        fresh = keep is None and _no_grad_needed(q, k)
        scores = scores.mul_(scale) if fresh else scores * scale
        _keep(keep, "scaled", scores)
        scores = _capped(scores, softcap, keep)
        scores = _bias_and_mask(scores, bias, mask, fresh, keep)
        # a row whose keys were all removed attends to nothing; found from the mask and bias
        # (small, or once per call), not by another pass over the scores
        weights = softmax_rows(scores, empty=_rows_without_keys(mask, bias), sink=sink).to(q.dtype)
        _keep_sink(keep, scores, sink)
        weights = _apply_dropout(weights, dropout)
        _keep(keep, "weights", weights)
    with timer.stage("weighted sum"):
        context = _weighted_sum(weights, v, kv_heads)  # [..., H, Lq, d_v]
        _keep(keep, "context", context)
    return context, weights


def _check_stages_fit(q: torch.Tensor, k: torch.Tensor, capped: bool, biased: bool, dropped: bool) -> None:
    """Refuse a run whose score buffers, one per stage, would not fit in free memory."""
    copies = 4 + capped + biased + dropped * 2  # each stage is a new buffer
    _check_matrix_size(
        _score_shape(q, k, q.shape[-3]), max(q.element_size(), 4), copies, "the attention weights", q.device
    )


def _capped(scores: torch.Tensor, softcap: float | None, keep: Keep | None) -> torch.Tensor:
    """``softcap * tanh(scores / softcap)`` when soft-capping is on (kept as "capped")."""
    if softcap is None:
        return scores
    scores = torch.tanh(scores / softcap) * softcap
    _keep(keep, "capped", scores)
    return scores


def _keep_sink(keep: Keep | None, scores: torch.Tensor, sink: torch.Tensor | None) -> None:
    """The sink's share of each row and its logit, for the step-through."""
    if keep is not None and sink is not None:
        keep["sink"] = sink_share(scores, sink)
        keep["sink_logit"] = torch.broadcast_to(sink.detach(), (*scores.shape[:-2], 1, 1))


def _weighted_sum(weights: torch.Tensor, v: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """The weights times each query head's K/V group's values, [..., H, Lq, d_v]."""
    wg = rearrange(weights, "... (kv g) q k -> ... kv g q k", kv=kv_heads)
    context = torch.matmul(wg, v.unsqueeze(-3))  # [..., KV, G, Lq, d_v]
    return rearrange(context, "... kv g q d -> ... (kv g) q d")


def _modifiers(
    q: torch.Tensor, k: torch.Tensor, scoring: Scoring, bias: torch.Tensor | None, mask: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(bias, mask, sink) with ``scoring``'s own modifiers in: its ALiBi slopes added to the bias,
    its window narrowing the mask, its per-head sinks as a column in the softmax's dtype."""
    lq, lk = q.shape[-2], k.shape[-2]
    if scoring.slopes is not None:
        alibi = slope_bias(scoring.slopes, lq, lk, dtype=q.dtype, device=q.device)
        bias = alibi if bias is None else bias + alibi
    if scoring.window is not None:
        band = window_mask(lq, lk, scoring.window, device=q.device)
        mask = band if mask is None else mask & band
    softmax_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    return bias, mask, scoring.sink_column(q.shape[-3], softmax_dtype, q.device)


def _raw_scores(q: torch.Tensor, k: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """Q K^T of every query head against its K/V group's keys, [..., H, Lq, Lk]."""
    qg = _group_queries(q, kv_heads)  # [..., KV, G, Lq, d]
    scores = torch.matmul(qg, k.unsqueeze(-3).transpose(-2, -1))  # [..., KV, G, Lq, Lk]
    return rearrange(scores, "... kv g q k -> ... (kv g) q k")


def _scoring_at_door(q: torch.Tensor, scale: float | None, softcap: float | None, scoring: Scoring | None) -> Scoring:
    """The one Scoring of ``attend``'s keywords (``scale`` None: 1/sqrt(d)), or ``scoring`` itself."""
    if scoring is None:
        return Scoring.of(q.shape[-1], scale=scale, softcap=softcap)
    if scale is not None or softcap is not None:
        raise ValueError("give the score modifiers either as scoring= or as scale= / softcap=, not both")
    return scoring


def _bias_and_mask(
    scores: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor | None, fresh: bool, keep: Keep | None
) -> torch.Tensor:
    """scores + bias, then -inf where ``mask`` is False; in place when ``fresh`` allows it."""
    if bias is not None:
        _keep(keep, "bias", torch.broadcast_to(bias, scores.shape))
        in_place = fresh and _no_grad_needed(bias) and _broadcasts_into(bias, scores)
        scores = scores.add_(bias) if in_place else scores + bias
    if mask is not None:
        in_place = fresh and _broadcasts_into(mask, scores)
        scores = scores.masked_fill_(~mask, float("-inf")) if in_place else scores.masked_fill(~mask, float("-inf"))
    _keep(keep, "masked", scores)
    return scores


def _keep(keep: Keep | None, name: str, tensor: torch.Tensor) -> None:
    if keep is not None:
        keep[name] = tensor


# --- the generic entry points: any leading axes, dense masks ----------------------------------


def _heads_of(q: torch.Tensor, k: torch.Tensor) -> tuple[int, int] | None:
    """(H, KV) when k's head axis (-3) groups q's (KV divides H) or q has one head to broadcast."""
    hq = q.shape[-3] if q.dim() >= 3 else 1
    hk = k.shape[-3] if k.dim() >= 3 else 1
    if hq % hk == 0:
        return hq, hk
    if hq == 1:
        return hk, hk
    return None


def _fast_path_ok(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, bias: torch.Tensor | None = None
) -> bool:
    """Whether the fast path computes exactly what the reference path would, and pays off."""
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2 or not _no_grad_needed(q, k, v):
        return False
    if any(t.device.type != "cpu" or t.dtype != q.dtype for t in (k, v)) or q.dtype not in FAST_DTYPES:
        return False
    lq, lk = q.shape[-2], k.shape[-2]
    if lq == 0 or lk == 0 or v.shape[-2] != lk or q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        return False
    heads = _heads_of(q, k)
    if heads is None or (v.shape[-3] if v.dim() >= 3 else 1) != (k.shape[-3] if k.dim() >= 3 else 1):
        return False
    try:
        lead = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
        full = (*lead, heads[0], lq, lk)
        for extra in (mask, bias):
            if extra is None:
                continue
            if extra is mask and (mask.dtype != torch.bool or mask.dim() < 2):
                return False
            if extra is bias and (bias.dtype != q.dtype or bias.dim() < 2):
                return False
            # it may broadcast into the scores but must not grow them
            if extra.device.type != "cpu" or torch.broadcast_shapes(extra.shape, full) != full:
                return False
    except RuntimeError:
        return False
    total = math.prod(lead) * heads[0] * lq * lk
    if total < FAST_PATH_MIN_ELEMENTS:
        return False
    return lq * lk >= FAST_PATH_MIN_ELEMENTS // 8 or total >= 32 * FAST_PATH_MIN_ELEMENTS


def _blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scoring: Scoring | float,
    *,
    bias: torch.Tensor | None = None,
    block_bytes: int | None = None,
    timer=NULL_TIMER,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fast path for dense inputs: q [..., Lq, d], k [..., Lk, d], v [..., Lk, d_v] (CPU,
    float32/float64, no gradient) whose leading axes broadcast, except that k/v's head axis (-3)
    may hold KV heads grouping q's H (head h reads h // (H // KV)). ``mask`` bool and ``bias``
    broadcastable to [..., H, Lq, Lk]; ``scoring`` (or just a scale): a ``window`` W masks
    |i - j| >= W too, and each block visits only the keys in its band; ``slopes`` [H] add ALiBi;
    ``sinks`` [H] join the softmax. Returns (context, weights) equal to the reference path's.
    Callers check _fast_path_ok first.
    """
    squeeze = q.dim() == 2
    if squeeze:
        q, k, v = q[None], k[None], v[None]
    shapes = _heads_of(q, k)
    assert shapes is not None, "callers check _fast_path_ok first"
    heads, kv_heads = shapes
    lq, lk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    lead = tuple(torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]))
    items = math.prod(lead)
    # [*lead, H, L, d] -> [N, H, L, d]: a view unless an input was broadcast
    qf = q.expand(*lead, heads, lq, d).reshape(items, heads, lq, d)
    kf = k.expand(*lead, kv_heads, lk, d).reshape(items, kv_heads, lk, d)
    vf = v.expand(*lead, kv_heads, lk, dv).reshape(items, kv_heads, lk, dv)
    scoring = scoring if isinstance(scoring, Scoring) else Scoring(scale=float(scoring))
    window = scoring.window
    rule = DenseRule(
        lead,
        lq,
        lk,
        mask=mask,
        bias=bias,
        window=window,
        alibi=scoring.slopes is not None,
        fuse_keys=scoring.fusable,
        dtype=q.dtype,
    )
    band = None if window is None else 2 * window - 1
    rows = block_rows_for(lq, lk, q.element_size(), BLOCK_BYTES if block_bytes is None else block_bytes, band)
    weights = q.new_empty(items, heads, lq, lk)
    context = fast_attention(qf, kf, vf, rule, scoring, weights=weights, block_rows=rows, timer=timer)
    context, weights = context.view(*lead, heads, lq, dv), weights.view(*lead, heads, lq, lk)
    return (context[0], weights[0]) if squeeze else (context, weights)


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
    if dropout is None and _fast_path_ok(query, key, value, mask):
        _check_matrix_size(_score_shape(query, key), query.element_size(), 1, "the attention weights", query.device)
        return _blocked_attention(query, key, value, mask, scale)
    # the reference on one head axis: [..., Lq, d] -> [..., 1, Lq, d] (every leading axis broadcast)
    q, k, v = query.unsqueeze(-3), key.unsqueeze(-3), value.unsqueeze(-3)
    lead = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
    q, k, v = (t.expand(*lead, *t.shape[-3:]) for t in (q, k, v))
    context, weights = attend(q, k, v, mask=None if mask is None else mask.unsqueeze(-3), scale=scale, dropout=dropout)
    return context.squeeze(-3), weights.squeeze(-3)


def attention_core(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scoring: Scoring,
    *,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
    keep: Keep | None = None,
    timer=NULL_TIMER,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, H, Lq, d], k/v [B, KV, Lk, d] -> (context, weights): the fast path for inference on
    the CPU, the reference ``attend`` for gradients (a learned sink too), dropout, intermediates,
    other devices and small inputs. ``mask`` bool broadcastable to [B, H, Lq, Lk]; ``scoring``
    carries every score modifier."""
    heads = q.shape[-3]
    if dropout is None and keep is None and not scoring.learned and _fast_path_ok(q, k, v, mask):
        # the fast path fills one weights buffer (the reference path checks its own copies)
        _check_matrix_size(_score_shape(q, k, heads), q.element_size(), 1, "the attention weights", q.device)
        return _blocked_attention(q, k, v, mask, scoring, timer=timer)
    return attend(q, k, v, mask=mask, scoring=scoring, dropout=dropout, keep=keep, timer=timer)


def _check_layer_size(what: str, layers: int, embed_dim: int, width: int) -> None:
    """Refuse a layer whose Linear weights cannot fit in free memory, before torch allocates them."""
    item = torch.get_default_dtype().itemsize
    need = layers * (embed_dim * width + width) * item
    require_free_memory(
        need, f"the weights of {what} ({layers} Linear layers of {embed_dim:,} x {width:,})", "use smaller dims"
    )


def _score_shape(q: torch.Tensor, k: torch.Tensor, heads: int | None = None) -> tuple[int, ...]:
    """[..., Lq, Lk]: the shape of the scores of q [..., Lq, d] against k [..., Lk, d] (with
    ``heads`` query heads over grouped K/V heads: [..., H, Lq, Lk])."""
    if heads is not None:
        return (*torch.broadcast_shapes(q.shape[:-3], k.shape[:-3]), heads, q.shape[-2], k.shape[-2])
    return (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])


def _check_matrix_size(shape: tuple[int, ...], item: int, copies: int, what: str, device: torch.device) -> None:
    """The whole-matrix paths allocate ``copies`` [..., Lq, Lk] buffers at once: refuse one that
    cannot fit in free memory (the planner sends long runs through query blocks before this)."""
    need = math.prod(shape) * item * copies
    require_free_memory(
        need,
        f"{what} {list(shape)} ({copies} buffers)",
        "shorten the sequence or use fewer heads (the toy pipeline plans long runs in blocks)",
        device=str(device),
    )


def _broadcast_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Accept [Lq, Lk], [B, Lq, Lk] or [B, 1|H, Lq, Lk] masks: make a 3-D one broadcast over heads."""
    if mask is not None and mask.dim() == 3:
        return mask[:, None]  # [B, Lq, Lk] -> [B, 1, Lq, Lk]
    return mask


# --- the layers ---------------------------------------------------------------------------------


@dataclass
class Projections:
    """A layer's projected heads: q [B, H, Lq, d] and k/v [B, KV, Lk, d], rotated under RoPE
    (``q_raw``/``k_raw`` before the rotation, else None); ``scale`` is what is still to apply to
    Q K^T (1.0 when the projection folded it into Q)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scale: float
    q_raw: torch.Tensor | None = None
    k_raw: torch.Tensor | None = None


class _AttentionLayer(nn.Module):
    """What both layers share: project (+ RoPE), attend, finish. Subclasses define the Linear
    layers, ``heads``/``kv_heads``/``head_dim`` and ``finish``."""

    heads: int
    kv_heads: int
    head_dim: int
    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    dropout: nn.Dropout | None  # set by each layer (None: no dropout)

    def finish(self, context: torch.Tensor, head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """context -> the layer's output (each layer merges its heads its own way)."""
        raise NotImplementedError

    def _fused_weights(self, scale: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[Wq * scale; Wk; Wv] and the matching bias: one GEMM for Q, K and V."""
        weight = torch.cat([self.q_proj.weight * scale, self.k_proj.weight, self.v_proj.weight])
        bias = None
        if self.q_proj.bias is not None:
            bias = torch.cat([self.q_proj.bias * scale, self.k_proj.bias, self.v_proj.bias])
        return weight, bias

    def _can_fold(self, query, key, value) -> bool:
        return (
            key is query
            and value is query
            and _no_grad_needed(query)
            and not any(p.requires_grad and torch.is_grad_enabled() for p in self.parameters())
        )

    def project(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        scale: float,
        rope: bool = False,
        fold: bool = True,
    ) -> Projections:
        """Q [B, H, Lq, d], K/V [B, KV, Lk, d]; self-attention inference (``fold`` and nothing
        needing a gradient) takes one GEMM with the scale folded into Q. RoPE rotates Q and K by
        their own positions 0..L-1, per head."""
        split = "b l (h d) -> b h l d"
        if fold and self._can_fold(query, key, value):
            weight, bias = self._fused_weights(scale)
            qkv = _linear(query, self.q_proj, weight, bias)  # [B, L, (H + 2 KV) d]
            width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
            q, k, v = qkv.split([width, kv_width, kv_width], dim=-1)
            scale = 1.0
        else:
            q, k, v = _linear(query, self.q_proj), _linear(key, self.k_proj), _linear(value, self.v_proj)
        q = rearrange(q, split, h=self.heads)
        k, v = (rearrange(t, split, h=self.kv_heads) for t in (k, v))
        if not rope:
            return Projections(q, k, v, scale)
        cos_q, sin_q = rope_cos_sin(q.shape[-2], self.head_dim, dtype=q.dtype, device=q.device)
        cos_k, sin_k = rope_cos_sin(k.shape[-2], self.head_dim, dtype=k.dtype, device=k.device)
        return Projections(apply_rope(q, cos_q, sin_q), apply_rope(k, cos_k, sin_k), v, scale, q_raw=q, k_raw=k)

    def _forward(
        self,
        query,
        key,
        value,
        mask,
        *,
        scale,
        softcap,
        position,
        window,
        sinks,
        head_mask,
        timer,
        keep,
        query_mask=None,
    ):
        if position not in LAYER_POSITIONS:
            raise ValueError(f"a layer's position is one of {', '.join(LAYER_POSITIONS)}, got {position!r}")
        scale = 1.0 / math.sqrt(self.head_dim) if scale is None else float(scale)
        slopes = alibi_slopes(self.heads) if position == "alibi" else None
        with timer.stage("projections"):
            proj = self.project(query, key, value, scale=scale, rope=position == "rope", fold=keep is None)
        if query_mask is not None:  # [H, Lq] -> [H, Lq, 1]: scales each head's query rows
            proj.q = proj.q * query_mask.to(proj.q.dtype)[:, :, None]
        if keep is not None:
            keep.update(q=proj.q, k=proj.k, v=proj.v)
            if proj.q_raw is not None:
                keep.update(q_raw=proj.q_raw, k_raw=proj.k_raw)
        dropout = self.dropout if self.dropout is not None and self.training and self.dropout.p > 0 else None
        scoring = Scoring.of(
            self.head_dim, scale=proj.scale, softcap=softcap, slopes=slopes, window=window, sinks=sinks
        )
        context, weights = attention_core(
            proj.q,
            proj.k,
            proj.v,
            _broadcast_mask(mask),
            scoring,
            dropout=dropout,
            keep=keep,
            timer=timer,
        )
        with timer.stage("output projection"):
            output = self.finish(context, head_mask)
        if keep is not None:
            keep["output"] = output
        return output, weights


class SingleHeadAttention(_AttentionLayer):
    """One head: three Linear layers (embed_dim -> hidden_dim), softmax(Q K^T / sqrt(hidden_dim)) V."""

    def __init__(self, embed_dim: int, hidden_dim: int, bias: bool = True):
        super().__init__()
        whole_number("embed_dim", embed_dim)
        whole_number("hidden_dim", hidden_dim)
        boolean("bias", bias)
        _check_layer_size(f"SingleHeadAttention({embed_dim:,}, {hidden_dim:,})", 3, embed_dim, hidden_dim)
        self.embed_dim, self.hidden_dim = embed_dim, hidden_dim
        self.heads, self.kv_heads, self.head_dim = 1, 1, hidden_dim
        self.q_proj = nn.Linear(embed_dim, hidden_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, hidden_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, hidden_dim, bias=bias)
        self.dropout = None

    def finish(self, context: torch.Tensor, head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """context [B, 1, L, hidden] -> output [B, L, hidden]: one head has nothing to merge."""
        if head_mask is not None:
            context = context * head_mask.to(context.dtype)[:, None, None]
        return rearrange(context, "b 1 l d -> b l d")

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        softcap: float | None = None,
        position: str = "none",
        window: int | None = None,
        sinks: Sinks | None = None,
        timer=NULL_TIMER,
        keep: Keep | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, embed_dim] -> (output [B, L, hidden_dim], weights [B, L, L])."""
        output, weights = self._forward(
            x,
            x,
            x,
            mask,
            scale=scale,
            softcap=softcap,
            position=position,
            window=window,
            sinks=sinks,
            head_mask=None,
            timer=timer,
            keep=keep,
        )
        return output, rearrange(weights, "b 1 q k -> b q k")


class MultiHeadAttention(_AttentionLayer):
    """Multi-head attention with four Linear layers (q_proj, k_proj, v_proj, out_proj).

    Project, split the last axis into heads (``b l (h d) -> b h l d``), attend per head with
    d = E / H, merge back (``b h l d -> b l (h d)``), then the output projection. With
    ``kv_heads`` KV < H the K and V projections shrink to KV heads (E -> KV d) that groups of
    H / KV query heads share (grouped-query attention; KV = 1 is multi-query).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, *, kv_heads: int | None = None
    ):
        super().__init__()
        whole_number("embed_dim", embed_dim)
        whole_number("num_heads", num_heads)
        kv_heads = num_heads if kv_heads is None else whole_number("kv_heads", kv_heads)
        real_number("dropout", dropout, low=0.0, high=1.0, high_open=True)
        boolean("bias", bias)
        if embed_dim % num_heads:
            raise ConfigError(f"{num_heads} heads do not divide embed_dim {embed_dim}", field="num_heads")
        if num_heads % kv_heads:
            raise ConfigError(f"{kv_heads} key/value heads do not divide {num_heads} query heads", field="kv_heads")
        _check_layer_size(f"MultiHeadAttention({embed_dim:,}, {num_heads:,})", 4, embed_dim, embed_dim)
        self.embed_dim, self.num_heads, self.kv_heads = embed_dim, num_heads, kv_heads
        self.heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def finish(self, context: torch.Tensor, head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """context [B, H, L, d] -> output [B, L, E]: ``head_mask`` [H] scales each head (0 ablates
        it), then the merge and the output projection."""
        if head_mask is not None:
            context = context * head_mask.to(context.dtype)[:, None, None]  # [H] -> [H, 1, 1]
        return _linear(rearrange(context, "b h l d -> b l (h d)"), self.out_proj)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        softcap: float | None = None,
        position: str = "none",
        window: int | None = None,
        sinks: Sinks | None = None,
        head_mask: torch.Tensor | None = None,
        query_mask: torch.Tensor | None = None,
        timer=NULL_TIMER,
        keep: Keep | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [B, Lq, E], key/value [B, Lk, E] (default: query, i.e. self-attention).

        mask: bool broadcastable to [B, H, Lq, Lk] (or [B, Lq, Lk]), True = may attend.
        ``position`` "rope" rotates Q and K, "alibi" adds -slope_h |i - j| to the scores;
        ``window`` W keeps |i - j| < W; ``softcap`` C caps the scores at C tanh(s / C);
        ``sinks`` [H] (floats, or a tensor such as a learned parameter) join the softmax.
        head_mask: [H] factors on each head's context before the merge (0 ablates a head).
        query_mask: [H, Lq] factors on each head's query rows (0 zeroes a row's query, so the head
        scores its visible keys by the positional terms alone: uniform weights without ALiBi).
        Returns (output [B, Lq, E], weights [B, H, Lq, Lk]).
        """
        key = query if key is None else key
        value = key if value is None else value
        return self._forward(
            query,
            key,
            value,
            mask,
            scale=scale,
            softcap=softcap,
            position=position,
            window=window,
            sinks=sinks,
            head_mask=head_mask,
            timer=timer,
            keep=keep,
            query_mask=query_mask,
        )


__all__ = [
    "BLOCK_BYTES",
    "FAST_PATH_MIN_ELEMENTS",
    "MultiHeadAttention",
    "Projections",
    "SingleHeadAttention",
    "attend",
    "attention_core",
    "masked_softmax",
    "scaled_dot_product_attention",
]
