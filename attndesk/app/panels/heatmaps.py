"""Per-head attention heatmaps: a reflowing grid, a mean view, one enlarged head.

Everything drawn comes from a ``HeatmapSource`` (see heatmap_source.py). Each heatmap is a
pyqtgraph ``ImageItem`` placed over the token rectangle (0, 0, Lk, L), so cell (q, k) is the unit
square at x=k, y=q whatever the source's downsampling; masked cells get a hatched overlay.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from .heatmap_source import MEAN, Head, HeatmapSource
from .token_axis import AxisLabels, TokenAxis, label_font

COLORMAPS = (("viridis", "viridis"), ("magma", "magma"), ("CET-L1", "grey (CET-L1)"))
SCALE_MODES = (("shared", "shared across heads"), ("per-head", "per head"))
ALL = "all"
# Building a cell takes ~5 ms (up to ~35 ms when the CPUs are busy), and the view repaints after
# every slice: a slice adds cells until this much time has passed (so mostly one), keeping each
# event-loop turn well under the 100 ms the window may stall.
_SLICE_S = 0.004

_HATCH_DARK = (150, 150, 150, 255)
_HATCH_LIGHT = (220, 220, 220, 255)
_HIGHLIGHT = QColor(255, 64, 64)
HINT = "Hover a cell for its exact weight · click a heatmap to enlarge it, double-click to go back"


def hatch_overlay(masked: np.ndarray) -> np.ndarray:
    """RGBA [rows*k, cols*k, 4]: diagonal grey stripes where masked, transparent elsewhere."""
    rows, cols = masked.shape
    k = max(1, min(8, 256 // max(rows, cols, 1)))
    big = np.repeat(np.repeat(masked, k, axis=0), k, axis=1)
    i, j = np.indices(big.shape)
    stripes = ((i + j) // 2) % 2 == 0
    out = np.zeros((*big.shape, 4), dtype=np.uint8)
    out[big & stripes] = _HATCH_DARK
    out[big & ~stripes] = _HATCH_LIGHT
    return out


def readout_text(source: HeatmapSource, head: Head, q: int, k: int) -> str:
    """The hover line, e.g. ``head 2 · query "cat" (3) → key "sat" (2): 0.2314``."""
    value = source.value_at(head, q, k)
    who = "mean of heads" if head == MEAN else f"head {int(head)}"
    masked = source.mask is not None and not bool(source.mask[q, k])
    tail = " (masked)" if masked else ""
    return (f'{who} · query "{source.query_labels[q]}" ({q}) → '
            f'key "{source.key_labels[k]}" ({k}): {format_weight(value)}{tail}')


def format_weight(value: float) -> str:
    """Four decimals; three significant digits below 0.01, where long documents' weights
    (about 1/L) would otherwise all read 0.0001 or 0.0000."""
    return f"{value:.4f}" if value == 0 or abs(value) >= 0.01 else f"{value:.3g}"


class _ClickLabel(pg.LabelItem):
    """A small text item that reports clicks (the per-heatmap export link)."""

    def __init__(self, text: str, callback, **kw) -> None:
        super().__init__(text, **kw)
        self._callback = callback
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("Export this heatmap (image or numbers)")

    def mouseClickEvent(self, ev):  # noqa: N802 - Qt's name
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._callback()


class _FootLabel(QLabel):
    """A one-line label under the heatmaps that never widens the window: a long note (a long
    document's overview note is ~1000 px) is cut at the panel's edge and kept whole in its tooltip.
    A wider window would also resize the panel and rebuild every heatmap."""

    def __init__(self, text: str = "", **kw) -> None:
        super().__init__(text, **kw)
        self.setMinimumWidth(40)  # below its text's width: the layout may shrink it that far

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self.setToolTip(text.strip())


@dataclass
class _Cell:
    head: Head
    vb: pg.ViewBox
    image: pg.ImageItem
    overlay: pg.ImageItem
    highlight: QGraphicsRectItem
    title: pg.LabelItem
    left: TokenAxis
    bottom: TokenAxis


class HeatmapPanel(QWidget):
    """The ``heatmapView`` widget. Call ``set_source``; listen to ``hovered``/``exportRequested``."""

    hovered = Signal(str)  # the read-out line ("" when the mouse leaves the cells)
    exportRequested = Signal(object)  # "all", "mean" or a head index
    viewChanged = Signal(object)  # the new view target
    appearanceChanged = Signal()  # colormap or scale mode changed
    shown = Signal()  # every heatmap of the current source is drawn

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("heatmapView")
        self._source: HeatmapSource | None = None
        self._cells: list[_Cell] = []
        self._target: Head = ALL
        self._columns = 0
        self._hover: tuple[int, int] | None = None
        self._labels: tuple[AxisLabels, AxisLabels] | None = None
        self._levels: dict = {}
        self._cell_size = (100.0, 100.0)
        self._build_token = 0

        bar = QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 2)
        self.viewCombo = QComboBox(objectName="heatmapViewCombo")
        self.viewCombo.setToolTip("Show every head, the mean over heads, or one head enlarged "
                                  "(click a heatmap to enlarge it)")
        self.colormapCombo = QComboBox(objectName="colormapCombo")
        for name, label in COLORMAPS:
            self.colormapCombo.addItem(label, name)
        self.scaleModeCombo = QComboBox(objectName="scaleModeCombo")
        for name, label in SCALE_MODES:
            self.scaleModeCombo.addItem(label, name)
        self.scaleModeCombo.setToolTip("Shared: one colour scale for all heads (compare heads). "
                                       "Per head: each head from 0 to its own maximum.")
        self.exportButton = QPushButton("Export…", objectName="heatmapExportButton")
        self.exportButton.setToolTip("Export the heatmaps on screen (Ctrl+E)")
        bar.addWidget(QLabel("Show"))
        bar.addWidget(self.viewCombo)
        bar.addSpacing(8)
        bar.addWidget(QLabel("Colormap"))
        bar.addWidget(self.colormapCombo)
        bar.addSpacing(8)
        bar.addWidget(QLabel("Scale"))
        bar.addWidget(self.scaleModeCombo)
        self._extra = QHBoxLayout()  # later modes add controls here (e.g. a layer selector)
        bar.addLayout(self._extra)
        bar.addStretch(1)
        bar.addWidget(self.exportButton)

        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground("w")
        self.graphics.ci.setSpacing(2)
        self.graphics.ci.setContentsMargins(2, 2, 2, 2)
        self.graphics.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.colorBar = pg.ColorBarItem(values=(0.0, 1.0), colorMap=pg.colormap.get("viridis"),
                                        interactive=False, width=12)
        self.colorBar.axis.enableAutoSIPrefix(False)  # weights read 0.2, not "200 (x0.001)"
        self.readout = _FootLabel(" ", objectName="heatmapReadout")
        self.readout.setTextFormat(Qt.TextFormat.PlainText)  # tokens may contain "<"
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = _FootLabel("", objectName="heatmapNote")
        self.note.setStyleSheet("color: #666;")
        self.placeholder = QLabel("Type some text to see its attention.", alignment=Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setStyleSheet("color: #777; font-size: 14px;")

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(self.placeholder, 1)
        layout.addWidget(self.graphics, 1)
        foot = QHBoxLayout()
        foot.setContentsMargins(6, 0, 6, 2)
        foot.addWidget(self.readout, 1)
        foot.addWidget(self.note)
        layout.addLayout(foot)
        self.graphics.hide()

        self._reflow_timer = QTimer(self, singleShot=True, interval=60)
        self._reflow_timer.timeout.connect(self._reflow_if_needed)
        self.graphics.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.graphics.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.viewCombo.activated.connect(self._on_view_combo)
        self.colormapCombo.currentIndexChanged.connect(self._on_appearance)
        self.scaleModeCombo.currentIndexChanged.connect(self._on_appearance)
        self.exportButton.clicked.connect(lambda: self.exportRequested.emit(self._target))
        self._fill_view_combo()

    # -- public API --------------------------------------------------------------------------
    def add_toolbar_widget(self, widget: QWidget) -> None:
        """Let a mode add its own control (e.g. a layer selector) to the heatmap toolbar."""
        self._extra.addWidget(widget)

    def add_header_widget(self, widget: QWidget) -> None:
        """Let a mode add a full-width line (e.g. a run summary) just under the toolbar."""
        self.layout().insertWidget(1, widget)

    def source(self) -> HeatmapSource | None:
        return self._source

    def set_source(self, source: HeatmapSource | None) -> None:
        """Draw a new source; keeps the view (grid / mean / head n) when it still exists."""
        old = self._source
        self._source = source
        if source is None:
            self._build_token += 1
            self._clear_cells()
            self.graphics.hide()
            self.placeholder.show()
            self._fill_view_combo()
            return
        self.placeholder.hide()
        self.graphics.show()
        font = label_font()
        self._labels = (AxisLabels(source.query_labels, font), AxisLabels(source.key_labels, font))
        if isinstance(self._target, int) and self._target >= source.num_heads:
            self._target = ALL
        self._fill_view_combo()
        heads = self._heads_for_target()
        # a new length needs new cells: each view box's limits and range are set to L x Lk when built
        same_layout = (old is not None and old.shape == source.shape and [c.head for c in self._cells] == heads
                       and self._columns == self._best_columns(len(heads)))
        notes = [source.downsample_note()]
        if source.display_mask() is not None:
            notes.insert(0, "hatched = masked (the query may not attend there)")
        self.note.setText(" · ".join(n for n in notes if n))
        self._hover = None
        self._show_hint()
        if same_layout:
            self._build_token += 1  # a build still in progress for an older source stops
            self._update_images()
            self.shown.emit()
        else:
            self._build_cells(incremental=True)

    def view_target(self) -> Head:
        return self._target

    def set_view_target(self, target: Head) -> None:
        if target not in (ALL, MEAN) and not isinstance(target, (int, np.integer)):
            raise ValueError(f"unknown heatmap view {target!r}")
        if isinstance(target, (int, np.integer)):
            target = int(target)
        self._target = target
        if isinstance(target, int) and (self._source is None or target >= self._source.num_heads):
            return  # e.g. a session's head 7 before its 8-head result arrives: set_source shows it
        self._fill_view_combo()
        if self._source is not None:
            self._build_cells()
        self.viewChanged.emit(target)

    def colormap_name(self) -> str:
        return self.colormapCombo.currentData()

    def set_colormap_name(self, name: str) -> None:
        index = self.colormapCombo.findData(name)
        if index < 0:
            raise ValueError(f"unknown colormap {name!r}; choose one of: {', '.join(n for n, _ in COLORMAPS)}")
        self.colormapCombo.setCurrentIndex(index)

    def shared_scale(self) -> bool:
        return self.scaleModeCombo.currentData() == "shared"

    def set_shared_scale(self, shared: bool) -> None:
        self.scaleModeCombo.setCurrentIndex(0 if shared else 1)

    def displayed_heads(self) -> list[Head]:
        return [c.head for c in self._cells]

    def displayed_arrays(self) -> list[np.ndarray]:
        """The arrays the ImageItems draw, in displayed order (for tests and exports)."""
        return [c.image.image for c in self._cells]

    def cell_views(self) -> list[tuple[Head, pg.ViewBox, pg.ImageItem]]:
        """(head, view box, image) of each displayed heatmap: zoom pictures attach here."""
        return [(c.head, c.vb, c.image) for c in self._cells]

    def image_levels(self) -> list[tuple[float, float]]:
        return [tuple(map(float, c.image.levels)) for c in self._cells]

    def hover_cell(self, q: int, k: int) -> str:
        """Show the read-out for cell (q, k) of the first displayed heatmap and highlight it."""
        if not self._cells:
            return ""
        self._set_hover(self._cells[0], q, k)
        return self.readout.text()

    def highlighted_cells(self) -> list[tuple[int, int] | None]:
        out = []
        for c in self._cells:
            if not c.highlight.isVisible():
                out.append(None)
            else:
                r = c.highlight.rect()
                out.append((int(r.y()), int(r.x())))
        return out

    # -- layout --------------------------------------------------------------------------------
    def _heads_for_target(self) -> list[Head]:
        if self._source is None:
            return []
        if self._target == ALL:
            return list(range(self._source.num_heads))
        return [self._target]

    def _best_columns(self, n: int) -> int:
        """Columns that give the largest heatmaps in the current panel."""
        if n <= 1 or self._source is None:
            return 1
        best, best_w = 1, -1.0
        for cols in range(1, n + 1):
            w, _ = self._cell_dims(n, cols, math.ceil(n / cols))
            if w > best_w + 1e-9:
                best, best_w = cols, w
        return best

    def _clear_cells(self) -> None:
        self.graphics.ci.clear()
        self._cells = []
        self._columns = 0

    def _build_cells(self, *, incremental: bool = False) -> None:
        """Lay out one cell per displayed head and draw the images.

        ``incremental`` spreads the work over event-loop turns (a few cells per ~20 ms slice), so
        showing 16 new heatmaps never freezes the window; ``shown`` is emitted when done.
        """
        self._build_token += 1
        token = self._build_token
        self._clear_cells()
        heads = self._heads_for_target()
        n = len(heads)
        cols = self._best_columns(n)
        rows = math.ceil(n / cols)
        self._columns = cols
        self._levels = self._compute_levels()
        self._cell_size = self._cell_dims(n, cols, rows)
        self.graphics.ci.addItem(self.colorBar, row=0, col=cols, rowspan=max(1, rows))
        # spare room goes to an empty last column/row, so cells keep their square-ish size
        self.graphics.ci.addItem(self._spacer(), row=0, col=cols + 1)
        self.graphics.ci.addItem(self._spacer(), row=rows, col=0)
        self._update_colorbar()
        pending = list(enumerate(heads))
        if not incremental:
            for i, head in pending:
                self._add_cell(i, head, n, cols, rows)
            self.shown.emit()
            return

        def step() -> None:
            if token != self._build_token:
                return  # a newer source or view replaced this build
            start = time.monotonic()
            while pending and time.monotonic() - start < _SLICE_S:
                i, head = pending.pop(0)
                self._add_cell(i, head, n, cols, rows)
            if pending:
                # a timer, not a posted event (posted events would starve other timers), bound to the
                # panel so that a build still in slices when the window closes just stops
                QTimer.singleShot(1, self, step)
            else:
                self.shown.emit()

        QTimer.singleShot(1, self, step)

    def is_building(self) -> bool:
        return len(self._cells) < len(self._heads_for_target())

    def _add_cell(self, i: int, head: Head, n: int, cols: int, rows: int) -> None:
        source = self._source
        single = n == 1
        L, Lk = source.shape
        r, c = divmod(i, cols)
        cell_layout = pg.GraphicsLayout()
        cell_layout.setSpacing(0)
        cell_layout.setContentsMargins(0, 0, 0, 0)
        title = pg.LabelItem(source.head_title(head), size="9pt", bold=single, color="#222222")
        export = _ClickLabel("⤓ export", lambda h=head: self.exportRequested.emit(h), size="8pt",
                             color="#2a62c9")
        cell_layout.addItem(title, row=0, col=1)
        cell_layout.addItem(export, row=0, col=2)
        left, bottom = TokenAxis("left"), TokenAxis("bottom")
        # A bare ViewBox with two linked axes: a PlotItem per head costs ~10 ms to build.
        vb = pg.ViewBox(enableMenu=False, invertY=True, defaultPadding=0.0)  # query 0 at the top
        vb.setMouseEnabled(single, single)
        left.linkToView(vb)
        bottom.linkToView(vb)
        # Small multiples share their axes: token labels on the outer edges only.
        left.set_labels(self._labels[0])
        bottom.set_labels(self._labels[1])
        left.set_show_labels(single or c == 0)
        bottom.set_show_labels(single or r == rows - 1 or i + cols >= n)
        image = pg.ImageItem(axisOrder="row-major")
        overlay = pg.ImageItem(axisOrder="row-major")
        overlay.setZValue(5)
        vb.addItem(image)
        vb.addItem(overlay)
        highlight = QGraphicsRectItem(0, 0, 1, 1)
        pen = QPen(_HIGHLIGHT)
        pen.setWidth(2)
        pen.setCosmetic(True)
        highlight.setPen(pen)
        highlight.setZValue(10)
        highlight.hide()
        vb.addItem(highlight, ignoreBounds=True)
        vb.setLimits(xMin=0, xMax=Lk, yMin=0, yMax=L)
        vb.setRange(xRange=(0, Lk), yRange=(0, L), padding=0)
        cell_layout.addItem(left, row=1, col=0)
        cell_layout.addItem(vb, row=1, col=1, colspan=2)
        cell_layout.addItem(bottom, row=2, col=1, colspan=2)
        self.graphics.ci.addItem(cell_layout, row=r, col=c)
        cell = _Cell(head, vb, image, overlay, highlight, title, left, bottom)
        self._size_cell(cell)
        self._cells.append(cell)
        self._draw_cell(cell)

    @staticmethod
    def _spacer() -> pg.GraphicsWidget:
        spacer = pg.GraphicsWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        spacer.setMinimumSize(0, 0)
        return spacer

    def _cell_dims(self, n: int, cols: int, rows: int) -> tuple[float, float]:
        """Pixel size of one heatmap: as large as fits, cells square (L x Lk keeps its aspect)."""
        L, Lk = self._source.shape
        left_w = self._labels[0].widest + 16
        bottom_h = self._labels[1].widest + 16
        avail_w = self.width() - 110 - left_w - cols * 12  # colour bar, labels, gaps
        avail_h = self.height() - 80 - bottom_h - rows * 26  # toolbar, read-out, titles
        aspect = Lk / L  # width / height of the matrix
        width = max(40.0, min(avail_w / cols, avail_h / rows * aspect))
        return width, max(40.0, width / aspect)

    def _size_cell(self, cell: _Cell) -> None:
        w, h = self._cell_size
        cell.vb.setMinimumSize(w, h)
        cell.vb.setMaximumSize(w, h)
        cell.bottom.setMinimumWidth(w)  # the axis maps the view range onto its own width
        cell.bottom.setMaximumWidth(w)
        cell.left.setMinimumHeight(h)
        cell.left.setMaximumHeight(h)

    def _compute_levels(self) -> dict:
        """Colour scale and the masked-cell hatch, shared by every cell of one source."""
        source = self._source
        shared = self.shared_scale()
        heads = [source.level_max(h) for h in range(source.num_heads)] + [source.level_max(MEAN)]
        top = max(heads) if shared else 1.0
        mask = source.display_mask()
        return {
            "cmap": pg.colormap.get(self.colormap_name()),
            "shared": shared,
            "top": top if top > 0 else 1.0,
            "hatch": hatch_overlay(mask) if mask is not None else None,
            "rect": QRectF(0, 0, source.shape[1], source.shape[0]),
        }

    def _draw_cell(self, cell: _Cell) -> None:
        source, lv = self._source, self._levels
        data = source.display_matrix(cell.head)
        hi = lv["top"] if lv["shared"] else (source.level_max(cell.head) or 1.0)
        cell.image.setColorMap(lv["cmap"])
        cell.image.setImage(data, autoLevels=False, levels=(0.0, hi))
        cell.image.setRect(lv["rect"])
        cell.title.setText(source.head_title(cell.head))
        if lv["hatch"] is not None:
            cell.overlay.setImage(lv["hatch"], autoLevels=False, levels=(0, 255))
            cell.overlay.setRect(lv["rect"])
            cell.overlay.show()
        else:
            cell.overlay.hide()

    def _update_colorbar(self) -> None:
        lv = self._levels
        self.colorBar.setColorMap(lv["cmap"])
        if lv["shared"]:
            self.colorBar.setLevels(values=(0.0, lv["top"]))
            self.colorBar.axis.setLabel("weight")
        else:
            self.colorBar.setLevels(values=(0.0, 1.0))
            self.colorBar.axis.setLabel("fraction of each head's max")

    def _update_images(self) -> None:
        """Redraw the existing cells (new data of the same shape, colormap or scale change)."""
        if self._source is None:
            return
        self._levels = self._compute_levels()
        for cell in self._cells:
            cell.left.set_labels(self._labels[0])
            cell.bottom.set_labels(self._labels[1])
            self._draw_cell(cell)
        self._update_colorbar()

    def _fill_view_combo(self) -> None:
        combo = self.viewCombo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("all heads", ALL)
        combo.addItem("mean over heads", MEAN)
        if self._source is not None:
            for h in range(self._source.num_heads):
                combo.addItem(f"head {h} (enlarged)", h)
        index = combo.findData(self._target)
        combo.setCurrentIndex(max(0, index))
        combo.blockSignals(False)

    def resizeEvent(self, event):  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._reflow_timer.start()

    @Slot()
    def _reflow_if_needed(self) -> None:
        if self._source is None or not self._cells:
            return
        if self.is_building():
            return
        if self._best_columns(len(self._cells)) != self._columns:
            self._build_cells(incremental=True)  # 16 cells at once would freeze the window
            return
        n = len(self._cells)
        self._cell_size = self._cell_dims(n, self._columns, math.ceil(n / self._columns))
        for cell in self._cells:
            self._size_cell(cell)

    # -- interaction ---------------------------------------------------------------------------
    @Slot(int)
    def _on_view_combo(self, index: int) -> None:
        self.set_view_target(self.viewCombo.itemData(index))

    @Slot()
    def _on_appearance(self) -> None:
        self._update_images()
        self.appearanceChanged.emit()

    def _cell_at(self, scene_pos) -> tuple[_Cell, int, int] | None:
        if self._source is None:
            return None
        L, Lk = self._source.shape
        for cell in self._cells:
            if cell.vb.sceneBoundingRect().contains(scene_pos):
                point = cell.vb.mapSceneToView(scene_pos)
                k, q = int(math.floor(point.x())), int(math.floor(point.y()))
                if 0 <= q < L and 0 <= k < Lk:
                    return cell, q, k
        return None

    def _set_hover(self, cell: _Cell, q: int, k: int) -> None:
        self._hover = (q, k)
        for c in self._cells:  # the same cell in every head
            c.highlight.setRect(QRectF(k, q, 1, 1))
            c.highlight.show()
        text = readout_text(self._source, cell.head, q, k)
        self.readout.setStyleSheet("")
        self.readout.setText(text)
        self.hovered.emit(text)

    def _clear_hover(self) -> None:
        if self._hover is None:
            return
        self._hover = None
        for c in self._cells:
            c.highlight.hide()
        self._show_hint()
        self.hovered.emit("")

    def _show_hint(self) -> None:
        self.readout.setStyleSheet("color: #888;")
        self.readout.setText(HINT)

    @Slot(object)
    def _on_mouse_moved(self, scene_pos) -> None:
        hit = self._cell_at(scene_pos)
        if hit is None:
            self._clear_hover()
        else:
            self._set_hover(*hit)

    @Slot(object)
    def _on_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        if self._target != ALL:
            if event.double():  # back from the enlarged head (or the mean) to the grid
                self.set_view_target(ALL)
            return
        hit = self._cell_at(event.scenePos())
        if hit is not None:
            self.set_view_target(hit[0].head)
