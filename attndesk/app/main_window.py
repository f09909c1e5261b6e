"""The attndesk main window: docks around a tabbed view area, live recompute in a worker thread.

Every edit restarts a short debounce; when it fires, ``_make_job`` turns the current mode, text and
parameters into a job (or a ConfigError shown inline) and the ``JobRunner`` runs it off the GUI
thread. The newest request wins; results, failures and progress come back as signals.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QWidget,
)

from attndesk.core.config import AttentionConfig
from attndesk.core.errors import ConfigError

from .jobs import Job, ViewPayload, toy_job
from .long_mode import LongModeController
from .panels.heatmaps import HeatmapPanel
from .panels.parameters import TOY_MODE, ParametersPanel
from .panels.timing import TimingPanel, format_seconds
from .panels.tokens import TokensPanel
from .pretrained_mode import PretrainedMode
from .session import Session, SessionError, load_session, parse_session, save_session
from .teaching_tabs import TeachingTabs
from .worker import JobRunner

DEBOUNCE_MS = 150
SETTINGS_APP = "attndesk"
STATE_VERSION = 1
_ERROR_STYLE = "color: #b00020;"


def settings_org() -> str:
    """QSettings organisation: ATTNDESK_SETTINGS_ORG (tests set it) or "attndesk"."""
    return os.environ.get("ATTNDESK_SETTINGS_ORG") or "attndesk"


def app_settings() -> QSettings:
    return QSettings(settings_org(), SETTINGS_APP)


class _TextProblem(ConfigError):
    """The text (not a parameter) is unusable: shown in the status bar, not next to a control."""


class MainWindow(QMainWindow):
    """``MainWindow()`` restores the last session and layout, then computes the first result."""

    resultDisplayed = Signal(object)  # the AttentionResult now on screen

    def __init__(self, parent: QWidget | None = None, *, restore: bool = True) -> None:
        super().__init__(parent)
        self.setObjectName("attndeskMainWindow")
        self.setWindowTitle("attndesk — attention, live")
        self.resize(1400, 900)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        self._payload: ViewPayload | None = None
        self._closed = False
        self._export_dialog = None
        self._announce: ViewPayload | None = None

        # views ------------------------------------------------------------------------------
        self.tokensPanel = TokensPanel()
        self.parametersPanel = ParametersPanel()
        self.heatmapPanel = HeatmapPanel()
        self.timingPanel = TimingPanel()
        self.viewTabs = QTabWidget(objectName="viewTabs")
        self.viewTabs.setDocumentMode(True)
        self.viewTabs.addTab(self.heatmapPanel, "Heatmaps")
        self.setCentralWidget(self.viewTabs)

        params_scroll = QScrollArea()
        params_scroll.setWidgetResizable(True)
        params_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        params_scroll.setWidget(self.parametersPanel)
        self.tokensDock = self._dock("Input tokens", "tokensDock", self.tokensPanel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.parametersDock = self._dock("Model parameters", "parametersDock", params_scroll,
                                         Qt.DockWidgetArea.LeftDockWidgetArea)
        self.timingDock = self._dock("Timing", "timingDock", self.timingPanel, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.splitDockWidget(self.tokensDock, self.parametersDock, Qt.Orientation.Vertical)
        self.resizeDocks([self.tokensDock], [340], Qt.Orientation.Horizontal)
        self.resizeDocks([self.tokensDock, self.parametersDock], [380, 470], Qt.Orientation.Vertical)
        self.resizeDocks([self.timingDock], [230], Qt.Orientation.Vertical)
        self._default_state = self.saveState(STATE_VERSION)

        # status bar -------------------------------------------------------------------------
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

        self._build_actions()
        self.teachingTabs = TeachingTabs(self)  # step-through, positions, head stats, compare, rollout tabs

        # computation ------------------------------------------------------------------------
        self.runner = JobRunner(self)
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        self.runner.progress.connect(self._on_progress)
        self.runner.cancelled.connect(self._on_cancelled)
        self._debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._debounce.timeout.connect(lambda: self.compute_now(explicit=False))  # typing never starts a long run
        self.tokensPanel.changed.connect(self.schedule_compute)
        self.parametersPanel.changed.connect(self.schedule_compute)
        self.parametersPanel.modeChanged.connect(self.schedule_compute)
        self.heatmapPanel.exportRequested.connect(self.open_export_dialog)
        self.heatmapPanel.shown.connect(self._on_heatmaps_shown)
        self.cancelButton.clicked.connect(self.cancel_compute)
        self.pretrained = PretrainedMode(self)  # pretrained-model modes: their controls, grid tab and jobs
        self.longMode = LongModeController(self)  # open/drop text files, plan before running, zoom regions
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self._shutdown)

        if restore:
            self._restore_settings()
        self.schedule_compute()

    # -- construction helpers -----------------------------------------------------------------
    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self, objectName=name)
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(area, dock)
        return dock

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.openSessionAction = QAction("&Open session…", self, objectName="openSessionAction",
                                         shortcut=QKeySequence.StandardKey.Open)
        self.saveSessionAction = QAction("&Save session…", self, objectName="saveSessionAction",
                                         shortcut=QKeySequence.StandardKey.Save)
        self.exportAction = QAction("&Export heatmaps…", self, objectName="exportAction",
                                    shortcut=QKeySequence("Ctrl+E"))
        self.quitAction = QAction("&Quit", self, objectName="quitAction", shortcut=QKeySequence.StandardKey.Quit)
        for action in (self.openSessionAction, self.saveSessionAction):
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.exportAction)
        file_menu.addSeparator()
        file_menu.addAction(self.quitAction)

        run_menu = menu.addMenu("&Run")
        self.recomputeAction = QAction("&Recompute now", self, objectName="recomputeAction",
                                       shortcut=QKeySequence("F5"))
        self.cancelAction = QAction("&Cancel", self, objectName="cancelAction", shortcut=QKeySequence("Esc"))
        run_menu.addAction(self.recomputeAction)
        run_menu.addAction(self.cancelAction)

        self.viewMenu = menu.addMenu("&View")
        for dock in (self.tokensDock, self.parametersDock, self.timingDock):
            self.viewMenu.addAction(dock.toggleViewAction())
        self.viewMenu.addSeparator()
        self.resetLayoutAction = QAction("Reset &layout", self, objectName="resetLayoutAction")
        self.viewMenu.addAction(self.resetLayoutAction)

        self.openSessionAction.triggered.connect(self._open_session_dialog)
        self.saveSessionAction.triggered.connect(self._save_session_dialog)
        self.exportAction.triggered.connect(lambda: self.open_export_dialog(self.heatmapPanel.view_target()))
        self.quitAction.triggered.connect(self.close)
        # not connect(self.compute_now): triggered(checked=False) would arrive as explicit=False,
        # and F5 could never start a held long run
        self.recomputeAction.triggered.connect(lambda: self.compute_now(explicit=True))
        self.cancelAction.triggered.connect(self.cancel_compute)
        self.resetLayoutAction.triggered.connect(lambda: self.restoreState(self._default_state, STATE_VERSION))

    # -- public API ---------------------------------------------------------------------------
    def displayed_result(self):
        """The AttentionResult on screen, or None."""
        return self._payload.result if self._payload is not None else None

    def displayed_payload(self) -> ViewPayload | None:
        return self._payload

    def add_view_tab(self, widget: QWidget, title: str) -> int:
        """Later views (step-through, statistics, compare…) join the central tabs here."""
        return self.viewTabs.addTab(widget, title)

    def status_text(self) -> str:
        return self.statusLabel.text()

    @Slot()
    def schedule_compute(self) -> None:
        """Recompute after a short pause in editing (the latest edit wins)."""
        if not self._closed:
            self._debounce.start()

    def _make_job(self) -> Job:
        """The job for the current mode, text and parameters; raises ConfigError if they cannot work.

        The single place that knows how a mode computes: a new mode adds its branch here.
        """
        mode = self.parametersPanel.mode()
        text = self.tokensPanel.text()
        key_text = self.tokensPanel.key_text()
        if mode == TOY_MODE:
            values = self.parametersPanel.values()
            config = AttentionConfig.from_dict(values).validate()
            if key_text is not None and "causal" in config.mask:
                raise ConfigError("a causal mask needs self-attention: switch cross-attention off or pick another mask")
            if not text.strip():
                raise _TextProblem("type some text to attend over: the input is empty")
            if key_text is not None and not key_text.strip():
                raise _TextProblem("type some text for the keys/values, or switch cross-attention off")
            heads = "1 head" if config.num_heads == 1 else f"{config.num_heads} heads"
            keep = self.teachingTabs.keep_intermediates(config, text, key_text)
            return Job(toy_job, (config, text, key_text), {"keep_intermediates": keep},
                       f"computing {heads}, {config.mask} mask")
        if self.pretrained.handles(mode):
            if not text.strip():
                raise _TextProblem("type some text to attend over: the input is empty")
            return self.pretrained.make_job(mode, text, key_text)
        raise ConfigError(f"unknown mode {mode!r}")

    @Slot()
    def compute_now(self, explicit: bool = True) -> None:
        """Validate and submit the current request at once (skipping the debounce).

        ``explicit`` False (the typing debounce) lets a run estimated long wait for Run/F5."""
        if self._closed:
            return
        self._debounce.stop()
        try:
            job = self._make_job()
        except _TextProblem as exc:
            self.parametersPanel.show_error(None)
            self.runner.cancel()
            self._set_status(str(exc), error=True)
            self._set_busy(False)
            return
        except ConfigError as exc:
            self.parametersPanel.show_error(str(exc))
            self.runner.cancel()  # nothing is computed until the parameters are fixed
            self._set_status(f"fix the parameters: {exc}", error=True)
            self._set_busy(False)
            return
        self.parametersPanel.show_error(None)
        job = self.longMode.prepare(job, explicit)  # the worker plans first (and may hold a long run)
        generation = self.runner.next_generation()
        self.runner.submit(generation, job.fn, *job.args, **job.kwargs)
        self._set_status(f"{job.description}…")
        self._set_busy(True)

    @Slot()
    def cancel_compute(self) -> None:
        if not self.runner.is_busy():
            return
        self.runner.cancel()

    # -- results ------------------------------------------------------------------------------
    @Slot(int, object)
    def _on_finished(self, generation: int, payload: ViewPayload) -> None:
        self._set_busy(False)
        if self.longMode.take_held(payload):
            return  # a long run waits for Run/F5; the previous result stays
        self.show_payload(payload)

    def show_payload(self, payload: ViewPayload, *, new_run: bool = True) -> None:
        """Put a finished computation on screen (heatmaps, tokens, timing) and announce it."""
        result = payload.result
        self._payload = payload
        self.tokensPanel.show_result(result)
        if new_run:  # another view of the same run (e.g. a pretrained layer) is not a new timing
            self.timingPanel.show_result(result)
        L = len(result.tokens)
        Lk = len(result.keys)
        size = f"{L} tokens" if L == Lk and result.key_tokens is None else f"{L} queries × {Lk} keys"
        message = (f"done in {format_seconds(result.total_seconds)} · {size} · {result.num_heads} "
                   f"head{'s' if result.num_heads != 1 else ''} · {result.device}")
        if payload.notices:
            message += " · " + "; ".join(payload.notices)
        self._set_status(message)
        # resultDisplayed follows once every heatmap is drawn (many heads are drawn in slices)
        self._announce = payload
        self.teachingTabs.show_payload(payload)
        self.heatmapPanel.set_source(payload.source)

    @Slot()
    def _on_heatmaps_shown(self) -> None:
        payload, self._announce = self._announce, None
        if payload is not None and payload is self._payload:
            self.resultDisplayed.emit(payload.result)

    @Slot(int, str)
    def _on_failed(self, generation: int, message: str) -> None:
        self._set_busy(False)
        keep = " (the previous result is still shown)" if self._payload is not None else ""
        self._set_status(f"error: {message}{keep}", error=True)

    @Slot(int)
    def _on_cancelled(self, generation: int) -> None:
        # the runner reports only explicit cancels (superseded requests are stale and dropped)
        self._set_busy(False)
        keep = "; the previous result is still shown" if self._payload is not None else ""
        self._set_status(f"cancelled{keep}")

    @Slot(int, float, str)
    def _on_progress(self, generation: int, fraction: float, message: str) -> None:
        self.progressBar.setRange(0, 1000)
        self.progressBar.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        if message:
            self._set_status(f"computing: {message} ({fraction:.0%})")

    def _set_status(self, text: str, *, error: bool = False) -> None:
        self.statusLabel.setText(text)
        self.statusLabel.setStyleSheet(_ERROR_STYLE if error else "")
        self.statusLabel.setToolTip(text)

    def _set_busy(self, busy: bool) -> None:
        if busy:
            self.progressBar.setRange(0, 0)  # indeterminate until the first progress report
        self.progressBar.setVisible(busy)
        self.cancelButton.setVisible(busy)

    # -- export -------------------------------------------------------------------------------
    @Slot(object)
    def open_export_dialog(self, target=None):
        """Open the export dialog preset to ``target`` ("all", "mean" or a head index)."""
        from .export_dialog import ExportDialog

        if self._payload is None:
            self._set_status("nothing to export yet: wait for a result", error=True)
            return None
        dialog = ExportDialog(self.heatmapPanel.displayed_map(), target=target if target is not None else "all",
                              colormap=self.heatmapPanel.colormap_name(),
                              shared_scale=self.heatmapPanel.shared_scale(), parent=self,
                              region=self.longMode.export_region(), log_scale=self.heatmapPanel.log_scale(),
                              settings=app_settings())
        dialog.exported.connect(lambda path: self._set_status(f"exported {path}"))
        dialog.failedExport.connect(lambda msg: self._set_status(f"export failed: {msg}", error=True))
        self._export_dialog = dialog
        dialog.open()
        return dialog

    # -- sessions -----------------------------------------------------------------------------
    def current_session(self) -> Session:
        target = self.heatmapPanel.view_target()
        return self.pretrained.fill_session(Session(
            text=self.tokensPanel.text(),
            key_text=self.tokensPanel.keyInput.toPlainText(),
            cross=self.tokensPanel.crossCheck.isChecked(),
            mode=self.parametersPanel.mode(),
            config=AttentionConfig().to_dict() | self.parametersPanel.values(),
            colormap=self.heatmapPanel.colormap_name(),
            shared_scale=self.heatmapPanel.shared_scale(),
            view=target,
        ))

    def apply_session(self, session: Session) -> None:
        """Show a validated session (load_session/parse_session already checked it)."""
        self.pretrained.prepare_session(session)  # may list the session's model folder as a mode
        if self.parametersPanel.modeCombo.findData(session.mode) < 0:
            raise SessionError(f"mode {session.mode!r} is not available in this attndesk")
        self.tokensPanel.set_texts(session.text, session.key_text, session.cross)
        self.parametersPanel.set_values(session.config)
        self.parametersPanel.modeCombo.setCurrentIndex(self.parametersPanel.modeCombo.findData(session.mode))
        self.heatmapPanel.set_colormap_name(session.colormap)
        self.heatmapPanel.set_shared_scale(session.shared_scale)
        self.heatmapPanel.set_view_target(session.view)
        self.pretrained.apply_session(session)
        for notice in session.notices:
            self._set_status(notice)
        self.schedule_compute()

    def save_session_to(self, path: str | os.PathLike) -> Path:
        """Save the current session; raises SessionError with a readable reason."""
        return save_session(self.current_session(), path)

    def load_session_from(self, path: str | os.PathLike) -> Session:
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
            self._set_status(f"session not loaded: {exc}", error=True)
        else:
            self._set_status(f"opened session {Path(path).name}")

    def _save_session_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save session", "attndesk-session.json",
                                              "attndesk sessions (*.json)")
        if not path:
            return
        try:
            self.save_session_to(path)
        except SessionError as exc:
            self._set_status(f"session not saved: {exc}", error=True)
        else:
            self._set_status(f"saved session {Path(path).name}")

    # -- persistence and shutdown -------------------------------------------------------------
    def _restore_settings(self) -> None:
        settings = app_settings()
        geometry = settings.value("window/geometry")
        state = settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state, STATE_VERSION)
        last = settings.value("session/last")
        if isinstance(last, str) and last:
            try:
                self.apply_session(parse_session(last))
            except SessionError as exc:
                self._set_status(f"the last session could not be restored: {exc}", error=True)

    def _save_settings(self) -> None:
        settings = app_settings()
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState(STATE_VERSION))
        session = self.current_session()
        try:
            AttentionConfig.from_dict(session.config).validate()
        except ConfigError:
            pass  # keep the last good session rather than one that cannot be loaded
        else:
            import json

            settings.setValue("session/last", json.dumps(session.to_json()))
        settings.sync()

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._debounce.stop()
        self.runner.shutdown()  # cancels, then joins the worker thread
        self.teachingTabs.shutdown()
        self.longMode.shutdown()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if not self._closed:
            self._save_settings()
            if self._export_dialog is not None:
                self._export_dialog.close()
            self._set_status("stopping…")
            self._shutdown()
        super().closeEvent(event)
