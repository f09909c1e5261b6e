"""The window's status bar: the status line (``StatusModel``'s message, red on an error), the
progress bar and the Cancel button of a running computation, and the widgets modes add."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QStatusBar, QWidget

from attndesk.app.widgets.named import named
from attndesk.app.widgets.styles import ERROR_STYLE
from attndesk.session.status import StatusModel

from ..widgets.styles import restyle


class StatusLine:
    """Builds its widgets into ``bar`` and draws ``status`` there on every change (``show``)."""

    def __init__(self, bar: QStatusBar, status: StatusModel) -> None:
        self._bar, self._status = bar, status
        self.statusLabel = named(QLabel("ready"), "statusLabel")
        # a long status line (a long run's plan) is cut, whole in the tooltip: never widens the window
        self.statusLabel.setMinimumWidth(80)
        self.progressBar = named(QProgressBar(), "progressBar")
        self.progressBar.setMaximumWidth(180)
        self.progressBar.setRange(0, 1000)
        self.progressBar.setTextVisible(False)
        self.progressBar.hide()
        self.cancelButton = named(QPushButton("Cancel"), "cancelButton")
        self.cancelButton.setToolTip("Stop waiting for the running computation (Esc)")
        self.cancelButton.hide()
        bar.addWidget(self.statusLabel, 1)
        bar.addPermanentWidget(self.progressBar)
        bar.addPermanentWidget(self.cancelButton)
        self._added = 1  # permanent widgets the modes added after the status line

    def add_widget(self, widget: QWidget) -> None:
        """A mode's own permanent widget, after the status line and those added before it."""
        self._bar.insertPermanentWidget(self._added, widget)
        self._added += 1

    def show(self) -> None:
        """The status line, colour and progress; each widget is touched only when its value changes
        (progress arrives many times a second: a style sheet re-polishes the label, and a progress
        bar repaints synchronously, in the same event)."""
        status, label, bar = self._status, self.statusLabel, self.progressBar
        if label.text() != status.message:
            label.setText(status.message)
            label.setToolTip(status.message)
        restyle(label, ERROR_STYLE if status.error else "")
        if status.busy:
            top = 0 if status.progress is None else 100  # indeterminate until the first progress report
            if bar.maximum() != top:
                bar.setRange(0, top)
            if status.progress is not None and bar.value() != int(status.progress * 100):
                bar.setValue(int(status.progress * 100))
        bar.setVisible(status.busy)
        self.cancelButton.setVisible(status.busy)
