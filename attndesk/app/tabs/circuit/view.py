"""The Circuit tab's view: which edges carry a behaviour, and why a head attends where it does.

A clean and a corrupted input, the answer (and wrong) token, the metric and the scoring method;
the edge graph drawn with its layers as columns (the embeddings first, the logits last), each
edge's width and colour by its score (red raises the metric, blue lowers it); a slider over the
circuit size whose faithfulness (and the random edge sets' mean and spread at that size) comes
from the curve the job computed, so a move costs no computation; the faithfulness curve beside
the random baseline; a click on an edge gives its exact effect, a click on a head picks it for
the score decomposition (and asks to open it in Heatmaps); the decomposition of one attention
cell's score into (query component) x (key component) terms; export of the graph as SVG or PNG.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGraphicsRectItem,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSlider,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named

from ...widgets.interp import RunBar
from ...widgets.lazy_plot import LazyPlot

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

METHODS = ("exact", "eap", "eap-ig")
METRICS = ("logit_diff", "prob", "kl")
TOP_TERMS = 12
_PARTS = {None: "self", "enc": "self", "dec": "decoder", "cross": "cross"}  # a node's prefix -> its part
_NODE = re.compile(r"^(?:(enc|dec|cross)\.)?L(\d+)\.(H|KV)(\d+)$")


@dataclass(frozen=True)
class CircuitShown:
    """What one job computed: the edge table of ``method`` (src, dst, kind, score), the exact one
    (the same table when ``method`` is exact), the faithfulness curve (size, faithfulness,
    random_mean, random_std, ...), the model's label and whether it reads token ids."""

    table: pd.DataFrame
    exact: pd.DataFrame
    curve: pd.DataFrame
    method: str
    metric: str
    model: str
    toy: bool


# -- the graph's geometry and painting (no widget: the export paints the same) -----------------------
def _place(name: str) -> tuple[float, float]:
    """(column, row) of a node: the embeddings in column 0, layer l's heads in column l + 1 (an
    encoder-decoder's decoder after its encoder; K/V groups just right of them, cross-attention
    heads below), its MLP in a column of its own after them, the logits last."""
    base = name.split(".", 1)[1] if name.startswith(("enc.", "dec.", "cross.")) else name
    if base == "embed":
        return (0.0 if not name.startswith("dec.") else 0.5, 0.0)
    if base == "logits":
        return (math.inf, 0.0)
    match = _NODE.match(name)
    if match:
        part, layer, kind, index = match.group(1), int(match.group(2)), match.group(3), int(match.group(4))
        offset = 0.3 if kind == "KV" else 0.0
        lane = 100 if part == "cross" else 0
        return (layer + 1 + offset + (1000 if part in ("dec", "cross") else 0), index + lane)
    mlp = re.match(r"^(?:(enc|dec)\.)?L(\d+)\.MLP$", name)
    if mlp:
        return (int(mlp.group(2)) + 1.5 + (1000 if mlp.group(1) == "dec" else 0), 0.0)  # its own column
    return (0.0, 0.0)


_KIND_OFFSET = {"q": -5.0, "k": 0.0, "v": 5.0}  # a head's query input arrives above its centre, value below
CAPTION = "red raises the metric, blue lowers it; width by |score|; into a head: q above, k centre, v below"


@dataclass(frozen=True)
class GraphLayout:
    """Node positions in a rectangle and the drawn edges (src, dst, kind, score)."""

    points: dict[str, QPointF]
    edges: list[tuple[str, str, str, float]]

    @classmethod
    def of(cls, table: pd.DataFrame, keep: int, rect: QRectF) -> GraphLayout:
        nodes = sorted(set(table["src"]) | set(table["dst"]), key=_place)
        places = {n: _place(n) for n in nodes}
        columns = sorted({c for c, _ in places.values()})
        col_index = {c: i for i, c in enumerate(columns)}
        rows: dict[float, list[str]] = {}
        for n in nodes:
            rows.setdefault(places[n][0], []).append(n)
        points = {}
        margin = 28.0
        width, height = rect.width() - 2 * margin, rect.height() - 2 * margin
        for column, members in rows.items():
            members.sort(key=lambda n: places[n][1])
            x = rect.left() + margin + width * (col_index[column] / max(1, len(columns) - 1))
            for i, n in enumerate(members):
                y = rect.top() + margin + height * ((i + 0.5) / len(members))
                points[n] = QPointF(x, y)
        order = np.argsort(-np.abs(table["score"].to_numpy(dtype=np.float64)), kind="stable")[:keep]
        edges = [
            (
                str(table["src"].iat[i]),
                str(table["dst"].iat[i]),
                str(table["kind"].iat[i]),
                float(table["score"].iat[i]),
            )
            for i in order
        ]
        return cls(points, edges)

    def ends(self, src: str, dst: str, kind: str) -> tuple[QPointF, QPointF]:
        """An edge's two ends: a head's q, k and v inputs arrive at three heights."""
        return self.points[src], self.points[dst] + QPointF(0.0, _KIND_OFFSET.get(kind, 0.0))

    def node_at(self, pos: QPointF, radius: float = 9.0) -> str | None:
        for name, point in self.points.items():
            if (point - pos).manhattanLength() <= radius * 1.4:
                return name
        return None

    def edge_at(self, pos: QPointF, tolerance: float = 5.0) -> tuple[str, str, str] | None:
        best, found = tolerance, None
        for src, dst, kind, _ in self.edges:
            a, b = self.ends(src, dst, kind)
            ab = b - a
            length2 = ab.x() ** 2 + ab.y() ** 2
            t = 0.0 if length2 == 0 else max(0.0, min(1.0, QPointF.dotProduct(pos - a, ab) / length2))
            near = a + ab * t
            distance = math.hypot(pos.x() - near.x(), pos.y() - near.y())
            if distance < best:
                best, found = distance, (src, dst, kind)
        return found


def paint_graph(painter: QPainter, rect: QRectF, layout: GraphLayout, selected: str | None = None) -> None:
    """Edges (width and colour by |score| and sign), then the nodes and their labels."""
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.fillRect(rect, QColor("white"))
    top = max((abs(s) for *_, s in layout.edges), default=1.0) or 1.0
    for src, dst, kind, score in reversed(layout.edges):  # the strongest drawn last, on top
        share = abs(score) / top
        colour = QColor(200, 40, 40) if score > 0 else QColor(40, 80, 200)
        colour.setAlphaF(0.25 + 0.75 * share)
        painter.setPen(QPen(colour, 0.6 + 5.0 * share))
        painter.drawLine(*layout.ends(src, dst, kind))
    font = painter.font()
    font.setPointSizeF(7.5)
    painter.setFont(font)
    painter.setPen(QColor(90, 90, 90))
    painter.drawText(rect.adjusted(6, 0, -6, -4), Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignLeft, CAPTION)
    for name, point in layout.points.items():
        painter.setPen(QPen(QColor("black"), 2.0 if name == selected else 1.0))
        painter.setBrush(QColor(255, 220, 120) if name == selected else QColor(235, 235, 235))
        painter.drawEllipse(point, 7.0, 7.0)
        painter.drawText(QRectF(point.x() - 40, point.y() + 8, 80, 14), Qt.AlignmentFlag.AlignHCenter, name)


def weight_text(name: str, view: dict | str) -> str:
    """One line of a head's weight-only numbers (Elhage et al.; docs/interp.md), or why there are none."""
    if isinstance(view, str):
        return f"{name}: no weight-only views: {view}"
    parts = [f"OV copying {view['copying']:+.2f}"]
    if view.get("previous") is not None:
        parts.append(f"positional previous-token {view['previous']:.2f}")
    for mode in ("Q", "K", "V"):
        if view.get(mode) is not None:
            source, score = view[mode]
            parts.append(f"{mode}-composition strongest from {source} ({score:.2f})")
    return f"{name}, from its weights alone: " + " · ".join(parts)


class CircuitGraph(QWidget):
    """The edge graph; ``nodeClicked(name)`` and ``edgeClicked(src, dst, kind)``."""

    nodeClicked = Signal(str)
    edgeClicked = Signal(str, str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("circuitGraph")
        self.setMinimumSize(420, 260)
        self.table: pd.DataFrame | None = None
        self.keep = 0
        self.selected: str | None = None

    def set_edges(self, table: pd.DataFrame | None, keep: int) -> None:
        self.table, self.keep = table, int(keep)
        self.update()

    def layout_in(self, rect: QRectF) -> GraphLayout | None:
        if self.table is None or not len(self.table):
            return None
        return GraphLayout.of(self.table, self.keep, rect)

    def paint_to(self, painter: QPainter, rect: QRectF) -> None:
        """The graph into any device's ``rect`` (the export's SVG and PNG)."""
        layout = self.layout_in(rect)
        if layout is None:
            painter.fillRect(rect, QColor("white"))
            return
        paint_graph(painter, rect, layout, self.selected)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        rect = QRectF(self.rect())
        if self.table is None:
            painter.fillRect(rect, QColor("white"))
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, "Run to score every edge")
        else:
            self.paint_to(painter, rect)
        painter.end()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        layout = self.layout_in(QRectF(self.rect()))
        if layout is None:
            return
        pos = event.position()
        node = layout.node_at(pos)
        if node is not None:
            self.selected = node
            self.update()
            self.nodeClicked.emit(node)
            return
        edge = layout.edge_at(pos)
        if edge is not None:
            self.edgeClicked.emit(*edge)


def _faithfulness_plot() -> pg.PlotWidget:
    """The faithfulness curve's plot (edges kept across)."""
    plot = pg.PlotWidget(objectName="circuitCurve")
    plot.setBackground("w")
    plot.setLabel("bottom", "edges in the circuit")
    plot.setLabel("left", "faithfulness")
    return plot


def _faithfulness_legend() -> QLabel:
    legend = named(
        QLabel(
            '<span style="color:#c82828">━ the top edges by |score|</span> &nbsp; '
            '<span style="color:#787878">━ random edges of the same count (mean ± sd, 10 draws)</span>'
        ),
        "circuitCurveLegend",
    )
    legend.setWordWrap(True)
    return legend


def _draw_faithfulness(plot: pg.PlotWidget, curve: pd.DataFrame, marker: pg.InfiniteLine) -> None:
    """The random edge sets' mean with a band of one standard deviation, the top edges' curve, and
    the marker of the size on show."""
    plot.clear()
    sizes = curve["size"].to_numpy(dtype=float)
    mean, std = curve["random_mean"].to_numpy(dtype=float), curve["random_std"].to_numpy(dtype=float)
    upper = pg.PlotDataItem(sizes, mean + std, pen=pg.mkPen((150, 150, 150, 0)))
    lower = pg.PlotDataItem(sizes, mean - std, pen=pg.mkPen((150, 150, 150, 0)))
    plot.addItem(upper)
    plot.addItem(lower)
    plot.addItem(pg.FillBetweenItem(upper, lower, brush=(150, 150, 150, 70)))
    plot.plot(sizes, mean, pen=pg.mkPen((120, 120, 120), width=2))
    plot.plot(sizes, curve["faithfulness"].to_numpy(dtype=float), pen=pg.mkPen((200, 40, 40), width=2))
    plot.addItem(marker)


class HeadMap(LazyPlot):
    """The picked head's attention map (queries down, keys across), its plot built on first show:
    its image and the picked cell's mark live before it. A click on a cell emits ``cellClicked``
    (query, key)."""

    cellClicked = Signal(int, int)

    def __init__(self) -> None:
        super().__init__(self._build_map, minimum=(220, 220))
        self.setObjectName("circuitHeadMapHolder")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setLookupTable(pg.colormap.get("viridis").getLookupTable())
        self.mark = QGraphicsRectItem(0.0, 0.0, 1.0, 1.0)
        self.mark.setPen(pg.mkPen((230, 30, 30), width=2, cosmetic=True))
        self.mark.setZValue(10)
        self.mark.hide()
        self.shape: tuple[int, int] | None = None
        self._labels: tuple[list[str], list[str], str] | None = None  # rows, columns, title
        self.when_built(self._frame)

    def _build_map(self) -> pg.PlotWidget:
        plot = pg.PlotWidget(objectName="circuitHeadMap")
        plot.setBackground("w")
        plot.setAspectLocked(True)
        plot.getAxis("left").setWidth(84)  # room for "i token" on every row
        plot.invertY(True)
        plot.setToolTip("the head's attention on the clean input: click a cell to decompose its score")
        plot.addItem(self.image)
        plot.addItem(self.mark)
        plot.scene().sigMouseClicked.connect(self._on_click)
        return plot

    def show_map(self, weights: np.ndarray, rows: list[str], columns: list[str], title: str) -> None:
        """``weights`` [Lq, Lk] with its row and column names and its title; no cell picked."""
        self.image.setImage(np.asarray(weights, dtype=np.float64), levels=(0.0, 1.0))
        self.shape = weights.shape
        self.mark.hide()
        self._labels = (rows, columns, title)
        if self.built:
            self._frame()

    def mark_cell(self, query: int, key: int) -> None:
        self.mark.setRect(float(key), float(query), 1.0, 1.0)
        self.mark.setVisible(self.shape is not None)

    def _frame(self) -> None:
        """The axes' names and the title, and the range over the image."""
        if self._labels is None:
            return
        rows, columns, title = self._labels
        for axis, names in (("left", rows), ("bottom", columns)):
            self.plot.getAxis(axis).setTicks([[(i + 0.5, text) for i, text in enumerate(names)]])
        self.plot.setTitle(title, size="8pt")
        self.plot.getViewBox().autoRange(padding=0.0)

    def _on_click(self, event) -> None:
        if self.shape is None:
            return
        point = self.image.mapFromScene(event.scenePos())
        query, key = int(point.y()), int(point.x())
        if 0 <= query < self.shape[0] and 0 <= key < self.shape[1]:
            self.cellClicked.emit(query, key)


def _fill_terms(table: QTableWidget, top: pd.DataFrame) -> None:
    """One row per score term: its query-side and key-side components, its kind, its value."""
    table.setRowCount(len(top))
    for r, (_, row) in enumerate(top.iterrows()):
        for c, value in enumerate(
            (row["query_component"], row["key_component"], str(row["kind"]), f"{row['term']:+.5g}")
        ):
            table.setItem(r, c, QTableWidgetItem(str(value)))
    table.resizeColumnsToContents()


class CircuitView(QWidget):
    """The Circuit tab (see the module docstring). ``decomposeRequested(layer, head, query, key)``,
    ``headOpened(node)``, ``exportRequested(path)`` go to the presenter."""

    decomposeRequested = Signal(int, int, int, int)
    headPicked = Signal(int, int)
    headOpened = Signal(str)
    presetChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("circuitView")
        self.shown: CircuitShown | None = None
        self.part = "self"  # the picked head's part ("self", an encoder-decoder's "decoder" or "cross")
        form = self._make_inputs()
        self._make_result()
        terms = self._make_terms()
        self._arrange(form, terms)
        self.slider.valueChanged.connect(self._on_slider)
        self.graph.edgeClicked.connect(self.show_edge)
        self.graph.nodeClicked.connect(self._on_node)
        self.decomposeButton.clicked.connect(self._ask_terms)
        self.openHeat.clicked.connect(lambda: self.headOpened.emit(self.graph.selected or ""))
        self.preset.currentTextChanged.connect(self.presetChanged)

    def _make_inputs(self) -> QFormLayout:
        self.preset = named(QComboBox(), "circuitPreset")
        self.preset.setToolTip("toy mode: the trained preset the circuit is found in")
        self.cleanEdit = named(QLineEdit(), "circuitClean")
        self.corruptEdit = named(QLineEdit(), "circuitCorrupt")
        self.answerEdit = named(QLineEdit(), "circuitAnswer")
        self.wrongEdit = named(QLineEdit(), "circuitWrong")
        self.metricBox = named(QComboBox(), "circuitMetric")
        self.metricBox.addItems(METRICS)
        self.methodBox = named(QComboBox(), "circuitMethod")
        self.methodBox.addItems(METHODS)
        self.methodBox.setToolTip(
            "exact: one patched run per edge; eap: one gradient pass; eap-ig: integrated gradients"
        )
        self.bar = RunBar("circuit", "Score edges")
        self.unavailableLabel = named(QLabel(""), "circuitUnavailable")
        self.unavailableLabel.setWordWrap(True)
        self.unavailableLabel.hide()
        form = self._form = QFormLayout()
        form.addRow("Trained preset", self.preset)
        form.addRow("Clean", self.cleanEdit)
        form.addRow("Corrupt", self.corruptEdit)
        tokens = QHBoxLayout()
        for label, widget in (
            ("answer", self.answerEdit),
            ("wrong", self.wrongEdit),
            ("metric", self.metricBox),
            ("method", self.methodBox),
        ):
            if isinstance(widget, QLineEdit):
                widget.setMaximumWidth(160)
            tokens.addWidget(QLabel(label))
            tokens.addWidget(widget)
        tokens.addStretch(1)
        form.addRow("Tokens", tokens)
        return form

    def _make_result(self) -> None:
        self.graph = CircuitGraph()
        self.slider = named(QSlider(Qt.Orientation.Horizontal), "circuitSlider")
        self.slider.setEnabled(False)
        self.slider.setToolTip("circuit size: the edges with the largest |score|")
        self.sizeLabel = named(QLabel(""), "circuitSize")
        self.edgeLabel = named(
            QLabel("click an edge for its exact effect, a head to decompose its scores"), "circuitEdge"
        )
        self.edgeLabel.setWordWrap(True)
        self.exportPng = named(QPushButton("Export PNG…"), "circuitExportPng")
        self.exportSvg = named(QPushButton("Export SVG…"), "circuitExportSvg")
        self.openHeat = named(QPushButton("Open head in Heatmaps"), "circuitOpenHead")
        self.openHeat.setEnabled(False)
        # the plots are built on first show (``LazyPlot``) and draw what is on show then
        self.curveHolder = named(LazyPlot(_faithfulness_plot, minimum=(0, 200)), "circuitCurveHolder")
        self.curveHolder.when_built(self._draw_curve)
        self.curveLegend = _faithfulness_legend()
        self._marker = pg.InfiniteLine(angle=90, pen=pg.mkPen("k", style=Qt.PenStyle.DashLine))

    def _make_terms(self) -> QGroupBox:
        self.layerSpin = named(QSpinBox(), "circuitLayer")
        self.headSpin = named(QSpinBox(), "circuitHead")
        self.querySpin = named(QSpinBox(), "circuitQuery")
        self.keySpin = named(QSpinBox(), "circuitKey")
        for spin in (self.layerSpin, self.headSpin, self.querySpin, self.keySpin):
            spin.setRange(0, 4095)
        self.decomposeButton = named(QPushButton("Decompose score"), "circuitDecompose")
        self.decomposeButton.setToolTip(
            "the clean input's score of this cell as (query component) x (key component) terms"
        )
        self.termsLabel = named(QLabel(""), "circuitTermsLabel")
        self.termsLabel.setWordWrap(True)
        self.termsTable = named(QTableWidget(0, 4), "circuitTerms")
        self.termsTable.setHorizontalHeaderLabels(["query component", "key component", "kind", "term"])
        self.termsTable.verticalHeader().hide()
        self.termsTable.setMinimumHeight(160)

        cell = QGridLayout()
        for i, (label, spin) in enumerate(
            (("layer", self.layerSpin), ("head", self.headSpin), ("query", self.querySpin), ("key", self.keySpin))
        ):
            cell.addWidget(QLabel(label), 0, 2 * i)
            cell.addWidget(spin, 0, 2 * i + 1)
        cell.addWidget(self.decomposeButton, 0, 8)
        self.headMapHolder = HeadMap()
        self.headMapHolder.cellClicked.connect(self.pick_cell)
        self.weightLabel = named(QLabel(""), "circuitWeights")
        self.weightLabel.setWordWrap(True)
        terms = QGroupBox("Why this head attends there: click a cell of its attention for the score, term by term")
        inner = QVBoxLayout(terms)
        inner.addLayout(cell)
        inner.addWidget(self.weightLabel)
        inner.addWidget(self.termsLabel)
        row = QHBoxLayout()
        row.addWidget(self.headMapHolder, 2)
        row.addWidget(self.termsTable, 3)
        inner.addLayout(row)
        return terms

    def _arrange(self, form: QFormLayout, terms: QGroupBox) -> None:
        self.graph.setMinimumHeight(320)
        right = QVBoxLayout()
        right.addWidget(self.curveHolder, 1)
        right.addWidget(self.curveLegend)
        body = QHBoxLayout()
        body.addWidget(self.graph, 3)
        body.addLayout(right, 2)
        sizes = QHBoxLayout()
        sizes.addWidget(QLabel("circuit size"))
        sizes.addWidget(self.slider, 1)
        sizes.addWidget(self.sizeLabel, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.edgeLabel, 1)
        buttons.addWidget(self.openHeat)
        buttons.addWidget(self.exportPng)
        buttons.addWidget(self.exportSvg)
        outer = QVBoxLayout(self)
        outer.addLayout(form)
        outer.addWidget(self.bar)
        outer.addWidget(self.unavailableLabel)
        outer.addLayout(body, 1)
        outer.addLayout(sizes)
        outer.addLayout(buttons)
        outer.addWidget(terms)

    @property
    def curve(self) -> pg.PlotWidget:
        """The faithfulness curve's plot (built on first use)."""
        return self.curveHolder.plot

    @property
    def headMap(self) -> pg.PlotWidget:
        """The picked head's attention map's plot (built on first use)."""
        return self.headMapHolder.plot

    def _draw_curve(self) -> None:
        """The faithfulness curve on show, if its plot is built (else once it is)."""
        if self.shown is not None and self.curveHolder.built:
            _draw_faithfulness(self.curve, self.shown.curve, self._marker)

    # -- inputs ------------------------------------------------------------------------------------
    def set_inputs(self, clean: str, corrupt: str, answer: str, wrong: str) -> None:
        self.cleanEdit.setText(clean)
        self.corruptEdit.setText(corrupt)
        self.answerEdit.setText(answer)
        self.wrongEdit.setText(wrong)

    def set_presets(self, names: list[str] | None) -> None:
        """Toy mode's trained presets (None: a pretrained model is on, the row hides)."""
        self.preset.blockSignals(True)
        self.preset.clear()
        if names:
            self.preset.addItems(names)
        self.preset.blockSignals(False)
        self.preset.setVisible(bool(names))
        label = self._form.labelForField(self.preset)
        if label is not None:
            label.setVisible(bool(names))

    def metric_name(self) -> str:
        return self.metricBox.currentText()

    def method_name(self) -> str:
        return self.methodBox.currentText()

    def set_unavailable(self, reason: str | None) -> None:
        self.unavailableLabel.setText(reason or "")
        self.unavailableLabel.setVisible(bool(reason))

    # -- the result ----------------------------------------------------------------------------------
    def set_shown(self, shown: CircuitShown) -> None:
        self.shown = shown
        curve = shown.curve
        self._draw_curve()
        self.slider.blockSignals(True)
        self.slider.setRange(0, len(curve) - 1)
        self.slider.setValue(self._default_step(curve))
        self.slider.blockSignals(False)
        self.slider.setEnabled(True)
        self._on_slider(self.slider.value())

    @staticmethod
    def _default_step(curve: pd.DataFrame) -> int:
        """The smallest size reaching 0.9 faithfulness, else the largest."""
        reached = np.flatnonzero(curve["faithfulness"].to_numpy(dtype=float) >= 0.9)
        return int(reached[0]) if len(reached) else len(curve) - 1

    def _on_slider(self, step: int) -> None:
        """One cached row of the curve: no computation per move."""
        if self.shown is None:
            return
        row = self.shown.curve.iloc[int(step)]
        size = int(row["size"])
        self.graph.set_edges(self.shown.table, size)
        self._marker.setValue(size)
        self.sizeLabel.setText(
            f"top {size} of {len(self.shown.table)} edges ({row['fraction']:.0%}): faithfulness "
            f"{row['faithfulness']:.3f} · random {row['random_mean']:.3f} ± {row['random_std']:.3f}"
        )

    def show_edge(self, src: str, dst: str, kind: str) -> None:
        if self.shown is None:
            return

        def score(table: pd.DataFrame) -> float:
            rows = table[(table["src"] == src) & (table["dst"] == dst) & (table["kind"] == kind)]
            return float(rows["score"].iat[0]) if len(rows) else float("nan")

        text = f"{src} → {dst} ({kind}): exact effect {score(self.shown.exact):+.4g} ({self.shown.metric} change)"
        if self.shown.method != "exact":
            text += f"; {self.shown.method} estimate {score(self.shown.table):+.4g}"
        self.edgeLabel.setText(text)

    def _on_node(self, name: str) -> None:
        match = _NODE.match(name)
        is_head = bool(match) and match.group(3) == "H"  # type: ignore[union-attr]
        self.openHeat.setEnabled(is_head)
        if match and is_head:
            self.part = _PARTS[match.group(1)]
            self.layerSpin.setValue(int(match.group(2)))
            self.headSpin.setValue(int(match.group(4)))
            self.edgeLabel.setText(f"{name}: click a cell of its attention (below) for the score, term by term")
            self.headPicked.emit(int(match.group(2)), int(match.group(4)))

    def set_head_map(
        self,
        weights: np.ndarray,
        labels: tuple[list[str], list[str]],
        layer: int,
        head: int,
        weights_only: dict | str = "",
    ) -> None:
        """The picked head's attention [Lq, Lk] on the clean input, queries down, keys across, and
        its weight-only numbers (or why there are none)."""
        self.weightLabel.setText(weight_text(f"L{layer}.H{head}", weights_only))
        # queries as "i token" down the side; keys by position across when their names would overlap
        rows = [f"{i} {text}" for i, text in enumerate(labels[0])]
        columns = labels[1] if len(labels[1]) <= 8 else [str(i) for i in range(len(labels[1]))]
        self.headMapHolder.show_map(weights, rows, columns, f"L{layer}.H{head} on the clean input")
        self.termsTable.setRowCount(0)  # the terms shown were another head's
        self.termsLabel.setText("click a cell of the head's attention (query row, key column)")

    def pick_cell(self, query: int, key: int) -> None:
        """A cell of the head's map: its score, decomposed."""
        self.headMapHolder.mark_cell(query, key)
        self.querySpin.setValue(query)
        self.keySpin.setValue(key)
        self._ask_terms()

    def _ask_terms(self) -> None:
        self.decomposeRequested.emit(
            self.layerSpin.value(), self.headSpin.value(), self.querySpin.value(), self.keySpin.value()
        )

    def set_terms(self, terms) -> None:
        """A ``ScoreTerms``: its largest terms by |term| and its total; or a message (str)."""
        if isinstance(terms, str):
            self.termsLabel.setText(terms)
            self.termsTable.setRowCount(0)
            return
        table = terms.terms
        top = table.reindex(table["term"].abs().sort_values(ascending=False).index).head(TOP_TERMS)
        _fill_terms(self.termsTable, top)
        where = f"layer {terms.layer} head {terms.head}, query {terms.query} → key {terms.key}"
        text = (
            f"{where}: score {terms.score:+.6g} = the sum of {len(table)} terms "
            f"(largest {min(TOP_TERMS, len(table))} shown; the sum misses by {terms.error:.1e})"
        )
        self.termsLabel.setText("\n".join([text, *terms.notes]))

    def export(self, path: str, render: Callable[..., bytes]) -> bytes:
        """The graph as ``path``'s format (png or svg) through the renderer's ``render_bytes``."""
        fmt = path.rsplit(".", 1)[-1].lower()
        size = (max(640, self.graph.width()), max(400, self.graph.height()))
        return render(self.graph.paint_to, fmt, size, title="attndesk circuit")


__all__ = ["METHODS", "CircuitGraph", "CircuitShown", "CircuitView", "GraphLayout", "paint_graph"]
