"""The heatmap panel's hover read-out: which cell the mouse is on, the exact value it reads (one
line in the footer), and that cell highlighted in every head shown."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, SignalInstance

from attndesk.attention.types import MEAN, Head

from ...sources.heatmap_source import HeatmapSource
from ...widgets.styles import restyle
from .grid import Cell, HeatmapCanvas
from .parts import FootLabel

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


def cell_at(canvas: HeatmapCanvas, source: HeatmapSource | None, scene_pos: QPointF) -> tuple[Cell, int, int] | None:
    """(cell, query, key) under ``scene_pos`` among the cells drawn, or None."""
    if source is None:
        return None
    L, Lk = source.shape
    for cell in canvas.active():
        if cell.vb.sceneBoundingRect().contains(scene_pos):
            point = cell.vb.mapSceneToView(scene_pos)
            k, q = int(np.floor(point.x())), int(np.floor(point.y()))
            if 0 <= q < L and 0 <= k < Lk:
                return cell, q, k
    return None


class HoverReadout:
    """Shows the hovered cell in ``readout`` and emits the panel's ``hovered(text)`` (``""`` on
    leaving), ``cellHovered(head, q, k)`` and ``hoverLeft()``; between hovers the label shows the hint."""

    def __init__(
        self,
        canvas: HeatmapCanvas,
        readout: FootLabel,
        hovered: SignalInstance,
        cell: SignalInstance,
        left: SignalInstance,
    ) -> None:
        self.canvas, self.readout = canvas, readout
        self._hovered, self._cell_hovered, self._left = hovered, cell, left
        self.cell: tuple[int, int] | None = None  # (query, key) hovered

    def set(self, source: HeatmapSource, cell: Cell, q: int, k: int) -> None:
        """Highlight (q, k) in every head and read out its value in ``cell``'s head."""
        self.cell = (q, k)
        for c in self.canvas.active():  # the same cell in every head
            c.highlight.setRect(QRectF(k, q, 1, 1))
            c.highlight.show()
        text = readout_text(source, cell.head, q, k)
        restyle(self.readout, "")
        self.readout.setText(text)
        self._hovered.emit(text)
        self._cell_hovered.emit(cell.head, q, k)

    def clear(self) -> None:
        """The mouse left the cells: no highlight, the hint back."""
        if self.cell is None:
            return
        self.cell = None
        for c in self.canvas.active():
            c.highlight.hide()
        self.show_hint()
        self._hovered.emit("")
        self._left.emit()

    def reset(self) -> None:
        """A new picture: nothing hovered, the hint shown (no signal)."""
        self.cell = None
        self.show_hint()

    def show_hint(self) -> None:
        restyle(self.readout, "color: #888;")
        self.readout.setText(HINT)

    def highlighted_cells(self) -> list[tuple[int, int] | None]:
        """(query, key) highlighted in each cell drawn (None where none is)."""
        out = []
        for c in self.canvas.active():
            r = c.highlight.rect()
            out.append((int(r.y()), int(r.x())) if c.highlight.isVisible() else None)
        return out
