"""Thin adapters from today's core results to the typed records the window draws.

Transitional, one function each, until the parallel branches land: ``AttentionResult.attention_map()``
(variants), ``PretrainedResult.layer_map()`` (models) and a heatmap source built from an
``AttentionMap`` (render). Each adapter calls the real method when it exists.
"""

from __future__ import annotations

import numpy as np

from attndesk.core.pretrained import PretrainedResult
from attndesk.core.result import AttentionResult
from attndesk.core.types import MEAN, AttentionMap
from attndesk.render.export import default_filename
from attndesk.render.figure import settings_summary

from .long_source import source_for_result
from .panels.heatmap_source import ResultHeatmapSource


def toy_map(result: AttentionResult) -> AttentionMap:
    """The toy run's weights as an ``AttentionMap``."""
    native = getattr(result, "attention_map", None)
    if native is not None:
        return native()
    stem = default_filename(result, "all", "x").removeprefix("attn_all_").removesuffix(".x")
    return AttentionMap(
        queries=list(result.tokens), keys=list(result.keys), weights=result.weights, mask=result.mask,
        title="cross-attention" if result.key_tokens is not None else "self-attention",
        summary=settings_summary(result), file_tag=stem, notices=list(result.notices),
        pyramid=result.pyramid, exact=result.exact,
    )


def toy_source(result: AttentionResult):
    """The heatmap source of a toy run (the pyramid's for a memory-bounded one)."""
    return source_for_result(result)


def unknown_flags(result: AttentionResult) -> tuple[list[bool] | None, list[bool] | None]:
    """(query, key) flags of tokens that became [UNK]."""
    if hasattr(result, "unknown"):
        return result.unknown, result.key_unknown
    extra = getattr(result, "extra", None) or {}
    return extra.get("unknown"), extra.get("key_unknown")


class LayerSource(ResultHeatmapSource):
    """One layer of a real model for the heatmap panel: titled "L2 head 5"; its note says when
    special tokens are hidden (rows then NOT re-normalised)."""

    def __init__(self, result: AttentionResult, layer: int, hide_special: bool) -> None:
        super().__init__(result, title_prefix=f"L{layer} head")
        self.layer = layer
        self.legend = "[CLS]/[SEP] hidden: rows NOT re-normalised" if hide_special else ""

    def head_title(self, head) -> str:
        if head == MEAN:
            return f"L{self.layer} mean over {self.num_heads} heads"
        return super().head_title(head)

    def downsample_note(self) -> str:
        return " · ".join(n for n in (self.legend, super().downsample_note()) if n)


def layer_view(run: PretrainedResult, layer: int, hide_special: bool) -> tuple[AttentionMap, AttentionResult, list[str]]:
    """One layer of a real model's run: (its map, the layer as the export dialog takes it, notices).
    With every token special, hiding them would leave nothing: they are shown, with a notice."""
    notices = []
    try:
        view = run.layer_result(layer, hide_special)
    except ValueError:
        view = run.layer_result(layer, False)
        hide_special = False
        notices.append("every token is a special token: showing them")
    native = getattr(run, "layer_map", None)
    if native is not None:
        return native(layer, hide_special=hide_special), view, notices
    extra = view.extra
    heads = int(view.weights.shape[0])
    amap = AttentionMap(
        queries=list(view.tokens), keys=list(view.keys), weights=view.weights, mask=view.mask,
        title=f"{run.model_name} layer {layer}", summary=str(extra["summary"]), file_tag=str(extra["file_tag"]),
        head_labels=[f"L{layer} head {h}" for h in range(heads)], hidden_mass=extra.get("hidden_mass"),
        legend=str(extra["legend"]) if hide_special else "", notices=list(view.notices),
    )
    return amap, view, notices


def layer_source(view: AttentionResult, layer: int, hide_special: bool) -> LayerSource:
    return LayerSource(view, layer, hide_special)


def hidden_share(amap: AttentionMap) -> float | None:
    """The mean share of each row that went to hidden tokens (None when nothing is hidden)."""
    if amap.hidden_mass is None:
        return None
    return float(np.mean(amap.hidden_mass))
