"""Figures of an edge circuit (PNG/SVG, QPainter): the graph with its layers as columns, each
edge's width by |score| and its colour by sign, and the faithfulness curve beside the random
edge sets' mean and spread. ``layout`` is pure geometry (no Qt), for any view of the graph."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPen, QPolygonF

from .chart import begin_chart, paint_series, paint_value_grid, paint_x_labels
from .export import write
from .layout import nice_ticks, tick_format

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

_STACKS = {"enc": 0, "": 1, "dec": 1, "cross": 1}
_NODE = re.compile(r"^(?:(enc|dec|cross)\.)?(?:L(\d+)\.(H|KV|MLP)(\d*)|(embed))$")


def column_key(node: str) -> tuple[int, int, int]:
    """Where a node stands in the forward pass: (stack, layer, 0 embed / 1 self heads / 2 cross
    heads / 3 MLP); the logits after everything."""
    if node == "logits":
        return (9, 0, 0)
    match = _NODE.match(node)
    if match is None:
        return (8, 0, 0)
    prefix, layer, what, _, embed = match.groups()
    stack = _STACKS[prefix or ""]
    if embed:
        return (stack, -1, 0)
    sub = 3 if what == "MLP" else (2 if prefix == "cross" else 1)
    return (stack, int(layer), sub)


def layout(nodes: Iterable[str]) -> dict[str, tuple[float, float]]:
    """node -> (x, y) in [0, 1]: one column per key of ``column_key``, nodes spread down a column."""
    nodes = list(dict.fromkeys(nodes))
    columns = sorted({column_key(n) for n in nodes})
    where: dict[str, tuple[float, float]] = {}
    for i, key in enumerate(columns):
        members = [n for n in nodes if column_key(n) == key]
        x = 0.5 if len(columns) == 1 else i / (len(columns) - 1)
        for j, node in enumerate(members):
            where[node] = (x, 0.5 if len(members) == 1 else j / (len(members) - 1))
    return where


def _kind_dash(kind: str):
    return {"k": Qt.PenStyle.DashLine, "v": Qt.PenStyle.DotLine}.get(kind, Qt.PenStyle.SolidLine)


def write_circuit_figure(
    table: pd.DataFrame, circuit, path: str | os.PathLike, *, title: str = "", size: tuple[int, int] = (1400, 900)
) -> Path:
    """The circuit's edges (every node of the table drawn, the circuit's edges as lines: width by
    |score|, red positive / blue negative; key inputs dashed, value inputs dotted), PNG or SVG."""
    edges = set(circuit)
    nodes = list(dict.fromkeys([*table["src"], *table["dst"]]))
    where = layout(nodes)
    rows = table[[(s, d, k) in edges for s, d, k in zip(table["src"], table["dst"], table["kind"])]]
    biggest = float(np.abs(rows["score"]).max()) if len(rows) else 1.0
    used = set(rows["src"]) | set(rows["dst"])

    def paint(painter, rect) -> None:
        line = begin_chart(painter, rect, title, font=(10, 60))
        area = QRectF(
            rect.left() + line * 3, rect.top() + line * 2, rect.width() - line * 6, rect.height() - line * 3.5
        )

        def at(node: str) -> QPointF:
            x, y = where[node]
            return QPointF(area.left() + x * area.width(), area.top() + y * area.height())

        for src, dst, kind, score in rows[["src", "dst", "kind", "score"]].itertuples(index=False):
            colour = QColor("#d62728" if score >= 0 else "#1f77b4")
            colour.setAlphaF(0.35 + 0.65 * abs(score) / (biggest or 1.0))
            pen = QPen(colour, 0.5 + 5.5 * abs(score) / (biggest or 1.0))
            pen.setStyle(_kind_dash(kind))
            painter.setPen(pen)
            painter.drawLine(at(src), at(dst))
        radius = max(3.0, line * 0.3)
        for node in nodes:
            point = at(node)
            painter.setPen(QPen(QColor("black"), 1))
            painter.setBrush(QColor("#333333" if node in used else "#dddddd"))
            painter.drawEllipse(point, radius, radius)
            painter.setPen(QColor("black" if node in used else "#999999"))
            painter.drawText(
                QRectF(point.x() - line * 3, point.y() + radius, line * 6, line), Qt.AlignmentFlag.AlignCenter, node
            )
        painter.setBrush(Qt.BrushStyle.NoBrush)

    return write(paint, path, size=size, title=title)


def _curve_axis(values: np.ndarray) -> tuple[float, float, list[float], str]:
    """(low, high, ticks, tick format) of a faithfulness axis: at least [0, 1], out to every finite value."""
    finite = values[np.isfinite(values)]
    lo, hi = min(0.0, float(finite.min(initial=0.0))), max(1.0, float(finite.max(initial=1.0)))
    ticks = nice_ticks(lo, hi, 6)
    return min(lo, ticks[0]), max(hi, ticks[-1]), ticks, tick_format(ticks)


def _paint_curve_series(painter, at, x: np.ndarray, series: dict[str, np.ndarray], spread: np.ndarray) -> None:
    """The random sets' band of one standard deviation, then the random mean and the circuit's curve."""
    band = [at(u, m + s) for u, m, s in zip(x, series["random"], spread) if np.isfinite(m)]
    band += [at(u, m - s) for u, m, s in reversed(list(zip(x, series["random"], spread))) if np.isfinite(m)]
    if band:
        shade = QColor("#7f7f7f")
        shade.setAlphaF(0.25)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(shade)
        painter.drawPolygon(QPolygonF(band))
        painter.setBrush(Qt.BrushStyle.NoBrush)
    for key, colour in (("random", "#7f7f7f"), ("circuit", "#d62728")):
        paint_series(painter, [at(u, v) for u, v in zip(x, series[key]) if np.isfinite(v)], colour)


def _paint_curve_legend(painter, area: QRectF, line: float) -> None:
    """The plot's frame, the two series' names in their colours and the x axis's name."""
    painter.setPen(QPen(QColor("black"), 1))
    painter.drawRect(area)
    painter.setPen(QColor("#d62728"))
    painter.drawText(
        QRectF(area.left() + line * 0.5, area.top() + line * 0.3, area.width(), line),
        Qt.AlignmentFlag.AlignLeft,
        "top edges by |score|",
    )
    painter.setPen(QColor("#7f7f7f"))
    painter.drawText(
        QRectF(area.left() + line * 0.5, area.top() + line * 1.3, area.width(), line),
        Qt.AlignmentFlag.AlignLeft,
        "random edges: mean ± std",
    )
    painter.setPen(QColor("black"))
    painter.drawText(
        QRectF(area.left(), area.bottom() + line * 1.2, area.width(), line),
        Qt.AlignmentFlag.AlignCenter,
        "share of edges kept",
    )


def write_faithfulness_curve(
    curve: pd.DataFrame, path: str | os.PathLike, *, title: str = "", size: tuple[int, int] = (1200, 800)
) -> Path:
    """Faithfulness against the share of edges kept: the ranked circuit's, and the random edge
    sets' mean with a band of one standard deviation, PNG or SVG."""
    x = curve["fraction"].to_numpy(dtype=float)
    series = {
        "circuit": curve["faithfulness"].to_numpy(dtype=float),
        "random": curve["random_mean"].to_numpy(dtype=float),
    }
    spread = curve["random_std"].to_numpy(dtype=float)
    lo, hi, ticks, fmt = _curve_axis(
        np.concatenate([series["circuit"], series["random"] + spread, series["random"] - spread])
    )

    def paint(painter, rect) -> None:
        line = begin_chart(painter, rect, title)
        area = QRectF(
            rect.left() + line * 4, rect.top() + line * 2.5, rect.width() - line * 5, rect.height() - line * 5
        )

        def at(u: float, v: float) -> QPointF:
            return QPointF(area.left() + area.width() * u, area.bottom() - area.height() * (v - lo) / (hi - lo))

        paint_value_grid(painter, area, at, ticks, fmt, (0.0, 1.0), line)
        paint_x_labels(painter, area, at, nice_ticks(0.0, 1.0, 6), lambda t: f"{t:.0%}", line)
        _paint_curve_series(painter, at, x, series, spread)
        _paint_curve_legend(painter, area, line)

    return write(paint, path, size=size, title=title)


__all__ = ["column_key", "layout", "write_circuit_figure", "write_faithfulness_curve"]
