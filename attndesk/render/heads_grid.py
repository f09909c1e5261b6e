"""The corpus heads summary as one figure: a panel per metric, each a grid of cells (one row per
part and layer, one column per head) coloured by the metric on the panel's own range, the role's
initial written in each cell. Painted with QPainter, like every attndesk figure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor

from .colormaps import map_values

CELL = 26  # pixels per cell
LABEL_W, TITLE_H, GAP, COLUMNS = 86, 22, 18, 4


@dataclass(frozen=True)
class HeadsGrid:
    """``values[metric]`` [rows, heads] (NaN: no value); ``rows`` label each row ("self 0", ...)."""

    metrics: Sequence[str]
    rows: Sequence[str]
    heads: int
    values: dict[str, np.ndarray]
    roles: np.ndarray  # [rows, heads] of role names
    colormap: str = "viridis"

    def panel_size(self) -> tuple[int, int]:
        return LABEL_W + self.heads * CELL, TITLE_H + len(self.rows) * CELL + 14

    def size(self) -> tuple[int, int]:
        w, h = self.panel_size()
        cols = min(COLUMNS, len(self.metrics))
        lines = -(-len(self.metrics) // cols)
        return GAP + cols * (w + GAP), GAP + lines * (h + GAP) + 20


def _panel(painter, grid: HeadsGrid, metric: str, x0: float, y0: float) -> None:
    values = grid.values[metric]
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    colours = map_values(values, grid.colormap, low, high if high > low else low + 1.0)
    painter.setPen(QColor(0, 0, 0))
    painter.drawText(
        QRectF(x0, y0, LABEL_W + grid.heads * CELL, TITLE_H),
        int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
        f"{metric}  [{low:.3g}, {high:.3g}]",
    )
    for r, label in enumerate(grid.rows):
        y = y0 + TITLE_H + r * CELL
        painter.setPen(QColor(0, 0, 0))
        painter.drawText(
            QRectF(x0, y, LABEL_W - 4, CELL), int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), label
        )
        for h in range(grid.heads):
            rect = QRectF(x0 + LABEL_W + h * CELL, y, CELL - 1, CELL - 1)
            if not np.isfinite(values[r, h]):
                painter.fillRect(rect, QColor(225, 225, 225))
                continue
            red, green, blue = (int(c) for c in colours[r, h])
            painter.fillRect(rect, QColor(red, green, blue))
            painter.setPen(
                QColor(255, 255, 255) if 0.299 * red + 0.587 * green + 0.114 * blue < 140 else QColor(0, 0, 0)
            )
            painter.drawText(rect, int(Qt.AlignmentFlag.AlignCenter), str(grid.roles[r, h])[:1])


def heads_grid_painter(grid: HeadsGrid):
    """``paint(painter, rect)`` for ``attndesk.render.write``."""

    def paint(painter, rect) -> None:
        w, h = grid.panel_size()
        cols = min(COLUMNS, len(grid.metrics))
        for i, metric in enumerate(grid.metrics):
            _panel(painter, grid, metric, GAP + (i % cols) * (w + GAP), GAP + (i // cols) * (h + GAP))
        legend = "letters: role (" + ", ".join(sorted({str(r) for r in np.ravel(grid.roles)})) + ")"
        painter.setPen(QColor(60, 60, 60))
        painter.drawText(
            QRectF(GAP, rect.height() - 22, rect.width() - 2 * GAP, 20),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            legend,
        )

    return paint


__all__ = ["HeadsGrid", "heads_grid_painter"]
