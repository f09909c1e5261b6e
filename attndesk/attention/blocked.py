"""Long runs: the same numbers as the full path, with a score buffer of one block of rows.

The full path materialises [H, Lq, Lk] weights at once (8 heads x 16k tokens: 8 GiB). Here the
fast path (``fastpath.fast_attention``) hands each block's exact weights [b, keys] to a *sink*
(which stores them or folds them into a display pyramid) and drops them. The mask is never built
as an [Lq, Lk] matrix either: ``MaskSpec`` makes each block's rows on the fly, and a sliding
window visits only its band of keys (O(L W) work and nothing stored outside the band).

``ExactAttention`` keeps the projected Q and K (O(L x E) memory) and recomputes any rows or
cells on demand with the very same block function, so hover read-outs are exact weights.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext
from attndesk.system.timing import NULL_TIMER

from .fastpath import SpecRule, WeightsSink, block_weights, fast_attention
from .masks import MaskSpec
from .scoring import Scoring
from .types import MEAN


class FullSink:
    """Stores every weight into an [H, Lq, Lk] numpy array (float32, or float16 to halve it);
    cells no block reached (outside a window's band) stay zero."""

    def __init__(self, num_heads: int, lq: int, lk: int, dtype=np.float32):
        self.weights = np.zeros((num_heads, lq, lk), dtype=dtype)  # calloc: untouched pages cost nothing

    def add(self, head: int, row0: int, weights: torch.Tensor, col0: int = 0) -> None:
        block = weights.detach().to("cpu", torch.float32 if self.weights.dtype == np.float32 else torch.float16)
        b, w = block.shape
        self.weights[head, row0 : row0 + b, col0 : col0 + w] = block.numpy()

    def end_block(self, row0: int, row1: int) -> None:
        return None


class TeeSink:
    """Hands every block to several sinks (e.g. stored weights and the overview)."""

    def __init__(self, *sinks: WeightsSink):
        self.sinks = sinks

    def add(self, head: int, row0: int, weights: torch.Tensor, col0: int = 0) -> None:
        for sink in self.sinks:
            sink.add(head, row0, weights, col0)

    def end_block(self, row0: int, row1: int) -> None:
        for sink in self.sinks:
            sink.end_block(row0, row1)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: MaskSpec,
    *,
    block_rows: int,
    scoring: Scoring | None = None,
    scale: float | None = None,
    sink: WeightsSink | None = None,
    align: int = 1,
    timer=NULL_TIMER,
    progress: Callable[[int, int, int, int], None] | None = None,
    ctx: JobContext | None = None,
) -> torch.Tensor:
    """Attention over query blocks: q [H, Lq, d], k [KV, Lk, d], v [KV, Lk, dv] -> context [H, Lq, dv].

    Live memory beyond the inputs and the context is one [block_rows, keys] weights buffer,
    reused by every block (sinks must copy what they keep); a block's keys are those ``mask``
    lets it see, widened to multiples of ``align`` (the overview's tile side). ``scoring`` (or
    ``scale`` alone) acts as in ``attention.attend``; the window is ``mask``'s. ``timer`` accumulates "attention",
    "weighted sum" and the sink's "overview" over all blocks. ``progress(block, blocks, head,
    heads)`` follows each head of each block; ``ctx.check()`` runs before each one and raises
    ``Cancelled`` (within one block's time of the request).
    """
    if block_rows < 1:
        raise ConfigError(f"block_rows must be at least 1, got {block_rows}")
    scoring = _scoring(mask, scoring, scale)
    rule = SpecRule(mask, alibi=scoring.slopes is not None, fuse_keys=scoring.fusable, align=align, dtype=q.dtype)
    context = fast_attention(
        q[None],
        k[None],
        v[None],
        rule,
        scoring,
        sink=sink,
        block_rows=min(block_rows, q.shape[1]),
        timer=timer,
        progress=progress,
        ctx=ctx,
    )
    return context[0]


def _scoring(mask: MaskSpec, scoring: Scoring | None, scale: float | None) -> Scoring:
    """``scoring``, or the plain one of ``scale``; its window, if any, must be the mask's."""
    if scoring is None and scale is not None:
        scoring = Scoring(scale=float(scale))
    elif scoring is None or scale is not None:
        raise ValueError("give the score modifiers as scoring= or a plain scale=, one of the two")
    if scoring.window is not None and scoring.window != mask.window:
        raise ValueError(f"the scoring's window {scoring.window} is not the mask's ({mask.window})")
    return scoring


class ExactAttention:
    """Exact weights on demand from the kept projections: q [H, Lq, d] (scale folded in or not),
    k [KV, Lk, d] (head h reads K head h // (H // KV)), the mask spec and the ``scoring`` (or a
    plain ``scale``). Memory O((Lq + Lk) x E); one cell costs one row (the keys its query may
    see x d)."""

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        mask: MaskSpec,
        *,
        scoring: Scoring | None = None,
        scale: float | None = None,
        block_bytes: int = 32 * 2**20,
    ):
        self.q, self.k, self.mask = q, k, mask
        self.scoring = _scoring(mask, scoring, scale)
        self.scale = self.scoring.scale
        self.num_heads, self.lq, self.lk = int(q.shape[0]), int(q.shape[1]), int(k.shape[1])
        self.groups = self.num_heads // int(k.shape[0])
        self._rule = SpecRule(
            mask, alibi=self.scoring.slopes is not None, fuse_keys=self.scoring.fusable, dtype=q.dtype
        )
        self._block_rows = max(1, block_bytes // max(1, self.lk * 4 * self.num_heads))

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.num_heads, self.lq, self.lk)

    def _check(self, head, q0: int, q1: int) -> None:
        if head != MEAN and not (isinstance(head, (int, np.integer)) and 0 <= head < self.num_heads):
            raise IndexError(f"head {head!r} out of range 0..{self.num_heads - 1} (or {MEAN!r})")
        if not 0 <= q0 <= q1 <= self.lq:
            raise IndexError(f"query rows {q0}:{q1} out of range 0:{self.lq}")

    def _rows(self, head, q0: int, q1: int) -> torch.Tensor:
        """[q1-q0, Lk] weights of one head (or their mean over heads) in the compute dtype,
        through the fast path's own block function (zeros outside the keys the rows may see)."""
        heads = range(self.num_heads) if head == MEAN else [int(head)]
        out = torch.zeros((q1 - q0, self.lk), dtype=self.q.dtype, device=self.q.device)
        if q1 == q0:
            return out
        with torch.inference_mode():
            blk = self._rule.block(0, q0, q1)
            for h in heads:
                w = block_weights(self.q[h, q0:q1], self.k[h // self.groups, blk.k0 : blk.k1], blk, h, self.scoring)
                out[:, blk.k0 : blk.k1] += w
        return out / len(heads) if head == MEAN else out

    def value(self, head, q: int, k: int) -> float:
        """The exact weight of one cell: ``head`` an int or ``"mean"`` (mean over heads)."""
        self._check(head, q, q + 1)
        if not 0 <= k < self.lk:
            raise IndexError(f"key {k} out of range 0..{self.lk - 1}")
        return float(self._rows(head, q, q + 1)[0, k])

    def rows(self, head, q0: int, q1: int) -> np.ndarray:
        """Exact float32 weights [q1-q0, Lk] of queries q0..q1-1."""
        return self.region(head, q0, q1, 0, self.lk)

    def region(self, head, q0: int, q1: int, k0: int, k1: int, max_cells: int = 64 * 2**20) -> np.ndarray:
        """Exact float32 weights [q1-q0, k1-k0]; computed a block of rows at a time.

        Refuses (ConfigError) a region over ``max_cells`` cells rather than allocating it: ask
        ``region_overview`` for a downsampled view of large regions.
        """
        self._check(head, q0, q1)
        if not 0 <= k0 <= k1 <= self.lk:
            raise IndexError(f"keys {k0}:{k1} out of range 0:{self.lk}")
        cells = (q1 - q0) * (k1 - k0)
        if cells > max_cells:
            raise ConfigError(
                f"an exact region of {q1 - q0:,} x {k1 - k0:,} cells is too large to hold at once "
                f"(limit {max_cells:,} cells); zoom in further or ask for a downsampled overview"
            )
        out = np.empty((q1 - q0, k1 - k0), dtype=np.float32)
        for r0 in range(q0, q1, self._block_rows):
            r1 = min(r0 + self._block_rows, q1)
            out[r0 - q0 : r1 - q0] = self._rows(head, r0, r1)[:, k0:k1].float().cpu().numpy()
        return out

    def region_overview(self, head, q0: int, q1: int, k0: int, k1: int, factor: int, how: str = "max") -> np.ndarray:
        """A region reduced by ``factor`` x ``factor`` tiles (``how`` = "max" or "mean"), exact
        inputs, computed a block of rows at a time: float32 [ceil((q1-q0)/f), ceil((k1-k0)/f)]."""
        self._check(head, q0, q1)
        if factor < 1:
            raise ValueError("factor must be >= 1")
        if factor == 1:
            return self.region(head, q0, q1, k0, k1)
        rows_out, cols_out = -(-(q1 - q0) // factor), -(-(k1 - k0) // factor)
        out = np.zeros((rows_out, cols_out), dtype=np.float32)
        step = max(factor, self._block_rows // factor * factor)  # whole tile rows per block
        for r0 in range(q0, q1, step):
            r1 = min(r0 + step, q1)
            w = self._rows(head, r0, r1)[:, k0:k1].float()[None]  # [1, b, k]
            if how == "max":
                tiles = torch.nn.functional.max_pool2d(w, factor, factor, ceil_mode=True)
            else:
                tiles = torch.nn.functional.avg_pool2d(w, factor, factor, ceil_mode=True)
            t0 = (r0 - q0) // factor
            out[t0 : t0 + tiles.shape[1]] = tiles[0].cpu().numpy()
        return out
