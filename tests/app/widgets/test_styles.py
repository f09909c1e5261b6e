"""restyle: a style sheet is applied only when it changes (Qt re-polishes on every call)."""

from __future__ import annotations

from app_helpers import EventCounter
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication, QLabel

from attndesk.app.widgets.styles import restyle


def test_the_same_style_sheet_is_not_applied_again(qtbot):
    label = QLabel("x")
    qtbot.addWidget(label)
    label.show()
    changes = EventCounter(QEvent.Type.StyleChange)
    label.installEventFilter(changes)
    label.setStyleSheet("color: #888;")
    label.setStyleSheet("color: #888;")
    assert changes.count == 2  # Qt itself re-polishes for an identical sheet
    for _ in range(5):
        restyle(label, "color: #888;")
    QApplication.processEvents()
    assert changes.count == 2
    restyle(label, "")
    assert changes.count == 3 and label.styleSheet() == ""
