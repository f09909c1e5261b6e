"""The heatmap panel's source for a long (memory-bounded) run, and ``source_for_map`` for any map.

Qt-free (numpy + the core), so the worker thread builds it and the GUI thread only draws.
``PyramidHeatmapSource`` has the interface of ``sources.heatmap_source.HeatmapSource`` over a
map's ``pyramid``; ``source_for_map`` picks the right source for any ``AttentionMap``:

- ``display_matrix(head)``: the tile-MAX overview at the finest pyramid level that fits
  ``max_display`` px, so a single sharp weight stays visible; ``display_mean(head)`` the tile mean.
- ``value_at(head, q, k)``: the exact weight, recomputed from the kept Q and K (about a
  millisecond at 16k tokens), never a downsampled value.
- ``region(head, q0, q1, k0, k1, max_side)``: what a zoomed view draws over the rectangle
  (k0, q0, k1-k0, q1-q0): exact cells once they fit ``max_side`` px, else max tiles computed from
  exact rows. Its cost is (q1-q0) x Lk x head_dim multiply-adds, so call it off the GUI thread.
- ``mask[q, k]``: whether query q may attend to key k, without an [L, Lk] matrix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attndesk.attention.blocked import MaskSpec
from attndesk.attention.types import MEAN, AttentionMap
from attndesk.runs import select
from attndesk.runs.select import tile_reduce

from .heatmap_source import ALIBI_BIAS, MAX_DISPLAY, WEIGHTS, BiasSource, ExactSource, HeatmapSource


class CellMask:
    """``mask[q, k]`` -> bool (True = may attend) for an [L, Lk] mask that is never materialised."""

    def __init__(self, spec: MaskSpec):
        self.spec = spec
        self.shape = (spec.lq, spec.lk)
        self.ndim = 2
        self.dtype = np.dtype(np.bool_)

    def __getitem__(self, index) -> bool:
        if not (isinstance(index, tuple) and len(index) == 2 and all(isinstance(i, (int, np.integer)) for i in index)):
            raise TypeError("index the long-run mask one cell at a time: mask[q, k]")
        q, k = (int(i) for i in index)
        if not (0 <= q < self.spec.lq and 0 <= k < self.spec.lk):
            raise IndexError(f"cell ({q}, {k}) outside {self.spec.lq} x {self.spec.lk}")
        return self.spec.allowed(q, k)


class PyramidHeatmapSource:
    """A ``HeatmapSource`` over ``map.pyramid`` (an over-budget run): overview + exact values."""

    value_name = "weight"

    def __init__(self, map: AttentionMap, max_display: int = MAX_DISPLAY) -> None:
        pyramid = map.pyramid
        if pyramid is None:
            raise ValueError("this map has no pyramid: use ExactSource (or source_for_map)")
        self.map, self.base_map, self.pyramid, self.key_offset = map, map, pyramid, 0
        self.num_heads = pyramid.num_heads
        self.shape = pyramid.shape  # (queries L, keys Lk): the real matrix, not the overview
        self.query_labels: Sequence[str] = list(map.queries)
        self.key_labels: Sequence[str] = list(map.keys)
        self.mask = None if pyramid.mask_spec.is_none else CellMask(pyramid.mask_spec)
        self.causal = bool(pyramid.mask_spec.causal)
        self.set_max_display(max_display)

    # -- level of detail ---------------------------------------------------------------------
    def set_max_display(self, max_display: int) -> None:
        """Pick the pyramid level drawn by ``display_matrix``: the finest within ``max_display`` px."""
        self.level = self.pyramid.level_for(max_display)
        self.factor = self.pyramid.levels[self.level].factor

    @property
    def levels(self) -> list[tuple[int, int, int]]:
        """(factor, rows, cols) of every pyramid level, finest first."""
        return [(lv.factor, *lv.shape) for lv in self.pyramid.levels]

    # -- the HeatmapSource interface ---------------------------------------------------------
    def display_matrix(self, head) -> np.ndarray:
        """[ceil(L/f), ceil(Lk/f)] float32 tile maxima, drawn over the rectangle (0, 0, Lk, L)."""
        return self.pyramid.overview(head, "max", self.level)

    def display_mean(self, head) -> np.ndarray:
        """The same tiles' means (a smoother picture, where sharp weights fade)."""
        return self.pyramid.overview(head, "mean", self.level)

    def display_mask(self) -> np.ndarray | None:
        """True where every cell of the tile is masked (shaped like ``display_matrix``), or None."""
        return self.pyramid.levels[self.level].all_masked

    def value_at(self, head, q: int, k: int) -> float:
        """The exact weight of one cell (recomputed; ``head`` an int or ``"mean"``)."""
        return self.pyramid.value(head, int(q), int(k))

    def level_max(self, head) -> float:
        return self.pyramid.head_max(head)

    def level_range(self, head) -> tuple[float, float]:
        return 0.0, self.level_max(head)

    def global_max(self) -> float:
        return max((self.pyramid.head_max(h) for h in range(self.num_heads)), default=0.0)

    def head_title(self, head) -> str:
        return select.head_title(self.map, head)

    def downsample_note(self) -> str:
        lq, lk = self.shape
        if self.factor == 1:
            return f"{lq:,} x {lk:,} cells; hover values are recomputed exactly"
        return (
            f"overview of {lq:,} x {lk:,} cells: each pixel is the max of a {self.factor}x{self.factor} "
            "tile; zoom in for exact cells, hover values are exact"
        )

    # -- zoom and export ---------------------------------------------------------------------
    def region(self, head, q0: int, q1: int, k0: int, k1: int, max_side: int = 1024) -> tuple[np.ndarray, int]:
        """What to draw for the visible rows q0..q1-1 x keys k0..k1-1: (array, cells per pixel).

        Exact cells when the region fits ``max_side`` px (factor 1), else max tiles of exact rows.
        Indices are clipped to the matrix. Costs (q1-q0) x Lk x head_dim: call it in the worker.
        """
        lq, lk = self.shape
        q0, q1 = max(0, int(q0)), min(lq, int(q1))
        k0, k1 = max(0, int(k0)), min(lk, int(k1))
        if q1 <= q0 or k1 <= k0:
            return np.zeros((0, 0), dtype=np.float32), 1
        return self.pyramid.region_view(head, q0, q1, k0, k1, max_side)

    def exact_region(self, head, q0: int, q1: int, k0: int, k1: int) -> np.ndarray:
        """Exact float32 weights of a region (for region export); refuses very large regions."""
        return self.pyramid.region(head, q0, q1, k0, k1)


def source_for_map(
    map: AttentionMap,
    max_display: int = MAX_DISPLAY,
    *,
    hide_first_key: bool = False,
    show: str = WEIGHTS,
    budget: int | None = None,
) -> HeatmapSource:
    """The heatmap source for any map (call it in a worker: it does the O(H·L·Lk) work).

    ``hide_first_key`` drops key 0 (a decoder's attention sink) and renormalises each row over
    the other keys (the note says so), a copy that must fit ``budget`` bytes together with the
    weights (ConfigError); ``show=ALIBI_BIAS`` draws the ALiBi bias instead.
    """
    if show == ALIBI_BIAS:
        return BiasSource(map, max_display)
    if show != WEIGHTS:
        raise ValueError(f"show must be {WEIGHTS!r} or {ALIBI_BIAS!r}, got {show!r}")
    if map.pyramid is not None:
        return PyramidHeatmapSource(map, max_display)
    if hide_first_key and map.shape[1] > 1:
        hidden = select.drop_keys(map, [0], renormalise=True, budget=budget)
        return ExactSource(hidden, max_display, key_offset=1, base_map=map)
    return ExactSource(map, max_display)


@dataclass
class ZoomTile:
    """What a zoomed heatmap draws over the visible cells: ``array`` [rows, cols] where each
    pixel is the max of a ``factor`` x ``factor`` tile of cells starting at (q0, k0); factor 1 =
    exact cells. ``masked`` (same shape, or None) is True where every cell of the tile is masked."""

    head: object
    q0: int
    k0: int
    factor: int
    array: np.ndarray
    masked: np.ndarray | None = None

    @property
    def exact(self) -> bool:
        return self.factor == 1

    def rect(self) -> tuple[int, int, int, int]:
        """(x=k0, y=q0, width, height) in cells; the last tile may reach past the matrix edge
        (the view never shows beyond it), so every pixel covers exactly factor x factor cells."""
        rows, cols = self.array.shape
        return self.k0, self.q0, cols * self.factor, rows * self.factor


def zoom_factor(q0: int, q1: int, k0: int, k1: int, max_side: int) -> int:
    """Cells per pixel needed to draw the region within ``max_side`` px on its larger side."""
    return max(1, math.ceil(max(q1 - q0, k1 - k0) / max(1, int(max_side))))


def _region_masked(mask, q0: int, q1: int, k0: int, k1: int, factor: int) -> np.ndarray | None:
    """[ceil(rows/f), ceil(cols/f)] True where the whole tile is masked, or None (nothing masked)."""
    if mask is None:
        return None
    if isinstance(mask, CellMask):
        rows = mask.spec.rows(q0, q1)  # [q1-q0 or 1, Lk] torch bool (True = may attend), or None
        if rows is None:
            return None
        allowed = np.broadcast_to(rows[:, k0:k1].cpu().numpy(), (q1 - q0, k1 - k0))
    else:
        allowed = np.asarray(mask)[q0:q1, k0:k1]
    masked = ~allowed
    if not masked.any():
        return None
    return tile_reduce(np.ascontiguousarray(masked), factor, "all")


def zoom_region(source, head, q0: int, q1: int, k0: int, k1: int, max_side: int) -> ZoomTile | None:
    """The finest picture of the visible cells q0..q1-1 x k0..k1-1 that ``max_side`` px can show,
    or None when the source's own display is already that fine. Runs in a worker thread.

    A pyramid source answers from its finest stored level when that is fine enough (instant),
    else from exact rows (exact cells once a cell is at least a pixel); a full-weights source
    slices its weights.
    """
    lq, lk = source.shape
    q0, q1 = max(0, int(q0)), min(lq, int(q1))
    k0, k1 = max(0, int(k0)), min(lk, int(k1))
    if q1 <= q0 or k1 <= k0:
        return None
    need = zoom_factor(q0, q1, k0, k1, max_side)
    shown = int(getattr(source, "factor", 1))
    if need >= shown:
        return None  # the overview already has a pixel per screen pixel (or finer)
    if isinstance(source, PyramidHeatmapSource):
        levels = source.pyramid.levels
        usable = [i for i, lv in enumerate(levels) if lv.factor <= need]
        if usable:  # a stored level is fine enough: slice it, aligned to its tiles
            lv = levels[usable[-1]]
            f = lv.factor
            r0, c0 = q0 // f, k0 // f
            r1, c1 = -(-q1 // f), -(-k1 // f)
            index = source.num_heads if head == MEAN else int(head)
            array = np.ascontiguousarray(lv.max[index, r0:r1, c0:c1])
            dead = None if lv.all_masked is None else np.ascontiguousarray(lv.all_masked[r0:r1, c0:c1])
            if dead is not None and not dead.any():
                dead = None
            return ZoomTile(head, r0 * f, c0 * f, f, array, dead)
        array, f = source.region(head, q0, q1, k0, k1, max_side)  # exact rows, max-tiled
        return ZoomTile(
            head, q0, k0, f, np.asarray(array, dtype=np.float32), _region_masked(source.mask, q0, q1, k0, k1, f)
        )
    weights = source.mean if head == MEAN else source.weights[int(head)]  # [L, Lk]
    array = tile_reduce(np.asarray(weights[q0:q1, k0:k1], dtype=np.float32), need)
    return ZoomTile(head, q0, k0, need, np.ascontiguousarray(array), _region_masked(source.mask, q0, q1, k0, k1, need))
