"""Long documents in the window: open/drop a text file, plan before running, zoom into exact cells.

``LongModeController(window)`` attaches to the ``MainWindow`` through a few hooks:

- File > Open text… (Ctrl+Shift+O) and dropping a file on the window read it with
  ``read_text_file`` (UTF-8, up to 1 MiB); a refusal goes to the status bar and changes nothing.
- ``prepare(job, explicit)`` wraps the toy-model job so that the WORKER first plans the run
  (``plan_text``: tokenizing a 1 MB text takes ~60 ms, too long for the GUI thread) and hands the
  plan to the run. A run estimated long (over ``LONG_RUN_S``, or over the memory budget even as a
  pyramid) that was only scheduled by typing is held: the status bar shows the plan and a Run
  button, and it starts on Run / F5.
- Zoom: in an enlarged heatmap, a box drag or the wheel zooms; once the view settles, a side
  worker computes the finest picture of the visible cells (a finer stored pyramid level, or
  exact rows) and it is drawn over the zoomed rectangle. Hover read-outs stay exact.
- ``export_region()``: the zoomed cells, for exporting an exact region of a pyramid run.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton

from attndesk.core.errors import ConfigError
from attndesk.core.memory import format_bytes
from attndesk.core.pipeline import plan_text
from attndesk.core.plan import FULL, _duration
from attndesk.core.textfile import read_text_file
from attndesk.render.colormaps import hatch_rgba

from .jobs import Job, toy_job
from .long_source import ZoomTile, zoom_job
from .worker import JobRunner

LONG_RUN_S = 5.0  # a run estimated longer than this waits for an explicit Run (F5)
# The core's estimate counts FLOPs only; with small heads the per-cell softmax/exp and memory
# traffic dominate (measured on the 2-core machine: 16k tokens x 4 heads of 16 dims took ~24 s,
# planned "about 1 s"). This floor per attention cell keeps such runs from starting on typing.
CELL_SECONDS = 5e-9
ZOOM_SETTLE_MS = 120  # the view range must rest this long before a zoom region is computed
TEXT_FILTER = "Text files (*.txt *.md *.rst *.csv *.tsv *.json *.py *.html *.xml *.tex);;All files (*)"


# -- planning (runs in the worker) ------------------------------------------------------------
def estimated_seconds(plan) -> float | None:
    """The plan's time estimate, at least ``CELL_SECONDS`` per attention cell (None on a GPU)."""
    if plan.seconds is None:
        return None
    return max(plan.seconds, plan.num_heads * plan.lq * plan.lk * CELL_SECONDS)


def needs_explicit_run(plan) -> bool:
    """Whether a run should wait for Run/F5 instead of starting while the user types."""
    if plan.peak_bytes > plan.budget:
        return True  # over the memory budget even with the pyramid
    seconds = estimated_seconds(plan)
    if seconds is None:  # a GPU: no time estimate, so hold the memory-bounded runs
        return plan.kind != FULL
    return seconds > LONG_RUN_S


def short_plan(plan) -> str:
    """A few words for the status bar's plan label (``plan.describe()`` is the tooltip)."""
    size = f"{plan.lq:,} tokens" if plan.lq == plan.lk else f"{plan.lq:,}×{plan.lk:,} tokens"
    if plan.kind == FULL:
        kept = f"full weights {format_bytes(plan.weights_bytes)}"
    elif plan.storage == "pyramid":
        kept = f"{plan.overview_px} px overview + exact on demand"
    else:
        kept = f"weights as {plan.storage} + exact on demand"
    eta = ""
    seconds = estimated_seconds(plan)
    if seconds is not None:
        eta = " · under 1 s" if seconds < 1 else f" · ~{_eta(seconds)}"
    over = " · OVER BUDGET" if plan.peak_bytes > plan.budget else ""
    return f"{size}: {kept}{eta}{over}"


def describe_plan(plan) -> str:
    """``plan.describe()`` with our time estimate in place of the core's FLOP-only one."""
    text = plan.describe()
    seconds = estimated_seconds(plan)
    if plan.seconds is None or seconds is None:
        return text
    return text.replace(f" ({_duration(plan.seconds)})", f" ({_duration(seconds)})", 1)


def _eta(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


@dataclass
class HeldRun:
    """The worker's answer for a long run that typing alone does not start."""

    plan: object


def planned_toy_job(config, text, key_text=None, *, explicit: bool = True, announce=None, progress=None,
                    should_cancel=None, **kwargs):
    """Plan (tokenize + arithmetic), tell the GUI the plan, then run it, or hold a long run that
    was not explicitly asked for. Runs in the worker thread."""
    plan = plan_text(config, text, key_text)
    if announce is not None:
        announce(plan)
    if not explicit and needs_explicit_run(plan):
        return HeldRun(plan)
    return toy_job(config, text, key_text, plan=plan, progress=progress, should_cancel=should_cancel, **kwargs)


# -- drag and drop ----------------------------------------------------------------------------
def _dropped_path(mime) -> str | None:
    """The first local file of a drag's data, or None."""
    if mime is None or not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile():
            return url.toLocalFile()
    return None


class _DropFilter(QObject):
    """Takes file drops on the window (and on the text boxes, which would paste the file's URL)."""

    def __init__(self, controller: "LongModeController") -> None:
        super().__init__(controller)
        self._controller = controller

    def eventFilter(self, watched, event):  # noqa: N802 - Qt's name
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if _dropped_path(event.mimeData()) is not None:
                event.acceptProposedAction()
                return True
        elif kind == QEvent.Type.Drop:
            path = _dropped_path(event.mimeData())
            if path is not None:
                event.acceptProposedAction()
                keys = self._controller.window.tokensPanel.keyInput
                to_keys = watched in (keys, keys.viewport()) and keys.isVisible()
                self._controller.open_text_file(path, keys=to_keys)
                return True
        return False


# -- the controller ---------------------------------------------------------------------------
class LongModeController(QObject):
    """Owns the long-document behaviour of one MainWindow (see the module docstring)."""

    planned = Signal(int, object)  # request token, RunPlan (emitted in the worker thread)
    zoomShown = Signal(object)  # the ZoomTile now drawn (tests wait for it)

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self._token = 0
        self._plan = None
        self._held = None
        self._zoom_items: dict[int, tuple] = {}  # id(view box) -> (vb, image, hatch)
        self._zoom_tile: ZoomTile | None = None
        self._watched: set[int] = set()
        self._shut = False
        self._base_note = ""
        self._note_source = None

        # File > Open text…
        self.openTextAction = QAction("Open &text…", window, objectName="openTextAction",
                                      shortcut=QKeySequence("Ctrl+Shift+O"))
        self.openTextAction.setToolTip("Open a UTF-8 text file (up to 1 MiB) as the text to attend over")
        self.openTextAction.triggered.connect(self._open_text_dialog)
        file_menu = self._menu_of(window.openSessionAction)
        if file_menu is not None:
            file_menu.insertAction(window.openSessionAction, self.openTextAction)
        else:
            window.addAction(self.openTextAction)
        window.setAcceptDrops(True)
        self._drops = _DropFilter(self)
        for widget in (window, window.tokensPanel.tokenInput, window.tokensPanel.tokenInput.viewport(),
                       window.tokensPanel.keyInput, window.tokensPanel.keyInput.viewport()):
            widget.installEventFilter(self._drops)

        # status bar: the plan, and Run for a held run
        bar = window.statusBar()
        self.planLabel = QLabel("", objectName="planLabel")
        self.planLabel.setStyleSheet("color: #555; padding: 0 6px;")
        self.planLabel.hide()
        self.runButton = QPushButton("Run (F5)", objectName="runButton")
        self.runButton.setToolTip("Start the long run that is waiting (F5)")
        self.runButton.hide()
        self.runButton.clicked.connect(lambda: window.compute_now())
        bar.insertPermanentWidget(1, self.planLabel)  # after the status text (index 0)
        bar.insertPermanentWidget(2, self.runButton)
        self.planned.connect(self._on_planned)

        # zoom
        self.fitButton = QPushButton("Fit", objectName="zoomFitButton")
        self.fitButton.setToolTip("Show the whole matrix again. In an enlarged heatmap: drag a box to zoom "
                                  "in, the wheel zooms, the middle button pans.")
        self.fitButton.hide()  # only for an enlarged heatmap (the grid does not zoom)
        self.fitButton.clicked.connect(self.zoom_fit)
        window.heatmapPanel.add_toolbar_widget(self.fitButton)
        self.zoomRunner = JobRunner(self, name="attndesk-zoom")
        self.zoomRunner.finished.connect(self._on_zoom_done)
        self.zoomRunner.failed.connect(self._on_zoom_failed)
        self._settle = QTimer(self, singleShot=True, interval=ZOOM_SETTLE_MS)
        self._settle.timeout.connect(self.request_zoom)
        panel = window.heatmapPanel
        panel.shown.connect(self._attach_views)
        panel.viewChanged.connect(lambda _t: self._attach_views())
        panel.appearanceChanged.connect(self._restyle_zoom)

    @staticmethod
    def _menu_of(action):
        for obj in action.associatedObjects():
            if obj.metaObject().className() == "QMenu":
                return obj
        return None

    # -- opening text ----------------------------------------------------------------------
    def _open_text_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open text", "", TEXT_FILTER)
        if path:
            self.open_text_file(path)

    def open_text_file(self, path: str | os.PathLike, *, keys: bool = False) -> bool:
        """Read a text file into the query text (or the key text); on a refusal say why in the
        status bar and change nothing. Returns whether the text was set."""
        try:
            text = read_text_file(path)
        except ConfigError as exc:
            self.window._set_status(f"not opened: {exc}", error=True)
            return False
        tokens = self.window.tokensPanel
        editor = tokens.keyInput if keys else tokens.tokenInput
        editor.setPlainText(text)  # emits changed: the debounce plans (and maybe runs) it
        where = "key/value text" if keys else "text"
        self.window._set_status(f"opened {os.path.basename(os.fspath(path))} as the {where}: "
                                f"{len(text):,} characters; planning…")
        return True

    # -- planning hooks (MainWindow.compute_now / _on_finished) ------------------------------
    def prepare(self, job: Job, explicit: bool) -> Job:
        """Wrap a toy-model job so the worker plans it first (other modes pass unchanged)."""
        self._token += 1
        self._held = None
        self.runButton.hide()
        if job.fn is not toy_job:
            self.planLabel.hide()
            return job
        token = self._token
        kwargs = dict(job.kwargs, explicit=explicit, announce=lambda plan: self.planned.emit(token, plan))
        return Job(planned_toy_job, job.args, kwargs, job.description)

    @Slot(int, object)
    def _on_planned(self, token: int, plan) -> None:
        if token != self._token:
            return  # a newer request replaced it
        self._plan = plan
        if plan.kind == FULL and not needs_explicit_run(plan):
            self.planLabel.hide()  # an everyday run: nothing to explain
            return
        self.planLabel.setText(short_plan(plan))
        self.planLabel.setToolTip(describe_plan(plan))
        self.planLabel.show()
        if self.window.runner.is_busy():
            self.window._set_status(f"computing: {describe_plan(plan)}")

    def take_held(self, payload) -> bool:
        """True (and the status bar says why) when the worker held a long run instead of running it."""
        if not isinstance(payload, HeldRun):
            return False
        plan = self._held = payload.plan
        seconds = estimated_seconds(plan)
        size = f"{plan.lq:,} tokens" if plan.lq == plan.lk else f"{plan.lq:,}×{plan.lk:,} tokens"
        why = ("over the memory budget even as an overview" if plan.peak_bytes > plan.budget
               else f"a long run (~{_eta(seconds)})" if seconds else "a long run")
        # the action first: a narrow window cuts the end of the line (the tooltip keeps all of it)
        self.window._set_status(f"{size}: {why} — press Run (F5) to start it · {describe_plan(plan)}")
        self.runButton.show()
        return True

    def held_plan(self):
        """The plan waiting for Run, or None."""
        return self._held

    def current_plan(self):
        return self._plan

    # -- zoom --------------------------------------------------------------------------------
    def _single_view(self):
        """(head, view box, image) of the enlarged heatmap, or None in the grid."""
        views = self.window.heatmapPanel.cell_views()
        return views[0] if len(views) == 1 and self.window.heatmapPanel.view_target() != "all" else None

    @Slot()
    def _attach_views(self) -> None:
        """New cells or a new source: drop stale zoom pictures, make the enlarged view zoomable."""
        self._clear_zoom()
        self._base_note = self.window.heatmapPanel.note.text()
        self._note_source = self.window.heatmapPanel.source()
        single = self._single_view()
        self.fitButton.setVisible(single is not None)
        if single is None:
            return
        _head, vb, _image = single
        vb.setMouseMode(pg.ViewBox.RectMode)  # left drag = box zoom, wheel zooms, middle drag pans
        if id(vb) not in self._watched:
            self._watched.add(id(vb))
            vb.sigRangeChanged.connect(lambda *_a: self._settle.start())
        self._settle.start()

    def visible_cells(self) -> tuple[int, int, int, int] | None:
        """(q0, q1, k0, k1) shown by the enlarged heatmap, or None in the grid."""
        single = self._single_view()
        source = self.window.heatmapPanel.source()
        if single is None or source is None:
            return None
        (x0, x1), (y0, y1) = single[1].viewRange()
        lq, lk = source.shape
        q0, q1 = max(0, math.floor(y0)), min(lq, math.ceil(y1))
        k0, k1 = max(0, math.floor(x0)), min(lk, math.ceil(x1))
        if q1 <= q0 or k1 <= k0:
            return None
        return q0, q1, k0, k1

    def export_region(self):
        """((q0, q1), (k0, k1)) of the zoomed cells, or None when the whole matrix is in view."""
        cells = self.visible_cells()
        source = self.window.heatmapPanel.source()
        if cells is None or source is None:
            return None
        q0, q1, k0, k1 = cells
        if (q0, k0) == (0, 0) and (q1, k1) == tuple(source.shape):
            return None
        return (q0, q1), (k0, k1)

    @Slot()
    def zoom_fit(self) -> None:
        single = self._single_view()
        source = self.window.heatmapPanel.source()
        if single is not None and source is not None:
            lq, lk = source.shape
            single[1].setRange(xRange=(0, lk), yRange=(0, lq), padding=0)

    @Slot()
    def request_zoom(self) -> None:
        """Ask the zoom worker for the finest picture of the visible cells (latest request wins)."""
        if self._shut:
            return
        single = self._single_view()
        cells = self.visible_cells()
        source = self.window.heatmapPanel.source()
        if single is None or cells is None or source is None:
            return
        vb = single[1]
        px = max(16, int(max(vb.width(), vb.height())))
        generation = self.zoomRunner.next_generation()
        self.zoomRunner.submit(generation, zoom_job, source, single[0], *cells, px)

    @Slot(int, object)
    def _on_zoom_done(self, _generation: int, answer) -> None:
        (source, head, _cells), tile = answer
        single = self._single_view()
        if single is None or source is not self.window.heatmapPanel.source() or single[0] != head:
            return  # the view moved on
        if tile is None:
            self._clear_zoom()
            return
        self._draw_zoom(single[1], single[2], tile)

    @Slot(int, str)
    def _on_zoom_failed(self, _generation: int, message: str) -> None:
        self.window._set_status(f"zoom: {message}", error=True)

    def _draw_zoom(self, vb, base: pg.ImageItem, tile: ZoomTile) -> None:
        items = self._zoom_items.get(id(vb))
        if items is None or items[0] is not vb:
            image = pg.ImageItem(axisOrder="row-major")
            image.setZValue(1)  # over the overview, under the masked hatch and the hover highlight
            hatch = pg.ImageItem(axisOrder="row-major")
            hatch.setZValue(6)
            vb.addItem(image, ignoreBounds=True)
            vb.addItem(hatch, ignoreBounds=True)
            items = (vb, image, hatch)
            self._zoom_items[id(vb)] = items
        _vb, image, hatch = items
        image.setColorMap(base.getColorMap())
        image.setImage(tile.array, autoLevels=False, levels=tuple(base.getLevels()))
        rect = QRectF(*tile.rect())
        image.setRect(rect)
        image.show()
        if tile.masked is not None:
            hatch.setImage(_hatch(tile.masked, int(max(vb.width(), vb.height()))), autoLevels=False, levels=(0, 255))
            hatch.setRect(rect)
            hatch.show()
        else:
            hatch.hide()
        self._zoom_tile = tile
        self.window.heatmapPanel.note.setText(self._zoom_note(tile))
        self.zoomShown.emit(tile)

    def _zoom_note(self, tile: ZoomTile) -> str:
        """The panel's note while a zoom picture is drawn: what one pixel is now."""
        lq, lk = self.window.heatmapPanel.source().shape
        rows, cols = tile.array.shape
        q1, k1 = min(lq, tile.q0 + rows * tile.factor), min(lk, tile.k0 + cols * tile.factor)
        where = f"queries {tile.q0:,}–{q1 - 1:,} × keys {tile.k0:,}–{k1 - 1:,}"
        if tile.exact:
            what = f"zoomed in: exact cells of {where}"
        else:
            what = f"zoomed to {where}: each pixel is the max of a {tile.factor}x{tile.factor} tile"
        hatched = "hatched = masked" in self._base_note
        return " · ".join((["hatched = masked"] if hatched else []) + [what, "hover values are exact"])

    @Slot()
    def _restyle_zoom(self) -> None:
        """Colormap or scale changed: the zoom picture follows the base image."""
        single = self._single_view()
        items = None if single is None else self._zoom_items.get(id(single[1]))
        if items is not None and items[1].isVisible() and items[1].image is not None:
            items[1].setColorMap(single[2].getColorMap())
            items[1].setLevels(tuple(single[2].getLevels()))

    def _clear_zoom(self) -> None:
        for vb, image, hatch in list(self._zoom_items.values()):
            try:
                image.hide()
                hatch.hide()
            except RuntimeError:  # the view box (and its items) are already deleted
                pass
        self._zoom_items = {k: v for k, v in self._zoom_items.items() if _alive(v[0])}
        if self._zoom_tile is not None and self.window.heatmapPanel.source() is self._note_source:
            self.window.heatmapPanel.note.setText(self._base_note)  # (a new source wrote its own note)
        self._zoom_tile = None

    def zoom_tile(self) -> ZoomTile | None:
        """The zoom picture on screen (None when the overview itself is drawn)."""
        return self._zoom_tile

    def zoom_image(self) -> np.ndarray | None:
        single = self._single_view()
        items = None if single is None else self._zoom_items.get(id(single[1]))
        if items is None or not items[1].isVisible():
            return None
        return items[1].image

    # -- shutdown ----------------------------------------------------------------------------
    def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        self._settle.stop()
        self.zoomRunner.shutdown()


def _alive(obj) -> bool:
    try:
        obj.isVisible()
    except RuntimeError:
        return False
    return True


def _hatch(masked: np.ndarray, px: int) -> np.ndarray:
    """RGBA stripes over masked tiles at about screen resolution (the panel's one hatch image)."""
    return hatch_rgba(masked, px)
