"""The window's menus and its own actions: the File, Run and View menus' layout (``MENU_LAYOUT``:
their sections, in order) and the actions the window itself answers (sessions, export, bundle,
quit, recompute, cancel, the docks' toggles, reset layout). Modes add theirs through the registry."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget

from attndesk.app.widgets.named import named

from ..widgets.menus import MenuRegistry

MENU_LAYOUT: dict[str, tuple[str, list[tuple[str, ...]]]] = {
    "file": ("&File", [("text", "session"), ("model",), ("export",), ("quit",)]),
    "run": ("&Run", [("run",)]),
    "view": ("&View", [("docks",), ("layout",)]),
}


class WindowActions:
    """Declares the menus in ``menus`` and adds the window's actions (owned by ``owner``) and the
    ``docks``' toggles; the window connects each action to what it does."""

    def __init__(self, owner: QObject, menus: MenuRegistry, docks: list[QDockWidget]) -> None:
        self._owner, self._menus = owner, menus
        for key, (title, groups) in MENU_LAYOUT.items():
            menus.declare(key, title, groups)
        self.viewMenu = menus.menu("view")
        self.openSessionAction = self._action(
            "&Open session…", "openSessionAction", "file", "session", QKeySequence.StandardKey.Open
        )
        self.saveSessionAction = self._action(
            "&Save session…", "saveSessionAction", "file", "session", QKeySequence.StandardKey.Save
        )
        self.exportAction = self._action("&Export heatmaps…", "exportAction", "file", "export", QKeySequence("Ctrl+E"))
        self.saveBundleAction = self._action("Save &bundle…", "saveBundleAction", "file", "export")
        self.saveBundleAction.setToolTip(
            "the result on screen and the session that made it as one reproducible .zip "
            "(attndesk reproduce computes it again)"
        )
        self.quitAction = self._action("&Quit", "quitAction", "file", "quit", QKeySequence.StandardKey.Quit)
        self.recomputeAction = self._action("&Recompute now", "recomputeAction", "run", "run", QKeySequence("F5"))
        self.cancelAction = self._action("&Cancel", "cancelAction", "run", "run", QKeySequence("Esc"))
        for dock in docks:
            menus.add("view", dock.toggleViewAction(), "docks")
        self.resetLayoutAction = self._action("Reset &layout", "resetLayoutAction", "view", "layout")

    def _action(self, text: str, name: str, menu: str, section: str, shortcut=None) -> QAction:
        action = named(QAction(text, self._owner), name)
        if shortcut is not None:
            action.setShortcut(shortcut)
        self._menus.add(menu, action, section)
        return action
