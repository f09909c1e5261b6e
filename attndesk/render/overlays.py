"""A vision run's maps drawn over its image: each head from a query token, every head of every
layer, and the image maps, as one figure each (painted with QPainter, written by ``export.write``).

``blend`` (numpy, no Qt) is the overlay itself: the map's value of each patch coloured by the
colour map on [vmin, vmax] (the heatmaps' colours), spread over the patch's pixels, mixed with
the image at ``opacity``: out = (1 - opacity) * image + opacity * colour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor

from attndesk.interp.image_maps import head_maps

from .cells import rgb_image
from .colormaps import map_values

PANEL = 180  # pixels per panel side
TITLE_H, GAP, BAR_H, HEAD_H = 18, 10, 14, 26
OPACITY = 0.6


def blend(
    image: np.ndarray,
    values: np.ndarray,
    *,
    colormap: str = "viridis",
    vmin: float = 0.0,
    vmax: float | None = None,
    opacity: float = OPACITY,
    regions: np.ndarray | None = None,
) -> np.ndarray:
    """[h, w, 3] uint8: ``image`` [h, w, 3] uint8 with ``values`` [rows, cols] over it, each patch
    covering h // rows x w // cols pixels (a remainder at the right and bottom edges takes the
    last patch's colour). ``vmax`` None: the map's maximum. ``regions`` [rows, cols] (Swin's
    windows): the last pixel row and column of a patch whose neighbour lies in another region
    are drawn white, so the partition shows."""
    image = np.asarray(image, dtype=np.uint8)
    values = np.asarray(values, dtype=np.float64)
    if image.ndim != 3 or image.shape[2] != 3 or values.ndim != 2:
        raise ValueError(f"blend takes an [h, w, 3] image and a [rows, cols] map, got {image.shape} and {values.shape}")
    if not 0.0 <= opacity <= 1.0:
        raise ValueError(f"opacity must lie in [0, 1], got {opacity}")
    top = float(np.nanmax(values)) if vmax is None else float(vmax)
    colours = map_values(values, colormap, float(vmin), top).astype(np.float64)  # [rows, cols, 3]
    h, w = image.shape[:2]
    rows, cols = values.shape
    r = np.minimum(np.arange(h) // max(1, h // rows), rows - 1)
    c = np.minimum(np.arange(w) // max(1, w // cols), cols - 1)
    spread = colours[r[:, None], c[None, :]]  # [h, w, 3]
    mixed = np.clip(np.rint((1.0 - opacity) * image.astype(np.float64) + opacity * spread), 0, 255)
    if regions is not None:
        where = np.asarray(regions)[r[:, None], c[None, :]]  # [h, w]: each pixel's region
        edge = np.zeros((h, w), dtype=bool)
        edge[:, :-1] |= where[:, :-1] != where[:, 1:]
        edge[:-1, :] |= where[:-1, :] != where[1:, :]
        mixed[edge] = 255.0
    return mixed.astype(np.uint8)


@dataclass(frozen=True)
class OverlayFigure:
    """Panels of blended pictures in a grid: ``panels`` [(title, [h, w, 3] uint8)], ``columns``
    per line, ``row_labels`` one per line (or empty), ``caption`` under the title, and the
    shared colour range (None: each panel has its own, said in its title)."""

    title: str
    panels: Sequence[tuple[str, np.ndarray]]
    columns: int
    caption: str = ""
    row_labels: Sequence[str] = ()
    colormap: str = "viridis"
    value_range: tuple[float, float] | None = None
    panel: int = PANEL

    @property
    def label_w(self) -> int:
        return 70 if self.row_labels else 0

    def size(self) -> tuple[int, int]:
        lines = -(-len(self.panels) // self.columns)
        width = GAP + self.label_w + self.columns * (self.panel + GAP)
        height = 2 * HEAD_H + lines * (self.panel + TITLE_H + GAP) + (BAR_H + 2 * GAP + 14) + GAP
        text = 7 * max(len(self.caption), len(self.title)) + 2 * GAP  # about 7 pixels a character
        return max(width, 420, text), height


def paint_overlays(painter, rect, figure: OverlayFigure) -> None:
    """Draw ``figure`` into ``rect`` (``export.write``'s paint function)."""

    left = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    painter.fillRect(rect, QColor(255, 255, 255))
    painter.setPen(QColor(0, 0, 0))
    painter.drawText(QRectF(GAP, 0, rect.width() - 2 * GAP, HEAD_H), left, figure.title)
    painter.setPen(QColor(70, 70, 70))
    painter.drawText(QRectF(GAP, HEAD_H, rect.width() - 2 * GAP, HEAD_H), left, figure.caption)
    top = 2 * HEAD_H
    for i, (title, pixels) in enumerate(figure.panels):
        line, col = divmod(i, figure.columns)
        x = GAP + figure.label_w + col * (figure.panel + GAP)
        y = top + line * (figure.panel + TITLE_H + GAP)
        painter.setPen(QColor(0, 0, 0))
        painter.drawText(QRectF(x, y, figure.panel, TITLE_H), left, title)
        target = QRectF(x, y + TITLE_H, figure.panel, figure.panel)
        painter.drawImage(target, rgb_image(np.ascontiguousarray(pixels)))
        if col == 0 and figure.row_labels:
            painter.drawText(
                QRectF(GAP, y + TITLE_H, figure.label_w - 6, figure.panel),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                figure.row_labels[line],
            )
    lines = -(-len(figure.panels) // figure.columns)
    y = top + lines * (figure.panel + TITLE_H + GAP) + GAP
    _colour_bar(painter, figure, QRectF(GAP, y, min(320.0, rect.width() - 2 * GAP), BAR_H))


def _colour_bar(painter, figure: OverlayFigure, where) -> None:

    ramp = map_values(np.linspace(0.0, 1.0, 256)[None, :].repeat(2, axis=0), figure.colormap, 0.0, 1.0)
    painter.drawImage(where, rgb_image(np.ascontiguousarray(ramp.astype(np.uint8))))
    if figure.value_range is None:
        low, high = "each panel's minimum", "its maximum"
    else:
        low, high = f"{figure.value_range[0]:.3g}", f"{figure.value_range[1]:.3g}"
    painter.setPen(QColor(0, 0, 0))
    below = QRectF(where.left(), where.bottom() + 2, where.width(), 14)
    painter.drawText(below, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop), low)
    painter.drawText(below, int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop), high)


def overlay_painter(figure: OverlayFigure):
    return lambda painter, rect: paint_overlays(painter, rect, figure)


def head_overlays(
    image: np.ndarray,
    maps: np.ndarray,
    *,
    title: str,
    caption: str = "",
    colormap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    opacity: float = OPACITY,
    row_labels: Sequence[str] = (),
    columns: int | None = None,
    regions: Sequence[np.ndarray] | None = None,
) -> OverlayFigure:
    """One figure of ``maps`` [panels..., rows, cols] (heads, or layers x heads) on one shared
    colour scale, [0, the largest value] by default: the heatmaps' scale. ``regions``: one
    [rows, cols] partition per line of heads (Swin's windows of each layer), drawn as lines."""
    maps = np.asarray(maps, dtype=np.float64)
    lines = maps.reshape(-1, *maps.shape[-2:])
    heads = maps.shape[-3] if maps.ndim >= 3 else 1
    low = 0.0 if vmin is None else float(vmin)
    high = float(np.nanmax(lines)) if vmax is None else float(vmax)
    high = high if high > low else low + 1.0
    panels = [
        (
            f"head {i % heads}",
            blend(
                image,
                m,
                colormap=colormap,
                vmin=low,
                vmax=high,
                opacity=opacity,
                regions=None if regions is None else regions[i // heads],
            ),
        )
        for i, m in enumerate(lines)
    ]
    return OverlayFigure(title, panels, columns or min(heads, 8), caption, row_labels, colormap, (low, high))


def run_figures(
    run,
    query: int | None,
    *,
    layers: Sequence[int] | None = None,
    colormap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    opacity: float = OPACITY,
    caption: str = "",
) -> list[tuple[str, OverlayFigure]]:
    """A vision run's head figures, [(name, figure)]: each of ``layers`` (default every one) as
    ``heads_layer<L>``, then ``all_heads`` (every head of every layer, one row per layer), each
    head from token ``query`` (None: the mean over the patches), Swin's windows drawn as lines."""

    who = "the mean over the patches" if query is None else run.tokens[query]
    windows = run.window_weights is not None
    style: dict[str, Any] = {"colormap": colormap, "vmin": vmin, "vmax": vmax, "opacity": opacity}
    every = np.stack([head_maps(run, layer, query) for layer in range(run.num_layers)])
    figures = []
    for layer in range(run.num_layers) if layers is None else layers:
        figures.append(
            (
                f"heads_layer{layer}",
                head_overlays(
                    run.image,
                    every[layer],
                    title=f"layer {layer}: each head from {who}",
                    caption=caption,
                    regions=[run.window_map(layer)] if windows else None,
                    **style,
                ),
            )
        )
    figures.append(
        (
            "all_heads",
            head_overlays(
                run.image,
                every,
                title=f"every head of every layer, from {who}",
                caption=caption,
                row_labels=[f"layer {n}" for n in range(run.num_layers)],
                columns=every.shape[1],
                regions=[run.window_map(n) for n in range(run.num_layers)] if windows else None,
                **style,
            ),
        )
    )
    return figures


def map_overlays(
    image: np.ndarray,
    maps: dict[str, np.ndarray],
    *,
    title: str,
    caption: str = "",
    colormap: str = "viridis",
    opacity: float = OPACITY,
) -> OverlayFigure:
    """One panel per named map, each on its own range [min, max] (their units differ; integrated
    gradients are signed), with the image alone first."""
    panels: list[tuple[str, np.ndarray]] = [("image", np.asarray(image, dtype=np.uint8))]
    for name, given in maps.items():
        values = np.asarray(given, dtype=np.float64)
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        high = high if high > low else low + 1.0
        panels.append(
            (
                f"{name} [{low:.2g}, {high:.2g}]",  # the panel's own range
                blend(image, values, colormap=colormap, vmin=low, vmax=high, opacity=opacity),
            )
        )
    return OverlayFigure(title, panels, min(len(panels), 4), caption, (), colormap, None)


__all__ = [
    "OPACITY",
    "OverlayFigure",
    "blend",
    "head_overlays",
    "map_overlays",
    "overlay_painter",
    "paint_overlays",
    "run_figures",
]
