"""Input text, the optional cross-attention text, and the tokens as the core saw them."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.app.widgets.styles import NOTE_STYLE
from attndesk.session.results import Shown
from attndesk.session.state import TOY, AppState

PAD, UNK = "[PAD]", "[UNK]"
# Qt lays out a text box's whole text on the GUI thread when it is set, and breaking a line without
# spaces grows with its square (docs/benchmarks.md). Longer texts, or texts with a longer unbroken
# run, are shown as a read-only preview (the whole text is still what runs).
EDIT_CHARS = 100_000
RUN_CHARS = 2_000
PREVIEW_CHARS = 20_000
_LONG_RUN = re.compile(rf"\S{{{RUN_CHARS + 1}}}")
_PREVIEW_RUN = re.compile(r"(\S{1000})(?=\S)")


def preview_of(text: str) -> str | None:
    """None when a text box can hold ``text`` itself, else the preview it shows instead: the first
    PREVIEW_CHARS characters, runs without whitespace shown in lines of 1,000."""
    if len(text) <= EDIT_CHARS and not _LONG_RUN.search(text):
        return None
    return _PREVIEW_RUN.sub("\\1\n", text[:PREVIEW_CHARS])


class TokenTableModel(QAbstractTableModel):
    """Index, token, id per row (or, for tokens without ids, what each is: an image's patches);
    virtual (no widget per token), so long texts stay fast."""

    HEADERS = ("#", "token", "id")
    LABELS_HEADER = "what"  # the third column's title when it shows labels in place of ids

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._tokens: list[str] = []
        self._ids: list[int] = []
        self._unknown: list[bool] = []
        self._raw: list[str] | None = None
        self._labels: list[str] | None = None

    def set_tokens(
        self,
        tokens: Sequence[str],
        ids: Sequence[int] | np.ndarray,
        unknown: Sequence[bool] | None = None,
        raw: Sequence[str] | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        """Show these tokens (``raw``: the tokenizer's own spelling of each, for the tooltips;
        ``labels``: what each token is, shown in place of the ids, for tokens that have none); the
        same tokens again (another seed, another head count) leave the table as it is: no reset,
        no relayout, the scroll position kept."""
        new_tokens, new_ids = list(tokens), [int(i) for i in ids]
        new_unknown = list(unknown) if unknown is not None else [labels is None and i == 1 for i in new_ids]
        new_raw = None if raw is None else list(raw)
        new_labels = None if labels is None else list(labels)
        new = (new_tokens, new_ids, new_unknown, new_raw, new_labels)
        if new == (self._tokens, self._ids, self._unknown, self._raw, self._labels):
            return
        self.beginResetModel()
        self._tokens, self._ids, self._unknown, self._raw, self._labels = new
        self.endResetModel()

    def has_labels(self) -> bool:
        """Whether the third column shows what each token is rather than its id."""
        return self._labels is not None

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._tokens)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else 3

    def kind(self, row: int) -> str:
        """ "pad", "unk" or "word" (what the row's colour says)."""
        if self._labels is not None:  # no vocabulary: nothing is padding or unknown
            return "word"
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
            if self._labels is not None:
                return self._labels[row]
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
            if col == 1 and self._raw is not None and self._raw[row] != self._tokens[row]:
                return f"the tokenizer's token: {self._raw[row]}"
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            if section == 2 and self._labels is not None:
                return self.LABELS_HEADER
            return self.HEADERS[section]
        return None


ID_WIDTH = 84  # px: the id column; labels ("row 12, col 13", "distillation token") take their widest


def _fit_third_column(view: QTableView, labels: Sequence[str] | None) -> None:
    """The id column's width, or the widest label's (with the cell's margins)."""
    width = ID_WIDTH
    if labels:
        metrics = view.fontMetrics()
        width = max(width, max(metrics.horizontalAdvance(t) for t in labels) + 16)
    if view.horizontalHeader().sectionSize(2) != width:
        view.horizontalHeader().resizeSection(2, width)


def _table(model: TokenTableModel, name: str) -> QTableView:
    view = named(QTableView(), name)
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
    header.resizeSection(2, ID_WIDTH)
    view.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    view.verticalHeader().setDefaultSectionSize(20)
    return view


class _PreviewNote(QWidget):
    """Under a text box that shows a preview: what is shown, and Clear (to type another text)."""

    def __init__(self, prefix: str, editor: QPlainTextEdit, clear) -> None:
        super().__init__()
        self.setObjectName(f"{prefix}PreviewNote")
        self._editor = editor
        self.label = named(QLabel(""), f"{prefix}PreviewLabel")
        self.label.setWordWrap(True)
        self.label.setStyleSheet(NOTE_STYLE)
        self.clearButton = named(QPushButton("Clear"), f"{prefix}ClearButton")
        self.clearButton.setToolTip("Empty this text to type or paste another")
        self.clearButton.clicked.connect(lambda _checked=False: clear())
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(self.clearButton)
        self.hide()

    def show_for(self, text: str | None) -> None:
        """Say that a preview of ``text`` is shown (None: the box holds the text itself)."""
        if text is not None:
            self.label.setText(
                f"Preview: the first {min(len(text), PREVIEW_CHARS):,} of {len(text):,} characters, "
                "read-only. The whole text is used; open or drop a file to replace it."
            )
        self.setVisible(text is not None and not self._editor.isHidden())


PROBE_NOTE = (
    "Trained weights read their task's probe input, whose tokens are listed below; this text "
    "comes back with Weights: Random."
)


class TokensPanel(QWidget):
    """The input texts, bound to ``state.text`` / ``state.key_text`` / ``state.cross``, and the
    tokens of the result on screen (``show_result``)."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tokensPanel")
        self.state = state
        self.tokenInput = named(QPlainTextEdit(), "tokenInput")
        self.tokenInput.setPlaceholderText("Type the text to attend over…")
        self.tokenInput.setMaximumHeight(90)
        self.crossCheck = named(QCheckBox("Cross-attention (keys/values from a 2nd text)"), "crossCheck")
        self.keyInput = named(QPlainTextEdit(), "keyInput")
        self.keyInput.setPlaceholderText("Text for the keys and values…")
        self.keyInput.setMaximumHeight(80)
        self.queryModel = TokenTableModel(self)
        self.keyModel = TokenTableModel(self)
        self.tokenTable = _table(self.queryModel, "tokenTable")
        self.keyTable = _table(self.keyModel, "keyTokenTable")
        self.keyTableLabel = QLabel("Key tokens")
        self.keyTable.setVisible(False)
        self.keyTableLabel.setVisible(False)
        self.summary = named(QLabel(""), "tokenSummary")
        self.summary.setWordWrap(True)
        self.tokenPreviewNote = _PreviewNote("token", self.tokenInput, lambda: setattr(self.state, "text", ""))
        self.keyPreviewNote = _PreviewNote("key", self.keyInput, lambda: setattr(self.state, "key_text", ""))
        # trained weights run on their task's probe input: the box is greyed (its text kept for Random)
        self.probeNote = named(QLabel(PROBE_NOTE), "tokenProbeNote")
        self.probeNote.setWordWrap(True)
        self.probeNote.setStyleSheet(NOTE_STYLE)
        self.imageNote = named(
            QLabel(
                "A vision model reads an image, not text: choose a sample, open a file or drop one in the Image tab."
            ),
            "tokenImageNote",
        )
        self.imageNote.setWordWrap(True)
        self.imageNote.hide()
        self._lay_out()
        self.tokenInput.textChanged.connect(lambda: self._write("text", self.tokenInput))
        self.keyInput.textChanged.connect(lambda: self._write("key_text", self.keyInput))
        self.crossCheck.toggled.connect(lambda on: setattr(self.state, "cross", bool(on)))
        state.events.text.connect(lambda text: self._show_text(self.tokenInput, self.tokenPreviewNote, text))
        state.events.key_text.connect(lambda text: self._show_text(self.keyInput, self.keyPreviewNote, text))
        state.events.cross.connect(self._show_cross)
        state.events.mode.connect(self._show_source)
        state.events.config.connect(self._show_source)
        self._show_text(self.tokenInput, self.tokenPreviewNote, state.text)
        self._show_text(self.keyInput, self.keyPreviewNote, state.key_text)
        self._show_cross(state.cross)
        self._show_source()

    def _lay_out(self) -> None:
        # the colours of padding and [UNK] rows: hidden for an image's tokens, which have neither
        self.legend = legend = named(
            QLabel(
                '<span style="background:#e4e4e4">&nbsp;[PAD]&nbsp;</span> padding &nbsp; '
                '<span style="background:#fff1c2">&nbsp;word&nbsp;</span> unknown → [UNK]'
            ),
            "tokenLegend",
        )
        legend.setStyleSheet(NOTE_STYLE)
        layout = QVBoxLayout(self)
        # the text input, as one box: a vision model reads an image instead (``set_image_input``)
        self.textInputBox = named(QWidget(), "textInputBox")
        texts = QVBoxLayout(self.textInputBox)
        texts.setContentsMargins(0, 0, 0, 0)
        texts.addWidget(QLabel("Text (queries)"))
        texts.addWidget(self.tokenInput)
        texts.addWidget(self.tokenPreviewNote)
        texts.addWidget(self.probeNote)
        texts.addWidget(self.crossCheck)
        texts.addWidget(self.keyInput)
        texts.addWidget(self.keyPreviewNote)
        layout.addWidget(self.textInputBox)
        layout.addWidget(self.imageNote)
        layout.addWidget(self.summary)
        layout.addWidget(self.tokenTable, 2)
        layout.addWidget(self.keyTableLabel)
        layout.addWidget(self.keyTable, 1)
        layout.addWidget(legend)

    def _write(self, name: str, editor: QPlainTextEdit) -> None:
        if not editor.isReadOnly():  # a preview is never the text
            setattr(self.state, name, editor.toPlainText())

    @staticmethod
    def _show_text(editor: QPlainTextEdit, note: _PreviewNote, text: str) -> None:
        preview = preview_of(text)
        editor.blockSignals(True)
        if preview is None:
            if editor.isReadOnly() or editor.toPlainText() != text:  # an edit in the box is already there
                editor.setPlainText(text)
            editor.setReadOnly(False)
        else:
            editor.setPlainText(preview)
            editor.setReadOnly(True)
        editor.blockSignals(False)
        note.show_for(text if preview is not None else None)

    def _show_cross(self, on: bool) -> None:
        self.crossCheck.blockSignals(True)
        self.crossCheck.setChecked(bool(on))
        self.crossCheck.blockSignals(False)
        self.keyInput.setVisible(bool(on))
        self.keyPreviewNote.setVisible(bool(on) and self.keyInput.isReadOnly())

    def _show_source(self, *_changed: object) -> None:
        """Grey the texts while the toy mode shows trained weights: they read their task's probe input."""
        probe = self.state.mode == TOY and self.state.config.weights_from != "random"
        for widget in (self.tokenInput, self.crossCheck, self.keyInput):
            widget.setEnabled(not probe)
        self.probeNote.setVisible(probe)

    def set_image_input(self, on: bool) -> None:
        """A vision model on: the text input gives way to a note pointing at the Image tab."""
        self.textInputBox.setVisible(not on)
        self.imageNote.setVisible(on)

    def show_result(self, shown: Shown) -> None:
        """List the tokens of the result on screen (query side, and the key side for cross-attention)."""
        q, k = shown.queries, shown.keys
        self.queryModel.set_tokens(q.tokens, q.ids, q.unknown, q.raw, q.labels)
        _fit_third_column(self.tokenTable, q.labels)
        self.legend.setVisible(q.labels is None)
        if k is not None:
            self.keyModel.set_tokens(k.tokens, k.ids, k.unknown, k.raw, k.labels)
            _fit_third_column(self.keyTable, k.labels)
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
