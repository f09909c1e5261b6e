"""The Corpus tab's view: choose texts (a vision model: a folder of images) and a store folder,
start / cancel / resume the corpus pass with its progress, then read the store: a layers x heads
grid coloured by a metric with role badges, a sortable table, the metric's histogram over heads, a
head's top and bottom texts (images) and its query/key atlas (a text store's only).

It holds no store: the presenter (``tabs/corpus.py``) hands it DataFrames and arrays. Signals:
``startRequested``, ``cancelRequested``, ``headSelected(part, layer, head)``, ``metricChanged``,
``textOpened(text_id)`` (a listed text, or an atlas point, to open in the heatmaps).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from attndesk.attention.types import head_name
from attndesk.corpus.image_metrics import IMAGE_METRICS, IMAGE_ROLE_RULES
from attndesk.corpus.metrics import METRICS, ROLE_RULES

if TYPE_CHECKING:  # annotations only: pandas is imported when a store arrives
    import pandas as pd

from attndesk.app.widgets.named import named

from ...widgets.holdings import held_by
from ...widgets.pacing import pacer
from ...widgets.table_items import NumberItem
from .controls import TEXT_PLACEHOLDER, CorpusControls, fit_width
from .plots import (
    KEY_COLOUR,
    QUERY_COLOUR,
    AtlasPlot,
    HeadGrid,
    MetricHistogram,
    badge_legend,
    token_html,
)

TEXT_ID = Qt.ItemDataRole.UserRole
# a listed text is cut here (its tooltip a little further): a word-wrapped list item lays out its whole
# text on every resize and paint (docs/benchmarks.md); double-click opens the whole text in the heatmaps
LIST_CHARS = 300
TIP_CHARS = 1000
TABLE_COLUMNS = ("part", "layer", "head", "role", *METRICS)
IMAGE_TABLE_COLUMNS = ("part", "layer", "head", "role", *IMAGE_METRICS)
TEXT_ROLES = (*(name for name, _m, _t in ROLE_RULES), "broad", "mixed")
IMAGE_ROLES = (*(name for name, _m, _t in IMAGE_ROLE_RULES), "broad", "mixed")
IMAGE_PLACEHOLDER = "a folder of images (png, jpg); left empty: attndesk's sample images"
HISTOGRAM_MIN_PX = 120  # the histogram's bars and both axes readable when the page is short
TABLE_ROWS = 64  # heads added to the table per event-loop turn (a turn well under the 100 ms limit)


def _cell(table: QTableWidget, row: int, col: int) -> QTableWidgetItem:
    item = table.item(row, col)
    if item is None:  # every cell of a filled row has its item
        raise LookupError(f"the heads table has no cell at row {row}, column {col}")
    return item


def _table_item(name: str, value) -> QTableWidgetItem:
    if name in ("part", "role"):
        return QTableWidgetItem(str(value))
    if name in ("layer", "head"):
        return NumberItem(value, str(int(value)))
    missing = value is None or not np.isfinite(value)
    return NumberItem(None if missing else value, "" if missing else f"{value:.3f}")


def elide(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (newlines shown as spaces)."""
    short = " ".join(text[:limit].split())
    return short + "…" if len(text) > limit else short


def _text_items(frame, metric: str) -> list[QListWidgetItem]:
    """A head's highest or lowest texts as list items, each text once with its count; the tooltip
    holds the text, whole up to ``TIP_CHARS``."""
    records = frame.to_dict("records")
    repeats = Counter(record["text"] for record in records)
    listed: set[str] = set()
    items = []
    for record in records:
        if record["text"] in listed:
            continue  # a text the corpus repeats is listed once, with its count
        listed.add(record["text"])
        count = repeats[record["text"]]
        times = f"  x{count}" if count > 1 else ""
        # a share is ranked by its excess over a uniform row's (store.top_texts): show both
        shown = f"{record[metric]:.3f}" + (f" ({record['excess']:+.3f})" if "excess" in record else "")
        item = QListWidgetItem(f"{shown}  {elide(record['text'], LIST_CHARS)}{times}")
        item.setData(TEXT_ID, int(record["text_id"]))
        tip = elide(record["text"], TIP_CHARS)
        if "excess" in record:
            tip = f"{metric} {record[metric]:.3f}: {record['excess']:+.3f} over a uniform row's share\n{tip}"
        item.setToolTip(tip)
        items.append(item)
    return items


def set_images(view: CorpusView, images: bool) -> None:
    """The form for an image pass (a vision model: a folder of images, no tokens to cut) or a text
    pass. What was typed stays."""
    view.sourceLabel.setText("Images" if images else "Texts")
    view.sourceEdit.setPlaceholderText(IMAGE_PLACEHOLDER if images else TEXT_PLACEHOLDER)
    view.sourceFileButton.setVisible(not images)
    view.tokensSpin.setVisible(not images)
    view.sampleButton.setToolTip(
        "attndesk's sample images (the shipped pictures and scikit-learn's digits)"
        if images
        else "the sample corpus written for attndesk (324 sentences, a third with repeats)"
    )


def store_kind(view: CorpusView, images: bool) -> tuple[str, ...]:
    """The metrics, badges and atlas of a text store or an image store (no atlas); its table's columns."""
    metrics = list(IMAGE_METRICS if images else METRICS)
    if [view.metricCombo.itemText(i) for i in range(view.metricCombo.count())] != metrics:
        view.metricCombo.blockSignals(True)
        view.metricCombo.clear()
        view.metricCombo.addItems(metrics)
        view.metricCombo.blockSignals(False)
    view.badgeLabel.setText(badge_legend(IMAGE_ROLES if images else TEXT_ROLES))
    view.atlas.setVisible(not images)
    view.atlasLabel.setVisible(not images)
    return IMAGE_TABLE_COLUMNS if images else TABLE_COLUMNS


class CorpusView(QWidget):
    """See the module docstring."""

    startRequested = Signal()
    cancelRequested = Signal()
    sampleRequested = Signal()
    headSelected = Signal(str, int, int)
    metricChanged = Signal(str)
    partChanged = Signal(str)
    textOpened = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("corpusView")
        self._heads: pd.DataFrame | None = None
        self._atlas_points: tuple = (np.zeros(0, bool), np.zeros(0, int), np.zeros(0, int), [])
        self._texts: dict[int, str] = {}
        self._columns: tuple[str, ...] = TABLE_COLUMNS
        self._table_fill = 0  # the table's fill in progress (a newer one abandons the older)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self._build_controls())
        split = named(QSplitter(Qt.Orientation.Horizontal), "corpusSplit")
        split.addWidget(self._build_heads_side())
        split.addWidget(self._build_head_side())
        split.setSizes([520, 620])
        layout.addWidget(split, 1)
        self.show_store(None)

    # -- construction ---------------------------------------------------------------------------
    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the atlas's points and its plots (the head table is a DataFrame: pandas' own)."""
        return held_by(self._atlas_points, self.grid, self.histogram, self.atlas)

    def _build_controls(self) -> QWidget:
        c = self.controls = CorpusControls()
        self.sourceEdit, self.sourceLabel, self.storeEdit, self.tokensSpin = (
            c.sourceEdit,
            c.sourceLabel,
            c.storeEdit,
            c.tokensSpin,
        )
        self.sourceFileButton, self.sourceFolderButton = c.sourceFileButton, c.sourceFolderButton
        self.sampleButton, self.storeButton, self.startButton = c.sampleButton, c.storeButton, c.startButton
        self.cancelButton, self.progressBar, self.progressLabel = c.cancelButton, c.progressBar, c.progressLabel
        self.modelLabel, self.errorLabel = c.modelLabel, c.errorLabel
        c.startRequested.connect(self.startRequested)
        c.cancelRequested.connect(self.cancelRequested)
        c.sampleRequested.connect(self.sampleRequested)
        return c

    def _build_heads_side(self) -> QWidget:
        side = QWidget()
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        layout.addLayout(row)
        self.metricCombo = named(QComboBox(), "corpusMetric")
        self.metricCombo.addItems(list(METRICS))
        self.partCombo = named(QComboBox(), "corpusPart")
        self.storeLabel = named(QLabel(""), "corpusStoreLabel", wordWrap=True)
        fit_width(self.storeLabel)
        row.addWidget(QLabel("colour by"))
        row.addWidget(self.metricCombo)
        row.addWidget(self.partCombo)
        row.addWidget(self.storeLabel, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        self.grid = HeadGrid()
        self.histogram = MetricHistogram()
        self.histogram.setMinimumHeight(HISTOGRAM_MIN_PX)
        self.table = named(QTableWidget(), "corpusTable")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # a column's width from the rows on screen and TABLE_ROWS others, not from every row at each paint
        self.table.horizontalHeader().setResizeContentsPrecision(TABLE_ROWS)
        for widget in (self.grid, self.histogram, self.table):
            split.addWidget(widget)
        split.setSizes([300, 140, 260])
        layout.addWidget(split, 1)
        self.badgeLabel = named(QLabel(badge_legend(TEXT_ROLES)), "corpusBadges", wordWrap=True)
        layout.addWidget(self.badgeLabel)
        self.metricCombo.currentTextChanged.connect(self._metric_changed)
        self.partCombo.currentTextChanged.connect(self._part_changed)
        self.grid.cellClicked.connect(lambda layer, head: self.headSelected.emit(self.part(), layer, head))
        self.table.itemSelectionChanged.connect(self._row_selected)
        return side

    def _build_head_side(self) -> QWidget:
        side = QWidget()
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 0, 0)
        self.headLabel = named(QLabel("click a head in the grid or the table"), "corpusHeadLabel", wordWrap=True)
        layout.addWidget(self.headLabel)
        lists = QHBoxLayout()
        layout.addLayout(lists, 2)
        self.topList, self.bottomList = named(QListWidget(), "corpusTop"), named(QListWidget(), "corpusBottom")
        for title, widget in (("highest", self.topList), ("lowest", self.bottomList)):
            column = QVBoxLayout()
            lists.addLayout(column)
            column.addWidget(QLabel(f"<b>{title}</b>"))
            column.addWidget(widget)
            widget.setToolTip("double-click a text to open it in the heatmaps at this layer and head")
            widget.setWordWrap(True)
            widget.itemActivated.connect(lambda item: self.textOpened.emit(int(item.data(TEXT_ID))))

        self.atlasLabel = named(
            QLabel(
                f"atlas: <span style='color:{QUERY_COLOUR}'>queries</span> and "
                f"<span style='color:{KEY_COLOUR}'>keys</span> (hover: token and text; "
                "click: open the text)"
            ),
            "corpusAtlasLabel",
            wordWrap=True,
        )
        layout.addWidget(self.atlasLabel)
        self.atlas = AtlasPlot()
        self.atlas.pointClicked.connect(self._atlas_clicked)
        layout.addWidget(self.atlas, 3)
        return side

    # -- controls (``controls``) --------------------------------------------------------------
    def show_error(self, message: str) -> None:
        """One line next to the controls ("" clears it)."""
        self.controls.show_error(message)

    def set_running(self, running: bool, resumable: bool = False) -> None:
        self.controls.set_running(running, resumable)

    def show_progress(self, fraction: float, message: str) -> None:
        self.controls.show_progress(fraction, message)

    def current_metric(self) -> str:  # not "metric": QWidget.metric is the paint device's (grab() calls it)
        return self.metricCombo.currentText()

    def part(self) -> str:
        return self.partCombo.currentText() or "self"

    def _metric_changed(self, metric: str) -> None:
        self._draw_heads()
        self.metricChanged.emit(metric)

    def _part_changed(self, part: str) -> None:
        if part:
            self._draw_heads()
            self.partChanged.emit(part)

    # -- the store ------------------------------------------------------------------------------
    def show_store(self, heads: pd.DataFrame | None, caption: str = "", *, images: bool = False) -> None:
        """A store's heads (``store.heads``), or None; ``images``: an image pass's store (``store_kind``)."""
        self._heads = None if heads is None or heads.empty else heads.reset_index(drop=True)
        self._columns = store_kind(self, images)
        self.storeLabel.setText(caption)
        parts = [] if heads is None else list(dict.fromkeys(heads["part"]))
        self.partCombo.blockSignals(True)
        self.partCombo.clear()
        self.partCombo.addItems(parts)
        self.partCombo.blockSignals(False)
        self.partCombo.setVisible(len(parts) > 1)
        self._fill_table()
        self._draw_heads()
        self.show_head(None)

    def part_heads(self) -> pd.DataFrame | None:
        """The shown part's heads (None before a store)."""
        if self._heads is None:
            return None
        return self._heads[self._heads["part"] == self.part()].reset_index(drop=True)

    def pivot(self, column: str) -> np.ndarray:
        """``column`` of the shown part's heads as a [layers, heads] array (NaN where a head has none)."""
        heads = self.part_heads()
        if heads is None or heads.empty:
            return np.zeros((0, 0))
        shape = (int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1)
        out = np.full(shape, np.nan, dtype=object if column == "role" else float)
        out[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)] = heads[column].to_numpy()
        return out

    def _draw_heads(self) -> None:
        heads = self.part_heads()
        if heads is None or heads.empty:
            self.grid.set_values(np.zeros((0, 0)), np.zeros((0, 0), dtype=object))
            self.histogram.set_values(np.zeros(0), self.current_metric())
            return
        self.grid.set_values(self.pivot(self.current_metric()), self.pivot("role"))
        self.histogram.set_values(heads[self.current_metric()].to_numpy(float), self.current_metric())

    def _fill_table(self) -> None:
        """The table of every head, ``TABLE_ROWS`` rows per event-loop turn (``pacing.Pacer.call``):
        a 32 x 32 model's 12,000 items took 260 ms in one turn. Sorting waits for the last rows."""
        self._table_fill += 1
        records = [] if self._heads is None else self._heads.to_dict("records")
        self.table.setSortingEnabled(False)
        # fitted to the contents once, at the end: while fitted, each item set re-measured its column
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.setRowCount(0)  # before the labels: the header fits its columns to no rows
        self.table.setColumnCount(len(self._columns))
        self.table.setHorizontalHeaderLabels(list(self._columns))
        self.table.setRowCount(len(records))
        self._fill_rows(records, 0, self._table_fill)

    def _fill_rows(self, records: list[dict], start: int, fill: int) -> None:
        if fill != self._table_fill:
            return  # another store's table replaced this one
        for row in range(start, min(start + TABLE_ROWS, len(records))):
            for col, name in enumerate(self._columns):
                self.table.setItem(row, col, _table_item(name, records[row][name]))
        if start + TABLE_ROWS < len(records):
            pacer().call(self, lambda: self._fill_rows(records, start + TABLE_ROWS, fill))
        else:
            self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
            self.table.setSortingEnabled(True)

    def table_filled(self) -> bool:
        """Every head has its row (the table fills over a few event-loop turns)."""
        return self.table.isSortingEnabled()

    def table_column_index(self, name: str) -> int:
        return self._columns.index(name)  # the header's texts, in their order

    def table_column(self, name: str) -> list:
        """A column of the table as shown (sorted or not): the numbers, or the text of part / role."""
        col = self.table_column_index(name)
        items = [_cell(self.table, r, col) for r in range(self.table.rowCount())]
        return [i.text() if name in ("part", "role") else i.data(Qt.ItemDataRole.UserRole) for i in items]

    def _row_selected(self) -> None:
        rows = {i.row() for i in self.table.selectedItems()}
        if len(rows) != 1:
            return
        row = rows.pop()
        part = _cell(self.table, row, self.table_column_index("part")).text()
        layer = int(_cell(self.table, row, self.table_column_index("layer")).data(Qt.ItemDataRole.UserRole))
        head = int(_cell(self.table, row, self.table_column_index("head")).data(Qt.ItemDataRole.UserRole))
        if part != self.part():
            self.partCombo.setCurrentText(part)
        self.headSelected.emit(part, layer, head)

    # -- one head -------------------------------------------------------------------------------
    def show_head(self, detail: dict | None) -> None:
        """A head's ``detail``: part, layer, head, role, top and bottom (DataFrames of text_id, the
        metric, text), atlas (x, y, kind, text_id, position, token) and texts (text_id -> text)."""
        for widget in (self.topList, self.bottomList):
            widget.clear()
        if detail is None:
            self.headLabel.setText("click a head in the grid or the table")
            self.set_atlas(np.zeros(0), np.zeros(0), np.zeros(0, bool), np.zeros(0, int), np.zeros(0, int), [], {})
            self.histogram.mark(None)
            return
        layer, head, metric = detail["layer"], detail["head"], detail["metric"]
        self.grid.set_current(layer, head)
        heads = self.part_heads()
        row = None if heads is None else heads[(heads["layer"] == layer) & (heads["head"] == head)]
        found = row is not None and len(row) > 0
        value = float(row[metric].iloc[0]) if found and row is not None else float("nan")
        self.histogram.mark(value)
        role = row["role"].iloc[0] if found and row is not None else "?"
        self.headLabel.setText(f"<b>{detail['part']} {head_name(layer, head)}</b> · {role} · {metric} {value:.3f}")
        for widget, frame in ((self.topList, detail["top"]), (self.bottomList, detail["bottom"])):
            for item in _text_items(frame, metric):
                widget.addItem(item)
        atlas = detail["atlas"]
        self.set_atlas(
            atlas["x"].to_numpy(float),
            atlas["y"].to_numpy(float),
            (atlas["kind"] == "query").to_numpy(),
            atlas["text_id"].to_numpy(int),
            atlas["position"].to_numpy(int),
            list(atlas["token"]),
            detail["texts"],
        )

    def set_atlas(
        self,
        x: np.ndarray,
        y: np.ndarray,
        is_query: np.ndarray,
        text_ids: np.ndarray,
        positions: np.ndarray,
        tokens: list[str],
        texts: dict[int, str],
    ) -> None:
        """The atlas of a head: one point per sampled query or key (arrays of one length)."""
        self._atlas_points = (np.asarray(is_query, bool), np.asarray(text_ids, int), np.asarray(positions, int), tokens)
        self._texts = texts
        self.atlas.set_points(x, y, is_query, self._describe)

    def _describe(self, index: int) -> str:
        is_query, text_ids, positions, tokens = self._atlas_points
        kind = "query" if is_query[index] else "key"
        text = self._texts.get(int(text_ids[index]), "")
        return token_html(kind, f"{tokens[index]} (position {int(positions[index])})", text)

    def _atlas_clicked(self, index: int) -> None:
        text_ids = self._atlas_points[1]
        if index < len(text_ids):
            self.textOpened.emit(int(text_ids[index]))


__all__ = ["CorpusView", "set_images", "store_kind"]
