"""The pretrained mode's widgets: the heatmap header (controls and a summary line), the All layers
page (the layer × head grid, its caption, colour scale and export menu) and the File menu's model
actions. They are built here and set from the state and the run (``sync``, ``show_summary``,
``show_painting``); the mode binds them to it.

The grid's thumbnails (reduced from every layer's weights) are a copy the window keeps: held in
the memory ledger, protected while drawn; let go, the grid is cleared until the next run."""

from __future__ import annotations

from PySide6.QtCore import QObject, QSignalBlocker
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QMenu, QPushButton, QVBoxLayout, QWidget

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name
from attndesk.models import PretrainedResult
from attndesk.session.ledger import Holding, MemoryLedger, arrays_of
from attndesk.session.results import Shown
from attndesk.session.state import AppState

from ...widgets.styles import restyle
from .controls import PretrainedControls, describe_run
from .grid import LayerHeadGrid
from .painting import LayerGridPainting

PAINTING_DEPTH = 3  # painting -> its thumbnails
_NOTICE_STYLE = "color: #9a4b00;"


class PretrainedWidgets:
    """Builds the widgets (actions owned by ``owner``); ``build_grid_page(page)`` fills the All
    layers tab once the window hands it over."""

    def __init__(self, owner: QObject) -> None:
        self.controls = PretrainedControls()
        self.controls.all_layers_check.setToolTip("show every layer x head in the All layers tab; click one to open it")
        self.summary = self.controls.summary
        self.header = self._build_header()
        self.grid = LayerHeadGrid()
        self._painting_held: Holding | None = None  # the grid's thumbnails in the window's memory ledger
        self.gridSummary = named(QLabel(""), "pretrainedGridSummary")
        self.gridSummary.setWordWrap(True)
        self.gridScaleCombo = named(QComboBox(), "gridScaleCombo")
        self.gridScaleCombo.addItem("colour per head", "per-head")
        self.gridScaleCombo.addItem("colour shared", "shared")
        self.gridScaleCombo.setToolTip(
            "per head: each thumbnail from 0 to its own maximum (shows every pattern); "
            "shared: one scale for all (compares heads)"
        )
        self.openFolderAction = named(QAction("Open &model folder…", owner), "openModelFolderAction")
        self.openFolderAction.setToolTip(
            "a local model folder: config.json, weights (safetensors or .bin), tokenizer files"
        )
        self.localModelsAction = named(QAction("&Local models…", owner), "localModelsAction")
        self.localModelsAction.setToolTip("the models already in the local Hugging Face cache: open one (offline)")

    def _build_header(self) -> QWidget:
        header = named(QWidget(), "pretrainedHeader")
        rows = QVBoxLayout(header)
        rows.setContentsMargins(4, 0, 4, 0)
        rows.setSpacing(2)
        line = QHBoxLayout()
        line.addWidget(self.controls)
        line.addSpacing(12)
        line.addWidget(self.summary, 1)
        rows.addLayout(line)
        rows.addWidget(self.controls.target_row)
        return header

    def build_grid_page(self, page: QWidget) -> None:
        self.gridExportButton = named(QPushButton("Export…"), "pretrainedGridExportButton")
        menu = QMenu(self.gridExportButton)
        self.exportGridAction = menu.addAction("Grid image (PNG, SVG or PDF)…")
        self.exportAllAction = menu.addAction("All layers' weights (.npy or .csv)…")
        self.gridExportButton.setMenu(menu)
        top = QHBoxLayout()
        top.addWidget(self.gridSummary, 1)
        top.addWidget(self.controls.clear_button)  # ablating happens here (Ctrl+click), so does undoing it
        top.addWidget(self.gridScaleCombo)
        top.addWidget(self.gridExportButton)
        box = QVBoxLayout(page)
        box.setContentsMargins(4, 4, 4, 4)
        box.addLayout(top)
        box.addWidget(self.grid, 1)

    def sync(self, state: AppState, grid_on: bool) -> None:
        """Every control from the state (no signal is sent back)."""
        c = self.controls
        with QSignalBlocker(c.layer_spin):
            c.layer_spin.setValue(state.pretrained.layer)
        for check, on in (
            (c.hide_special_check, state.pretrained.hide_special),
            (c.all_layers_check, grid_on),
            (c.log_check, state.view.log_scale),
            (c.hide_first_check, state.view.hide_first_key),
        ):
            with QSignalBlocker(check):
                check.setChecked(on)
        with QSignalBlocker(c.part_combo):
            c.part_combo.setCurrentIndex(c.part_combo.findData(state.pretrained.part))
        c.refresh_layer_label()  # the suffix follows a layer set without the spin's signal
        if c.target_edit.text() != state.target_text:  # never while typing: the cursor would jump
            c.target_edit.setText(state.target_text)
        c.layer_spin.setEnabled(not grid_on)
        c.clear_button.setEnabled(bool(state.pretrained.ablate))
        self.grid.set_ablated(state.pretrained.ablate)
        self.gridScaleCombo.blockSignals(True)
        self.gridScaleCombo.setCurrentIndex(self.gridScaleCombo.findData(state.pretrained.grid_scale))
        self.gridScaleCombo.blockSignals(False)

    def show_summary(self, run: PretrainedResult, ablate, shown: Shown | None) -> None:
        """The run's summary in the header and above the grid; the header adds a pending ablation
        (``ablate`` differs from the run's) and the hidden share of the layer ``shown``."""
        text = describe_run(run)
        if run.ablate:
            text += " · ablated " + ", ".join(head_name(l, h) for l, h in run.ablate)
        self.gridSummary.setText(text)  # the grid's own caption covers hidden tokens over all layers
        if tuple(ablate) != tuple(run.ablate):
            n = len(ablate)
            text += f" · recomputing with {n} head{'s' if n != 1 else ''} ablated…"
        if shown is not None and shown.layers is run and shown.map.hidden_mass is not None:
            text += " · " + shown.map.legend  # this layer's hidden share
        self.summary.setText(text)
        style = _NOTICE_STYLE if run.dropped_tokens else ""
        for label in (self.summary, self.gridSummary):
            restyle(label, style)

    def show_painting(self, painting: LayerGridPainting | None, ablated, ledger: MemoryLedger) -> None:
        """Draw the grid's thumbnails (heads in ``ablated`` marked) and hold them in ``ledger``."""
        self.grid.set_painting(painting)
        self.grid.set_ablated(ablated)  # heads toggled while it was built stay marked
        self._hold_painting(painting, ledger)

    def _hold_painting(self, painting: LayerGridPainting | None, ledger: MemoryLedger) -> None:
        held, self._painting_held = self._painting_held, None
        if held is not None:
            held.release()
        if painting is None:
            return
        cell: list = []

        def release(why: str) -> None:
            if cell and cell[0] is self._painting_held:
                self._painting_held = None
                self.grid.clear()  # the ledger's line on the status line says why

        parts = arrays_of(painting, PAINTING_DEPTH)
        cell.append(
            ledger.hold("pretrained", "the layer grid's thumbnails", parts, release, protected=True, strict=False)
        )
        self._painting_held = cell[0]
