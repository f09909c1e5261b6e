"""TEMPORARY: ``AttentionMap`` s from today's results, until the results build their own.

DELETE THIS MODULE when ``AttentionResult.attention_map()`` (the ``variants`` part) and
``PretrainedResult.layer_map()`` (the ``models`` part) land: ``map_of`` already defers to
``attention_map()`` when a result has it, so callers then switch to that method and this file
goes. It is the one place that still reads a pretrained layer's ``extra`` dict or probes a result
for a pyramid; nothing else in the window, renderer or CLI does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .types import AttentionMap


def map_of(result: Any) -> AttentionMap:
    """The ``AttentionMap`` of a toy ``AttentionResult`` or of one pretrained layer's result."""
    if isinstance(result, AttentionMap):
        return result
    extra = getattr(result, "extra", None) or {}
    if "pretrained" in extra:  # a pretrained layer posing as a toy result: its own map, not a toy one
        return _pretrained_layer_map(result, extra)
    if hasattr(result, "attention_map"):
        return result.attention_map()
    return _toy_map(result)


def _overview_fields(result: Any) -> dict:
    """weights/mask/pyramid/exact of a run: the overview when it kept a pyramid, else the weights."""
    pyramid = getattr(result, "pyramid", None)
    if pyramid is None:
        return {"weights": result.weights, "mask": result.mask, "pyramid": None, "exact": result.exact}
    level = pyramid.levels[0]
    dead = level.all_masked
    return {"weights": level.max[: pyramid.num_heads],  # [H, R, C] tile maxima (index H is the head mean)
            "mask": None if dead is None else ~np.asarray(dead, dtype=bool),
            "pyramid": pyramid, "exact": result.exact}


def _toy_map(result: Any) -> AttentionMap:
    cfg = result.config
    kv = getattr(cfg, "kv_heads", None)
    position = getattr(cfg, "position", None)
    slopes = getattr(result, "alibi_slopes", None) if position == "alibi" else None
    return AttentionMap(
        queries=list(result.tokens), keys=list(result.keys), title="Attention weights",
        summary=toy_summary(result), file_tag=toy_file_tag(result),
        kv_heads=kv if kv and kv < result.num_heads else None, window=getattr(cfg, "window", None),
        alibi_slopes=slopes, notices=list(result.notices), **_overview_fields(result),
    )


def toy_summary(result: Any) -> str:
    """One line naming everything that shaped a toy run's weights (captions, figure headers)."""
    cfg = result.config
    num_heads = result.num_heads
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


def toy_file_tag(result: Any) -> str:
    """e.g. h8_e64_causal_scaled_seed0: what a file name says about a toy run."""
    cfg = result.config
    parts = [f"h{result.num_heads}", f"e{cfg.embed_dim}", cfg.mask.replace("+", "-"),
             "scaled" if cfg.scaled else "unscaled"]
    if not cfg.positional:
        parts.append("nopos")
    if cfg.dropout and cfg.training:
        parts.append(f"drop{cfg.dropout:g}")
    parts.append(f"seed{cfg.seed}")
    if cfg.dtype != "float32":
        parts.append(cfg.dtype)
    return "_".join(parts)


def _pretrained_layer_map(result: Any, extra: dict) -> AttentionMap:
    layer = int(extra["layer"])
    hide = bool(extra.get("hide_special"))
    tag = str(extra.get("file_tag") or "") + ("_nospecial" if hide else "")
    return AttentionMap(
        queries=list(result.tokens), keys=list(result.keys), title=f"{extra['pretrained']}, layer {layer}",
        summary=str(extra.get("summary") or ""), file_tag=tag,
        head_labels=[f"L{layer} head {h}" for h in range(result.num_heads)],
        hidden_mass=extra.get("hidden_mass"),
        # short: it shares the footer line with the hover read-out (the summary line has the numbers)
        legend="[CLS]/[SEP] hidden: rows NOT re-normalised" if hide else "",
        notices=list(result.notices), **_overview_fields(result),
    )


__all__ = ["map_of", "toy_file_tag", "toy_summary"]
