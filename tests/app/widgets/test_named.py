"""``named``: a widget's object name, Qt properties and signal connections set after construction,
as PySide6's constructor keywords do, with the widget's own type."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QSplitter

from attndesk.app.widgets.named import named


def test_properties_and_signals_as_the_constructors_keywords(qapp):
    label = named(QLabel("x"), "title", wordWrap=True, alignment=Qt.AlignmentFlag.AlignCenter)
    same = QLabel("x", objectName="title", wordWrap=True, alignment=Qt.AlignmentFlag.AlignCenter)
    assert (label.objectName(), label.wordWrap(), label.alignment()) == (
        same.objectName(),
        same.wordWrap(),
        same.alignment(),
    )
    clicks: list[bool] = []
    button = named(QPushButton("go"), "go", checkable=True, clicked=lambda checked: clicks.append(checked))
    button.click()
    assert button.objectName() == "go" and button.isCheckable() and clicks == [True]
    splitter = named(QSplitter(Qt.Orientation.Vertical), "", childrenCollapsible=False)
    assert splitter.objectName() == "" and not splitter.childrenCollapsible()
    for widget in (label, same, button, splitter):
        widget.deleteLater()


def test_an_unknown_keyword_is_refused_as_by_the_constructor(qapp):
    label = QLabel()
    with pytest.raises(TypeError, match="no Qt property or signal 'wordwrap'"):
        named(label, "x", wordwrap=True)
    with pytest.raises(TypeError, match="wordWrap cannot be set"):
        named(label, "x", wordWrap=object())
    label.deleteLater()
