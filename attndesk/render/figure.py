"""What a figure of attention heatmaps shows (``HeatmapFigure``), and the figure of an ``AttentionMap``.

``paint.paint_figure`` draws a ``HeatmapFigure`` onto any QPainter device (the window, PNG, SVG,
PDF); ``layout`` decides where things go. This module is plain data: which matrices, labels,
mask, colour scale, K/V groups and window band; ``figure_from_map`` fills it from a map through
``attndesk.runs.select`` (the one place that picks heads, regions and tiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attndesk.attention.types import MEAN, AttentionMap, Head
from attndesk.runs import select

from . import colormaps


@dataclass
class HeatmapFigure:
    """What to draw: n heatmaps sharing token labels, a colormap and (optionally) a scale.

    ``matrices`` [n, L, Lk]; ``mask`` [L, Lk] bool with True = may attend (None: nothing
    masked). Non-finite values (e.g. -inf masked scores) are drawn like masked cells.
    ``vmin``/``vmax`` fix the colour range (else 0..max, or symmetric around 0 when
    ``diverging``). With ``shared_scale=False`` each heatmap uses its own range and the colour
    bar reads as a fraction of each heatmap's range. ``log_scale`` colours log10 of the values
    from ``log_floor`` up (a decoder's first token takes most weight; the rest stays visible).
    ``annotate`` writes the value in each cell (None: only when cells are big enough).
    ``group`` heatmaps side by side share a K/V head, headed by ``group_labels``; ``window``
    outlines a sliding window's band (its right edge too unless ``causal``).
    """

    matrices: np.ndarray
    titles: list[str]
    query_labels: list[str]
    key_labels: list[str]
    mask: np.ndarray | None = None
    colormap: str = "viridis"
    shared_scale: bool = True
    vmin: float | None = None
    vmax: float | None = None
    diverging: bool = False
    suptitle: str = ""
    caption: str = ""
    value_label: str = "attention weight"
    x_title: str = "key tokens"
    y_title: str = "query tokens"
    annotate: bool | None = None
    tokens_per_cell: int = 1  # > 1: an overview whose cells are f x f tiles of tokens (labels stay per token)
    first_query: int = 0  # token position of the first row/column (a region keeps real positions)
    first_key: int = 0
    log_scale: bool = False
    log_floor: float | None = None  # None: from the key count (colormaps.log_floor)
    group: int = 1
    group_labels: list[str] = field(default_factory=list)
    window: int | None = None
    causal: bool = False

    def __post_init__(self) -> None:
        matrices = np.asarray(self.matrices)
        if matrices.ndim == 2:
            matrices = matrices[None]
        if matrices.ndim != 3 or matrices.shape[0] == 0 or 0 in matrices.shape[1:]:
            raise ValueError(f"matrices must be [n, L, Lk] with n, L, Lk > 0, got shape {matrices.shape}")
        self.matrices = matrices
        n, rows, cols = matrices.shape
        self.titles = list(self.titles) if self.titles else [f"{i}" for i in range(n)]
        if len(self.titles) != n:
            raise ValueError(f"{len(self.titles)} titles for {n} heatmaps")
        self.query_labels = [str(t) for t in self.query_labels]
        self.key_labels = [str(t) for t in self.key_labels]
        self._check_tiles(rows, cols)
        if self.mask is not None:
            mask = np.asarray(self.mask, dtype=bool)
            if mask.shape != (rows, cols):
                raise ValueError(f"mask shape {mask.shape} does not match the heatmaps' {(rows, cols)}")
            self.mask = mask
        if not colormaps.is_known(self.colormap_name):
            raise ValueError(f"unknown colormap {self.colormap!r}; choose one of: {', '.join(colormaps.COLORMAPS)}")
        if self.group < 1 or (self.group > 1 and len(self.group_labels) != -(-n // self.group)):
            raise ValueError(f"{len(self.group_labels)} group labels for {n} heatmaps in groups of {self.group}")
        if self.log_floor is None:
            self.log_floor = colormaps.log_floor(len(self.key_labels))

    def _check_tiles(self, rows: int, cols: int) -> None:
        f = int(self.tokens_per_cell)
        if f < 1:
            raise ValueError(f"tokens_per_cell must be >= 1, got {self.tokens_per_cell!r}")
        self.tokens_per_cell = f
        if -(-len(self.query_labels) // f) != rows:
            raise ValueError(f"{len(self.query_labels)} query labels for {rows} rows of {f} token(s)")
        if -(-len(self.key_labels) // f) != cols:
            raise ValueError(f"{len(self.key_labels)} key labels for {cols} columns of {f} token(s)")

    @property
    def colormap_name(self) -> str:
        """The map actually used: a diverging figure never uses a sequential map."""
        if self.diverging and self.colormap not in colormaps.DIVERGING_COLORMAPS:
            return colormaps.DEFAULT_DIVERGING
        return self.colormap

    def masked(self, index: int) -> np.ndarray:
        """Bool [L, Lk]: cells of heatmap ``index`` drawn as masked (mask False or non-finite)."""
        hidden = ~np.isfinite(self.matrices[index])
        if self.mask is not None:
            hidden |= ~self.mask
        return hidden

    @property
    def _floor(self) -> float:
        """The log scale's floor (__post_init__ fills it in from the key count when not given)."""
        assert self.log_floor is not None
        return self.log_floor

    def colour_values(self, index: int | None = None) -> np.ndarray:
        """What the colours encode: the values, or their log10 (from the floor) on a log scale."""
        values = self.matrices if index is None else self.matrices[index]
        return colormaps.to_log(values, self._floor) if self.log_scale else values

    def value_range(self, index: int | None = None) -> tuple[float, float]:
        """(vmin, vmax) in colour space of heatmap ``index``, or of all (the shared scale) when None."""
        lo, hi = finite_range(self.matrices if index is None else self.matrices[index])
        if self.log_scale:
            floor = self._floor
            to_log = lambda v: math.log10(max(float(v), floor))  # noqa: E731
            lo, hi = to_log(floor), to_log(hi)
            lo, hi = (
                (to_log(self.vmin) if self.vmin is not None else lo),
                (to_log(self.vmax) if self.vmax is not None else hi),
            )
        else:
            if self.diverging:
                bound = max(abs(lo), abs(hi)) or 1.0
                lo, hi = -bound, bound
            else:
                lo = min(0.0, lo)
            lo = float(self.vmin) if self.vmin is not None else lo
            hi = float(self.vmax) if self.vmax is not None else hi
        if not hi > lo:
            hi = lo + 1.0
        return lo, hi

    def scale_for(self, index: int) -> tuple[float, float]:
        return self.value_range(None if self.shared_scale else index)

    @property
    def relative_colorbar(self) -> bool:
        """True when heatmaps differ in range, so the bar shows fractions of each one's range."""
        if self.shared_scale or self.matrices.shape[0] == 1 or self.log_scale:
            return False
        return len({self.value_range(i) for i in range(self.matrices.shape[0])}) > 1


def finite_range(data: np.ndarray) -> tuple[float, float]:
    """(min, max) over the finite cells; (0, 1) when there are none."""
    lo, hi = float(data.min()), float(data.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):  # -inf masked scores, NaN: finite cells only
        finite = data[np.isfinite(data)]
        lo = float(finite.min()) if finite.size else 0.0
        hi = float(finite.max()) if finite.size else 1.0
    return lo, hi


# ---------------------------------------------------------------------------------------------
# the figure of a map


def _suptitle(map: AttentionMap, which: select.Which) -> str:
    n = map.num_heads
    base = map.title or "Attention weights"
    if which == select.ALL:
        text = f"{base}, all {n} heads" if n > 1 else f"{base}, single head"
    elif which == MEAN:
        text = f"{base}, mean over {n} heads"
    else:
        text = f"{base}, {map.label(int(which))} of {n} heads"
    if map.layer_kind:
        window = f", window {map.window}" if map.window else ""
        text += f" ({map.layer_kind} layer{window})"
    return text


def _groups(map: AttentionMap, which: select.Which) -> tuple[int, list[str]]:
    """Maps per K/V group and the group headers, when "all" heads of a grouped map are drawn."""
    if which != select.ALL or map.groups <= 1:
        return 1, []
    g = map.groups
    return g, [select.group_label(map, kv, range(kv * g, (kv + 1) * g)) for kv in range(map.num_heads // g)]


@dataclass
class _Cells:
    """What a figure's cells show: the matrices, their mask and labels, and where they start."""

    matrices: np.ndarray
    mask: np.ndarray | None
    factor: int
    value_label: str
    queries: list[str]
    keys: list[str]
    first_query: int = 0
    first_key: int = 0


def _cells(
    map: AttentionMap, which: select.Which, heads: list[Head], region: select.Region | None, show: str
) -> _Cells:
    """The ALiBi bias, the exact weights of ``region``, or the (overview of the) whole map."""
    queries, keys = list(map.queries), list(map.keys)
    if show == "alibi bias":
        matrices = np.stack([select.alibi_bias(map, h) for h in heads])
        return _Cells(matrices, None, 1, "ALiBi bias -m\u00b7|i - j|", queries, keys)
    if show != "weights":
        raise ValueError(f"show must be 'weights' or 'alibi bias', got {show!r}")
    if region is not None:
        (q0, q1), (k0, k1) = region = select.check_region(map, region)
        matrices = np.stack([select.weights(map, h, region) for h in heads])
        mask = select.mask(map, region)
        return _Cells(matrices, mask, 1, "attention weight", queries[q0:q1], keys[k0:k1], q0, k0)
    matrices, factor = select.overview(map, which)
    label = f"attention weight, max of each {factor}x{factor} tile" if factor > 1 else "attention weight"
    return _Cells(matrices, select.mask(map), factor, label, queries, keys)


def figure_from_map(
    map: AttentionMap,
    which: select.Which = select.ALL,
    colormap: str = "viridis",
    shared_scale: bool = True,
    *,
    region: select.Region | None = None,
    log_scale: bool = False,
    show: str = "weights",
) -> HeatmapFigure:
    """The heatmaps of one map: ``which`` = "all" (every head), "mean" (over heads) or a head index.

    ``region`` = ((q0, q1), (k0, k1)) restricts to those exact cells; without it a memory-bounded
    map is drawn from its overview (each cell the max of an f x f tile, labels still per token).
    ``show="alibi bias"`` draws the ALiBi bias -m |i - j| instead of the weights.
    """
    which = select.parse_which(which, map.num_heads)
    heads = select.heads_of(map, which)
    cells = _cells(map, which, heads, region, show)
    matrices, mask, factor, value_label = cells.matrices, cells.mask, cells.factor, cells.value_label
    queries, keys, first_query, first_key = cells.queries, cells.keys, cells.first_query, cells.first_key
    caption = " \u00b7 ".join(t for t in (map.summary, map.legend) if t)
    if factor > 1:
        caption += f" \u00b7 overview: {factor}x{factor} tokens per cell"
    if log_scale and show == "weights":
        value_label = f"{value_label} (log scale)"
    suptitle = _suptitle(map, which)
    if region is not None:
        suptitle += (
            f", queries {first_query}-{first_query + len(queries) - 1} x keys {first_key}-{first_key + len(keys) - 1}"
        )
    group, group_labels = _groups(map, which)
    return HeatmapFigure(
        matrices=matrices,
        titles=[select.head_title(map, h) for h in heads],
        query_labels=queries,
        key_labels=keys,
        mask=mask,
        colormap=colormap,
        shared_scale=shared_scale,
        suptitle=suptitle,
        caption=caption,
        value_label=value_label,
        tokens_per_cell=factor,
        first_query=first_query,
        first_key=first_key,
        log_scale=log_scale and show == "weights",
        group=group,
        group_labels=group_labels,
        window=map.window if region is None and show == "weights" else None,
        causal=select.is_causal(map) if map.window else False,
        vmax=0.0 if show == "alibi bias" else None,
    )


def suggested_size(figure: HeatmapFigure) -> tuple[int, int]:
    """A pixel size (at 96 dpi) in which the figure's labels have room."""
    return size_for_panels(figure.matrices.shape[0])


def suggested_size_of(map: AttentionMap, which: select.Which = select.ALL) -> tuple[int, int]:
    """``suggested_size`` of ``figure_from_map(map, which)`` without building it (no weights read)."""
    return size_for_panels(len(select.heads_of(map, select.parse_which(which, map.num_heads))))


def size_for_panels(n: int) -> tuple[int, int]:
    """A pixel size (at 96 dpi) for a figure of ``n`` heatmaps."""
    if n == 1:
        return (1100, 1000)
    if n <= 2:
        return (1600, 900)
    if n <= 4:
        return (1500, 1300)
    return (1800, 1500)
