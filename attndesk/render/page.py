"""The interactive page: one self-contained ``.html`` file of a run's attention weights.

The page shows what the window shows (the heads grid, the mean, the colour map and scale, masked
cells hatched, hover read-outs, click to enlarge, the token strip, the settings summary) and
opens from disk without a server or a network: the script (``html/page.js``) and the style
(``html/page.css``) are package resources inlined when the page is written, and the numbers sit
in ``<script type="application/json" id="attndesk-data">`` (format in docs/export.md).

- ``PageMap``: one map on the page, with its part ("self", "decoder", "cross") and layer.
- ``page_data`` / ``page_html`` / ``write_page``: the document, the text, the file (atomic).
- ``read_page_data`` / ``decode_array``: the numbers back out of a page (tests, tools).
- ``pretrained_page_maps``: every (part, layer) of a real model's run, for ``write_page``.

Weights are stored as little-endian float32 (exact) when that page fits, else float16 (within 5e-4
of the float32 weights: about 3.2 MB for 6 layers x 12 heads x 128 tokens); either can be forced. A page over ``MAX_PAGE_BYTES`` is refused
before anything is written, naming what fits.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from attndesk import __version__
from attndesk.attention.types import AttentionMap
from attndesk.runs import select

from . import colormaps
from .export import ExportError, atomic_write

PAGE_FORMAT = "attndesk-page"
PAGE_VERSION = 1
PRECISIONS = ("float16", "float32")
AUTO = "auto"  # float32 (exact) when that page fits, else float16
MAX_PAGE_BYTES = 4_000_000  # 6 layers x 12 heads x 128 tokens as float16 is 3.2 MB
_DATA_ID = "attndesk-data"
_ASSET_ALLOWANCE = 64_000  # the inlined script and style, the template, headers (about half of it)


class PageTooLarge(ExportError):
    """The weights would make a page over ``MAX_PAGE_BYTES``; the message names what fits."""


@dataclass(frozen=True)
class PageMap:
    """One map on a page: ``part`` ("self", "decoder" or "cross") and ``layer`` (None: no layers)."""

    map: AttentionMap
    part: str = "self"
    layer: int | None = None


def pretrained_page_maps(run: Any, layer: int | None = None) -> list[PageMap]:
    """Every (part, layer) map of a ``PretrainedResult`` (or one layer of each part that has it)."""
    out = []
    for part in run.parts():
        count = len(run.part_weights(part))
        for n in range(count) if layer is None else [layer] if layer < count else []:
            out.append(PageMap(run.layer_map(n, part=part), part, n))
    return out


# ---------------------------------------------------------------------------------------------
# arrays in JSON


def encode_array(values: np.ndarray, dtype: str = "float16") -> dict[str, Any]:
    """``{"dtype", "shape", "base64"}``: the array as little-endian ``dtype``, C order, base64."""
    if dtype not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {dtype!r}")
    array = np.ascontiguousarray(values, dtype="<f2" if dtype == "float16" else "<f4")
    return {"dtype": dtype, "shape": list(array.shape), "base64": base64.b64encode(array.tobytes()).decode("ascii")}


def decode_array(obj: Mapping[str, Any] | list) -> np.ndarray:
    """The float32 array of an ``encode_array`` object (or of nested lists)."""
    if isinstance(obj, list):
        return np.asarray(obj, dtype=np.float32)
    kind = {"float16": "<f2", "float32": "<f4"}.get(str(obj.get("dtype")))
    if kind is None:
        raise ValueError(f"unknown dtype {obj.get('dtype')!r} in a page's weights")
    raw = base64.b64decode(obj["base64"])
    return np.frombuffer(raw, dtype=kind).reshape(obj["shape"]).astype(np.float32)


def _encode_mask(mask: np.ndarray | None) -> dict[str, Any] | None:
    """True = may attend, as bits (little bit order, C order), base64; None when nothing is masked."""
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    bits = np.packbits(mask.ravel(), bitorder="little")
    return {"shape": list(mask.shape), "bits": base64.b64encode(bits.tobytes()).decode("ascii")}


def decode_mask(obj: Mapping[str, Any] | None) -> np.ndarray | None:
    if obj is None:
        return None
    shape = tuple(obj["shape"])
    bits = np.frombuffer(base64.b64decode(obj["bits"]), dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[: math.prod(shape)].reshape(shape).astype(bool)


# ---------------------------------------------------------------------------------------------
# the document


def _as_page_map(item: AttentionMap | PageMap) -> PageMap:
    return item if isinstance(item, PageMap) else PageMap(item)


def _layer_entry(pm: PageMap, precision: str, region: select.Region | None) -> dict[str, Any]:
    amap = pm.map
    try:
        weights = select.stack(amap, select.ALL, region)
        mask = select.mask(amap, region)
    except select.OverviewOnly:
        lq, lk = amap.shape
        raise ExportError(
            f"this run kept only an overview of its {lq:,} x {lk:,} weights (they exceed the memory budget): "
            "a page holds exact weights, so export an exact region of it (--region Q0:Q1,K0:K1) or the "
            "overview page of the whole input with an exact region (--page-overview)"
        ) from None
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    queries, keys, q0, k0 = list(amap.queries), list(amap.keys), 0, 0
    if region is not None:
        (q0, q1), (k0, k1) = region
        queries, keys = queries[q0:q1], keys[k0:k1]
    hidden = ~np.isfinite(weights)
    if hidden.any():  # -inf / NaN cells are drawn masked; the page stores 0 for them
        weights = np.where(hidden, np.float32(0), weights)
        allowed = ~hidden.any(axis=0)
        mask = allowed if mask is None else (mask & allowed)
    return {
        "part": pm.part,
        "layer": pm.layer,
        "title": amap.title,
        "summary": amap.summary,
        "heads": [amap.label(h) for h in range(amap.num_heads)],
        "queries": queries,
        "keys": keys,
        "first_query": q0,
        "first_key": k0,
        "kv_heads": amap.kv_heads,
        "window": amap.window,
        "layer_kind": amap.layer_kind,
        "legend": amap.legend,
        "notices": list(amap.notices),
        "weights": encode_array(weights, precision),
        "mask": _encode_mask(mask),
    }


def _colormap_entries() -> dict[str, Any]:
    out = {}
    for name in (*colormaps.COLORMAPS, *colormaps.DIVERGING_COLORMAPS):
        lut = colormaps.lookup_table(name)
        out[name] = {
            "lut": base64.b64encode(lut.tobytes()).decode("ascii"),
            "mask": list(colormaps.mask_rgb(name)),
            "hatch": list(colormaps.hatch_rgb(name)),
        }
    return out


def page_data(
    maps: Sequence[AttentionMap | PageMap],
    summary: str = "",
    *,
    settings: Mapping[str, Any] | None = None,
    colormap: str = "viridis",
    shared_scale: bool = True,
    log_scale: bool = False,
    precision: str = AUTO,
    region: select.Region | None = None,
    title: str = "",
    image: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The page's JSON document. One map: its entry's fields at the top level; several: ``layers``.
    ``image`` (a vision run, ``image_entry``): the image and its overlay figures, shown above the maps."""
    page_maps = [_as_page_map(m) for m in maps]
    if not page_maps:
        raise ExportError("a page needs at least one map")
    if precision == AUTO:
        precision = choose_precision(page_maps, region)
    if precision not in PRECISIONS:
        raise ExportError(f"precision must be {AUTO}, {' or '.join(PRECISIONS)}, got {precision!r}")
    if colormap not in colormaps.COLORMAPS:
        raise ExportError(f"unknown colormap {colormap!r}; choose one of: {', '.join(colormaps.COLORMAPS)}")
    check_page_size(page_maps, precision, region)
    entries = [_layer_entry(pm, precision, region) for pm in page_maps]
    doc: dict[str, Any] = {
        "format": PAGE_FORMAT,
        "version": PAGE_VERSION,
        "generator": f"attndesk {__version__}",
        "title": title or entries[0]["title"] or "attention weights",
        "summary": summary,
        "settings": {str(k): v for k, v in (settings or {}).items()},
        "view": {"colormap": colormap, "shared_scale": bool(shared_scale), "log_scale": bool(log_scale)},
        "colormaps": _colormap_entries(),
    }
    if image is not None:
        doc["image"] = dict(image)
    if len(entries) == 1:  # the page's title and summary win over the map's
        return {**entries[0], **doc, "summary": summary or entries[0]["summary"]}
    doc["layers"] = entries
    return doc


def image_entry(grid: tuple[int, int], figures: Sequence[tuple[str, bytes]]) -> dict[str, Any]:
    """A vision run's part of a page: its patch grid and its figures (title, PNG bytes), base64."""
    return {
        "grid": [int(grid[0]), int(grid[1])],
        "figures": [{"title": str(t), "png": base64.b64encode(png).decode("ascii")} for t, png in figures],
    }


def vision_page_data(
    run: Any,
    pictures: Sequence[tuple[str, bytes]],
    layer: int | None,
    *,
    settings: Mapping[str, Any],
    title: str,
    colormap: str = "viridis",
    precision: str = AUTO,
    shared_scale: bool = True,
) -> dict[str, Any]:
    """The page of a vision run: its token x token maps (``layer``: that one, else every layer)
    below the image's ``pictures`` [(title, PNG bytes)], in the room the pictures leave of
    ``MAX_PAGE_BYTES`` (``AUTO``: float32 when that fits); ``settings`` gain the patch grid.
    PageTooLarge says how much of the page the pictures take."""
    image = image_entry(run.grid, pictures)
    room = MAX_PAGE_BYTES - sum(len(f["png"]) for f in image["figures"])
    maps = pretrained_page_maps(run, layer)
    try:
        precision = choose_precision(maps, None, room) if precision == AUTO else precision
        check_page_size(maps, precision, None, limit=room)
        return page_data(
            maps,
            run.summary(),
            settings={**settings, "grid": f"{run.grid[0]} x {run.grid[1]}"},
            colormap=colormap,
            shared_scale=shared_scale,
            precision=precision,
            title=title,
            image=image,
        )
    except PageTooLarge as exc:
        raise PageTooLarge(f"{exc} (the image's figures take {(MAX_PAGE_BYTES - room) / 1e6:.1f} MB of it)") from None


# ---------------------------------------------------------------------------------------------
# size


def _cells(pm: PageMap, region: select.Region | None) -> tuple[int, int, int]:
    lq, lk = pm.map.shape
    if region is not None:
        (q0, q1), (k0, k1) = region
        lq, lk = q1 - q0, k1 - k0
    return pm.map.num_heads, lq, lk


def estimate_page_bytes(
    maps: Sequence[AttentionMap | PageMap], precision: str = "float16", region: select.Region | None = None
) -> int:
    """An upper estimate of the page's size: base64 weights and masks, labels, the assets."""
    size = _ASSET_ALLOWANCE
    itemsize = 2 if precision == "float16" else 4
    for pm in map(_as_page_map, maps):
        heads, lq, lk = _cells(pm, region)
        size += 4 * -(-heads * lq * lk * itemsize // 3) + 4 * -(-lq * lk // 24) + 1000
        size += 8 * (lq + lk) + sum(len(t.encode()) for t in (*pm.map.queries, *pm.map.keys)) * 2
    return size


def choose_precision(
    maps: Sequence[AttentionMap | PageMap], region: select.Region | None = None, limit: int = MAX_PAGE_BYTES
) -> str:
    """ "float32" (the exact weights) when such a page fits ``limit``, else "float16"."""
    return "float32" if estimate_page_bytes(maps, "float32", region) <= limit else "float16"


def check_page_size(
    maps: Sequence[AttentionMap | PageMap],
    precision: str = AUTO,
    region: select.Region | None = None,
    limit: int = MAX_PAGE_BYTES,
) -> None:
    """PageTooLarge naming what fits (fewer layers, fewer tokens, float16) when over ``limit``."""
    page_maps = [_as_page_map(m) for m in maps]
    if precision == AUTO:
        precision = choose_precision(page_maps, region, limit)
    need = estimate_page_bytes(page_maps, precision, region)
    if need <= limit:
        return
    shapes = [_cells(pm, region) for pm in page_maps]
    heads = sum(h for h, _, _ in shapes)
    lq, lk = max(s[1] for s in shapes), max(s[2] for s in shapes)
    itemsize = 2 if precision == "float16" else 4
    room = limit - _ASSET_ALLOWANCE
    per_map = estimate_page_bytes(page_maps[:1], precision, region) - _ASSET_ALLOWANCE
    fit_maps = max(0, room // max(1, per_map))
    side = int(math.sqrt(max(0, room) / (heads * itemsize * 4 / 3 + 1)))
    what = (
        f"{len(page_maps)} map(s) x {heads // len(page_maps)} heads x {lq}x{lk} tokens"
        if len(page_maps) > 1
        else f"{heads} heads x {lq}x{lk} tokens"
    )
    hints = [f"about {side} tokens"]
    if len(page_maps) > 1 and fit_maps >= 1:
        hints.insert(0, f"{fit_maps} layer(s) of these (--layer N)")
    if precision == "float32":
        hints.append("float16 precision")
    raise PageTooLarge(
        f"a page of {what} as {precision} needs about {need / 1e6:.1f} MB, over the "
        f"{limit / 1e6:.1f} MB a page may hold; what fits: {' or '.join(hints)}, or an exact region "
        "(--region, or zoom into a heatmap), or the overview page of the whole input with an exact "
        'region (--page-overview; the Export dialog\'s "overview + exact view")'
    )


# ---------------------------------------------------------------------------------------------
# the file


def _asset(name: str) -> str:
    return resources.files("attndesk.render").joinpath("html", name).read_text(encoding="utf-8")


def _script_json(doc: Mapping[str, Any]) -> str:
    """JSON safe inside <script>: no "</" can close the element, no "<!--" opens a comment."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def page_html(doc: Mapping[str, Any]) -> str:
    """The whole page for a ``page_data`` document: template, style, data and script inlined."""
    template = _asset("page.html")
    parts = {
        "TITLE": html.escape(str(doc.get("title", "attention weights"))),
        "STYLE": _asset("page.css"),
        "DATA": _script_json(doc),
        "SCRIPT": _asset("page.js"),
        "DATA_ID": _DATA_ID,
    }
    return re.sub(r"\{\{(TITLE|STYLE|DATA|SCRIPT|DATA_ID)\}\}", lambda m: parts[m.group(1)], template)


def write_page(maps: Sequence[AttentionMap | PageMap], summary: str, path: str | os.PathLike, **options: Any) -> Path:
    """Write the interactive page of ``maps`` to ``path`` (.html) atomically; returns the path.

    ``options``: ``settings`` (a mapping shown as a table), ``colormap``, ``shared_scale``,
    ``log_scale``, ``precision`` ("auto": float32 when it fits, else float16; or either), ``region``, ``title``. ExportError
    (PageTooLarge for a run over ``MAX_PAGE_BYTES``) before anything is written. A run too large:
    ``page_overview.write_overview_page``."""
    return write_document(page_data(maps, summary, **options), path)


def write_document(doc: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write the page of a finished document to ``path`` (.html) atomically; returns the path."""
    path = Path(path).expanduser()
    if path.suffix.lower() != ".html":
        raise ExportError(f"cannot write {path}: an interactive page ends in .html")
    return atomic_write(path, page_html(doc).encode("utf-8"))


_DATA_RE = re.compile(r'<script type="application/json" id="attndesk-data">(.*?)</script>', re.DOTALL)


def read_page_data(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON document inside a page written by ``write_page``."""
    found = _DATA_RE.search(Path(path).read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{path} holds no attndesk data")
    return json.loads(found.group(1))


def page_layers(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The layer entries of a page document (one map: the document itself)."""
    return list(doc["layers"]) if "layers" in doc else [doc]


__all__ = [
    "AUTO",
    "MAX_PAGE_BYTES",
    "PAGE_FORMAT",
    "PAGE_VERSION",
    "PRECISIONS",
    "PageMap",
    "PageTooLarge",
    "check_page_size",
    "choose_precision",
    "decode_array",
    "decode_mask",
    "encode_array",
    "estimate_page_bytes",
    "page_data",
    "page_html",
    "page_layers",
    "pretrained_page_maps",
    "read_page_data",
    "vision_page_data",
    "write_document",
    "write_page",
]
