"""Colour lookup shared by the exported figures and the window, so both show the same colours.

Tables come from pyqtgraph's bundled colormaps (``pyqtgraph.colormap.get``), the same objects the
window's ImageItems use; this module only samples them into 256-entry uint8 tables and maps values.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# Names offered in the UI and on the command line (sequential, for weights in [0, 1]).
COLORMAPS = ("viridis", "magma", "CET-L1")
# Diverging maps centred at 0 (difference views, B - A); CET-D1 is blue-white-red.
DIVERGING_COLORMAPS = ("CET-D1", "CET-D1A")
DEFAULT_DIVERGING = "CET-D1"
LUT_SIZE = 256

# Masked cells are painted in a colour no sequential map uses for a weight, then hatched.
# CET-L1 is itself grey, so there the masked colour is a pale blue instead of a pale grey.
_MASK_RGB = {"CET-L1": (200, 220, 245)}
_MASK_RGB_DEFAULT = (222, 222, 222)
_HATCH_RGB = {"CET-L1": (95, 125, 170)}
_HATCH_RGB_DEFAULT = (150, 150, 150)


@lru_cache(maxsize=32)
def _lookup_table(name: str, size: int) -> np.ndarray:
    from pyqtgraph import colormap

    try:
        cmap = colormap.get(name)
    except Exception as exc:  # pyqtgraph raises FileNotFoundError / KeyError for unknown names
        raise ValueError(f"unknown colormap {name!r}; choose one of: {', '.join(COLORMAPS)}") from exc
    lut = np.ascontiguousarray(cmap.getLookupTable(0.0, 1.0, size, alpha=False), dtype=np.uint8)
    lut.setflags(write=False)
    return lut


def lookup_table(name: str, size: int = LUT_SIZE) -> np.ndarray:
    """The colormap as a read-only uint8 array [size, 3] (RGB), index 0 = the low end."""
    return _lookup_table(name, int(size))


def is_known(name: str) -> bool:
    try:
        lookup_table(name)
    except ValueError:
        return False
    return True


def mask_rgb(name: str) -> tuple[int, int, int]:
    """Background colour of a masked cell under colormap ``name``."""
    return _MASK_RGB.get(name, _MASK_RGB_DEFAULT)


def hatch_rgb(name: str) -> tuple[int, int, int]:
    """Colour of the hatching lines drawn over masked cells."""
    return _HATCH_RGB.get(name, _HATCH_RGB_DEFAULT)


def value_indices(values: np.ndarray, vmin: float, vmax: float, size: int = LUT_SIZE) -> np.ndarray:
    """LUT index (int) of each value: vmin -> 0, vmax -> size-1, linear between, clipped.

    Non-finite values map to 0; callers paint them as masked. A flat range (vmax <= vmin)
    maps everything to the low end, so an all-equal matrix still draws.
    """
    values = np.asarray(values, dtype=np.float64)
    span = float(vmax) - float(vmin)
    if not np.isfinite(span) or span <= 0:
        return np.zeros(values.shape, dtype=np.intp)
    scaled = (values - float(vmin)) / span * (size - 1)
    scaled = np.where(np.isfinite(scaled), scaled, 0.0)
    return np.clip(np.rint(scaled), 0, size - 1).astype(np.intp)


def map_values(values: np.ndarray, name: str, vmin: float, vmax: float) -> np.ndarray:
    """RGB uint8 [..., 3] of each value under colormap ``name`` and the range [vmin, vmax]."""
    lut = lookup_table(name)
    return lut[value_indices(values, vmin, vmax, len(lut))]


def log_floor(count: int) -> float:
    """The smallest weight a log colour scale distinguishes: a power of ten about a tenth of a
    uniform row's 1/count (1e-3 for 11 keys, 1e-4 for 512), so ordinary weights keep their colours."""
    return float(10.0 ** math.floor(math.log10(0.1 / max(1, int(count)))))


def to_log(values: np.ndarray, floor: float) -> np.ndarray:
    """log10 of the values, clipped below at ``floor`` (masked cells are hatched over anyway)."""
    values = np.asarray(values, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        return np.log10(np.maximum(values, np.float32(floor)))


def hatch_rgba(masked: np.ndarray, px: int = 256, name: str = "viridis") -> np.ndarray:
    """RGBA uint8 [rows*k, cols*k, 4]: diagonal stripes (hatch and mask colours) where ``masked``,
    transparent elsewhere; k pixels per cell so the image has about ``px`` pixels on its larger side.

    The one hatch image of the window (heatmap panel, zoomed tiles, matrix plots); the exported
    figures draw the same colours as vector lines.
    """
    masked = np.asarray(masked, dtype=bool)
    rows, cols = masked.shape
    k = max(1, min(16, int(px) // max(rows, cols, 1)))
    big = np.repeat(np.repeat(masked, k, axis=0), k, axis=1)
    i, j = np.indices(big.shape)
    stripes = ((i + j) // 2) % 2 == 0
    out = np.zeros((*big.shape, 4), dtype=np.uint8)
    out[big & stripes] = (*hatch_rgb(name), 255)
    out[big & ~stripes] = (*mask_rgb(name), 255)
    return out
