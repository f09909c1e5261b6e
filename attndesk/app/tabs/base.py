"""What every tab presenter shares: it refreshes its view when its tab is on screen and the
result changed, once per result (``key``), and it follows the shown head."""

from __future__ import annotations

from typing import Hashable

from PySide6.QtCore import QObject

from ..jobs.compute import ComputeController
from ..results import Shown
from ..state import AppState


class TabPresenter(QObject):
    """Subclasses set ``tab_id`` and implement ``show(shown)``; ``key(shown)`` says when a result is
    new for the view (default: each presentation; statistics of a whole run use its ``run_id``)."""

    tab_id = ""

    def __init__(self, state: AppState, compute: ComputeController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state, self.compute = state, compute
        self._shown_key: Hashable = None
        compute.published.connect(self._on_published)
        state.view.events.tab.connect(self._on_tab)

    def key(self, shown: Shown) -> Hashable:
        return shown.shown_id

    def visible(self) -> bool:
        return self.state.view.tab == self.tab_id

    def refresh(self, force: bool = False) -> None:
        """Bring the view up to date with the result on screen (once per ``key``)."""
        shown = self.compute.shown()
        if shown is None or not self.visible():
            return
        key = self.key(shown)
        if key == self._shown_key and not force:
            return
        self._shown_key = key
        self.show(shown)

    def show(self, shown: Shown) -> None:  # noqa: A003 - the presenter's one job
        raise NotImplementedError

    def release(self) -> None:
        """Let go of an older result the view still holds (a new run came while the tab was hidden),
        so its memory is freed; the tab redraws when shown. Views with small content keep it."""

    def _on_published(self, shown: Shown) -> None:
        if shown.new_run and not self.visible():
            self.release()
            self._shown_key = None
        self.refresh()

    def _on_tab(self, _tab: str) -> None:
        self.refresh()
