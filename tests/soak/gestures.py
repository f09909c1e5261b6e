"""What a user's hands do: clicks, drags, the wheel, keys, typing, pasting, context menus, drops.

Mouse events go through QTest (the window system path: the widget under the point gets them, as
with a real mouse); wheel, context-menu and drag-and-drop events are built and sent directly.
Scroll areas (text edits, item views, graphics views) receive mouse input on their viewport.
"""

from __future__ import annotations

import random

from PySide6.QtCore import QEvent, QEventLoop, QMimeData, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QContextMenuEvent, QDragEnterEvent, QDragMoveEvent, QDropEvent, QKeyEvent, QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QWidget

LEFT, RIGHT, MIDDLE = Qt.MouseButton.LeftButton, Qt.MouseButton.RightButton, Qt.MouseButton.MiddleButton
NONE = Qt.KeyboardModifier.NoModifier
CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


def pump(ms: int) -> None:
    """Run the event loop for ``ms`` ms. Not ``QTest.qWait``: PySide6's keeps the GIL while it
    waits, so every Python worker thread of the window crawls (measured: a counting thread ran at
    0.5% of its speed) and a wait for the window to settle ran to its limit."""
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def surface(widget: QWidget) -> QWidget:
    """Where mouse input for ``widget`` lands (a scroll area's viewport)."""
    return widget.viewport() if isinstance(widget, QAbstractScrollArea) else widget


def random_point(rng: random.Random, widget: QWidget) -> QPoint:
    w, h = max(1, widget.width()), max(1, widget.height())
    return QPoint(rng.randrange(w), rng.randrange(h))


def center(widget: QWidget) -> QPoint:
    return QPoint(widget.width() // 2, widget.height() // 2)


def click(widget: QWidget, pos: QPoint | None = None, button=LEFT, modifiers=NONE) -> None:
    QTest.mouseClick(widget, button, modifiers, center(widget) if pos is None else pos)


def double_click(widget: QWidget, pos: QPoint, button=LEFT, modifiers=NONE) -> None:
    """Press, release, double-click, release: what Qt sees from a real double click."""
    QTest.mousePress(widget, button, modifiers, pos)
    QTest.mouseRelease(widget, button, modifiers, pos)
    QTest.mouseDClick(widget, button, modifiers, pos)
    QTest.mouseRelease(widget, button, modifiers, pos)


def hover(widget: QWidget, points: list[QPoint]) -> None:
    for p in points:
        QTest.mouseMove(widget, p)


def drag(widget: QWidget, start: QPoint, end: QPoint, button=LEFT, modifiers=NONE, steps: int = 6) -> None:
    QTest.mousePress(widget, button, modifiers, start)
    for i in range(1, steps + 1):
        f = i / steps
        QTest.mouseMove(
            widget, QPoint(round(start.x() + (end.x() - start.x()) * f), round(start.y() + (end.y() - start.y()) * f))
        )
    QTest.mouseRelease(widget, button, modifiers, end)


def wheel(widget: QWidget, pos: QPoint, delta: int, modifiers=NONE) -> None:
    event = QWheelEvent(
        QPointF(pos),
        QPointF(widget.mapToGlobal(pos)),
        QPoint(),
        QPoint(0, delta),
        Qt.MouseButton.NoButton,
        modifiers,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def key(widget: QWidget, key_code, modifiers=NONE) -> None:
    QTest.keyClick(widget, key_code, modifiers)


def type_text(widget: QWidget, text: str) -> None:
    """Key presses carrying each character (QTest.keyClicks asserts on non-ASCII characters)."""
    widget.setFocus(Qt.FocusReason.OtherFocusReason)
    for ch in text:
        if ch == "\n":
            QTest.keyClick(widget, Qt.Key.Key_Return)
            continue
        code = (
            ord(ch.upper())
            if ch.isascii() and ch.isalnum()
            else (Qt.Key.Key_Space.value if ch == " " else Qt.Key.Key_unknown.value)
        )
        for kind in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease):
            QApplication.sendEvent(widget, QKeyEvent(kind, code, NONE, ch))


def paste(widget: QWidget, text: str, replace: bool = True) -> None:
    """Put ``text`` on the clipboard and paste it (Ctrl+A first to replace)."""
    widget.setFocus(Qt.FocusReason.OtherFocusReason)
    QApplication.clipboard().setText(text)
    if replace:
        QTest.keyClick(widget, Qt.Key.Key_A, CTRL)
    QTest.keyClick(widget, Qt.Key.Key_V, CTRL)


def context_menu(widget: QWidget, pos: QPoint) -> None:
    event = QContextMenuEvent(QContextMenuEvent.Reason.Mouse, pos, widget.mapToGlobal(pos), NONE)
    QApplication.sendEvent(widget, event)


def drop_files(widget: QWidget, paths: list[str], pos: QPoint) -> bool:
    """Drag ``paths`` over ``widget`` and drop them; False if the widget refused the drag."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(p) for p in paths])
    action = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(pos, action, mime, LEFT, NONE)
    QApplication.sendEvent(widget, enter)
    if not enter.isAccepted():
        return False
    move = QDragMoveEvent(pos, action, mime, LEFT, NONE)
    QApplication.sendEvent(widget, move)
    drop = QDropEvent(QPointF(pos), action, mime, LEFT, NONE)
    QApplication.sendEvent(widget, drop)
    return True
