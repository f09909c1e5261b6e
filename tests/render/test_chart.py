"""The line charts' shared pieces, drawn on a QImage: the page and its line height, a series as a
line through its points with each point marked (or not)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QImage, QPainter

from attndesk.render.chart import begin_chart, paint_series


def _drawn(draw, size=(60, 40)) -> np.ndarray:
    image = QImage(*size, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    draw(painter)
    painter.end()
    return np.frombuffer(image.constBits(), np.uint8).reshape(size[1], size[0], 4)[..., :3].copy()


def test_the_page_is_white_and_its_line_follows_its_height(qapp):
    lines = []
    pixels = _drawn(lambda p: lines.append(begin_chart(p, QRectF(0, 0, 60, 40), "")))
    assert lines == [pytest.approx(12 * 1.6)] and (pixels == 255).all()
    _drawn(lambda p: lines.append(begin_chart(p, QRectF(0, 0, 900, 900), "")))
    assert lines[1] == pytest.approx(20 * 1.6)


def test_a_series_is_a_line_through_its_points_each_marked(qapp):
    red = np.array([0, 0, 255])  # QImage RGB32 in memory: blue, green, red
    one = _drawn(lambda p: paint_series(p, [QPointF(30, 20)], "#ff0000"))
    marked = np.argwhere((one != 255).any(axis=-1))
    assert len(marked) and (np.abs(marked - [20, 30]) <= 4).all()  # a ring of radius 2.5 around the point, no line
    assert any((one[y, x] == red).all() for y, x in marked)
    assert (_drawn(lambda p: paint_series(p, [QPointF(30, 20)], "#ff0000", marks=False)) == 255).all()
    two = _drawn(lambda p: paint_series(p, [QPointF(5, 20), QPointF(55, 20)], "#ff0000", marks=False))
    assert (two[20, 10:50] == red).all() and (two[5] == 255).all()
