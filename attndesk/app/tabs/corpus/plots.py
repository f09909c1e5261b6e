"""The Corpus tab's plots: the layers x heads grid with role badges, a metric's histogram over heads,
and a head's query/key atlas (one scatter item per kind, hover by a nearest-point lookup in numpy).

Each takes plain arrays; none of them queries a store.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsObject, QGraphicsRectItem

from attndesk.attention.types import head_name

from ...widgets.holdings import held_by
from ...widgets.lazy_plot import LazyPlot
from ...widgets.plot_axes import without_si_prefix

QUERY_COLOUR, KEY_COLOUR = "#e4572e", "#2e86ab"
LABEL_PX = 340  # the hover label's width: a long text wraps
BADGE_MIN_PX = 9  # a cell narrower than this on screen shows no badge (the letter would not fit)
ALIGN_CENTRE = Qt.AlignmentFlag.AlignCenter
HOVER_PX = 10  # a point this close to the pointer (in screen pixels) is the one hovered or clicked
ROLE_BADGES = {
    "induction": ("I", "#ffffff"),
    "duplicate-token": ("D", "#ffffff"),
    "previous-token": ("P", "#ffffff"),
    "first-token/sink": ("S", "#ffffff"),
    "self": ("s", "#ffffff"),
    "local": ("L", "#ffffff"),
    "broad": ("B", "#ffffff"),
    "register/sink": ("R", "#ffffff"),  # an image pass's roles (corpus/image_metrics.py)
    "global/class": ("G", "#ffffff"),
    "mixed": ("·", "#dddddd"),
}


def _colormap_lut() -> np.ndarray:
    return pg.colormap.get("viridis").getLookupTable(0.0, 1.0, 256)


def _levels(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    low, high = float(finite.min()), float(finite.max())
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def _cell_ticks(count: int) -> list[tuple[float, str]]:
    """A tick at the middle of each cell (every n-th when there are many), labelled by its index."""
    step = max(1, count // 16)
    return [(i + 0.5, str(i)) for i in range(0, count, step)]


def badge_legend(roles=None) -> str:
    """One line naming each role's badge (``roles``: the role names a store's pass gives, in order;
    None: every badge)."""
    names = list(ROLE_BADGES) if roles is None else list(roles)
    return (
        " · ".join(f"<b>{ROLE_BADGES[name][0]}</b> {name}" for name in names if name != "mixed") + " · <b>·</b> mixed"
    )


def _badge(role: object) -> tuple[str, str]:
    """A role's (letter, colour); "?" for a role without a badge."""
    return ROLE_BADGES.get(str(role), ("?", "#ffffff"))


class RoleBadges(QGraphicsObject):
    """Every cell's role initial, drawn by one item in one ``paint`` at the screen's font size.

    A ``pg.TextItem`` per cell cost ~0.7 ms each to build and re-laid out its transform on every
    paint: 72 heads took 50 ms of the GUI thread for each metric chosen. The hover names the cell's
    layer, head and role in the tooltip.
    """

    def __init__(self) -> None:
        super().__init__()
        self._roles = np.zeros((0, 0), dtype=object)
        self.setAcceptHoverEvents(True)
        self.setZValue(5)

    def set_roles(self, roles: np.ndarray) -> None:
        roles = np.asarray(roles, dtype=object)
        if roles.shape == self._roles.shape and bool(np.all(roles == self._roles)):
            return  # another metric, the same roles: nothing to draw again
        self.prepareGeometryChange()
        self._roles = roles.copy()
        self.update()

    def texts(self) -> np.ndarray:
        """The badge shown in each cell ([layers, heads] of one-letter strings)."""
        out = np.empty(self._roles.shape, dtype=object)
        for index, role in np.ndenumerate(self._roles):
            out[index] = _badge(role)[0]
        return out

    def boundingRect(self) -> QRectF:
        layers, heads = self._roles.shape
        return QRectF(0, 0, heads, layers)

    def paint(self, painter: QPainter, option, widget=None) -> None:
        if not self._roles.size:
            return
        cell = painter.transform().map(QPointF(1, 1)) - painter.transform().map(QPointF(0, 0))
        if min(abs(cell.x()), abs(cell.y())) < BADGE_MIN_PX:
            return  # cells too small to hold a legible letter
        to_device = painter.transform()
        painter.save()
        painter.resetTransform()
        box = QRectF(-abs(cell.x()) / 2, -abs(cell.y()) / 2, abs(cell.x()), abs(cell.y()))
        for (layer, head), role in np.ndenumerate(self._roles):
            text, colour = _badge(role)
            painter.setPen(QColor(colour))
            painter.drawText(box.translated(to_device.map(QPointF(head + 0.5, layer + 0.5))), ALIGN_CENTRE, text)
        painter.restore()

    def hoverMoveEvent(self, event) -> None:
        pos = event.pos()
        layer, head = int(np.floor(pos.y())), int(np.floor(pos.x()))
        rows, cols = self._roles.shape
        inside = 0 <= layer < rows and 0 <= head < cols
        self.setToolTip(f"{head_name(layer, head)}: {self._roles[layer, head]}" if inside else "")


class HeadGrid(LazyPlot):
    """Layers (rows, layer 0 at the top) x heads (columns), coloured by one metric, each cell with its
    role's initial. ``cellClicked(layer, head)``. Its plot is built on first show (``LazyPlot``):
    the items exist before and are drawn into it then."""

    cellClicked = Signal(int, int)

    def __init__(self, parent=None) -> None:
        super().__init__(self._build_grid, parent=parent)
        self.setObjectName("corpusGridHolder")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setLookupTable(_colormap_lut())
        self.badges = RoleBadges()
        self._values = np.zeros((0, 0))
        self._shape = (-1, -1)
        self._current = QGraphicsRectItem()
        self._current.setPen(QPen(QColor("#ff2d55"), 0))
        self._current.setZValue(10)
        self._current.hide()
        self._given = False  # values were set (the plot's axes and range follow them)
        self.when_built(lambda: self._frame() if self._given else None)

    def _build_grid(self) -> pg.PlotWidget:
        plot = pg.PlotWidget(background="w")
        plot.setObjectName("corpusGrid")
        without_si_prefix(plot.getPlotItem())  # counts and positions take no SI prefix
        plot.addItem(self.image)
        plot.getViewBox().invertY(True)
        plot.getViewBox().setMouseEnabled(False, False)
        plot.setLabel("bottom", "head")
        plot.setLabel("left", "layer")
        plot.hideButtons()
        plot.addItem(self.badges, ignoreBounds=True)
        plot.addItem(self._current)
        plot.scene().sigMouseClicked.connect(self._clicked)
        return plot

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the values it colours."""
        return held_by(self._values)

    def values(self) -> np.ndarray:
        """The [layers, heads] array the image shows (NaN: no value)."""
        return self._values

    def set_values(self, values: np.ndarray, roles: np.ndarray) -> None:
        """``values`` [layers, heads]; ``roles`` the same shape (strings)."""
        self._values, self._given = np.asarray(values, dtype=float), True
        self.image.setImage(
            np.nan_to_num(self._values, nan=_levels(self._values)[0]), levels=_levels(self._values), autoLevels=False
        )
        self.badges.set_roles(roles)
        if self._values.shape != self._shape and self.built:  # another metric keeps the axes
            self._frame()

    def _frame(self) -> None:
        """The axes' ticks and the range for the values' shape (re-set, they re-lay out the plot)."""
        layers, heads = self._shape = self._values.shape
        self.plot.getAxis("bottom").setTicks([_cell_ticks(heads)])
        self.plot.getAxis("left").setTicks([_cell_ticks(layers)])
        self.plot.getViewBox().setRange(QRectF(0, 0, heads, layers), padding=0.02)

    def set_current(self, layer: int, head: int) -> None:
        self._current.setRect(QRectF(head, layer, 1, 1))
        self._current.show()

    def _clicked(self, event) -> None:
        point = self.getViewBox().mapSceneToView(event.scenePos())
        layer, head = int(np.floor(point.y())), int(np.floor(point.x()))
        rows, cols = self._values.shape
        if 0 <= layer < rows and 0 <= head < cols:
            self.cellClicked.emit(layer, head)


class MetricHistogram(LazyPlot):
    """One metric over every head, with a line at the selected head's value (its plot built on
    first show, the items before)."""

    def __init__(self, parent=None) -> None:
        super().__init__(self._build_histogram, parent=parent)
        self.setObjectName("corpusHistogramHolder")
        self.bars = pg.PlotDataItem(stepMode="center", fillLevel=0, brush=(46, 134, 171, 150), pen="#2e86ab")
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen("#ff2d55", width=2))
        self.marker.hide()
        self.counts = np.zeros(0, dtype=int)
        self._metric = ""
        self.when_built(lambda: self.plot.setLabel("bottom", self._metric))

    def _build_histogram(self) -> pg.PlotWidget:
        plot = pg.PlotWidget(background="w")
        plot.setObjectName("corpusHistogram")
        without_si_prefix(plot.getPlotItem())  # counts and positions take no SI prefix
        plot.setLabel("left", "heads")
        plot.hideButtons()
        plot.getViewBox().setMouseEnabled(False, False)
        plot.addItem(self.bars)
        plot.addItem(self.marker)
        return plot

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): its counts."""
        return held_by(self.counts)

    def set_values(self, values: np.ndarray, metric: str) -> None:
        finite = np.asarray(values, dtype=float)
        finite = finite[np.isfinite(finite)]
        self._metric = metric
        if self.built:
            self.plot.setLabel("bottom", metric)
        if finite.size == 0:
            self.counts = np.zeros(0, dtype=int)
            self.bars.setData([0, 1], [0])
            return
        low, high = _levels(finite)
        self.counts, edges = np.histogram(finite, bins=min(30, max(5, finite.size // 3)), range=(low, high))
        self.bars.setData(edges, self.counts)

    def mark(self, value: float | None) -> None:
        if value is None or not np.isfinite(value):
            self.marker.hide()
        else:
            self.marker.setValue(float(value))
            self.marker.show()


class AtlasPlot(LazyPlot):
    """A head's queries and keys in two colours. ``set_points(x, y, is_query, describe)``; hovering
    shows ``describe(i)`` next to the nearest point, clicking emits ``pointClicked(i)``. Its plot
    is built on first show, the items before."""

    pointClicked = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(self._build_atlas, parent=parent)
        self.setObjectName("corpusAtlasHolder")
        self.queries = pg.ScatterPlotItem(pxMode=True, size=5, pen=None, brush=pg.mkBrush(QUERY_COLOUR), name="queries")
        self.keys = pg.ScatterPlotItem(pxMode=True, size=5, pen=None, brush=pg.mkBrush(KEY_COLOUR), name="keys")
        for item in (self.queries, self.keys):
            # drawn once per view change into a pixmap: the hover label moving over 100,000 points
            # then blits it instead of drawing every point again
            item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.label = pg.TextItem(
            "", color="#111111", anchor=(0, 1), fill=pg.mkBrush(255, 255, 255, 230), border=pg.mkPen("#888")
        )
        self.label.setZValue(20)
        self.label.setTextWidth(LABEL_PX)
        self.label.hide()
        self._xy = np.zeros((0, 2))
        self._is_query = np.zeros(0, bool)
        self._describe = lambda i: ""
        self.when_built(lambda: self.getViewBox().autoRange() if len(self._xy) else None)

    def _build_atlas(self) -> pg.PlotWidget:
        plot = pg.PlotWidget(background="w")
        plot.setObjectName("corpusAtlas")
        without_si_prefix(plot.getPlotItem())  # counts and positions take no SI prefix
        plot.addLegend(offset=(8, 8))
        plot.addItem(self.queries)
        plot.addItem(self.keys)
        plot.addItem(self.label, ignoreBounds=True)
        plot.scene().sigMouseMoved.connect(self._hover)
        plot.scene().sigMouseClicked.connect(self._clicked)
        return plot

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): its points."""
        return held_by(self._xy, self._is_query)

    def set_points(self, x: np.ndarray, y: np.ndarray, is_query: np.ndarray, describe) -> None:
        x, y, is_query = np.asarray(x, float), np.asarray(y, float), np.asarray(is_query, bool)
        xy = np.column_stack([x, y])
        same = np.array_equal(xy, self._xy) and np.array_equal(is_query, self._is_query)
        self._xy, self._is_query, self._describe = xy, is_query, describe
        if same:  # the same head under another metric: keep the points and the zoom
            return
        self.queries.setData(x=x[is_query], y=y[is_query])
        self.keys.setData(x=x[~is_query], y=y[~is_query])
        self.label.hide()
        if self.built:  # a plot built later fits its points as it is built
            self.getViewBox().autoRange()

    def count(self) -> int:
        return len(self._xy)

    def nearest(self, scene_pos: QPointF) -> int | None:
        """The point within ``HOVER_PX`` screen pixels of ``scene_pos``, or None (numpy over all points)."""
        vb = self.getViewBox()
        if not len(self._xy) or not vb.sceneBoundingRect().contains(scene_pos):
            return None
        at = vb.mapSceneToView(scene_pos)
        px, py = vb.viewPixelSize()
        if not (px > 0 and py > 0):
            return None
        d2 = ((self._xy[:, 0] - at.x()) / px) ** 2 + ((self._xy[:, 1] - at.y()) / py) ** 2
        index = int(np.argmin(d2))
        return index if d2[index] <= HOVER_PX**2 else None

    def _hover(self, scene_pos) -> None:
        index = self.nearest(scene_pos)
        if index is None:
            self.label.hide()
            return
        self.label.setHtml(self._describe(index))
        (left, right), (bottom, top) = self.getViewBox().viewRange()
        x, y = self._xy[index]
        # the label opens towards the middle of the plot, so it is never cut at an edge
        self.label.setAnchor((1 if x > (left + right) / 2 else 0, 0 if y > (bottom + top) / 2 else 1))
        self.label.setPos(x, y)
        self.label.show()

    def _clicked(self, event) -> None:
        index = self.nearest(event.scenePos())
        if index is not None:
            self.pointClicked.emit(index)


def token_html(kind: str, token: str, text: str, limit: int = 240) -> str:
    """The hover label: the point's kind and token, then its text (cut at ``limit`` characters)."""
    colour = QUERY_COLOUR if kind == "query" else KEY_COLOUR
    context = text if len(text) <= limit else text[:limit] + "…"
    return (
        f"<b style='color:{colour}'>{kind}</b> <b>{html.escape(token)}</b><br>"
        f"<span style='color:#444'>{html.escape(context)}</span>"
    )


__all__ = [
    "KEY_COLOUR",
    "QUERY_COLOUR",
    "ROLE_BADGES",
    "AtlasPlot",
    "HeadGrid",
    "MetricHistogram",
    "badge_legend",
    "token_html",
]
