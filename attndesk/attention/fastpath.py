"""The fast CPU path: exact attention one query block at a time, for every variant.

At long lengths the [H, Lq, Lk] passes dominate, so ``fast_attention`` walks one block of query
rows and one head at a time, keeping that block's scores in cache from the GEMM through the
softmax, which writes each weight exactly once (into the returned weights, or into a reused
buffer whose rows a sink folds into an overview). A key padding mask becomes an additive 0/-inf
bias inside the score GEMM (no pass over the scores at all); other masks are additive 0/-inf
biases too (a boolean masked_fill costs ~25x an add on the CPU), a causal or window band made
once per block shape. Float32 GEMMs go through oneDNN, which uses AVX-512 where MKL's fp32 GEMM
does not on AMD CPUs (about 2x here).

Grouped-query heads read their group's K/V; a sliding window or a causal mask restricts each
block to the keys it can see (O(L W) work for a window W, and the weights outside the band are
written as zeros, never computed); ALiBi's -slope |i - j| and soft-capping are applied on the
block, and a head's sink logit joins its rows' softmax denominators. The numbers equal ``attention.attend`` (the reference) to rounding; tests check both.

Its phases are timed as it runs (stages "attention" and "weighted sum", the sink's work as
"overview"), so timing a run does not change the algorithm. Many short parallel regions suffer
when other processes hold the cores and libgomp spins 300,000 rounds before yielding;
GOMP_SPINCOUNT=2000, set before torch loads, avoids that (the entry points set it:
``attndesk.set_torch_environment``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch

from attndesk.jobs import JobContext
from attndesk.system.timing import NULL_TIMER

from .alibi import distances
from .masks import BandMasks, MaskSpec
from .scoring import Scoring, softmax_rows

# Bytes of scores per query block: big enough that the per-call overheads vanish, small enough that
# a block stays in the L2/L3 caches between its GEMM and its softmax (docs/benchmarks.md, long sequences).
BLOCK_BYTES = 4 << 20
FAST_DTYPES = (torch.float32, torch.float64)
_NEG_INF = float("-inf")

_onednn_op: Callable[..., torch.Tensor] | Literal[False] | None = (
    None  # resolved lazily by onednn(): the op, or False where it is missing or wrong
)


def onednn():
    """oneDNN's linear (x @ w^T + b) for float32 CPU tensors, or None where unavailable.

    Probed once against torch.addmm so a build whose op misbehaves falls back to MKL silently.
    """
    global _onednn_op  # noqa: PLW0603 - probed once per process
    if _onednn_op is None:
        _onednn_op = False
        try:
            op = torch.ops.mkldnn._linear_pointwise
            if torch.backends.mkldnn.is_available():
                gen = torch.Generator().manual_seed(0)
                a, b = torch.randn(37, 19, generator=gen), torch.randn(23, 19, generator=gen)
                bias = torch.zeros(23).masked_fill_(torch.arange(23) % 5 == 0, _NEG_INF)
                got = op(a, b, bias, "none", [None], "")
                want = torch.addmm(bias, a, b.t())
                if got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                    _onednn_op = op
        except (AttributeError, RuntimeError):
            _onednn_op = False
    return _onednn_op or None


@dataclass
class Block:
    """What a block of queries q0..q1-1 over keys k0..k1-1 needs besides Q and K.

    Masks are additive score biases (0 / -inf: adding is far faster than a boolean fill):
    ``key_bias`` [w] fused into the score GEMM, or ``key_row`` [w] added after it (when a
    soft-cap would turn a fused -inf into -C); ``mask_bias`` [b|1, w] (or [H, b|1, w] per head);
    ``empty`` [b|1, 1] rows with no key (zeroed after the softmax); ``dist`` [b, w] |i - j| for
    ALiBi; ``bias`` [b|1, w] (or [H, ...]) an additive score bias.
    """

    q0: int
    q1: int
    k0: int
    k1: int
    mask_bias: torch.Tensor | None = None
    key_bias: torch.Tensor | None = None
    key_row: torch.Tensor | None = None
    empty: torch.Tensor | None = None
    dist: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    def head(self, t: torch.Tensor | None, h: int) -> torch.Tensor | None:
        return t[h] if t is not None and t.dim() == 3 else t


class _Distances:
    """|i - j| blocks for ALiBi, cached per block shape and offset (interior blocks share one)."""

    def __init__(self, dtype: torch.dtype, device: torch.device | str | None = None) -> None:
        # half precision keeps exact distances (bfloat16 rounds them above 256); see block_weights
        self.dtype = torch.float64 if dtype in (torch.float16, torch.bfloat16) else dtype
        self.device = device
        self._cache: dict[tuple[int, int, int], torch.Tensor] = {}

    def __call__(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        key = (q0 - k0, q1 - q0, k1 - k0)
        dist = self._cache.get(key)
        if dist is None:
            if len(self._cache) > 64:
                self._cache.clear()
            dist = self._cache[key] = distances(q0, q1, k0, k1, dtype=self.dtype, device=self.device)
        return dist


def _as_bias(blocked: torch.Tensor, dtype) -> torch.Tensor:
    """bool (True = masked) -> 0 / -inf, once per block (shared by the heads)."""
    return torch.zeros(blocked.shape, dtype=dtype, device=blocked.device).masked_fill_(blocked, _NEG_INF)


class BlockRule(Protocol):
    """Where each block's mask and bias come from (a run's MaskSpec, or dense tensors)."""

    lq: int
    lk: int

    def key_range(self, q0: int, q1: int) -> tuple[int, int]: ...

    def block(self, n: int, q0: int, q1: int) -> Block: ...


class SpecRule:
    """Blocks of a ``MaskSpec`` (one sequence): the padding mask is a key bias, fused into the
    GEMM when that is exact (no soft-cap to turn -inf into -C, a positive scale); a causal or
    window band is a cached additive bias per block shape."""

    def __init__(
        self, spec: MaskSpec, *, alibi: bool = False, fuse_keys: bool = True, align: int = 1, dtype=torch.float32
    ):
        self.spec, self.lq, self.lk, self.align = spec, spec.lq, spec.lk, align
        self.alibi, self.dtype, self.fuse_keys = alibi, dtype, fuse_keys
        self.distances = _Distances(dtype, spec.device)
        self.key_bias = None
        if spec.key_valid is not None:
            self.key_bias = torch.zeros(spec.lk, dtype=dtype, device=spec.device).masked_fill_(
                ~spec.key_valid, _NEG_INF
            )

    def key_range(self, q0: int, q1: int) -> tuple[int, int]:
        return self.spec.key_range(q0, q1, self.align)

    def block(self, n: int, q0: int, q1: int) -> Block:
        k0, k1 = self.key_range(q0, q1)
        blk = Block(
            q0,
            q1,
            k0,
            k1,
            empty=self.spec.empty_rows(q0, q1),
            mask_bias=self.spec.band_masks.bias(q0, q1, k0, k1, self.dtype),
        )
        if self.key_bias is not None:
            if self.fuse_keys:
                blk.key_bias = self.key_bias[k0:k1]
            else:
                blk.key_row = self.key_bias[k0:k1]
        if self.alibi:
            blk.dist = self.distances(q0, q1, k0, k1)
        return blk


class DenseRule:
    """Blocks of dense tensors: ``mask`` bool and ``bias`` float, each broadcastable to
    [*lead, H, Lq, Lk] (broadcast views, never copied); item n is lead index n (row-major).
    A ``window`` W also masks |i - j| >= W, made per block (the band is never a full matrix)."""

    def __init__(
        self,
        lead: tuple[int, ...],
        lq: int,
        lk: int,
        *,
        mask=None,
        bias=None,
        window: int | None = None,
        alibi: bool = False,
        fuse_keys: bool = True,
        dtype=torch.float32,
    ):
        self.lead, self.lq, self.lk, self.window, self.alibi, self.dtype = lead, lq, lk, window, alibi, dtype
        self.bands = BandMasks(window=window)
        self.distances = _Distances(dtype)
        self.fuse_keys = fuse_keys
        self.blocked = self.row_empty = self.bias = None
        self.key_only = False
        if mask is not None:
            mask = _at_least_3d(mask)
            has_key = mask.any(dim=-1, keepdim=True)  # [..., Hm, mq, 1], small
            if not bool(has_key.all()):
                self.row_empty = (~has_key).expand(*lead, *has_key.shape[-3:])
            self.blocked = (~mask).expand(*lead, *mask.shape[-3:-1], lk)
            self.key_only = mask.shape[-2] == 1
        if bias is not None:
            bias = _at_least_3d(bias)
            self.bias = bias.expand(*lead, *bias.shape[-3:-1], lk)

    def key_range(self, q0: int, q1: int) -> tuple[int, int]:
        if self.window is None:
            return 0, self.lk
        k1 = min(self.lk, q1 - 1 + self.window)
        return min(k1, max(0, q0 - self.window + 1)), k1

    def block(self, n: int, q0: int, q1: int) -> Block:
        k0, k1 = self.key_range(q0, q1)
        index = tuple(int(i) for i in np.unravel_index(n, self.lead)) if self.lead else ()
        blk = Block(q0, q1, k0, k1)
        if self.bias is not None:
            blk.bias = _one_head(_rows(self.bias[index], q0, q1)[..., k0:k1])
        if self.alibi:
            blk.dist = self.distances(q0, q1, k0, k1)
        rows = None
        if self.blocked is not None:
            rows = _one_head(_rows(self.blocked[index], q0, q1)[..., k0:k1])  # [Hm?, b|1, w], True = masked
            if self.key_only:  # one key row per head: a 0/-inf key bias, inside the GEMM when exact
                keys = _as_bias(rows[..., 0, :], self.dtype)  # [Hm?, w]
                blk.key_bias, blk.key_row = (keys, None) if self.fuse_keys else (None, keys)
            else:
                blk.mask_bias = _as_bias(rows, self.dtype)
            if self.row_empty is not None:  # rows the mask alone leaves without a key
                empty = _rows(self.row_empty[index], q0, q1)  # [Hm, b|1, 1]
                blk.empty = _one_head(empty) if bool(empty.any()) else None
        if self.window is not None:
            self._band(blk, rows)
        return blk

    def _band(self, blk: Block, rows: torch.Tensor | None) -> None:
        """Add the window: its bias, and the rows it leaves without a key in reach."""
        q0, q1, k0, k1 = blk.q0, blk.q1, blk.k0, blk.k1
        band = self.bands(q0, q1, k0, k1)  # None when the window allows the whole block
        window = self.window
        assert window is not None, "only called with a window"
        if band is not None:
            band_bias = self.bands.bias(q0, q1, k0, k1, self.dtype)
            assert band_bias is not None, "the bias is None exactly when the band is"
            blk.mask_bias = band_bias if blk.mask_bias is None else blk.mask_bias + band_bias
        if rows is not None and self.key_only:  # count each row's real keys in reach: O(b + w)
            empty = _no_key_in_reach(rows[..., 0, :], q0, q1, k0, window)
        elif rows is not None:  # the keys in reach and the mask together may leave a row none
            empty = (rows if band is None else rows | ~band).all(dim=-1, keepdim=True)
        else:  # the band alone: only queries past the last key's reach
            empty = torch.arange(q0, q1)[:, None] >= self.lk + window - 1
        blk.empty = empty if bool(empty.any()) else None


def _no_key_in_reach(masked_keys: torch.Tensor, q0: int, q1: int, k0: int, window: int) -> torch.Tensor:
    """[..., b, 1]: True for a query whose window holds no unmasked key; ``masked_keys`` [..., w]
    (True = masked) are keys k0.. . From a running count of the real keys, not the [b, w] block."""
    width = masked_keys.shape[-1]
    before = torch.zeros(*masked_keys.shape[:-1], width + 1, dtype=torch.int32)
    before[..., 1:] = torch.cumsum((~masked_keys).to(torch.int32), dim=-1)  # real keys before each column
    i = torch.arange(q0, q1)
    lo = (i - window + 1 - k0).clamp_(0, width)
    hi = (i + window - k0).clamp_(0, width)
    return (before[..., hi] == before[..., lo])[..., None]


def _at_least_3d(t: torch.Tensor) -> torch.Tensor:
    """[..., Lq, Lk] with a head axis (size 1 when absent)."""
    while t.dim() < 3:
        t = t.unsqueeze(0)
    return t


def _one_head(t: torch.Tensor) -> torch.Tensor:
    """[1, ...] -> [...]: a tensor shared by every head loses its head axis."""
    return t[0] if t.shape[0] == 1 else t


def _rows(t: torch.Tensor, q0: int, q1: int) -> torch.Tensor:
    """Query rows q0..q1-1 of [..., Lq|1, X] (a broadcast row stays one row)."""
    return t if t.shape[-2] == 1 else t[..., q0:q1, :]


def block_weights(
    q: torch.Tensor, k: torch.Tensor, blk: Block, h: int, scoring: Scoring, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Exact weights [b, w] of one head's block: q [b, d] (rows q0..q1-1), k [w, d] (keys k0..k1-1)."""
    op = onednn() if q.dtype == torch.float32 else None
    key_bias = blk.key_bias[h] if blk.key_bias is not None and blk.key_bias.dim() == 2 else blk.key_bias
    if op is not None:
        scores = op(q, k, key_bias, "none", [None], "")
    elif key_bias is not None:
        scores = torch.addmm(key_bias, q, k.t(), out=out) if out is not None else torch.addmm(key_bias, q, k.t())
    else:
        scores = torch.mm(q, k.t(), out=out) if out is not None else torch.mm(q, k.t())
    if scoring.scale != 1.0:
        scores.mul_(scoring.scale)
    if scoring.softcap is not None:
        scores.div_(scoring.softcap).tanh_().mul_(scoring.softcap)
    if blk.bias is not None:
        scores.add_(blk.head(blk.bias, h))
    if blk.key_row is not None:
        scores.add_(blk.key_row[h] if blk.key_row.dim() == 2 else blk.key_row)
    if scoring.slopes is not None:
        dist = blk.dist
        assert dist is not None, "the rule sets the distances whenever there are slopes"
        if dist.dtype != scores.dtype:  # half precision: round the bias
            scores.add_((dist * -scoring.slopes[h]).to(scores.dtype))  # once, as the reference does
        else:
            scores.add_(dist, alpha=-scoring.slopes[h])
    if blk.mask_bias is not None:
        scores.add_(blk.head(blk.mask_bias, h))
    sink = scoring.sink_of(h)
    return softmax_rows(scores, None, blk.head(blk.empty, h), out=scores if out is None else out, sink=sink)


class WeightsSink(Protocol):
    """Receives each exact weights block once; keeps what it wants of it."""

    def add(self, head: int, row0: int, weights: torch.Tensor, col0: int = 0) -> None:
        """weights [b, w] of ``head`` for queries row0.. and keys col0..col0+w-1 (zero elsewhere)."""

    def end_block(self, row0: int, row1: int) -> None:
        """Every head of queries row0..row1-1 has been added."""


def block_rows_for(lq: int, width: int, item: int, block_bytes: int = BLOCK_BYTES, band: int | None = None) -> int:
    """Query rows per block so that one [rows, keys] score block is about ``block_bytes``; with a
    band (a window's 2W-1 keys), a block of b rows sees about b + band keys, so blocks of about
    W/2 rows keep most of what they compute inside the band."""
    budget = max(1, block_bytes // item)
    rows = budget // max(1, width)
    if band is not None and band < width:
        banded = int((-band + math.sqrt(band * band + 4 * budget)) / 2)  # rows * (rows + band) = budget
        banded = min(banded, max(256, band // 4))
        if banded + band < 0.6 * width:  # else the band saves too little to pay for more, smaller blocks
            rows = banded
    return max(8, min(lq, rows))


def _prepare_weights(
    weights: torch.Tensor | None, q: torch.Tensor, rule: BlockRule, block_rows: int, lk: int
) -> tuple[bool, torch.Tensor | None]:
    """(whether the weighted sums are one GEMM per head at the end, the block buffer the weights
    go to when no ``weights`` array is kept); ``weights`` zeroed where no block reaches."""
    lq = q.shape[2]
    reach = _cells_in_reach(rule, lq, block_rows)
    # one weighted-sum GEMM per head at the end, unless most of each row is out of reach: then a
    # GEMM per block over its keys (fewer parallel regions vs less work over zeros)
    whole_heads = weights is not None and reach > 0.5 * lq * lk
    if weights is not None and reach < lq * lk:
        weights.zero_()  # one pass, so the blocks write only the cells they can reach
    buffer = None if weights is not None else q.new_empty(block_rows * lk)
    return whole_heads, buffer


def _attend_to_nothing(context: torch.Tensor, weights: torch.Tensor | None, n: int, blk) -> None:
    """A block of queries with no key in reach: zero context (and weights), never NaN."""
    context[n, :, blk.q0 : blk.q1].zero_()
    if weights is not None:
        weights[n, :, blk.q0 : blk.q1].zero_()


def fast_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rule: BlockRule,
    scoring: Scoring,
    *,
    block_rows: int,
    weights: torch.Tensor | None = None,
    sink: WeightsSink | None = None,
    timer=NULL_TIMER,
    progress: Callable[[int, int, int, int], None] | None = None,
    ctx: JobContext | None = None,
) -> torch.Tensor:
    """Exact attention of q [N, H, Lq, d] over k [N, KV, Lk, d], v [N, KV, Lk, dv] (KV divides H:
    head h reads K/V head h // (H // KV)) -> context [N, H, Lq, dv].

    The weights go into ``weights`` [N, H, Lq, Lk] (zeros where no block reaches) or, block by
    block, to ``sink`` (N == 1; a reused buffer: sinks copy what they keep). ``progress(block, blocks, head, heads)`` follows each head of each block;
    ``ctx.check()`` runs before each (raises ``Cancelled``).
    """
    items, heads, lq, _ = q.shape
    groups, lk = heads // k.shape[1], k.shape[2]
    if scoring.sinks is not None and len(scoring.sinks) != heads:
        raise ValueError(f"need one sink logit per query head ({heads}), got {len(scoring.sinks)}")
    context = q.new_empty(items, heads, lq, v.shape[-1])
    q, k = q.contiguous(), k.contiguous()  # rows of the fused QKV are strided: one copy, not one per block
    whole_heads, buffer = _prepare_weights(weights, q, rule, block_rows, lk)
    blocks = -(-lq // block_rows)
    for n in range(items):
        for b, q0 in enumerate(range(0, lq, block_rows)):
            blk = rule.block(n, q0, min(q0 + block_rows, lq))
            if blk.k1 == blk.k0:  # no key in reach (a window past the last key): attend to nothing
                _attend_to_nothing(context, weights, n, blk)
                continue
            for h in range(heads):
                if ctx is not None:
                    ctx.check()
                kv = h // groups
                with timer.stage("attention", report=False):
                    out = _weights_out(weights, buffer, n, h, blk)
                    w = block_weights(q[n, h, blk.q0 : blk.q1], k[n, kv, blk.k0 : blk.k1], blk, h, scoring, out)
                if not whole_heads:
                    with timer.stage("weighted sum", report=False):
                        torch.mm(w, v[n, kv, blk.k0 : blk.k1], out=context[n, h, blk.q0 : blk.q1])
                if sink is not None:
                    with timer.stage("overview", report=False):
                        sink.add(h, blk.q0, w, blk.k0)
                if progress is not None:
                    progress(b, blocks, h, heads)
            if sink is not None:
                with timer.stage("overview", report=False):
                    sink.end_block(blk.q0, blk.q1)
        if whole_heads and weights is not None:
            with timer.stage("weighted sum", report=False):
                _whole_head_sums(weights[n], v[n], context[n], groups)
    return context


def _cells_in_reach(rule: BlockRule, lq: int, block_rows: int) -> int:
    """How many (query, key) cells the blocks compute, per head."""
    total = 0
    for q0 in range(0, lq, block_rows):
        q1 = min(q0 + block_rows, lq)
        k0, k1 = rule.key_range(q0, q1)
        total += (k1 - k0) * (q1 - q0)
    return total


def _weights_out(weights: torch.Tensor | None, buffer: torch.Tensor | None, n: int, h: int, blk: Block) -> torch.Tensor:
    """Where a head's block of weights goes: its cells of ``weights`` (zeroed beforehand where a
    block cannot reach), or the reused buffer."""
    q0, q1, k0, k1 = blk.q0, blk.q1, blk.k0, blk.k1
    if weights is None:
        assert buffer is not None, "a buffer is made whenever there are no weights to keep"
        return buffer[: (q1 - q0) * (k1 - k0)].view(q1 - q0, k1 - k0)
    return weights[n, h, q0:q1, k0:k1]


def _whole_head_sums(weights: torch.Tensor, v: torch.Tensor, context: torch.Tensor, groups: int) -> None:
    """context[h] = weights[h] @ v[h // groups]: one GEMM per head, as fast as per block and with
    fewer parallel regions (each costs a thread hand-off, dear when other processes share the cores)."""
    op = onednn() if weights.dtype == torch.float32 else None
    vt = v.transpose(-1, -2).contiguous() if op is not None else None  # [KV, dv, Lk]: oneDNN wants x @ w^T
    for h in range(weights.shape[0]):
        if op is not None and vt is not None:
            context[h] = op(weights[h], vt[h // groups], None, "none", [None], "")
        else:
            torch.mm(weights[h], v[h // groups], out=context[h])


__all__ = [
    "BLOCK_BYTES",
    "FAST_DTYPES",
    "Block",
    "BlockRule",
    "DenseRule",
    "Scoring",
    "SpecRule",
    "WeightsSink",
    "block_rows_for",
    "block_weights",
    "fast_attention",
    "onednn",
    "softmax_rows",
]
