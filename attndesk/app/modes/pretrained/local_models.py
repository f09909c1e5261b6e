"""File > Local models…: the models already in the local Hugging Face cache, to open offline.

``LocalModelsDialog`` (objectName ``localModelsDialog``) only draws what it is given: a list of
``CachedModel`` (``models.hub_cache``), listed by its owner in a side job (every cached
model's config.json and weight headers are read). One row per model: name, family, architecture,
parameters, size on disk, and whether attndesk runs it (else why not, in red). Double-click or
"Open" on a supported row emits ``modelChosen(path)``; an unsupported row says why and emits nothing.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.models import CachedModel, hub_cache_dir
from attndesk.system.free_memory import format_bytes

COLUMNS = ("Model", "Family", "Architecture", "Parameters", "Size", "Supported")
_REFUSED = QColor(176, 0, 32)


def parameters_text(count: int | None) -> str:
    if not count:
        return "?"
    return f"{count / 1e9:.1f} B" if count >= 1e9 else f"{count / 1e6:.1f} M" if count >= 1e6 else f"{count:,}"


def reason_text(model: CachedModel) -> str:
    """Why not, naming the repository rather than its snapshot folder (a commit hash)."""
    reason = model.reason
    if model.path is not None and reason.startswith(f"{model.path.name} "):
        reason = model.repo_id + reason[len(model.path.name) :]
    return reason


def row_texts(model: CachedModel) -> list[str]:
    family = f"{model.family_name} {model.family}" if model.family else model.family_name
    supported = "yes" if model.supported else f"no: {reason_text(model)}"
    return [
        model.repo_id,
        family,
        model.architecture or "?",
        parameters_text(model.parameters),
        format_bytes(model.size_bytes),
        supported,
    ]


class LocalModelsDialog(QDialog):
    """The hub cache's models; choose one to open it (see the module docstring)."""

    modelChosen = Signal(str)  # the snapshot folder of a supported model

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("localModelsDialog")
        self.setWindowTitle("Local models (Hugging Face cache)")
        self.resize(980, 420)
        self._models: list[CachedModel] = []
        self.where = named(QLabel(), "localModelsFolder")
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = named(QTableWidget(0, len(COLUMNS)), "localModelsTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.message = named(QLabel(), "localModelsMessage")
        self.message.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Close)
        self.openButton = self.buttons.button(QDialogButtonBox.StandardButton.Open)
        self.openButton.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.where)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self.buttons.rejected.connect(self.reject)
        self.openButton.clicked.connect(self.open_selected)
        self.table.itemSelectionChanged.connect(self._on_selection)
        self.table.cellDoubleClicked.connect(lambda row, _col: self.open_row(row))

    # -- feeding it -----------------------------------------------------------------------------
    def set_busy(self) -> None:
        self.where.setText(f"Cache folder: {hub_cache_dir()} (set HF_HOME or HF_HUB_CACHE to use another)")
        self.message.setStyleSheet("")
        self.message.setText("reading the cache (config.json and weight headers of every model)…")

    def set_models(self, models: list[CachedModel]) -> None:
        self._models = list(models)
        self.table.setRowCount(len(self._models))
        for row, model in enumerate(self._models):
            for column, text in enumerate(row_texts(model)):
                item = QTableWidgetItem(text)
                item.setToolTip(text if column < len(COLUMNS) - 1 else (reason_text(model) or str(model.path)))
                if not model.supported:
                    item.setForeground(_REFUSED)
                self.table.setItem(row, column, item)
        usable = sum(m.supported for m in self._models)
        self.message.setStyleSheet("")
        self.message.setText(
            f"{len(self._models)} model(s) in the cache, {usable} attndesk can run: double-click one to open it "
            "(offline; never code shipped with a model)"
            if self._models
            else "no models in the cache: download one with huggingface-cli, or use File > Open model folder…"
        )
        self._on_selection()

    def show_error(self, message: str) -> None:
        self.message.setStyleSheet(f"color: {_REFUSED.name()};")
        self.message.setText(message)

    # -- choosing -------------------------------------------------------------------------------
    def models(self) -> list[CachedModel]:
        return list(self._models)

    def selected_row(self) -> int:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].row() if rows else -1

    def _on_selection(self) -> None:
        row = self.selected_row()
        model = self._models[row] if 0 <= row < len(self._models) else None
        self.openButton.setEnabled(model is not None and model.supported)
        if model is not None and not model.supported:
            self.show_error(f"{model.repo_id} cannot be opened: {reason_text(model)}")

    def open_selected(self) -> None:
        self.open_row(self.selected_row())

    def open_row(self, row: int) -> bool:
        """Emit ``modelChosen`` for a supported row; say why not for the others."""
        if not 0 <= row < len(self._models):
            return False
        model = self._models[row]
        if not model.supported or model.path is None:
            self.show_error(f"{model.repo_id} cannot be opened: {reason_text(model)}")
            return False
        self.message.setStyleSheet("")
        self.message.setText(f"opening {model.repo_id}…")
        self.modelChosen.emit(str(model.path))
        return True


__all__ = ["COLUMNS", "LocalModelsDialog", "parameters_text", "reason_text", "row_texts"]
