"""Per-head statistics: a sortable table and an entropy-vs-distance scatter, one point per head.

Selecting a row (or clicking a point) emits ``headSelected(head)`` (and ``layerHeadSelected(layer,
head)``, layer -1 for the toy model) so the window can open that head. The table exports to CSV.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name
from attndesk.render.export import ExportError, atomic_write
from attndesk.teaching.statistics import HeadStats, head_statistics, layer_statistics, statistics_csv

from ...widgets.holdings import held_by
from ...widgets.lazy_plot import LazyPlot
from ...widgets.plot_axes import without_si_prefix
from ...widgets.table_items import NumberItem

# (field, header, tooltip)
COLUMNS = (
    ("layer", "layer", "encoder layer (pretrained mode)"),
    ("head", "head", "head index"),
    ("entropy", "entropy", "mean entropy of the attention rows, nats (ln L = uniform, 0 = one key)"),
    ("max_weight", "max w", "largest single weight"),
    ("mean_distance", "mean dist", "mean attention distance Σ w·|i−j|, tokens"),
    ("self_share", "self", "share of weight on the query's own token"),
    ("previous_share", "prev", "share on the previous token"),
    ("next_share", "next", "share on the next token"),
    ("first_share", "first", "share on the first token ([CLS])"),
    ("special_share", "special", "share on special tokens ([PAD], [UNK], [CLS], [SEP])"),
)
ROLE_KEY = Qt.ItemDataRole.UserRole + 1


MIN_SPAN = 0.01  # the scatter never shows less than this many tokens / nats across


class HeadStatsView(QWidget):
    """API: ``set_result(result)`` (toy: weights [H, L, Lk]), ``set_weights(weights, tokens=None)``
    ([H, L, Lk] or [layers, H, L, Lk]), ``set_statistics(stats, shape)``, ``stats()``, ``select_head(head, layer=None)``,
    ``export_csv(path)``. Signals ``headSelected(int)``, ``layerHeadSelected(int, int)``."""

    headSelected = Signal(int)
    layerHeadSelected = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("headStatsView")
        self._stats: list[HeadStats] = []
        self._layered = False
        self._user_sorted = False  # keep a column the user sorted by across new results

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("headStatsTable")
        self.table.setHorizontalHeaderLabels([c[1] for c in COLUMNS])
        for i, (_, _, tip) in enumerate(COLUMNS):
            header = self.table.horizontalHeaderItem(i)
            assert header is not None, "the labels were just set"
            header.setToolTip(tip)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setSortingEnabled(True)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._on_selection)
        self.table.horizontalHeader().sectionClicked.connect(self._on_header_clicked)

        # the scatter is built on first show; what it shows is drawn from ``_stats`` then
        self.scatterHolder = named(LazyPlot(self._build_scatter), "headStatsScatterHolder")
        self.scatterHolder.when_built(self._fill_scatter)
        self._labels: list[pg.TextItem] = []
        self._title = "one point per head"  # the scatter's

        self.exportButton = QPushButton("Export CSV…")
        self.exportButton.setObjectName("headStatsExportButton")
        self.exportButton.clicked.connect(self._on_export_clicked)
        self.infoLabel = QLabel("")
        self.infoLabel.setObjectName("headStatsInfo")
        self.infoLabel.setWordWrap(True)

        bar = QHBoxLayout()
        bar.addWidget(self.infoLabel, 1)
        bar.addWidget(self.exportButton)
        # a splitter: the table gets the width of its columns (ten with the layer), the plot the rest
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("headStatsSplitter")
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.scatterHolder)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.splitter, 1)

    def _build_scatter(self) -> pg.PlotWidget:
        scatter = pg.PlotWidget(enableMenu=False)
        without_si_prefix(scatter.getPlotItem())
        scatter.setObjectName("headStatsScatter")
        scatter.setBackground("w")
        scatter.setLabel("bottom", "mean attention distance (tokens)")
        scatter.setLabel("left", "mean row entropy (nats)")
        # heads that all attend alike (uniform rows, one token) put every point on one spot: the
        # auto range is then nearly zero wide, and the wheel would zoom it to a singular, NaN range
        scatter.getPlotItem().vb.setLimits(minXRange=MIN_SPAN, minYRange=MIN_SPAN)
        points = self._points = pg.ScatterPlotItem(size=10, pen=pg.mkPen("#234"), brush=pg.mkBrush(60, 110, 200, 180))
        points.sigClicked.connect(self._on_point_clicked)
        points.setToolTip("click a point to select its head")
        scatter.addItem(points)
        return scatter

    @property
    def scatter(self) -> pg.PlotWidget:
        """The scatter plot (built on first use)."""
        return self.scatterHolder.plot

    @property
    def points(self) -> pg.ScatterPlotItem:
        """The scatter's points (its plot built on first use)."""
        self.scatterHolder.plot  # noqa: B018 - the property builds the plot
        return self._points

    # -- API -------------------------------------------------------------------------------------
    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the statistics it lists."""
        return held_by(self._stats)

    def stats(self) -> list[HeadStats]:
        return list(self._stats)

    def set_result(self, result) -> None:
        if result is None:
            return
        self.set_weights(result.weights, list(result.keys))

    def set_weights(self, weights, tokens=None) -> None:
        """``weights`` [H, L, Lk] or [layers, H, L, Lk]; ``tokens`` the key labels (for special_share)."""
        w = np.asarray(weights)
        layered = w.ndim == 4
        stats = layer_statistics(w, special=tokens) if layered else head_statistics(w, special=tokens)
        self.set_statistics(stats, (int(w.shape[-2]), int(w.shape[-1])))

    def set_statistics(self, stats: list[HeadStats], shape: tuple[int, int]) -> None:
        """Show statistics computed elsewhere (e.g. head_statistics in the worker: at L = 2048 it takes
        about a second); ``shape`` is (queries, keys) for the caption."""
        self._stats = list(stats)
        self._layered = any(s.layer is not None for s in self._stats)
        self._fill_table()
        self._fit_table()
        if self._layered:
            layers = 1 + max(s.layer for s in self._stats if s.layer is not None)
            where = f"{layers} layers × {len(self._stats) // layers} heads"
            self._title = f"colour = layer: dark 0 … yellow {layers - 1}"
        else:
            where = f"{len(self._stats)} heads"
            self._title = "one point per head"
        self._draw_scatter()
        self.infoLabel.setText(
            f"{where}, {shape[0]} queries × {shape[1]} keys. Click a column to sort, a row to open the head."
        )

    def show_message(self, text: str, *, clear: bool = False) -> None:
        """Say what the table shows (or why it is empty, with ``clear``)."""
        if clear:
            self._stats = []
            self._fill_table()
            self._draw_scatter()
        self.infoLabel.setText(text)

    def _row_key(self, row: int) -> tuple[int | None, int]:
        """(layer, head) of a table row (column 1 holds it; every row is filled)."""
        item = self.table.item(row, 1)
        assert item is not None, "every row is filled"
        return item.data(ROLE_KEY)

    def select_head(self, head: int, layer: int | None = None) -> None:
        for row in range(self.table.rowCount()):
            key = self._row_key(row)
            if key == (layer if self._layered else None, head):
                self.table.selectRow(row)
                return

    def export_csv(self, path: str) -> str:
        """Write the table (every head, full precision) to ``path`` atomically."""
        columns = [c[0] for c in COLUMNS] if self._layered else [c[0] for c in COLUMNS[1:]]
        return str(atomic_write(path, statistics_csv(self._stats, columns).encode("utf-8")))

    # -- filling ---------------------------------------------------------------------------------
    def _fill_table(self) -> None:
        table = self.table
        header = table.horizontalHeader()
        # fitted once at the end: fitting to contents on each new item re-measures every row (O(n²))
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        table.setSortingEnabled(False)
        table.blockSignals(True)
        table.clearContents()
        table.setRowCount(len(self._stats))
        table.setColumnHidden(0, not self._layered)
        for row, s in enumerate(self._stats):
            record = s.as_row()
            for col, (name, _, _) in enumerate(COLUMNS):
                value = record[name]
                if name in ("layer", "head"):
                    text = "" if value is None else str(value)
                else:
                    text = "—" if value is None or value != value else f"{value:.3f}"
                item = NumberItem(value, text)
                item.setData(ROLE_KEY, (s.layer, s.head))
                table.setItem(row, col, item)
        table.blockSignals(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        column = header.sortIndicatorSection()
        if not self._user_sorted or table.isColumnHidden(column):
            column = 0 if self._layered else 1  # layer then head: rows were added in that order (stable sort)
            header.setSortIndicator(column, Qt.SortOrder.AscendingOrder)
        table.setSortingEnabled(True)  # sorts by the indicator: the user's last choice, else layer/head

    def _fit_table(self) -> None:
        """Give the table the width its columns need (the scatter keeps at least a third)."""
        total = sum(self.splitter.sizes())
        if total <= 0:
            return
        header = self.table.horizontalHeader()
        need = sum(header.sectionSize(c) for c in range(self.table.columnCount()) if not self.table.isColumnHidden(c))
        need += self.table.verticalScrollBar().sizeHint().width() + 2 * self.table.frameWidth() + 4
        table = min(need, total * 2 // 3)
        self.splitter.setSizes([table, total - table])

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_table()

    def _draw_scatter(self) -> None:
        """Draw ``_stats`` into the scatter if it is built (else it draws them once built)."""
        if self.scatterHolder.built:
            self._fill_scatter()

    def _fill_scatter(self) -> None:
        self.scatter.setTitle(self._title, color="#333", size="9pt")
        stats = [s for s in self._stats if np.isfinite(s.mean_distance) and np.isfinite(s.entropy)]
        layers = 1 + max((s.layer for s in stats if s.layer is not None), default=0)
        # colour by layer, early layers dark, late layers yellow: one brush per layer, not per point
        colours = pg.colormap.get("viridis").map(np.linspace(0.0, 1.0, layers), mode="qcolor")
        brushes = [pg.mkBrush(c) for c in colours]
        plain = self.points.opts["brush"]
        labelled = len(self._stats) <= 16  # beyond that the names would pile up; hover/click instead
        names = [(head_name(s.layer, s.head), s.mean_distance, s.entropy) for s in stats] if labelled else []
        self._place_labels(names)
        keys = np.empty(len(stats), dtype=object)  # one (layer, head) per point (a list would become 2-D)
        for i, s in enumerate(stats):
            keys[i] = (s.layer, s.head)
        self.points.setData(
            x=[s.mean_distance for s in stats],
            y=[s.entropy for s in stats],
            data=keys,
            brush=[plain if s.layer is None else brushes[s.layer] for s in stats],
        )

    def _place_labels(self, names: list[tuple[str, float, float]]) -> None:
        """One text item per labelled point; items are reused (making one costs a few ms)."""
        while len(self._labels) < len(names):
            label = pg.TextItem("", color="#333", anchor=(-0.15, 0.5))
            self.scatter.addItem(label)
            self._labels.append(label)
        for label, (name, x, y) in zip(self._labels, names):
            label.setText(name)
            label.setPos(x, y)
            label.show()
        for label in self._labels[len(names) :]:
            label.hide()

    def scatter_points(self) -> np.ndarray:
        """[n, 2] (mean_distance, entropy) of the plotted points (for tests)."""
        x, y = self.points.getData()
        return np.column_stack([x, y])

    # -- interaction -----------------------------------------------------------------------------
    @Slot()
    def _on_selection(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        layer, head = self._row_key(rows[0].row())
        self.headSelected.emit(int(head))
        self.layerHeadSelected.emit(-1 if layer is None else int(layer), int(head))

    @Slot(int)
    def _on_header_clicked(self, _section: int) -> None:
        self._user_sorted = True

    def _on_point_clicked(self, _item, points, *args) -> None:
        if len(points):
            layer, head = points[0].data()
            self.select_head(head, layer)

    @Slot()
    def _on_export_clicked(self) -> None:
        if not self._stats:
            self.infoLabel.setText("nothing to export yet")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export head statistics", "head_statistics.csv", "CSV (*.csv)")
        if not path:
            return
        try:
            self.export_csv(path)
            self.infoLabel.setText(f"saved {path}")
        except (ExportError, OSError) as exc:
            self.infoLabel.setText(f"export failed: {exc}")
