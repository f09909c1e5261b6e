"""``LayerHeadGrid`` (objectName ``layerHeadGrid``), the pretrained mode's model view: every
layer x head as a small heatmap (painted by ``painting.LayerGridPainting``). Click one ->
``headActivated(layer, head)``; Ctrl+click toggles ablating that head ->
``ablationChanged(list[(layer, head)])``. Hover -> ``headHovered(layer, head)`` and a tooltip.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from attndesk.attention.types import head_name
from attndesk.render.colormaps import lookup_table

from .painting import GRID_HINT, SCALES, LayerGridPainting, grid_weights, painting_of


class LayerHeadGrid(QWidget):
    """Every layer x head of a pretrained run as a thumbnail; click to open one large."""

    headActivated = Signal(int, int)  # layer, head: clicked (or Enter on the current one)
    headHovered = Signal(int, int)  # layer, head under the mouse; (-1, -1) when it leaves
    ablationChanged = Signal(list)  # the full sorted list of (layer, head) pairs to ablate

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("layerHeadGrid")
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._painting: LayerGridPainting | None = None
        self._current: tuple[int, int] | None = None
        self._hover: tuple[int, int] | None = None
        self._ablated: set[tuple[int, int]] = set()
        self._colormap, self._scale = "viridis", "per-head"
        self._source: tuple | None = None  # what set_weights got, to rebuild on colormap/scale change

    # -- feeding it ---------------------------------------------------------------------------
    def set_result(self, result, *, hide_special: bool = False) -> None:
        """Show a ``PretrainedResult``; with ``hide_special`` [CLS]/[SEP]/[PAD] rows and columns are
        left out (rows NOT re-normalised; the caption says so)."""
        self._ablated = set(result.ablate)
        weights, mask, hide_special, hidden = grid_weights(result, hide_special)
        self.set_weights(weights, mask=mask, hide_special=hide_special, hidden_share=hidden)

    def set_weights(
        self,
        weights: np.ndarray,
        *,
        mask: np.ndarray | None = None,
        hide_special: bool = False,
        hidden_share: float | None = None,
    ) -> None:
        self._source = (weights, mask, hide_special, hidden_share)
        self._rebuild()

    def set_painting(self, painting: LayerGridPainting | None) -> None:
        """Show a painting built elsewhere (``grid_painting`` in a worker: at hundreds of tokens the
        thumbnails take longer than a GUI-thread turn may)."""
        self._source = None
        self._painting = painting
        if painting is not None:
            self._colormap, self._scale = painting.colormap, painting.scale
            self._ablated = set(painting.ablated)
        self._after_change()

    def clear(self) -> None:
        self._source, self._painting, self._current, self._hover = None, None, None, None
        self.update()

    def set_colormap(self, name: str) -> None:
        lookup_table(name)  # raises ValueError for an unknown name before anything changes
        self._colormap = name
        self._rebuild()

    def set_scale(self, scale: str) -> None:
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
        self._scale = scale
        self._rebuild()

    def _rebuild(self) -> None:
        if self._source is not None:
            weights, mask, hide_special, hidden = self._source
            self._painting = painting_of(
                weights, mask, self._ablated, self._colormap, self._scale, hide_special, hidden
            )
        self._after_change()

    def _after_change(self) -> None:
        if self._current is not None and not self._valid(self._current):
            self._current = None
        self.updateGeometry()
        self.update()

    # -- state ----------------------------------------------------------------------------------
    def painting(self) -> LayerGridPainting | None:
        return self._painting

    def current(self) -> tuple[int, int] | None:
        return self._current

    def set_current(self, layer: int, head: int) -> None:
        """Highlight one thumbnail (no signal: the caller already knows)."""
        self._current = (int(layer), int(head)) if self._valid((layer, head)) else None
        self.update()

    def ablated(self) -> list[tuple[int, int]]:
        return sorted(self._ablated)

    def set_ablated(self, pairs: Iterable) -> None:
        """Mark heads as ablated (no signal); e.g. after the window restored a session."""
        self._ablated = {(int(l), int(h)) for l, h in pairs}
        if self._painting is not None:
            self._painting.ablated = set(self._ablated)
        self.update()

    def toggle_ablation(self, layer: int, head: int) -> None:
        cell = (int(layer), int(head))
        self._ablated.symmetric_difference_update({cell})
        if self._painting is not None:
            self._painting.ablated = set(self._ablated)
        self.update()
        self.ablationChanged.emit(self.ablated())

    def cell_rect(self, layer: int, head: int) -> QRectF:
        if self._painting is None:
            return QRectF()
        return self._painting.cell_rect(QRectF(self.rect()), layer, head)

    def _valid(self, cell) -> bool:
        p = self._painting
        return p is not None and 0 <= int(cell[0]) < p.num_layers and 0 <= int(cell[1]) < p.num_heads

    # -- Qt ---------------------------------------------------------------------------------------
    def sizeHint(self) -> QSize:
        return self._painting.preferred_size() if self._painting is not None else QSize(400, 240)

    def minimumSizeHint(self) -> QSize:
        return self._painting.preferred_size(10.0) if self._painting is not None else QSize(100, 60)

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        try:
            if self._painting is None:
                painter.fillRect(self.rect(), QColor(255, 255, 255))
                painter.setPen(QColor(120, 120, 120))
                painter.drawText(self.rect(), int(Qt.AlignmentFlag.AlignCenter), "no pretrained run yet")
            else:
                self._painting.paint(
                    painter, QRectF(self.rect()), current=self._current, hover=self._hover, hint=GRID_HINT
                )
        finally:
            painter.end()

    def _hit(self, pos) -> tuple[int, int] | None:
        if self._painting is None:
            return None
        return self._painting.hit(QRectF(self.rect()), QPointF(pos))

    def mousePressEvent(self, event: QMouseEvent) -> None:
        cell = self._hit(event.position())
        if cell is None or event.button() != Qt.MouseButton.LeftButton:
            return super().mousePressEvent(event)
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.toggle_ablation(*cell)
        else:
            self._current = cell
            self.update()
            self.headActivated.emit(*cell)
        event.accept()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        cell = self._hit(event.position())
        if cell != self._hover:
            self._hover = cell
            self.update()
            self.headHovered.emit(*(cell if cell is not None else (-1, -1)))
            if cell is not None and self._painting is not None:
                state = " · ablated" if cell in self._ablated else ""
                QToolTip.showText(
                    event.globalPosition().toPoint(),
                    f"{head_name(*cell)} · max weight {self._painting.head_max[cell]:.3f}{state}",
                    self,
                )
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:
        if self._hover is not None:
            self._hover = None
            self.update()
            self.headHovered.emit(-1, -1)
        super().leaveEvent(event)

    _MOVES: ClassVar[dict[Qt.Key, tuple[int, int]]] = {
        Qt.Key.Key_Left: (0, -1),
        Qt.Key.Key_Right: (0, 1),
        Qt.Key.Key_Up: (-1, 0),
        Qt.Key.Key_Down: (1, 0),
    }

    def keyPressEvent(self, event) -> None:
        """Arrows move the highlight, Enter opens it, Space toggles ablating it."""
        key = event.key()
        if self._painting is not None and key in self._MOVES:
            layer, head = self._current or (0, 0)
            if self._current is not None:
                dl, dh = self._MOVES[key]
                layer = min(max(layer + dl, 0), self._painting.num_layers - 1)
                head = min(max(head + dh, 0), self._painting.num_heads - 1)
            self.set_current(layer, head)
            return
        if self._current is not None and key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.headActivated.emit(*self._current)
            return
        if self._current is not None and key == Qt.Key.Key_Space:
            self.toggle_ablation(*self._current)
            return
        super().keyPressEvent(event)
