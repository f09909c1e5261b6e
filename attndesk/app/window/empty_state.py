"""The page a tab shows when it does not apply to the model or mode on screen: one sentence saying
why, and one button doing what makes it apply (switch the mode, open a model folder, …).

Every tab that can be off declares it once (``TabSpec.unavailable`` in ``app/tabs/registry.py``
returns an ``EmptyState``); the window puts its view and this page in one stack and shows this page,
with the declared sentence and button, while the tab does not apply. A view never greys its own
form for that reason.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from attndesk.app.widgets.named import named

MAX_TEXT_WIDTH = 560  # a sentence a person reads at a glance: a short column, not the tab's width


class EmptyStatePage(QWidget):
    """API: ``set_state(sentence, action)`` (``action`` "" hides the button); signal ``actionClicked()``.
    Children: ``label`` (objectName ``<name>Empty``) and ``button`` (``<name>EmptyAction``)."""

    actionClicked = Signal()

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"{name}EmptyPage")
        self.label = named(QLabel(""), f"{name}Empty")
        self.label.setWordWrap(True)
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setMaximumWidth(MAX_TEXT_WIDTH)
        # expanding up to MAX_TEXT_WIDTH: a wrapped label centred by its alignment alone takes its
        # one-line hint's width and a single line's height, cutting the sentence
        self.label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.button = named(QPushButton(""), f"{name}EmptyAction")
        self.button.clicked.connect(self.actionClicked)
        self.button.hide()
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.label, 4)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addLayout(row)
        layout.addSpacing(8)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(1)

    def set_state(self, sentence: str, action: str = "") -> None:
        self.label.setText(sentence)
        self.button.setText(action)
        self.button.setVisible(bool(action))

    def sentence(self) -> str:
        return self.label.text()

    def action(self) -> str:
        """The button's text, or "" when there is none."""
        return self.button.text() if not self.button.isHidden() else ""
