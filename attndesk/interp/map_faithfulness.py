"""How faithful an image map is to the model it explains (Qt-free): deletion and insertion
curves and their areas, and the pointing game.

A map is a ``[rows, cols]`` array over an image's patch grid (higher = more evidence); it ranks
the patches, most salient first (ties by position, row-major). The model is seen only through
``score``: a function from a batch of pixel arrays ``[B, C, H, W]`` to the score being explained,
``[B]`` (for a classifier, the probability of the class the map explains).

- Deletion (Petsiuk et al., 2018, RISE): remove the patches in the map's order, replacing their
  pixels with ``baseline``; the curve is the score after 0, 1, ..., P patches are gone. A
  faithful map makes it fall fast: a low area is good.
- Insertion: start from the baseline image and put the patches back in the same order; a
  faithful map makes the score rise fast: a high area is good.
- The area under a curve is the trapezoid rule over the fraction of patches, 0 to 1.
- The pointing game (Zhang et al., 2016, "Top-down neural attention by excitation backprop"),
  on the patch grid: a hit when the map's top patch holds any pixel of the evidence mask.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attndesk.errors import ConfigError

Score = Callable[[np.ndarray], np.ndarray]


def patch_order(saliency) -> np.ndarray:
    """The flat patch indices of a ``[rows, cols]`` map, most salient first; ties keep row-major order."""
    flat = np.asarray(saliency, dtype=np.float64).ravel()
    if not np.isfinite(flat).all():
        raise ConfigError("a map to rank must be finite everywhere")
    return np.argsort(-flat, kind="stable")


def _grid(pixels: np.ndarray, saliency: np.ndarray) -> tuple[int, int]:
    """The patch's (height, width) that fits the map's grid onto the image exactly."""
    if pixels.ndim != 3:
        raise ConfigError(f"pixels must be one image [C, H, W], got shape {pixels.shape}")
    if saliency.ndim != 2:
        raise ConfigError(f"a map must be [rows, cols], got shape {saliency.shape}")
    (height, width), (rows, cols) = pixels.shape[1:], saliency.shape
    if height % rows or width % cols:
        raise ConfigError(f"a {rows}x{cols} map does not tile a {height}x{width} image")
    return height // rows, width // cols


def _kept_images(pixels, saliency, baseline, *, inserting: bool, step: int) -> np.ndarray:
    """The images of a deletion (or insertion) curve: ``[steps + 1, C, H, W]``."""
    saliency = np.asarray(saliency)
    ph, pw = _grid(pixels, saliency)
    rows, cols = saliency.shape
    order = patch_order(saliency)
    counts = list(range(0, rows * cols, step)) + [rows * cols]
    base = np.broadcast_to(np.asarray(baseline, dtype=pixels.dtype), pixels.shape)
    images = np.empty((len(counts), *pixels.shape), dtype=pixels.dtype)
    for k, count in enumerate(counts):
        chosen = np.zeros(rows * cols, dtype=bool)
        chosen[order[:count]] = True
        keep = chosen if inserting else ~chosen  # insertion keeps the chosen patches, deletion the rest
        pixel_keep = np.repeat(np.repeat(keep.reshape(rows, cols), ph, axis=0), pw, axis=1)
        images[k] = np.where(pixel_keep[None], pixels, base)
    return images


def _curve(score: Score, pixels, saliency, baseline, inserting: bool, step: int) -> np.ndarray:
    if step < 1:
        raise ConfigError(f"step must be at least 1 patch, got {step}")
    pixels = np.asarray(pixels, dtype=np.float32)
    values = np.asarray(
        score(_kept_images(pixels, saliency, baseline, inserting=inserting, step=step)), dtype=np.float64
    )
    return values.reshape(-1)


def deletion_curve(score: Score, pixels, saliency, *, baseline=0.0, step: int = 1) -> np.ndarray:
    """The score with 0, step, 2 step, ..., all patches removed in the map's order."""
    return _curve(score, pixels, saliency, baseline, False, step)


def insertion_curve(score: Score, pixels, saliency, *, baseline=0.0, step: int = 1) -> np.ndarray:
    """The score with 0, step, 2 step, ..., all patches put back onto the baseline in the map's order."""
    return _curve(score, pixels, saliency, baseline, True, step)


def curve_auc(curve, patches: int | None = None, step: int = 1) -> float:
    """The area under a curve over the fraction of patches (0..1), by the trapezoid rule. The
    points lie at 0, step, 2 step, ... patches and the last at all ``patches`` (default: one per point)."""
    y = np.asarray(curve, dtype=np.float64)
    if y.ndim != 1 or len(y) < 2:
        raise ConfigError(f"a curve needs at least two points, got shape {y.shape}")
    total = len(y) - 1 if patches is None else int(patches)
    x = np.minimum(np.arange(len(y)) * step, total) / total
    x[-1] = 1.0
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


def pointing_hit(saliency, mask) -> bool:
    """Whether the map's top patch (the first in ``patch_order``) holds a pixel of the ``[H, W]`` mask."""
    saliency = np.asarray(saliency)
    mask = np.asarray(mask, dtype=bool)
    ph, pw = _grid(mask[None], saliency)
    top = int(patch_order(saliency)[0])
    r, c = divmod(top, saliency.shape[1])
    return bool(mask[r * ph : (r + 1) * ph, c * pw : (c + 1) * pw].any())


def patch_mask(mask, grid: tuple[int, int]) -> np.ndarray:
    """The ``[rows, cols]`` fraction of each patch's pixels that the ``[H, W]`` mask covers."""
    mask = np.asarray(mask, dtype=np.float64)
    rows, cols = grid
    height, width = mask.shape
    if height % rows or width % cols:
        raise ConfigError(f"a {rows}x{cols} grid does not tile a {height}x{width} mask")
    return mask.reshape(rows, height // rows, cols, width // cols).mean(axis=(1, 3))


__all__ = [
    "Score",
    "curve_auc",
    "deletion_curve",
    "insertion_curve",
    "patch_mask",
    "patch_order",
    "pointing_hit",
]
