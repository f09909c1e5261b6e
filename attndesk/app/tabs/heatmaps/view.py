"""Per-head attention heatmaps: a grid that uses the space it has, a mean view, one enlarged head.

PUBLIC API (what the window binds to; it only ever grows):

- Build, in a worker thread: ``source = long_source.source_for_map(map)`` (an ``AttentionMap``;
  ``hide_first_key=`` and ``show=`` give the derived sources below directly).
- Show: ``set_source(source | None)``; ``source()`` is what is drawn, ``displayed_map()`` its map.
- View: ``view_target()`` / ``set_view_target("all" | "mean" | head)``.
- Appearance setters (getters of the same name without ``set_``): ``set_colormap_name(name)``,
  ``set_shared_scale(bool)``, ``set_log_scale(bool)`` (a decoder's sink-aware colours),
  ``set_hide_first_key(bool)`` (drop key 0, rows renormalised: labelled so on screen),
  ``set_show_alibi_bias(bool)`` (draw -m_h |i - j| instead of the weights; ALiBi maps only).
- Intent signals: ``hovered(str)`` (the read-out line, "" on leaving), ``cellHovered(head, q, k)``,
  ``hoverLeft()``, ``headClicked(head)``, ``exportRequested(target)``, ``viewChanged(target)``,
  ``zoomChanged(head, region)`` (the enlarged head's visible ((q0, q1), (k0, k1)), after it
  settles), ``appearanceChanged()``, ``shown()`` (every heatmap of the current source is drawn).
- Mode hooks: ``add_toolbar_widget(w)``, ``add_header_widget(w)``; the footer labels ``readout``
  and ``note``.
- For tests and zoom pictures: ``displayed_heads()``, ``displayed_arrays()``, ``image_levels()``,
  ``cell_views()``, ``hover_cell(q, k)``, ``highlighted_cells()``, ``is_building()``,
  ``geometry()`` (every item's rectangle), ``visible_region()``.

Maps of grouped-query heads are laid out group by group under "kv 0: q 0-3" headers; a sliding
window's band is outlined; a layer marked local/global says so in the toolbar; ALiBi heads carry
their slope in the title. Each heatmap is a pyqtgraph ``ImageItem`` over the token rectangle
(0, 0, Lk, L), so cell (q, k) is the unit square at x=k, y=q whatever the downsampling.

The panel decides what is shown and answers its API; its collaborators each do one thing:
``heatmap_parts`` (the toolbar, canvas and footer widgets), ``heatmap_cells`` (drawing a source into
the canvas's cells and the colour bar), ``heatmap_readout`` (the hover read-out) and
``heatmap_derived`` (the sources the display options derive, held in the memory ledger).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QVBoxLayout, QWidget

from attndesk.attention.types import MEAN, AttentionMap, Head
from attndesk.render.layout import GridLayout
from attndesk.runs import select
from attndesk.session.ledger import MemoryLedger

from ...sources.heatmap_source import HeatmapSource
from .cells import HeatmapCells, Look
from .derived import DerivedSources
from .parts import COLORMAPS, SCALE_MODES, HeatmapParts, note_text
from .readout import HINT, HoverReadout, cell_at, format_weight, readout_text

ALL = select.ALL
ZOOM_SETTLE_MS = 120


class HeatmapPanel(QWidget):
    """The ``heatmapView`` widget: call ``set_source``; listen to its intent signals (module doc)."""

    hovered = Signal(str)  # the read-out line ("" when the mouse leaves the cells)
    cellHovered = Signal(object, int, int)  # head, query, key (key in the source's columns)
    hoverLeft = Signal()
    headClicked = Signal(object)  # a heatmap of the grid was clicked (it is then enlarged)
    exportRequested = Signal(object)  # "all", "mean" or a head index
    viewChanged = Signal(object)  # the new view target
    zoomChanged = Signal(object, object)  # head, ((q0, q1), (k0, k1)) visible in the enlarged view
    appearanceChanged = Signal()  # colormap, scale or a display option changed
    shown = Signal()  # every heatmap of the current source is drawn

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("heatmapView")
        self._base: HeatmapSource | None = None  # as set; ``_source`` is what is drawn (maybe derived)
        self._source: HeatmapSource | None = None
        self._target: select.Which = ALL
        self._log = False
        self.memory_budget: Callable[[], int | None] = lambda: None  # bytes a derived copy may share with its run
        self.ledger = MemoryLedger()  # the window's (set by it): a derived source is held there
        self._derived = DerivedSources(
            self,
            self._show,
            lambda line: self.note.setText(line),
            self._derived_let_go,
            lambda: self.ledger,
            lambda: self.memory_budget(),
        )
        self._build()
        self._connect()
        self._fill_view_combo()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        parts = self.parts = HeatmapParts(self, lambda head: self.exportRequested.emit(head))
        self.viewCombo, self.colormapCombo = parts.viewCombo, parts.colormapCombo
        self.scaleModeCombo, self.displayButton = parts.scaleModeCombo, parts.displayButton
        self.exportButton, self.layerBadge = parts.exportButton, parts.layerBadge
        self.logAction, self.hideFirstAction = parts.logAction, parts.hideFirstAction
        self.alibiAction = parts.alibiAction
        self.canvas, self.colorBar, self.placeholder = parts.canvas, parts.canvas.colorBar, parts.placeholder
        self.graphics = self.canvas  # the graphics view (older name)
        self.readout, self.note = parts.readout, parts.note

    def _connect(self) -> None:
        self._zoom_timer = QTimer(self, singleShot=True, interval=ZOOM_SETTLE_MS)
        self._zoom_timer.timeout.connect(self._emit_zoom)
        self._cells = HeatmapCells(self.canvas, self, self._relayout, self.shown.emit, self._zoom_timer.start)
        self._hover = HoverReadout(self.canvas, self.readout, self.hovered, self.cellHovered, self.hoverLeft)
        self.canvas.resized.connect(self._relayout)
        self.canvas.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.canvas.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.viewCombo.activated.connect(lambda index: self.set_view_target(self.viewCombo.itemData(index)))
        self.colormapCombo.currentIndexChanged.connect(self._on_appearance)
        self.scaleModeCombo.currentIndexChanged.connect(self._on_appearance)
        self.logAction.toggled.connect(self.set_log_scale)
        self.hideFirstAction.toggled.connect(self.set_hide_first_key)
        self.alibiAction.toggled.connect(self.set_show_alibi_bias)
        self.exportButton.clicked.connect(lambda: self.exportRequested.emit(self._target))

    # -- public API: content -------------------------------------------------------------------
    def add_toolbar_widget(self, widget: QWidget) -> None:
        """Let a mode add its own control (e.g. a layer selector) to the heatmap toolbar."""
        self.parts.extra.addWidget(widget)

    def add_header_widget(self, widget: QWidget) -> None:
        """Let a mode add a full-width line (e.g. a run summary) just under the toolbar."""
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout), "built in __init__"
        layout.insertWidget(1, widget)

    def source(self) -> HeatmapSource | None:
        """The source drawn now (derived from the one set when a display option asks for it)."""
        return self._source

    def displayed_map(self) -> AttentionMap | None:
        """The map on screen: what an export of "what you see" should take."""
        return None if self._source is None else self._source.map

    def set_source(self, source: HeatmapSource | None) -> None:
        """Draw a new source; keeps the view (grid / mean / head n) when it still exists."""
        self._base = source
        self._derived.forget()  # a derivation still running for an older source is dropped
        if source is None:
            self._cells.stop()
            self._source = None
            self._derived.hold(None, None)
            self.canvas.show_cells(0)
            self.canvas.hide()
            self.placeholder.show()
            self._fill_view_combo()
            return
        if self._derived.is_wanted(source):
            self._show(source)
        else:
            self._derived.derive(source, self._source)

    # -- public API: view and appearance ---------------------------------------------------------
    def view_target(self) -> select.Which:
        return self._target

    def set_view_target(self, target: select.Which) -> None:
        if target not in (ALL, MEAN) and not isinstance(target, (int, np.integer)):
            raise ValueError(f"unknown heatmap view {target!r}")
        if isinstance(target, (int, np.integer)):
            target = int(target)
        self._target = target
        if isinstance(target, int) and (self._source is None or target >= self._source.num_heads):
            return  # e.g. a session's head 7 before its 8-head result arrives: set_source shows it
        self._fill_view_combo()
        if self._source is not None:
            self._draw_all()
        self.viewChanged.emit(target)

    def colormap_name(self) -> str:
        return self.colormapCombo.currentData()

    def set_colormap_name(self, name: str) -> None:
        index = self.colormapCombo.findData(name)
        if index < 0:
            raise ValueError(f"unknown colormap {name!r}; choose one of: {', '.join(n for n, _ in COLORMAPS)}")
        self.colormapCombo.setCurrentIndex(index)

    def shared_scale(self) -> bool:
        return self.scaleModeCombo.currentData() == "shared"

    def set_shared_scale(self, shared: bool) -> None:
        self.scaleModeCombo.setCurrentIndex(0 if shared else 1)

    def log_scale(self) -> bool:
        return self._log

    def set_log_scale(self, on: bool) -> None:
        """Colour log10 of the weights (from a floor of about a tenth of 1/Lk)."""
        if bool(on) != self._log:
            self._log = bool(on)
            self.logAction.setChecked(self._log)
            self._on_appearance()

    def hide_first_key(self) -> bool:
        return self._derived.hide_first

    def set_hide_first_key(self, on: bool) -> None:
        """Leave out key 0 and renormalise the rows over the other keys (the note says so)."""
        if bool(on) != self._derived.hide_first:
            self._derived.hide_first = bool(on)
            self.hideFirstAction.setChecked(self._derived.hide_first)
            self._reapply_options()

    def show_alibi_bias(self) -> bool:
        return self._derived.bias

    def set_show_alibi_bias(self, on: bool) -> None:
        """Draw ALiBi's bias -m_h |i - j| per head instead of the weights (ALiBi maps only)."""
        if bool(on) != self._derived.bias:
            self._derived.bias = bool(on)
            self.alibiAction.setChecked(self._derived.bias)
            self._reapply_options()

    # -- public API: what is drawn (tests, zoom pictures) -----------------------------------------
    def displayed_heads(self) -> list[Head]:
        return [c.head for c in self.canvas.active()]

    def displayed_arrays(self) -> list[np.ndarray]:
        """The arrays the ImageItems draw, in displayed order (for tests and exports)."""
        return [c.image.image for c in self.canvas.active()]

    def cell_views(self) -> list[tuple[Head, pg.ViewBox, pg.ImageItem]]:
        """(head, view box, image) of each displayed heatmap: zoom pictures attach here."""
        return [(c.head, c.vb, c.image) for c in self.canvas.active()]

    def image_levels(self) -> list[tuple[float, float]]:
        return [(float(c.image.levels[0]), float(c.image.levels[1])) for c in self.canvas.active()]

    def is_building(self) -> bool:
        return len(self.canvas.active()) < len(self._heads_for_target())

    # shadows QWidget.geometry() (never called by Qt itself): the tests' name for the canvas's item rects
    def geometry(self) -> list[tuple[str, int, QRectF]]:  # type: ignore[override]
        """(kind, index, rect in the canvas) of every title, map, label band, group header and the
        colour bar: the screenshot tests check that none overlaps another."""
        return self.canvas.geometry()

    def grid_layout(self) -> GridLayout | None:
        """Where the current heatmaps sit (columns, map size, every rectangle)."""
        return self.canvas.layout

    def hover_cell(self, q: int, k: int) -> str:
        """Show the read-out for cell (q, k) of the first displayed heatmap and highlight it."""
        cells = self.canvas.active()
        if not cells:
            return ""
        self._hover.set(self._shown_source, cells[0], q, k)
        return self.readout.text()

    def highlighted_cells(self) -> list[tuple[int, int] | None]:
        return self._hover.highlighted_cells()

    def visible_region(self) -> select.Region | None:
        """((q0, q1), (k0, k1)) the enlarged heatmap shows, or None in the grid."""
        if self._target == ALL or self._source is None:
            return None
        return self._cells.visible_region(self._source.shape)

    # -- derived sources (display options that change what is drawn) -----------------------------
    def _reapply_options(self) -> None:
        if self._base is not None:
            self.set_source(self._base)
        self.appearanceChanged.emit()

    def _derived_let_go(self, why: str) -> None:
        """The ledger let go of the derived copy: the run's own source is drawn again, saying why."""
        if self._base is not None:
            self._show(self._base)
            self.note.setText(f"shown without the display option: {why}")

    # -- drawing ---------------------------------------------------------------------------------
    def _show(self, source: HeatmapSource) -> None:
        self._source = source
        self._derived.hold(source, self._base)
        self.placeholder.hide()
        self.canvas.show()
        self._cells.take_labels(source)
        if isinstance(self._target, int) and self._target >= source.num_heads:
            self._target = ALL
        self._fill_view_combo()
        self.parts.update_badges(source, self._log)
        self.note.setText(note_text(source))
        self._hover.reset()
        self._cells.look = self._look_for(source)
        self._draw_all()

    def _look_for(self, source: HeatmapSource) -> Look:
        return Look(source, self.colormap_name(), self.shared_scale(), self.log_scale())

    @property
    def _shown_source(self) -> HeatmapSource:
        """The source being drawn (the drawing and hover paths run only once one is shown)."""
        assert self._source is not None, "no source shown yet"
        return self._source

    def _heads_for_target(self) -> list[Head]:
        if self._source is None:
            return []
        return list(range(self._source.num_heads)) if self._target == ALL else [self._target]

    def _draw_all(self) -> None:
        """Draw every shown head of the current source (at once, or a few per event-loop turn)."""
        self._cells.draw(self._shown_source, self._heads_for_target(), self._target != ALL)

    @Slot()
    def _relayout(self) -> None:
        """Place every item for the current size (also on every resize: no cell is rebuilt)."""
        source = self._source
        if source is None or not self.canvas.active():
            return
        self._cells.place(source, self._heads_for_target(), self._target == ALL)

    def _fill_view_combo(self) -> None:
        self.parts.fill_view_combo(self._source, self._target)

    @Slot()
    def _on_appearance(self) -> None:
        if self._source is not None:
            self.parts.update_badges(self._source, self._log)
            self._cells.look = self._look_for(self._source)
            self._cells.repaint(self._source, self._heads_for_target())
        self.appearanceChanged.emit()

    # -- interaction -----------------------------------------------------------------------------
    @Slot(object)
    def _on_mouse_moved(self, scene_pos) -> None:
        hit = cell_at(self.canvas, self._source, scene_pos)
        if hit is None:
            self._hover.clear()
        else:
            self._hover.set(self._shown_source, *hit)

    @Slot(object)
    def _on_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or event.isAccepted():
            return
        if self._target != ALL:
            if event.double():  # back from the enlarged head (or the mean) to the grid
                self.set_view_target(ALL)
            return
        hit = cell_at(self.canvas, self._source, event.scenePos())
        if hit is not None:
            self.headClicked.emit(hit[0].head)
            self.set_view_target(hit[0].head)

    @Slot()
    def _emit_zoom(self) -> None:
        region = self.visible_region()
        if region is not None:
            self.zoomChanged.emit(self._target, region)


__all__ = ["COLORMAPS", "HINT", "SCALE_MODES", "HeatmapPanel", "format_weight", "readout_text"]
