"""One labelled matrix heatmap for the teaching views: exact values kept, drawn downsampled.

``MatrixPlot`` draws any [rows, cols] matrix with a pyqtgraph ImageItem over the rectangle
(0, 0, cols, rows), so cell (r, c) is the unit square at x=c, y=r whatever the display
resolution. Masked (non-finite, e.g. -inf) cells are never a colour: they get the hatched
overlay the attention heatmaps use. Rows or columns can be highlighted, and an Export button
writes the figure (PNG/SVG/PDF) or the exact numbers (NPY/CSV) through attndesk.render.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Signal, Slot
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import (
    QFileDialog,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from attndesk.render import ExportError, HeatmapFigure, export_figure, export_weights
from attndesk.render.colormaps import hatch_rgba
from attndesk.runs.select import tile_reduce

from ..jobs.background import Background
from ..jobs.channels import FILES
from .holdings import held_by
from .lazy_plot import LazyPlot
from .plot_axes import without_si_prefix
from .token_axis import TokenAxis

MAX_DISPLAY = 256  # cells per axis drawn; beyond it the image is an overview, hover stays exact
SEQUENTIAL = "viridis"
DIVERGING = "CET-D1"
SCORES = "magma"  # scores in 0..1 beside weights (the Train tab's head scores)
# the colour maps the views draw with: pyqtgraph reads each from a file on its first use, inside
# the turn that draws it, so the window's warm-up reads them beforehand
COLORMAPS = (SEQUENTIAL, DIVERGING, SCORES)
_ROW_PEN = QColor(255, 64, 64)
_MIN_PLOT = (120, 120)


def display_reduce(matrix: np.ndarray, masked: np.ndarray, max_display: int = MAX_DISPLAY):
    """(image, masked image, factor): ``matrix`` reduced so no axis exceeds ``max_display``.

    Non-negative matrices keep each tile's max (one sharp weight stays visible, as in the
    heatmap panel); signed ones the tile's mean over unmasked cells. A tile is masked when
    all its cells are.
    """
    factor = max(1, math.ceil(max(matrix.shape) / max_display))
    if factor == 1:
        return matrix, masked, 1
    finite = np.where(masked, 0.0, matrix)
    how = "max" if not (finite < 0).any() else "mean"
    image = tile_reduce(finite, factor, how, ignore=masked if how == "mean" else None)
    return image, tile_reduce(masked, factor, "all"), factor


@dataclass(frozen=True, eq=False)
class PreparedMatrix:
    """A matrix and everything drawing it needs, computed off the GUI thread by ``prepare_matrix``."""

    matrix: np.ndarray  # exact values, as given
    masked: np.ndarray  # bool, True = hatched
    image: np.ndarray  # what the ImageItem draws (at most MAX_DISPLAY per axis)
    hatch: np.ndarray | None  # RGBA stripes over masked display cells, or None
    levels: tuple[float, float]
    colormap: str
    factor: int


def prepare_matrix(
    matrix,
    *,
    colormap: str | None = None,
    diverging: bool = False,
    levels: tuple[float, float] | None = None,
    masked=None,
) -> PreparedMatrix:
    """The numpy half of ``MatrixPlot.set_matrix`` (thread-safe): levels, display image, hatching."""
    m = np.asarray(matrix)
    if m.ndim != 2:
        raise ValueError(f"a heatmap needs a 2-D matrix, got shape {m.shape}")
    hidden = ~np.isfinite(m)
    if masked is not None:
        hidden = hidden | np.asarray(masked, dtype=bool)
    if levels is None:
        levels = _auto_levels(m, hidden, diverging)
    levels = (float(levels[0]), float(levels[1]))
    image, hidden_image, factor = display_reduce(m, hidden)
    image = np.where(hidden_image, levels[0], image)  # hidden under the hatching anyway
    hatch = hatch_rgba(hidden_image) if hidden_image.any() else None
    return PreparedMatrix(m, hidden, image, hatch, levels, colormap or (DIVERGING if diverging else SEQUENTIAL), factor)


def _auto_levels(m: np.ndarray, hidden: np.ndarray, diverging: bool) -> tuple[float, float]:
    finite = np.where(hidden, np.nan, m) if hidden.any() else m
    if not finite.size or (hidden.any() and hidden.all()):
        return (-1.0, 1.0) if diverging else (0.0, 1.0)
    lo, hi = float(np.nanmin(finite)), float(np.nanmax(finite))
    if diverging:
        bound = max(abs(lo), abs(hi))
        return (-bound, bound) if bound > 0 else (-1.0, 1.0)
    lo = min(0.0, lo)
    return (lo, hi if hi > lo else lo + 1.0)


@dataclass
class _PlotItems:
    """The items of a built plot."""

    graphics: pg.PlotWidget
    plot: pg.PlotItem
    image: pg.ImageItem
    overlay: pg.ImageItem
    left: TokenAxis
    bottom: TokenAxis
    row_marks: QGraphicsRectItem
    col_marks: QGraphicsRectItem
    cell_mark: QGraphicsRectItem

    def holdings(self) -> list:
        """What the image items draw from: pyqtgraph keeps each image and a render buffer."""
        items = (self.image, self.overlay)
        return [a for item in items for a in (item.image, getattr(item, "_processingBuffer", None)) if a is not None]


def _build_plot(square: bool) -> _PlotItems:
    """A matrix plot: token axes, row 0 at the top, the image, its hatch overlay and the marks."""
    left, bottom = TokenAxis("left"), TokenAxis("bottom")
    # no context menu (the export button replaces it), and none built: pyqtgraph builds a view
    # box's menu at construction unless told not to (2 ms a plot; a window has 33 of them)
    graphics = pg.PlotWidget(axisItems={"left": left, "bottom": bottom}, enableMenu=False)
    graphics.setBackground("w")
    plot = without_si_prefix(graphics.getPlotItem())
    plot.hideButtons()
    plot.invertY(True)  # row 0 at the top, like a matrix
    plot.vb.setDefaultPadding(0.0)
    if square:
        plot.vb.setAspectLocked(True)
    image = pg.ImageItem(axisOrder="row-major")
    overlay = pg.ImageItem(axisOrder="row-major")
    overlay.setZValue(5)
    plot.addItem(image)
    plot.addItem(overlay)
    marks = [_mark_item(plot, fill) for fill in (QColor(255, 64, 64, 60), QColor(255, 64, 64, 60), None)]
    graphics.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
    return _PlotItems(graphics, plot, image, overlay, left, bottom, *marks)


def _message_label() -> QLabel:
    """The plot's message line (an export's failure): wrapped, never wider than the plot, since an
    export error naming a long path must not widen the plot's column (a relayout and repaint of
    the whole window)."""
    message = QLabel("")
    message.setStyleSheet("color: #a33")
    message.setWordWrap(True)
    message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    message.hide()
    return message


def _mark_item(plot: pg.PlotItem, fill: QColor | None) -> QGraphicsRectItem:
    item = QGraphicsRectItem(0, 0, 1, 1)
    pen = QPen(_ROW_PEN)
    pen.setWidth(2)
    pen.setCosmetic(True)
    item.setPen(pen)
    if fill is not None:
        item.setBrush(fill)
    item.setZValue(10)
    item.hide()
    plot.vb.addItem(item, ignoreBounds=True)
    return item


def _marked(item: QGraphicsRectItem, kind: str) -> tuple[int, ...] | None:
    """The row (r,), column (c,) or cell (r, c) a mark shows, or None when it is hidden."""
    if not item.isVisible():
        return None
    r = item.rect()
    return {"row": (int(r.y()),), "col": (int(r.x()),), "cell": (int(r.y()), int(r.x()))}[kind]


def export_job(
    path: str,
    matrix: np.ndarray,
    masked: np.ndarray | None,
    labels: tuple[list[str], list[str]],
    title: str,
    colormap: str,
    levels: tuple[float, float],
) -> Callable[[], str]:
    """The export of ``matrix`` to ``path`` as a function of nothing (it may run in a pool thread):
    .npy/.csv the exact numbers, else a figure (masked cells blank)."""
    rows, cols = labels
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix in ("npy", "csv"):
        return lambda: str(export_weights(matrix, rows, cols, path))
    vmin, vmax = levels

    def figure() -> str:
        drawn = HeatmapFigure(
            matrices=np.where(False if masked is None else masked, np.nan, matrix.astype(np.float64))[None],
            titles=[title],
            query_labels=rows,
            key_labels=cols,
            colormap=colormap,
            diverging=colormap.startswith("CET-D"),
            vmin=vmin,
            vmax=vmax,
            value_label="value",
        )
        return str(export_figure(drawn, path))

    return figure


class MatrixPlot(QWidget):
    """A titled heatmap of one matrix. ``cellHovered(row, col)`` reports the exact cell under the
    mouse; ``hoverLeft()`` when the mouse leaves the matrix."""

    cellHovered = Signal(int, int)
    hoverLeft = Signal()

    def __init__(self, title: str = "", parent: QWidget | None = None, *, square: bool = False) -> None:
        super().__init__(parent)
        self.matrix: np.ndarray | None = None  # exact values, as given
        self.masked: np.ndarray | None = None  # bool, True = masked cell
        self.image_data: np.ndarray | None = None  # what the ImageItem draws
        self.levels: tuple[float, float] = (0.0, 1.0)
        self.colormap_name = SEQUENTIAL
        self.factor = 1
        self.row_labels: list[str] = []
        self.col_labels: list[str] = []
        self._hover: tuple[int, int] | None = None

        self.title = QLabel(title)
        self.title.setWordWrap(True)
        self.title.setTextFormat(pg.QtCore.Qt.TextFormat.RichText)
        self.exportButton = QToolButton()
        self.exportButton.setText("⤓")
        self.exportButton.setToolTip("Export this matrix: PNG/SVG/PDF figure or NPY/CSV numbers")
        self.exportButton.clicked.connect(self._on_export_clicked)
        self._background = Background(self, FILES)
        self.message = _message_label()

        # The plot (a pyqtgraph PlotWidget, the costly part) is built when this widget is first shown
        # or its plot is first used (``_built``): a window holds about 30 of these on tabs not shown
        # yet. Until then its holder keeps the plot's place in the layout.
        self._square = square
        self._graphics: pg.PlotWidget | None = None
        self._holder = LazyPlot(self._make_plot, minimum=_MIN_PLOT, steady_hint=True)

        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.title, 1)
        head.addWidget(self.exportButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(head)
        layout.addWidget(self.message)
        layout.addWidget(self._holder, 1)

    def _make_plot(self) -> pg.PlotWidget:
        items = self._items = _build_plot(self._square)
        items.graphics.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self._graphics = items.graphics
        return items.graphics

    def _built(self) -> pg.PlotWidget:
        """The plot, built on first need."""
        return self._holder.plot

    def holdings(self) -> list:  # widgets/holdings.py: the matrix, its mask, the display image, the plot's images
        return held_by(self.matrix, self.masked, self.image_data, self._items if self._graphics is not None else None)

    def when_built(self, action: Callable[[], object]) -> None:
        """Run ``action`` (an item added to the plot, a signal of its scene connected) once the plot
        exists: now if it does, else when it is built."""
        self._holder.when_built(action)

    @property
    def graphics(self) -> pg.PlotWidget:
        return self._built()

    @property
    def plot(self) -> pg.PlotItem:
        self._built()
        return self._items.plot

    @property
    def image(self) -> pg.ImageItem:
        self._built()
        return self._items.image

    @property
    def overlay(self) -> pg.ImageItem:
        self._built()
        return self._items.overlay

    @property
    def left(self) -> TokenAxis:
        self._built()
        return self._items.left

    @property
    def bottom(self) -> TokenAxis:
        self._built()
        return self._items.bottom

    @property
    def row_marks(self) -> QGraphicsRectItem:
        self._built()
        return self._items.row_marks

    @property
    def col_marks(self) -> QGraphicsRectItem:
        self._built()
        return self._items.col_marks

    @property
    def cell_mark(self) -> QGraphicsRectItem:
        self._built()
        return self._items.cell_mark

    # -- content ---------------------------------------------------------------------------------
    def set_title(self, html: str) -> None:
        self.title.setText(html)

    def set_matrix(
        self,
        matrix,
        *,
        row_labels: Sequence[str] | None = None,
        col_labels: Sequence[str] | None = None,
        colormap: str | None = None,
        diverging: bool = False,
        levels: tuple[float, float] | None = None,
        masked=None,
    ) -> None:
        """Draw ``matrix`` [rows, cols]. Non-finite cells (and ``masked`` True) are hatched.
        ``diverging`` picks CET-D1 with levels symmetric around 0 (unless ``levels`` is given)."""
        prepared = prepare_matrix(matrix, colormap=colormap, diverging=diverging, levels=levels, masked=masked)
        self.show_prepared(prepared, row_labels=row_labels, col_labels=col_labels)

    def show_prepared(
        self,
        prepared: PreparedMatrix,
        *,
        row_labels: Sequence[str] | None = None,
        col_labels: Sequence[str] | None = None,
    ) -> None:
        """Draw a matrix ``prepare_matrix`` made (elsewhere: at thousands of rows the numpy work takes
        longer than one GUI-thread turn may); only the small display image is handed to Qt here."""
        m = prepared.matrix
        self.matrix, self.masked = m, prepared.masked
        rows, cols = m.shape
        self.row_labels = [str(t) for t in row_labels] if row_labels is not None else [str(i) for i in range(rows)]
        self.col_labels = [str(t) for t in col_labels] if col_labels is not None else [str(i) for i in range(cols)]
        self.levels, self.colormap_name, self.factor = prepared.levels, prepared.colormap, prepared.factor
        self.image_data = prepared.image
        self.image.setColorMap(pg.colormap.get(self.colormap_name))
        self.image.setImage(prepared.image, autoLevels=False, levels=self.levels)
        rect = QRectF(0, 0, cols, rows)
        self.image.setRect(rect)
        if prepared.hatch is not None:
            self.overlay.setImage(prepared.hatch, autoLevels=False, levels=(0, 255))
            self.overlay.setRect(rect)
            self.overlay.show()
        else:
            self.overlay.hide()
        self.left.set_labels(self.row_labels)
        self.bottom.set_labels(self.col_labels)
        self.plot.vb.setLimits(xMin=0, xMax=max(cols, 1), yMin=0, yMax=max(rows, 1))
        self.plot.vb.setRange(xRange=(0, cols), yRange=(0, rows), padding=0)
        self.image.show()
        self.message.hide()
        self.clear_marks()

    def update_values(self, matrix) -> bool:
        """Redraw new values of the same shape, labels, mask, levels and colours (a matrix changing
        while a model trains): only the image is replaced. False (nothing done) when the shape
        differs or nothing is drawn; then use ``set_matrix``."""
        m = np.asarray(matrix)
        if self.matrix is None or m.shape != self.matrix.shape or self.masked is None or not self.image.isVisible():
            return False
        hidden = self.masked | ~np.isfinite(m)
        if not np.array_equal(hidden, self.masked):
            return False
        image, hidden_image, _factor = display_reduce(m, hidden)
        self.matrix, self.image_data = m, np.where(hidden_image, self.levels[0], image)
        self.image.setImage(self.image_data, autoLevels=False, levels=self.levels)
        return True

    def clear(self, message: str = "") -> None:
        self.matrix = self.masked = self.image_data = None
        if self._graphics is not None:  # an unbuilt plot shows nothing already
            self.image.hide()
            self.overlay.hide()
            self.clear_marks()
        self.message.setText(message)
        self.message.setVisible(bool(message))

    # -- highlights ------------------------------------------------------------------------------
    def highlight_row(self, row: int | None) -> None:
        self._mark(self.row_marks, None if row is None else QRectF(0, row, self._shape()[1], 1))

    def highlight_col(self, col: int | None) -> None:
        self._mark(self.col_marks, None if col is None else QRectF(col, 0, 1, self._shape()[0]))

    def highlight_cell(self, row: int | None, col: int | None = None) -> None:
        self._mark(self.cell_mark, None if row is None or col is None else QRectF(col, row, 1, 1))

    def clear_marks(self) -> None:
        if self._graphics is None:
            return
        for item in (self.row_marks, self.col_marks, self.cell_mark):
            item.hide()

    def highlighted(self) -> dict[str, tuple[int, ...] | None]:
        """Which row / column / cell is highlighted (for tests): {"row": (r,), "col": (c,), "cell": (r, c)}."""
        return {
            "row": _marked(self.row_marks, "row"),
            "col": _marked(self.col_marks, "col"),
            "cell": _marked(self.cell_mark, "cell"),
        }

    def _shape(self) -> tuple[int, int]:
        return (0, 0) if self.matrix is None else self.matrix.shape

    def _mark(self, item: QGraphicsRectItem, rect: QRectF | None) -> None:
        if rect is None or self.matrix is None:
            item.hide()
        else:
            item.setRect(rect)
            item.show()

    # -- hover -----------------------------------------------------------------------------------
    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        if self.matrix is None or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        point = self.plot.vb.mapSceneToView(scene_pos)
        c, r = math.floor(point.x()), math.floor(point.y())
        rows, cols = self._shape()
        if 0 <= r < rows and 0 <= c < cols:
            return r, c
        return None

    @Slot(object)
    def _on_mouse_moved(self, scene_pos) -> None:
        hit = self.cell_at(scene_pos)
        if hit is None:
            if self._hover is not None:
                self._hover = None
                self.hoverLeft.emit()
            return
        if hit != self._hover:
            self._hover = hit
            self.cellHovered.emit(*hit)

    # -- export ----------------------------------------------------------------------------------
    def plain_title(self) -> str:
        doc = pg.QtGui.QTextDocument()
        doc.setHtml(self.title.text())
        return doc.toPlainText().replace("\n", " ").strip()

    def export(self, path: str) -> str:
        """Write the matrix to ``path``: .png/.svg/.pdf as a figure, .npy/.csv as exact numbers.
        Raises attndesk.render.ExportError (or ValueError) with the reason."""
        return self._export_job(path)()

    def _export_job(self, path: str):
        """The export of what is shown now, as a function of nothing (it may run in a pool thread)."""
        if self.matrix is None:
            raise ExportError("nothing to export yet")
        labels = (self.row_labels, self.col_labels)
        return export_job(path, self.matrix, self.masked, labels, self.plain_title(), self.colormap_name, self.levels)

    @Slot()
    def _on_export_clicked(self) -> None:
        """Ask for a file, then draw and write it in a pool thread (a large figure takes seconds)."""
        name = (self.plain_title().split(" ")[0] or "matrix").strip(":") + ".png"
        path, _ = QFileDialog.getSaveFileName(
            self, "Export matrix", name, "Figure (*.png *.svg *.pdf);;Numbers (*.npy *.csv)"
        )
        if not path:
            return
        try:
            job = self._export_job(path)
        except ExportError as exc:
            self._export_failed(exc)
            return
        self.exportButton.setEnabled(False)
        self._background.start(
            job, done=self._export_done, failed=self._export_failed, expected=(ExportError, ValueError, OSError)
        )

    def _export_done(self, _path: str) -> None:
        self.exportButton.setEnabled(True)
        self.message.hide()

    def _export_failed(self, exc: Exception) -> None:
        self.exportButton.setEnabled(True)
        self.message.setText(f"export failed: {exc}")
        self.message.show()
