"""Input text, the optional cross-attention text, and the tokens as the core saw them."""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ..results import Shown
from ..state import AppState

SAMPLE_TEXT = AppState.model_fields["text"].default
SAMPLE_KEY_TEXT = AppState.model_fields["key_text"].default
PAD, UNK = "[PAD]", "[UNK]"


class TokenTableModel(QAbstractTableModel):
    """Index, token, id per row; virtual (no widget per token), so long texts stay fast."""

    HEADERS = ("#", "token", "id")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._tokens: list[str] = []
        self._ids: list[int] = []
        self._unknown: list[bool] = []

    def set_tokens(self, tokens: Sequence[str], ids: Sequence[int], unknown: Sequence[bool] | None = None) -> None:
        self.beginResetModel()
        self._tokens = list(tokens)
        self._ids = [int(i) for i in ids]
        self._unknown = list(unknown) if unknown is not None else [i == 1 for i in self._ids]
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()):  # noqa: N802 - Qt's name
        return 0 if parent.isValid() else len(self._tokens)

    def columnCount(self, parent=QModelIndex()):  # noqa: N802
        return 0 if parent.isValid() else 3

    def kind(self, row: int) -> str:
        """"pad", "unk" or "word" (what the row's colour says)."""
        if self._tokens[row] == PAD or self._ids[row] == 0:
            return "pad"
        if self._unknown[row]:
            return "unk"
        return "word"

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row, col = index.row(), index.column()
        kind = self.kind(row)
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return row
            if col == 1:
                return self._tokens[row]
            return self._ids[row] if kind != "unk" else f"{self._ids[row]} [UNK]"
        if role == Qt.ItemDataRole.BackgroundRole:
            if kind == "pad":
                return QBrush(QColor("#e4e4e4"))
            if kind == "unk":
                return QBrush(QColor("#fff1c2"))
        if role == Qt.ItemDataRole.ForegroundRole and kind == "pad":
            return QBrush(QColor("#777777"))
        if role == Qt.ItemDataRole.FontRole and kind != "word":
            font = QFont()
            font.setItalic(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            if kind == "pad":
                return "padding: added to reach the padded length; the padding mask hides it as a key"
            if kind == "unk":
                return "outside the vocabulary: embedded as [UNK]"
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.HEADERS[section]
        return None


def _table(model: TokenTableModel, name: str) -> QTableView:
    view = QTableView(objectName=name)
    view.setModel(model)
    view.verticalHeader().hide()
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    # Fixed sizes: ResizeToContents would ask every row for its text (slow for long documents).
    header = view.horizontalHeader()
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)
    header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
    header.setSectionResizeMode(2, QHeaderView.ResizeMode.Fixed)
    header.resizeSection(0, 48)
    header.resizeSection(2, 84)
    view.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    view.verticalHeader().setDefaultSectionSize(20)
    return view


class TokensPanel(QWidget):
    """The input texts, bound to ``state.text`` / ``state.key_text`` / ``state.cross``, and the
    tokens of the result on screen (``show_result``)."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tokensPanel")
        self.state = state
        self.tokenInput = QPlainTextEdit(objectName="tokenInput")
        self.tokenInput.setPlaceholderText("Type the text to attend over…")
        self.tokenInput.setMaximumHeight(90)
        self.crossCheck = QCheckBox("Cross-attention (keys/values from a 2nd text)", objectName="crossCheck")
        self.keyInput = QPlainTextEdit(objectName="keyInput")
        self.keyInput.setPlaceholderText("Text for the keys and values…")
        self.keyInput.setMaximumHeight(80)
        self.queryModel = TokenTableModel(self)
        self.keyModel = TokenTableModel(self)
        self.tokenTable = _table(self.queryModel, "tokenTable")
        self.keyTable = _table(self.keyModel, "keyTokenTable")
        self.keyTableLabel = QLabel("Key tokens")
        self.keyTable.setVisible(False)
        self.keyTableLabel.setVisible(False)
        self.summary = QLabel("", objectName="tokenSummary")
        self.summary.setWordWrap(True)
        self._lay_out()
        self.tokenInput.textChanged.connect(lambda: self._write("text", self.tokenInput))
        self.keyInput.textChanged.connect(lambda: self._write("key_text", self.keyInput))
        self.crossCheck.toggled.connect(lambda on: setattr(self.state, "cross", bool(on)))
        state.events.text.connect(lambda text: self._show_text(self.tokenInput, text))
        state.events.key_text.connect(lambda text: self._show_text(self.keyInput, text))
        state.events.cross.connect(self._show_cross)
        self._show_text(self.tokenInput, state.text)
        self._show_text(self.keyInput, state.key_text)
        self._show_cross(state.cross)

    def _lay_out(self) -> None:
        legend = QLabel('<span style="background:#e4e4e4">&nbsp;[PAD]&nbsp;</span> padding &nbsp; '
                        '<span style="background:#fff1c2">&nbsp;word&nbsp;</span> unknown → [UNK]')
        legend.setStyleSheet("color: #555;")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Text (queries)"))
        layout.addWidget(self.tokenInput)
        layout.addWidget(self.crossCheck)
        layout.addWidget(self.keyInput)
        layout.addWidget(self.summary)
        layout.addWidget(self.tokenTable, 2)
        layout.addWidget(self.keyTableLabel)
        layout.addWidget(self.keyTable, 1)
        layout.addWidget(legend)

    def _write(self, name: str, editor: QPlainTextEdit) -> None:
        setattr(self.state, name, editor.toPlainText())

    @staticmethod
    def _show_text(editor: QPlainTextEdit, text: str) -> None:
        if editor.toPlainText() != text:  # an edit in the box itself is already there
            editor.blockSignals(True)
            editor.setPlainText(text)
            editor.blockSignals(False)

    def _show_cross(self, on: bool) -> None:
        self.crossCheck.blockSignals(True)
        self.crossCheck.setChecked(bool(on))
        self.crossCheck.blockSignals(False)
        self.keyInput.setVisible(bool(on))

    def show_result(self, shown: Shown) -> None:
        """List the tokens of the result on screen (query side, and the key side for cross-attention)."""
        q, k = shown.queries, shown.keys
        self.queryModel.set_tokens(q.tokens, q.ids, q.unknown)
        if k is not None:
            self.keyModel.set_tokens(k.tokens, k.ids, k.unknown)
        self.keyTable.setVisible(k is not None)
        self.keyTableLabel.setVisible(k is not None)
        pads = sum(1 for t in q.tokens if t == PAD)
        unknown = sum(bool(u) for u in (q.unknown or []))
        parts = [f"{len(q.tokens)} tokens"]
        if pads:
            parts.append(f"{pads} padding")
        if unknown:
            parts.append(f"{unknown} unknown")
        if k is not None:
            parts.append(f"{len(k.tokens)} key tokens")
        self.summary.setText(", ".join(parts))
