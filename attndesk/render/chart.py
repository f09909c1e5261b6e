"""What the line charts of ``render`` share (the training curves, the faithfulness curve, the
KV-cache curves): the page with its title, the horizontal grid with its values, the labels under
the x axis, and a series drawn as a line through its points."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPen, QPolygonF

At = Callable[[float, float], QPointF]  # (x, y) in the data -> the point on the page
GRID = "#cccccc"


def begin_chart(painter, rect: QRectF, title: str, *, font: tuple[int, int] = (12, 45)) -> float:
    """A white page, antialiased, in a font of 1/``font[1]`` of its height (``font[0]`` px at least),
    with ``title`` centred at the top; the height of a line of text."""
    painter.fillRect(rect, QColor("white"))
    painter.setRenderHint(painter.RenderHint.Antialiasing)
    smallest, per = font
    chosen = QFont()
    chosen.setPixelSize(max(smallest, int(rect.height() / per)))
    painter.setFont(chosen)
    line = chosen.pixelSize() * 1.6
    painter.setPen(QColor("black"))
    painter.drawText(QRectF(rect.left(), rect.top(), rect.width(), line), Qt.AlignmentFlag.AlignCenter, title)
    return line


def paint_value_grid(
    painter, area: QRectF, at: At, ticks: Sequence[float], fmt: str, x_span: tuple[float, float], line: float
) -> None:
    """A grey line across ``x_span`` at each tick, its value right-aligned left of ``area``."""
    for t in ticks:
        painter.setPen(QPen(QColor(GRID), 1))
        painter.drawLine(at(x_span[0], t), at(x_span[1], t))
        painter.setPen(QColor("black"))
        painter.drawText(
            QRectF(area.left() - line * 4, at(x_span[0], t).y() - line / 2, line * 3.6, line),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            fmt.format(t),
        )


def paint_x_labels(
    painter, area: QRectF, at: At, ticks: Sequence[float], label: Callable[[float], str], line: float
) -> None:
    """Each tick's label centred under ``area`` (black)."""
    painter.setPen(QColor("black"))
    for t in ticks:
        painter.drawText(
            QRectF(at(t, 0.0).x() - line * 2, area.bottom() + line * 0.2, line * 4, line),
            Qt.AlignmentFlag.AlignCenter,
            label(t),
        )


def paint_series(painter, points: Sequence[QPointF], colour: QColor | str, *, marks: bool = True) -> None:
    """A line through ``points`` in ``colour`` (2 px), each point marked with a dot when ``marks``;
    the pen stays set (for a legend's swatch)."""
    painter.setPen(QPen(QColor(colour), 2))
    if len(points) > 1:
        painter.drawPolyline(QPolygonF(points))
    if marks:
        for point in points:
            painter.drawEllipse(point, 2.5, 2.5)


__all__ = ["At", "begin_chart", "paint_series", "paint_value_grid", "paint_x_labels"]
