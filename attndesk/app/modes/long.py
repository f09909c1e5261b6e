"""Long documents: open or drop a text file, see the plan before a long run, zoom into exact cells.

A helper mode: it offers no Mode-combo entry and computes nothing itself (the toy model plans and
runs long texts); it adds what working with a long text needs:

- File > Open text… (Ctrl+Shift+O) and dropping a file on the window or a text box read it with
  ``read_text_file`` (UTF-8, up to 1 MiB) into ``state.text`` (or ``state.key_text`` when dropped
  on the key box); a refusal is one status line and changes nothing.
- The plan the worker reports before a run goes to a label in the status bar; a run held for
  being long gets a Run button (and F5) — the compute controller holds it, this mode shows it.
- Zoom: in an enlarged heatmap, a box drag or the wheel zooms; once the view settles, a side job
  computes the finest picture of the visible cells (a finer stored pyramid level, or exact rows)
  and it is drawn over the zoomed rectangle. The visible cells are ``state.view.region``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton

from attndesk.app.widgets.named import named
from attndesk.errors import ConfigError
from attndesk.files.textfile import read_text_file
from attndesk.models.vision import IMAGE_SUFFIXES
from attndesk.render.colormaps import hatch_rgba
from attndesk.runs.plan import FULL, RunPlan
from attndesk.session.plans import describe_plan, held_line, needs_explicit_run, short_plan
from attndesk.session.results import Held
from attndesk.session.state import ALL, IMAGE_TAB

from ..jobs.channels import ZOOM
from ..sources.long_source import ZoomTile, zoom_region
from .base import Assembly, ModeBase

ZOOM_SETTLE_MS = 120  # the view range must rest this long before a zoom region is computed
TEXT_FILTER = "Text files (*.txt *.md *.rst *.csv *.tsv *.json *.py *.html *.xml *.tex);;All files (*)"


def _dropped_path(mime) -> str | None:
    """The first local file of a drag's data, or None."""
    if mime is None or not mime.hasUrls():
        return None
    return next((url.toLocalFile() for url in mime.urls() if url.isLocalFile()), None)


def zoom_with_hatch(
    source, head, q0: int, q1: int, k0: int, k1: int, px: int, colormap: str
) -> tuple[ZoomTile | None, np.ndarray | None]:
    """The zoom tile and its masked cells' hatch image, both made in the side job (the hatch of a
    large tile took 240 ms on the GUI thread, soak)."""
    tile = zoom_region(source, head, q0, q1, k0, k1, px)
    if tile is None or tile.masked is None:
        return tile, None
    return tile, hatch_rgba(tile.masked, px, colormap)


class _DropFilter(QObject):
    """Takes file drops on the window and the text boxes (which would paste the file's URL)."""

    def __init__(self, mode: LongDocumentMode, key_targets: set[int]) -> None:
        super().__init__(mode)
        self._mode = mode
        self._keys = key_targets

    def eventFilter(self, watched, event):
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove) and _dropped_path(event.mimeData()):
            event.acceptProposedAction()
            return True
        if kind == QEvent.Type.Drop:
            path = _dropped_path(event.mimeData())
            if path is not None:
                event.acceptProposedAction()
                self._mode.open_text_file(path, keys=id(watched) in self._keys and self._mode.cross())
                return True
        return False


class LongDocumentMode(QObject, ModeBase):
    """See the module docstring."""

    zoomShown = Signal(object)  # the ZoomTile now drawn (tests wait for it)

    def __init__(self, parent: QObject | None = None) -> None:
        QObject.__init__(self, parent)
        self._assembly: Assembly | None = None
        self._plan = None
        self._held: RunPlan | None = None
        self._zoom_items: dict[int, tuple] = {}  # id(view box) -> (vb, image, hatch)
        self._zoom_tile: ZoomTile | None = None
        self._base_note = ""
        self._note_for = 0  # the presentation whose note _base_note is
        self.openTextAction = named(
            QAction("Open &text…", self), "openTextAction", shortcut=QKeySequence("Ctrl+Shift+O")
        )
        self.openTextAction.setToolTip("Open a UTF-8 text file (up to 1 MiB) as the text to attend over")
        self.planLabel = named(QLabel(""), "planLabel")
        self.planLabel.setStyleSheet("color: #555; padding: 0 6px;")
        self.planLabel.hide()
        self.runButton = named(QPushButton("Run (F5)"), "runButton")
        self.runButton.setToolTip("Start the long run that is waiting (F5)")
        self.runButton.hide()
        self.fitButton = named(QPushButton("Fit"), "zoomFitButton")
        self.fitButton.setToolTip(
            "Show the whole matrix again. In an enlarged heatmap: drag a box to zoom "
            "in, the wheel zooms, the middle button pans."
        )
        self.fitButton.hide()  # only for an enlarged heatmap (the grid does not zoom)
        self._settle = QTimer(self, singleShot=True, interval=ZOOM_SETTLE_MS)

    def install(self, ui: Assembly) -> None:
        self._assembly = ui
        ui.menus.add("file", self.openTextAction, "text")
        ui.add_action(self.openTextAction)
        ui.add_status_widget(self.planLabel)
        ui.add_status_widget(self.runButton)
        ui.add_toolbar_widget(self.fitButton)
        targets = ui.drop_targets()
        self._drops = _DropFilter(self, {id(w) for w, role in targets if role == "keys"})
        for widget, _role in targets:
            widget.installEventFilter(self._drops)
        self.openTextAction.triggered.connect(self._open_text_dialog)
        self.runButton.clicked.connect(ui.compute.run_now)
        self.fitButton.clicked.connect(self.zoom_fit)
        self._settle.timeout.connect(self.request_zoom)
        ui.compute.planned.connect(self._on_planned)
        ui.compute.held.connect(self._on_held)
        ui.compute.busyChanged.connect(self._on_busy)
        ui.state.events.mode.connect(lambda mode: None if mode.kind == "toy" else self.planLabel.hide())
        panel = ui.heatmaps()
        panel.shown.connect(self._attach_views)
        panel.viewChanged.connect(lambda _t: self._attach_views())
        panel.appearanceChanged.connect(self._restyle_zoom)

    def cross(self) -> bool:
        return bool(self._ui.state.cross)

    # -- opening text ---------------------------------------------------------------------------
    def _open_text_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.fitButton.window(), "Open text", "", TEXT_FILTER)
        if path:
            self.open_text_file(path)

    def open_text_file(self, path: str | os.PathLike, *, keys: bool = False) -> bool:
        """Read a text file into the query text (or the key text); on a refusal say why in the
        status line and change nothing. Returns whether the text was set. An image file goes to
        the Image tab (a vision model's input; a text model refuses it there)."""
        if Path(path).suffix.lower() in IMAGE_SUFFIXES:
            self._ui.tab_widget(IMAGE_TAB).imageDropped.emit(os.fspath(path))  # type: ignore[attr-defined]
            return False
        try:
            text = read_text_file(path)
        except ConfigError as exc:
            self._ui.status.fail(f"not opened: {exc}")
            return False
        if keys:
            self._ui.state.key_text = text
        else:
            self._ui.state.text = text
        where = "key/value text" if keys else "text"
        self._ui.status.say(
            f"opened {os.path.basename(os.fspath(path))} as the {where}: {len(text):,} characters; planning…"
        )
        return True

    # -- the plan -------------------------------------------------------------------------------
    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        if busy:  # a new run: whatever waited is replaced
            self._held = None
            self.runButton.hide()

    @Slot(object)
    def _on_planned(self, plan) -> None:
        self._plan = plan
        if plan.kind == FULL and not needs_explicit_run(plan):
            self.planLabel.hide()  # an everyday run: nothing to explain
            return
        self.planLabel.setText(short_plan(plan))
        self.planLabel.setToolTip(describe_plan(plan))
        self.planLabel.show()
        self._ui.status.say(f"computing: {describe_plan(plan)}")

    @Slot(object)
    def _on_held(self, held: Held) -> None:
        self._held = held.plan
        self._ui.status.say(held_line(held.plan))
        self.runButton.show()

    def held_plan(self):
        """The plan waiting for Run, or None."""
        return self._held

    def current_plan(self):
        return self._plan

    # -- zoom -----------------------------------------------------------------------------------
    def _single_view(self):
        """(head, view box, image) of the enlarged heatmap, or None in the grid."""
        panel = self._ui.heatmaps()
        views = panel.cell_views()
        return views[0] if len(views) == 1 and panel.view_target() != ALL else None

    @Slot()
    def _attach_views(self) -> None:
        """New cells or a new source: drop stale zoom pictures, make the enlarged view zoomable."""
        shown_id = self._ui.compute.current_ids()[1]
        self._clear_zoom(restore_note=shown_id == self._note_for)  # a new result wrote its own note
        self._base_note, self._note_for = self._ui.heatmaps().note.text(), shown_id
        single = self._single_view()
        self.fitButton.setVisible(single is not None)
        self._update_region()
        if single is None:
            return
        vb = single[1]
        vb.setMouseMode(pg.ViewBox.RectMode)  # left drag = box zoom, wheel zooms, middle drag pans
        if not getattr(vb, "_attndesk_watched", False):  # a mark on the view box: an id() is reused by a new one
            vb._attndesk_watched = True
            vb.sigRangeChanged.connect(self._on_range)
        self._settle.start()

    def _on_range(self, *_args) -> None:
        self._update_region()
        self._settle.start()

    def visible_cells(self) -> tuple[int, int, int, int] | None:
        """(q0, q1, k0, k1) shown by the enlarged heatmap, or None in the grid."""
        single = self._single_view()
        source = self._ui.heatmaps().source()
        if single is None or source is None:
            return None
        (x0, x1), (y0, y1) = single[1].viewRange()
        lq, lk = source.shape
        q0, q1 = max(0, math.floor(y0)), min(lq, math.ceil(y1))
        k0, k1 = max(0, math.floor(x0)), min(lk, math.ceil(x1))
        if q1 <= q0 or k1 <= k0:
            return None
        return q0, q1, k0, k1

    def _update_region(self) -> None:
        """``state.view.region``: the zoomed cells, or None when the whole matrix is in view."""
        cells = self.visible_cells()
        source = self._ui.heatmaps().source()
        region = None
        if cells is not None and source is not None:
            q0, q1, k0, k1 = cells
            if not ((q0, k0) == (0, 0) and (q1, k1) == tuple(source.shape)):
                region = ((q0, q1), (k0, k1))
        self._ui.state.view.region = region

    def export_region(self):
        """((q0, q1), (k0, k1)) of the zoomed cells, or None when the whole matrix is in view."""
        return self._ui.state.view.region

    @Slot()
    def zoom_fit(self) -> None:
        single = self._single_view()
        source = self._ui.heatmaps().source()
        if single is not None and source is not None:
            lq, lk = source.shape
            single[1].setRange(xRange=(0, lk), yRange=(0, lq), padding=0)

    @Slot()
    def request_zoom(self) -> None:
        """Ask a side job for the finest picture of the visible cells (the newest request wins;
        the answer counts only for the presentation it was asked for)."""
        single, cells = self._single_view(), self.visible_cells()
        source = self._ui.heatmaps().source()
        if single is None or cells is None or source is None:
            return
        head, vb = single[0], single[1]
        px = max(16, int(max(vb.width(), vb.height())))
        self._ui.compute.side.submit(
            ZOOM,
            zoom_with_hatch,
            source,
            head,
            *cells,
            px,
            self._ui.state.view.colormap,
            done=lambda answer: self._on_zoom_done(head, *answer),
            failed=lambda message: self._ui.status.fail(f"zoom: {message}"),
            scope="shown",
        )

    def _on_zoom_done(self, head, tile: ZoomTile | None, hatch: np.ndarray | None) -> None:
        single = self._single_view()
        if single is None or single[0] != head:
            return  # the enlarged head changed meanwhile
        if tile is None:
            self._clear_zoom()
            return
        self._draw_zoom(single[1], single[2], tile, hatch)

    def _zoom_items_for(self, vb) -> tuple:
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
        return items

    def _draw_zoom(self, vb, base: pg.ImageItem, tile: ZoomTile, stripes: np.ndarray | None) -> None:
        _vb, image, hatch = self._zoom_items_for(vb)
        image.setColorMap(base.getColorMap())
        image.setImage(tile.array, autoLevels=False, levels=tuple(base.getLevels()))
        rect = QRectF(*tile.rect())
        image.setRect(rect)
        image.show()
        if stripes is not None:
            hatch.setImage(stripes, autoLevels=False, levels=(0, 255))
            hatch.setRect(rect)
            hatch.show()
        else:
            hatch.hide()
        self._zoom_tile = tile
        self._ui.heatmaps().note.setText(self._zoom_note(tile))
        self.zoomShown.emit(tile)

    def _zoom_note(self, tile: ZoomTile) -> str:
        """The panel's note while a zoom picture is drawn: what one pixel is now."""
        lq, lk = self._ui.heatmaps().source().shape
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

    def _clear_zoom(self, restore_note: bool = True) -> None:
        for _vb, image, hatch in list(self._zoom_items.values()):
            try:
                image.hide()
                hatch.hide()
            except RuntimeError:  # the view box (and its items) are already deleted
                pass
        self._zoom_items = {k: v for k, v in self._zoom_items.items() if _alive(v[0])}
        if restore_note and self._zoom_tile is not None:
            self._ui.heatmaps().note.setText(self._base_note)
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

    def shutdown(self) -> None:
        self._settle.stop()


def _alive(obj) -> bool:
    try:
        obj.isVisible()
    except RuntimeError:
        return False
    return True
