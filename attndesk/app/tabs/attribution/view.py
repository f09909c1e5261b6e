"""The attribution view: the input text's tokens as a strip of chips, each coloured by how much it
contributes to the target token's logit after the last position (integrated gradients, gradient
x input or attention x gradient); hovering a chip gives its number. Below it, as Inseq draws a
text, the source tokens x targets heatmap of every step (each step's target is the text's next
token, the last one the target above) and each step's target probability (integrated gradients
and gradient x input, decoder-only models); attention x gradient shows each layer's and head's
share ([layers x heads, tokens]) instead.

The view draws an ``InputAttribution`` (plain numpy, from ``attndesk.interp``) and reports
intents; the presenter (``presenter``) computes it off the GUI thread.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from einops import rearrange
from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal, Slot
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name
from attndesk.interp import InputAttribution, StepAttribution

from ...widgets.heatmap import DIVERGING, MatrixPlot
from ...widgets.interp import RunBar, TokenField

METHODS = (("ig", "integrated gradients"), ("gxi", "gradient × input"), ("attn", "attention × gradient"))
_PAD_X, _PAD_Y, _GAP = 6, 4, 4


def score_colors(scores: np.ndarray, colormap: str = DIVERGING) -> tuple[list[QColor], float]:
    """One colour per score on a diverging map symmetric around 0 (white-ish = 0), and the bound
    (the largest |score|) the ends of the map stand for."""
    s = np.asarray(scores, dtype=np.float64)
    bound = float(np.max(np.abs(s))) if s.size else 0.0
    bound = bound if bound > 0 else 1.0
    return list(pg.colormap.get(colormap).map((s / bound + 1.0) / 2.0, mode="qcolor")), bound


def step_columns(by_step: StepAttribution) -> list[str]:
    """Each step's column label: its target and the target's probability there, e.g. ``mat 31%``
    (``<1%`` below one percent; the hover gives the exact value)."""
    return [f"{target} {percent(p)}" for target, p in zip(by_step.targets, by_step.probabilities, strict=True)]


def percent(p: float) -> str:
    return "<1%" if p < 0.005 else f"{p:.0%}"


class TokenStrip(QWidget):
    """Tokens as chips, wrapped to the width, coloured by their scores; hover shows a tooltip and
    emits ``tokenHovered(index)`` (-1 when the mouse leaves every chip). Its height follows its
    width (``heightForWidth``); ``TokenStripArea`` gives it that height on screen."""

    tokenHovered = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attributionStrip")
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.tokens: list[str] = []
        self.scores = np.zeros(0)
        self.colors: list[QColor] = []
        self.bound = 1.0
        self._rects: list[QRect] = []  # the chips at the strip's own width (asking a height changes nothing)
        self._hover = -1

    def set_scores(self, tokens: list[str], scores: np.ndarray) -> None:
        self.tokens, self.scores = list(tokens), np.asarray(scores, dtype=np.float64)
        self.colors, self.bound = score_colors(self.scores)
        self._rects = self.chips_for(self.width())[0]
        self._hover = -1
        self.updateGeometry()
        self.update()

    def tooltip(self, index: int) -> str:
        share = self.scores[index] / max(float(np.abs(self.scores).sum()), 1e-30)
        return f"{index}: {self.tokens[index]!r}  score {self.scores[index]:+.5g}  ({share:+.1%} of Σ|score|)"

    def chips_for(self, width: int) -> tuple[list[QRect], int]:
        """The chips' rectangles wrapped to ``width``, and the height they take."""
        metrics = QFontMetrics(self.font())
        x = y = 0
        height = metrics.height() + 2 * _PAD_Y
        rects = []
        for token in self.tokens:
            w = metrics.horizontalAdvance(token or " ") + 2 * _PAD_X
            if x > 0 and x + w > max(width, 1):
                x, y = 0, y + height + _GAP
            rects.append(QRect(x, y, w, height))
            x += w + _GAP
        return rects, y + height

    def chip_rects(self) -> list[QRect]:
        """Where each token's chip is drawn, in the strip's coordinates."""
        return list(self._rects)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self.chips_for(width)[1]

    def sizeHint(self) -> QSize:
        return QSize(400, self.heightForWidth(max(self.width(), 400)))

    def resizeEvent(self, event) -> None:
        self._rects, height = self.chips_for(event.size().width())
        if self.minimumHeight() != height:  # a scroll area sizes its widget no lower than this
            self.setMinimumHeight(height)
        super().resizeEvent(event)

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        for i, (rect, token) in enumerate(zip(self._rects, self.tokens)):
            painter.fillRect(rect, self.colors[i])
            painter.setPen(
                QPen(QColor("#d95f02") if i == self._hover else QColor("#888"), 2 if i == self._hover else 1)
            )
            painter.drawRect(rect.adjusted(0, 0, -1, -1))
            painter.setPen(QColor("white") if self.colors[i].lightnessF() < 0.45 else QColor("black"))
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, token)
        painter.end()

    def index_at(self, point: QPoint) -> int:
        return next((i for i, rect in enumerate(self._rects) if rect.contains(point)), -1)

    def mouseMoveEvent(self, event) -> None:
        index = self.index_at(event.position().toPoint())
        if index != self._hover:
            self._hover = index
            self.update()
            self.tokenHovered.emit(index)
            if index >= 0:
                QToolTip.showText(event.globalPosition().toPoint(), self.tooltip(index), self)
            else:
                QToolTip.hideText()

    def leaveEvent(self, event) -> None:
        if self._hover != -1:
            self._hover = -1
            self.update()
            self.tokenHovered.emit(-1)
        super().leaveEvent(event)


class TokenStripArea(QScrollArea):
    """The strip as tall as its rows at the width it is given, up to ``MAX_ROWS`` rows; a longer
    prompt scrolls inside it, so every chip is on screen or reached by scrolling."""

    MAX_ROWS = 6

    def __init__(self, strip: TokenStrip, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attributionStripArea")
        self.strip = strip
        self.setWidget(strip)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.fit()

    def fit(self) -> None:
        """Take the height of the strip's rows at the width there is (at most MAX_ROWS rows)."""
        row = QFontMetrics(self.strip.font()).height() + 2 * _PAD_Y
        cap = self.MAX_ROWS * row + (self.MAX_ROWS - 1) * _GAP
        height = min(self.strip.heightForWidth(self.viewport().width()), cap)
        if height != self.height():
            self.setFixedHeight(height)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit()


class AttributionView(QWidget):
    """API: ``target`` (a ``TokenField``; empty = the model's own next token), ``method()``,
    ``steps()``, ``set_attribution(InputAttribution | None)``, ``set_steps(StepAttribution | None, note)``.
    Signal ``inputsEdited()``."""

    inputsEdited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attributionView")
        self.attribution: InputAttribution | None = None
        self.target = TokenField(
            "target",
            "attributionTarget",
            "(the model's next token)",
            empty_note="empty: the model's own next token (its largest logit)",
        )
        self.methodCombo = named(QComboBox(), "attributionMethodCombo")
        for key, text in METHODS:
            self.methodCombo.addItem(text, key)
        self.stepsSpin = named(QSpinBox(), "attributionStepsSpin")
        self.stepsSpin.setRange(1, 4096)
        self.stepsSpin.setValue(64)
        self.stepsSpin.setPrefix("steps ")
        self.stepsSpin.setToolTip("integrated gradients: Gauss-Legendre nodes from the pad-token baseline")
        self.controls = QWidget()
        row = QHBoxLayout(self.controls)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.target, 1)
        row.addWidget(QLabel("method"))
        row.addWidget(self.methodCombo)
        row.addWidget(self.stepsSpin)
        self.bar = RunBar("attribution", "Attribute")
        self.summary = named(QLabel(""), "attributionSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.strip = TokenStrip()
        self.stripArea = TokenStripArea(self.strip)
        self.readout = named(QLabel(" "), "attributionReadout")
        self.headsPlot = MatrixPlot("<b>attention × gradient</b> per layer and head (last query row)")
        self.headsPlot.setObjectName("attributionHeadsPlot")
        self.headsPlot.hide()
        self.by_step: StepAttribution | None = None
        self.stepsPlot = MatrixPlot("")
        self.stepsPlot.setObjectName("attributionStepsPlot")
        self.stepsPlot.hide()
        self.stepsNote = named(QLabel(""), "attributionStepsNote")
        self.stepsNote.setWordWrap(True)
        self.stepsNote.hide()
        layout = QVBoxLayout(self)
        for widget in (self.controls, self.bar, self.summary, self.stripArea, self.readout, self.stepsNote):
            layout.addWidget(widget)
        layout.addWidget(self.stepsPlot, 1)
        layout.addWidget(self.headsPlot, 1)
        layout.addStretch(0)
        self.target.edited.connect(lambda _t: self.inputsEdited.emit())
        self.target.edit.returnPressed.connect(self.bar.runRequested)
        self.methodCombo.currentIndexChanged.connect(self._on_method)
        self.stepsSpin.valueChanged.connect(lambda _v: self.inputsEdited.emit())
        self.strip.tokenHovered.connect(self._hover)
        self.headsPlot.cellHovered.connect(self._hover_head)
        self.stepsPlot.cellHovered.connect(self._hover_step)

    def method(self) -> str:
        return self.methodCombo.currentData()

    def set_method(self, key: str) -> None:
        self.methodCombo.setCurrentIndex(self.methodCombo.findData(key))

    def steps(self) -> int:
        return self.stepsSpin.value()

    @Slot(int)
    def _on_method(self, _index: int) -> None:
        self.stepsSpin.setEnabled(self.method() == "ig")
        self.inputsEdited.emit()

    def set_attribution(self, attribution: InputAttribution | None) -> None:
        self.attribution = attribution
        if attribution is None:
            self.strip.set_scores([], np.zeros(0))
            self.stripArea.fit()
            self.summary.setText("")
            self.headsPlot.hide()
            self.set_steps(None)
            return
        a = attribution
        self.strip.set_scores(a.tokens, a.scores)
        self.stripArea.fit()
        name = dict(METHODS)[{"integrated_gradients": "ig", "gradient_x_input": "gxi"}.get(a.method, "attn")]
        parts = [
            f"<b>{name}</b> of logit({html.escape(repr(a.target))}) = {a.target_logit:.4g} after the last token",
            f"colours: blue &lt; 0 &lt; red, ends at ±{self.strip.bound:.3g}; Σ scores = {float(a.scores.sum()):.4g}",
        ]
        if a.completeness_error is not None:
            parts.append(
                f"baseline {a.baseline} (logit {a.baseline_logit:.4g}), {a.steps} steps, "
                f"completeness error {a.completeness_error:.2%}"
            )
        self.summary.setText(" · ".join(parts + [html.escape(n) for n in a.notices]))
        if a.per_head is not None:
            layers, heads, _ = a.per_head.shape
            self.headsPlot.set_matrix(
                rearrange(a.per_head, "n h k -> (n h) k"),
                diverging=True,
                col_labels=a.tokens,
                row_labels=[head_name(n, h) for n in range(layers) for h in range(heads)],
            )
            self.headsPlot.show()
        else:
            self.headsPlot.hide()

    def set_steps(self, by_step: StepAttribution | None, note: str = "") -> None:
        """Draw every step of the text: source tokens (rows) x each step's target (columns, named
        with the target's probability at that step, Inseq's step score), a source after its step
        hatched; None hides it (``note`` says why, when there is a reason to give)."""
        self.by_step = by_step
        self.stepsNote.setText(note)
        self.stepsNote.setVisible(bool(note))
        if by_step is None:
            self.stepsPlot.hide()
            return
        b = by_step
        columns = step_columns(b)
        name = dict(METHODS)[{"integrated_gradients": "ig"}.get(b.method, "gxi")]
        nodes = f", {b.steps} nodes" if b.steps is not None else ""
        self.stepsPlot.set_title(
            f"<b>step by step</b> ({name}{nodes}): each source token (row) for each step's target "
            "(column: the text's next token, the last the target above, with its probability at that step); "
            "hatched: after the step"
        )
        self.stepsPlot.set_matrix(b.scores.T, diverging=True, row_labels=b.sources, col_labels=columns)
        self.stepsPlot.show()

    @Slot(int, int)
    def _hover_step(self, row: int, col: int) -> None:
        """A cell of the steps heatmap: ``row`` a source token, ``col`` a step."""
        b = self.by_step
        if b is None:
            return
        step = f"step {col}: p({b.targets[col]!r}) = {b.probabilities[col]:.4g}, logit {b.target_logits[col]:.4g}"
        if col < row:
            self.readout.setText(f"{row}: {b.sources[row]!r} comes after step {col} · {step}")
        else:
            self.readout.setText(f"{row}: {b.sources[row]!r} → {b.targets[col]!r}: {b.scores[col, row]:+.5g} · {step}")

    @Slot(int)
    def _hover(self, index: int) -> None:
        self.readout.setText(self.strip.tooltip(index) if index >= 0 else " ")

    @Slot(int, int)
    def _hover_head(self, row: int, col: int) -> None:
        a = self.attribution
        if a is not None and a.per_head is not None:
            heads = a.per_head.shape[1]
            self.readout.setText(
                f"{head_name(row // heads, row % heads)} → {a.tokens[col]!r} ({col}): "
                f"{a.per_head[row // heads, row % heads, col]:+.5g}"
            )


__all__ = ["METHODS", "AttributionView", "TokenStrip", "TokenStripArea", "score_colors", "step_columns"]
