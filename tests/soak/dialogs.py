"""Dialogs: file dialogs answered from the sandbox's pool, and modal windows and popups answered
the way a user would (a few random settings, then accept, cancel, Esc or the close button).

``FileDialogs`` replaces QFileDialog's static getters (what attndesk calls) while installed; a
QFileDialog *instance* (``exec()``, ``open()`` or ``show()``) is answered by ``Answerer`` like any
other dialog, with a path from the same pool.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QDockWidget,
    QFileDialog,
    QLineEdit,
    QMenu,
    QMessageBox,
    QWidget,
    QWidgetAction,
)

from . import gestures as g
from .actions import Hands
from .controls import discover
from .sandbox import PoolPath, Sandbox, choose

_STATIC = (
    "getOpenFileName",
    "getOpenFileNames",
    "getSaveFileName",
    "getExistingDirectory",
    "getOpenFileUrl",
    "getOpenFileUrls",
    "getSaveFileUrl",
    "getExistingDirectoryUrl",
)


def _arg(args: tuple, kwargs: dict, index: int, name: str) -> str:
    value = args[index] if len(args) > index else kwargs.get(name, "")
    return value if isinstance(value, str) else ""


class FileDialogs:
    """While installed, QFileDialog.get*() return a pool path chosen with ``rng()``; each answer is
    reported to ``log(text)``. ``force(path)`` makes the next answer ``path`` (the final checks)."""

    def __init__(
        self,
        sandbox: Sandbox,
        rng: Callable[[], random.Random],
        log: Callable[[str], None],
        answered: Callable[[str], None] | None = None,
    ) -> None:
        self.sandbox, self._rng, self._log = sandbox, rng, log
        self._answered = answered or (lambda _path: None)
        self._saved: dict[str, object] = {}
        self._forced: list[str] = []
        self.calls = 0

    def install(self) -> None:
        """Idempotent: a real (blocking) file dialog must never open during a soak."""
        if self._saved:
            return
        for name in _STATIC:
            self._saved[name] = QFileDialog.__dict__[name]
            setattr(QFileDialog, name, staticmethod(self._static(name)))

    def uninstall(self) -> None:
        for name, original in self._saved.items():
            setattr(QFileDialog, name, original)
        self._saved.clear()

    def force(self, path: str) -> None:
        self._forced.append(path)

    def clear_forced(self) -> None:
        self._forced.clear()

    def choices(self, kind: str, caption: str, filters: str) -> list[PoolPath]:
        if kind == "dir":
            return self.sandbox.dir_choices(caption)
        if kind == "save":
            return self.sandbox.save_choices(caption, filters)
        return self.sandbox.open_choices(caption, filters)

    def answer(self, kind: str, caption: str, filters: str) -> str:
        self.calls += 1
        if self._forced:
            path = self._forced.pop(0)
            self._log(f"file dialog {caption!r}: forced {self.sandbox.relative(path)}")
        else:
            picked = choose(self._rng(), self.choices(kind, caption, filters))
            path = picked.path
            self._log(f"file dialog {caption!r} ({kind}): {picked.label} {self.sandbox.relative(path)}")
        self._answered(path)
        return path

    def _static(self, name: str):
        kind = "dir" if "Directory" in name else "save" if "Save" in name else "open"
        many, url = name.endswith("s"), "Url" in name

        def getter(*args, **kwargs):
            caption = _arg(args, kwargs, 1, "caption")
            filters = _arg(args, kwargs, 3, "filter")
            path = self.answer(kind, caption, filters)
            value = QUrl.fromLocalFile(path) if (url and path) else (QUrl() if url else path)
            if kind == "dir":
                return value
            if many:
                return ([value] if path else []), ""
            return value, (filters.split(";;")[0] if path else "")

        return getter


class Answerer:
    """Acts on whatever holds the user's attention: a popup menu, a modal dialog, a file dialog."""

    def __init__(self, hands: Hands, files: FileDialogs, log: Callable[[str], None]) -> None:
        self.hands, self.files, self._log = hands, files, log
        self._budget: dict[int, int] = {}  # id(dialog) -> settings still to change before closing

    @staticmethod
    def pending(main: QWidget | None) -> QWidget | None:
        """The popup or modal window a user would have to deal with first, or None."""
        popup = QApplication.activePopupWidget()
        if popup is not None:
            return popup
        modal = QApplication.activeModalWidget()
        if modal is not None:
            return modal
        for w in QApplication.topLevelWidgets():
            if w.isVisible() and isinstance(w, QFileDialog):  # non-modal file dialogs wait for a name
                return w
        return None

    def act(self, widget: QWidget, rng: random.Random) -> str:
        if isinstance(widget, QMenu):
            return self._menu(widget, rng)
        if widget.windowType() == Qt.WindowType.Popup:  # e.g. a combo box's open list
            g.key(widget, Qt.Key.Key_Escape)
            return f"close popup {type(widget).__name__}"
        if isinstance(widget, QFileDialog):
            return self._file_dialog(widget, rng)
        if isinstance(widget, QMessageBox):
            return self._message_box(widget, rng)
        return self._dialog(widget, rng)

    def _menu(self, menu: QMenu, rng) -> str:
        """Keys, as a user: Esc, or highlight an item and press Return (Right opens a submenu), so
        both ``triggered`` handlers and code reading ``menu.exec()``'s answer see the choice."""
        actions = [
            a
            for a in menu.actions()
            if a.isEnabled() and a.isVisible() and not a.isSeparator() and not isinstance(a, QWidgetAction)
        ]
        if not actions or rng.random() < 0.2:
            g.key(menu, Qt.Key.Key_Escape)
            return "Esc on menu"
        action = rng.choice(actions)
        menu.setActiveAction(action)
        text = action.text().replace("&", "")
        if action.menu() is not None:
            g.key(menu, Qt.Key.Key_Right)
            return f"open submenu {text!r}"
        g.key(menu, Qt.Key.Key_Return)
        return f"menu item {text!r}"

    def _file_dialog(self, dialog: QFileDialog, rng) -> str:
        mode = dialog.fileMode()
        kind = (
            "dir"
            if mode == QFileDialog.FileMode.Directory
            else "save"
            if dialog.acceptMode() == QFileDialog.AcceptMode.AcceptSave
            else "open"
        )
        key = id(dialog)
        self._budget[key] = self._budget.get(key, 0) + 1
        if self._budget[key] > 2:  # a path it keeps refusing: the user gives up
            dialog.reject()
            return "file dialog: cancel (the answer was refused twice)"
        path = self.files.answer(kind, dialog.windowTitle(), ";;".join(dialog.nameFilters()))
        if not path:
            dialog.reject()
            return "file dialog: cancel"
        # typed into its name field, as a user would (selectFile waits for the folder to be listed)
        edit = dialog.findChild(QLineEdit, "fileNameEdit")
        if edit is not None:
            edit.setText(path)
        else:
            dialog.selectFile(path)
        dialog.accept()
        return f"file dialog: accept {self.files.sandbox.relative(path)}"

    def _message_box(self, box: QMessageBox, rng) -> str:
        buttons = [b for b in box.buttons() if b.isVisible() and b.isEnabled()]
        if not buttons:
            box.close()
            return "close message box"
        button = rng.choice(buttons)
        g.click(button)
        return f"message box {box.text()[:60]!r}: {button.text()!r}"

    def _dialog(self, dialog: QWidget, rng) -> str:
        """A few random settings, then accept, cancel, Esc or close (a dialog still open after
        that gets Esc, then close())."""
        key = id(dialog)
        if key not in self._budget:
            self._budget[key] = rng.randint(0, 6)
        left = self._budget[key]
        self._budget[key] = left - 1
        controls = [c for c in discover(dialog).controls if c.usable()]
        if left > 0 and controls:
            control = rng.choice(controls)
            return f"in {dialog.windowTitle()!r}: {control.path}: {self.hands.operate(control, rng)}"
        if left < -3:
            dialog.close()
            return f"close {dialog.windowTitle()!r} (still open)"
        if left < -1 and isinstance(dialog, QDialog):
            dialog.reject()
            return f"reject {dialog.windowTitle()!r} (still open)"
        return self._finish(dialog, rng)

    def _finish(self, dialog: QWidget, rng) -> str:
        box = dialog.findChild(QDialogButtonBox)
        buttons = [b for b in (box.buttons() if box else []) if b.isVisible() and b.isEnabled()]
        accept = [
            b
            for b in buttons
            if box.buttonRole(b)
            in (
                QDialogButtonBox.ButtonRole.AcceptRole,
                QDialogButtonBox.ButtonRole.YesRole,
                QDialogButtonBox.ButtonRole.ApplyRole,
            )
        ]
        r = rng.random()
        if accept and r < 0.6:
            button = rng.choice(accept)
            g.click(button)
            return f"{dialog.windowTitle()!r}: {button.text()!r}"
        if r < 0.8 and not isinstance(dialog, QDockWidget):
            g.key(dialog, Qt.Key.Key_Escape)
            return f"{dialog.windowTitle()!r}: Esc"
        if buttons and r < 0.9:
            button = rng.choice(buttons)
            g.click(button)
            return f"{dialog.windowTitle()!r}: {button.text()!r}"
        dialog.close()
        return f"{dialog.windowTitle()!r}: close"
