"""The attndesk main window: assembles the state, the compute controller, the modes and the views.

It holds no state of its own: every choice is in ``self.state`` (``AppState``), the compute
controller decides when to run and publishes ``Shown`` results, the panels and tabs bind to both,
the status bar draws ``self.status``, and modes hand over their widgets and actions through the
``Assembly`` methods below (``add_toolbar_widget``, …) and the menu registry. Every tab, its view
and its presenter come from the tab registry (``tabs/registry.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import cast

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QMainWindow,
    QWidget,
)

from attndesk.errors import ConfigError
from attndesk.render.bundle import save_bundle
from attndesk.session.bundle import BundleError
from attndesk.session.results import Shown
from attndesk.session.state import HEATMAPS_TAB, AppState, ModeId
from attndesk.session.status import StatusModel
from attndesk.system.process import freeze_long_lived, tune_process

from ..docks.parameters import ParametersPanel
from ..docks.timing import TimingPanel
from ..docks.tokens import TokensPanel
from ..jobs.background import Background
from ..jobs.channels import FILES
from ..jobs.compute import ComputeController, Modes
from ..modes.long import LongDocumentMode
from ..modes.pretrained.mode import PretrainedMode
from ..modes.toy import ToyMode
from ..settings import SETTINGS_APP, app_settings, settings_org
from ..tabs.heatmaps.view import HeatmapPanel
from ..widgets.menus import MenuRegistry
from .actions import WindowActions
from .docks import build_docks
from .empty_state import EmptyStatePage
from .export import ExportDialogs
from .export_dialog import ExportDialog
from .sessions import STATE_VERSION, SessionFiles
from .status_bar import StatusLine
from .tab_pages import WindowTabs
from .warmup import TabWarmup

__all__ = ["SETTINGS_APP", "MainWindow", "app_settings", "main", "settings_org"]


def main(argv: list[str] | None = None) -> int:
    """Create the QApplication, show the window and run the event loop; returns the exit code."""
    app = QApplication.instance() or QApplication(list(sys.argv if argv is None else argv))
    app.setOrganizationName(settings_org())
    app.setApplicationName(SETTINGS_APP)
    window = MainWindow()
    window.show()
    return app.exec()


def appearance_setters(panel: HeatmapPanel) -> dict:
    """View-state field -> the heatmap panel's setter (its getter has the name without ``set_``)."""
    return {
        "colormap": panel.set_colormap_name,
        "shared_scale": panel.set_shared_scale,
        "log_scale": panel.set_log_scale,
        "hide_first_key": panel.set_hide_first_key,
        "alibi_bias": panel.set_show_alibi_bias,
    }


def model_kind(pretrained: PretrainedMode, mode: ModeId) -> str | None:
    """A pretrained model's family ("encoder", "decoder", "encoder-decoder"); None otherwise."""
    if mode.kind != "pretrained":
        return None
    try:
        return pretrained.spec_for(mode).family
    except ConfigError:
        return None


class MainWindow(QMainWindow):
    """``MainWindow()`` restores the last session and layout, then computes the first result."""

    resultDisplayed = Signal(object)  # the Shown now on screen, every heatmap drawn

    def __init__(self, parent: QWidget | None = None, *, restore: bool = True) -> None:
        tune_process()  # the C heap's settings, before the first large array
        super().__init__(parent)
        self.setObjectName("attndeskMainWindow")
        self.setWindowTitle("attndesk — attention, live")
        self.resize(1400, 900)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        self.state = AppState()
        self.status = StatusModel()
        self.menus = MenuRegistry(self.menuBar())
        self.toy, self.pretrained, self.longMode = ToyMode(), PretrainedMode(self), LongDocumentMode(self)
        self.modes = Modes([self.toy, self.pretrained, self.longMode])
        self.compute = ComputeController(self.state, self.modes, self.status, self)
        self._drawing: Shown | None = None
        self.exportDialogs = ExportDialogs(self, self.state, self.status)
        self._bundles = Background(self, FILES)  # File > Save bundle, written off the GUI thread
        self._closed = False
        self.files = SessionFiles(self, self.state, lambda mode: self.modes.for_id(mode).admit(mode), self.status)
        self._build_views()
        self._build_docks()
        self._build_status_bar()
        self._build_actions()
        self.tabs.build_presenters()
        self.state.events.mode.connect(self._sync_tabs)  # before the modes': a mode may open a tab it serves
        self.state.events.config.connect(self._sync_tabs)
        self.compute.published.connect(self.tabs.empty_states.sync)
        self.tabWarmup = TabWarmup(self.viewTabs)  # the pages not shown yet, warmed after the first result
        self.resultDisplayed.connect(lambda _shown: self.tabWarmup.start())
        self._sync_tabs()
        for mode in self.modes:
            mode.install(self)
        self.refresh_choices()
        self._bind()
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self._shutdown)
        if restore:
            self.files.restore_settings()
        self.compute.evaluate()
        freeze_long_lived()  # the modules and widgets made so far live as long as the process

    # -- construction ---------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.tokensPanel = TokensPanel(self.state)
        self.parametersPanel = ParametersPanel(self.state)
        self.timingPanel = TimingPanel()
        self.tabs = WindowTabs(self, self.timingPanel)
        self.viewTabs, self.timingTabs = self.tabs.viewTabs, self.tabs.timingTabs
        self.setCentralWidget(self.viewTabs)
        self.heatmapPanel = cast(HeatmapPanel, self.tabs.views[HEATMAPS_TAB])  # the registry's heatmaps view
        self.heatmapPanel.memory_budget = lambda: self.state.config.budget_bytes
        self.heatmapPanel.ledger = self.compute.ledger  # a derived source is held with everything else

    def empty_state(self, tab_id: str) -> EmptyStatePage | None:
        """The empty-state page of a tab that can be off (None for one that cannot)."""
        return self.tabs.empty_states.page(tab_id)

    def _build_docks(self) -> None:
        docks = build_docks(self, self.tokensPanel, self.parametersPanel, self.timingTabs)
        self.tokensDock, self.parametersDock, self.timingDock = docks
        self._default_state = self.saveState(STATE_VERSION)

    def _build_status_bar(self) -> None:
        self.statusLine = StatusLine(self.statusBar(), self.status)
        self.statusLabel, self.progressBar = self.statusLine.statusLabel, self.statusLine.progressBar
        self.cancelButton = self.statusLine.cancelButton

    def _build_actions(self) -> None:
        a = self.menuActions = WindowActions(self, self.menus, [self.tokensDock, self.parametersDock, self.timingDock])
        self.viewMenu, self.openSessionAction, self.saveSessionAction = (
            a.viewMenu,
            a.openSessionAction,
            a.saveSessionAction,
        )
        self.exportAction, self.saveBundleAction, self.quitAction = a.exportAction, a.saveBundleAction, a.quitAction
        self.recomputeAction, self.cancelAction = a.recomputeAction, a.cancelAction
        self.resetLayoutAction = a.resetLayoutAction
        self.openSessionAction.triggered.connect(self.files.open_session_dialog)
        self.saveSessionAction.triggered.connect(self.files.save_session_dialog)
        self.exportAction.triggered.connect(lambda: self.open_export_dialog(self.state.view.target))
        self.saveBundleAction.triggered.connect(self._save_bundle_dialog)
        self.quitAction.triggered.connect(self.close)
        self.recomputeAction.triggered.connect(lambda _checked=False: self.compute.run_now())
        self.cancelAction.triggered.connect(lambda _checked=False: self.compute.cancel())
        self.cancelButton.clicked.connect(lambda _checked=False: self.compute.cancel())
        self.resetLayoutAction.triggered.connect(lambda: self.restoreState(self._default_state, STATE_VERSION))

    # -- bindings -------------------------------------------------------------------------------
    def _bind(self) -> None:
        state, view, panel = self.state, self.state.view, self.heatmapPanel
        self.status.events.connect(lambda *_a: self.statusLine.show())
        self.compute.published.connect(self._show)
        self.compute.problemChanged.connect(self.parametersPanel.show_problem)
        panel.shown.connect(self._on_heatmaps_shown)
        panel.exportRequested.connect(self.open_export_dialog)
        panel.viewChanged.connect(lambda target: setattr(view, "target", target))
        panel.appearanceChanged.connect(self._read_appearance)
        for name, setter in appearance_setters(panel).items():
            setter(getattr(view, name))
            getattr(view.events, name).connect(setter)
        view.events.target.connect(self._show_target)
        view.events.tab.connect(self._show_tab)
        self.viewTabs.currentChanged.connect(self._on_tab_changed)
        state.events.mode.connect(self._on_mode)
        state.events.config.connect(lambda _c: self._on_mode(state.mode))
        self._on_mode(state.mode)

    def _read_appearance(self) -> None:
        """The panel's own controls changed its look: the state follows (one event per field changed)."""
        panel = self.heatmapPanel
        self.state.view.update(
            {
                name: getattr(panel, setter.__name__.removeprefix("set_"))()
                for name, setter in appearance_setters(panel).items()
            }
        )

    def _show_target(self, target) -> None:
        if target != self.heatmapPanel.view_target():
            self.heatmapPanel.set_view_target(target)

    def _show_tab(self, tab_id: str) -> None:
        self.status.tab_shown(tab_id)
        if not self.tabs.show_tab(tab_id):
            self.state.view.tab = HEATMAPS_TAB  # a tab this mode does not offer

    def _on_tab_changed(self, index: int) -> None:
        tab_id = self.tabs.tab_at(index)
        if tab_id is not None and tab_id != self.state.view.tab:
            self.state.view.tab = tab_id

    def _on_mode(self, mode: ModeId) -> None:
        self.parametersPanel.set_panel_view(self.modes.for_id(mode).panel(self.state))

    @Slot(object)
    def _show(self, shown: Shown) -> None:
        """Put a published result on screen: tokens, timing (a new run only), heatmaps."""
        self.tokensPanel.show_result(shown)
        self._on_mode(self.state.mode)  # the Train tab's model handed over again: the same state, another shape
        if shown.new_run:
            self.timingPanel.show_result(shown.facts)
        self._drawing = shown
        self.heatmapPanel.set_source(shown.source)  # resultDisplayed once every heatmap is drawn

    @Slot()
    def _on_heatmaps_shown(self) -> None:
        shown, self._drawing = self._drawing, None
        if shown is not None:
            self.compute.presented(shown.shown_id)
            self.resultDisplayed.emit(shown)

    # -- tabs: the registry's, shown in the modes and model kinds they serve ----------------------
    def _sync_tabs(self, *_args) -> None:
        """Show the tabs that serve the current mode and model; an off tab's page says why."""
        mode = self.state.mode
        kind = model_kind(self.pretrained, mode)
        self.tokensPanel.set_image_input(kind == "vision")
        self.tabs.sync(mode, kind)

    def shown_tabs(self) -> list[tuple[str, str]]:
        """(id, title) of the view tabs on show now, in order."""
        return self.tabs.shown_tabs()

    def tab_presenter(self, tab_id: str) -> QObject:
        """A tab's presenter (KeyError for a tab the window binds itself, e.g. the heatmaps)."""
        return self.tabs.presenters[tab_id]

    def tab_page(self, tab_id: str) -> QWidget:
        """What ``viewTabs`` holds for a tab: its view, or the stack of view and reason of a tab that can be off."""
        return self.tabs.pages[tab_id]

    # -- the Assembly a mode gets ---------------------------------------------------------------

    def add_toolbar_widget(self, widget: QWidget) -> None:
        self.heatmapPanel.add_toolbar_widget(widget)

    def add_header_widget(self, widget: QWidget) -> None:
        self.heatmapPanel.add_header_widget(widget)

    def add_status_widget(self, widget: QWidget) -> None:
        self.statusLine.add_widget(widget)

    def add_action(self, action: QAction) -> None:
        self.addAction(action)

    def drop_targets(self) -> list[tuple[QWidget, str]]:
        self.setAcceptDrops(True)
        tokens = self.tokensPanel
        return [
            (self, "text"),
            (tokens.tokenInput, "text"),
            (tokens.tokenInput.viewport(), "text"),
            (tokens.keyInput, "keys"),
            (tokens.keyInput.viewport(), "keys"),
        ]

    def heatmaps(self) -> HeatmapPanel:
        return self.heatmapPanel

    def refresh_choices(self) -> None:
        self.parametersPanel.set_choices(self.modes.choices())

    # -- public API -----------------------------------------------------------------------------
    def displayed_result(self) -> Shown | None:
        """The result on screen (or on its way there), or None."""
        return self.compute.shown()

    def status_text(self) -> str:
        return self.status.message

    def tab_widget(self, tab_id: str) -> QWidget:
        """A tab's view (a view tab's or a dock tab's), for its public API."""
        return self.tabs.views[tab_id]

    # -- export ---------------------------------------------------------------------------------
    @Slot(object)
    def open_export_dialog(self, target=None) -> ExportDialog | None:
        """Open the export dialog preset to ``target`` ("all", "mean" or a head index)."""
        amap = self.heatmapPanel.displayed_map()  # what is on screen (the first key hidden, ALiBi's bias…)
        if amap is None:
            self.status.fail("nothing to export yet: wait for a result")
            return None
        return self.exportDialogs.open(amap, target, self.compute.shown())

    # -- bundles --------------------------------------------------------------------------------
    def save_bundle_to(self, path: str | os.PathLike) -> bool:
        """Write the result on screen (a real model's run: every layer) and the session that made it as
        the bundle ``path`` in a pool thread; the status line says where it went or why not. False
        when there is nothing to save."""
        shown = self.compute.shown()
        if shown is None or (shown.toy is None and shown.layers is None) or shown.mode != self.state.mode:
            self.status.fail("bundle not saved: nothing computed for this mode yet: wait for a result")
            return False
        result = shown.toy.result if shown.toy is not None else shown.layers
        state, colormap, budget = self.session(), self.state.view.colormap, self.state.config.memory_budget
        trained = None if shown.toy is None else self.toy.trained_run(shown.toy.result.config.weights_from)
        name = Path(path).name
        self.status.say(f"saving bundle {name}…")
        self._bundles.start(
            lambda: save_bundle(state, result, path, colormap=colormap, memory_budget=budget, trained=trained),
            done=lambda written: self.status.say(f"saved bundle {written}"),
            failed=lambda exc: self.status.fail(f"bundle {name} not saved: {exc}"),
            expected=(BundleError, OSError),
        )
        return True

    def _save_bundle_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save bundle", "attndesk-bundle.zip", "attndesk bundles (*.zip)")
        if path:
            self.save_bundle_to(path if path.lower().endswith(".zip") else path + ".zip")

    # -- sessions (``files``) ------------------------------------------------------------------
    def session(self) -> AppState:
        """A copy of the state (what a session file holds)."""
        return self.files.session()

    def apply_session(self, session) -> None:
        """Assign a loaded session (``session.Session``); SessionError if its mode cannot be used
        here, and then nothing has changed."""
        self.files.apply_session(session)

    def save_session_to(self, path: str | os.PathLike) -> Path:
        """Save the current state; raises SessionError with a readable reason."""
        return self.files.save_session_to(path)

    def load_session_from(self, path: str | os.PathLike):
        """Load and apply a session file; on any problem raise SessionError and change nothing."""
        return self.files.load_session_from(path)

    # -- shutdown -------------------------------------------------------------------------------
    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.compute.shutdown()  # cancels, then joins the main worker and the side jobs

    def closeEvent(self, event) -> None:
        if not self._closed:
            self.files.save_settings()
            self.exportDialogs.close()
            self.status.say("stopping…")
            if self.compute.any_job_running():
                self.hide()  # gone at once: joining waits for the cancelled job's current step
            self._shutdown()
        super().closeEvent(event)
