"""Helpers shared by the tests that drive the real MainWindow."""

from __future__ import annotations

import gc

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QObject

from attndesk.app.window.main_window import app_settings


def dispose(w) -> None:
    """Close and really delete a window now (deleteLater alone waits for an event loop that
    pytest-qt never runs, and Qt objects left for interpreter shutdown can crash it)."""
    w.close()
    w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()


@pytest.fixture(autouse=True)
def fresh_settings():
    """Each test starts without a saved session or layout (conftest keeps them in a temp folder)."""
    settings = app_settings()
    settings.clear()
    settings.sync()
    yield
    settings.clear()
    settings.sync()


def open_tab(w, view) -> None:
    """Bring the tab showing ``view`` to the front: its page, which for a tab that can be off is the
    stack holding the view beside its reason (``MainWindow.tab_page``)."""
    from attndesk.app.tabs.registry import TABS

    page = next((w.tab_page(t.id) for t in TABS if w.tab_widget(t.id) is view), view)
    w.viewTabs.setCurrentWidget(page)


def shown_window(qtbot, size: tuple[int, int] = (1300, 850), timeout_ms: int = 120000):
    """A fresh MainWindow (no restored session) of ``size``, shown, with its first result drawn."""
    from attndesk.app.window.main_window import MainWindow

    w = MainWindow(restore=False)
    w.resize(*size)
    w.show()
    with qtbot.waitSignal(w.resultDisplayed, timeout=timeout_ms):
        pass  # the first result of the sample sentence
    return w


class EventCounter(QObject):
    """An event filter counting events of ``kind`` (to receivers of ``receiver_type``, if given)."""

    def __init__(self, kind: QEvent.Type, receiver_type: type | None = None) -> None:
        super().__init__()
        self.kind, self.receiver_type, self.count = kind, receiver_type, 0

    def eventFilter(self, watched, event) -> bool:
        if event.type() == self.kind and (self.receiver_type is None or isinstance(watched, self.receiver_type)):
            self.count += 1
        return False
