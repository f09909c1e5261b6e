"""An axis that labels cells with tokens: elided, rotated on the x axis, thinned when crowded."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF
from PySide6.QtWidgets import QGraphicsItem

MAX_LABEL_CHARS = 12


def elide(label: str, limit: int = MAX_LABEL_CHARS) -> str:
    label = label.replace("\n", "⏎")
    return label if len(label) <= limit else label[: limit - 1] + "…"


class AxisLabels:
    """Elided labels and the pixel width of the widest, computed once per source and shared
    by every axis (measuring thousands of tokens per axis would stall the GUI thread)."""

    def __init__(self, labels, font: QFont) -> None:
        self.tokens = list(labels)  # as given: a new source with the same tokens reuses these labels
        self.texts = [elide(str(t)) for t in self.tokens]
        metrics = QFontMetricsF(font)
        # the widest label is among the longest by character count; measure only those
        longest = sorted(self.texts, key=len, reverse=True)[:32]
        self.widest = max((metrics.horizontalAdvance(t) for t in longest), default=0.0)


def label_room(widest: float) -> float:
    """Pixels an axis needs across for labels whose widest is ``widest`` px (tick and gap included)."""
    return float(math.ceil(widest) + 10)


def label_font(px: int = 10) -> QFont:
    font = QFont()
    font.setPixelSize(px)
    return font


class TokenAxis(pg.AxisItem):
    """Cell i spans [i, i+1); its label sits at i + 0.5. Only every n-th label is drawn when the
    cells are narrower than a line of text, so labels never overlap (zooming in shows them all).
    The bottom axis draws its labels vertically (long tokens stay readable in narrow columns)."""

    def __init__(self, orientation: str, font_px: int = 10) -> None:
        super().__init__(orientation)
        # tokens take no SI prefix; left on, every range change re-sets the (empty) label's rich text
        self.enableAutoSIPrefix(False)
        self._labels: list[str] = []
        self._widest = 0.0
        self._font = label_font(font_px)
        self._metrics = QFontMetricsF(self._font)
        self._show = True
        self.setTickFont(self._font)
        self.setTextPen("#333333")
        self.setPen("#888888")
        self.setStyle(tickLength=-3, tickTextOffset=3, autoExpandTextSpace=False)  # sized by _fit
        if orientation == "bottom":
            # We draw the text ourselves (rotated); pyqtgraph only draws the tick marks.
            self.setStyle(showValues=False)

    def set_labels(self, labels: Sequence[str] | AxisLabels) -> None:
        if not isinstance(labels, AxisLabels):
            labels = AxisLabels(labels, self._font)
        if labels.texts is self._labels or (labels.widest == self._widest and labels.texts == self._labels):
            return  # same tokens (a new seed, another head): the drawn labels stay valid
        self._labels = labels.texts
        self._widest = labels.widest
        self._fit()
        self.picture = None
        self.update()

    def set_show_labels(self, show: bool) -> None:
        if show == self._show:
            return
        self._show = show
        if self.orientation != "bottom":
            self.setStyle(showValues=show)
        self._fit()
        self.picture = None
        self.update()

    def itemChange(self, change, value):
        """pyqtgraph sizes a hidden axis to 0 px and does not undo it when shown: refit then."""
        out = super().itemChange(change, value)
        if change == QGraphicsItem.GraphicsItemChange.ItemVisibleHasChanged and value:
            self._fit()
        return out

    def labels_shown(self) -> bool:
        return self._show and bool(self._labels)

    def _fit(self) -> None:
        """Room for the widest label (pyqtgraph would otherwise drop labels that overflow)."""
        room = label_room(self._widest) if self._show and self._labels else 6
        if self.orientation == "bottom":
            self.setHeight(room)
        else:
            self.setWidth(room)

    def label_stride(self, cells: float, pixels: float) -> int:
        """Draw every n-th label so that neighbouring labels are a text line apart."""
        if cells <= 0 or pixels <= 0:
            return 1
        per_cell = pixels / cells
        need = self._metrics.height() + 1
        return max(1, math.ceil(need / per_cell))

    def visible_ticks(self, min_val: float, max_val: float, size: float) -> list[int]:
        lo, hi = sorted((min_val, max_val))
        n = len(self._labels)
        first, last = max(0, math.floor(lo)), min(n - 1, math.ceil(hi) - 1)
        if last < first:
            return []
        stride = self.label_stride(hi - lo, size)
        start = (first + stride - 1) // stride * stride
        return list(range(start, last + 1, stride))

    def label_extent(self) -> QRectF | None:
        """The scene rectangle the drawn labels cover (text overhang at the ends included),
        or None when no label is drawn: what overlap checks compare."""
        view = self.linkedView()
        if not self.labels_shown() or view is None:
            return None
        lo, hi = self.range
        along = self.geometry().height() if self.orientation == "left" else self.geometry().width()
        ticks = self.visible_ticks(lo, hi, along)
        if not ticks:
            return None
        half = self._metrics.height() / 2
        box = self.mapRectToScene(QRectF(0, 0, self.geometry().width(), self.geometry().height()))
        if self.orientation == "left":
            ys = [view.mapViewToScene(QPointF(0, i + 0.5)).y() for i in (ticks[0], ticks[-1])]
            return QRectF(box.left(), min(ys) - half, box.width(), abs(ys[1] - ys[0]) + 2 * half)
        xs = [view.mapViewToScene(QPointF(i + 0.5, 0)).x() for i in (ticks[0], ticks[-1])]
        deepest = max(self._metrics.horizontalAdvance(self._labels[i]) for i in ticks)
        return QRectF(min(xs) - half, box.top(), abs(xs[1] - xs[0]) + 2 * half, min(box.height(), deepest + 4))

    # pyqtgraph hooks --------------------------------------------------------------------------
    def tickValues(self, minVal, maxVal, size):
        if not self._labels:
            return []
        ticks = self.visible_ticks(minVal, maxVal, size)
        return [(1.0, [i + 0.5 for i in ticks])]

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            i = math.floor(v)
            out.append(self._labels[i] if 0 <= i < len(self._labels) else "")
        return out

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
        if self.orientation != "bottom" or not self._show or not self._labels:
            return
        bounds = self.mapRectFromParent(self.geometry())
        lo, hi = self.range
        if hi == lo:
            return
        width = bounds.width()
        p.setClipping(False)  # the base class clipped to the axis; the first label may overhang
        p.setFont(self._font)
        p.setPen(self.textPen())
        line = self._metrics.height()
        room = bounds.height() - 6
        for i in self.visible_ticks(lo, hi, width):
            x = bounds.left() + (i + 0.5 - lo) / (hi - lo) * width
            if x < bounds.left() - 1 or x > bounds.right() + 1:
                continue
            p.save()
            p.translate(x, bounds.top() + 4)
            p.rotate(-90)  # text runs upward, ending just below the axis line
            p.drawText(
                QRectF(-room, -line / 2, room, line),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                self._labels[i],
            )
            p.restore()
