"""The overview page: one ``.html`` file for a run too large for an exact page.

It holds, per map, the overview of the whole input (the long-document pyramid: every head's
tile maxima of f x f cells, so one sharp weight is never averaged away, and the mean over heads as
its last index, as ``runs.pyramid.PyramidLevel.max`` keeps them) and the exact weights of one
region (``--region``, or the window's zoomed view). The region is the page's ordinary weights
(hover, enlarge, CSV read exact numbers); the overview is drawn above them with the region
outlined. Format: an ``"overview"`` object in each layer entry (docs/export.md).

A map with a pyramid (a memory-bounded run) gives the finest stored level that fits; a map with
full weights is tiled the same way (``select.tile_reduce``, "max") at a power-of-two factor.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndesk.attention.types import AttentionMap
from attndesk.runs import select

from .export import ExportError
from .page import (
    _ASSET_ALLOWANCE,
    AUTO,
    MAX_PAGE_BYTES,
    PageMap,
    PageTooLarge,
    _as_page_map,
    _encode_mask,
    _script_json,
    choose_precision,
    encode_array,
    page_data,
    page_layers,
    write_document,
)

OVERVIEW_SIDES = (2048, 1024, 512, 256, 128, 64, 32)  # the overview's larger side, in tiles, finest first
DEFAULT_REGION_TOKENS = 128  # without a region: the first 128 queries x the first 128 keys


def default_region(amap: AttentionMap, tokens: int = DEFAULT_REGION_TOKENS) -> select.Region:
    """The region an overview page shows exactly when none is given: the first ``tokens`` of each axis."""
    lq, lk = amap.shape
    return (0, min(lq, tokens)), (0, min(lk, tokens))


def _dense_factor(lq: int, lk: int, side: int) -> int:
    """The power-of-two tile factor that brings the larger of lq, lk to at most ``side`` tiles."""
    return 1 << max(0, math.ceil(math.log2(max(1, -(-max(lq, lk) // side)))))


def overview_tiles(amap: AttentionMap, side: int) -> tuple[np.ndarray, np.ndarray | None, int, int]:
    """([H+1, R, C] float32 tile maxima, index H = the mean over heads; [R, C] bool, True = some
    cell of the tile may attend, or None; the factor; the pyramid level, -1 for full weights),
    the larger side of R, C at most ``side`` when the map allows."""
    if amap.pyramid is not None:
        level = amap.pyramid.level_for(side)
        lv = amap.pyramid.levels[level]
        allowed = None if lv.all_masked is None else ~np.asarray(lv.all_masked, dtype=bool)
        return np.asarray(lv.max, dtype=np.float32), allowed, int(lv.factor), level
    factor = _dense_factor(*amap.shape, side)
    weights = np.asarray(amap.weights, dtype=np.float32)
    weights = np.where(np.isfinite(weights), weights, np.float32(0))
    stacked = np.concatenate([weights, select.mean_over_heads(weights)[None]])
    tiles = np.asarray(select.tile_reduce(stacked, factor, "max"), dtype=np.float32)
    allowed = None if amap.mask is None else select.tile_reduce(np.asarray(amap.mask, dtype=bool), factor, "any")
    return tiles, allowed, factor, -1


def _overview_entry(amap: AttentionMap, side: int, precision: str) -> dict[str, Any]:
    tiles, allowed, factor, level = overview_tiles(amap, side)
    lq, lk = amap.shape
    return {
        "factor": factor,
        "level": level,
        "how": "max",
        "rows": lq,
        "cols": lk,
        "weights": encode_array(tiles, precision),
        "mask": _encode_mask(None if allowed is None or allowed.all() else allowed),
    }


def _overview_bytes(amap: AttentionMap, side: int, precision: str) -> int:
    """The base64 size of one map's overview at ``side`` (shapes only: nothing is computed)."""
    lq, lk = amap.shape
    if amap.pyramid is not None:
        rows, cols = amap.pyramid.levels[amap.pyramid.level_for(side)].shape
    else:
        factor = _dense_factor(lq, lk, side)
        rows, cols = -(-lq // factor), -(-lk // factor)
    itemsize = 2 if precision == "float16" else 4
    return 4 * -(-(amap.num_heads + 1) * rows * cols * itemsize // 3) + 4 * -(-rows * cols // 24) + 200


def _choose_overview(maps: Sequence[PageMap], room: int, precision: str) -> tuple[int, str]:
    """The finest side (and precision: float32 first when ``precision`` is auto) whose overviews fit ``room``."""
    choices = ("float32", "float16") if precision == AUTO else (precision,)
    for side in OVERVIEW_SIDES:
        for prec in choices:
            if sum(_overview_bytes(pm.map, side, prec) for pm in maps) <= room:
                return side, prec
    coarsest = sum(_overview_bytes(pm.map, OVERVIEW_SIDES[-1], "float16") for pm in maps)
    raise PageTooLarge(
        f"the exact region leaves {max(0, room) / 1e6:.1f} MB of the page for the overview, which needs "
        f"at least {coarsest / 1e6:.2f} MB: export a smaller region (--region) or fewer layers (--layer N)"
    )


def overview_page_data(
    maps: Sequence[AttentionMap | PageMap],
    summary: str = "",
    *,
    region: select.Region | None = None,
    precision: str = AUTO,
    limit: int = MAX_PAGE_BYTES,
    **options: Any,
) -> dict[str, Any]:
    """The page document of ``maps``' overview plus the exact weights of ``region`` (default:
    ``default_region``), within ``limit`` bytes; PageTooLarge when even the coarsest overview
    does not fit beside the region. ``options`` as for ``page.page_data``."""
    page_maps = [_as_page_map(m) for m in maps]
    if not page_maps:
        raise ExportError("a page needs at least one map")
    if region is None:
        region = default_region(page_maps[0].map)
    exact = choose_precision(page_maps, region, limit // 2) if precision == AUTO else precision
    try:  # the exact region: float32 when it takes at most half the page, leaving room for the overview
        doc = page_data(page_maps, summary, region=region, precision=exact, **options)
    except PageTooLarge as exc:
        raise PageTooLarge(f"{exc}".split("; what fits")[0] + "; export a smaller region (--region)") from None
    used = len(_script_json(doc).encode("utf-8")) + _ASSET_ALLOWANCE
    side, prec = _choose_overview(page_maps, limit - used, precision)
    for entry, pm in zip(page_layers(doc), page_maps):
        entry["overview"] = _overview_entry(pm.map, side, prec)  # type: ignore[index]
    return doc


def write_overview_page(
    maps: Sequence[AttentionMap | PageMap], summary: str, path: str | os.PathLike, **options: Any
) -> Path:
    """Write the overview page of ``maps`` (``overview_page_data``'s ``options``) atomically;
    ExportError (PageTooLarge) before anything is written."""
    return write_document(overview_page_data(maps, summary, **options), path)


__all__ = [
    "DEFAULT_REGION_TOKENS",
    "OVERVIEW_SIDES",
    "default_region",
    "overview_page_data",
    "overview_tiles",
    "write_overview_page",
]
