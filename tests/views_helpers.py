"""Helpers for the teaching-view tests: read the colour a MatrixPlot draws in one cell."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF


def cell_pixel(plot, row: int, col: int) -> tuple[int, int, int]:
    """RGB at the centre of cell (row, col) of a MatrixPlot, as painted on screen."""
    image = plot.graphics.grab().toImage()
    scene = plot.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
    point = plot.graphics.mapFromScene(scene)
    ratio = image.devicePixelRatio()
    color = image.pixelColor(int(point.x() * ratio), int(point.y() * ratio))
    return color.red(), color.green(), color.blue()


def close_rgb(a, b, tol: int = 6) -> bool:
    return bool(np.all(np.abs(np.asarray(a, dtype=int) - np.asarray(b, dtype=int)) <= tol))
