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
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from attndesk.core import select
from attndesk.core.types import MEAN, AttentionMap, Head
from attndesk.render import colormaps
from attndesk.render.layout import GridLayout
from attndesk.session.ledger import Holding, MemoryLedger, arrays_of

from ..jobs.background import Background
from ..jobs.channels import DERIVED
from ..sources.heatmap_source import ALIBI_BIAS, WEIGHTS, HeatmapSource
from ..sources.long_source import source_for_map
from ..styles import restyle
from .heatmap_grid import Cell, HeatmapCanvas, cell_levels, masked_path
from .token_axis import AxisLabels, label_font

COLORMAPS = (("viridis", "viridis"), ("magma", "magma"), ("CET-L1", "grey (CET-L1)"))
SCALE_MODES = (("shared", "shared"), ("per-head", "per head"))
ALL = select.ALL
# A new cell takes ~5 ms (up to ~35 ms when the CPUs are busy), and the view repaints after every
# slice: a slice adds cells until this much time has passed (so mostly one), keeping each
# event-loop turn well under the 100 ms the window may stall.
_SLICE_S = 0.004
# Up to this many tokens per axis a result is drawn in one event-loop turn (8 heads ~20 ms).
_QUICK_TOKENS = 512
# Deriving a source (hiding the first key) above this many cells runs in a pool thread.
_SYNC_CELLS = 1_000_000
ZOOM_SETTLE_MS = 120
HINT = "Hover a cell for its exact weight · click a heatmap to enlarge it, double-click to go back"


def readout_text(source: HeatmapSource, head: Head, q: int, k: int) -> str:
    """The hover line, e.g. ``head 2 · query "cat" (3) → key "sat" (2): 0.2314``."""
    value = source.value_at(head, q, k)
    who = "mean of heads" if head == MEAN else source.head_title(head)
    if head != MEAN and source.map.groups > 1:
        who += f" (kv {source.map.kv_head_of(head)})"
    masked = source.mask is not None and not bool(source.mask[q, k])
    tail = " (masked)" if masked else ""
    what = "bias " if source.value_name == "bias" else ""
    return (
        f'{who} · query "{source.query_labels[q]}" ({q}) → key "{source.key_labels[k]}" '
        f"({k + source.key_offset}): {what}{format_weight(value)}{tail}"
    )


def format_weight(value: float) -> str:
    """Four decimals; three significant digits below 0.01, where long documents' weights
    (about 1/L) would otherwise all read 0.0001 or 0.0000."""
    return f"{value:.4f}" if value == 0 or abs(value) >= 0.01 else f"{value:.3g}"


class _FootLabel(QLabel):
    """A one-line footer label that never widens the window and never runs into its neighbour:
    it paints its text elided to its own width (the whole text is its tooltip). ``share`` caps its
    preferred width at that fraction of the panel, so the read-out always keeps room."""

    def __init__(self, text: str = "", *, share: float = 1.0, **kw) -> None:
        super().__init__(text, **kw)
        self._share = share
        self.setMinimumWidth(40)
        self.setTextFormat(Qt.TextFormat.PlainText)  # tokens may contain "<"

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text.strip())
        self.updateGeometry()

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        parent = self.parentWidget()
        cap = int(parent.width() * self._share) if parent is not None else hint.width()
        return QSize(min(hint.width(), max(40, cap)), hint.height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self.minimumWidth(), super().minimumSizeHint().height())

    def shown_text(self) -> str:
        """The text as painted (elided to the label's width)."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(
            self.contentsRect(), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), self.shown_text()
        )
        painter.end()


class _Look:
    """Colours shared by every cell of one source: colormap, scale, hatch and rectangle."""

    def __init__(self, panel: HeatmapPanel, source: HeatmapSource) -> None:
        self.cmap = pg.colormap.get(panel.colormap_name())
        self.shared = panel.shared_scale()
        self.log = panel.log_scale() and source.value_name == "weight"
        self.floor = colormaps.log_floor(source.shape[1])
        heads = [source.level_range(h) for h in range(source.num_heads)] + [source.level_range(MEAN)]
        self.range = (min(lo for lo, _ in heads), max(hi for _, hi in heads))
        self.cmap_name = panel.colormap_name()
        self.masked = masked_path(source.display_mask(), source.factor, source.shape)
        self.rect = QRectF(0, 0, source.shape[1], source.shape[0])
        self._source = source

    def levels(self, head: Head | None) -> tuple[float, float]:
        """Colour levels of ``head`` (None: the range over every head and the mean)."""
        lo, hi = self.range if self.shared or head is None else self._source.level_range(head)
        if self.log:
            return cell_levels(np.log10(self.floor), float(np.log10(max(hi, self.floor))))
        return cell_levels(lo, hi if hi > lo else lo + 1.0)

    def image(self, data: np.ndarray) -> np.ndarray:
        return colormaps.to_log(data, self.floor) if self.log else data


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
        self._hover: tuple[int, int] | None = None
        self._labels: tuple[AxisLabels, AxisLabels] | None = None
        self._look: _Look | None = None
        self._build_token = 0
        self._log = self._hide_first = self._bias = False
        self._drawn: tuple | None = None  # (heads, shape) the cells show
        self._bar_axis: tuple | None = None  # (ticks, label) the colour bar's axis shows
        self.memory_budget: Callable[[], int | None] = lambda: None  # bytes a derived copy may share with its run
        self.ledger = MemoryLedger()  # the window's (set by it): a derived source is held there
        self._derived_held: Holding | None = None
        self._derivation = Background(self, DERIVED)  # a derived source built off the GUI thread, newest only
        self._build_toolbar()
        self._build_body()
        self._connect()
        self._fill_view_combo()

    # -- construction ----------------------------------------------------------------------------
    def _build_toolbar(self) -> None:
        self.viewCombo = QComboBox(objectName="heatmapViewCombo")
        self.viewCombo.setToolTip(
            "Show every head, the mean over heads, or one head enlarged (click a heatmap to enlarge it)"
        )
        self.colormapCombo = QComboBox(objectName="colormapCombo")
        for name, label in COLORMAPS:
            self.colormapCombo.addItem(label, name)
        self.scaleModeCombo = QComboBox(objectName="scaleModeCombo")
        for name, label in SCALE_MODES:
            self.scaleModeCombo.addItem(label, name)
        self.scaleModeCombo.setToolTip(
            "Shared: one colour scale for all heads (compare heads). Per head: each head from 0 to its own maximum."
        )
        self.displayButton = QToolButton(objectName="heatmapDisplayButton", text="Display")
        self.displayButton.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.displayButton.setToolTip("Colour and content options for decoders and ALiBi models")
        menu = QMenu(self.displayButton)
        self.logAction = menu.addAction("Log colour scale (sink-aware)")
        self.logAction.setToolTip(
            "Colour log10 of the weights: small weights stay visible next to a "
            "decoder's first token, which takes most of each row"
        )
        self.hideFirstAction = menu.addAction("Hide the first token (rows renormalised)")
        self.hideFirstAction.setToolTip(
            "Leave out key 0 (a decoder's attention sink) and renormalise each row "
            "over the other keys: the weights shown are NOT the model's"
        )
        self.alibiAction = menu.addAction("Show ALiBi's bias instead of the weights")
        self.alibiAction.setToolTip("The bias -m·|i − j| ALiBi adds to each head's scores")
        for action in (self.logAction, self.hideFirstAction, self.alibiAction):
            action.setCheckable(True)
        self.alibiAction.setVisible(False)
        self.displayButton.setMenu(menu)
        # what is special about this picture: local/global layer, window, hidden first token, log colours
        self.layerBadge = _FootLabel("", share=0.5, objectName="heatmapLayerBadge")
        self.layerBadge.setStyleSheet("color: #9a4b00; font-weight: bold;")
        self.layerBadge.setMinimumWidth(0)
        self.layerBadge.hide()
        self.exportButton = QPushButton("Export…", objectName="heatmapExportButton")
        self.exportButton.setToolTip("Export the heatmaps on screen (Ctrl+E)")
        self._bar = QHBoxLayout()
        self._bar.setContentsMargins(4, 2, 4, 2)
        for label, widget in (
            ("Show", self.viewCombo),
            ("Colormap", self.colormapCombo),
            ("Scale", self.scaleModeCombo),
        ):
            self._bar.addWidget(QLabel(label))
            self._bar.addWidget(widget)
            self._bar.addSpacing(2)
        self._bar.addWidget(self.displayButton)
        self._extra = QHBoxLayout()  # modes add controls here (e.g. a layer selector)
        self._bar.addLayout(self._extra)
        self._bar.addWidget(self.layerBadge)  # elided to the room left, never widening the window
        self._bar.addStretch(1)
        self._bar.addWidget(self.exportButton)

    def _build_body(self) -> None:
        self.canvas = HeatmapCanvas(lambda head: self.exportRequested.emit(head))
        self.graphics = self.canvas  # the graphics view (older name)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.colorBar = self.canvas.colorBar
        self.readout = _FootLabel(" ", objectName="heatmapReadout")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = _FootLabel("", share=0.45, objectName="heatmapNote")
        self.note.setStyleSheet("color: #666;")
        self.placeholder = QLabel("Type some text to see its attention.", alignment=Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setStyleSheet("color: #777; font-size: 14px;")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(self._bar)
        layout.addWidget(self.placeholder, 1)
        layout.addWidget(self.canvas, 1)
        foot = QHBoxLayout()
        foot.setContentsMargins(6, 0, 6, 2)
        foot.setSpacing(12)
        foot.addWidget(self.readout, 1)
        foot.addWidget(self.note)
        layout.addLayout(foot)
        self.canvas.hide()

    def _connect(self) -> None:
        self._zoom_timer = QTimer(self, singleShot=True, interval=ZOOM_SETTLE_MS)
        self._zoom_timer.timeout.connect(self._emit_zoom)
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
        self._extra.addWidget(widget)

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
        self._derivation.forget()  # a derivation still running for an older source is dropped
        if source is None:
            self._build_token += 1
            self._source = None
            self._hold_derived(None)
            self.canvas.show_cells(0)
            self.canvas.hide()
            self.placeholder.show()
            self._fill_view_combo()
            return
        if self._wanted(source) == (source.key_offset > 0, source.value_name == "bias"):
            self._show(source)
        else:
            self._derive(source)

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
        if bool(on) == self._log:
            return
        self._log = bool(on)
        self.logAction.setChecked(self._log)
        self._on_appearance()

    def hide_first_key(self) -> bool:
        return self._hide_first

    def set_hide_first_key(self, on: bool) -> None:
        """Leave out key 0 and renormalise the rows over the other keys (the note says so)."""
        if bool(on) == self._hide_first:
            return
        self._hide_first = bool(on)
        self.hideFirstAction.setChecked(self._hide_first)
        self._reapply_options()

    def show_alibi_bias(self) -> bool:
        return self._bias

    def set_show_alibi_bias(self, on: bool) -> None:
        """Draw ALiBi's bias -m_h |i - j| per head instead of the weights (ALiBi maps only)."""
        if bool(on) == self._bias:
            return
        self._bias = bool(on)
        self.alibiAction.setChecked(self._bias)
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
        self._set_hover(cells[0], q, k)
        return self.readout.text()

    def highlighted_cells(self) -> list[tuple[int, int] | None]:
        out = []
        for c in self.canvas.active():
            r = c.highlight.rect()
            out.append((int(r.y()), int(r.x())) if c.highlight.isVisible() else None)
        return out

    def visible_region(self) -> select.Region | None:
        """((q0, q1), (k0, k1)) the enlarged heatmap shows, or None in the grid."""
        cells = self.canvas.active()
        if self._target == ALL or len(cells) != 1 or self._source is None:
            return None
        (x0, x1), (y0, y1) = cells[0].vb.viewRange()
        lq, lk = self._source.shape
        q0, q1 = max(0, int(np.floor(y0))), min(lq, int(np.ceil(y1)))
        k0, k1 = max(0, int(np.floor(x0))), min(lk, int(np.ceil(x1)))
        return ((q0, q1), (k0, k1)) if q1 > q0 and k1 > k0 else None

    # -- derived sources (display options that change what is drawn) -----------------------------
    def _wanted(self, source: HeatmapSource) -> tuple[bool, bool]:
        """(hide the first key, show the ALiBi bias) as the options ask and the map allows."""
        base = source.base_map
        bias = self._bias and base.alibi_slopes is not None
        hide = self._hide_first and not bias and base.pyramid is None and base.shape[1] > 1
        return hide, bias

    def _reapply_options(self) -> None:
        if self._base is not None:
            self.set_source(self._base)
        self.appearanceChanged.emit()

    def _derive(self, source: HeatmapSource) -> None:
        """Build the source the options ask for from ``source``'s map: here when small, else in a
        pool thread (the previous picture stays until it is ready)."""
        hide, bias = self._wanted(source)
        base = source.base_map
        show = ALIBI_BIAS if bias else WEIGHTS
        budget = self.memory_budget()
        build = lambda: source_for_map(base, hide_first_key=hide, show=show, budget=budget)  # noqa: E731
        h, (lq, lk) = base.num_heads, base.shape
        if bias or h * lq * lk <= _SYNC_CELLS:
            try:
                self._show(build())
            except ValueError as exc:
                self._show(source)
                self.note.setText(f"{exc}")
            return
        if self._source is None:
            self._show(source)
        self.note.setText("hiding the first token (renormalising the rows)…")
        # ValueError, MemoryError: reported in the note; the base source stays
        self._derivation.start(
            build, done=self._show, failed=lambda exc: self.note.setText(str(exc)), expected=(ValueError, MemoryError)
        )

    # -- drawing ---------------------------------------------------------------------------------
    def _show(self, source: HeatmapSource) -> None:
        self._source = source
        self._hold_derived(source)
        self.placeholder.hide()
        self.canvas.show()

        def kept(old: AxisLabels | None, tokens) -> AxisLabels:  # the old labels when the tokens are the same
            return old if old is not None and old.tokens == list(tokens) else AxisLabels(tokens, label_font())

        old_rows, old_cols = self._labels or (None, None)
        self._labels = (kept(old_rows, source.query_labels), kept(old_cols, source.key_labels))
        if isinstance(self._target, int) and self._target >= source.num_heads:
            self._target = ALL
        self._fill_view_combo()
        self._update_badges(source)
        self._update_note(source)
        self._hover = None
        self._show_hint()
        self._look = _Look(self, source)
        self._draw_all()

    def _hold_derived(self, source: HeatmapSource | None) -> None:
        """(None: only let go of the held copy.) A source derived by a display option (the first key hidden, ALiBi's bias) is a copy of the
        run's weights: held in the memory ledger, protected while drawn. Let go, the run's own
        source is drawn again (the option's note says why)."""
        held, self._derived_held = self._derived_held, None
        if held is not None:
            held.release()
        if source is self._base or self._base is None:
            return
        cell: list[Holding] = []

        def release(why: str) -> None:
            if cell and cell[0] is self._derived_held and self._base is not None:
                self._derived_held = None
                self._show(self._base)
                self.note.setText(f"shown without the display option: {why}")

        cell.append(
            self.ledger.hold(
                "heatmaps", "the heatmaps' derived copy", arrays_of(source, 3), release, protected=True, strict=False
            )
        )
        self._derived_held = cell[0]

    @property
    def _shown_source(self) -> HeatmapSource:
        """The source being drawn (the drawing and hover paths run only once one is shown)."""
        assert self._source is not None, "no source shown yet"
        return self._source

    @property
    def _shown_look(self) -> _Look:
        assert self._look is not None, "no source shown yet"
        return self._look

    @property
    def _shown_labels(self) -> tuple[AxisLabels, AxisLabels]:
        assert self._labels is not None, "no source shown yet"
        return self._labels

    def _heads_for_target(self) -> list[Head]:
        if self._source is None:
            return []
        target = self._target
        return list(range(self._source.num_heads)) if target == ALL else [target]

    def _draw_all(self) -> None:
        """Give every shown head a cell (pooled cells are reused, new ones built) and place them.

        New data in the same heads and shape, a short text or one enlarged head is drawn now
        (~5-20 ms, the fast path of every parameter change). A new cell costs ~5 ms and a cell of 2,048 labelled
        tokens ~10 ms to lay out and paint, so otherwise cells appear a few per event-loop turn
        and ``shown`` is emitted when the last one is drawn: the window never stalls."""
        self._build_token += 1
        token = self._build_token
        heads = self._heads_for_target()
        drawn = (tuple(heads), self._shown_source.shape)
        quick = len(heads) <= len(self.canvas.cells) and (
            drawn == self._drawn or max(drawn[1]) <= _QUICK_TOKENS or len(heads) == 1
        )
        self._drawn = drawn
        self._update_colorbar()
        if quick:
            self.canvas.show_cells(len(heads))
            for cell, head in zip(self.canvas.cells, heads):
                self._assign(cell, head)
            self._relayout()
            self.shown.emit()
            return
        self.canvas.show_cells(0)
        pending = list(heads)

        def step() -> None:
            if token != self._build_token:
                return  # a newer source or view replaced this build
            start = time.monotonic()
            while pending and time.monotonic() - start < _SLICE_S:
                index = len(heads) - len(pending)
                cell = self.canvas.cells[index] if index < len(self.canvas.cells) else self.canvas.new_cell()
                self._assign(cell, pending.pop(0))
                self.canvas.show_cells(index + 1)
            self._relayout()
            if pending:
                # a timer bound to the panel: a build still in slices when the window closes just stops
                QTimer.singleShot(1, self, step)
            else:
                self.shown.emit()

        QTimer.singleShot(0, self, step)

    def _assign(self, cell: Cell, head: Head) -> None:
        """Point ``cell`` at ``head`` of the current source: title, labels, image, range."""
        source, single, labels = self._shown_source, self._target != ALL, self._shown_labels
        cell.head = head
        cell.title_text = source.head_title(head)
        cell.left.set_labels(labels[0])
        cell.bottom.set_labels(labels[1])
        cell.highlight.hide()
        self._paint_cell(cell)
        L, Lk = source.shape
        window = source.map.window if source.value_name == "weight" else None
        self.canvas.set_band(cell, L, Lk, window, source.causal, source.key_offset)
        cell.vb.setMouseEnabled(single, single)
        cell.vb.setLimits(xMin=0, xMax=Lk, yMin=0, yMax=L)
        cell.vb.setRange(xRange=(0, Lk), yRange=(0, L), padding=0)
        if single and not getattr(cell.vb, "_zoom_watched", False):
            cell.vb.sigRangeChanged.connect(lambda *_a: self._zoom_timer.start())
            cell.vb._zoom_watched = True

    def _paint_cell(self, cell: Cell) -> None:
        look = self._shown_look
        cell.image.setColorMap(look.cmap)
        cell.image.setImage(
            look.image(self._shown_source.display_matrix(cell.head)), autoLevels=False, levels=look.levels(cell.head)
        )
        cell.image.setRect(look.rect)
        self.canvas.set_masked(cell, look.masked, look.cmap_name)

    @Slot()
    def _relayout(self) -> None:
        """Place every item for the current size (also on every resize: no cell is rebuilt)."""
        source = self._source
        if source is None or not self.canvas.active():
            return
        heads = self._heads_for_target()
        if len(self.canvas.active()) > len(heads):
            return  # fewer heads than cells shown (the target or the source changed): the new build places them
        base = source.map
        group = base.groups if self._target == ALL and base.groups > 1 else 1
        labels = (
            [select.group_label(base, kv, range(kv * group, (kv + 1) * group)) for kv in range(base.num_heads // group)]
            if group > 1
            else []
        )
        axes = self._shown_labels
        widest = (axes[0].widest, axes[1].widest)
        spec = self.canvas.spec(len(heads), source.shape, widest, group)
        self.canvas.place(spec, labels)

    def _update_colorbar(self) -> None:
        """One bar for every cell: the shared range, one enlarged head's own range, or (several
        heads each on its own scale) the fraction of each head's range; powers of ten when log."""
        look, bar = self._shown_look, self.colorBar
        bar.setColorMap(look.cmap)
        shown = self._heads_for_target()
        relative = not look.shared and len(shown) > 1 and not look.log
        lo, hi = (0.0, 1.0) if relative else look.levels(None if look.shared or len(shown) > 1 else shown[0])
        bar.setLevels(values=(lo, hi))
        name = "bias" if self._shown_source.value_name == "bias" else "weight"
        axis: tuple[list[list[tuple[float, str]]] | None, str]
        if look.log:
            ticks = [(float(e), f"{10.0**e:g}") for e in range(int(np.ceil(lo - 1e-9)), int(np.floor(hi + 1e-9)) + 1)]
            axis = ([ticks], f"{name} (log scale)")
        else:
            axis = (None, f"fraction of each head's {'range' if name == 'bias' else 'max'}" if relative else name)
        if axis != self._bar_axis:  # a label is a rich-text document: remade only when it changes
            self._bar_axis = axis
            bar.axis.setTicks(axis[0])
            bar.axis.setLabel(axis[1])

    def _update_badges(self, source: HeatmapSource) -> None:
        """The toolbar line that says what is special about this picture, and the options it allows."""
        base = source.base_map
        parts = []
        if base.layer_kind:
            parts.append(f"{base.layer_kind} layer")
        if base.window:
            parts.append(f"window {base.window}")
        if source.key_offset:
            parts.append(f"{base.keys[0]!r} hidden, renormalised")
        if source.value_name == "bias":
            parts.append("ALiBi bias, not weights")
        elif self._log:
            parts.append("log colours")
        self.layerBadge.setText(" · ".join(parts))
        self.layerBadge.setVisible(bool(parts))
        self.alibiAction.setVisible(base.alibi_slopes is not None)
        self.hideFirstAction.setEnabled(base.pyramid is None)

    def _update_note(self, source: HeatmapSource) -> None:
        notes = [source.downsample_note()]
        if source.display_mask() is not None:
            notes.insert(0, "hatched = masked (the query may not attend there)")
        if source.map.window and source.value_name == "weight":
            notes.append(f"red line = the window's edge (|i − j| < {source.map.window})")
        self.note.setText(" · ".join(n for n in notes if n))

    def _fill_view_combo(self) -> None:
        combo = self.viewCombo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("all heads", ALL)
        combo.addItem("mean over heads", MEAN)
        if self._source is not None:
            for h in range(self._source.num_heads):
                combo.addItem(f"{self._source.map.label(h)} (enlarged)", h)
        combo.setCurrentIndex(max(0, combo.findData(self._target)))
        combo.blockSignals(False)

    @Slot()
    def _on_appearance(self) -> None:
        if self._source is not None:
            self._update_badges(self._source)
            self._look = _Look(self, self._source)
            for cell in self.canvas.active():
                self._paint_cell(cell)
            self._update_colorbar()
        self.appearanceChanged.emit()

    # -- interaction -----------------------------------------------------------------------------
    def _cell_at(self, scene_pos) -> tuple[Cell, int, int] | None:
        if self._source is None:
            return None
        L, Lk = self._source.shape
        for cell in self.canvas.active():
            if cell.vb.sceneBoundingRect().contains(scene_pos):
                point = cell.vb.mapSceneToView(scene_pos)
                k, q = int(np.floor(point.x())), int(np.floor(point.y()))
                if 0 <= q < L and 0 <= k < Lk:
                    return cell, q, k
        return None

    def _set_hover(self, cell: Cell, q: int, k: int) -> None:
        self._hover = (q, k)
        for c in self.canvas.active():  # the same cell in every head
            c.highlight.setRect(QRectF(k, q, 1, 1))
            c.highlight.show()
        text = readout_text(self._shown_source, cell.head, q, k)
        restyle(self.readout, "")
        self.readout.setText(text)
        self.hovered.emit(text)
        self.cellHovered.emit(cell.head, q, k)

    def _clear_hover(self) -> None:
        if self._hover is None:
            return
        self._hover = None
        for c in self.canvas.active():
            c.highlight.hide()
        self._show_hint()
        self.hovered.emit("")
        self.hoverLeft.emit()

    def _show_hint(self) -> None:
        restyle(self.readout, "color: #888;")
        self.readout.setText(HINT)

    @Slot(object)
    def _on_mouse_moved(self, scene_pos) -> None:
        hit = self._cell_at(scene_pos)
        if hit is None:
            self._clear_hover()
        else:
            self._set_hover(*hit)

    @Slot(object)
    def _on_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or event.isAccepted():
            return
        if self._target != ALL:
            if event.double():  # back from the enlarged head (or the mean) to the grid
                self.set_view_target(ALL)
            return
        hit = self._cell_at(event.scenePos())
        if hit is not None:
            self.headClicked.emit(hit[0].head)
            self.set_view_target(hit[0].head)

    @Slot()
    def _emit_zoom(self) -> None:
        region = self.visible_region()
        if region is not None:
            self.zoomChanged.emit(self._target, region)
