"""The heatmap panel's canvas: one cell per shown head, placed by ``attndesk.render.layout``.

Every item (view box, title, export link, axes, colour bar, K/V group header) gets its
rectangle from the same pure ``pack_grid`` the exported figure uses, so rows are spaced for
the labels they carry and nothing overlaps; a resize only moves items (no rebuild). Cells are
pooled: a new result with as many heads reuses them, only new heads cost a new cell (~5 ms).
``geometry()`` reports every item's rectangle, which the screenshot tests check for overlaps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsLineItem, QGraphicsPathItem, QGraphicsRectItem, QGraphicsSimpleTextItem

from attndesk.attention.types import Head
from attndesk.render import colormaps
from attndesk.render.cells import row_runs
from attndesk.render.layout import GridLayout, GridSpec, Rect, band_edges, pack_grid

from ...widgets.token_axis import TokenAxis, label_room

HIGHLIGHT = QColor(255, 64, 64)
BAND = QColor(230, 60, 60)
LINK = QColor(42, 98, 201)
TITLE = QColor(34, 34, 34)
MUTED = QColor(110, 110, 110)
MARGIN = 4.0
BAR_W = 12.0
BAR_ROOM = 74.0  # gap + bar + tick labels + the bar's rotated label
EXPORT_TEXT, EXPORT_SHORT = "⤓ export", "⤓"
# On screen a cell may be this much wider than tall (or taller than wide): square cells alone
# left ~40 % of the panel empty with 4 heads; stretched more, a matrix stops reading as one.
ASPECT_LIMIT = 1.75


def title_font() -> QFont:
    font = QFont()
    font.setPixelSize(12)
    return font


class ClickText(QGraphicsSimpleTextItem):
    """A text item that reports left clicks (pyqtgraph's scene calls ``mouseClickEvent``)."""

    def __init__(self, text: str, callback) -> None:
        super().__init__(text)
        self._callback = callback
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def mouseClickEvent(self, ev):
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._callback()


@dataclass
class Cell:
    """The items of one heatmap; ``head`` is what it shows now."""

    head: Head
    vb: pg.ViewBox
    image: pg.ImageItem
    masked: QGraphicsPathItem  # masked cells in the mask colour
    hatch: QGraphicsPathItem  # and hatched over it (a device-pixel pattern: crisp at any zoom)
    highlight: QGraphicsRectItem
    band: QGraphicsPathItem
    title: QGraphicsSimpleTextItem
    export: ClickText
    left: TokenAxis
    bottom: TokenAxis
    title_text: str = ""  # the whole title (the item shows it elided to the map's width)

    def items(self) -> list:
        """What is shown or hidden with the cell (axes follow their labels)."""
        return [self.vb, self.title, self.export]


def _box_item(z: float, pen: QPen) -> QGraphicsRectItem:
    item = QGraphicsRectItem(0, 0, 1, 1)
    item.setPen(pen)
    item.setZValue(z)
    item.hide()
    return item


class HeatmapCanvas(pg.GraphicsView):
    """The drawing area: cells, colour bar and group headers over one white background."""

    resized = Signal()

    def __init__(self, export_clicked) -> None:
        super().__init__(background="w")
        self.root = pg.GraphicsWidget()
        self.setCentralItem(self.root)
        self._export_clicked = export_clicked
        self.cells: list[Cell] = []
        self.shown = 0  # cells in use (the first ``shown`` of ``cells``)
        self.layout: GridLayout | None = None
        self.colorBar = pg.ColorBarItem(
            values=(0.0, 1.0), colorMap=pg.colormap.get("viridis"), interactive=False, width=BAR_W
        )
        self.colorBar.axis.enableAutoSIPrefix(False)  # weights read 0.2, not "200 (x0.001)"
        self.colorBar.setParentItem(self.root)
        self.colorBar.hide()
        self._groups: list[tuple[QGraphicsSimpleTextItem, QGraphicsLineItem]] = []
        self._band: tuple[tuple | None, QPainterPath] = (None, QPainterPath())  # the last band built, by shape
        self._font = title_font()
        self._metrics = QFontMetricsF(self._font)

    def resizeEvent(self, ev):
        super().resizeEvent(ev)
        self.resized.emit()

    # -- cells -----------------------------------------------------------------------------------
    def new_cell(self) -> Cell:
        """Build one cell's items (a bare ViewBox with two linked axes: a PlotItem costs ~10 ms)."""
        vb = pg.ViewBox(enableMenu=False, invertY=True, defaultPadding=0.0)  # query 0 at the top
        vb.setBorder(pg.mkPen("#888888", width=1, cosmetic=True))  # the frame, whether or not axes are shown
        vb.setParentItem(self.root)
        image = pg.ImageItem(axisOrder="row-major")
        vb.addItem(image)
        masked, hatch = QGraphicsPathItem(), QGraphicsPathItem()
        for z, item in ((4, masked), (5, hatch)):
            item.setPen(QPen(Qt.PenStyle.NoPen))
            item.setZValue(z)
            vb.addItem(item, ignoreBounds=True)
        pen = QPen(HIGHLIGHT)
        pen.setWidth(2)
        pen.setCosmetic(True)
        highlight = _box_item(10, pen)
        vb.addItem(highlight, ignoreBounds=True)
        band_pen = QPen(BAND)
        band_pen.setWidthF(1.6)
        band_pen.setCosmetic(True)
        band = QGraphicsPathItem()
        band.setPen(band_pen)
        band.setZValue(8)
        band.hide()
        vb.addItem(band, ignoreBounds=True)
        left, bottom = TokenAxis("left"), TokenAxis("bottom")
        for axis in (left, bottom):
            axis.setParentItem(self.root)
            axis.linkToView(vb)
        title = QGraphicsSimpleTextItem()
        title.setFont(self._font)
        title.setBrush(TITLE)
        title.setParentItem(self.root)
        cell = Cell(0, vb, image, masked, hatch, highlight, band, title, None, left, bottom)  # type: ignore[arg-type]
        cell.export = ClickText(EXPORT_TEXT, lambda: self._export_clicked(cell.head))
        cell.export.setFont(self._font)
        cell.export.setBrush(LINK)
        cell.export.setToolTip("Export this heatmap (image or numbers)")
        cell.export.setParentItem(self.root)
        self.cells.append(cell)
        return cell

    def show_cells(self, count: int) -> None:
        """Use the first ``count`` cells; hide the rest (kept for the next result)."""
        self.shown = count
        for i, cell in enumerate(self.cells):
            for item in cell.items():
                item.setVisible(i < count)
            for axis in (cell.left, cell.bottom):
                axis.setVisible(i < count and axis.labels_shown())

    def active(self) -> list[Cell]:
        return self.cells[: self.shown]

    @staticmethod
    def set_masked(cell: Cell, path: QPainterPath | None, cmap: str) -> None:
        """Fill the masked cells (``path`` in token coordinates, or None) and hatch them."""
        for item in (cell.masked, cell.hatch):
            item.setVisible(path is not None)
        if path is None:
            return
        cell.masked.setPath(path)
        cell.masked.setBrush(QColor(*colormaps.mask_rgb(cmap)))
        cell.hatch.setPath(path)
        cell.hatch.setBrush(QBrush(QColor(*colormaps.hatch_rgb(cmap)), Qt.BrushStyle.BDiagPattern))

    def set_band(self, cell: Cell, rows: int, cols: int, window: int | None, causal: bool, key_offset: int) -> None:
        """Outline a sliding window's band in token coordinates (shifted when keys are hidden)."""
        path = self._band_path(rows, cols, window, causal, key_offset) if window else None
        if path is None or path.isEmpty():
            cell.band.hide()
            return
        cell.band.setPath(path)
        cell.band.show()

    def _band_path(self, rows: int, cols: int, window: int, causal: bool, key_offset: int) -> QPainterPath:
        """The band's path, built once for all the cells of one shape from arrays (point by point
        per head it took 100+ ms at 16 heads x 7,000 or one head x 20,000 tokens in the soak; the limit is 100 ms)."""
        key = (rows, cols, window, causal, key_offset)
        if self._band[0] != key:
            lines = band_edges(rows, cols + key_offset, window, causal=causal)
            path = QPainterPath()
            if lines:
                points = np.concatenate(lines)
                connect = np.ones(len(points), dtype=np.int32)  # connect[i]: a segment from point i to i + 1
                connect[np.cumsum([len(line) for line in lines]) - 1] = 0  # no segment from one line to the next
                path = pg.arrayToQPath(points[:, 0] - key_offset, points[:, 1], connect=connect, finiteCheck=False)
            self._band = (key, path)
        return self._band[1]

    # -- layout ----------------------------------------------------------------------------------
    def spec(self, n: int, shape: tuple[int, int], widest: tuple[float, float], group: int) -> GridSpec:
        line = self._metrics.height()
        single = n == 1
        return GridSpec(
            n=n,
            cells_y=shape[0],
            cells_x=shape[1],
            left_band=label_room(widest[0]),
            bottom_band=label_room(widest[1]),
            title_h=line + 6,
            gap_x=0 if single else 12,
            gap_y=10,
            group=group if group > 1 else 1,
            group_h=line + 8 if group > 1 else 0.0,
            group_gap=10.0 if group > 1 else 0.0,
            aspect_limit=ASPECT_LIMIT if shape[0] == shape[1] else 4.0,
        )

    def place(self, spec: GridSpec, group_labels: list[str]) -> GridLayout | None:
        """Move every active item to its rectangle; returns the layout (None when nothing fits)."""
        size = self.size()
        area = Rect(
            MARGIN, MARGIN, max(1.0, size.width() - 2 * MARGIN - BAR_ROOM), max(1.0, size.height() - 2 * MARGIN)
        )
        layout = pack_grid(spec, area) or pack_grid(spec, Rect(area.x, area.y, max(area.w, 200.0), max(area.h, 200.0)))
        self.layout = layout
        if layout is None:
            return None
        for i, cell in enumerate(self.active()):
            self._place_cell(cell, layout, i)
        self._place_groups(layout, group_labels)
        maps = [layout.map_rect(i) for i in range(spec.n)]
        top, bottom = maps[0].y, max(m.bottom for m in maps)
        self.colorBar.setGeometry(QRectF(max(m.right for m in maps) + 10, top, BAR_ROOM - 14, bottom - top))
        self.colorBar.show()
        return layout

    def _place_cell(self, cell: Cell, layout: GridLayout, i: int) -> None:
        """Map, title and, on the outer edges only, the token axes (an axis costs ~3 ms to paint)."""
        m = layout.map_rect(i)
        cell.vb.setGeometry(QRectF(m.x, m.y, m.w, m.h))
        for axis, shown, box in (
            (cell.left, layout.y_labelled(i), QRectF(m.x - layout.spec.left_band, m.y, layout.spec.left_band, m.h)),
            (cell.bottom, layout.x_labelled(i), QRectF(m.x, m.bottom, m.w, layout.spec.bottom_band)),
        ):
            axis.set_show_labels(shown)
            axis.setVisible(shown)
            if shown:  # a hidden axis is placed when it is next shown (each move re-lays it out)
                axis.setGeometry(box)
        self._place_title(cell, layout.title_rect(i))

    def _place_title(self, cell: Cell, box: Rect) -> None:
        """Title centred over the map (left-aligned when that would reach the export link, elided
        when even that does not fit); the link at the right, shortened to "⤓" on narrow maps."""
        fm = self._metrics
        full = fm.horizontalAdvance(cell.title_text)
        link = EXPORT_TEXT if full + 2 * fm.horizontalAdvance(EXPORT_TEXT) + 12 <= box.w else EXPORT_SHORT
        link_x = box.right - fm.horizontalAdvance(link)
        y = box.y + (box.h - fm.height()) / 2
        _set_text(cell.export, link, link_x, y)
        text = fm.elidedText(cell.title_text, Qt.TextElideMode.ElideRight, max(0.0, link_x - 6 - box.x))
        width = fm.horizontalAdvance(text)
        x = box.center_x - width / 2
        _set_text(cell.title, text, x if x + width <= link_x - 6 else box.x, y)

    def _place_groups(self, layout: GridLayout, labels: list[str]) -> None:
        segments = layout.groups()
        while len(self._groups) < len(segments):
            text, line = QGraphicsSimpleTextItem(), QGraphicsLineItem()
            text.setFont(self._font)
            text.setBrush(MUTED)
            line.setPen(QPen(MUTED, 1))
            text.setParentItem(self.root)
            line.setParentItem(self.root)
            self._groups.append((text, line))
        for j, (text, line) in enumerate(self._groups):
            visible = j < len(segments)
            text.setVisible(visible)
            line.setVisible(visible)
            if not visible:
                continue
            group, _members, box = segments[j]
            shown = self._metrics.elidedText(labels[group], Qt.TextElideMode.ElideRight, box.w)
            _set_text(text, shown, box.center_x - self._metrics.horizontalAdvance(shown) / 2, box.y)
            y = box.y + self._metrics.height() + 3
            if line.line() != QLineF(box.x, y, box.right, y):
                line.setLine(box.x, y, box.right, y)

    def group_headers(self) -> list[str]:
        """The K/V group headers on screen, in order ("kv 0: q 0-3", ...)."""
        return [text.text() for text, _line in self._groups if text.isVisible()]

    def geometry(self) -> list[tuple[str, int, QRectF]]:
        """(kind, cell index, scene rect) of every visible item, for overlap checks."""
        out = []
        for i, cell in enumerate(self.active()):
            out.append(("map", i, cell.vb.sceneBoundingRect()))
            for kind, item in (("title", cell.title), ("export", cell.export)):
                out.append((kind, i, item.sceneBoundingRect()))
            for kind, axis in (("query labels", cell.left), ("key labels", cell.bottom)):
                extent = axis.label_extent()
                if extent is not None:
                    out.append((kind, i, extent))
        for j, (text, _line) in enumerate(self._groups):
            if text.isVisible():
                out.append(("group", j, text.sceneBoundingRect()))
        if self.colorBar.isVisible():
            out.append(("colour bar", 0, self.colorBar.sceneBoundingRect()))
        return out


def _set_text(item: QGraphicsSimpleTextItem, text: str, x: float, y: float) -> None:
    """Change a text item only when it changes: an update anywhere repaints the region spanning
    every update, so touching each title on every build slice would repaint the whole grid."""
    if item.text() != text:
        item.setText(text)
    if item.pos() != QPointF(x, y):
        item.setPos(x, y)


def masked_path(masked: np.ndarray | None, factor: int, shape: tuple[int, int]) -> QPainterPath | None:
    """The masked cells of a display mask (``factor`` tokens per cell) as one path in token
    coordinates, runs merged, clipped to the L x Lk matrix; None when nothing is masked."""
    if masked is None or not masked.any():
        return None
    lq, lk = shape
    path = QPainterPath()
    path.setFillRule(Qt.FillRule.WindingFill)
    for r0, r1, c0, c1 in row_runs(masked):
        path.addRect(
            QRectF(c0 * factor, r0 * factor, min(lk, c1 * factor) - c0 * factor, min(lq, r1 * factor) - r0 * factor)
        )
    return path


def cell_levels(lo: float, hi: float) -> tuple[float, float]:
    """A drawable level range (a flat matrix still gets a colour)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return (lo if math.isfinite(lo) else 0.0), (lo if math.isfinite(lo) else 0.0) + 1.0
    return lo, hi


__all__ = ["Cell", "ClickText", "HeatmapCanvas", "cell_levels", "masked_path"]
