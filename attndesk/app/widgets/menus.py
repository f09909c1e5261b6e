"""The menu bar as named menus with named sections, so modes add their actions by name.

``MenuRegistry(menu_bar)`` creates the menus in the order they are declared. A menu's layout is
a list of groups of sections; groups are separated by a line, sections of one group are not.
``add("file", action, "model")`` puts an action into the File menu's "model" section, after
what that section holds already. Nobody has to find a menu through an action's associated
objects again.
"""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QMenuBar


class MenuRegistry:
    def __init__(self, menu_bar: QMenuBar) -> None:
        self._bar = menu_bar
        self._menus: dict[str, QMenu] = {}
        self._layout: dict[str, list[tuple[str, ...]]] = {}
        self._actions: dict[tuple[str, str], list[QAction]] = {}
        self._separators: dict[tuple[str, tuple[str, ...]], QAction] = {}

    def declare(self, key: str, title: str, groups: list[tuple[str, ...]]) -> QMenu:
        """A new menu ``key`` titled ``title`` with its sections, e.g. [("text", "session"), ("quit",)]."""
        menu = self._bar.addMenu(title)
        menu.setObjectName(f"{key}Menu")
        self._menus[key] = menu
        self._layout[key] = [tuple(group) for group in groups]
        return menu

    def menu(self, key: str) -> QMenu:
        return self._menus[key]

    def add(self, key: str, action: QAction, section: str) -> None:
        """Add ``action`` at the end of ``section`` of menu ``key`` (a KeyError names an unknown one)."""
        if not any(section in group for group in self._layout[key]):
            raise KeyError(f"menu {key!r} has no section {section!r}")
        self._actions.setdefault((key, section), []).append(action)
        self._rebuild(key)

    def _separator(self, key: str, group: tuple[str, ...]) -> QAction:
        """One separator per group, kept for the menu's life."""
        if (key, group) not in self._separators:
            separator = QAction(self._menus[key])
            separator.setSeparator(True)
            self._separators[(key, group)] = separator
        return self._separators[(key, group)]

    def actions(self, key: str) -> list[QAction]:
        """The menu's actions in order (separators left out)."""
        return [a for group in self._layout[key] for s in group for a in self._actions.get((key, s), [])]

    def find(self, name: str) -> QAction:
        """The action whose objectName is ``name``, in any menu (a KeyError names an unknown one)."""
        for (_key, _section), actions in self._actions.items():
            for action in actions:
                if action.objectName() == name:
                    return action
        raise KeyError(f"no menu action {name!r}")

    def _rebuild(self, key: str) -> None:
        menu = self._menus[key]
        for action in menu.actions():  # removed, never deleted (QMenu.clear deletes what it owns)
            menu.removeAction(action)
        first = True
        for group in self._layout[key]:
            actions = [a for s in group for a in self._actions.get((key, s), [])]
            if not actions:
                continue
            if not first:
                menu.addAction(self._separator(key, group))
            first = False
            for action in actions:
                menu.addAction(action)
