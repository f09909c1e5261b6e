"""Drawing a heatmap source into the canvas's cells: one cell per shown head (pooled cells reused,
new ones built a few per event-loop turn), their colours, the shared colour bar and the grid's
placement. The panel decides what is shown (source, heads, view); this module draws it.

Each heatmap is a pyqtgraph ``ImageItem`` over the token rectangle (0, 0, Lk, L), so cell (q, k)
is the unit square at x=k, y=q whatever the downsampling."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QRectF, QTimer

from attndesk.attention.types import MEAN, Head
from attndesk.render import colormaps
from attndesk.runs import select

from ...sources.heatmap_source import HeatmapSource
from ...widgets.token_axis import AxisLabels, label_font
from .grid import Cell, HeatmapCanvas, cell_levels, masked_path

# The view repaints after every slice: a slice adds cells until this much time has passed (so
# mostly one), keeping each event-loop turn well under the 100 ms the window may stall (a cell's
# cost: docs/benchmarks.md, "Figures behind the window's constants").
SLICE_S = 0.004
# Up to this many tokens per axis a result is drawn in one event-loop turn.
QUICK_TOKENS = 512


class Look:
    """Colours shared by every cell of one source: colormap, scale, hatch and rectangle."""

    def __init__(self, source: HeatmapSource, cmap_name: str, shared: bool, log: bool) -> None:
        self.cmap = pg.colormap.get(cmap_name)
        self.shared = shared
        self.log = log and source.value_name == "weight"
        self.floor = colormaps.log_floor(source.shape[1])
        heads = [source.level_range(h) for h in range(source.num_heads)] + [source.level_range(MEAN)]
        self.range = (min(lo for lo, _ in heads), max(hi for _, hi in heads))
        self.cmap_name = cmap_name
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


class HeatmapCells:
    """Draws into ``canvas``: ``relayout`` places the cells, ``shown`` is called once every cell of
    a build is drawn, ``zoomed`` whenever an enlarged head's visible range moves. Slice timers are
    bound to ``owner``, so a build still in slices when the window closes just stops."""

    def __init__(
        self,
        canvas: HeatmapCanvas,
        owner: QObject,
        relayout: Callable[[], None],
        shown: Callable[[], None],
        zoomed: Callable[[], None],
    ) -> None:
        self.canvas, self._owner = canvas, owner
        self._relayout, self._shown, self._zoomed = relayout, shown, zoomed
        self.look: Look | None = None
        self.labels: tuple[AxisLabels, AxisLabels] | None = None
        self._token = 0
        self._drawn: tuple | None = None  # (heads, shape) the cells show
        self._bar_axis: tuple | None = None  # (ticks, label) the colour bar's axis shows

    def stop(self) -> None:
        """Drop a build still in slices (a newer source, or none)."""
        self._token += 1

    def take_labels(self, source: HeatmapSource) -> None:
        """The axis labels of ``source`` (the old ones kept when the tokens are the same)."""

        def kept(old: AxisLabels | None, tokens) -> AxisLabels:
            return old if old is not None and old.tokens == list(tokens) else AxisLabels(tokens, label_font())

        old_rows, old_cols = self.labels or (None, None)
        self.labels = (kept(old_rows, source.query_labels), kept(old_cols, source.key_labels))

    @property
    def shown_look(self) -> Look:
        assert self.look is not None, "no source shown yet"
        return self.look

    @property
    def shown_labels(self) -> tuple[AxisLabels, AxisLabels]:
        assert self.labels is not None, "no source shown yet"
        return self.labels

    def draw(self, source: HeatmapSource, heads: list[Head], single: bool) -> None:
        """Give every head a cell (pooled cells are reused, new ones built) and place them.

        New data in the same heads and shape, a short text or one enlarged head is drawn now
        (the fast path of every parameter change); otherwise cells appear a few per event-loop
        turn and ``shown`` is called when the last one is drawn: the window never stalls."""
        self._token += 1
        drawn = (tuple(heads), source.shape)
        quick = len(heads) <= len(self.canvas.cells) and (
            drawn == self._drawn or max(drawn[1]) <= QUICK_TOKENS or len(heads) == 1
        )
        self._drawn = drawn
        self.update_colorbar(source, heads)
        if quick:
            self.canvas.show_cells(len(heads))
            for cell, head in zip(self.canvas.cells, heads):
                self._assign(cell, head, source, single)
            self._relayout()
            self._shown()
            return
        self.canvas.show_cells(0)
        self._draw_in_slices(source, heads, single)

    def _draw_in_slices(self, source: HeatmapSource, heads: list[Head], single: bool) -> None:
        token, pending = self._token, list(heads)

        def step() -> None:
            if token != self._token:
                return  # a newer source or view replaced this build
            start = time.monotonic()
            while pending and time.monotonic() - start < SLICE_S:
                index = len(heads) - len(pending)
                cell = self.canvas.cells[index] if index < len(self.canvas.cells) else self.canvas.new_cell()
                self._assign(cell, pending.pop(0), source, single)
                self.canvas.show_cells(index + 1)
            self._relayout()
            if pending:
                QTimer.singleShot(1, self._owner, step)
            else:
                self._shown()

        QTimer.singleShot(0, self._owner, step)

    def _assign(self, cell: Cell, head: Head, source: HeatmapSource, single: bool) -> None:
        """Point ``cell`` at ``head`` of ``source``: title, labels, image, range."""
        labels = self.shown_labels
        cell.head = head
        cell.title_text = source.head_title(head)
        cell.left.set_labels(labels[0])
        cell.bottom.set_labels(labels[1])
        cell.highlight.hide()
        self.paint(cell, source)
        L, Lk = source.shape
        window = source.map.window if source.value_name == "weight" else None
        self.canvas.set_band(cell, L, Lk, window, source.causal, source.key_offset)
        cell.vb.setMouseEnabled(single, single)
        cell.vb.setLimits(xMin=0, xMax=Lk, yMin=0, yMax=L)
        cell.vb.setRange(xRange=(0, Lk), yRange=(0, L), padding=0)
        if single and not getattr(cell.vb, "_zoom_watched", False):
            cell.vb.sigRangeChanged.connect(lambda *_a: self._zoomed())
            cell.vb._zoom_watched = True

    def paint(self, cell: Cell, source: HeatmapSource) -> None:
        """Colour ``cell``'s image with the current look."""
        look = self.shown_look
        cell.image.setColorMap(look.cmap)
        cell.image.setImage(
            look.image(source.display_matrix(cell.head)), autoLevels=False, levels=look.levels(cell.head)
        )
        cell.image.setRect(look.rect)
        self.canvas.set_masked(cell, look.masked, look.cmap_name)

    def repaint(self, source: HeatmapSource, heads: list[Head]) -> None:
        """Recolour the cells drawn and the colour bar (a new look, same data)."""
        for cell in self.canvas.active():
            self.paint(cell, source)
        self.update_colorbar(source, heads)

    def place(self, source: HeatmapSource, heads: list[Head], grid: bool) -> None:
        """Place every item for the current size (also on every resize: no cell is rebuilt)."""
        if len(self.canvas.active()) > len(heads):
            return  # fewer heads than cells shown (the target or the source changed): the new build places them
        base = source.map
        group = base.groups if grid and base.groups > 1 else 1
        labels = (
            [select.group_label(base, kv, range(kv * group, (kv + 1) * group)) for kv in range(base.num_heads // group)]
            if group > 1
            else []
        )
        axes = self.shown_labels
        widest = (axes[0].widest, axes[1].widest)
        spec = self.canvas.spec(len(heads), source.shape, widest, group)
        self.canvas.place(spec, labels)

    def visible_region(self, shape: tuple[int, int]) -> select.Region | None:
        """((q0, q1), (k0, k1)) the one enlarged cell shows of a ``shape`` source, or None."""
        cells = self.canvas.active()
        if len(cells) != 1:
            return None
        (x0, x1), (y0, y1) = cells[0].vb.viewRange()
        lq, lk = shape
        q0, q1 = max(0, int(np.floor(y0))), min(lq, int(np.ceil(y1)))
        k0, k1 = max(0, int(np.floor(x0))), min(lk, int(np.ceil(x1)))
        return ((q0, q1), (k0, k1)) if q1 > q0 and k1 > k0 else None

    def update_colorbar(self, source: HeatmapSource, shown: list[Head]) -> None:
        """One bar for every cell: the shared range, one enlarged head's own range, or (several
        heads each on its own scale) the fraction of each head's range; powers of ten when log."""
        look, bar = self.shown_look, self.canvas.colorBar
        bar.setColorMap(look.cmap)
        relative = not look.shared and len(shown) > 1 and not look.log
        lo, hi = (0.0, 1.0) if relative else look.levels(None if look.shared or len(shown) > 1 else shown[0])
        bar.setLevels(values=(lo, hi))
        name = "bias" if source.value_name == "bias" else "weight"
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
