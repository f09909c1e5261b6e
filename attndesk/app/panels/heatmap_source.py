"""What the heatmap panel draws, behind one small interface.

The panel never reads ``AttentionResult.weights`` directly: it asks a source for a (possibly
downsampled) matrix to draw and for exact values under the mouse. The default source wraps a
toy-model result; a long-document pyramid or a pretrained layer can provide the same interface.
Build sources in the worker thread: the constructor does the O(H·L·Lk) work (mean, maxima,
overview), so the GUI thread only hands ready arrays to pyqtgraph.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence, Union, runtime_checkable

import numpy as np

MEAN = "mean"  # the head argument that means "mean over heads"
Head = Union[int, str]

# Beyond this many cells per axis the overview is downsampled (max of each tile, so a single
# sharp weight survives); a 2048-token run would otherwise mean 16 x 4M-pixel images, and
# colouring 16 x 512^2 pixels alone takes the GUI thread ~170 ms.
MAX_DISPLAY = 256


@runtime_checkable
class HeatmapSource(Protocol):
    num_heads: int
    shape: tuple[int, int]  # (queries L, keys Lk)
    query_labels: Sequence[str]
    key_labels: Sequence[str]
    mask: np.ndarray | None  # [L, Lk] bool, True = may attend; None = nothing masked

    def display_matrix(self, head: Head) -> np.ndarray:
        """2-D float array to draw over the rectangle (0, 0, Lk, L); row 0 = query 0."""

    def display_mask(self) -> np.ndarray | None:
        """Bool array shaped like display_matrix, True where the cell is masked; or None."""

    def value_at(self, head: Head, q: int, k: int) -> float:
        """The exact weight of one cell (never a downsampled value)."""

    def level_max(self, head: Head) -> float:
        """Largest value of that head's matrix (for the per-head colour scale)."""

    def head_title(self, head: Head) -> str:
        """Short title of one heatmap ("head 2", "mean over 8 heads")."""

    def downsample_note(self) -> str:
        """Empty when every cell is drawn, else one line saying what the overview shows."""


def tile_reduce(matrix: np.ndarray, factor: int, how: str = "max") -> np.ndarray:
    """Reduce the last two axes by ``factor`` (padding the ragged edge), keeping max or all.

    Reduced one tile axis at a time with element-wise maximum / and over strided views: numpy's
    max over the two inner axes of [.., R, f, C, f] at once ran ~15x slower (57 ms for 8 x 512^2)."""
    if factor <= 1:
        return matrix
    *lead, rows, cols = matrix.shape
    out_r, out_c = math.ceil(rows / factor), math.ceil(cols / factor)
    padded = matrix
    if (rows, cols) != (out_r * factor, out_c * factor):
        fill = True if matrix.dtype == np.bool_ else 0
        padded = np.full((*lead, out_r * factor, out_c * factor), fill, dtype=matrix.dtype)
        padded[..., :rows, :cols] = matrix
    combine = np.logical_and if how == "all" else np.maximum
    # [..., out_r*f, out_c*f] -> [..., out_r, f, out_c, f]
    tiles = padded.reshape(*lead, out_r, factor, out_c, factor)
    across = tiles[..., 0, :, :].copy()  # [..., out_r, out_c, f]
    for i in range(1, factor):
        combine(across, tiles[..., i, :, :], out=across)
    out = across[..., 0].copy()  # [..., out_r, out_c]
    for j in range(1, factor):
        combine(out, across[..., j], out=out)
    return out


class ResultHeatmapSource:
    """Wraps an ``AttentionResult`` (weights [H, L, Lk]); exact when small, max-tiled when large."""

    def __init__(self, result, max_display: int = MAX_DISPLAY, *, weights: np.ndarray | None = None,
                 title_prefix: str = "head") -> None:
        self.result = result
        w = result.weights if weights is None else weights  # [H, L, Lk]
        if w.ndim != 3:
            raise ValueError(f"attention weights must be [heads, queries, keys], got shape {w.shape}")
        self.weights = w
        self.num_heads = int(w.shape[0])
        self.shape = (int(w.shape[1]), int(w.shape[2]))
        self.query_labels = list(result.tokens)
        self.key_labels = list(result.keys)
        self.mask = result.mask
        self._title_prefix = title_prefix
        self.mean = w.mean(axis=0, dtype=np.float64).astype(np.float32)  # [L, Lk]
        self._head_max = w.reshape(self.num_heads, -1).max(axis=1) if w.size else np.zeros(self.num_heads)
        self._mean_max = float(self.mean.max()) if self.mean.size else 0.0
        self.factor = max(1, math.ceil(max(self.shape) / max_display))
        if self.factor > 1:
            self._display = tile_reduce(w, self.factor)  # [H, L/f, Lk/f]
            self._display_mean = tile_reduce(self.mean, self.factor)
        else:
            self._display, self._display_mean = w, self.mean
        masked = None if self.mask is None else ~self.mask
        self._display_mask = None if masked is None or not masked.any() else tile_reduce(masked, self.factor, "all")

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

    def global_max(self) -> float:
        return float(self._head_max.max()) if self.num_heads else 0.0

    def head_title(self, head: Head) -> str:
        if head == MEAN:
            return f"mean over {self.num_heads} heads"
        return f"{self._title_prefix} {int(head)}"

    def downsample_note(self) -> str:
        if self.factor == 1:
            return ""
        return (f"overview: each pixel is the max of a {self.factor}x{self.factor} tile of cells; "
                "hover values are exact")
