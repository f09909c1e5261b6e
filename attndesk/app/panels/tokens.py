"""Input text, the optional cross-attention text, and the tokens as the core saw them."""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
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

SAMPLE_TEXT = "The cat sat on the mat because it was tired."
SAMPLE_KEY_TEXT = "Le chat dort sur le tapis."
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
    """Emits ``changed`` when either text or the cross-attention switch changes."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tokensPanel")
        self.tokenInput = QPlainTextEdit(objectName="tokenInput")
        self.tokenInput.setPlaceholderText("Type the text to attend over…")
        self.tokenInput.setPlainText(SAMPLE_TEXT)
        self.tokenInput.setMaximumHeight(90)
        self.crossCheck = QCheckBox("Cross-attention (keys/values from a 2nd text)", objectName="crossCheck")
        self.keyInput = QPlainTextEdit(objectName="keyInput")
        self.keyInput.setPlaceholderText("Text for the keys and values…")
        self.keyInput.setPlainText(SAMPLE_KEY_TEXT)
        self.keyInput.setMaximumHeight(80)
        self.keyInput.setVisible(False)

        self.queryModel = TokenTableModel(self)
        self.keyModel = TokenTableModel(self)
        self.tokenTable = _table(self.queryModel, "tokenTable")
        self.keyTable = _table(self.keyModel, "keyTokenTable")
        self.keyTableLabel = QLabel("Key tokens")
        self.keyTable.setVisible(False)
        self.keyTableLabel.setVisible(False)
        self.summary = QLabel("", objectName="tokenSummary")
        self.summary.setWordWrap(True)
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

        self.tokenInput.textChanged.connect(self.changed)
        self.keyInput.textChanged.connect(self.changed)
        self.crossCheck.toggled.connect(self._on_cross)

    def _on_cross(self, on: bool) -> None:
        self.keyInput.setVisible(on)
        self.changed.emit()

    def text(self) -> str:
        return self.tokenInput.toPlainText()

    def key_text(self) -> str | None:
        """The key/value text when cross-attention is on, else None (self-attention)."""
        return self.keyInput.toPlainText() if self.crossCheck.isChecked() else None

    def set_texts(self, text: str, key_text: str | None, cross: bool) -> None:
        for w in (self.tokenInput, self.keyInput, self.crossCheck):
            w.blockSignals(True)
        try:
            self.tokenInput.setPlainText(text)
            if key_text is not None:
                self.keyInput.setPlainText(key_text)
            self.crossCheck.setChecked(cross)
            self.keyInput.setVisible(cross)
        finally:
            for w in (self.tokenInput, self.keyInput, self.crossCheck):
                w.blockSignals(False)
        self.changed.emit()

    def show_result(self, result) -> None:
        """List the tokens of a result (query side, and the key side for cross-attention)."""
        self.queryModel.set_tokens(result.tokens, result.token_ids, result.unknown)
        cross = result.key_tokens is not None
        if cross:
            self.keyModel.set_tokens(result.key_tokens, result.key_token_ids, result.key_unknown)
        self.keyTable.setVisible(cross)
        self.keyTableLabel.setVisible(cross)
        n = len(result.tokens)
        pads = sum(1 for t in result.tokens if t == PAD)
        unknown = sum(bool(u) for u in (result.unknown or []))
        parts = [f"{n} tokens"]
        if pads:
            parts.append(f"{pads} padding")
        if unknown:
            parts.append(f"{unknown} unknown")
        if cross:
            parts.append(f"{len(result.key_tokens)} key tokens")
        self.summary.setText(", ".join(parts))
