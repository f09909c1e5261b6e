"""Where a grid of heatmaps goes: pure geometry (no painter, no Qt), shared by the exported
figure and the window's heatmap panel, so both use their space the same way and neither overlaps.

- ``Rect``: an axis-aligned rectangle (device pixels, y down).
- ``GridSpec`` -> ``pack_grid(spec, area)`` -> ``GridLayout``: how many columns, how large each
  map is, and the rectangles of every map, title, label band and K/V group header. Each row is
  spaced for what it carries: a row whose maps show key labels below them (the last row, and the
  maps of the row above an incomplete last row) gets the label band, the others do not.
- ``choose_figure_layout``: the exported figure's search over label sizes, rotation and label
  subsets, measuring text through a ``TextMeasure`` the painter supplies.
- ``label_step``, ``nice_ticks``, ``tick_format``, ``band_outline``: small pure helpers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    @property
    def center_x(self) -> float:
        return self.x + self.w / 2

    def intersects(self, other: Rect, tol: float = 0.5) -> bool:
        """True when the two overlap by more than ``tol`` px both ways (touching edges do not)."""
        return (
            min(self.right, other.right) - max(self.x, other.x) > tol
            and min(self.bottom, other.bottom) - max(self.y, other.y) > tol
        )

    def contains(self, other: Rect, tol: float = 0.5) -> bool:
        return (
            other.x >= self.x - tol
            and other.y >= self.y - tol
            and other.right <= self.right + tol
            and other.bottom <= self.bottom + tol
        )


# ---------------------------------------------------------------------------------------------
# the grid


@dataclass(frozen=True)
class GridSpec:
    """What a grid must hold: ``n`` maps of ``cells_y`` x ``cells_x`` cells, and the room around them.

    ``left_band``: room left of the first column (query labels, axis title); ``bottom_band``:
    room below a map whose key labels are shown; ``title_h`` above every map; ``group`` maps
    sharing a K/V head stay side by side in one row under a ``group_h`` header (1 = no groups),
    with ``group_gap`` extra between groups. ``aspect_limit``: how far a cell may stretch
    from square when the matrix is not square (1 = square cells).
    """

    n: int
    cells_y: int
    cells_x: int
    left_band: float
    bottom_band: float
    title_h: float
    gap_x: float
    gap_y: float
    group: int = 1
    group_h: float = 0.0
    group_gap: float = 0.0
    aspect_limit: float = 1.0


@dataclass(frozen=True)
class GridLayout:
    spec: GridSpec
    cols: int
    rows: int
    map_w: float
    map_h: float
    origin_x: float  # left edge of the first column's maps
    row_tops: tuple[float, ...] = field(default_factory=tuple)  # top of each row (group header or title)

    @property
    def cell_w(self) -> float:
        return self.map_w / self.spec.cells_x

    @property
    def cell_h(self) -> float:
        return self.map_h / self.spec.cells_y

    def x_labelled(self, index: int) -> bool:
        """Whether map ``index`` shows the key labels: no map sits below it."""
        return index + self.cols >= self.spec.n

    def y_labelled(self, index: int) -> bool:
        return index % self.cols == 0

    def _column_x(self, col: int) -> float:
        s = self.spec
        groups_before = col // s.group if s.group > 1 else 0
        return self.origin_x + col * (self.map_w + s.gap_x) + groups_before * s.group_gap

    def map_rect(self, index: int) -> Rect:
        r, c = divmod(index, self.cols)
        y = self.row_tops[r] + self.spec.group_h + self.spec.title_h
        return Rect(self._column_x(c), y, self.map_w, self.map_h)

    def title_rect(self, index: int) -> Rect:
        m = self.map_rect(index)
        return Rect(m.x, m.y - self.spec.title_h, m.w, self.spec.title_h)

    def x_label_rect(self, index: int) -> Rect:
        m = self.map_rect(index)
        return Rect(m.x, m.bottom, m.w, self.spec.bottom_band)

    def y_label_rect(self, index: int) -> Rect:
        m = self.map_rect(index)
        return Rect(m.x - self.spec.left_band, m.y, self.spec.left_band, m.h)

    def groups(self) -> list[tuple[int, list[int], Rect]]:
        """(group number, its maps in this row, header rect) for each group segment of each row."""
        s = self.spec
        if s.group <= 1:
            return []
        out = []
        for r in range(self.rows):
            members = list(range(r * self.cols, min(s.n, (r + 1) * self.cols)))
            for g in sorted({i // s.group for i in members}):
                part = [i for i in members if i // s.group == g]
                first, last = self.map_rect(part[0]), self.map_rect(part[-1])
                out.append((g, part, Rect(first.x, self.row_tops[r], last.right - first.x, s.group_h)))
        return out

    def bounds(self) -> Rect:
        """Everything the grid draws: maps, titles, headers and label bands."""
        rects = [self.map_rect(i) for i in range(self.spec.n)]
        top = self.row_tops[0]
        left = min(r.x for r in rects) - self.spec.left_band
        bottom = max(
            self.map_rect(i).bottom + (self.spec.bottom_band if self.x_labelled(i) else 0.0) for i in range(self.spec.n)
        )
        right = max(r.right for r in rects)
        return Rect(left, top, right - left, bottom - top)


def column_choices(n: int, group: int) -> list[int]:
    """Column counts worth trying: any without an empty last row; with groups, whole groups per
    row (or whole rows per group when a group is wider than a row)."""
    out = []
    for cols in range(1, n + 1):
        rows = math.ceil(n / cols)
        if rows * cols - n >= cols:
            continue
        if 1 < group < n and cols % group and group % cols:
            continue
        out.append(cols)
    return out


def _row_heights(spec: GridSpec, cols: int, map_h: float) -> list[float]:
    rows = math.ceil(spec.n / cols)
    heights = [spec.group_h + spec.title_h + map_h] * rows
    heights[-1] += spec.bottom_band
    if rows > 1 and spec.n % cols:
        heights[-2] += spec.bottom_band  # the maps above the last row's empty places show labels too
    return heights


def _cell_size(spec: GridSpec, area: Rect, cols: int) -> tuple[float, float] | None:
    rows = math.ceil(spec.n / cols)
    groups = (cols - 1) // spec.group if spec.group > 1 else 0
    avail_w = area.w - spec.left_band - (cols - 1) * spec.gap_x - groups * spec.group_gap
    fixed_h = sum(_row_heights(spec, cols, 0.0)) + (rows - 1) * spec.gap_y
    avail_h = area.h - fixed_h
    if avail_w <= 0 or avail_h <= 0:
        return None
    cw, ch = avail_w / cols / spec.cells_x, avail_h / rows / spec.cells_y
    cell = min(cw, ch)
    return min(cw, cell * spec.aspect_limit), min(ch, cell * spec.aspect_limit)


def pack_grid(spec: GridSpec, area: Rect) -> GridLayout | None:
    """The column count giving the largest cells in ``area``, centred in it; None when nothing fits."""
    best = None
    for cols in column_choices(spec.n, spec.group):
        size = _cell_size(spec, area, cols)
        if size is None:
            continue
        score = size[0] * size[1]
        if best is None or score > best[0] * 1.0001:
            best = (score, cols, size)
    if best is None:
        return None
    _, cols, (cw, ch) = best
    map_w, map_h = cw * spec.cells_x, ch * spec.cells_y
    heights = _row_heights(spec, cols, map_h)
    groups = (cols - 1) // spec.group if spec.group > 1 else 0
    used_w = spec.left_band + cols * map_w + (cols - 1) * spec.gap_x + groups * spec.group_gap
    used_h = sum(heights) + (len(heights) - 1) * spec.gap_y
    top = area.y + max(0.0, (area.h - used_h) / 2)
    tops = []
    for h in heights:
        tops.append(top)
        top += h + spec.gap_y
    origin_x = area.x + max(0.0, (area.w - used_w) / 2) + spec.left_band
    return GridLayout(spec, cols, len(heights), map_w, map_h, origin_x, tuple(tops))


# ---------------------------------------------------------------------------------------------
# the exported figure's layout search


class TextMeasure(Protocol):
    """Text sizes on the target device, in device pixels (the painter implements it with Qt)."""

    def pt(self, points: float) -> float:
        """Device pixels of a length given in points."""

    def line(self, tick_pt: float) -> float:
        """Height of one line of tick labels at that size."""

    def widest(self, texts: Sequence[str], tick_pt: float) -> float:
        """Width of the widest of ``texts`` at that size, capped at the label cap."""


@dataclass(frozen=True)
class FigureText:
    """What the figure's labels are and the fixed text heights around them."""

    query_labels: Sequence[str]
    key_labels: Sequence[str]
    first_query: int
    first_key: int
    tokens_per_cell: int
    title_h: float  # one heatmap title
    axis_h: float  # an axis title line
    group_h: float = 0.0  # a K/V group header (0 = no groups)
    group: int = 1


@dataclass(frozen=True)
class FigureLayout:
    grid: GridLayout
    tick_pt: float
    rotated: bool
    x_step: int
    y_step: int
    x_extent: float  # how far the key labels reach below a map (offset excluded)
    y_extent: float  # how far the query labels reach left of a map
    label_offset: float  # gap between a map's edge and its labels (tick included)


def label_texts(labels: Sequence[str], step: int, first: int = 0) -> list[tuple[int, str]]:
    """The labels shown at ``step``: all of them, or every step-th named with its position."""
    if step == 1:
        return list(enumerate(labels))
    return [(i, f"{labels[i]} ({first + i})") for i in range(0, len(labels), step)]


def label_step(count: int, cell: float, line: float) -> int:
    """Show every k-th label (k from 1, 2, 5, 10, 20, 25, 50, ...) so labels never overlap."""
    if cell >= line * 0.92:
        return 1
    need = line * 1.05 / max(cell, 1e-9)
    mag = 1
    while True:
        for m in (1, 2, 5, 10, 20, 25, 50):
            if m * mag >= need:
                return min(m * mag, max(1, count))
        mag *= 100


def _figure_once(
    text: FigureText,
    m: TextMeasure,
    area: Rect,
    cells: tuple[int, int, int],
    tick_pt: float,
    rotated: bool,
    x_step: int,
    y_step: int,
) -> FigureLayout | None:
    n, rows, cols = cells
    line = m.line(tick_pt)
    pad = m.pt(3)
    offset = pad + m.pt(2.5)
    y_extent = m.widest([t for _, t in label_texts(text.query_labels, y_step, text.first_query)], tick_pt)
    x_extent = (
        m.widest([t for _, t in label_texts(text.key_labels, x_step, text.first_key)], tick_pt) if rotated else line
    )
    spec = GridSpec(
        n=n,
        cells_y=rows,
        cells_x=cols,
        left_band=y_extent + offset + pad + text.axis_h,
        bottom_band=x_extent + offset + pad + text.axis_h,
        title_h=text.title_h,
        gap_x=max(m.pt(10), line * 1.3),
        gap_y=m.pt(8),
        group=text.group,
        group_h=text.group_h,
        group_gap=m.pt(8) if text.group > 1 else 0.0,
        aspect_limit=1.0 if rows == cols else 4.0,
    )
    grid = pack_grid(spec, area)
    if grid is None:
        return None
    f = text.tokens_per_cell
    x_step = max(x_step, label_step(len(text.key_labels), grid.cell_w / f, line))
    y_step = max(y_step, label_step(len(text.query_labels), grid.cell_h / f, line))
    return FigureLayout(grid, tick_pt, rotated, x_step, y_step, x_extent, y_extent, offset)


def _figure_settled(
    text: FigureText, m: TextMeasure, area: Rect, cells, tick_pt: float, rotated: bool
) -> FigureLayout | None:
    """Label subsets depend on the cell size, which depends on the room the labels take:
    iterate until the shown labels are the ones that were measured."""
    x_step = y_step = 1
    lay = None
    for _ in range(4):
        lay = _figure_once(text, m, area, cells, tick_pt, rotated, x_step, y_step)
        if lay is None or (lay.x_step <= x_step and lay.y_step <= y_step):
            break
        x_step, y_step = max(x_step, lay.x_step), max(y_step, lay.y_step)
    if lay is not None:
        lay = replace(lay, x_step=max(x_step, lay.x_step), y_step=max(y_step, lay.y_step))
    return lay


def choose_figure_layout(text: FigureText, m: TextMeasure, area: Rect, cells: tuple[int, int, int]) -> FigureLayout:
    """The figure's layout: the largest tick size (9, 8, 7 pt) at which every label fits,
    horizontal key labels when they fit their columns, else rotated; else the first rotated
    layout that fits at all (showing a labelled subset). ``cells`` = (maps, rows, columns)."""
    fallback = None
    for tick_pt in (9.0, 8.0, 7.0):
        horizontal = _figure_settled(text, m, area, cells, tick_pt, rotated=False)
        if horizontal is not None and horizontal.y_step == 1:
            cell_w = horizontal.grid.cell_w / text.tokens_per_cell
            if m.widest(text.key_labels, tick_pt) + m.pt(3) <= cell_w:
                return horizontal
        rotated = _figure_settled(text, m, area, cells, tick_pt, rotated=True)
        if rotated is None:
            continue
        if rotated.x_step == 1 and rotated.y_step == 1:
            return rotated
        fallback = fallback or rotated
    if fallback is not None:
        return fallback
    squeezed = _figure_settled(text, m, area, cells, 7.0, rotated=True)
    return squeezed or _squashed(text, area, cells)


def _squashed(text: FigureText, area: Rect, cells) -> FigureLayout:
    """Pathological sizes (a 16 px export): one column, no room for labels, still no overlap."""
    n, rows, cols = cells
    spec = GridSpec(n, rows, cols, 0.0, 0.0, 0.0, 0.0, 0.0, aspect_limit=math.inf)
    h = max(1.0, area.h / n)
    grid = GridLayout(spec, 1, n, max(1.0, area.w), h, area.x, tuple(area.y + i * h for i in range(n)))
    return FigureLayout(grid, 7.0, True, len(text.key_labels), len(text.query_labels), 0.0, 0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# small pure helpers


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round-numbered tick values inside [lo, hi] (about ``target`` of them)."""
    span = hi - lo
    if not span > 0 or not math.isfinite(span):
        return [lo]
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        value = first + len(ticks) * step
    return ticks


def tick_format(ticks: Sequence[float]) -> str:
    """A format string showing the ticks' step without trailing noise."""
    if len(ticks) < 2:
        return "{:.3g}"
    step = abs(ticks[1] - ticks[0])
    decimals = max(0, min(6, -math.floor(math.log10(step) + 1e-9)))
    if any(abs(t) >= 1e5 for t in ticks):
        return "{:.2g}"
    if step * 10**decimals % 1 > 1e-6:  # steps like 0.25 need one more digit
        decimals += 1
    return f"{{:.{decimals}f}}"


def band_outline(rows: int, cols: int, window: int, *, causal: bool) -> list[list[tuple[float, float]]]:
    """The edges of a sliding window's band (query i sees key j when |i - j| < window) as
    staircase polylines in cell coordinates (x = key, y = query, cell (i, j) = [j, j+1) x [i, i+1)).

    Under a causal mask the band's right edge is the diagonal, already drawn as masked: only the
    left edge is returned then. Edges that fall outside the matrix are left out.
    """
    return [[(x, y) for x, y in line.tolist()] for line in band_edges(rows, cols, window, causal=causal)]


def band_edges(rows: int, cols: int, window: int, *, causal: bool) -> list[np.ndarray]:
    """``band_outline`` as arrays [points, 2] of (x, y), built without a loop per row (a long
    document's band has tens of thousands of steps, drawn in the GUI thread)."""
    shifts = [1 - window] if causal else [1 - window, window]  # edge(i) = i + shift: first key seen, one past the last
    return [line for line in (_staircase(rows, cols, shift) for shift in shifts) if len(line)]


def _staircase(rows: int, cols: int, shift: int) -> np.ndarray:
    """The rows whose edge x = i + shift lies strictly inside the matrix form one run (x grows by
    one a row): each contributes its vertical step (x, i) -> (x, i + 1), joined by horizontal ones."""
    first, last = max(0, 1 - shift), min(rows - 1, cols - 1 - shift)
    if last < first:
        return np.empty((0, 2))
    i = np.arange(first, last + 1, dtype=np.float64)
    points = np.empty((2 * len(i), 2))
    points[0::2, 0] = points[1::2, 0] = i + shift
    points[0::2, 1], points[1::2, 1] = i, i + 1
    return points
