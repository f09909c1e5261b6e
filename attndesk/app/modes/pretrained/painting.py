"""How the pretrained mode's layer × head grid is painted, and the grid's exports (a
PretrainedResult: weights [layers, heads, L, L]).

``LayerGridPainting`` paints every layer x head as a small heatmap through a plain
``paint(painter, rect)``, so the widget (``grid.LayerHeadGrid``), the export and the tests share
it; ``grid_painting`` builds it from a result. ``export_painting`` writes it as PNG / SVG / PDF
(vector text), atomically; ``export_all_weights`` writes every layer's raw weights as .npy or .csv.
Only drawing what it is given (plain numpy): nothing here runs the model.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen

from attndesk.attention.types import head_name
from attndesk.render.cells import rgb_image
from attndesk.render.colormaps import lookup_table, mask_rgb, value_indices
from attndesk.render.export import ExportError, atomic_write, write
from attndesk.runs.select import tile_reduce

THUMB_CELLS = 64  # a thumbnail shows at most this many cells per axis (max of each tile)
SCALES = ("per-head", "shared")
GRID_HINT = "click / Enter: open · Ctrl+click / Space: ablate"
CSV_MAX_CELLS = 2_000_000  # a long-format CSV row per weight: ~40 bytes each, slow to write in Python
_ABLATED_RGB = (200, 30, 30)
_CURRENT_RGB = (255, 140, 0)
_HOVER_RGB = (40, 120, 220)
_LOCAL_RGB = (154, 75, 0)
LOG_FLOOR = 1e-4  # log colours: weights below this read as the floor (a decoder's sink takes ~all of a row)
PARTS = (
    ("self", "encoder self-attention"),
    ("decoder", "decoder self-attention"),
    ("cross", "cross-attention (target × source)"),
)


def weights_rgb(
    matrix: np.ndarray, colormap: str, vmax: float, mask: np.ndarray | None = None, *, log: bool = False
) -> np.ndarray:
    """[rows, cols] weights -> uint8 [rows, cols, 3]: 0..vmax through the colormap (``log``: log10
    of the weights from LOG_FLOOR to vmax), masked cells (mask False) in the colormap's "masked"
    colour so they never read as a small weight."""
    lut = lookup_table(colormap)
    vmax = vmax if vmax > 0 else 1.0
    if log:
        top = np.log10(max(vmax, LOG_FLOOR * 10))
        values = np.log10(np.maximum(matrix, LOG_FLOOR))
        rgb = lut[value_indices(values, np.log10(LOG_FLOOR), top, len(lut))]
    else:
        rgb = lut[value_indices(matrix, 0.0, vmax, len(lut))]
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
    if weights.ndim != 4:
        raise ValueError(f"weights must be [layers, heads, Lq, Lk], got shape {weights.shape}")
    return weights


def _layer_masks(mask, shape: tuple[int, ...]) -> np.ndarray | None:
    """None, one [Lq, Lk] mask for every layer, or one per layer [N, Lq, Lk] -> [N, Lq, Lk] bool."""
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    n, _h, lq, lk = shape
    if mask.shape == (lq, lk):
        return np.broadcast_to(mask, (n, lq, lk))
    if mask.shape != (n, lq, lk):
        raise ValueError(f"mask must be [{lq}, {lk}] or [{n}, {lq}, {lk}], got {mask.shape}")
    return mask


# ---------------------------------------------------------------------------------------------
# layers x heads grid


class LayerGridPainting:
    """What the grid draws, independent of any widget: thumbnails, labels, ablation marks.

    ``weights`` [N, H, Lq, Lk]; ``mask`` [Lq, Lk] or per layer [N, Lq, Lk] bool (True = may
    attend) or None; ``scale`` "per-head" (each thumbnail 0..its own max) or "shared" (0..the
    largest weight anywhere); ``log`` colours log10 of the weights; ``layer_notes`` a word under
    each layer's label (a decoder's "local" sliding-window layers).
    """

    margin_left = 30.0
    margin_top = 18.0
    margin_right = 6.0  # the current/hover frame of the last column stays inside
    margin_bottom = 20.0
    gap = 3.0

    def __init__(
        self,
        weights: np.ndarray,
        *,
        mask: np.ndarray | None = None,
        ablated: Iterable = (),
        colormap: str = "viridis",
        scale: str = "per-head",
        caption: str = "",
        log: bool = False,
        layer_notes: list[str] | None = None,
        head_labels: list[str] | None = None,
    ) -> None:
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
        self.weights = _check_weights(weights)
        self.num_layers, self.num_heads, rows, cols = (int(v) for v in self.weights.shape)
        self.mask = _layer_masks(mask, self.weights.shape)  # [N, Lq, Lk] or None
        self.ablated = {(int(l), int(h)) for l, h in ablated}
        self.colormap, self.scale, self.caption, self.log = colormap, scale, caption, bool(log)
        self.layer_notes = list(layer_notes or [""] * self.num_layers)
        self.head_labels = list(head_labels or [head_name(None, h) for h in range(self.num_heads)])
        if any(self.layer_notes):
            self.margin_left = 48.0  # "L3" and "local" under it
        self.factor = max(1, math.ceil(max(rows, cols) / THUMB_CELLS))
        small = tile_reduce(self.weights, self.factor) if rows and cols else self.weights  # [N, H, l, k]
        small_mask = self.mask
        if self.mask is not None and self.factor > 1:
            small_mask = ~tile_reduce(~self.mask, self.factor, "all")  # a tile is masked only if all of it is
        self.head_max = self.weights.reshape(self.num_layers, self.num_heads, -1).max(axis=-1, initial=0.0)  # [N, H]
        top = float(self.head_max.max(initial=0.0))
        self.images: list[list[QImage]] = [
            [
                rgb_image(
                    weights_rgb(
                        small[l, h],
                        colormap,
                        float(self.head_max[l, h]) if scale == "per-head" else top,
                        None if small_mask is None else small_mask[l],
                        log=self.log,
                    )
                )
                for h in range(self.num_heads)
            ]
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
    def paint(
        self,
        painter: QPainter,
        rect: QRectF,
        *,
        current: tuple[int, int] | None = None,
        hover: tuple[int, int] | None = None,
        background: bool = True,
        hint: str = "",
    ) -> None:
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
            painter.drawText(
                QRectF(r.left(), rect.top(), size, self.margin_top - 2),
                int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom),
                self.head_labels[head],
            )
        for layer in range(self.num_layers):
            r = self.cell_rect(rect, layer, 0)
            label = QRectF(rect.left(), r.top(), self.margin_left - 4, size)
            note = self.layer_notes[layer]
            painter.setPen(QColor(60, 60, 60))
            painter.drawText(
                label,
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                f"L{layer}\n" if note else f"L{layer}",
            )
            if note:  # under the layer's name, in the heatmap badge's colour
                painter.setPen(QColor(*_LOCAL_RGB))
                painter.drawText(label, int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), f"\n{note}")
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


def grid_caption(
    scale: str,
    hide_special: bool,
    hidden_share: float | None = None,
    factor: int = 1,
    *,
    log: bool = False,
    part: str = "self",
    special_names: str = "[CLS]/[SEP]",
) -> str:
    """The legend line under the grid: part, colour scale, special tokens, downsampling."""
    parts = [] if part == "self" else [dict(PARTS)[part]]
    parts.append("colour: each head 0..its max" if scale == "per-head" else "colour: 0..largest weight")
    if log:
        parts[-1] += f", log scale from {LOG_FLOOR:g}"
    if hide_special:
        share = "" if hidden_share is None else f": on average {hidden_share:.0%} of each row went to them"
        parts.append(f"{special_names} hidden, rows not re-normalised{share}")
    if factor > 1:
        parts.append(f"each pixel = max of {factor}x{factor} cells")
    return " · ".join(parts)


def part_specials(result, part: str = "self") -> tuple[np.ndarray, np.ndarray]:
    """(query, key) special-token flags of one part of a ``PretrainedResult``."""
    source = np.asarray(result.special, dtype=bool)
    target = result.target_special
    target = np.zeros(len(result.target_tokens or ()), bool) if target is None else np.asarray(target, dtype=bool)
    return {"self": (source, source), "decoder": (target, target), "cross": (target, source)}[part]


def special_names(result, part: str = "self") -> str:
    """ "[CLS]/[SEP]" or "<s>/</s>": the special tokens a part's axes hold."""
    tokens = (result.target_tokens or []) if part == "decoder" else result.tokens
    flags = part_specials(result, part)[1]
    names = "/".join(dict.fromkeys(tokens[i] for i in np.flatnonzero(flags)))
    return names or "special tokens"


def layer_masks(result, part: str = "self") -> np.ndarray | None:
    """Every layer's mask of a part [N, Lq, Lk] (True = may attend), or None when none is masked."""
    weights = result.part_weights(part)
    masks = [result.layer_mask(layer, part) for layer in range(len(weights))]
    if all(m is None for m in masks):
        return None
    full = np.ones(weights.shape[-2:], dtype=bool)
    return np.stack([full if m is None else np.asarray(m, dtype=bool) for m in masks])


def grid_weights(
    result, hide_special: bool, part: str = "self"
) -> tuple[np.ndarray, np.ndarray | None, bool, float | None]:
    """(weights [N, H, Lq', Lk'], masks [N, Lq', Lk'] or None, hide_special, hidden share) of one
    part of a ``PretrainedResult``; hidden special tokens are left out of both axes, rows NOT
    re-normalised."""
    weights, mask, hidden = result.part_weights(part), layer_masks(result, part), None
    if hide_special:
        q_special, k_special = part_specials(result, part)
        q_keep, k_keep = np.flatnonzero(~q_special), np.flatnonzero(~k_special)
        if q_keep.size and k_keep.size:
            rows = weights[:, :, q_keep]  # [N, H, Lq', Lk]
            weights = rows[..., k_keep]  # [N, H, Lq', Lk']
            hidden = float(1.0 - weights.sum(-1).mean()) if weights.size else 0.0
            mask = None if mask is None else mask[:, q_keep][..., k_keep]
    return weights, mask, hide_special, hidden


def painting_of(
    weights: np.ndarray,
    mask,
    ablated,
    colormap: str,
    scale: str,
    hide_special: bool,
    hidden: float | None,
    *,
    log: bool = False,
    part: str = "self",
    layer_notes=None,
    names: str = "[CLS]/[SEP]",
    head_labels=None,
) -> LayerGridPainting:
    weights = _check_weights(weights)
    factor = max(1, math.ceil(max(weights.shape[-2:], default=1) / THUMB_CELLS))
    caption = grid_caption(scale, hide_special, hidden, factor, log=log, part=part, special_names=names)
    return LayerGridPainting(
        weights,
        mask=mask,
        ablated=ablated,
        colormap=colormap,
        scale=scale,
        caption=caption,
        log=log,
        layer_notes=layer_notes,
        head_labels=head_labels,
    )


def layer_notes(result, part: str = "self") -> list[str]:
    """ "local" under each sliding-window layer's label (nothing when every layer is alike and global)."""
    count = len(result.part_weights(part))
    kinds = [result.layer_kind(layer, part) for layer in range(count)]
    return ["local" if kind == "local" else "" for kind in kinds]


def grid_head_labels(result) -> list[str]:
    """ "H0 · kv0" where query heads share K/V heads (the grid's columns, grouped as in the heatmaps)."""
    heads, kv = result.num_heads, result.kv_heads
    if not kv or kv >= heads:
        return [head_name(None, h) for h in range(heads)]
    return [f"{head_name(None, h)} · kv{h // (heads // kv)}" for h in range(heads)]


def grid_painting(
    result, *, hide_special: bool, colormap: str, scale: str, ablated=(), part: str = "self", log: bool = False
) -> LayerGridPainting:
    """The whole grid of one part of a ``PretrainedResult``, ready to paint (thread-safe: numpy and
    QImage). Ablation marks belong to the self-attention part (the heads the window ablates)."""
    part = part if part in result.parts() else "self"
    weights, mask, hide_special, hidden = grid_weights(result, hide_special, part)
    return painting_of(
        weights,
        mask,
        ablated if part == "self" else (),
        colormap,
        scale,
        hide_special,
        hidden,
        log=log,
        part=part,
        layer_notes=layer_notes(result, part),
        names=special_names(result, part),
        head_labels=grid_head_labels(result),
    )


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


def part_axes(result, part: str, hide_special: bool) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(query positions, key positions, query tokens, key tokens) a part shows (special tokens hidden or not)."""
    part = part if part in result.parts() else "self"
    target = list(result.target_tokens or [])
    queries, keys = (
        (result.tokens, result.tokens) if part == "self" else (target, target if part == "decoder" else result.tokens)
    )
    q_special, k_special = part_specials(result, part)
    q_keep, k_keep = np.arange(len(queries)), np.arange(len(keys))
    if hide_special and (~q_special).any() and (~k_special).any():
        q_keep, k_keep = np.flatnonzero(~q_special), np.flatnonzero(~k_special)
    return q_keep, k_keep, [queries[i] for i in q_keep], [keys[i] for i in k_keep]


def export_all_weights(result, path: str | Path, *, hide_special: bool = False, part: str = "self") -> Path:
    """Every layer's raw weights of one part: ``.npy`` = the [layers, heads, Lq, Lk] float32 array;
    ``.csv`` = one row per cell (layer, head, query index, query token, key index, key token,
    weight). Atomic; ``ExportError`` with a one-line reason otherwise. Hidden special tokens are
    left out, rows not re-normalised (as on screen)."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    q_keep, k_keep, queries, keys = part_axes(result, part, hide_special)
    weights = result.part_weights(part if part in result.parts() else "self")[:, :, q_keep][
        ..., k_keep
    ]  # [N, H, Lq', Lk']
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
    n_layers, n_heads = weights.shape[:2]
    for layer in range(n_layers):
        for head in range(n_heads):
            for q, query in enumerate(queries):
                row = weights[layer, head, q]
                for k, key in enumerate(keys):
                    writer.writerow([layer, head, int(q_keep[q]), query, int(k_keep[k]), key, f"{row[k]:.8g}"])
    return atomic_write(path, text.getvalue().encode("utf-8"))
