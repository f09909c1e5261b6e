"""Widgets the interpretability views share: a token field that checks its text is one token of the
model's tokenizer, and the run bar (Run, Cancel, progress, one message line).

The views never tokenize by themselves: their presenter hands them a checker
(``TokenField.set_checker(fn)``, ``fn(text) -> (ok, line)``) built on the core's own checks, so
the line beside the field is the one the computation would refuse with.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QWidget

from attndesk.app.widgets.named import named
from attndesk.app.widgets.styles import ERROR_STYLE, NOTE_STYLE

Checker = Callable[[str], tuple[bool, str]]
_OK_STYLE = "color: #276227;"


def problem_label(name: str) -> QLabel:
    """A red, wrapping one-line message placed next to the control it is about (hidden when empty)."""
    label = named(QLabel(""), name)
    label.setStyleSheet(ERROR_STYLE)
    label.setWordWrap(True)
    label.hide()
    return label


def say(label: QLabel, text: str) -> None:
    label.setText(text)
    label.setVisible(bool(text))


class TokenField(QWidget):
    """A line edit for one token (a text such as " Mary", or ``id:N``) and the check beside it:
    green with the token's id when the tokenizer makes exactly one token of it, red with the
    reason otherwise (an optional field, ``empty_note``, may stay empty). ``edited(str)`` on every change."""

    edited = Signal(str)

    def __init__(
        self, label: str, name: str, placeholder: str = "", parent: QWidget | None = None, *, empty_note: str = ""
    ) -> None:
        super().__init__(parent)
        self._empty_note = empty_note  # an optional field: empty is fine, and this says what it means
        self.edit = named(QLineEdit(), f"{name}Edit")
        self.edit.setPlaceholderText(placeholder)
        self.edit.setToolTip("a token as text (mind the leading space GPT-2-style tokenizers keep), or id:N")
        self.edit.setMaximumWidth(160)
        self.check = named(QLabel(""), f"{name}Check")
        self.check.setWordWrap(True)
        self._checker: Checker | None = None
        self._ok = False
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel(label))
        row.addWidget(self.edit)
        row.addWidget(self.check, 1)
        self.edit.textChanged.connect(self._changed)

    def text(self) -> str:
        return self.edit.text()

    def set_text(self, text: str) -> None:
        self.edit.setText(text)

    def set_checker(self, checker: Checker | None) -> None:
        """``checker(text) -> (ok, line)``; None: the tokenizer is not loaded yet (checked on Run)."""
        self._checker = checker
        self.recheck()

    def is_ok(self) -> bool:
        return self._ok

    def recheck(self) -> None:
        text = self.edit.text()
        if not text and self._empty_note:
            self._ok = True
            self.check.setStyleSheet(NOTE_STYLE)
            self.check.setText(self._empty_note)
            return
        if self._checker is None:
            self._ok = True
            self.check.setStyleSheet(NOTE_STYLE)
            self.check.setText("checked against the tokenizer once the model is loaded" if text else "")
            return
        if not text:
            self._ok, line = False, "type a token"
        else:
            self._ok, line = self._checker(text)
        self.check.setStyleSheet(_OK_STYLE if self._ok else ERROR_STYLE)
        self.check.setText(("✓ " if self._ok else "✗ ") + line)

    @Slot(str)
    def _changed(self, text: str) -> None:
        self.recheck()
        self.edited.emit(text)


class RunBar(QWidget):
    """Run, Cancel (Esc too), a progress bar while a job runs, and the message line."""

    runRequested = Signal()
    cancelRequested = Signal()

    def __init__(self, name: str, run_text: str = "Run", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runButton = named(QPushButton(run_text), f"{name}RunButton")
        self.cancelButton = named(QPushButton("Cancel"), f"{name}CancelButton")
        self.cancelButton.setToolTip("stop the computation (Esc)")
        self.cancelButton.setEnabled(False)
        self.progress = named(QProgressBar(), f"{name}Progress")
        self.progress.setRange(0, 1000)
        self.progress.setMaximumWidth(220)
        self.progress.hide()
        self.message = named(QLabel(""), f"{name}Message")
        self.message.setWordWrap(True)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.runButton)
        row.addWidget(self.cancelButton)
        row.addWidget(self.progress)
        row.addWidget(self.message, 1)
        self.runButton.clicked.connect(self.runRequested)
        self.cancelButton.clicked.connect(self.cancelRequested)
        self._available = True
        self._busy = False

    def set_available(self, ok: bool) -> None:
        self._available = bool(ok)
        self._update()

    def set_busy(self, busy: bool, message: str | None = None) -> None:
        self._busy = bool(busy)
        self.progress.setValue(0)
        self.progress.setVisible(self._busy)
        if message is not None:
            self.set_message(message)
        self._update()

    def set_progress(self, fraction: float, message: str = "") -> None:
        if not self._busy:
            return
        self.progress.setValue(round(1000 * max(0.0, min(1.0, fraction))))
        if message:
            self.set_message(message)

    def set_message(self, text: str, *, error: bool = False) -> None:
        self.message.setStyleSheet(ERROR_STYLE if error else "")
        self.message.setText(text)

    def is_busy(self) -> bool:
        return self._busy

    def _update(self) -> None:
        self.runButton.setEnabled(self._available and not self._busy)
        self.cancelButton.setEnabled(self._busy)


__all__ = ["Checker", "RunBar", "TokenField", "problem_label", "say"]
