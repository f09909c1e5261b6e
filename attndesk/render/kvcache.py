"""KV-cache figures painted with QPainter: the keep rasters (a panel per layer and K/V head: query
rows down, keys across; kept, evicted, not yet read) and curves (a value against the budget, or
against the row, one line per policy or run). Written atomically as PNG/SVG/PDF by ``export.write``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPen, QPolygonF

from .chart import paint_series
from .export import write
from .layout import nice_ticks, tick_format

KEPT, EVICTED, FUTURE = (31, 119, 180), (255, 187, 120), (255, 255, 255)
COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#000000",
)


def keep_image(keep: np.ndarray) -> np.ndarray:
    """bool [rows, keys] -> uint8 RGB [rows, keys, 3]: kept, evicted (causal but not visible), future."""
    rows, keys = keep.shape
    causal = np.arange(keys)[None, :] <= np.arange(rows)[:, None]
    image = np.empty((rows, keys, 3), np.uint8)
    image[:] = FUTURE
    image[causal & ~keep] = EVICTED
    image[keep] = KEPT
    return image


def write_keep_raster(
    panels: Sequence[tuple[str, np.ndarray]], path: str | os.PathLike, *, title: str, columns: int | None = None
) -> Path:
    """One raster per (label, keep [rows, keys]) in a grid; blue kept, orange evicted, white not yet read."""
    columns = columns or min(4, len(panels))
    grid_rows = -(-len(panels) // columns)
    rows, keys = panels[0][1].shape
    cell = max(2, min(12, 640 // max(rows, keys)))
    pad, line = 24, 18
    width = columns * (keys * cell + pad) + pad
    height = grid_rows * (rows * cell + pad + line) + pad + 2 * line

    def paint(painter, rect) -> None:
        painter.fillRect(rect, QColor("white"))
        painter.setPen(QColor("black"))
        painter.drawText(QRectF(0, 4, rect.width(), line), Qt.AlignmentFlag.AlignCenter, title)
        legend = "blue: kept   orange: evicted   white: not yet read   (rows: queries, columns: keys)"
        painter.drawText(QRectF(0, 4 + line, rect.width(), line), Qt.AlignmentFlag.AlignCenter, legend)
        for index, (label, keep) in enumerate(panels):
            r, c = divmod(index, columns)
            x = pad + c * (keys * cell + pad)
            y = 2 * line + pad + r * (rows * cell + pad + line)
            painter.drawText(QRectF(x, y, keys * cell, line), Qt.AlignmentFlag.AlignCenter, label)
            image = np.ascontiguousarray(np.repeat(np.repeat(keep_image(keep), cell, 0), cell, 1))
            qimage = QImage(image.data, image.shape[1], image.shape[0], image.strides[0], QImage.Format.Format_RGB888)
            painter.drawImage(QRectF(x, y + line, image.shape[1], image.shape[0]), qimage)
            painter.setPen(QColor("#888888"))
            painter.drawRect(QRectF(x, y + line, image.shape[1], image.shape[0]))
            painter.setPen(QColor("black"))

    return write(paint, path, size=(width, height), title=title)


def _scales(lines: Mapping[str, tuple[Sequence[float], Sequence[float]]], log_y: bool, extra: Sequence = ()):
    """(y -> its position on the axis, x ticks, y ticks, (x0, x1), (y0, y1)): the axes' ranges
    cover every point (and the values ``extra``) and their ticks (log10 of the values, floored at
    the smallest positive, for ``log_y``)."""
    xs_all = np.concatenate([np.asarray(x, float) for x, _ in lines.values()]) if lines else np.zeros(1)
    ys_all = np.concatenate([np.asarray(y, float) for _, y in lines.values()]) if lines else np.zeros(1)
    ys_all = np.concatenate([ys_all, *(np.asarray(e, float).reshape(-1) for e in extra)])
    ys_all = ys_all[np.isfinite(ys_all)]
    floor = max(float(ys_all[ys_all > 0].min()) if (ys_all > 0).any() else 1e-6, 1e-12) if log_y else 0.0

    def ty(y: np.ndarray) -> np.ndarray:
        return np.log10(np.maximum(y, floor)) if log_y else y

    y_lo = float(ty(np.asarray([ys_all.min() if len(ys_all) else 0.0]))[0])
    y_hi = float(ty(np.asarray([ys_all.max() if len(ys_all) else 1.0]))[0])
    y_ticks = nice_ticks(min(y_lo, 0.0) if not log_y else np.floor(y_lo), max(y_hi, y_lo + 1e-9), 5)
    x_ticks = nice_ticks(float(xs_all.min()), float(max(xs_all.max(), xs_all.min() + 1)), 6)
    x0, x1 = min(x_ticks[0], float(xs_all.min())), max(x_ticks[-1], float(xs_all.max()))
    y0, y1 = min(y_ticks[0], y_lo), max(y_ticks[-1], y_hi)
    return ty, x_ticks, y_ticks, (x0, max(x1, x0 + 1e-9)), (y0, max(y1, y0 + 1e-9))


def _paint_axes(
    painter, area: QRectF, at, ticks: tuple, corner: tuple[float, float, float], labels: tuple, line: float
):
    """The y grid and its values (``log_y``: as powers of ten), the x values, both axes' names and
    the frame; ``corner`` (x0, x1, y0), ``labels`` (x name, y name, log_y)."""
    (x_ticks, y_ticks), (x0, x1, y0), (x_label, y_label, log_y) = ticks, corner, labels
    fmt = tick_format(y_ticks)
    for t in y_ticks:
        painter.setPen(QPen(QColor("#dddddd"), 1))
        painter.drawLine(at(x0, t), at(x1, t))
        painter.setPen(QColor("black"))
        label = f"1e{t:g}" if log_y else fmt.format(t)
        painter.drawText(QRectF(0, at(x0, t).y() - line / 2, 74, line), Qt.AlignmentFlag.AlignRight, label)
    for t in x_ticks:
        painter.drawText(
            QRectF(at(t, y0).x() - 40, area.bottom() + 4, 80, line), Qt.AlignmentFlag.AlignCenter, f"{t:g}"
        )
    painter.drawText(
        QRectF(area.left(), area.bottom() + line + 6, area.width(), line), Qt.AlignmentFlag.AlignCenter, x_label
    )
    painter.save()
    painter.translate(14, area.center().y())
    painter.rotate(-90)
    painter.drawText(QRectF(-area.height() / 2, -line / 2, area.height(), line), Qt.AlignmentFlag.AlignCenter, y_label)
    painter.restore()
    painter.drawRect(area)


def _paint_band(painter, band, at, ty, colour: str) -> None:
    """The area between ``low`` and ``high`` over ``xs`` (points with a NaN left out), translucent."""
    xs, low, high = (np.asarray(v, float) for v in band)
    good = np.isfinite(low) & np.isfinite(high)
    if good.sum() < 2:
        return
    upper = [at(a, b) for a, b in zip(xs[good], ty(high[good]))]
    lower = [at(a, b) for a, b in zip(xs[good][::-1], ty(low[good][::-1]))]
    fill = QColor(colour)
    fill.setAlpha(50)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(fill)
    painter.drawPolygon(QPolygonF(upper + lower))
    painter.setBrush(Qt.BrushStyle.NoBrush)


def write_curves(
    lines: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    path: str | os.PathLike,
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_y: bool = False,
    size: tuple[int, int] = (1000, 600),
    bands: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]] | None = None,
) -> Path:
    """One line per name: (xs, ys); NaN points are skipped. ``log_y``: a log10 axis (values <= 0 at its floor).
    ``bands``: per name, (xs, low, high) shaded in the line's colour behind it (a spread over texts)."""
    bands = bands or {}
    extra = [v for _, lo, hi in bands.values() for v in (lo, hi)]
    ty, x_ticks, y_ticks, (x0, x1), (y0, y1) = _scales(lines, log_y, extra)

    def paint(painter, rect) -> None:
        painter.fillRect(rect, QColor("white"))
        painter.setRenderHint(painter.RenderHint.Antialiasing)
        line = 18
        painter.setPen(QColor("black"))
        painter.drawText(QRectF(0, 4, rect.width(), line), Qt.AlignmentFlag.AlignCenter, title)
        area = QRectF(80, 2 * line + 10, rect.width() - 260, rect.height() - 3 * line - 50)

        def at(x: float, y: float) -> QPointF:
            return QPointF(
                area.left() + area.width() * (x - x0) / (x1 - x0), area.bottom() - area.height() * (y - y0) / (y1 - y0)
            )

        _paint_axes(painter, area, at, (x_ticks, y_ticks), (x0, x1, y0), (x_label, y_label, log_y), line)
        for index, name in enumerate(lines):
            if name in bands:
                _paint_band(painter, bands[name], at, ty, COLOURS[index % len(COLOURS)])
        for index, (name, (xs, ys)) in enumerate(lines.items()):
            x = np.asarray(xs, float)
            y = np.asarray(ys, float)
            good = np.isfinite(y)
            paint_series(painter, [at(a, b) for a, b in zip(x[good], ty(y[good]))], COLOURS[index % len(COLOURS)])
            ly = area.top() + index * line
            painter.drawLine(QPointF(area.right() + 12, ly + line / 2), QPointF(area.right() + 36, ly + line / 2))
            painter.setPen(QColor("black"))
            painter.drawText(QRectF(area.right() + 42, ly, 150, line), Qt.AlignmentFlag.AlignLeft, name)

    return write(paint, path, size=size, title=title)


__all__ = ["keep_image", "write_curves", "write_keep_raster"]
