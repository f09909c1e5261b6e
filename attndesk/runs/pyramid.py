"""The display pyramid of a long run: per head, tiles of f x f cells keeping BOTH their mean and
their max (a single sharp weight must not be averaged away), at the overview size and at
coarser levels (each halving the previous), plus exact recomputation of any cell or region.

``PyramidBuilder`` is a ``blocked_attention`` sink: it folds each exact [b, keys] weights block into
the level-0 tiles as the block streams past, so the [H, Lq, Lk] matrix never exists (and a
windowed run folds only its band: the tiles outside it stay zero). Index
``num_heads`` of every level holds the mean over heads (its tiles' max is the max of the
head-mean matrix, not a mean of maxima).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attndesk.attention.blocked import ExactAttention
from attndesk.attention.masks import MaskSpec
from attndesk.attention.types import MEAN
from attndesk.system.free_memory import format_bytes


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _cols_into(t: torch.Tensor, f: int, out: torch.Tensor, how: str) -> None:
    """Reduce groups of f keys of t [n, Lk] into out [n, ceil(Lk/f)] (the last group may be short).

    Strided elementwise passes written straight into ``out``: torch reduces a tiny last axis
    about 10x slower, and a temporary would cost a copy.
    """
    lk = t.shape[1]
    full = lk // f * f
    body, dest = t[:, :full], out[:, : full // f]
    op = torch.maximum if how == "max" else torch.add
    if full:
        if f == 1:
            dest.copy_(body)
        else:
            op(body[:, 0::f], body[:, 1::f], out=dest)
            for j in range(2, f):
                op(dest, body[:, j::f], out=dest)
    if full < lk:
        tail = t[:, full:]
        out[:, -1] = tail.amax(dim=-1) if how == "max" else tail.sum(dim=-1)


def _rows_max_sum(rows: torch.Tensor, mx: torch.Tensor, sm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, f, Lk] -> (max, sum) over the f rows into mx, sm [n, Lk], by elementwise passes (fast)."""
    f = rows.shape[1]
    if f == 1:
        return rows[:, 0], rows[:, 0]
    if f > 2:  # one reduction over the middle axis beats f-1 small ops (fewer thread hand-offs)
        torch.amax(rows, dim=1, out=mx)
        torch.sum(rows, dim=1, out=sm)
        return mx, sm
    torch.maximum(rows[:, 0], rows[:, 1], out=mx)
    torch.add(rows[:, 0], rows[:, 1], out=sm)
    for j in range(2, f):
        torch.maximum(mx, rows[:, j], out=mx)
        sm.add_(rows[:, j])
    return mx, sm


def _pool2(t: torch.Tensor, how: str) -> torch.Tensor:
    """Halve the last two axes of [N, R, C] (an odd edge is zero-padded: values are >= 0),
    keeping the max or the sum of each 2 x 2 tile; rows first, by strided elementwise passes."""
    _, r, c = t.shape
    if r % 2 or c % 2:
        t = torch.nn.functional.pad(t, (0, c % 2, 0, r % 2))
    op = torch.maximum if how == "max" else torch.add
    rows = op(t[:, 0::2], t[:, 1::2])  # [N, R/2, C]
    return op(rows[..., 0::2], rows[..., 1::2])  # [N, R/2, C/2]


class PyramidBuilder:
    """Sink for ``blocked_attention``: accumulates level-0 tile max and sum for every head and
    for the mean over heads. Memory: 2 x (H+1) x R x C float32 plus one [block, Lk] buffer."""

    def __init__(
        self, num_heads: int, lq: int, lk: int, factor: int, *, device: torch.device | str = "cpu", banded: bool = False
    ):
        if factor < 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        self.num_heads, self.lq, self.lk, self.factor = num_heads, lq, lk, factor
        self.rows, self.cols = _ceil_div(lq, factor), _ceil_div(lk, factor)
        shape = (num_heads + 1, self.rows, self.cols)  # index H = mean over heads
        # no zero fill for full rows: rows arrive in order, so every tile row is first written by an
        # assignment (a block that starts inside a tile follows the one that assigned it); a band
        # (``banded``: blocks see only some keys, aligned to tiles) leaves tiles that stay zero
        alloc = torch.zeros if banded else torch.empty
        self.maxes = alloc(shape, dtype=torch.float32, device=device)
        self.sums = alloc(shape, dtype=torch.float32, device=device)
        self._mean_rows: torch.Tensor | None = None  # [b, w]: the running sum over heads of a block
        self._mean_col0 = 0
        self._scratch: torch.Tensor | None = None  # flat [2 x b/f x w]: row-reduced max and sum, reused

    # -- sink protocol ---------------------------------------------------------------------------
    def add(self, head: int, row0: int, weights: torch.Tensor, col0: int = 0) -> None:
        """Fold ``weights`` [b, w] of queries row0.. over keys col0..col0+w-1 (col0 a multiple of
        the factor, w too unless the block reaches the last key)."""
        self._fold(head, row0, weights, col0)
        if self.num_heads > 1:
            b, w = weights.shape
            if head == 0:
                if self._mean_rows is None or self._mean_rows.shape[0] < b or self._mean_rows.dtype != weights.dtype:
                    self._mean_rows = torch.empty((b, self.lk), dtype=weights.dtype, device=weights.device)
                self._mean_rows[:b, :w].copy_(weights)
                self._mean_col0, self._mean_width = col0, w
            else:
                assert self._mean_rows is not None, "head 0 of the block came first"
                self._mean_rows[:b, :w].add_(weights)

    def end_block(self, row0: int, row1: int) -> None:
        if self.num_heads > 1:
            assert self._mean_rows is not None, "end_block after the block's heads"
            mean = self._mean_rows[: row1 - row0, : self._mean_width].div_(self.num_heads)
            self._fold(self.num_heads, row0, mean, self._mean_col0)
        else:  # one head: its mean is itself
            r0, r1 = row0 // self.factor, _ceil_div(row1, self.factor)
            self.maxes[1, r0:r1] = self.maxes[0, r0:r1]
            self.sums[1, r0:r1] = self.sums[0, r0:r1]

    # -- folding ---------------------------------------------------------------------------------
    def _fold(self, index: int, row0: int, weights: torch.Tensor, col0: int = 0) -> None:
        """Fold exact rows row0.. of one matrix (keys col0..) into its tiles (any alignment of rows
        to tiles; col0 on a tile boundary)."""
        w = weights if weights.dtype == torch.float32 else weights.float()
        f, b = self.factor, w.shape[0]
        c0, c1 = col0 // f, _ceil_div(col0 + w.shape[1], f)
        maxes, sums = self.maxes[..., c0:c1], self.sums[..., c0:c1]
        if f == 1:
            maxes[index, row0 : row0 + b] = w
            sums[index, row0 : row0 + b] = w
            return
        end, r = row0 + b, row0
        if r % f:
            # the block starts inside a tile an earlier block began: combine with what is there
            stop = min(end, (r // f + 1) * f)
            seg = w[: stop - row0]
            t = r // f
            part = torch.empty((2, c1 - c0), dtype=torch.float32, device=w.device)
            _cols_into(seg.amax(dim=0, keepdim=True), f, part[0:1], "max")
            _cols_into(seg.sum(dim=0, keepdim=True), f, part[1:2], "sum")
            torch.maximum(maxes[index, t], part[0], out=maxes[index, t])
            sums[index, t] += part[1]
            r = stop
        if r < end:
            # from a tile boundary on, these tiles are new: reduce the f rows of each tile first
            # (a reduction over a middle axis, fast), then groups of f columns; a short last tile
            # is zero-padded (weights are >= 0) and completed by the next block if there is one
            seg = w[r - row0 :]
            n = _ceil_div(seg.shape[0], f)
            if seg.shape[0] % f:
                seg = torch.nn.functional.pad(seg, (0, 0, 0, n * f - seg.shape[0]))
            width = seg.shape[1]
            if self._scratch is None or self._scratch.numel() < 2 * n * width:
                self._scratch = torch.empty(2 * n * max(width, self.lk), dtype=torch.float32, device=w.device)
            scratch = self._scratch[: 2 * n * width].view(2, n, width)  # reused, contiguous
            rows_max, rows_sum = _rows_max_sum(
                seg.reshape(n, f, width),  # [n, f, w] -> [n, w]
                scratch[0],
                scratch[1],
            )
            t0 = r // f
            _cols_into(rows_max, f, maxes[index, t0 : t0 + n], "max")  # [n, C]
            _cols_into(rows_sum, f, sums[index, t0 : t0 + n], "sum")

    def counts(self, factor: int | None = None) -> torch.Tensor:
        """Cells per tile [R, C] (edge tiles are short) at ``factor`` (default: level 0)."""
        f = self.factor if factor is None else factor
        rows = torch.clamp(self.lq - torch.arange(_ceil_div(self.lq, f)) * f, max=f)  # [R]
        cols = torch.clamp(self.lk - torch.arange(_ceil_div(self.lk, f)) * f, max=f)  # [C]
        return (rows[:, None] * cols[None, :]).to(torch.float32)

    def finish(self, exact: ExactAttention | None, mask: MaskSpec, *, min_side: int = 64) -> AttentionPyramid:
        """The finished pyramid: level 0 plus halvings down to about ``min_side`` px."""
        levels: list[PyramidLevel] = []
        maxes, sums = self.maxes.cpu(), self.sums.cpu()
        factor = self.factor
        while True:
            levels.append(
                PyramidLevel(
                    factor=factor,
                    max=maxes.numpy(),
                    sums=sums.numpy(),
                    counts=self.counts(factor).numpy(),
                    all_masked=mask.tile_all_masked(factor),
                )
            )
            if max(maxes.shape[-2:]) <= min_side:
                break
            maxes, sums, factor = _pool2(maxes, "max"), _pool2(sums, "sum"), factor * 2
        return AttentionPyramid(self.num_heads, self.lq, self.lk, levels, exact, mask)


@dataclass(frozen=True)
class PyramidLevel:
    """One level: every tile covers ``factor`` x ``factor`` cells (fewer at the ragged edge).

    ``max`` and ``sums`` are float32 [H+1, R, C] (index H = mean over heads), ``counts`` [R, C]
    the cells per tile; ``mean(i)`` divides on demand (no second full-size array is kept).
    ``all_masked`` [R, C] is True where every cell of the tile is masked (None: nothing masked).
    """

    factor: int
    max: np.ndarray
    sums: np.ndarray
    counts: np.ndarray
    all_masked: np.ndarray | None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.max.shape[1]), int(self.max.shape[2]))

    def mean(self, index: int) -> np.ndarray:
        """[R, C] tile means of matrix ``index``."""
        return self.sums[index] / self.counts


class AttentionPyramid:
    """Downsampled views of every head's weights plus exact access to any cell, row or region.

    ``head`` arguments are an int in 0..H-1 or ``"mean"`` (mean over heads).
    """

    def __init__(
        self, num_heads: int, lq: int, lk: int, levels: list[PyramidLevel], exact: ExactAttention | None, mask: MaskSpec
    ):
        self.num_heads, self.lq, self.lk = num_heads, lq, lk
        self.levels, self.exact, self.mask_spec = levels, exact, mask
        self._head_max = levels[0].max.reshape(num_heads + 1, -1).max(axis=1)  # [H+1]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.lq, self.lk)

    @property
    def factor(self) -> int:
        """Cells per overview pixel along each axis at level 0."""
        return self.levels[0].factor

    def _index(self, head) -> int:
        if head == MEAN:
            return self.num_heads
        if isinstance(head, (int, np.integer)) and 0 <= head < self.num_heads:
            return int(head)
        raise IndexError(f"head {head!r} out of range 0..{self.num_heads - 1} (or {MEAN!r})")

    def overview(self, head, how: str = "max", level: int = 0) -> np.ndarray:
        """[R, C] float32 tiles of one head at ``level``: their ``how`` = "max" or "mean"."""
        lv = self.levels[level]
        if how not in ("max", "mean"):
            raise ValueError(f"how must be 'max' or 'mean', got {how!r}")
        index = self._index(head)
        return lv.max[index] if how == "max" else lv.mean(index)

    def level_for(self, max_side: int) -> int:
        """The finest level whose larger side is at most ``max_side`` px (the coarsest if none is)."""
        for i, lv in enumerate(self.levels):
            if max(lv.shape) <= max_side:
                return i
        return len(self.levels) - 1

    def _exact(self) -> ExactAttention:
        assert self.exact is not None, "this pyramid was finished without its exact weights"
        return self.exact

    def head_max(self, head) -> float:
        """The largest weight of one head (exact: the max survives every tile)."""
        return float(self._head_max[self._index(head)])

    def value(self, head, q: int, k: int) -> float:
        """The exact weight of one cell, recomputed."""
        self._index(head)
        return self._exact().value(head, q, k)

    def allowed(self, q: int, k: int) -> bool:
        return self.mask_spec.allowed(q, k)

    def rows(self, head, q0: int, q1: int) -> np.ndarray:
        self._index(head)
        return self._exact().rows(head, q0, q1)

    def region(self, head, q0: int, q1: int, k0: int, k1: int) -> np.ndarray:
        """Exact float32 weights of queries q0..q1-1 x keys k0..k1-1 (for zoom and region export)."""
        self._index(head)
        return self._exact().region(head, q0, q1, k0, k1)

    def region_view(self, head, q0: int, q1: int, k0: int, k1: int, max_side: int = 1024) -> tuple[np.ndarray, int]:
        """A region for drawing: exact when it fits ``max_side`` px, else max-tiled from exact rows.

        Returns (array, factor) where factor is the cells per pixel (1 = exact cells).
        """
        self._index(head)
        side = max(q1 - q0, k1 - k0)
        factor = max(1, _ceil_div(side, max_side))
        return self._exact().region_overview(head, q0, q1, k0, k1, factor), factor

    @property
    def nbytes(self) -> int:
        return sum(lv.max.nbytes + lv.sums.nbytes + lv.counts.nbytes for lv in self.levels)

    def describe(self) -> str:
        lv = self.levels[0]
        return (
            f"overview {lv.shape[1]} x {lv.shape[0]} px ({lv.factor} x {lv.factor} cells per pixel, "
            f"tile max and mean), {len(self.levels)} level(s), {format_bytes(self.nbytes)}; "
            "hover and zoom values are recomputed exactly"
        )
