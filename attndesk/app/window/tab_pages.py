"""The window's tabs, all from the tab registry (``tabs/registry.py``): the view tabs (the central
``viewTabs``) and the timing dock's tabs (``timingTabs``), each tab's view and presenter, the empty
state of a tab that can be off, and which tabs the current mode and model serve."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QStackedWidget, QTabWidget, QWidget

from attndesk.app.widgets.named import named
from attndesk.session.state import HEATMAPS_TAB, ModeId

from ..modes.base import Assembly
from ..tabs import registry
from ..tabs.registry import TabSpec
from .empty_state import EmptyStatePage

TAB_PADDING = "QTabBar::tab { padding: 5px 3px; }"  # the style gives 12 px each side
TAB_FONT_SCALE = 0.93


def _scrolled(view: QWidget) -> QWidget:
    """A frameless scroll area around ``view``: a large form scrolls inside its page instead of raising
    the window's minimum size (the window fits 1000 x 700 with its docks, whatever the tabs hold)."""
    area = named(QScrollArea(), f"{view.objectName() or 'tab'}Scroll")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(view)
    return area


def fit_tabs(tabs: QTabWidget) -> None:
    """Every title on screen at once: tighter padding and a slightly smaller font, so a pretrained
    decoder's 16 tabs fit the 1280-pixel window beside its docks; narrower still, titles are elided
    (the tooltip names the tab) rather than hidden behind scroll arrows."""
    bar = tabs.tabBar()
    size = bar.font().pointSizeF() * TAB_FONT_SCALE  # a style sheet's polish resets a font set with setFont
    bar.setStyleSheet(f"QTabBar {{ font-size: {size:.2f}pt; }} {TAB_PADDING}")
    bar.setUsesScrollButtons(False)
    bar.setElideMode(Qt.TextElideMode.ElideRight)
    bar.setExpanding(False)


class EmptyStates:
    """The tabs that can be off: each one's stack of its view and its empty state (the sentence
    saying why it is off and the button that makes it apply), and which of the two shows."""

    def __init__(self, ui: Assembly) -> None:
        self._ui = ui
        self._stacks: dict[str, QStackedWidget] = {}  # tab id -> its stack

    def stack(self, tab: TabSpec, view: QWidget) -> QStackedWidget:
        """A tab that can be off: its view, or its empty state (``sync`` chooses)."""
        stack = named(QStackedWidget(), f"{tab.id}Page")
        off = EmptyStatePage(tab.id)
        off.actionClicked.connect(lambda t=tab: self._act(t))
        stack.addWidget(view)
        stack.addWidget(off)
        self._stacks[tab.id] = stack
        return stack

    def _act(self, tab: TabSpec) -> None:
        """The empty state's button: the action its tab's spec declares for the current state."""
        assert tab.unavailable is not None, "only a tab that can be off has an empty state"
        state = tab.unavailable(self._ui.state)
        if state is not None and state.act is not None:
            state.act(self._ui)

    def page(self, tab_id: str) -> EmptyStatePage | None:
        """The empty-state page of a tab that can be off (None for one that cannot)."""
        stack = self._stacks.get(tab_id)
        off = stack.widget(1) if stack is not None else None
        return off if isinstance(off, EmptyStatePage) else None

    def sync(self, *_args) -> None:
        """Each tab that can be off shows its view, or its empty state while it does not apply (a run
        may tell more: a loaded checkpoint without its LM head)."""
        for tab in registry.TABS:
            off, stack = self.page(tab.id), self._stacks.get(tab.id)
            if off is None or stack is None or tab.unavailable is None:
                continue
            state = tab.unavailable(self._ui.state)
            if state is not None:
                off.set_state(state.sentence, state.action if state.act is not None else "")
            stack.setCurrentIndex(0 if state is None else 1)


class WindowTabs:
    """Builds every registered tab's view into ``viewTabs`` (the registry's view tabs) and
    ``timingTabs`` (its dock tabs, after ``first``), then, once every view exists, the presenters."""

    def __init__(self, ui: Assembly, first: QWidget) -> None:
        self._ui = ui
        self.pages: dict[str, QWidget] = {}  # tab id -> its page in viewTabs (the view, or its stack)
        self.views: dict[str, QWidget] = {}  # tab id -> its view (view tabs and dock tabs)
        self.presenters: dict[str, QObject] = {}
        self.empty_states = EmptyStates(ui)
        self.viewTabs = named(QTabWidget(), "viewTabs")
        self.viewTabs.setDocumentMode(True)
        fit_tabs(self.viewTabs)
        for tab in registry.TABS:
            self.views[tab.id] = view = tab.view()
            shown = _scrolled(view) if tab.scroll else view
            page = shown if tab.unavailable is None else self.empty_states.stack(tab, shown)
            index = self.viewTabs.addTab(page, tab.title)
            self.viewTabs.setTabToolTip(index, tab.tooltip)
            self.pages[tab.id] = page
        self.timingTabs = named(QTabWidget(), "timingTabs")
        self.timingTabs.setDocumentMode(True)
        self.timingTabs.addTab(first, "Timing")
        for tab in registry.DOCK_TABS:
            self.views[tab.id] = view = tab.view()
            self.timingTabs.setTabToolTip(self.timingTabs.addTab(view, tab.title), tab.tooltip)

    def build_presenters(self) -> None:
        """Each tab's presenter, once every view exists (a presenter may look up another tab's view)."""
        for tab in registry.TABS + registry.DOCK_TABS:
            if tab.presenter is None:
                continue
            self.presenters[tab.id] = presenter = tab.presenter(self._ui, self.views[tab.id])
            if tab.reveal:
                signal = getattr(presenter, tab.reveal)
                signal.connect(lambda *_a, t=tab.id: self.reveal(t))

    def reveal(self, tab_id: str) -> None:
        if tab_id in self.pages:
            self.viewTabs.setCurrentWidget(self.pages[tab_id])
        else:
            self.timingTabs.setCurrentWidget(self.views[tab_id])

    def sync(self, mode: ModeId, kind: str | None) -> None:
        """Show the tabs that serve ``mode`` and its model ``kind``; an off tab's page says why."""
        view = self._ui.state.view
        for tab in registry.TABS:
            index = self.viewTabs.indexOf(self.pages[tab.id])
            visible = tab.serves(mode.kind, kind)
            if not visible and view.tab == tab.id:
                view.tab = HEATMAPS_TAB
            if self.viewTabs.isTabVisible(index) != visible:
                self.viewTabs.setTabVisible(index, visible)
        self.empty_states.sync()

    def show_tab(self, tab_id: str) -> bool:
        """Bring ``tab_id`` to the front; False when the mode does not offer it."""
        widget = self.pages.get(tab_id)
        index = self.viewTabs.indexOf(widget) if widget is not None else -1
        if index < 0 or not self.viewTabs.isTabVisible(index):
            return False
        if self.viewTabs.currentIndex() != index:
            self.viewTabs.setCurrentIndex(index)
        return True

    def tab_at(self, index: int) -> str | None:
        """The id of the view tab at ``index``."""
        widget = self.viewTabs.widget(index)
        return next((t for t, w in self.pages.items() if w is widget), None)

    def shown_tabs(self) -> list[tuple[str, str]]:
        """(id, title) of the view tabs on show now, in order."""
        ids = {id(page): tab_id for tab_id, page in self.pages.items()}
        tabs = self.viewTabs
        return [(ids[id(tabs.widget(i))], tabs.tabText(i)) for i in range(tabs.count()) if tabs.isTabVisible(i)]
