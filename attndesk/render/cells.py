"""Painting the cells of one heatmap with QPainter: as one image, as vector rectangles, hatched
where masked, with values written in, and a sliding window's band outlined.

Used by ``paint.paint_figure`` for every device (PNG, SVG, PDF, the window); the tiling of large
matrices goes through ``attndesk.runs.select.tile_reduce`` like every other reduction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPainterPath, QPen

from attndesk.runs.select import tile_reduce

from . import colormaps
from .layout import band_outline

TEXT_RGB = (40, 40, 40)
MUTED_RGB = (100, 100, 100)
FRAME_RGB = (90, 90, 90)
BAND_RGB = (230, 60, 60)  # the sliding window's outline: not a colour any sequential map uses


def qcolor(rgb: Sequence[int]) -> QColor:
    return QColor(int(rgb[0]), int(rgb[1]), int(rgb[2]))


def rgb_image(rgb: np.ndarray) -> QImage:
    """QImage (owning its pixels) from a uint8 [h, w, 3] array."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width = rgb.shape[:2]
    return QImage(rgb.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


def block_mean(values: np.ndarray, hidden: np.ndarray, fr: int, fc: int) -> tuple[np.ndarray, np.ndarray]:
    """Average [L, Lk] over tiles of fr x fc cells, counting attendable cells only.

    Returns (means [ceil(L/fr), ceil(Lk/fc)], tile_hidden); a tile is hidden only when every
    cell in it is. Edge tiles are short (the padding is neither a weight nor masked).
    """
    ignore = hidden if hidden.any() else None
    means = tile_reduce(values, (fr, fc), "mean", ignore=ignore)
    return means, tile_reduce(hidden, (fr, fc), "all")


@dataclass
class CellStyle:
    """How one heatmap's cells are coloured: colormap, colour range, and the pen scale."""

    cmap: str
    vmin: float
    vmax: float
    vector: bool
    pt: float  # device pixels per point


def draw_cells_image(
    p: QPainter, target: QRectF, values: np.ndarray, hidden: np.ndarray, style: CellStyle
) -> tuple[QRectF, np.ndarray]:
    """One image, block-averaged down to the device pixels it covers (x2 for print).

    Returns the tile grid's rectangle (it may reach past ``target`` at a ragged edge: clipped)
    and which tiles are wholly masked."""
    rows, cols = values.shape
    scale = 2.0 if style.vector else 1.0
    t = p.transform()
    px_w = max(1, math.ceil(target.width() * math.hypot(t.m11(), t.m12()) * scale))
    px_h = max(1, math.ceil(target.height() * math.hypot(t.m21(), t.m22()) * scale))
    limit = 1024 if style.vector else 1 << 30  # vector files: 2048^2 cells stay a few MB
    fr = max(1, -(-rows // min(px_h, limit)))  # cells per tile along each axis
    fc = max(1, -(-cols // min(px_w, limit)))
    grid = QRectF(target)
    if (fr, fc) != (1, 1):
        values, hidden = block_mean(values, hidden, fr, fc)
        grid.setWidth(target.width() * values.shape[1] * fc / cols)
        grid.setHeight(target.height() * values.shape[0] * fr / rows)
    rgb = colormaps.map_values(values, style.cmap, style.vmin, style.vmax)  # [rows, cols, 3]
    rgb[hidden] = colormaps.mask_rgb(style.cmap)
    p.save()
    p.setClipRect(target, Qt.ClipOperation.IntersectClip)
    p.drawImage(grid, rgb_image(rgb))
    p.restore()
    return grid, hidden


def draw_cells_vector(p: QPainter, target: QRectF, values: np.ndarray, hidden: np.ndarray, style: CellStyle) -> None:
    """Cells as filled paths, one per colour: runs of equal colour in a row become one rectangle."""
    rows, cols = values.shape
    lut = colormaps.lookup_table(style.cmap)
    index = colormaps.value_indices(values, style.vmin, style.vmax, len(lut))
    index[hidden] = -1  # masked: painted in the mask colour
    cw, ch = target.width() / cols, target.height() / rows
    overlap = min(cw, ch) * 0.02  # hides hairline seams between neighbouring cells in viewers
    paths: dict[int, QPainterPath] = {}
    for r in range(rows):
        row = index[r]
        edges = np.flatnonzero(np.diff(row)) + 1
        starts, ends = np.concatenate(([0], edges)), np.concatenate((edges, [cols]))
        y = target.top() + r * ch
        for s, e in zip(starts.tolist(), ends.tolist()):
            path = paths.get(int(row[s]))
            if path is None:
                path = paths[int(row[s])] = QPainterPath()
                path.setFillRule(Qt.FillRule.WindingFill)  # overlaps must not cancel (even-odd would)
            right_pad = overlap if e < cols else 0.0
            bottom_pad = overlap if r < rows - 1 else 0.0
            path.addRect(QRectF(target.left() + s * cw, y, (e - s) * cw + right_pad, ch + bottom_pad))
    p.setPen(Qt.PenStyle.NoPen)
    for code, path in paths.items():
        p.fillPath(path, qcolor(colormaps.mask_rgb(style.cmap)) if code < 0 else qcolor(lut[code]))


def row_runs(hidden: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Masked cells as rectangles (row0, row1, col0, col1), half-open, merged along rows and
    then down identical consecutive rows (a padding column becomes one rectangle)."""
    runs: list[tuple[int, int, int, int]] = []
    open_runs: dict[tuple[int, int], int] = {}  # (col0, col1) -> start row of a run still growing
    for r in range(hidden.shape[0]):
        row = np.concatenate(([False], hidden[r], [False]))
        edges = np.flatnonzero(row[1:] != row[:-1])
        spans = set(zip(edges[0::2].tolist(), edges[1::2].tolist()))
        for span in list(open_runs):
            if span not in spans:
                runs.append((open_runs.pop(span), r, span[0], span[1]))
        for span in spans:
            open_runs.setdefault(span, r)
    for span, start in open_runs.items():
        runs.append((start, hidden.shape[0], span[0], span[1]))
    return runs


def hatch_segments(rects: Sequence[QRectF], spacing: float) -> list[QLineF]:
    """45-degree hatch lines covering the union of ``rects``, merged where they continue from
    one rectangle into the next so a masked triangle costs one line per stroke, not per row."""
    step = spacing * math.sqrt(2.0)  # along x + y = c, perpendicular spacing -> c spacing
    cs, xs, xe = [], [], []
    for rect in rects:
        x0, y0, x1, y1 = rect.left(), rect.top(), rect.right(), rect.bottom()
        c = np.arange(math.floor((x0 + y0) / step) + 1, math.ceil((x1 + y1) / step)) * step
        start, end = np.maximum(x0, c - y1), np.minimum(x1, c - y0)
        keep = end > start + 1e-9
        cs.append(c[keep])
        xs.append(start[keep])
        xe.append(end[keep])
    if not cs or not sum(len(c) for c in cs):
        return []
    c, x_start, x_end = np.concatenate(cs), np.concatenate(xs), np.concatenate(xe)
    order = np.lexsort((x_start, c))
    c, x_start, x_end = c[order], x_start[order], x_end[order]
    # a new stroke starts where c changes or where the previous piece stops short of this one
    # (pieces on one line never overlap, so comparing with the previous end suffices)
    breaks = np.ones(len(c), dtype=bool)
    breaks[1:] = (c[1:] != c[:-1]) | (x_start[1:] > x_end[:-1] + 1e-6)
    first = np.flatnonzero(breaks)
    last = np.append(first[1:], len(c)) - 1
    return [
        QLineF(x_start[i], c[i] - x_start[i], x_end[j], c[i] - x_end[j]) for i, j in zip(first.tolist(), last.tolist())
    ]


def draw_hatch(p: QPainter, target: QRectF, hidden: np.ndarray, style: CellStyle, bounds: QRectF | None = None) -> None:
    """Hatch the hidden cells of a rows x cols grid spanning ``target`` (over their mask colour)."""
    rows, cols = hidden.shape
    cw, ch = target.width() / cols, target.height() / rows
    rects = [
        QRectF(target.left() + c0 * cw, target.top() + r0 * ch, (c1 - c0) * cw, (r1 - r0) * ch)
        for r0, r1, c0, c1 in row_runs(hidden)
    ]
    if bounds is not None:  # a tile grid may reach past the map; SVG ignores clipping, so cut here
        rects = [r for r in (rect.intersected(bounds) for rect in rects) if not r.isEmpty()]
    clip = QPainterPath()
    clip.setFillRule(Qt.FillRule.WindingFill)
    for rect in rects:
        clip.addRect(rect)
    p.save()
    # exact pixels in PNG: the hatch is either the hatch colour or the mask colour, never a blend
    p.setRenderHint(QPainter.RenderHint.Antialiasing, style.vector)
    p.setClipPath(clip, Qt.ClipOperation.IntersectClip)
    width = style.pt * 0.6 if style.vector else max(1.0, style.pt * 0.6)
    p.setPen(QPen(qcolor(colormaps.hatch_rgb(style.cmap)), width))
    p.drawLines(hatch_segments(rects, max(4.0, style.pt * 3.5)))
    p.restore()


def draw_values(
    p: QPainter, target: QRectF, values: np.ndarray, hidden: np.ndarray, style: CellStyle, font: QFont
) -> None:
    """Write each unmasked cell's value, dark on light colours and light on dark ones."""
    rows, cols = values.shape
    cw, ch = target.width() / cols, target.height() / rows
    p.setFont(font)
    rgb = colormaps.map_values(values, style.cmap, style.vmin, style.vmax).astype(np.float64)
    luminance = rgb @ np.array([0.2126, 0.7152, 0.0722])
    dark, light = QColor(20, 20, 20), QColor(250, 250, 250)
    for r in range(rows):
        for c in range(cols):
            if hidden[r, c]:
                continue
            p.setPen(dark if luminance[r, c] > 140 else light)
            p.drawText(
                QRectF(target.left() + c * cw, target.top() + r * ch, cw, ch),
                int(Qt.AlignmentFlag.AlignCenter),
                f"{values[r, c]:.2f}".replace("-0.00", "0.00"),
            )


def draw_window_band(
    p: QPainter, target: QRectF, rows: int, cols: int, window: int, causal: bool, width: float
) -> None:
    """Outline a sliding window's band over the map (``rows`` x ``cols`` token cells)."""
    cw, ch = target.width() / cols, target.height() / rows
    pen = QPen(qcolor(BAND_RGB), width)
    pen.setJoinStyle(Qt.PenJoinStyle.MiterJoin)
    p.save()
    p.setClipRect(target, Qt.ClipOperation.IntersectClip)
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    for line in band_outline(rows, cols, window, causal=causal):
        path = QPainterPath(QPointF(target.left() + line[0][0] * cw, target.top() + line[0][1] * ch))
        for x, y in line[1:]:
            path.lineTo(target.left() + x * cw, target.top() + y * ch)
        p.drawPath(path)
    p.restore()
