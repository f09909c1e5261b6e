"""The attndesk main window: assembles the state, the compute controller, the modes and the views.

It holds no state of its own: every choice is in ``self.state`` (``AppState``), the compute
controller decides when to run and publishes ``Shown`` results, the panels and tabs bind to both,
the status bar draws ``self.status``, and modes hand over their widgets and actions through the
``Assembly`` methods below (``add_toolbar_widget``, …) and the menu registry. Every tab, its view
and its presenter come from the tab registry (``tabs/registry.py``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import cast

from PySide6.QtCore import QByteArray, QObject, Qt, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QTabWidget,
    QWidget,
)

from attndesk.core.bundle import BundleError
from attndesk.core.errors import ConfigError
from attndesk.core.process import freeze_long_lived, tune_process

from .bundle_save import run_settings, save_bundle, window_page_image
from .export_dialog import ExportDialog
from .jobs.background import Background
from .jobs.channels import FILES
from .jobs.compute import ComputeController, Modes
from .menus import MenuRegistry
from .modes.long import LongDocumentMode
from .modes.toy import ToyMode
from .panels.heatmaps import HeatmapPanel
from .panels.parameters import ParametersPanel
from .panels.timing import TimingPanel
from .panels.tokens import TokensPanel
from .pretrained.mode import PretrainedMode
from .results import Shown
from .session import SessionError, load_session, parse_session, save_session, session_json
from .settings import SETTINGS_APP, app_settings, settings_org
from .state import HEATMAPS_TAB, AppState, ModeId
from .status import StatusModel
from .styles import restyle
from .tabs import registry
from .tabs.registry import TabSpec
from .views.empty_state import EmptyStatePage

STATE_VERSION = 1
_ERROR_STYLE = "color: #b00020;"
MENU_LAYOUT: dict[str, tuple[str, list[tuple[str, ...]]]] = {
    "file": ("&File", [("text", "session"), ("model",), ("export",), ("quit",)]),
    "run": ("&Run", [("run",)]),
    "view": ("&View", [("docks",), ("layout",)]),
}

__all__ = ["SETTINGS_APP", "MainWindow", "app_settings", "main", "settings_org"]


def main(argv: list[str] | None = None) -> int:
    """Create the QApplication, show the window and run the event loop; returns the exit code."""
    app = QApplication.instance() or QApplication(list(sys.argv if argv is None else argv))
    app.setOrganizationName(settings_org())
    app.setApplicationName(SETTINGS_APP)
    window = MainWindow()
    window.show()
    return app.exec()


def _scrolled(view: QWidget) -> QWidget:
    """A frameless scroll area around ``view``: a large form scrolls inside its page instead of raising
    the window's minimum size (the window fits 1000 x 700 with its docks, whatever the tabs hold)."""
    area = QScrollArea(objectName=f"{view.objectName() or 'tab'}Scroll")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(view)
    return area


TAB_PADDING = "QTabBar::tab { padding: 5px 3px; }"  # the style gives 12 px each side
TAB_FONT_SCALE = 0.93
TIMING_DOCK_PX = 150  # the timing dock's first height, its least: the tabs keep 3/4 of an 800 px window


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

    def __init__(self, window: MainWindow) -> None:
        self._window = window
        self._stacks: dict[str, QStackedWidget] = {}  # tab id -> its stack

    def stack(self, tab: TabSpec, view: QWidget) -> QStackedWidget:
        """A tab that can be off: its view, or its empty state (``sync`` chooses)."""
        stack = QStackedWidget(objectName=f"{tab.id}Page")
        off = EmptyStatePage(tab.id)
        off.actionClicked.connect(lambda t=tab: self._act(t))
        stack.addWidget(view)
        stack.addWidget(off)
        self._stacks[tab.id] = stack
        return stack

    def _act(self, tab: TabSpec) -> None:
        """The empty state's button: the action its tab's spec declares for the current state."""
        assert tab.unavailable is not None, "only a tab that can be off has an empty state"
        state = tab.unavailable(self._window.state)
        if state is not None and state.act is not None:
            state.act(self._window)

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
            state = tab.unavailable(self._window.state)
            if state is not None:
                off.set_state(state.sentence, state.action if state.act is not None else "")
            stack.setCurrentIndex(0 if state is None else 1)


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
        self._tabs: dict[str, QWidget] = {}  # tab id -> its page in viewTabs (the view, or its stack)
        self._views: dict[str, QWidget] = {}  # tab id -> its view (view tabs and dock tabs)
        self._presenters: dict[str, QObject] = {}
        self._empty_states = EmptyStates(self)
        self._drawing: Shown | None = None
        self._export_dialog: ExportDialog | None = None
        self._bundles = Background(self, FILES)  # File > Save bundle, written off the GUI thread
        self._closed = False
        self._status_widgets = 1  # permanent widgets the modes added after the status line
        self._build_views()
        self._build_docks()
        self._build_status_bar()
        self._build_actions()
        self._build_presenters()
        self.state.events.mode.connect(self._sync_tabs)  # before the modes': a mode may open a tab it serves
        self.state.events.config.connect(self._sync_tabs)
        self.compute.published.connect(self._empty_states.sync)
        self._sync_tabs()
        for mode in self.modes:
            mode.install(self)
        self.refresh_choices()
        self._bind()
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self._shutdown)
        if restore:
            self._restore_settings()
        self.compute.evaluate()
        freeze_long_lived()  # the modules and widgets made so far live as long as the process

    # -- construction ---------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.tokensPanel = TokensPanel(self.state)
        self.parametersPanel = ParametersPanel(self.state)
        self.timingPanel = TimingPanel()
        self.viewTabs = QTabWidget(objectName="viewTabs")
        self.viewTabs.setDocumentMode(True)
        fit_tabs(self.viewTabs)
        self.setCentralWidget(self.viewTabs)
        for tab in registry.TABS:
            self._views[tab.id] = view = tab.view()
            shown = _scrolled(view) if tab.scroll else view
            page = shown if tab.unavailable is None else self._empty_states.stack(tab, shown)
            index = self.viewTabs.addTab(page, tab.title)
            self.viewTabs.setTabToolTip(index, tab.tooltip)
            self._tabs[tab.id] = page
        self.heatmapPanel = cast(HeatmapPanel, self._views[HEATMAPS_TAB])  # the registry's heatmaps view
        self.heatmapPanel.memory_budget = lambda: self.state.config.budget_bytes
        self.heatmapPanel.ledger = self.compute.ledger  # a derived source is held with everything else
        self.timingTabs = QTabWidget(objectName="timingTabs")
        self.timingTabs.setDocumentMode(True)
        self.timingTabs.addTab(self.timingPanel, "Timing")
        for tab in registry.DOCK_TABS:
            self._views[tab.id] = view = tab.view()
            self.timingTabs.setTabToolTip(self.timingTabs.addTab(view, tab.title), tab.tooltip)

    def empty_state(self, tab_id: str) -> EmptyStatePage | None:
        """The empty-state page of a tab that can be off (None for one that cannot)."""
        return self._empty_states.page(tab_id)

    def _build_presenters(self) -> None:
        """Each tab's presenter, once every view exists (a presenter may look up another tab's view)."""
        for tab in registry.TABS + registry.DOCK_TABS:
            if tab.presenter is None:
                continue
            self._presenters[tab.id] = presenter = tab.presenter(self, self._views[tab.id])
            if tab.reveal:
                signal = getattr(presenter, tab.reveal)
                signal.connect(lambda *_a, t=tab.id: self._reveal(t))

    def _reveal(self, tab_id: str) -> None:
        if tab_id in self._tabs:
            self.viewTabs.setCurrentWidget(self._tabs[tab_id])
        else:
            self.timingTabs.setCurrentWidget(self._views[tab_id])

    def _build_docks(self) -> None:
        params_scroll = QScrollArea()
        params_scroll.setWidgetResizable(True)
        params_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        params_scroll.setWidget(self.parametersPanel)
        left, bottom = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.BottomDockWidgetArea
        self.tokensDock = self._dock("Input tokens", "tokensDock", self.tokensPanel, left)
        self.parametersDock = self._dock("Model parameters", "parametersDock", params_scroll, left)
        self.timingDock = self._dock("Timing", "timingDock", self.timingTabs, bottom)
        self.splitDockWidget(self.tokensDock, self.parametersDock, Qt.Orientation.Vertical)
        self.resizeDocks([self.tokensDock], [340], Qt.Orientation.Horizontal)
        self.resizeDocks([self.tokensDock, self.parametersDock], [380, 470], Qt.Orientation.Vertical)
        self.resizeDocks([self.timingDock], [TIMING_DOCK_PX], Qt.Orientation.Vertical)
        self._default_state = self.saveState(STATE_VERSION)

    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self, objectName=name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.addDockWidget(area, dock)
        return dock

    def _build_status_bar(self) -> None:
        self.statusLabel = QLabel("ready", objectName="statusLabel")
        # a long status line (a long run's plan) is cut, whole in the tooltip: never widens the window
        self.statusLabel.setMinimumWidth(80)
        self.progressBar = QProgressBar(objectName="progressBar")
        self.progressBar.setMaximumWidth(180)
        self.progressBar.setRange(0, 1000)
        self.progressBar.setTextVisible(False)
        self.progressBar.hide()
        self.cancelButton = QPushButton("Cancel", objectName="cancelButton")
        self.cancelButton.setToolTip("Stop waiting for the running computation (Esc)")
        self.cancelButton.hide()
        self.statusBar().addWidget(self.statusLabel, 1)
        self.statusBar().addPermanentWidget(self.progressBar)
        self.statusBar().addPermanentWidget(self.cancelButton)

    def _action(self, text: str, name: str, menu: str, section: str, shortcut=None) -> QAction:
        action = QAction(text, self, objectName=name)
        if shortcut is not None:
            action.setShortcut(shortcut)
        self.menus.add(menu, action, section)
        return action

    def _build_actions(self) -> None:
        for key, (title, groups) in MENU_LAYOUT.items():
            self.menus.declare(key, title, groups)
        self.viewMenu = self.menus.menu("view")
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
        for dock in (self.tokensDock, self.parametersDock, self.timingDock):
            self.menus.add("view", dock.toggleViewAction(), "docks")
        self.resetLayoutAction = self._action("Reset &layout", "resetLayoutAction", "view", "layout")
        self.openSessionAction.triggered.connect(self._open_session_dialog)
        self.saveSessionAction.triggered.connect(self._save_session_dialog)
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
        self.status.events.connect(lambda *_a: self._show_status())
        self.compute.published.connect(self._show)
        self.compute.problemChanged.connect(self.parametersPanel.show_problem)
        panel.shown.connect(self._on_heatmaps_shown)
        panel.exportRequested.connect(self.open_export_dialog)
        panel.viewChanged.connect(lambda target: setattr(view, "target", target))
        panel.appearanceChanged.connect(self._read_appearance)
        for name, setter in self._appearance(panel).items():
            setter(getattr(view, name))
            getattr(view.events, name).connect(setter)
        view.events.target.connect(self._show_target)
        view.events.tab.connect(self._show_tab)
        self.viewTabs.currentChanged.connect(self._on_tab_changed)
        state.events.mode.connect(self._on_mode)
        state.events.config.connect(lambda _c: self._on_mode(state.mode))
        self._on_mode(state.mode)

    def _show_status(self) -> None:
        """The status line, colour and progress; each widget is touched only when its value changes
        (progress arrives many times a second: a style sheet re-polishes the label, and a progress
        bar repaints synchronously, in the same event)."""
        status, label, bar = self.status, self.statusLabel, self.progressBar
        if label.text() != status.message:
            label.setText(status.message)
            label.setToolTip(status.message)
        restyle(label, _ERROR_STYLE if status.error else "")
        if status.busy:
            top = 0 if status.progress is None else 100  # indeterminate until the first progress report
            if bar.maximum() != top:
                bar.setRange(0, top)
            if status.progress is not None and bar.value() != int(status.progress * 100):
                bar.setValue(int(status.progress * 100))
        bar.setVisible(status.busy)
        self.cancelButton.setVisible(status.busy)

    @staticmethod
    def _appearance(panel: HeatmapPanel) -> dict:
        """View-state field -> the heatmap panel's setter (its getter has the name without ``set_``)."""
        return {
            "colormap": panel.set_colormap_name,
            "shared_scale": panel.set_shared_scale,
            "log_scale": panel.set_log_scale,
            "hide_first_key": panel.set_hide_first_key,
            "alibi_bias": panel.set_show_alibi_bias,
        }

    def _read_appearance(self) -> None:
        """The panel's own controls changed its look: the state follows (one event per field changed)."""
        panel = self.heatmapPanel
        self.state.view.update(
            {
                name: getattr(panel, setter.__name__.removeprefix("set_"))()
                for name, setter in self._appearance(panel).items()
            }
        )

    def _show_target(self, target) -> None:
        if target != self.heatmapPanel.view_target():
            self.heatmapPanel.set_view_target(target)

    def _show_tab(self, tab_id: str) -> None:
        self.status.tab_shown(tab_id)
        widget = self._tabs.get(tab_id)
        index = self.viewTabs.indexOf(widget) if widget is not None else -1
        if index < 0 or not self.viewTabs.isTabVisible(index):
            self.state.view.tab = HEATMAPS_TAB  # a tab this mode does not offer
            return
        if self.viewTabs.currentIndex() != index:
            self.viewTabs.setCurrentIndex(index)

    def _on_tab_changed(self, index: int) -> None:
        widget = self.viewTabs.widget(index)
        tab_id = next((t for t, w in self._tabs.items() if w is widget), None)
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
    def _model_kind(self, mode: ModeId) -> str | None:
        """A pretrained model's family ("encoder", "decoder", "encoder-decoder"); None otherwise."""
        if mode.kind != "pretrained":
            return None
        try:
            return self.pretrained.spec_for(mode).family
        except ConfigError:
            return None

    def _sync_tabs(self, *_args) -> None:
        """Show the tabs that serve the current mode and model; an off tab's page says why."""
        mode = self.state.mode
        kind = self._model_kind(mode)
        self.tokensPanel.set_image_input(kind == "vision")
        for tab in registry.TABS:
            index = self.viewTabs.indexOf(self._tabs[tab.id])
            visible = tab.serves(mode.kind, kind)
            if not visible and self.state.view.tab == tab.id:
                self.state.view.tab = HEATMAPS_TAB
            if self.viewTabs.isTabVisible(index) != visible:
                self.viewTabs.setTabVisible(index, visible)
        self._empty_states.sync()

    def shown_tabs(self) -> list[tuple[str, str]]:
        """(id, title) of the view tabs on show now, in order."""
        ids = {id(page): tab_id for tab_id, page in self._tabs.items()}
        tabs = self.viewTabs
        return [(ids[id(tabs.widget(i))], tabs.tabText(i)) for i in range(tabs.count()) if tabs.isTabVisible(i)]

    def tab_presenter(self, tab_id: str) -> QObject:
        """A tab's presenter (KeyError for a tab the window binds itself, e.g. the heatmaps)."""
        return self._presenters[tab_id]

    def tab_page(self, tab_id: str) -> QWidget:
        """What ``viewTabs`` holds for a tab: its view, or the stack of view and reason of a tab that can be off."""
        return self._tabs[tab_id]

    # -- the Assembly a mode gets ---------------------------------------------------------------

    def add_toolbar_widget(self, widget: QWidget) -> None:
        self.heatmapPanel.add_toolbar_widget(widget)

    def add_header_widget(self, widget: QWidget) -> None:
        self.heatmapPanel.add_header_widget(widget)

    def add_status_widget(self, widget: QWidget) -> None:
        self.statusBar().insertPermanentWidget(self._status_widgets, widget)
        self._status_widgets += 1

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
        return self._views[tab_id]

    # -- export ---------------------------------------------------------------------------------
    @Slot(object)
    def open_export_dialog(self, target=None) -> ExportDialog | None:
        """Open the export dialog preset to ``target`` ("all", "mean" or a head index)."""
        amap = self.heatmapPanel.displayed_map()  # what is on screen (the first key hidden, ALiBi's bias…)
        if amap is None:
            self.status.fail("nothing to export yet: wait for a result")
            return None
        view = self.state.view
        shown = self.compute.shown()
        result = None if shown is None else (shown.toy.result if shown.toy is not None else shown.layers)
        page_settings = (
            None if shown is None or result is None else run_settings(shown.mode, self.state.target_text, result)
        )
        page_image = None
        if shown is not None and shown.layers is not None and getattr(shown.layers, "grid", None) is not None:
            run, layer, colormap = shown.layers, int(shown.layer or 0), view.colormap  # a vision run: its image
            page_image = lambda: window_page_image(run, layer, colormap)  # noqa: E731
        dialog = ExportDialog(
            amap,
            target=target if target is not None else "all",
            colormap=view.colormap,
            shared_scale=view.shared_scale,
            parent=self,
            region=view.region,
            log_scale=view.log_scale,
            settings=app_settings(),
            page_settings=page_settings,
            page_image=page_image,
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # it holds the result: gone once closed
        dialog.destroyed.connect(lambda *_a, d=dialog: self._forget_export_dialog(d))
        dialog.exported.connect(lambda path: self.status.say(f"exported {path}"))
        dialog.failedExport.connect(lambda msg: self.status.fail(f"export failed: {msg}"))
        self._export_dialog = dialog
        dialog.open()
        return dialog

    def _forget_export_dialog(self, dialog: ExportDialog) -> None:
        if self._export_dialog is dialog:  # a newer dialog may already be open
            self._export_dialog = None

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

    # -- sessions -------------------------------------------------------------------------------
    def session(self) -> AppState:
        """A copy of the state (what a session file holds)."""
        return AppState.model_validate(self.state.model_dump())

    def apply_session(self, session) -> None:
        """Assign a loaded session (``session.Session``); SessionError if its mode cannot be used
        here, and then nothing has changed."""
        state = session.state
        try:
            mode = self.modes.for_id(state.mode).admit(state.mode)
        except ConfigError as exc:
            what = "model folder" if state.mode.path is not None else "model"
            raise SessionError(f"the session's {what} cannot be used: {exc}") from None
        if mode != state.mode:
            state.mode = mode
        self.state.assign(state)
        for notice in session.notices:
            self.status.say(notice)

    def save_session_to(self, path: str | os.PathLike) -> Path:
        """Save the current state; raises SessionError with a readable reason."""
        return save_session(self.state, path)

    def load_session_from(self, path: str | os.PathLike):
        """Load and apply a session file; on any problem raise SessionError and change nothing."""
        session = load_session(path)
        self.apply_session(session)
        return session

    def _open_session_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open session", "", "attndesk sessions (*.json);;All files (*)")
        if not path:
            return
        try:
            self.load_session_from(path)
        except SessionError as exc:
            self.status.fail(f"session not loaded: {exc}")
        else:
            self.status.say(f"opened session {Path(path).name}")

    def _save_session_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Save session", "attndesk-session.json", "attndesk sessions (*.json)"
        )
        if not path:
            return
        try:
            self.save_session_to(path)
        except SessionError as exc:
            self.status.fail(f"session not saved: {exc}")
        else:
            self.status.say(f"saved session {Path(path).name}")

    # -- persistence and shutdown ---------------------------------------------------------------
    def _restore_settings(self) -> None:
        settings = app_settings()
        geometry, layout = settings.value("window/geometry"), settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(layout, QByteArray):
            self.restoreState(layout, STATE_VERSION)
        last = settings.value("session/last")
        if isinstance(last, str) and last:
            try:
                self.apply_session(parse_session(last))
            except SessionError as exc:
                self.status.fail(f"the last session could not be restored: {exc}")

    def _save_settings(self) -> None:
        settings = app_settings()
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState(STATE_VERSION))
        try:
            self.state.config.validate()
        except (ConfigError, TypeError):
            pass  # keep the last good session rather than one that cannot be loaded
        else:
            settings.setValue("session/last", json.dumps(session_json(self.state)))
        settings.sync()

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.compute.shutdown()  # cancels, then joins the main worker and the side jobs

    def closeEvent(self, event) -> None:
        if not self._closed:
            self._save_settings()
            if self._export_dialog is not None:
                self._export_dialog.close()
            self.status.say("stopping…")
            if self.compute.any_job_running():
                self.hide()  # gone at once: joining waits for the cancelled job's current step
            self._shutdown()
        super().closeEvent(event)
