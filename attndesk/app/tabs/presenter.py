"""The one base of every tab presenter: it binds one view to the window's state and the published
result. A presenter that draws each result implements ``show(shown)``: the base refreshes the view
when its tab is on screen and the result changed, once per result (``key``). A presenter that
computes on request instead (a Run button: ``tabs/interp.py``'s ``InterpPresenter``, the Train,
Generate and timing tabs) leaves ``show`` alone and answers its view's signals.

What a view keeps (its derived copies: stage images, statistics, encodings, pictures) it declares
itself: ``view.holdings()`` (the ``Holds`` protocol of ``app/widgets/holdings.py``). The base holds it
in the window's memory ledger as one holding per tab, asked when the view is drawn and again when
the tab is left: protected while the tab is on screen, a candidate to let go once it is hidden.
Let go, the tab forgets its result (``release``) and draws it again when it is shown next."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from PySide6.QtCore import QObject, QTimer

from attndesk.session.ledger import Holding
from attndesk.session.results import Shown
from attndesk.session.state import AppState

from ..jobs.compute import ComputeController
from ..widgets.holdings import Holds


class TabPresenter(QObject):
    """Subclasses set ``tab_id``; one that draws each result implements ``show(shown)``, and
    ``key(shown)`` says when a result is new for the view (default: each presentation; statistics
    of a whole run use its ``run_id``)."""

    tab_id = ""
    MEASURE_DELAY_MS = 500  # views draw in side jobs: ask what they hold once they have

    def __init__(self, state: AppState, compute: ComputeController, view: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state, self.compute, self.view = state, compute, view
        self._shown_key: Hashable = None
        self._held: Holding | None = None
        self._retried: Hashable = None  # the result whose drawing was asked again after a let-go
        self._measure = QTimer(self, singleShot=True, interval=self.MEASURE_DELAY_MS)
        self._measure.timeout.connect(self.hold_copies)
        compute.published.connect(self._on_published)
        state.view.events.tab.connect(self._on_tab)

    def key(self, shown: Shown) -> Hashable:
        return shown.shown_id

    def visible(self) -> bool:
        return self.state.view.tab == self.tab_id

    def refresh(self, force: bool = False) -> None:
        """Bring the view up to date with the result on screen (once per ``key``)."""
        shown = self.compute.shown()
        if shown is None or not self.visible() or not self.draws():
            return
        key = self.key(shown)
        if key == self._shown_key and not force:
            return
        self._shown_key = key
        self.show(shown)
        self._measure.start()

    def show(self, shown: Shown) -> None:
        """Draw ``shown`` in the view (a presenter that draws each result overrides it)."""

    def draws(self) -> bool:
        """Whether this presenter draws each result (``show``), or computes on request only."""
        return type(self).show is not TabPresenter.show

    def release(self) -> None:
        """Let go of an older result the view still holds (a new run came while the tab was hidden),
        so its memory is freed; the tab redraws when shown. Views with small content keep it."""

    def copies(self) -> list:
        """The arrays the view keeps now, as it declares them (what its holding counts)."""
        view: Holds = self.view
        return view.holdings()

    def hold_copies(self) -> None:
        """(Re)measure what the view keeps and hold it in the ledger: protected while on screen."""
        self._let_go_of_copies()
        parts = self.copies()
        if not parts or self.compute.shown() is None:
            return
        cell: list[Holding] = []

        def release(why: str) -> None:
            if cell and cell[0] is self._held:
                self._held = None
                shown = self.compute.shown()
                drawing = self._shown_key if shown is not None and self._shown_key == self.key(shown) else None
                self.release()  # also cancels the tab's side jobs, those for the result on screen included
                self._shown_key = None  # drawn again with the next result, or when the tab is shown next
                # old copies let go while the tab on screen was already drawing the result on screen: its
                # job was cancelled with them, so it is asked again, once per result (a copy that cannot
                # fit beside what is protected is let go again, and then the tab waits for a new result)
                if drawing is not None and self.visible() and self._retried != drawing:
                    self._retried = drawing
                    self.refresh()

        # a view that keeps its (small) content has no release: counted, never let go
        releasable = type(self).release is not TabPresenter.release
        title = self.tab_id.replace("_", " ").replace("-", " ")
        cell.append(
            self.compute.ledger.hold(
                self.tab_id or type(self).__name__,
                f"the {title} tab's copies",
                parts,
                release if releasable else None,
                protected=self.visible(),
                strict=False,
            )
        )
        self._held = cell[0]

    def _let_go_of_copies(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()

    def _on_published(self, shown: Shown) -> None:
        if shown.new_run and not self.visible():
            self.release()
            self._shown_key = None
            self._let_go_of_copies()
        self.refresh()

    def _on_tab(self, _tab: str) -> None:
        if self._held is not None and self._held.protected != self.visible():
            self.hold_copies()  # left (no longer protected) or shown again (protected)
        self.refresh()
