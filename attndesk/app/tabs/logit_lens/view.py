"""The logit lens view: a grid of residual streams (entering each layer, then the output) x
positions, each cell coloured by the probability of its top token and labelled with that token;
hovering a cell lists its top k.

The view draws a ``LogitLens`` (plain numpy, from ``attndesk.interp``); the presenter
(``presenter``) computes it off the GUI thread.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal, Slot
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from attndesk.app.widgets.named import named
from attndesk.interp import LogitLens

from ...widgets.heatmap import MatrixPlot
from ...widgets.interp import RunBar

MAX_LABELLED_CELLS = 1200  # beyond this many cells the tokens are not written in (hover still tells)
CELL_MARGIN = 4  # px of the cell left free on each side of its text


def cell_label(token: str) -> str:
    """A top token as written in its cell (whole: ``wrapped`` breaks it into the cell's lines)."""
    return token


def wrapped(text: str, metrics: QFontMetricsF, width: float, lines: int) -> list[str]:
    """``text`` in at most ``lines`` lines of ``width`` pixels: whole on one line when it fits, else
    broken between characters, the last line elided only when even ``lines`` lines are too few."""
    if lines < 1:
        return []
    if metrics.horizontalAdvance(text) <= width:
        return [text]
    out: list[str] = []
    line = ""
    for i, ch in enumerate(text):
        if line and metrics.horizontalAdvance(line + ch) > width:
            if len(out) == lines - 1:
                return [*out, metrics.elidedText(text[i - len(line) :], Qt.TextElideMode.ElideRight, width)]
            out.append(line)
            line = ""
        line += ch
    return [*out, line]


def probability_label(p: float) -> str:
    """0.312 -> '31%'; a random model's 3.3e-05 stays readable rather than '0%'."""
    return f"{p:.0%}" if p >= 0.01 else f"{p:.1g}"


class CellLabels(pg.GraphicsObject):
    """Text centred in the cells of a [rows, cols] grid (cell (r, c) = the unit square at x=c, y=r),
    at a fixed pixel size whatever the zoom: one item painting every label (one ``TextItem`` per
    cell took over a second for 1,200 cells)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[int, int, str, str, bool]] = []  # (row, col, token, probability, light)
        self._rect = QRectF()

    def set_cells(self, cells: list[tuple[int, int, str, str, bool]], rows: int, cols: int) -> None:
        self.prepareGeometryChange()
        self.cells, self._rect = cells, QRectF(0, 0, cols, rows)
        self.update()

    def boundingRect(self) -> QRectF:
        return self._rect

    def token_lines(self, token: str, width: float, height: float) -> list[str]:
        """The lines a token takes in a cell of ``width`` x ``height`` pixels (one line is kept for
        the probability below it); [] when the cell is too small to write in."""
        if width < 24 or height < 18:  # cells too small to write in: hover tells
            return []
        metrics = QFontMetricsF(QFont())  # the application's font, as paint() sets it
        lines = int(height // metrics.lineSpacing()) - 1
        return wrapped(token, metrics, width - 2 * CELL_MARGIN, max(lines, 1))

    def cell_size(self) -> tuple[float, float]:
        """A cell's size on screen in pixels (0, 0 before it is shown)."""
        views = self.scene().views() if self.scene() is not None else []
        if not views:
            return 0.0, 0.0
        transform = self.deviceTransform(views[0].viewportTransform())
        unit = transform.map(QPointF(1, 1)) - transform.map(QPointF(0, 0))
        return abs(unit.x()), abs(unit.y())

    def paint(self, painter: QPainter, *_args) -> None:
        transform = painter.transform()
        unit = transform.map(QPointF(1, 1)) - transform.map(QPointF(0, 0))
        width, height = abs(unit.x()), abs(unit.y())
        if width < 24 or height < 18:
            return
        painter.save()
        painter.resetTransform()
        painter.setFont(QFont())
        for row, col, token, probability, light in self.cells:
            centre = transform.map(QPointF(col + 0.5, row + 0.5))
            painter.setPen(QColor("white" if light else "black"))
            painter.drawText(
                QRectF(centre.x() - width / 2, centre.y() - height / 2, width, height),
                int(Qt.AlignmentFlag.AlignCenter),
                "\n".join([*self.token_lines(token, width, height), probability]),
            )
        painter.restore()


class LogitLensView(QWidget):
    """API: ``k()``, ``set_lens(LogitLens | None)``, ``cell_text(row, col)`` (the token written in a
    cell, or "" where none is). Signal ``inputsEdited()``."""

    inputsEdited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("logitLensView")
        self.lens: LogitLens | None = None
        self._texts: dict[tuple[int, int], str] = {}
        self.kSpin = named(QSpinBox(), "logitLensKSpin")
        self.kSpin.setRange(1, 20)
        self.kSpin.setValue(5)
        self.kSpin.setPrefix("top ")
        self.kSpin.setToolTip("how many tokens the hover lists per cell")
        self.controls = QWidget()
        row = QHBoxLayout(self.controls)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("each layer's residual stream through the final norm and the unembedding"))
        row.addStretch(1)
        row.addWidget(self.kSpin)
        self.bar = RunBar("logitLens", "Compute")
        self.plot = MatrixPlot("<b>logit lens</b>: top token and its probability")
        self.plot.setObjectName("logitLensPlot")
        self.labels = CellLabels()
        self.labels.setZValue(8)
        self.plot.when_built(lambda: self.plot.plot.addItem(self.labels))
        self.readout = named(QLabel(" "), "logitLensReadout")
        self.readout.setWordWrap(True)
        self.readout.setTextFormat(Qt.TextFormat.PlainText)
        layout = QVBoxLayout(self)
        for widget in (self.controls, self.bar):
            layout.addWidget(widget)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.readout)
        self.kSpin.valueChanged.connect(lambda _v: self.inputsEdited.emit())
        self.plot.cellHovered.connect(self._hover)

    def k(self) -> int:
        return self.kSpin.value()

    def set_lens(self, lens: LogitLens | None) -> None:
        self.lens = lens
        self._texts = {}
        self.labels.set_cells([], 0, 0)
        if lens is None:
            self.plot.clear()
            return
        probs = lens.top_probs[:, :, 0]
        self.plot.set_matrix(probs, row_labels=lens.labels, col_labels=lens.tokens, levels=(0.0, 1.0))
        rows, cols = probs.shape
        self.plot.set_title(
            f"<b>logit lens</b> [{rows} residual streams × {cols} positions]: each cell's top "
            "next-token guess, coloured by its probability (0–1)"
        )
        if rows * cols <= MAX_LABELLED_CELLS:
            self._write_cells(lens, probs)

    def _write_cells(self, lens: LogitLens, probs: np.ndarray) -> None:
        cells = []
        for r, level in enumerate(lens.top_tokens):
            for c, top in enumerate(level):
                text = cell_label(top[0])
                self._texts[(r, c)] = text
                light = bool(probs[r, c] < 0.6)  # white on viridis's dark end, black on its light end
                cells.append((r, c, text, probability_label(float(probs[r, c])), light))
        self.labels.set_cells(cells, *probs.shape)

    def cell_text(self, row: int, col: int) -> str:
        return self._texts.get((int(row), int(col)), "")

    def drawn_lines(self, row: int, col: int) -> list[str]:
        """The lines of a cell's token as drawn at the plot's present size."""
        return self.labels.token_lines(self.cell_text(row, col), *self.labels.cell_size())

    @Slot(int, int)
    def _hover(self, row: int, col: int) -> None:
        lens = self.lens
        if lens is None:
            return
        top = ", ".join(f"{t!r} {p:.1%}" for t, p in zip(lens.top_tokens[row][col], lens.top_probs[row, col]))
        self.readout.setText(f"{lens.labels[row]}, position {col} ({lens.tokens[col]!r}): {top}")


__all__ = ["LogitLensView", "cell_label", "probability_label", "wrapped"]
