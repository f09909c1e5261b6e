"""Find what a user can operate, generically: walk the widget tree and the menus.

Nothing here names a widget of attndesk: controls are classified by their Qt type, so the soak
reaches whatever a rebuilt window shows. The order is the tree's (children in creation order), so
the same window state always gives the same list, which keeps a seed's actions reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QGraphicsView,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QSplitterHandle,
    QTabBar,
    QTextEdit,
    QWidget,
    QWidgetAction,
)

# the kinds of control the soak operates (see _TYPES)
KINDS = ("tabs", "check", "button", "combo", "spin", "slider", "line", "text", "table", "graphics", "splitter")


# (Qt type, kind), most specific first: a QTabBar before any widget, a checkable button is a "check"
_TYPES = (
    (QTabBar, "tabs"),
    (QAbstractButton, "button"),
    (QComboBox, "combo"),
    (QAbstractSpinBox, "spin"),
    (QAbstractSlider, "slider"),
    (QLineEdit, "line"),
    ((QPlainTextEdit, QTextEdit), "text"),
    (QAbstractItemView, "table"),
    (QGraphicsView, "graphics"),
    (QSplitterHandle, "splitter"),
)


def kind_of(widget: QWidget) -> str | None:
    for types, kind in _TYPES:
        if isinstance(widget, types):
            return "check" if kind == "button" and widget.isCheckable() else kind
    return None


# composite controls whose inner widgets (a spin box's line edit, a view's viewport) are theirs
_OPAQUE = (QComboBox, QAbstractSpinBox, QAbstractItemView, QGraphicsView, QPlainTextEdit, QTextEdit)


@dataclass(frozen=True)
class Control:
    kind: str
    widget: QWidget
    path: str  # objectName or Class#n at each level: stable across runs, readable in a log

    def usable(self) -> bool:
        try:
            return self.widget.isVisible() and self.widget.isEnabled()
        except RuntimeError:  # deleted since discovery
            return False


@dataclass
class Discovery:
    controls: list[Control] = field(default_factory=list)
    names: dict[str, QWidget] = field(default_factory=dict)  # objectName -> visible widget
    drop_targets: list[Control] = field(default_factory=list)  # widgets that accept dropped files

    def of_kind(self, kind: str) -> list[Control]:
        return [c for c in self.controls if c.kind == kind]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.of_kind(kind)) for kind in KINDS}


def _step_name(widget: QWidget, index: int) -> str:
    name = widget.objectName()
    # Qt's own internals (qt_tabwidget_tabbar, qt_scrollarea_viewport) are named but not unique
    return name if name and not name.startswith("qt_") else f"{type(widget).__name__}#{index}"


def discover(root: QWidget, *, visible_only: bool = True) -> Discovery:
    """Every control under ``root`` (itself included), depth first in creation order."""
    found = Discovery()

    def walk(widget: QWidget, path: str) -> None:
        if visible_only and not widget.isVisible():
            return  # nothing under a hidden widget can be operated
        if widget.objectName():
            found.names.setdefault(widget.objectName(), widget)
        kind = kind_of(widget)
        if kind is not None:
            found.controls.append(Control(kind, widget, path))
        if widget.acceptDrops() and not isinstance(widget, _OPAQUE):
            found.drop_targets.append(Control("drop", widget, path))
        if isinstance(widget, _OPAQUE):
            return
        seen: dict[str, int] = {}
        for child in widget.children():
            if isinstance(child, QWidget) and not child.isWindow():
                key = type(child).__name__
                seen[key] = seen.get(key, -1) + 1
                walk(child, f"{path}/{_step_name(child, seen[key])}")

    walk(root, _step_name(root, 0))
    return found


def menu_actions(root: QWidget) -> list[tuple[str, QAction]]:
    """(path, action) of every leaf action in ``root``'s menu bar, e.g. "File/Open session…"."""
    bar = getattr(root, "menuBar", None)
    if bar is None:
        return []
    out: list[tuple[str, QAction]] = []

    def walk(actions, prefix: str) -> None:
        for action in actions:
            if action.isSeparator() or isinstance(action, QWidgetAction):
                continue
            text = action.text().replace("&", "")
            if action.menu() is not None:
                walk(action.menu().actions(), f"{prefix}{text}/")
            else:
                out.append((f"{prefix}{text}", action))

    walk(bar().actions(), "")
    return out


def top_dialogs(main: QWidget | None) -> list[QWidget]:
    """Visible top-level windows other than ``main`` (dialogs, floating docks, tool windows)."""
    out = []
    for w in QApplication.topLevelWidgets():
        if w is main or not w.isVisible() or isinstance(w, QMenu):
            continue
        if w.windowType() in (Qt.WindowType.Popup, Qt.WindowType.ToolTip, Qt.WindowType.SplashScreen):
            continue
        out.append(w)
    return sorted(out, key=lambda w: (type(w).__name__, w.objectName(), w.windowTitle()))
