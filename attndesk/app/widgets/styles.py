"""Style sheets applied only when they change.

``setStyleSheet`` re-polishes the widget (and its children) and queues a relayout and repaint
even when the sheet is the same: called on every status update, hover or parameter change, such
calls added up to 100-170 ms of GUI-thread work in one event in the soak (the limit is 100 ms).
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

ERROR_COLOR = "#b00020"  # what went wrong: messages, the border of the control they name
ERROR_STYLE = f"color: {ERROR_COLOR};"
NOTE_STYLE = "color: #555;"  # a quiet note beside a control


def restyle(widget: QWidget, sheet: str) -> None:
    """Give ``widget`` the style sheet ``sheet`` unless it has it already."""
    if widget.styleSheet() != sheet:
        widget.setStyleSheet(sheet)
