"""What the heatmap panel draws, behind one small interface, built from an ``AttentionMap`` (Qt-free).

The panel never reads weights directly: it asks a source for a (possibly downsampled) matrix to
draw and for exact values under the mouse. ``long_source.source_for_map`` picks the source for
any map:

- ``ExactSource``: a map holding its exact weights (a toy run, a real model's layer);
- ``long_source.PyramidHeatmapSource``: a memory-bounded run (overview + exact on demand);
- ``BiasSource``: the ALiBi bias -m_h |i - j| of a map's heads instead of its weights.

Build sources in the worker thread: the constructor does the O(H·L·Lk) work (mean, maxima,
overview), so the GUI thread only hands ready arrays to pyqtgraph. Every selection and tiling
goes through ``attndesk.runs.select``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from attndesk.attention.types import MEAN, AttentionMap, Head
from attndesk.runs import select

# Beyond this many cells per axis the overview is downsampled (max of each tile, so a single
# sharp weight survives); a 2048-token run would otherwise mean 16 x 4M-pixel images, whose
# colouring alone would hold the GUI thread (docs/benchmarks.md).
MAX_DISPLAY = 256
WEIGHTS, ALIBI_BIAS = "weights", "alibi bias"


class CellLookup(Protocol):
    """A mask read one cell at a time, ``mask[q, k]`` (a long run's, never materialised)."""

    def __getitem__(self, index: tuple[int, int]) -> bool: ...


@runtime_checkable
class HeatmapSource(Protocol):
    map: AttentionMap  # what is drawn (groups, window, layer kind, legend; what an export takes)
    base_map: AttentionMap  # the map before display options (the first key hidden, ALiBi's bias)
    num_heads: int
    shape: tuple[int, int]  # (queries L, keys Lk)

    # read-only (properties, so a list of labels or a mask looked up cell by cell fits)
    @property
    def query_labels(self) -> Sequence[str]: ...
    @property
    def key_labels(self) -> Sequence[str]: ...
    @property
    def mask(self) -> np.ndarray | CellLookup | None:  # [L, Lk] bool, True = may attend; None = nothing masked
        ...

    factor: int  # cells per displayed pixel along each axis
    key_offset: int  # token position of key column 0 (1 when the first token is hidden)
    value_name: str  # "weight", or "bias" for ALiBi's bias
    causal: bool  # no query sees a later key (a window's band then has only its left edge)

    def display_matrix(self, head: Head) -> np.ndarray:
        """2-D float array to draw over the rectangle (0, 0, Lk, L); row 0 = query 0."""

    def display_mask(self) -> np.ndarray | None:
        """Bool array shaped like display_matrix, True where the cell is masked; or None."""

    def value_at(self, head: Head, q: int, k: int) -> float:
        """The exact value of one cell (never a downsampled value)."""

    def level_range(self, head: Head) -> tuple[float, float]:
        """(lowest, highest) value of that head's matrix, for the per-head colour scale."""

    def head_title(self, head: Head) -> str:
        """Short title of one heatmap ("head 2", "mean over 8 heads")."""

    def downsample_note(self) -> str:
        """Empty when every cell is drawn, else one line saying what the overview shows."""


class ExactSource:
    """A map with exact weights [H, L, Lk]: drawn exactly when small, max-tiled when large."""

    value_name = "weight"

    def __init__(
        self,
        map: AttentionMap,
        max_display: int = MAX_DISPLAY,
        *,
        key_offset: int = 0,
        base_map: AttentionMap | None = None,
    ) -> None:
        if map.pyramid is not None:
            raise ValueError(
                "this map holds an overview: use long_source.PyramidHeatmapSource (or long_source.source_for_map)"
            )
        w = np.asarray(map.weights)
        if w.ndim != 3:
            raise ValueError(f"attention weights must be [heads, queries, keys], got shape {w.shape}")
        self.map, self.weights, self.key_offset = map, w, key_offset
        self.base_map = base_map if base_map is not None else map
        self.num_heads = int(w.shape[0])
        self.shape = (int(w.shape[1]), int(w.shape[2]))
        self.query_labels, self.key_labels = list(map.queries), list(map.keys)
        self.mask = map.mask
        self.causal = select.is_causal(map) if map.window else False
        self.mean = select.weights(map, MEAN)  # [L, Lk]
        flat = w.reshape(self.num_heads, -1)
        self._head_max = flat.max(axis=1) if w.size else np.zeros(self.num_heads)
        self._mean_max = float(self.mean.max()) if self.mean.size else 0.0
        self.factor = max(1, math.ceil(max(self.shape) / max_display))
        self._display = select.tile_reduce(w, self.factor)  # [H, L/f, Lk/f]
        self._display_mean = select.tile_reduce(self.mean, self.factor)
        masked = None if self.mask is None else ~np.asarray(self.mask)
        self._display_mask = (
            None if masked is None or not masked.any() else select.tile_reduce(masked, self.factor, "all")
        )

    def display_matrix(self, head: Head) -> np.ndarray:
        return self._display_mean if head == MEAN else self._display[int(head)]

    def display_mask(self) -> np.ndarray | None:
        return self._display_mask

    def value_at(self, head: Head, q: int, k: int) -> float:
        if head == MEAN:
            return float(self.mean[q, k])
        return float(self.weights[int(head), q, k])

    def level_max(self, head: Head) -> float:
        return self._mean_max if head == MEAN else float(self._head_max[int(head)])

    def level_range(self, head: Head) -> tuple[float, float]:
        return 0.0, self.level_max(head)

    def global_max(self) -> float:
        return float(self._head_max.max()) if self.num_heads else 0.0

    def head_title(self, head: Head) -> str:
        return select.head_title(self.map, head)

    def downsample_note(self) -> str:
        notes = [self.map.legend]
        if self.factor > 1:
            notes.append(
                f"overview: each pixel is the max of a {self.factor}x{self.factor} tile of cells; "
                "hover values are exact"
            )
        return " · ".join(n for n in notes if n)


class BiasSource:
    """ALiBi's score bias -m_h |i - j| of each head of a map (what ALiBi adds before the softmax)."""

    value_name = "bias"

    def __init__(self, map: AttentionMap, max_display: int = MAX_DISPLAY) -> None:
        if map.alibi_slopes is None:
            raise ValueError("this map has no ALiBi slopes")
        self.map, self.base_map, self.key_offset = map, map, 0
        self.num_heads = map.num_heads
        self.shape = map.shape
        self.query_labels, self.key_labels = list(map.queries), list(map.keys)
        self.mask, self.causal = None, False
        self.slopes = np.asarray(map.alibi_slopes, dtype=np.float64)
        self.factor = max(1, math.ceil(max(self.shape) / max_display))
        lq, lk = self.shape
        # the smallest |i - j| within each f x f tile: the tile's max bias (no L x Lk matrix)
        r0 = np.arange(0, lq, self.factor)
        c0 = np.arange(0, lk, self.factor)
        r1, c1 = np.minimum(r0 + self.factor, lq) - 1, np.minimum(c0 + self.factor, lk) - 1
        gap = np.maximum(0, np.maximum(c0[None, :] - r1[:, None], r0[:, None] - c1[None, :]))  # [R, C]
        self._distance = gap.astype(np.float32)
        self._far = float(max(lq, lk) - 1)

    def _slope(self, head: Head) -> float:
        return float(self.slopes.mean()) if head == MEAN else float(self.slopes[int(head)])

    def display_matrix(self, head: Head) -> np.ndarray:
        return (-self._slope(head) * self._distance).astype(np.float32)

    def display_mask(self) -> None:
        return None

    def value_at(self, head: Head, q: int, k: int) -> float:
        return -self._slope(head) * abs(int(q) - int(k))

    def level_range(self, head: Head) -> tuple[float, float]:
        return -self._slope(head) * self._far, 0.0

    def head_title(self, head: Head) -> str:
        return select.head_title(self.map, head)

    def downsample_note(self) -> str:
        return "ALiBi bias -m·|i − j| added to each head's scores (m = the head's slope)"
