"""A publication-style grid of attention heatmaps, painted with QPainter onto any paint device.

The same ``paint_figure`` draws into a QImage (PNG export, the window), a QSvgGenerator and a
QPdfWriter, so exported files look like the app. Text (titles, token labels, colour-bar ticks)
is always drawn as text, so SVG/PDF keep it selectable. Cells are vector rectangles on vector
devices while the figure stays small (``VECTOR_CELL_LIMIT``); beyond that, and always on raster
devices, each heatmap is one image, block-averaged down to the pixels it occupies, so a
2048 x 2048 matrix never becomes millions of drawing operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontInfo,
    QFontMetricsF,
    QImage,
    QPainter,
    QPainterPath,
    QPaintEngine,
    QPen,
)

from . import colormaps

# Vector output draws at most this many cells in total as rectangles (about 256 x 256); larger
# figures embed one raster image per heatmap while labels and the colour bar stay text.
VECTOR_CELL_LIMIT = 256 * 256
_VECTOR_ENGINES = {
    QPaintEngine.Type.SVG,
    QPaintEngine.Type.Pdf,
    QPaintEngine.Type.Picture,
}
_TEXT_RGB = (40, 40, 40)
_MUTED_RGB = (100, 100, 100)
_FRAME_RGB = (90, 90, 90)


@dataclass
class HeatmapFigure:
    """What to draw: n heatmaps sharing token labels, a colormap and (optionally) a scale.

    ``matrices`` [n, L, Lk]; ``mask`` [L, Lk] bool with True = may attend (None: nothing
    masked). Non-finite values (e.g. -inf masked scores) are drawn like masked cells.
    ``vmin``/``vmax`` fix the colour range (else 0..max, or symmetric around 0 when
    ``diverging``). With ``shared_scale=False`` each heatmap uses its own range and the colour
    bar reads as a fraction of each heatmap's range. ``annotate`` writes the value in each cell
    (None: only when cells are big enough to hold it).
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
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

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
        f = int(self.tokens_per_cell)
        if f < 1:
            raise ValueError(f"tokens_per_cell must be >= 1, got {self.tokens_per_cell!r}")
        self.tokens_per_cell = f
        if -(-len(self.query_labels) // f) != rows:
            raise ValueError(f"{len(self.query_labels)} query labels for {rows} rows of {f} token(s)")
        if -(-len(self.key_labels) // f) != cols:
            raise ValueError(f"{len(self.key_labels)} key labels for {cols} columns of {f} token(s)")
        if self.mask is not None:
            mask = np.asarray(self.mask, dtype=bool)
            if mask.shape != (rows, cols):
                raise ValueError(f"mask shape {mask.shape} does not match the heatmaps' {(rows, cols)}")
            self.mask = mask
        if not colormaps.is_known(self.colormap_name):
            raise ValueError(f"unknown colormap {self.colormap!r}; choose one of: {', '.join(colormaps.COLORMAPS)}")

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

    def value_range(self, index: int | None = None) -> tuple[float, float]:
        """(vmin, vmax) of heatmap ``index``, or of all of them (the shared scale) when None."""
        lo, hi = finite_range(self.matrices if index is None else self.matrices[index])
        if self.diverging:
            bound = max(abs(lo), abs(hi)) or 1.0
            lo, hi = -bound, bound
        else:
            lo = min(0.0, lo)
        if self.vmin is not None:
            lo = float(self.vmin)
        if self.vmax is not None:
            hi = float(self.vmax)
        if not hi > lo:
            hi = lo + 1.0
        return lo, hi

    def scale_for(self, index: int) -> tuple[float, float]:
        return self.value_range(None if self.shared_scale else index)

    @property
    def relative_colorbar(self) -> bool:
        """True when heatmaps differ in range, so the bar shows fractions of each one's range."""
        if self.shared_scale or self.matrices.shape[0] == 1:
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
# building a figure from a core result


def parse_which(which: Any, num_heads: int) -> str | int:
    """Normalise ``which`` to "all", "mean" or a head index in range; ValueError otherwise."""
    if isinstance(which, str):
        text = which.strip().lower()
        if text in ("all", "mean"):
            return text
        if text.startswith("head"):
            text = text[4:]
        try:
            which = int(text)
        except ValueError:
            raise ValueError(f"which must be 'all', 'mean' or a head number 0..{num_heads - 1}, got {which!r}") from None
    if isinstance(which, (bool, np.bool_)) or not isinstance(which, (int, np.integer)):
        raise ValueError(f"which must be 'all', 'mean' or a head number, got {which!r}")
    if not 0 <= int(which) < num_heads:
        raise ValueError(f"head {int(which)} does not exist: this run has heads 0..{num_heads - 1}")
    return int(which)


def settings_summary(result: Any) -> str:
    """One line naming everything that shaped these weights (for captions and file names)."""
    extra = getattr(result, "extra", None) or {}
    if "pretrained" in extra and extra.get("summary"):
        return str(extra["summary"])  # a pretrained layer: the model's own line (no seed, learned positions)
    cfg = result.config
    num_heads = result.weights.shape[0]
    queries, keys = len(result.tokens), len(result.keys)
    parts = [
        f"{queries} tokens" if keys == queries and result.key_tokens is None else f"{queries} query x {keys} key tokens",
        f"{num_heads} head{'s' if num_heads != 1 else ''}",
        f"embed {cfg.embed_dim}",
        f"d_k {cfg.head_dim}",
        f"mask: {cfg.mask}",
        "scaled by 1/\u221ad_k" if cfg.scaled else "unscaled",
        "sinusoidal positions" if cfg.positional else "no positional encoding",
    ]
    if cfg.dropout:
        parts.append(f"dropout {cfg.dropout:g} ({'training' if cfg.training else 'eval, off'})")
    parts += [f"seed {cfg.seed}", f"{result.device} {cfg.dtype}"]
    return " \u00b7 ".join(parts)


def _region_mask(result: Any, q0: int, q1: int, k0: int, k1: int) -> np.ndarray | None:
    """[q1-q0, k1-k0] bool (True = may attend) of a region, without building the full mask."""
    if getattr(result, "pyramid", None) is None:
        return None if result.mask is None else np.asarray(result.mask)[q0:q1, k0:k1]
    spec = getattr(result.pyramid, "mask_spec", None)
    rows = None if spec is None else spec.rows(q0, q1)  # [q1-q0 or 1, Lk] torch bool, or None
    if rows is None:
        return None
    rows = np.asarray(rows.cpu().numpy() if hasattr(rows, "cpu") else rows, dtype=bool)[:, k0:k1]
    return np.broadcast_to(rows, (q1 - q0, k1 - k0)).copy()


def _region_matrices(result: Any, heads: list[Any], q0: int, q1: int, k0: int, k1: int) -> np.ndarray:
    """Exact weights of the region for each entry of ``heads`` (an int or "mean"): [n, q1-q0, k1-k0]."""
    if getattr(result, "pyramid", None) is not None:
        return np.stack([np.asarray(result.pyramid.region(h, q0, q1, k0, k1), dtype=np.float32) for h in heads])
    weights = np.asarray(result.weights)  # [H, L, Lk]
    out = []
    for h in heads:
        if h == "mean":
            out.append(weights[:, q0:q1, k0:k1].mean(axis=0, dtype=np.float64).astype(np.float32))
        else:
            out.append(weights[h, q0:q1, k0:k1].astype(np.float32, copy=False))
    return np.stack(out)


def figure_from_result(
    result: Any,
    which: Any = "all",
    colormap: str = "viridis",
    shared_scale: bool = True,
    *,
    region: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> HeatmapFigure:
    """The heatmaps of one run: ``which`` = "all" (every head), "mean" (over heads) or a head index.

    ``region`` = ((q0, q1), (k0, k1)) restricts to query rows q0..q1-1 and key columns k0..k1-1
    with exact values. A memory-bounded run that kept only a display pyramid is drawn from its
    overview (each cell the max of an f x f tile, labels still per token) unless a region asks
    for exact cells.
    """
    queries, keys = list(result.tokens), list(result.keys)
    pyramid = getattr(result, "pyramid", None)
    num_heads = int(getattr(pyramid, "num_heads", 0) or np.asarray(result.weights).shape[0])
    which = parse_which(which, num_heads)
    if which == "all":
        heads: list[Any] = list(range(num_heads))
        titles = [f"head {h}" for h in heads]
        suptitle = f"Attention weights, all {num_heads} heads" if num_heads > 1 else "Attention weights, single head"
    elif which == "mean":
        heads = ["mean"]
        titles = [f"mean over {num_heads} heads"]
        suptitle = f"Attention weights, mean over {num_heads} heads"
    else:
        heads = [which]
        titles = [f"head {which}"]
        suptitle = f"Attention weights, head {which} of {num_heads}"
    caption = settings_summary(result)
    value_label = "attention weight"
    factor = 1
    first_query = first_key = 0
    if region is not None:
        (q0, q1), (k0, k1) = region
        if not (0 <= q0 < q1 <= len(queries) and 0 <= k0 < k1 <= len(keys)):
            raise ValueError(f"region {q0}:{q1},{k0}:{k1} is outside the {len(queries)}x{len(keys)} weights")
        matrices = _region_matrices(result, heads, q0, q1, k0, k1)
        mask = _region_mask(result, q0, q1, k0, k1)
        queries, keys = queries[q0:q1], keys[k0:k1]
        first_query, first_key = q0, k0
        suptitle += f", queries {q0}-{q1 - 1} x keys {k0}-{k1 - 1}"
    elif pyramid is not None:
        # the overview: tile maxima, so one sharp weight is never averaged away
        matrices = np.stack([np.asarray(pyramid.overview(h, "max"), dtype=np.float32) for h in heads])
        dead = pyramid.levels[0].all_masked
        mask = None if dead is None else ~np.asarray(dead, dtype=bool)
        factor = int(pyramid.factor)
        value_label = f"attention weight, max of each {factor}x{factor} tile"
        caption += f" \u00b7 overview: {factor}x{factor} tokens per cell"
    else:
        weights = np.asarray(result.weights)  # [H, L, Lk], float32 (float16 when stored halved)
        if which == "mean":
            # mean over heads in float64, stored as float32: [1, L, Lk]
            matrices = weights.mean(axis=0, dtype=np.float64, keepdims=True).astype(np.float32)
        else:
            chosen = weights if which == "all" else weights[which : which + 1]  # a view, no copy
            matrices = chosen.astype(np.float32, copy=False)
        mask = result.mask
    return HeatmapFigure(
        matrices=matrices,
        titles=titles,
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
    )


def suggested_size(figure: HeatmapFigure) -> tuple[int, int]:
    """A pixel size (at 96 dpi) in which the figure's labels have room."""
    n = figure.matrices.shape[0]
    if n == 1:
        return (1100, 1000)
    if n <= 2:
        return (1600, 900)
    if n <= 4:
        return (1500, 1300)
    return (1800, 1500)


# ---------------------------------------------------------------------------------------------
# helpers


def _qcolor(rgb: Sequence[int]) -> QColor:
    return QColor(int(rgb[0]), int(rgb[1]), int(rgb[2]))


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round-numbered tick values inside [lo, hi] (about ``target`` of them)."""
    span = hi - lo
    if not span > 0 or not math.isfinite(span):
        return [lo]
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        value = first + len(ticks) * step
    return ticks


def _tick_format(ticks: Sequence[float]) -> str:
    if len(ticks) < 2:
        return "{:.3g}"
    step = abs(ticks[1] - ticks[0])
    decimals = max(0, min(6, -math.floor(math.log10(step) + 1e-9)))
    if any(abs(t) >= 1e5 for t in ticks):
        return "{:.2g}"
    if step * 10**decimals % 1 > 1e-6:  # steps like 0.25 need one more digit
        decimals += 1
    return "{:.%df}" % decimals


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _label_step(count: int, cell: float, line: float) -> int:
    """Show every k-th label (k from 1, 2, 5, 10, 20, 25, 50, ...) so labels never overlap."""
    if cell >= line * 0.92:
        return 1
    need = line * 1.05 / max(cell, 1e-9)
    mag = 1
    while True:
        for m in (1, 2, 5, 10, 20, 25, 50):
            if m * mag >= need:
                return min(m * mag, max(1, count))
        mag *= 100


def _tile_sum(a: np.ndarray, fr: int, fc: int) -> np.ndarray:
    """Sum [L, Lk] float32 over fr x fc tiles (zero-padded at the ragged edge): [ceil(L/fr), ceil(Lk/fc)]."""
    length, key_length = a.shape
    rows, cols = -(-length // fr), -(-key_length // fc)
    if (rows * fr, cols * fc) != a.shape:
        padded = np.zeros((rows * fr, cols * fc), dtype=np.float32)
        padded[:length, :key_length] = a
        a = padded
    # reduce the row groups first (contiguous), then the column groups: much faster than reduceat
    return a.reshape(rows, fr, cols * fc).sum(axis=1).reshape(rows, cols, fc).sum(axis=2)


def block_mean(values: np.ndarray, hidden: np.ndarray, fr: int, fc: int) -> tuple[np.ndarray, np.ndarray]:
    """Average [L, Lk] over tiles of fr x fc cells, counting attendable cells only.

    Returns (means [ceil(L/fr), ceil(Lk/fc)], tile_hidden); a tile is hidden only when every
    cell in it is. Edge tiles are short (the padding is neither a weight nor masked).
    """
    values = np.asarray(values)
    if hidden.any():
        visible = ~hidden
        sums = _tile_sum(np.where(visible, values, 0).astype(np.float32, copy=False), fr, fc)
        counts = _tile_sum(visible.astype(np.float32), fr, fc)
    else:
        sums = _tile_sum(values.astype(np.float32, copy=False), fr, fc)
        counts = _tile_sum(np.ones(values.shape, np.float32), fr, fc) if values.size < 4096 else None
        if counts is None:  # without a mask only the ragged edge tiles are short
            length, key_length = values.shape
            row_sizes = np.full(sums.shape[0], fr, np.float32)
            row_sizes[-1] = length - fr * (sums.shape[0] - 1)
            col_sizes = np.full(sums.shape[1], fc, np.float32)
            col_sizes[-1] = key_length - fc * (sums.shape[1] - 1)
            counts = np.outer(row_sizes, col_sizes)
    means = sums.astype(np.float64) / np.maximum(counts, 1)
    return means, counts == 0


def _row_runs(hidden: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Masked cells as rectangles (row0, row1, col0, col1), half-open, merged along rows and
    then down identical consecutive rows (a padding column becomes one rectangle)."""
    runs: list[tuple[int, int, int, int]] = []
    open_runs: dict[tuple[int, int], int] = {}  # (col0, col1) -> start row of a run still growing
    for r in range(hidden.shape[0]):
        row = np.concatenate(([False], hidden[r], [False]))
        edges = np.flatnonzero(row[1:] != row[:-1])
        spans = set(zip(edges[0::2].tolist(), edges[1::2].tolist()))
        for span in list(open_runs):
            if span not in spans:
                runs.append((open_runs.pop(span), r, span[0], span[1]))
        for span in spans:
            open_runs.setdefault(span, r)
    for span, start in open_runs.items():
        runs.append((start, hidden.shape[0], span[0], span[1]))
    return runs


def hatch_segments(rects: Sequence[QRectF], spacing: float) -> list[QLineF]:
    """45-degree hatch lines covering the union of ``rects``, merged where they continue from
    one rectangle into the next so a masked triangle costs one line per stroke, not per row."""
    if not rects:
        return []
    step = spacing * math.sqrt(2.0)  # along x + y = c, perpendicular spacing -> c spacing
    cs, xs, xe = [], [], []
    for rect in rects:
        x0, y0, x1, y1 = rect.left(), rect.top(), rect.right(), rect.bottom()
        c = np.arange(math.floor((x0 + y0) / step) + 1, math.ceil((x1 + y1) / step)) * step
        if c.size == 0:
            continue
        start = np.maximum(x0, c - y1)
        end = np.minimum(x1, c - y0)
        keep = end > start + 1e-9
        cs.append(c[keep])
        xs.append(start[keep])
        xe.append(end[keep])
    if not cs:
        return []
    c = np.concatenate(cs)
    x_start = np.concatenate(xs)
    x_end = np.concatenate(xe)
    order = np.lexsort((x_start, c))
    c, x_start, x_end = c[order], x_start[order], x_end[order]
    # a new stroke starts where c changes or where the previous piece stops short of this one
    # (pieces on one line never overlap, so comparing with the previous end suffices)
    breaks = np.ones(len(c), dtype=bool)
    breaks[1:] = (c[1:] != c[:-1]) | (x_start[1:] > x_end[:-1] + 1e-6)
    first = np.flatnonzero(breaks)
    last = np.append(first[1:], len(c)) - 1
    lines = []
    for i, j in zip(first.tolist(), last.tolist()):
        x_a, x_b, cc = x_start[i], x_end[j], c[i]
        lines.append(QLineF(x_a, cc - x_a, x_b, cc - x_b))
    return lines


def _rgb_image(rgb: np.ndarray) -> QImage:
    """QImage (owning its pixels) from a uint8 [h, w, 3] array."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width = rgb.shape[:2]
    return QImage(rgb.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


# ---------------------------------------------------------------------------------------------
# layout


@dataclass
class FigureGeometry:
    """Where paint_figure put things (device coordinates): one rect per heatmap, the colour bar.

    Cell (r, c) of heatmap i spans ``maps[i]`` divided into L rows and Lk columns; useful for
    hit-testing a preview and for tests that read pixels back.
    """

    maps: list[QRectF]
    colorbar: QRectF | None
    label_steps: tuple[int, int]  # (query, key): every k-th label is shown


@dataclass
class _Fonts:
    tick: QFont
    title: QFont
    suptitle: QFont
    caption: QFont
    axis: QFont
    cell: QFont


@dataclass
class _Layout:
    cols: int
    rows: int
    map_w: float
    map_h: float
    origin_x: float  # left edge of the first map
    origin_y: float  # top edge of the first row's title
    title_h: float
    gap_x: float
    gap_y: float
    rotated: bool
    tick_pt: float
    x_step: int
    y_step: int
    x_extent: float = 0.0  # how far the key labels reach below a map (label offset excluded)
    y_extent: float = 0.0  # how far the query labels reach left of a map
    label_offset: float = 0.0  # gap between a map's edge and its labels (tick included)

    def map_rect(self, index: int) -> QRectF:
        r, c = divmod(index, self.cols)
        x = self.origin_x + c * (self.map_w + self.gap_x)
        y = self.origin_y + r * (self.title_h + self.map_h + self.gap_y) + self.title_h
        return QRectF(x, y, self.map_w, self.map_h)


class _Painter:
    """One painting pass: measures, lays out and draws a HeatmapFigure in a rectangle."""

    def __init__(self, painter: QPainter, rect: QRectF, figure: HeatmapFigure, vector: bool | None):
        self.p = painter
        self.rect = QRectF(rect)
        self.fig = figure
        device = painter.device()
        self.dpi = float(device.logicalDpiY()) if device is not None else 96.0
        engine = painter.paintEngine()
        if vector is None:
            vector = engine is not None and engine.type() in _VECTOR_ENGINES
        self.vector = bool(vector)
        self.family = QFontInfo(QFont()).family()
        n, length, key_length = figure.matrices.shape
        self.n, self.L, self.Lk = n, length, key_length  # cells (tiles when tokens_per_cell > 1)
        self.f = figure.tokens_per_cell
        self.nq, self.nk = len(figure.query_labels), len(figure.key_labels)  # tokens
        self.cmap = figure.colormap_name
        # computed once: each is a pass over every cell, and a figure may hold 8 x 2048 x 2048
        self.hidden = [figure.masked(i) for i in range(n)]
        self.any_hidden = any(h.any() for h in self.hidden)
        self.full_range = figure.value_range()
        self.ranges = [self.full_range] * n if figure.shared_scale else [figure.value_range(i) for i in range(n)]
        self.relative = not figure.shared_scale and n > 1 and len(set(self.ranges)) > 1
        # sizes scale with the smaller side so small exports stay balanced
        side_inch = min(self.rect.width(), self.rect.height()) / self.dpi
        self.zoom = float(np.clip(side_inch / 9.0, 0.75, 1.6))

    # units ------------------------------------------------------------------------------------
    def pt(self, points: float) -> float:
        """Device pixels of a length given in points (1/72 inch) on this device."""
        return points * self.dpi / 72.0

    def font(self, points: float, bold: bool = False) -> QFont:
        font = QFont(self.family)
        font.setPixelSize(max(1, round(self.pt(points * self.zoom))))
        font.setBold(bold)
        return font

    def metrics(self, font: QFont) -> QFontMetricsF:
        return QFontMetricsF(font, self.p.device())

    # layout -----------------------------------------------------------------------------------
    def measure_header(self, fonts: _Fonts) -> float:
        width = self.rect.width() - 2 * self.margin
        height = 0.0
        if self.fig.suptitle:
            height += self.metrics(fonts.suptitle).height() * 1.25
        if self.fig.caption:
            box = self.metrics(fonts.caption).boundingRect(
                QRectF(0, 0, width, 1e6), int(Qt.TextFlag.TextWordWrap), self.fig.caption
            )
            height += box.height() + self.metrics(fonts.caption).height() * 0.3
        return height + (self.pt(6) if height else 0.0)

    def label_texts(self, labels: Sequence[str], step: int, first: int = 0) -> list[tuple[int, str]]:
        if step == 1:
            return list(enumerate(labels))
        # a subset: name the token's position too, so a reader can place it
        return [(i, f"{labels[i]} ({first + i})") for i in range(0, len(labels), step)]

    def max_label_width(self, font: QFont, labels: Sequence[str]) -> float:
        fm = self.metrics(font)
        widest = max((fm.horizontalAdvance(t) for t in labels), default=0.0)
        return min(widest, self.label_cap(font))

    def label_cap(self, font: QFont) -> float:
        # about 14 average characters, and never more than a fifth of the figure
        fm = self.metrics(font)
        return min(fm.averageCharWidth() * 14, 0.2 * min(self.rect.width(), self.rect.height()))

    def colorbar_width(self, fonts: _Fonts) -> float:
        fm = self.metrics(fonts.tick)
        lo, hi = (0.0, 1.0) if self.relative else self.full_range
        ticks = nice_ticks(lo, hi)
        fmt = _tick_format(ticks)
        tick_w = max(fm.horizontalAdvance(fmt.format(t)) for t in ticks)
        width = self.pt(12) + self.pt(4) + tick_w + self.pt(6) + self.metrics(fonts.axis).height()
        if self.any_hidden:
            width = max(width, self.pt(14) + self.pt(4) + self.metrics(fonts.tick).horizontalAdvance("masked"))
        return self.pt(14) + width

    def layout(self, fonts: _Fonts, grid: QRectF, tick_pt: float, rotated: bool) -> _Layout | None:
        # label subsets depend on the cell size, which depends on the room the labels take:
        # iterate until the shown labels are the ones that were measured
        x_step = y_step = 1
        lay = None
        for _ in range(4):
            lay = self._layout_once(fonts, grid, tick_pt, rotated, x_step, y_step)
            if lay is None or (lay.x_step <= x_step and lay.y_step <= y_step):
                break
            x_step, y_step = max(x_step, lay.x_step), max(y_step, lay.y_step)
        if lay is not None:
            lay.x_step, lay.y_step = max(x_step, lay.x_step), max(y_step, lay.y_step)
        return lay

    def _layout_once(self, fonts: _Fonts, grid: QRectF, tick_pt: float, rotated: bool, x_step: int, y_step: int) -> _Layout | None:
        font = self.font(tick_pt)
        fm = self.metrics(font)
        line = fm.height()
        pad = self.pt(3)
        offset = pad + self.pt(2.5)
        axis_h = self.metrics(fonts.axis).height()
        y_extent = self.max_label_width(font, [t for _, t in self.label_texts(self.fig.query_labels, y_step, self.fig.first_query)])
        y_band = y_extent + offset + pad + axis_h
        x_extent = self.max_label_width(font, [t for _, t in self.label_texts(self.fig.key_labels, x_step, self.fig.first_key)]) if rotated else line
        x_band = x_extent + offset + pad + axis_h
        title_h = self.metrics(fonts.title).height() * 1.35
        gap_x = max(self.pt(10), line * 1.3)  # rotated labels of neighbouring maps must not touch
        gap_y = self.pt(8)
        aspect_limit = 1.0 if self.L == self.Lk else 4.0
        best = None
        for cols in range(1, self.n + 1):
            rows = math.ceil(self.n / cols)
            if rows * cols - self.n >= cols:
                continue
            avail_w = grid.width() - y_band - (cols - 1) * gap_x
            avail_h = grid.height() - x_band - rows * title_h - (rows - 1) * gap_y
            if avail_w <= 0 or avail_h <= 0:
                continue
            cw, ch = avail_w / cols / self.Lk, avail_h / rows / self.L
            cell = min(cw, ch)
            cw, ch = min(cw, cell * aspect_limit), min(ch, cell * aspect_limit)
            score = cw * ch
            if best is None or score > best[0] * 1.0001:
                best = (score, cols, rows, cw, ch)
        if best is None:
            return None
        _, cols, rows, cw, ch = best
        map_w, map_h = cw * self.Lk, ch * self.L
        used_w = y_band + cols * map_w + (cols - 1) * gap_x
        used_h = rows * (title_h + map_h) + (rows - 1) * gap_y + x_band
        origin_x = grid.left() + (grid.width() - used_w) / 2 + y_band
        origin_y = grid.top() + (grid.height() - used_h) / 2
        x_step = max(x_step, _label_step(self.nk, cw / self.f, line))
        y_step = max(y_step, _label_step(self.nq, ch / self.f, line))
        return _Layout(
            cols, rows, map_w, map_h, origin_x, origin_y, title_h, gap_x, gap_y, rotated, tick_pt,
            x_step, y_step, x_extent, y_extent, offset,
        )

    def choose_layout(self, fonts: _Fonts, grid: QRectF) -> _Layout:
        fallback = None
        for tick_pt in (9.0, 8.0, 7.0):
            font = self.font(tick_pt)
            fm = self.metrics(font)
            horizontal = self.layout(fonts, grid, tick_pt, rotated=False)
            if horizontal is not None and horizontal.y_step == 1:
                cell_w = horizontal.map_w / self.Lk / self.f
                widest = max(fm.horizontalAdvance(t) for t in self.fig.key_labels)
                if widest + self.pt(3) <= cell_w:
                    return horizontal
            rotated = self.layout(fonts, grid, tick_pt, rotated=True)
            if rotated is None:
                continue
            if rotated.x_step == 1 and rotated.y_step == 1:
                return rotated
            if fallback is None:
                fallback = rotated
        if fallback is not None:
            return fallback
        # pathological sizes: squeeze everything with the smallest font
        return self.layout(fonts, grid, 7.0, rotated=True) or _Layout(
            1, self.n, max(1.0, grid.width()), max(1.0, grid.height() / self.n), grid.left(), grid.top(), 0, 0, 0, True, 7.0, self.nk, self.nq
        )

    # drawing ----------------------------------------------------------------------------------
    def paint(self) -> FigureGeometry:
        p = self.p
        p.save()
        try:
            p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
            p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            p.fillRect(self.rect, QColor(255, 255, 255))
            self.margin = self.pt(10) * self.zoom
            fonts = _Fonts(
                tick=self.font(9),
                title=self.font(10.5, bold=True),
                suptitle=self.font(13, bold=True),
                caption=self.font(9),
                axis=self.font(9),
                cell=self.font(7.5),
            )
            header_h = self.measure_header(fonts)
            self.draw_header(fonts)
            bar_w = self.colorbar_width(fonts)
            grid = QRectF(
                self.rect.left() + self.margin,
                self.rect.top() + self.margin + header_h,
                self.rect.width() - 2 * self.margin - bar_w,
                self.rect.height() - 2 * self.margin - header_h,
            )
            lay = self.choose_layout(fonts, grid)
            fonts.tick = self.font(lay.tick_pt)
            for i in range(self.n):
                self.draw_panel(i, lay, fonts)
            self.draw_axis_labels(lay, fonts)
            first = lay.map_rect(0)
            last_row_bottom = lay.map_rect((lay.rows - 1) * lay.cols).bottom()
            maps_right = max(lay.map_rect(i).right() for i in range(self.n))
            bar_x = min(grid.right(), maps_right + self.pt(6)) + self.pt(14)
            bar = QRectF(bar_x, first.top(), self.pt(12), last_row_bottom - first.top())
            bar = self.draw_colorbar(bar, fonts)
            return FigureGeometry([lay.map_rect(i) for i in range(self.n)], bar, (lay.y_step, lay.x_step))
        finally:
            p.restore()

    def draw_header(self, fonts: _Fonts) -> None:
        p = self.p
        x, y = self.rect.left() + self.margin, self.rect.top() + self.margin
        width = self.rect.width() - 2 * self.margin
        if self.fig.suptitle:
            p.setFont(fonts.suptitle)
            p.setPen(_qcolor(_TEXT_RGB))
            h = self.metrics(fonts.suptitle).height()
            text = self.metrics(fonts.suptitle).elidedText(self.fig.suptitle, Qt.TextElideMode.ElideRight, width)
            p.drawText(QRectF(x, y, width, h), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), text)
            y += h * 1.25
        if self.fig.caption:
            p.setFont(fonts.caption)
            p.setPen(_qcolor(_MUTED_RGB))
            p.drawText(QRectF(x, y, width, 1e6), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap), self.fig.caption)

    def draw_panel(self, index: int, lay: _Layout, fonts: _Fonts) -> None:
        p = self.p
        target = lay.map_rect(index)
        # title, centred over the map (may use the gap beside it when the map is narrow)
        title = self.fig.titles[index]
        if self.relative:
            lo, hi = self.ranges[index]
            title = f"{title}  (max {hi:.3g})" if lo == 0 else f"{title}  ({lo:.3g} to {hi:.3g})"
        p.setFont(fonts.title)
        p.setPen(_qcolor(_TEXT_RGB))
        title_w = target.width() + lay.gap_x * 0.9
        tm = self.metrics(fonts.title)
        p.drawText(
            QRectF(target.center().x() - title_w / 2, target.top() - lay.title_h, title_w, lay.title_h),
            int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter),
            tm.elidedText(title, Qt.TextElideMode.ElideRight, title_w),
        )
        values = self.fig.matrices[index]  # no float64 copy: a head may hold 2048 x 2048 cells
        hidden = self.hidden[index]
        vmin, vmax = self.ranges[index]
        cells = self.L * self.Lk * self.n
        if self.vector and cells <= VECTOR_CELL_LIMIT:
            self.draw_cells_vector(target, values, hidden, vmin, vmax)
            grid, block_hidden = target, hidden
        else:
            grid, block_hidden = self.draw_cells_image(target, values, hidden, vmin, vmax)
        if block_hidden.any():
            self.draw_hatch(grid, block_hidden, bounds=target)
        if self.annotate_cells(target, fonts):
            self.draw_values(target, values, hidden, vmin, vmax, fonts)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.setPen(QPen(_qcolor(_FRAME_RGB), max(0.5, self.pt(0.5))))
        p.drawRect(target)
        r, c = divmod(index, lay.cols)
        if c == 0:
            self.draw_y_labels(target, lay, fonts)
        below = index + lay.cols
        if below >= self.n:
            self.draw_x_labels(target, lay, fonts)

    def draw_cells_image(self, target: QRectF, values: np.ndarray, hidden: np.ndarray, vmin: float, vmax: float):
        # device pixels the map covers; never build an image larger than that (x2 for print)
        scale = 2.0 if self.vector else 1.0
        t = self.p.transform()
        px_w = max(1, int(math.ceil(target.width() * math.hypot(t.m11(), t.m12()) * scale)))
        px_h = max(1, int(math.ceil(target.height() * math.hypot(t.m21(), t.m22()) * scale)))
        # vector files: at most 1024 px per side, so a 2048 x 2048 matrix stays a few MB
        limit = 1024 if self.vector else 1 << 30
        fr = max(1, -(-self.L // min(px_h, limit)))  # cells per tile along each axis
        fc = max(1, -(-self.Lk // min(px_w, limit)))
        grid = QRectF(target)
        if (fr, fc) != (1, 1):
            values, hidden = block_mean(values, hidden, fr, fc)
            # tiles at the ragged edge are short: the tile grid reaches past the map, clipped below
            grid.setWidth(target.width() * values.shape[1] * fc / self.Lk)
            grid.setHeight(target.height() * values.shape[0] * fr / self.L)
        rgb = colormaps.map_values(values, self.cmap, vmin, vmax)  # [rows, cols, 3]
        rgb[hidden] = colormaps.mask_rgb(self.cmap)
        self.p.save()
        self.p.setClipRect(target, Qt.ClipOperation.IntersectClip)
        self.p.drawImage(grid, _rgb_image(rgb))
        self.p.restore()
        return grid, hidden

    def draw_cells_vector(self, target: QRectF, values: np.ndarray, hidden: np.ndarray, vmin: float, vmax: float) -> None:
        p = self.p
        lut = colormaps.lookup_table(self.cmap)
        index = colormaps.value_indices(values, vmin, vmax, len(lut))
        index[hidden] = -1  # masked: painted below in the mask colour
        cw, ch = target.width() / self.Lk, target.height() / self.L
        overlap = min(cw, ch) * 0.02  # hides hairline seams between neighbouring cells in viewers
        paths: dict[int, QPainterPath] = {}
        for r in range(self.L):
            row = index[r]
            edges = np.flatnonzero(np.diff(row)) + 1
            starts = np.concatenate(([0], edges))
            ends = np.concatenate((edges, [self.Lk]))
            y = target.top() + r * ch
            for s, e in zip(starts.tolist(), ends.tolist()):
                code = int(row[s])
                path = paths.get(code)
                if path is None:
                    path = paths[code] = QPainterPath()
                    path.setFillRule(Qt.FillRule.WindingFill)  # overlaps must not cancel (even-odd would)
                right_pad = overlap if e < self.Lk else 0.0
                bottom_pad = overlap if r < self.L - 1 else 0.0
                path.addRect(QRectF(target.left() + s * cw, y, (e - s) * cw + right_pad, ch + bottom_pad))
        p.setPen(Qt.PenStyle.NoPen)
        for code, path in paths.items():
            color = _qcolor(colormaps.mask_rgb(self.cmap)) if code < 0 else _qcolor(lut[code])
            p.fillPath(path, color)

    def draw_hatch(self, target: QRectF, hidden: np.ndarray, bounds: QRectF | None = None) -> None:
        """Fill and hatch the hidden cells of a rows x cols grid spanning ``target``."""
        p = self.p
        rows, cols = hidden.shape
        cw, ch = target.width() / cols, target.height() / rows
        rects = [
            QRectF(target.left() + c0 * cw, target.top() + r0 * ch, (c1 - c0) * cw, (r1 - r0) * ch)
            for r0, r1, c0, c1 in _row_runs(hidden)
        ]
        if bounds is not None:  # a tile grid may reach past the map; SVG ignores clipping, so cut here
            rects = [r for r in (rect.intersected(bounds) for rect in rects) if not r.isEmpty()]
        clip = QPainterPath()
        clip.setFillRule(Qt.FillRule.WindingFill)
        for rect in rects:
            clip.addRect(rect)
        p.save()
        # exact pixels in PNG: the hatch is either the hatch colour or the mask colour, never a blend
        p.setRenderHint(QPainter.RenderHint.Antialiasing, self.vector)
        p.setClipPath(clip, Qt.ClipOperation.IntersectClip)
        p.setPen(QPen(_qcolor(colormaps.hatch_rgb(self.cmap)), max(1.0, self.pt(0.6)) if not self.vector else self.pt(0.6)))
        p.drawLines(hatch_segments(rects, max(4.0, self.pt(3.5))))
        p.restore()

    def annotate_cells(self, target: QRectF, fonts: _Fonts) -> bool:
        if self.f > 1:  # tiles are not single weights
            return False
        if self.fig.annotate is not None:
            return self.fig.annotate
        fm = self.metrics(fonts.cell)
        cw, ch = target.width() / self.Lk, target.height() / self.L
        return cw >= fm.horizontalAdvance("0.00") * 1.3 and ch >= fm.height() * 1.6

    def draw_values(self, target: QRectF, values: np.ndarray, hidden: np.ndarray, vmin: float, vmax: float, fonts: _Fonts) -> None:
        p = self.p
        cw, ch = target.width() / self.Lk, target.height() / self.L
        # the numbers grow with the cells (within 7.5-11 pt) so big cells do not hold tiny text
        font = QFont(fonts.cell)
        low, high = fonts.cell.pixelSize(), self.pt(11 * self.zoom)
        font.setPixelSize(max(1, round(min(high, max(low, min(ch * 0.3, cw * 0.24))))))
        p.setFont(font)
        rgb = colormaps.map_values(values, self.cmap, vmin, vmax).astype(np.float64)
        luminance = rgb @ np.array([0.2126, 0.7152, 0.0722])
        dark, light = QColor(20, 20, 20), QColor(250, 250, 250)
        for r in range(self.L):
            for c in range(self.Lk):
                if hidden[r, c]:
                    continue
                p.setPen(dark if luminance[r, c] > 140 else light)
                p.drawText(
                    QRectF(target.left() + c * cw, target.top() + r * ch, cw, ch),
                    int(Qt.AlignmentFlag.AlignCenter),
                    f"{values[r, c]:.2f}".replace("-0.00", "0.00"),
                )

    def draw_y_labels(self, target: QRectF, lay: _Layout, fonts: _Fonts) -> None:
        p = self.p
        fm = self.metrics(fonts.tick)
        cap = self.label_cap(fonts.tick)
        ch = target.height() / self.L / self.f  # one token's height
        pad = self.pt(3)
        tick = self.pt(2.5)
        p.setFont(fonts.tick)
        pen = QPen(_qcolor(_FRAME_RGB), max(0.5, self.pt(0.5)))
        for i, text in self.label_texts(self.fig.query_labels, lay.y_step, self.fig.first_query):
            y = target.top() + (i + 0.5) * ch
            if lay.y_step > 1:
                p.setPen(pen)
                p.drawLine(QPointF(target.left() - tick, y), QPointF(target.left(), y))
            p.setPen(_qcolor(_TEXT_RGB))
            label = fm.elidedText(text, Qt.TextElideMode.ElideRight, cap)
            p.drawText(
                QRectF(target.left() - pad - cap - tick, y - fm.height() / 2, cap, fm.height()),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                label,
            )

    def draw_x_labels(self, target: QRectF, lay: _Layout, fonts: _Fonts) -> None:
        p = self.p
        fm = self.metrics(fonts.tick)
        cap = self.label_cap(fonts.tick)
        cw = target.width() / self.Lk / self.f  # one token's width
        pad = self.pt(3)
        tick = self.pt(2.5)
        p.setFont(fonts.tick)
        pen = QPen(_qcolor(_FRAME_RGB), max(0.5, self.pt(0.5)))
        for i, text in self.label_texts(self.fig.key_labels, lay.x_step, self.fig.first_key):
            x = target.left() + (i + 0.5) * cw
            if lay.x_step > 1:
                p.setPen(pen)
                p.drawLine(QPointF(x, target.bottom()), QPointF(x, target.bottom() + tick))
            p.setPen(_qcolor(_TEXT_RGB))
            if lay.rotated:
                label = fm.elidedText(text, Qt.TextElideMode.ElideRight, cap)
                p.save()
                p.translate(x, target.bottom() + pad + tick)
                p.rotate(-90)  # reads bottom to top, ending at the axis
                p.drawText(
                    QRectF(-cap, -fm.height() / 2, cap, fm.height()),
                    int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                    label,
                )
                p.restore()
            else:
                p.drawText(
                    QRectF(x - cw / 2, target.bottom() + pad, cw, fm.height()),
                    int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
                    text,
                )

    def draw_axis_labels(self, lay: _Layout, fonts: _Fonts) -> None:
        p = self.p
        p.setFont(fonts.axis)
        p.setPen(_qcolor(_MUTED_RGB))
        fm = self.metrics(fonts.axis)
        pad = self.pt(3)
        x_note = f", every {_ordinal(lay.x_step)} labelled" if lay.x_step > 1 else ""
        y_note = f", every {_ordinal(lay.y_step)} labelled" if lay.y_step > 1 else ""
        # x title under the bottom row's maps, y title left of the first column's labels
        bottom_left = lay.map_rect((lay.rows - 1) * lay.cols)
        last = lay.map_rect(self.n - 1)
        span_left, span_right = bottom_left.left(), bottom_left.left() + lay.cols * lay.map_w + (lay.cols - 1) * lay.gap_x
        if lay.rows > 1 and self.n % lay.cols:
            span_right = last.right()
        y = bottom_left.bottom() + lay.label_offset + lay.x_extent + pad
        p.drawText(
            QRectF(span_left, y, span_right - span_left, fm.height()),
            int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
            fm.elidedText(self.fig.x_title + x_note, Qt.TextElideMode.ElideRight, span_right - span_left),
        )
        top = lay.map_rect(0).top()
        bottom = bottom_left.bottom()
        x = lay.origin_x - lay.label_offset - lay.y_extent - pad - fm.height()
        p.save()
        p.translate(x, bottom)
        p.rotate(-90)
        p.drawText(
            QRectF(0, 0, bottom - top, fm.height()),
            int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
            fm.elidedText(self.fig.y_title + y_note, Qt.TextElideMode.ElideRight, bottom - top),
        )
        p.restore()

    def draw_colorbar(self, bar: QRectF, fonts: _Fonts) -> QRectF | None:
        p = self.p
        fm = self.metrics(fonts.tick)
        if self.any_hidden:
            # leave room under the bar for the "masked" key
            bar.setBottom(bar.bottom() - self.pt(14) - fm.height())
        if bar.height() <= 0:
            return None
        lut = colormaps.lookup_table(self.cmap)
        gradient = lut[::-1][:, None, :]  # [256, 1, 3], top = high values
        p.drawImage(bar, _rgb_image(gradient))
        p.setBrush(Qt.BrushStyle.NoBrush)
        frame = QPen(_qcolor(_FRAME_RGB), max(0.5, self.pt(0.5)))
        p.setPen(frame)
        p.drawRect(bar)
        relative = self.relative
        lo, hi = (0.0, 1.0) if relative else self.full_range
        if not relative:
            # a fixed vmin/vmax that cuts the data: triangles say "beyond this end" (as matplotlib's extend)
            data_lo, data_hi = finite_range(self.fig.matrices)
            tip = bar.width() * 0.9
            for beyond, y_base, y_tip, rgb in (
                (data_hi > hi + 1e-12 * abs(hi), bar.top(), bar.top() - tip, lut[-1]),
                (data_lo < lo - 1e-12 * abs(lo), bar.bottom(), bar.bottom() + tip, lut[0]),
            ):
                if beyond:
                    triangle = QPainterPath()
                    triangle.moveTo(bar.left(), y_base)
                    triangle.lineTo(bar.right(), y_base)
                    triangle.lineTo(bar.center().x(), y_tip)
                    triangle.closeSubpath()
                    p.fillPath(triangle, _qcolor(rgb))
                    p.drawPath(triangle)
        ticks = nice_ticks(lo, hi)
        fmt = _tick_format(ticks)
        p.setFont(fonts.tick)
        tick_len = self.pt(3)
        widest = 0.0
        for t in ticks:
            y = bar.bottom() - (t - lo) / (hi - lo) * bar.height()
            p.setPen(frame)
            p.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + tick_len, y))
            p.setPen(_qcolor(_TEXT_RGB))
            text = fmt.format(t)
            widest = max(widest, fm.horizontalAdvance(text))
            p.drawText(
                QRectF(bar.right() + tick_len + self.pt(1.5), y - fm.height() / 2, fm.horizontalAdvance(text) + 2, fm.height()),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                text,
            )
        label = self.fig.value_label
        if relative:
            label = f"{label}, fraction of each head's range" if self.fig.vmin is None else f"{label} (per-head range)"
        afm = self.metrics(fonts.axis)
        p.setFont(fonts.axis)
        p.setPen(_qcolor(_MUTED_RGB))
        p.save()
        p.translate(bar.right() + tick_len + self.pt(6) + widest, bar.bottom())
        p.rotate(-90)
        p.drawText(
            QRectF(0, 0, bar.height(), afm.height()),
            int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
            afm.elidedText(label, Qt.TextElideMode.ElideRight, bar.height()),
        )
        p.restore()
        if self.any_hidden:
            swatch = QRectF(bar.left(), bar.bottom() + self.pt(10), self.pt(12), self.pt(12))
            p.fillRect(swatch, _qcolor(colormaps.mask_rgb(self.cmap)))
            self.draw_hatch(swatch, np.ones((1, 1), dtype=bool))
            p.setPen(frame)
            p.drawRect(swatch)
            p.setFont(fonts.tick)
            p.setPen(_qcolor(_TEXT_RGB))
            p.drawText(
                QRectF(swatch.right() + self.pt(4), swatch.center().y() - fm.height() / 2, fm.horizontalAdvance("masked") + 4, fm.height()),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                "masked",
            )
        return bar


def paint_figure(painter: QPainter, rect: QRectF, figure: HeatmapFigure, *, vector: bool | None = None) -> FigureGeometry:
    """Draw ``figure`` into ``rect`` with an active ``painter``.

    ``vector`` None picks vector cells for SVG/PDF/QPicture devices (within VECTOR_CELL_LIMIT)
    and one image per heatmap elsewhere. Lengths are in device pixels; text sizes follow the
    device's DPI, so the same figure at a higher DPI prints the same physical size.
    Returns where the heatmaps and the colour bar went.
    """
    return _Painter(painter, rect, figure, vector).paint()
