"""The corpus page: one self-contained ``.html`` file for a corpus store (``attndesk.corpus``).

It holds the store's per-head statistics and roles (a layers x heads grid coloured by a chosen
metric; hover reads every metric and the role), the per-text summary (tokens, whether the text
was cut, each metric's mean over heads), and for a few chosen texts the attention heads grid of
the interactive page (``page.page_data``), recomputed with the store's model, each text cut at
the store's ``max_tokens`` as the corpus pass cut it (an encoder-decoder's decoder gets the text as its
target, as the Corpus tab opens a text; the pass shifts it right by one). Format: a ``"corpus"`` object beside the
page's ``"layers"`` (docs/export.md). Values come from the store's DuckDB views unchanged
(float32 metrics as JSON numbers; NaN as null).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attndesk import __version__
from attndesk.attention.types import head_name
from attndesk.corpus.metrics import METRICS
from attndesk.errors import ConfigError
from attndesk.models import load_pretrained, run_pretrained
from attndesk.models.checkpoint import weights_hash

from . import colormaps
from .export import ExportError
from .page import (
    _ASSET_ALLOWANCE,
    AUTO,
    MAX_PAGE_BYTES,
    PAGE_FORMAT,
    PAGE_VERSION,
    PageMap,
    PageTooLarge,
    _colormap_entries,
    _script_json,
    check_page_size,
    choose_precision,
    page_data,
    page_layers,
    pretrained_page_maps,
)

TABLE_ROWS = 500  # texts the per-text table lists at most (the first ones, by text_id)
TEXT_CHARS = 300  # characters of each text the table shows


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def heads_grid(store) -> dict[str, Any]:
    """The per-head grid: rows (part, layer), every metric's [rows][heads] values, the roles."""
    heads = store.heads
    keys = list(dict.fromkeys(zip(heads["part"], heads["layer"])))
    n_heads = int(heads["head"].max()) + 1
    index = {key: i for i, key in enumerate(keys)}
    values: dict[str, list[list[float | None]]] = {m: [[None] * n_heads for _ in keys] for m in METRICS}
    roles: list[list[str]] = [[""] * n_heads for _ in keys]
    for row in heads.to_dict("records"):
        r, h = index[(row["part"], row["layer"])], int(row["head"])
        for m in METRICS:
            values[m][r][h] = _number(row[m])
        roles[r][h] = str(row["role"])
    return {
        "rows": [
            {
                "part": str(p),
                "layer": int(n),
                "label": f"{'' if p == 'self' else p + ' '}layer {n}",
                "names": [("" if p == "self" else p + " ") + head_name(int(n), h) for h in range(n_heads)],
            }
            for p, n in keys
        ],
        "heads": n_heads,
        "metrics": list(METRICS),
        "values": values,
        "roles": roles,
    }


def texts_table(store, rows: int = TABLE_ROWS) -> dict[str, Any]:
    """The first ``rows`` texts: id, tokens, cut, each metric's mean over the text's heads, the text."""
    means = ", ".join(f'avg(CASE WHEN isnan(p."{m}") THEN NULL ELSE p."{m}" END) AS "{m}"' for m in METRICS)
    frame = store.sql(
        f"SELECT t.text_id, t.tokens, t.cut, {means}, t.text FROM texts t LEFT JOIN per_text p USING (text_id) "
        "GROUP BY t.text_id, t.tokens, t.cut, t.text ORDER BY t.text_id LIMIT ?",
        [int(rows)],
    )
    total = int(store.sql("SELECT count(*) AS n FROM texts")["n"].iloc[0])
    out = []
    for rec in frame.to_dict("records"):
        text = str(rec["text"])
        cells: list[Any] = [int(rec["text_id"]), int(rec["tokens"]), bool(rec["cut"])]
        cells += [None if rec[m] is None else _number(rec[m]) for m in METRICS]
        out.append([*cells, text[:TEXT_CHARS] + ("…" if len(text) > TEXT_CHARS else "")])
    return {"columns": ["text_id", "tokens", "cut", *METRICS, "text"], "rows": out, "total": total}


def _cut(model, text: str, max_tokens: int) -> str:
    """``text`` up to the last character of its first ``max_tokens`` tokens (the corpus pass's cut)."""
    try:
        enc = model.tokenizer(text, truncation=True, max_length=max_tokens, return_offsets_mapping=True)
        ends = [int(end) for start, end in enc["offset_mapping"] if end > start]
    except (NotImplementedError, ValueError, KeyError, TypeError):  # a slow tokenizer has no offsets
        return text
    return text[: max(ends)] if ends else text


def text_maps(store, text_ids: Sequence[int], model=None) -> list[tuple[int, list[PageMap]]]:
    """(text_id, every (part, layer) map of the store's model on that text) for each chosen text.

    ``model``: a ``LoadedModel`` or folder (default: the store's own, whose weights must still be
    the ones the store was computed with). ConfigError for an unknown text or changed weights."""

    if not text_ids:
        return []
    ids = [int(t) for t in text_ids]
    texts = store.sql("SELECT text_id, text, cut FROM texts WHERE list_contains(?::BIGINT[], text_id)", [ids])
    found = {int(r["text_id"]): r for r in texts.to_dict("records")}
    missing = [t for t in ids if t not in found]
    if missing:
        total = int(store.sql("SELECT count(*) AS n FROM texts")["n"].iloc[0])
        raise ConfigError(f"the store has no text {missing[0]}: its texts are 0..{total - 1}")
    info = store.manifest.get("model", {})
    if model is None or not hasattr(model, "tokenizer"):
        folder = Path(model if model is not None else info.get("path", ""))
        if not folder.is_dir():
            raise ConfigError(f"the store's model folder {folder} is gone: give its folder with --model")
        if weights_hash(folder) != info.get("sha256"):
            raise ConfigError(f"the weights in {folder} are not the ones the store was computed with")
        model = load_pretrained(folder)
    max_tokens = int(store.manifest.get("arguments", {}).get("max_tokens", 0)) or None
    out = []
    for tid in ids:
        text = str(found[tid]["text"])
        if found[tid]["cut"] and max_tokens:
            text = _cut(model, text, max_tokens)
        # an encoder-decoder's pass teacher-forces the text itself through the decoder, as here
        target = text if model.family == "encoder-decoder" else None
        out.append((tid, pretrained_page_maps(run_pretrained(model, text, target=target))))
    return out


def _base(title: str, summary: str, settings: dict, colormap: str) -> dict[str, Any]:
    return {
        "format": PAGE_FORMAT,
        "version": PAGE_VERSION,
        "generator": f"attndesk {__version__}",
        "title": title,
        "summary": summary,
        "settings": settings,
        "view": {"colormap": colormap, "shared_scale": True, "log_scale": False},
        "colormaps": _colormap_entries(),
        "layers": [],
    }


def _store_settings(store) -> dict[str, Any]:
    manifest = store.manifest
    model, data, arguments = manifest.get("model", {}), manifest.get("data", {}), manifest.get("arguments", {})
    return {
        "store": str(Path(store.path).resolve()),
        "model": model.get("name"),
        "model folder": model.get("path"),
        "texts": data.get("texts"),
        "data": data.get("describe"),
        "max tokens": arguments.get("max_tokens"),
        "attndesk": manifest.get("attndesk"),
    }


def _text_layers(chosen, precision: str, room: int) -> list[dict[str, Any]]:
    """The page entries of every chosen text's maps, tagged with ``text_id``; PageTooLarge over ``room``."""
    maps = [pm for _, pms in chosen for pm in pms]
    limit = room + _ASSET_ALLOWANCE  # check_page_size counts the assets itself
    if precision == AUTO:
        precision = choose_precision(maps, None, limit)
    try:
        check_page_size(maps, precision, None, limit)
    except PageTooLarge as exc:
        need = str(exc).split(" needs about ")[1].split(",")[0]
        raise PageTooLarge(
            f"the attention of text(s) {', '.join(str(t) for t, _ in chosen)} as {precision} needs about {need}, over "
            f"the {max(0, room) / 1e6:.1f} MB the corpus page leaves for it: choose fewer or shorter texts (--texts)"
            + (" or --page-precision float16" if precision == "float32" else "")
        ) from None
    doc = page_data(maps, "", precision=precision)
    entries = page_layers(doc)
    tags = [tid for tid, pms in chosen for _ in pms]
    keep = ("format", "version", "generator", "settings", "view", "colormaps", "layers")
    out = []
    for tid, entry in zip(tags, entries):
        one = {k: v for k, v in entry.items() if k not in keep} if entry is doc else dict(entry)
        out.append({**one, "text_id": tid, "summary": f"text {tid} · {one['summary']}"})
    return out


def corpus_page_data(
    store,
    texts: Sequence[int] = (0,),
    *,
    metric: str = "entropy",
    model=None,
    colormap: str = "viridis",
    precision: str = AUTO,
    table_rows: int = TABLE_ROWS,
    limit: int = MAX_PAGE_BYTES,
) -> dict[str, Any]:
    """The page document of a corpus store (``corpus.open_corpus``): the heads grid coloured by
    ``metric``, the per-text table, and the heads grid of every text in ``texts``."""
    if getattr(store, "images", False):
        raise ConfigError(
            f"{store.path} is an image pass's store: the corpus page draws texts' attention; its heads are "
            "in heads.csv and heads.png"
        )
    if metric not in METRICS:
        raise ExportError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if colormap not in colormaps.COLORMAPS:
        raise ExportError(f"unknown colormap {colormap!r}; choose one of: {', '.join(colormaps.COLORMAPS)}")
    name = store.manifest.get("model", {}).get("name", "model")
    doc = _base(f"{name} over a corpus", "", _store_settings(store), colormap)
    doc["corpus"] = {"metric": metric, **heads_grid(store), "texts": texts_table(store, table_rows)}
    n_texts = doc["corpus"]["texts"]["total"]
    doc["summary"] = f"{name}: per-head statistics and roles over {n_texts:,} texts"
    room = limit - _ASSET_ALLOWANCE - len(_script_json(doc).encode("utf-8"))
    doc["layers"] = _text_layers(text_maps(store, list(texts), model), precision, room) if texts else []
    return doc


__all__ = ["TABLE_ROWS", "corpus_page_data", "heads_grid", "text_maps", "texts_table"]
