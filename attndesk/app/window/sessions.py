"""The window's session files and what it keeps between launches: File > Open session… / Save
session… (a session is a copy of the state), and the last session, geometry and dock layout in
the settings."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray
from PySide6.QtWidgets import QFileDialog, QMainWindow

from attndesk.errors import ConfigError
from attndesk.session.file import Session, SessionError, load_session, parse_session, save_session, session_json
from attndesk.session.state import AppState, ModeId
from attndesk.session.status import StatusModel

from ..settings import app_settings

STATE_VERSION = 1


class SessionFiles:
    """Reads and writes ``state`` for ``window``: a session's mode is checked by ``admit`` first
    (the mode as this window can use it; ConfigError when it cannot be); the status line says how
    it went."""

    def __init__(
        self, window: QMainWindow, state: AppState, admit: Callable[[ModeId], ModeId], status: StatusModel
    ) -> None:
        self._window, self._state, self._admit, self._status = window, state, admit, status

    def session(self) -> AppState:
        """A copy of the state (what a session file holds)."""
        return AppState.model_validate(self._state.model_dump())

    def apply_session(self, session: Session) -> None:
        """Assign a loaded session; SessionError if its mode cannot be used here, and then nothing
        has changed."""
        state = session.state
        try:
            mode = self._admit(state.mode)
        except ConfigError as exc:
            what = "model folder" if state.mode.path is not None else "model"
            raise SessionError(f"the session's {what} cannot be used: {exc}") from None
        if mode != state.mode:
            state.mode = mode
        self._state.assign(state)
        for notice in session.notices:
            self._status.say(notice)

    def save_session_to(self, path: str | os.PathLike) -> Path:
        """Save the current state; raises SessionError with a readable reason."""
        return save_session(self._state, path)

    def load_session_from(self, path: str | os.PathLike) -> Session:
        """Load and apply a session file; on any problem raise SessionError and change nothing."""
        session = load_session(path)
        self.apply_session(session)
        return session

    def open_session_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self._window, "Open session", "", "attndesk sessions (*.json);;All files (*)"
        )
        if path:
            self._report(lambda: self.load_session_from(path), f"opened session {Path(path).name}", "not loaded")

    def save_session_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self._window, "Save session", "attndesk-session.json", "attndesk sessions (*.json)"
        )
        if path:
            self._report(lambda: self.save_session_to(path), f"saved session {Path(path).name}", "not saved")

    def _report(self, act: Callable[[], object], done: str, failed: str) -> None:
        try:
            act()
        except SessionError as exc:
            self._status.fail(f"session {failed}: {exc}")
        else:
            self._status.say(done)

    def restore_settings(self) -> None:
        """The last geometry, dock layout and session (one status line when it cannot be used)."""
        settings, window = app_settings(), self._window
        geometry, layout = settings.value("window/geometry"), settings.value("window/state")
        if isinstance(geometry, QByteArray):
            window.restoreGeometry(geometry)
        if isinstance(layout, QByteArray):
            window.restoreState(layout, STATE_VERSION)
        last = settings.value("session/last")
        if isinstance(last, str) and last:
            try:
                self.apply_session(parse_session(last))
            except SessionError as exc:
                self._status.fail(f"the last session could not be restored: {exc}")

    def save_settings(self) -> None:
        """The geometry, dock layout and the state as the last session (when it is a valid one)."""
        settings, window = app_settings(), self._window
        settings.setValue("window/geometry", window.saveGeometry())
        settings.setValue("window/state", window.saveState(STATE_VERSION))
        try:
            self._state.config.validate()
        except (ConfigError, TypeError):
            pass  # keep the last good session rather than one that cannot be loaded
        else:
            settings.setValue("session/last", json.dumps(session_json(self._state)))
        settings.sync()
