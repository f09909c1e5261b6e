"""The one place that turns an ``AttentionMap`` into matrices: which heads, which cells, how tiled.

The heatmap panel, the export dialog, the figure renderer and the CLI all ask here, so "all
heads / the mean / one head / a region" and tile reduction mean the same everywhere:

- ``weights(map, head, region=None)`` -> float32 [Lq', Lk']: exact weights of one head or of
  the mean over heads (float64 accumulation), of the whole matrix or of a region.
- ``stack(map, which, region=None)`` -> float32 [n, Lq', Lk']: ``which`` = "all", "mean" or a head.
- ``overview(map, which)`` -> ([n, R, C], factor): what to draw of the whole matrix (a
  memory-bounded map's tile maxima, else the exact weights, factor 1).
- ``mask(map, region=None)``: the bool mask (True = may attend) of the same cells, or None.
- ``tile_reduce(matrix, factor, how)``: max / mean / sum / all / any over f x f tiles.
- ``drop_keys(map, keys, renormalise)``: a map without some key columns (a decoder's first token).
- ``alibi_bias(map, head)``: the ALiBi score bias -m_h |i - j| that the map's slopes imply.

A region is ((q0, q1), (k0, k1)): query rows q0..q1-1 x key columns k0..k1-1, in token positions.
Qt-free: numpy and the core's own types only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import numpy as np

from attndesk.attention.types import MEAN, AttentionMap, Head
from attndesk.errors import ConfigError
from attndesk.system.free_memory import format_bytes

ALL: Literal["all"] = "all"
Which = Head | Literal["all"]
Region = tuple[tuple[int, int], tuple[int, int]]
REDUCTIONS = ("max", "mean", "sum", "all", "any")


class OverviewOnly(ValueError):
    """The map kept only a display overview: exact numbers exist only for a region."""


# ---------------------------------------------------------------------------------------------
# which heads


def parse_which(which: object, num_heads: int) -> Which:
    """Normalise ``which`` to "all", "mean" or a head index in range ("head3", "3" and 3 alike)."""
    if isinstance(which, str):
        text = which.strip().lower()
        if text in (ALL, MEAN):
            return text
        text = text.removeprefix("head").strip()
        try:
            which = int(text)
        except ValueError:
            raise ValueError(
                f"which must be 'all', 'mean' or a head number 0..{num_heads - 1}, got {which!r}"
            ) from None
    if isinstance(which, (bool, np.bool_)) or not isinstance(which, (int, np.integer)):
        raise ValueError(f"which must be 'all', 'mean' or a head number, got {which!r}")
    if not 0 <= int(which) < num_heads:
        raise ValueError(f"head {int(which)} does not exist: this run has heads 0..{num_heads - 1}")
    return int(which)


def heads_of(map: AttentionMap, which: Which) -> list[Head]:
    """The heads ``which`` draws, in order: every head for "all", else the one head (or MEAN)."""
    which = parse_which(which, map.num_heads)
    return list(range(map.num_heads)) if which == ALL else [which]


def check_region(map: AttentionMap, region: Region) -> Region:
    """``region`` as ints, or ValueError when it is empty or leaves the Lq x Lk matrix."""
    (q0, q1), (k0, k1) = ((int(a), int(b)) for a, b in region)
    lq, lk = map.shape
    if not (0 <= q0 < q1 <= lq and 0 <= k0 < k1 <= lk):
        raise ValueError(f"region {q0}:{q1},{k0}:{k1} is outside the {lq}x{lk} weights")
    return (q0, q1), (k0, k1)


# ---------------------------------------------------------------------------------------------
# exact weights


def mean_over_heads(weights: np.ndarray) -> np.ndarray:
    """float32 [..., Lq, Lk]: the mean over the head axis (-3), accumulated in float64."""
    return np.asarray(weights).mean(axis=-3, dtype=np.float64).astype(np.float32)


def weights(map: AttentionMap, head: Head, region: Region | None = None) -> np.ndarray:
    """Exact float32 weights [Lq', Lk'] of one head (or MEAN) over the whole matrix or ``region``.

    A memory-bounded map recomputes a region from its kept projections (ConfigError when the
    region is too large to hold) and has no whole-matrix weights (``OverviewOnly``).
    """
    head = _head(map, head)
    if map.pyramid is not None:
        if region is None or map.exact is None:
            lq, lk = map.shape
            raise OverviewOnly(
                f"this run kept only an overview of its {lq:,} x {lk:,} weights (they exceed the memory "
                "budget): ask for an exact region, export an image, or raise the memory budget"
            )
        (q0, q1), (k0, k1) = check_region(map, region)
        return np.asarray(map.pyramid.region(head, q0, q1, k0, k1), dtype=np.float32)
    w = np.asarray(map.weights)  # [H, Lq, Lk]
    if region is not None:
        (q0, q1), (k0, k1) = check_region(map, region)
        w = w[:, q0:q1, k0:k1]
    if head == MEAN:
        return mean_over_heads(w)
    return w[head].astype(np.float32, copy=False)


def stack(map: AttentionMap, which: Which, region: Region | None = None) -> np.ndarray:
    """float32 [n, Lq', Lk']: every head for "all" (a view of the weights when possible), else one."""
    heads = heads_of(map, which)
    if len(heads) == map.num_heads and len(heads) > 1 and map.pyramid is None:
        w = np.asarray(map.weights)
        if region is not None:
            (q0, q1), (k0, k1) = check_region(map, region)
            w = w[:, q0:q1, k0:k1]
        return w.astype(np.float32, copy=False)
    return np.stack([weights(map, h, region) for h in heads])


def overview(map: AttentionMap, which: Which) -> tuple[np.ndarray, int]:
    """What to draw of the whole matrix: ([n, R, C] float32, tokens per cell).

    A memory-bounded map gives its stored tile maxima (one sharp weight is never averaged away);
    any other map its exact weights (factor 1).
    """
    if map.pyramid is None:
        return stack(map, which), 1
    heads = heads_of(map, which)
    tiles = np.stack([np.asarray(map.pyramid.overview(h, "max"), dtype=np.float32) for h in heads])
    return tiles, int(map.pyramid.factor)


def mask(map: AttentionMap, region: Region | None = None) -> np.ndarray | None:
    """Bool (True = may attend) of the cells ``weights`` returns; None when nothing is masked.

    Without a region a memory-bounded map gives its overview's tile mask (False where every cell
    of the tile is masked), shaped like ``overview``.
    """
    if region is None:
        return None if map.mask is None else np.asarray(map.mask, dtype=bool)
    (q0, q1), (k0, k1) = check_region(map, region)
    if map.pyramid is None:
        return None if map.mask is None else np.asarray(map.mask, dtype=bool)[q0:q1, k0:k1]
    rows = map.pyramid.mask_spec.rows(q0, q1)  # [q1-q0 or 1, Lk] torch bool, or None
    if rows is None:
        return None
    allowed = np.asarray(rows.cpu().numpy(), dtype=bool)[:, k0:k1]
    return np.broadcast_to(allowed, (q1 - q0, k1 - k0)).copy()


def is_causal(map: AttentionMap) -> bool:
    """Whether no query may attend to a later key (every cell above the diagonal is masked)."""
    if map.pyramid is not None:
        return bool(map.pyramid.mask_spec.causal)
    lk = map.shape[1]
    if map.mask is None or lk < 2:
        return False
    return not bool(np.triu(np.asarray(map.mask, dtype=bool), k=1).any())


def _head(map: AttentionMap, head: Head) -> Head:
    if head == MEAN:
        return MEAN
    if isinstance(head, (bool, np.bool_)) or not isinstance(head, (int, np.integer)) or not 0 <= head < map.num_heads:
        raise ValueError(f"head {head!r} does not exist: this run has heads 0..{map.num_heads - 1} (or {MEAN!r})")
    return int(head)


def _head_index(map: AttentionMap, head: Head) -> int:
    """``_head`` where the caller has already handled MEAN."""
    index = _head(map, head)
    assert isinstance(index, int), "MEAN is handled by the caller"
    return index


# ---------------------------------------------------------------------------------------------
# tiles


def tile_reduce(
    matrix: np.ndarray,
    factor: int | tuple[int, int],
    how: str = "max",
    *,
    ignore: np.ndarray | None = None,
    empty: float = 0.0,
) -> np.ndarray:
    """Reduce the last two axes over tiles of ``factor`` (or (rows, cols)) cells.

    ``how``: "max" (a single sharp weight survives), "mean" (over the tile's real cells: a short
    edge tile is not diluted by padding), "sum", or for bool masks "all" / "any". Cells where
    ``ignore`` (bool, broadcast to the matrix) is True are left out; a tile with nothing left
    reads ``empty``. Output [..., ceil(rows/fr), ceil(cols/fc)].
    """
    if how not in REDUCTIONS:
        raise ValueError(f"how must be one of {', '.join(REDUCTIONS)}, got {how!r}")
    fr, fc = (factor, factor) if isinstance(factor, (int, np.integer)) else factor
    fr, fc = int(fr), int(fc)
    if fr < 1 or fc < 1:
        raise ValueError(f"tile factor must be >= 1, got {factor!r}")
    matrix = np.asarray(matrix)
    if (fr, fc) == (1, 1) and ignore is None:
        return matrix
    if how in ("all", "any"):
        return _fold(matrix.astype(bool, copy=False), fr, fc, how)
    if how == "max":
        fill = -np.inf if np.issubdtype(matrix.dtype, np.floating) else np.iinfo(matrix.dtype).min
    else:
        fill = 0
    if ignore is not None:
        matrix = np.where(ignore, fill, matrix)
    if how == "max":
        out = _fold(matrix, fr, fc, "max")
    else:
        out = _fold(matrix.astype(np.float64 if how == "mean" else matrix.dtype, copy=False), fr, fc, "sum")
    if ignore is None and how != "mean":
        return out
    counts = _tile_counts(matrix.shape[-2:], fr, fc, ignore)
    if how == "mean":
        out = out / np.maximum(counts, 1)
    out = np.where(counts > 0, out, empty)
    return out.astype(np.float32) if how == "mean" else out


def _fold(a: np.ndarray, fr: int, fc: int, how: str) -> np.ndarray:
    """Reduce tiles of the last two axes: rows first, then columns. A short last tile simply has
    fewer cells to combine (as if padded with the reduction's identity). The input is never
    copied whole: a large run's weights may take most of the memory budget."""
    combine = {"max": np.maximum, "sum": np.add, "all": np.logical_and, "any": np.logical_or}[how]
    # Element-wise over strided views, one tile axis at a time: numpy's max over a short inner axis
    # of [.., R, f, C, f] is several times slower (docs/benchmarks.md, long sequences).
    across = a[..., 0::fr, :].copy()  # [..., R, cols]: row 0 of every tile
    for i in range(1, fr):
        part = a[..., i::fr, :]  # [..., R or R - 1, cols]: row i of every (long enough) tile
        rows = across[..., : part.shape[-2], :]
        combine(rows, part, out=rows)
    out = across[..., 0::fc].copy()  # [..., R, C]: then the tile columns
    for j in range(1, fc):
        part = across[..., j::fc]
        cols = out[..., : part.shape[-1]]
        combine(cols, part, out=cols)
    return out


def _tile_counts(shape: Sequence[int], fr: int, fc: int, ignore: np.ndarray | None) -> np.ndarray:
    """Cells counted in each tile: the tile's real cells, less the ignored ones."""
    rows, cols = shape
    if ignore is not None:
        keep = ~np.broadcast_to(np.asarray(ignore, dtype=bool), (rows, cols))
        return _fold(keep.astype(np.float64), fr, fc, "sum")
    row_sizes = np.minimum(fr, rows - np.arange(0, rows, fr))  # the last tile row may be short
    col_sizes = np.minimum(fc, cols - np.arange(0, cols, fc))
    return np.outer(row_sizes, col_sizes).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# derived maps


def drop_keys(map: AttentionMap, keys: Sequence[int], *, renormalise: bool, budget: int | None = None) -> AttentionMap:
    """The map without the key columns ``keys`` (e.g. a decoder's first token, its attention sink).

    ``renormalise`` rescales each row to sum to 1 over the keys left (the legend says so);
    otherwise rows keep their weights and ``hidden_mass`` records what went to the hidden keys.
    The result is a copy of the weights: with ``budget`` (bytes), a ConfigError says so before
    it is made when the weights and that copy together exceed the budget.
    """
    if map.pyramid is not None:
        raise ValueError("hiding keys needs the exact weights; this run kept only an overview")
    lk = map.shape[1]
    hidden = sorted({int(k) for k in keys})
    if any(not 0 <= k < lk for k in hidden):
        raise ValueError(f"keys {hidden} outside 0..{lk - 1}")
    keep = np.setdiff1d(np.arange(lk), hidden)
    if keep.size == 0:
        raise ValueError("hiding every key would leave nothing to show")
    w = np.asarray(map.weights, dtype=np.float32)
    _check_copy_fits(w, keep.size, budget)
    kept = w[:, :, keep]  # [H, Lq, Lk']: the one copy of the weights this makes
    mass = w[:, :, hidden].sum(axis=-1, dtype=np.float64).astype(np.float32)  # [H, Lq]
    names = ", ".join(repr(map.keys[k]) for k in hidden[:3]) + (" ..." if len(hidden) > 3 else "")
    if renormalise:
        total = kept.sum(axis=-1, keepdims=True, dtype=np.float64)  # [H, Lq, 1]
        kept *= np.where(total > 0, 1.0 / np.maximum(total, 1e-30), 0.0).astype(np.float32)  # in place
        legend = (
            f"{names} hidden, rows renormalised over the other keys (it held "
            f"{float(mass.mean()):.0%} of each row on average)"
        )
    else:
        legend = f"{names} hidden, rows NOT renormalised (mean {float(mass.mean()):.0%} hidden)"
    return dataclasses.replace(
        map,
        keys=[map.keys[k] for k in keep],
        weights=kept,
        mask=None if map.mask is None else np.asarray(map.mask)[:, keep],
        hidden_mass=None if renormalise else mass,
        legend=legend,
        exact=None,
        file_tag=f"{map.file_tag}_nokey{'-'.join(str(k) for k in hidden)}" if map.file_tag else "",
    )


def _check_copy_fits(weights: np.ndarray, kept_keys: int, budget: int | None) -> None:
    copy = weights.nbytes // max(1, weights.shape[-1]) * kept_keys
    if budget is not None and weights.nbytes + copy > budget:
        raise ConfigError(
            f"hiding keys needs a copy of the weights ({format_bytes(copy)}); with the weights themselves "
            f"({format_bytes(weights.nbytes)}) that is over the {format_bytes(budget)} memory budget: "
            "raise the budget or use a shorter text"
        )


def alibi_bias(map: AttentionMap, head: Head) -> np.ndarray:
    """float32 [Lq, Lk]: ALiBi's score bias -m_h |i - j| (MEAN: the mean slope's), or ValueError."""
    if map.alibi_slopes is None:
        raise ValueError("this map has no ALiBi slopes")
    slopes = np.asarray(map.alibi_slopes, dtype=np.float64)
    slope = float(slopes.mean()) if head == MEAN else float(slopes[_head_index(map, head)])
    lq, lk = map.shape
    distance = np.abs(np.arange(lq)[:, None] - np.arange(lk)[None, :])  # [Lq, Lk]
    return (-slope * distance).astype(np.float32)


def head_title(map: AttentionMap, head: Head) -> str:
    """A heatmap's title: the map's head label ("head 3", "L2 head 3"), or "mean over 8 heads"
    (with the labels' shared prefix, e.g. "L2 mean over 12 heads"); ALiBi adds the head's slope."""
    if head == MEAN:
        first = map.label(0)
        prefix = first[: -len("head 0")] if first.endswith("head 0") else ""
        return f"{prefix}mean over {map.num_heads} heads"
    title = map.label(_head_index(map, head))
    if map.alibi_slopes is not None:
        title += f" \u00b7 m={slope_text(float(np.asarray(map.alibi_slopes)[int(head)]))}"
    return title


def slope_text(slope: float) -> str:
    """ALiBi slopes are mostly 1/2^k: "1/16" reads better than 0.0625."""
    if slope > 0:
        inverse = 1.0 / slope
        if abs(inverse - round(inverse)) < 1e-6 * inverse and round(inverse) <= 1 << 20:
            return "1" if round(inverse) == 1 else f"1/{round(inverse)}"
    return f"{slope:.3g}"


def group_label(map: AttentionMap, kv: int, heads: Sequence[int] | None = None) -> str:
    """The label of the query heads that share K/V head ``kv``, e.g. "kv 0: q 0-3"."""
    heads = list(heads) if heads is not None else [h for h in range(map.num_heads) if map.kv_head_of(h) == kv]
    span = f"q {heads[0]}" if len(heads) == 1 else f"q {heads[0]}\u2013{heads[-1]}"
    return f"kv {kv}: {span}"


__all__ = [
    "ALL",
    "OverviewOnly",
    "Region",
    "Which",
    "alibi_bias",
    "check_region",
    "drop_keys",
    "group_label",
    "head_title",
    "heads_of",
    "is_causal",
    "mask",
    "mean_over_heads",
    "overview",
    "parse_which",
    "slope_text",
    "stack",
    "tile_reduce",
    "weights",
]
