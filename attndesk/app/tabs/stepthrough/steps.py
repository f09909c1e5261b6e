"""One layer of a real model, stage by stage, for the step-through: what its attention computed
(Q and K before and after the rotary embedding, scores, the layer's own scale, soft-cap, position
bias, mask, weights, context, output), captured by attndesk's ``attend`` in a second forward pass
that keeps that layer's ``Intermediates``. Qt-free: ``stage_run`` is a side job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attndesk.attention.types import Intermediates
from attndesk.models import load_pretrained, packaged_model_dir, run_pretrained


@dataclass(frozen=True)
class StageFacts:
    """What the step-through says about the layer besides its arrays (the names it reads)."""

    scaled: bool
    mask: str  # "none", "causal", "causal, window 4096"
    training: bool = False  # eval mode: no dropout
    dropout: float = 0.0
    position: str = "the model's own"  # "rotary" when the layer rotates Q and K (its own base and scaling)
    window: int | None = None
    softcap: float | None = None  # None: read from the layer's capped stage, if it has one


@dataclass(frozen=True, eq=False)
class StageRun:
    """One layer and part of a real model's run as the step-through draws it: the stages, the query
    and key tokens, the scale the layer applied (measured from its scores) and each stage's formula."""

    intermediates: Intermediates
    tokens: list[str]
    keys: list[str]
    config: StageFacts
    attention_scale: float
    formulas: dict[str, str]
    layer: int
    part: str
    model_name: str


def measured_scale(inter: Intermediates) -> float:
    """The factor the layer multiplied its scores by (scaled / scores over the nonzero scores)."""
    scores, scaled = np.asarray(inter.scores, np.float64), np.asarray(inter.scaled, np.float64)
    big = np.abs(scores) > 1e-3
    return float(np.median(scaled[big] / scores[big])) if big.any() else 1.0


def stage_formulas(inter: Intermediates, layer: int, part: str, scale: float, mask: str) -> dict[str, str]:
    rope = inter.q_raw is not None
    source = "H<sub>enc</sub>" if part == "cross" else "X"  # cross-attention's keys come from the encoder
    masked = ("soft-capped, " if inter.capped is not None else "") + (
        "+ position bias, " if inter.bias is not None else ""
    )
    masked += "−∞ where masked" if mask != "none" else "no mask"
    return {
        "embeddings": "X = the embeddings" if layer == 0 else f"X = layer {layer}'s input",
        "q": "Q = RoPE(X W<sub>Q</sub>)" if rope else "Q = X W<sub>Q</sub>",
        "k": f"K = RoPE({source} W<sub>K</sub>)" if rope else f"K = {source} W<sub>K</sub>",
        "v": f"V = {source} W<sub>V</sub>",
        "scores": "S = Q K<sup>T</sup>",
        "scaled": f"S × {scale:.4g}",
        "masked": masked,
        "weights": "A = softmax<sub>row</sub>(masked)",
        "context": "C = A V",
        "output": "concat<sub>h</sub>(C) W<sub>O</sub>",
        "q_raw": "Q before RoPE = X W<sub>Q</sub>",
        "k_raw": "K before RoPE = X W<sub>K</sub>",
    }


def stage_run(
    path: str | Path | None,
    text: str,
    target: str | None,
    layer: int,
    part: str,
    *,
    scaled: bool = True,
    causal: bool = False,
    ablate=(),
) -> StageRun:
    """Run the model (cached) once more keeping layer ``layer``'s stages, and shape ``part`` of it."""
    model = load_pretrained(packaged_model_dir() if path is None else path)
    run = run_pretrained(model, text, target=target, layer=int(layer), scaled=scaled, causal=causal, ablate=ablate)
    part = part if part in run.intermediates else "self"
    inter = run.intermediates[part]
    target_tokens = list(run.target_tokens or [])
    tokens, keys = {
        "self": (run.tokens, run.tokens),
        "decoder": (target_tokens, target_tokens),
        "cross": (target_tokens, run.tokens),
    }[part]
    window = run.layer_window(layer, part)
    causal_part = part == "decoder" or (part == "self" and (run.family == "decoder" or run.causal))
    mask = ("causal" if causal_part else "none") + (f", window {window}" if window else "")
    scale = measured_scale(inter)
    position = "rotary" if inter.q_raw is not None else "the model's own"
    facts = StageFacts(scaled=run.scaled, mask=mask, position=position, window=window)
    return StageRun(
        inter,
        list(tokens),
        list(keys),
        facts,
        scale,
        stage_formulas(inter, layer, part, scale, mask),
        int(layer),
        part,
        run.model_name,
    )


__all__ = ["StageFacts", "StageRun", "measured_scale", "stage_formulas", "stage_run"]
