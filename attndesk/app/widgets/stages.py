"""What the step-through shows, without widgets: which stages a run has, the exact matrix of each
for one head, the images drawn from them (made in a side job: numpy only), each stage's formula
and the arithmetic of one weight.

The 2017 layer's ten stages (``STAGES``) are always there. The modern variants add theirs where
the run produced them (``stages_of``): RoPE's Q and K before the rotation and the rotation angle
of every position and dimension pair, the soft-capped scores, ALiBi's bias, a softmax sink's
share of each row. They sit where the core computes them: projections -> rotation -> scores ->
scale -> soft-cap -> + bias -> mask -> softmax (with the sink in its denominator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attndesk.attention.alibi import alibi_slopes
from attndesk.attention.rope import ROPE_BASE, rope_angles
from attndesk.attention.types import BASE_STAGES, KV_STAGES, PER_HEAD_STAGES, SHOWN_STAGES, Intermediates

from .heatmap import PreparedMatrix, prepare_matrix

STAGES = BASE_STAGES
ALL_STAGES = SHOWN_STAGES
PER_HEAD = PER_HEAD_STAGES
SQUARE = {"scores", "scaled", "capped", "bias", "masked", "weights"}  # queries x keys
SEQUENTIAL = {"weights", "sink"}  # drawn 0..max with viridis; the rest are signed (diverging, centred at 0)


def stages_of(result) -> tuple[str, ...]:
    """The stages ``result`` kept, in computation order (the angles come with a rotation)."""
    inter: Intermediates = result.intermediates
    kept = set(inter.available())
    if inter.q_raw is not None and result.config.position == "rope":  # the toy's RoPE: base 10000, no scaling
        kept.add("angles")
    return tuple(name for name in ALL_STAGES if name in kept)


def _kept(stage: np.ndarray | None) -> np.ndarray:
    """A stage the step-through's runs always keep (they run with keep_intermediates=True)."""
    assert stage is not None, "the run kept its intermediates"
    return stage


def kv_head_of(inter: Intermediates, head: int) -> int:
    """The K/V head query head ``head`` reads (grouped-query heads share them: h // (H / KV))."""
    return head // (_kept(inter.weights).shape[0] // _kept(inter.k).shape[0])


def wrapped(angles: np.ndarray) -> np.ndarray:
    """Angles in [-pi, pi): the turn a pair has made, whole turns removed."""
    return (angles + np.pi) % (2 * np.pi) - np.pi


def rotation_angles(result) -> np.ndarray:
    """RoPE's raw angle theta(m, i) = m base^(-2i/d) of query position m and pair i, float64 [Lq, d/2]."""
    lq, d = result.intermediates.q.shape[-2:]
    return rope_angles(int(lq), int(d), base=ROPE_BASE).numpy()


def stage_matrix_of(result, name: str, head: int) -> np.ndarray:
    """The exact 2-D matrix stage ``name`` shows for ``head`` (the angles wrapped to [-pi, pi))."""
    inter = result.intermediates
    if name == "angles":
        return wrapped(rotation_angles(result))
    data = getattr(inter, name)
    if name in KV_STAGES:
        return data[kv_head_of(inter, head)]
    return data[head] if name in PER_HEAD else data


def stage_images(result, head: int) -> dict[str, PreparedMatrix]:
    """Every stage of ``head`` ready to draw (thread-safe: numpy only); masked weights are 0 but
    drawn hatched like the -inf they came from, never as a small weight."""
    hidden = ~np.isfinite(result.intermediates.masked[head])
    images = {}
    for name in stages_of(result):
        levels = (-math.pi, math.pi) if name == "angles" else None
        images[name] = prepare_matrix(
            stage_matrix_of(result, name, head),
            diverging=name not in SEQUENTIAL,
            levels=levels,
            masked=hidden if name == "weights" else None,
        )
    return images


def variant_words(result, head: int) -> str:
    """What the info line adds for a variant run: the K/V head read, the position, window, cap."""
    inter: Intermediates = result.intermediates
    cfg = result.config
    parts = []
    kv, heads = int(_kept(inter.k).shape[0]), int(_kept(inter.weights).shape[0])
    if kv < heads:
        parts.append(f"reads K/V head {kv_head_of(inter, head)} of {kv}")
    if cfg.position != "sinusoidal":
        parts.append({"rope": "RoPE", "alibi": "ALiBi", "none": "no positions"}.get(cfg.position, cfg.position))
    if cfg.window:
        parts.append(f"window {cfg.window}")
    if cfg.softcap:
        parts.append(f"soft-cap {cfg.softcap:g}")
    logit = sink_logit_of(result, head)
    if logit is not None:
        parts.append(f"sink logit {logit:.4g}, mean share {float(_kept(inter.sink)[head].mean()):.3f}")
    return "".join(f" · {p}" for p in parts)


def sink_logit_of(result, head: int) -> float | None:
    """The softmax sink's logit of ``head`` as the run kept it, or None without a sink."""
    kept = result.intermediates.sink_logit
    return None if kept is None else float(np.asarray(kept[head]).reshape(-1)[0])


def slope_of(result, head: int) -> float:
    return float(alibi_slopes(int(result.intermediates.weights.shape[0]))[head])


def layer_scale(result) -> float:
    """What the scores were multiplied by: a real model's layer says (T5: 1, Gemma: its own), the toy's
    config is scaled by 1/sqrt(d_k) or not."""
    own = getattr(result, "attention_scale", None)  # StageRun (a real model's layer) has one
    if own is not None:
        return float(own)
    return 1.0 / math.sqrt(result.intermediates.q.shape[-1]) if result.config.scaled else 1.0


def formula(result, name: str, head: int) -> str:
    """The rich-text formula under a stage's title (a real model's layer brings its own)."""
    own = getattr(result, "formulas", None) or {}
    if name in own:
        return own[name]
    cfg = result.config
    inter: Intermediates = result.intermediates
    d_k = int(_kept(inter.q).shape[-1])
    rope = inter.q_raw is not None
    steps = [("capped" if inter.capped is not None else "scaled")] + (["bias"] if inter.bias is not None else [])
    softmax_in = " + ".join(steps)
    masked = f"{softmax_in}, −∞ where masked" if cfg.mask != "none" or cfg.window else f"no mask: = {softmax_in}"
    sink = sink_logit_of(result, head) if inter.sink_logit is not None else None
    softmax = "softmax<sub>row</sub>(masked)"
    if sink is not None:
        softmax = f"e<sup>x</sup> / (e<sup>s</sup> + Σ<sub>k</sub> e<sup>x<sub>k</sub></sup>), s = {sink:.4g}"
    return {
        "embeddings": "X = embed(tokens) + PE" if cfg.position == "sinusoidal" else "X = embed(tokens)",
        "q_raw": "Q<sub>raw</sub> = X W<sub>Q</sub> + b",
        "k_raw": "K<sub>raw</sub> = X W<sub>K</sub> + b",
        "angles": "θ = m·ω<sub>i</sub> (mod 2π)",
        "q": "Q = RoPE(Q<sub>raw</sub>, θ)" if rope else "Q = X W<sub>Q</sub> + b",
        "k": "K = RoPE(K<sub>raw</sub>, θ)" if rope else "K = X W<sub>K</sub> + b",
        "v": "V = X W<sub>V</sub> + b",
        "scores": "S = Q K<sup>T</sup>",
        "scaled": f"S / √d<sub>k</sub> = S / √{d_k}" if cfg.scaled else "S (unscaled: × 1)",
        "capped": f"C·tanh(s/C), C = {cfg.softcap:g}" if cfg.softcap else "",
        "bias": (
            f"−m·|i − j|, m = {slope_of(result, head):.4g}" if cfg.position == "alibi" else "the layer's position bias"
        )
        if inter.bias is not None
        else "",
        "masked": masked,
        "weights": f"A = {softmax}" + (" then dropout" if cfg.training and cfg.dropout else ""),
        "sink": "e<sup>s</sup> / (e<sup>s</sup> + Σ<sub>k</sub> e<sup>x<sub>k</sub></sup>) = 1 − Σ<sub>k</sub> A"
        if sink is not None
        else "",
        "context": "C = A V",
        "output": "C (single head: no W<sub>O</sub>)"
        if _kept(inter.weights).shape[0] == 1
        else "concat<sub>h</sub>(C) W<sub>O</sub> + b",
    }[name]


EXPLAINED = {
    "embeddings": "token embeddings; sinusoidal positions are added here, RoPE and ALiBi act later in the layer",
    "q_raw": "the query projection before RoPE rotates it",
    "k_raw": "the key projection before RoPE rotates it (one per K/V head)",
    "angles": f"RoPE turns dimension pair (i, i + d/2) of position m by θ = m · {ROPE_BASE:g}^(−2i/d): "
    "low pairs turn fast, high pairs slowly; shown wrapped to [−π, π)",
    "capped": "soft-capping bounds every score to ±C smoothly (Gemma 2), before the mask",
    "bias": "ALiBi adds −slope·|i − j| to the scores: far keys are penalised, at a rate per head",
    "sink": "the share of each query's row the softmax sink took: it joins the denominator and gives no "
    "value, so the row's weights sum to 1 minus this (a learned sink, or off-by-one's fixed 0)",
}


@dataclass(frozen=True)
class CellArithmetic:
    """How weight[head, q, k] came about, recomputed in float64 from the stored Q and K."""

    head: int
    query: int
    key: int
    dot: float  # q . k (after any rotation)
    scale: float  # 1/sqrt(d_k), or 1.0 unscaled
    scaled: float  # dot * scale
    masked: bool
    row_max: float  # softmax subtracts it (it cancels)
    exp: float  # exp(logit - row_max), 0 when masked
    row_sum: float  # sum over the row's unmasked keys of exp(logit_j - row_max), plus the sink's term
    weight: float  # exp / row_sum
    stored: float  # the core's weight for comparison
    capped: float | None = None  # C tanh(scaled / C) under a soft-cap
    bias: float | None = None  # ALiBi's -m |i - j|
    logit: float = 0.0  # what the softmax takes: capped (or scaled) + bias
    sink: float | None = None  # the softmax sink's logit s (its term exp(s - row_max) is in row_sum)


def cell_arithmetic(result, head: int, q: int, k: int) -> CellArithmetic:
    """Recompute weight[head, q, k] step by step in float64 from the stored Q and K."""
    inter: Intermediates = result.intermediates
    qv = _kept(inter.q)[head, q].astype(np.float64)
    kv = _kept(inter.k)[kv_head_of(inter, head), k].astype(np.float64)
    dot = float(qv @ kv)
    scale = layer_scale(result)
    scaled = dot * scale
    cap = result.config.softcap
    capped = cap * math.tanh(scaled / cap) if cap else None
    if capped is None and inter.capped is not None:  # a real model's cap: as its layer computed it
        capped = float(inter.capped[head, q, k])
    bias = float(inter.bias[head, q, k]) if inter.bias is not None else None
    logit = (capped if capped is not None else scaled) + (bias or 0.0)
    row = _kept(inter.masked)[head, q].astype(np.float64)  # -inf where masked
    finite = np.isfinite(row)
    masked = not bool(finite[k])
    sink = sink_logit_of(result, head)
    if finite.any() or sink is not None:
        # the maximum includes the sink, whose exp(s - max) joins the sum
        row_max = float(row[finite].max()) if finite.any() else -math.inf
        row_max = row_max if sink is None else max(row_max, sink)
        row_sum = float(np.exp(row[finite] - row_max).sum()) + (0.0 if sink is None else math.exp(sink - row_max))
    else:  # every key masked: the core gives this query all-zero weights
        row_max, row_sum = float("-inf"), 0.0
    e = 0.0 if masked else math.exp(logit - row_max)
    weight = e / row_sum if row_sum > 0 else 0.0
    return CellArithmetic(
        head,
        q,
        k,
        dot,
        scale,
        scaled,
        masked,
        row_max,
        e,
        row_sum,
        weight,
        float(_kept(inter.weights)[head, q, k]),
        capped,
        bias,
        logit,
        sink,
    )


def arithmetic_lines(result, a: CellArithmetic) -> list[str]:
    """The hover read-out of one weight, one step a line."""
    tokens, keys = result.tokens, result.keys
    d_k = int(result.intermediates.q.shape[-1])
    rotated = (
        " (rotated Q and K: depends on the positions only through i − j)"
        if result.intermediates.q_raw is not None
        else ""
    )
    lines = [
        f'head {a.head} · query "{tokens[a.query]}" ({a.query}) → key "{keys[a.key]}" ({a.key})',
        f"q·k = Σ of {d_k} products = {a.dot:.6g}{rotated}",
    ]
    if getattr(result, "attention_scale", None) is not None:
        lines.append(f"× the layer's scale {a.scale:.6g}  → {a.scaled:.6g}")
    else:
        lines.append(
            f"÷ √d_k = ÷ {math.sqrt(d_k):.4g}  → {a.scaled:.6g}"
            if result.config.scaled
            else f"unscaled → {a.scaled:.6g}"
        )
    cap = result.config.softcap
    if a.capped is not None:
        lines.append(f"soft-cap {cap:g}·tanh(s / {cap:g}) → {a.capped:.6g}" if cap else f"soft-capped → {a.capped:.6g}")
    if a.bias is not None:
        what = f"ALiBi bias −m·|{a.query} − {a.key}|" if result.config.position == "alibi" else "position bias"
        lines.append(f"+ {what} = {a.bias:.6g}  → {a.logit:.6g}")
    if a.masked:
        lines.append("masked → −∞ → exp(−∞) = 0 → weight 0")
    else:
        lines.append(f"exp({a.logit:.6g} − row max {a.row_max:.6g}) = {a.exp:.6g}   (the row max cancels)")
        if a.sink is not None:
            share = math.exp(a.sink - a.row_max) / a.row_sum
            lines.append(f"row sum includes the sink's exp({a.sink:.6g} − row max) (its share {share:.6g})")
        lines.append(f"÷ row sum {a.row_sum:.6g} → {a.weight:.6g}   (core's weight: {a.stored:.6g})")
    return lines


def angle_readout(result, m: int, i: int) -> str:
    """The hover line of the angles stage: position m, pair i, the raw angle and its turn."""
    d = int(result.intermediates.q.shape[-1])
    raw = float(rotation_angles(result)[m, i])
    return (
        f"position {m}, pair {i} (dims {i} and {i + d // 2}): θ = {m} · {ROPE_BASE:g}^(−{2 * i}/{d}) = "
        f"{raw:.6g} rad ≡ {float(wrapped(np.asarray(raw))):.6g} (mod 2π)"
    )


__all__ = [
    "ALL_STAGES",
    "EXPLAINED",
    "PER_HEAD",
    "SEQUENTIAL",
    "SQUARE",
    "STAGES",
    "CellArithmetic",
    "angle_readout",
    "arithmetic_lines",
    "cell_arithmetic",
    "formula",
    "kv_head_of",
    "layer_scale",
    "rotation_angles",
    "stage_images",
    "stage_matrix_of",
    "stages_of",
    "variant_words",
    "wrapped",
]
