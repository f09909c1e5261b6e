"""Standalone widgets for the pretrained mode (a PretrainedResult: weights [layers, heads, L, L]).

- ``LayerHeadGrid`` (objectName ``layerHeadGrid``): every layer x head as a small heatmap, like a
  model view. Click one -> ``headActivated(layer, head)``; Ctrl+click toggles ablating that head
  -> ``ablationChanged(list[(layer, head)])``. Hover -> ``headHovered(layer, head)`` and a tooltip.
- ``PretrainedControls`` (``pretrainedControls``): ``layerSpin``, ``allLayersCheck``,
  ``hideSpecialCheck``, ``clearAblationButton`` and the ``pretrainedSummary`` label.
- ``export_painting`` writes the grid painting as PNG / SVG / PDF (vector text), atomically;
  ``export_all_weights`` writes every layer's raw weights as .npy or .csv.

The widgets only draw what they are given (plain numpy); they never run the model. Painting goes
through plain ``paint(painter, rect)`` methods so the window, the export and the tests share it.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Iterable

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QMouseEvent, QPainter, QPen
from PySide6.QtWidgets import (
    QCheckBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSpinBox, QToolTip,
    QWidget,
)

from attndesk.core.select import tile_reduce
from attndesk.render.cells import rgb_image
from attndesk.render.colormaps import lookup_table, mask_rgb, value_indices
from attndesk.render.export import ExportError, atomic_write, write

from .ablation_effect import ablation_effect

THUMB_CELLS = 64  # a thumbnail shows at most this many cells per axis (max of each tile)
SCALES = ("per-head", "shared")
GRID_HINT = "click / Enter: open · Ctrl+click / Space: ablate"
CSV_MAX_CELLS = 2_000_000  # a long-format CSV row per weight: ~40 bytes each, slow to write in Python
_ABLATED_RGB = (200, 30, 30)
_CURRENT_RGB = (255, 140, 0)
_HOVER_RGB = (40, 120, 220)


def weights_rgb(matrix: np.ndarray, colormap: str, vmax: float, mask: np.ndarray | None = None) -> np.ndarray:
    """[rows, cols] weights -> uint8 [rows, cols, 3]: 0..vmax through the colormap, masked cells
    (mask False) in the colormap's "masked" colour so they never read as a small weight."""
    lut = lookup_table(colormap)
    rgb = lut[value_indices(matrix, 0.0, vmax if vmax > 0 else 1.0, len(lut))]
    if mask is not None:
        rgb[~mask] = mask_rgb(colormap)
    return rgb


def _font(points: float, bold: bool = False) -> QFont:
    font = QFont()
    font.setPointSizeF(points)
    font.setBold(bold)
    return font


def _check_weights(weights: np.ndarray) -> np.ndarray:
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be [layers, heads, L, L], got shape {weights.shape}")
    return weights


# ---------------------------------------------------------------------------------------------
# layers x heads grid


class LayerGridPainting:
    """What the grid draws, independent of any widget: thumbnails, labels, ablation marks.

    ``weights`` [N, H, L, L]; ``mask`` [L, L] bool (True = may attend) or None; ``scale``
    "per-head" (each thumbnail 0..its own max) or "shared" (0..the largest weight anywhere).
    """

    margin_left = 30.0
    margin_top = 18.0
    margin_right = 6.0  # the current/hover frame of the last column stays inside
    margin_bottom = 20.0
    gap = 3.0

    def __init__(self, weights: np.ndarray, *, mask: np.ndarray | None = None, ablated: Iterable = (),
                 colormap: str = "viridis", scale: str = "per-head", caption: str = "") -> None:
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
        self.weights = _check_weights(weights)
        self.num_layers, self.num_heads, length = (int(v) for v in self.weights.shape[:3])
        self.mask = None if mask is None else np.asarray(mask, dtype=bool)
        if self.mask is not None and self.mask.shape != (length, length):
            raise ValueError(f"mask must be [{length}, {length}], got {self.mask.shape}")
        self.ablated = {(int(l), int(h)) for l, h in ablated}
        self.colormap, self.scale, self.caption = colormap, scale, caption
        self.factor = max(1, math.ceil(length / THUMB_CELLS))
        small = tile_reduce(self.weights, self.factor) if length else self.weights  # [N, H, l, l]
        small_mask = None
        if self.mask is not None and self.factor > 1:
            small_mask = ~tile_reduce(~self.mask, self.factor, "all")  # a tile is masked only if all of it is
        elif self.mask is not None:
            small_mask = self.mask
        self.head_max = self.weights.reshape(self.num_layers, self.num_heads, -1).max(axis=-1, initial=0.0)  # [N, H]
        top = float(self.head_max.max(initial=0.0))
        self.images: list[list[QImage]] = [
            [rgb_image(weights_rgb(small[l, h], colormap,
                                   float(self.head_max[l, h]) if scale == "per-head" else top, small_mask))
             for h in range(self.num_heads)]
            for l in range(self.num_layers)
        ]

    # -- geometry ---------------------------------------------------------------------------
    def cell_size(self, rect: QRectF) -> float:
        width = rect.width() - self.margin_left - self.margin_right - self.gap * (self.num_heads - 1)
        height = rect.height() - self.margin_top - self.margin_bottom - self.gap * (self.num_layers - 1)
        return max(2.0, min(width / max(1, self.num_heads), height / max(1, self.num_layers)))

    def cell_rect(self, rect: QRectF, layer: int, head: int) -> QRectF:
        size = self.cell_size(rect)
        x = rect.left() + self.margin_left + head * (size + self.gap)
        y = rect.top() + self.margin_top + layer * (size + self.gap)
        return QRectF(x, y, size, size)

    def hit(self, rect: QRectF, point: QPointF) -> tuple[int, int] | None:
        size = self.cell_size(rect)
        x = point.x() - rect.left() - self.margin_left
        y = point.y() - rect.top() - self.margin_top
        if x < 0 or y < 0:
            return None
        head, layer = int(x // (size + self.gap)), int(y // (size + self.gap))
        if head >= self.num_heads or layer >= self.num_layers:
            return None
        if x - head * (size + self.gap) > size or y - layer * (size + self.gap) > size:
            return None  # in the gap between thumbnails
        return layer, head

    def preferred_size(self, cell: float = 56.0) -> QSize:
        w = self.margin_left + self.num_heads * cell + self.gap * (self.num_heads - 1) + self.margin_right
        h = self.margin_top + self.num_layers * cell + self.gap * (self.num_layers - 1) + self.margin_bottom
        return QSize(int(w), int(h))

    # -- drawing ----------------------------------------------------------------------------
    def paint(self, painter: QPainter, rect: QRectF, *, current: tuple[int, int] | None = None,
              hover: tuple[int, int] | None = None, background: bool = True, hint: str = "") -> None:
        """Draw into ``rect``; ``hint`` (the widget's "click: open ...") follows the caption on screen only."""
        painter.save()
        if background:
            painter.fillRect(rect, QColor(255, 255, 255))
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)  # cells stay sharp
        label_font = _font(7.5)
        painter.setFont(label_font)
        painter.setPen(QColor(60, 60, 60))
        size = self.cell_size(rect)
        for head in range(self.num_heads):
            r = self.cell_rect(rect, 0, head)
            painter.drawText(QRectF(r.left(), rect.top(), size, self.margin_top - 2),
                             int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom), f"H{head}")
        for layer in range(self.num_layers):
            r = self.cell_rect(rect, layer, 0)
            painter.drawText(QRectF(rect.left(), r.top(), self.margin_left - 4, size),
                             int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), f"L{layer}")
        for layer in range(self.num_layers):
            for head in range(self.num_heads):
                r = self.cell_rect(rect, layer, head)
                painter.drawImage(r, self.images[layer][head])
                if (layer, head) in self.ablated:
                    self._paint_ablated(painter, r)
        for cell, rgb in ((hover, _HOVER_RGB), (current, _CURRENT_RGB)):
            if cell is not None and 0 <= cell[0] < self.num_layers and 0 <= cell[1] < self.num_heads:
                painter.setPen(QPen(QColor(*rgb), 2.0))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawRect(self.cell_rect(rect, *cell).adjusted(-1.5, -1.5, 1.5, 1.5))
        caption = " · ".join(part for part in (self.caption, hint) if part)
        if caption:
            painter.setPen(QColor(60, 60, 60))
            painter.setFont(_font(7.5))
            bottom = self.cell_rect(rect, self.num_layers - 1, 0).bottom()
            caption_rect = QRectF(rect.left() + 2, bottom + 3, rect.width() - 4, self.margin_bottom - 3)
            text = QFontMetricsF(painter.font()).elidedText(caption, Qt.TextElideMode.ElideRight, caption_rect.width())
            painter.drawText(caption_rect, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop), text)
        painter.restore()

    @staticmethod
    def _paint_ablated(painter: QPainter, r: QRectF) -> None:
        painter.fillRect(r, QColor(255, 255, 255, 150))  # dimmed: this head's output is zeroed
        painter.setPen(QPen(QColor(*_ABLATED_RGB), 2.0))
        painter.drawLine(r.topLeft(), r.bottomRight())
        painter.drawLine(r.topRight(), r.bottomLeft())


def grid_caption(scale: str, hide_special: bool, hidden_share: float | None = None, factor: int = 1) -> str:
    """The legend line under the grid: colour scale, special tokens, downsampling."""
    parts = ["colour: each head 0..its max" if scale == "per-head" else "colour: 0..largest weight"]
    if hide_special:
        share = "" if hidden_share is None else f": on average {hidden_share:.0%} of each row went to them"
        parts.append(f"[CLS]/[SEP] hidden, rows not re-normalised{share}")
    if factor > 1:
        parts.append(f"each pixel = max of {factor}x{factor} cells")
    return " · ".join(parts)


def grid_weights(result, hide_special: bool) -> tuple[np.ndarray, ...]:
    """(weights [N, H, L', L'], mask or None, hide_special, hidden share) of a ``PretrainedResult``;
    hidden special tokens are left out of both axes, rows NOT re-normalised."""
    weights, mask, hidden = result.weights, result.mask, None
    if hide_special:
        keep = result.visible_indices(True)
        if keep.size:
            hidden = float(1.0 - weights[:, :, keep][..., keep].sum(-1).mean()) if weights.size else 0.0
            weights = weights[:, :, keep][..., keep]  # [N, H, L', L']
            mask = None if mask is None else mask[np.ix_(keep, keep)]
    return weights, mask, hide_special, hidden


def painting_of(weights: np.ndarray, mask, ablated, colormap: str, scale: str, hide_special: bool,
                hidden: float | None) -> LayerGridPainting:
    weights = _check_weights(weights)
    factor = max(1, math.ceil(weights.shape[-1] / THUMB_CELLS))
    return LayerGridPainting(weights, mask=mask, ablated=ablated, colormap=colormap, scale=scale,
                             caption=grid_caption(scale, hide_special, hidden, factor))


def grid_painting(result, *, hide_special: bool, colormap: str, scale: str, ablated=()) -> LayerGridPainting:
    """The whole grid of a ``PretrainedResult``, ready to paint (thread-safe: numpy and QImage)."""
    weights, mask, hide_special, hidden = grid_weights(result, hide_special)
    return painting_of(weights, mask, ablated, colormap, scale, hide_special, hidden)


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

    def set_weights(self, weights: np.ndarray, *, mask: np.ndarray | None = None, hide_special: bool = False,
                    hidden_share: float | None = None) -> None:
        self._source = (weights, mask, hide_special, hidden_share)
        self._rebuild()

    def set_painting(self, painting: "LayerGridPainting | None") -> None:
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
            self._painting = painting_of(weights, mask, self._ablated, self._colormap, self._scale, hide_special, hidden)
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

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt naming
        painter = QPainter(self)
        try:
            if self._painting is None:
                painter.fillRect(self.rect(), QColor(255, 255, 255))
                painter.setPen(QColor(120, 120, 120))
                painter.drawText(self.rect(), int(Qt.AlignmentFlag.AlignCenter), "no pretrained run yet")
            else:
                self._painting.paint(painter, QRectF(self.rect()), current=self._current, hover=self._hover,
                                     hint=GRID_HINT)
        finally:
            painter.end()

    def _hit(self, pos) -> tuple[int, int] | None:
        if self._painting is None:
            return None
        return self._painting.hit(QRectF(self.rect()), QPointF(pos))

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
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

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        cell = self._hit(event.position())
        if cell != self._hover:
            self._hover = cell
            self.update()
            self.headHovered.emit(*(cell if cell is not None else (-1, -1)))
            if cell is not None and self._painting is not None:
                state = " · ablated" if cell in self._ablated else ""
                QToolTip.showText(event.globalPosition().toPoint(),
                                  f"layer {cell[0]} · head {cell[1]} · max weight "
                                  f"{self._painting.head_max[cell]:.3f}{state}", self)
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802
        if self._hover is not None:
            self._hover = None
            self.update()
            self.headHovered.emit(-1, -1)
        super().leaveEvent(event)

    _MOVES = {Qt.Key.Key_Left: (0, -1), Qt.Key.Key_Right: (0, 1), Qt.Key.Key_Up: (-1, 0), Qt.Key.Key_Down: (1, 0)}

    def keyPressEvent(self, event) -> None:  # noqa: N802
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


# ---------------------------------------------------------------------------------------------
# controls


def describe_run(result) -> str:
    """One status line for a pretrained run: model, tokens, what was altered, cosine, notices."""
    parts = [f"{result.model_name}: {result.length} tokens, {result.num_layers} layers x {result.num_heads} heads, "
             f"{result.total_seconds * 1000:.0f} ms"]
    changes = []
    if not result.scaled:
        changes.append("unscaled")
    if result.causal:
        changes.append("causal mask")
    if result.ablate:
        changes.append(f"{len(result.ablate)} head{'s' if len(result.ablate) != 1 else ''} ablated")
    effect = ablation_effect(result)  # family-aware: embedding cosine, or next-token KL and top 5
    if changes and effect is not None:
        parts.append(f"altered ({', '.join(changes)}): {effect}")
    parts += list(result.notices)
    return " · ".join(parts)


class PretrainedControls(QWidget):
    """Layer selector, "all layers" (the grid), hide special tokens, clear ablations, summary."""

    layerChanged = Signal(int)
    allLayersToggled = Signal(bool)
    hideSpecialToggled = Signal(bool)
    clearAblationRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pretrainedControls")
        self.layer_spin = QSpinBox(objectName="layerSpin")
        self.layer_spin.setRange(0, 0)
        self.layer_spin.setPrefix("layer ")
        self.layer_spin.setToolTip("which layer's attention the heatmaps show (0 = first)")
        self.all_layers_check = QCheckBox("all layers", objectName="allLayersCheck")
        self.all_layers_check.setToolTip("show every layer x head as thumbnails; click one to open it")
        self.hide_special_check = QCheckBox("hide [CLS]/[SEP]", objectName="hideSpecialCheck")
        self.hide_special_check.setToolTip(
            "leave special tokens out of the heatmaps; rows are NOT re-normalised, so they sum to less than 1")
        self.clear_button = QPushButton("clear ablations", objectName="clearAblationButton")
        self.clear_button.setToolTip("Ctrl+click a thumbnail in the grid to ablate a head; this restores all")
        self.clear_button.setEnabled(False)
        # the summary is a separate line: the owner places it (the window puts it under the toolbar)
        self.summary = QLabel(objectName="pretrainedSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.layer_spin, self.all_layers_check, self.hide_special_check):
            row.addWidget(w)
        # clear_button is not in this row either: the owner puts it next to the grid, where heads are ablated
        self.layer_spin.valueChanged.connect(self.layerChanged)
        self.all_layers_check.toggled.connect(self._on_all_layers)
        self.hide_special_check.toggled.connect(self.hideSpecialToggled)
        self.clear_button.clicked.connect(self.clearAblationRequested)

    def set_num_layers(self, n: int) -> None:
        self.layer_spin.setRange(0, max(0, int(n) - 1))

    def set_result(self, result) -> None:
        self.set_num_layers(result.num_layers)
        self.clear_button.setEnabled(bool(result.ablate))
        self.summary.setText(describe_run(result))

    def layer(self) -> int:
        return self.layer_spin.value()

    def all_layers(self) -> bool:
        return self.all_layers_check.isChecked()

    def hide_special(self) -> bool:
        return self.hide_special_check.isChecked()

    def _on_all_layers(self, on: bool) -> None:
        self.layer_spin.setEnabled(not on)
        self.allLayersToggled.emit(on)


# ---------------------------------------------------------------------------------------------
# export


def export_painting(painting, path: str | Path, size: tuple[int, int] | None = None, dpi: float = 96) -> Path:
    """Write a ``LayerGridPainting`` as PNG, SVG or PDF (by suffix), atomically, through
    ``attndesk.render.export.write``; labels are text in SVG/PDF. ``ExportError`` with a reason."""
    if size is None:
        hint = painting.preferred_size() if hasattr(painting, "preferred_size") else QSize(900, 420)
        size = (hint.width(), hint.height())
    title = getattr(painting, "title", "") or "attention, all layers and heads"
    return write(painting.paint, path, size=size, dpi=dpi, title=title)


def export_all_weights(result, path: str | Path, *, hide_special: bool = False) -> Path:
    """Every layer's raw weights: ``.npy`` = the [layers, heads, L, L] float32 array; ``.csv`` = one
    row per cell (layer, head, query index, query token, key index, key token, weight). Atomic;
    ``ExportError`` with a one-line reason otherwise. Hidden special tokens are left out, rows
    not re-normalised (as on screen)."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    keep = result.visible_indices(hide_special)
    weights = result.weights[:, :, keep][..., keep]  # [N, H, L', L']
    tokens = [result.tokens[i] for i in keep]
    if fmt == "npy":
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(weights, dtype=np.float32), allow_pickle=False)
        return atomic_write(path, buffer.getvalue())
    if fmt != "csv":
        raise ExportError(f"cannot write {path}: unknown format {path.suffix or 'without suffix'}; use .npy or .csv")
    if weights.size > CSV_MAX_CELLS:
        raise ExportError(
            f"cannot write {path}: {weights.size:,} weights make a CSV of about {weights.size * 40 / 2**30:.1f} GiB "
            f"(limit {CSV_MAX_CELLS:,} cells); export .npy instead, or one layer as CSV"
        )
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["layer", "head", "query", "query_token", "key", "key_token", "weight"])
    n_layers, n_heads, length = weights.shape[:3]
    for layer in range(n_layers):
        for head in range(n_heads):
            for q in range(length):
                row = weights[layer, head, q]
                for k in range(length):
                    writer.writerow([layer, head, int(keep[q]), tokens[q], int(keep[k]), tokens[k], f"{row[k]:.8g}"])
    return atomic_write(path, text.getvalue().encode("utf-8"))

