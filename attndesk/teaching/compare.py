"""Comparisons: two results cell by cell (B - A), the one-click teaching pairs, and attndesk's
attention layer against PyTorch's own implementations on the same weights and input."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attndesk.attention.alibi import alibi_bias
from attndesk.attention.masks import build_mask, window_mask
from attndesk.attention.positional import sinusoidal_encoding
from attndesk.attention.rope import rope
from attndesk.checks import text_argument
from attndesk.errors import ConfigError
from attndesk.runs.config import AttentionConfig
from attndesk.runs.memory import estimate_run, largest_fitting
from attndesk.runs.pipeline import build_model, run_attention
from attndesk.runs.result import AttentionResult
from attndesk.runs.tokenizer import PAD_ID, WordTokenizer
from attndesk.system.devices import resolve_device
from attndesk.system.free_memory import format_bytes

from .diff import ComparisonError, ResultDiff, TeachingComparison, diff_arrays, diff_results, out_projection
from .statistics import head_statistics
from .tutorial import EXPLANATION as TUTORIAL_EXPLANATION
from .tutorial import tutorial_effect
from .variant_compare import VARIANT_KINDS, variant_comparison

# --- one-click teaching comparisons ---------------------------------------------------------

TEACHING_KINDS = {
    "scaled": "scaled vs unscaled",
    "masked": "masked vs unmasked",
    "tutorial": "padding mask vs the tutorial's variant (a bug)",
}


def _mean_entropy(result: AttentionResult) -> float:
    return float(np.nanmean([s.entropy for s in head_statistics(result.weights)]))


def _compare_scaled(config: AttentionConfig, text: str) -> TeachingComparison:
    a = run_attention(config.replace(scaled=True), text)
    b = run_attention(config.replace(scaled=False), text)
    dk = config.head_dim
    explanation = (
        f"Without the 1/sqrt(d_k) factor (d_k = {dk}) every score is sqrt({dk}) = {math.sqrt(dk):.2f} times "
        "larger. Dot products of d_k roughly independent components have a spread growing like sqrt(d_k); "
        "unscaled, the softmax saturates: rows put nearly all weight on one key and its gradients vanish.\n"
        f"mean row entropy: scaled {_mean_entropy(a):.3f} nats, unscaled {_mean_entropy(b):.3f} nats; "
        f"largest weight: scaled {float(a.weights.max()):.3f}, unscaled {float(b.weights.max()):.3f}."
    )
    return TeachingComparison(
        "scaled",
        TEACHING_KINDS["scaled"],
        a,
        b,
        "A: scaled by 1/sqrt(d_k)",
        "B: unscaled",
        diff_results(a, b, budget=config.budget_bytes),
        explanation,
    )


def _compare_masked(config: AttentionConfig, text: str) -> TeachingComparison:
    kind = config.mask if config.mask != "none" else "causal"
    a = run_attention(config.replace(mask=kind), text)
    note = ""
    if a.mask is None or a.mask.all():  # e.g. a padding mask on text without padding: nothing to see
        note = f"The {kind} mask blocks nothing in this input (no padding), so this shows the causal mask.\n"
        kind = "causal"
        a = run_attention(config.replace(mask=kind), text)
    b = run_attention(config.replace(mask="none"), text)
    blocked = ~a.mask if a.mask is not None else np.zeros(a.weights.shape[1:], dtype=bool)
    per_row = b.weights * blocked  # [H, L, Lk]: unmasked weight on the cells A blocks
    explanation = note + (
        f"A uses the {kind} mask, B none. A masked cell is removed before the softmax (score -inf, "
        "weight exactly 0), so the rest of the row is re-normalised over the allowed keys: masking changes "
        "every weight of a row, not only the masked ones.\n"
        f"Without the mask, a row puts {float(per_row.sum(axis=-1).mean()):.3f} of its weight (mean over rows "
        "and heads) on keys the mask blocks."
    )
    return TeachingComparison(
        "masked",
        TEACHING_KINDS["masked"],
        a,
        b,
        f"A: {kind} mask",
        "B: no mask",
        diff_results(a, b, budget=config.budget_bytes),
        explanation,
    )


def _padded_length(config: AttentionConfig, text: str) -> int:
    n = len(WordTokenizer(config.vocab_size).split(text))
    if config.pad_to is not None and config.pad_to > n:
        return config.pad_to
    return n + max(2, n // 2)  # pad so the mask has something to do


def _softmax_input(inter) -> np.ndarray:
    """[H, L, Lk] scores as they enter the masking: scaled, soft-capped, plus any bias."""
    scores = inter.capped if inter.capped is not None else inter.scaled
    return scores if inter.bias is None else scores + inter.bias


def _compare_tutorial(config: AttentionConfig, text: str) -> TeachingComparison:
    # the point is the padding mask: a window would mask cells the tutorial's variant cannot
    cfg = config.replace(mask="padding", pad_to=_padded_length(config, text), dropout=0.0, window=None)
    a = run_attention(cfg, text, keep_intermediates=True)
    inter = a.intermediates
    assert inter is not None and inter.v is not None, "run with keep_intermediates"
    # The variant acts on the same scores (this run's, scaled as configured) in the run's dtype.
    scores = torch.as_tensor(_softmax_input(inter)).to(cfg.torch_dtype)  # [H, L, L]
    effect = tutorial_effect(scores, torch.as_tensor(a.token_ids))
    weights = effect.tutorial[0].float().numpy()  # [H, L, L]
    v = np.repeat(inter.v, cfg.num_heads // cfg.num_kv_heads, axis=0)  # [KV, L, d] -> [H, L, d]
    context = np.einsum("hqk,hkd->hqd", weights, v)
    b = dataclasses.replace(
        a,
        weights=weights,
        output=out_projection(cfg, context),
        intermediates=None,
        mask=None,  # the variant masks no cell: views must not hatch its padded keys
        notices=[*a.notices, "tutorial's variant: attention_prob += mask * -1e5, mask [B, 1, L, 1]"],
    )
    explanation = TUTORIAL_EXPLANATION + "\n" + effect.summary()
    if config.window is not None:
        explanation += f"\n(the window of {config.window} is off on both sides: only the padding mask is compared)"
    if not config.scaled:
        explanation += "\n(the tutorial itself never scales by sqrt(d_k); both sides here use this run's scores)"
    return TeachingComparison(
        "tutorial",
        TEACHING_KINDS["tutorial"],
        a,
        b,
        "A: padding mask (keys, -inf)",
        "B: tutorial's += mask * -1e5 (BUG)",
        diff_results(a, b, budget=config.budget_bytes),
        explanation,
        effect,
    )


def teaching_comparison(kind: str, config: AttentionConfig, text: str) -> TeachingComparison:
    """Run one of TEACHING_KINDS (or VARIANT_KINDS) for ``config`` and ``text``: A, B, B - A and
    what it shows. Qt-free and thread-safe like run_attention (run it in the worker)."""
    config.validate()
    if kind not in TEACHING_KINDS and kind not in VARIANT_KINDS:
        raise ConfigError(f"unknown comparison {kind!r}; choose one of: {', '.join([*TEACHING_KINDS, *VARIANT_KINDS])}")
    if text_argument("text", text):
        length = len(WordTokenizer(config.vocab_size).split(text))
        length = _padded_length(config, text) if kind == "tutorial" else max(length, config.pad_to or 0)
        # A and B whole (float32), B - A and |B - A| (float64), beside one run's peak
        title = TEACHING_KINDS.get(kind) or VARIANT_KINDS[kind]
        _check_full_size(config, length, 4 + 16, f"the {title} comparison")
    if kind in VARIANT_KINDS:
        return variant_comparison(kind, config, text)
    return {"scaled": _compare_scaled, "masked": _compare_masked, "tutorial": _compare_tutorial}[kind](config, text)


def _check_full_size(config: AttentionConfig, length: int, bytes_per_cell: int, what: str) -> None:
    """A comparison holds whole [H, L, L] matrices (no blocked path): ConfigError when one run's
    peak plus ``bytes_per_cell`` per cell exceeds the memory budget, with the length that fits."""

    def need(n: int) -> int:
        return estimate_run(config, n).peak_bytes + bytes_per_cell * config.num_heads * n * n

    budget = config.budget_bytes
    if length < 1 or need(length) <= budget:
        return
    fit = largest_fitting(need, 1, length, budget)
    raise ConfigError(
        f"{what} keeps every weight of {length:,} tokens x {config.num_heads} heads: {format_bytes(need(length))}, "
        f"over the {format_bytes(budget)} memory budget; at most {fit:,} tokens fit (shorten the text or raise the budget)"
    )


# --- attndesk vs PyTorch's implementations ----------------------------------------------------

IMPLEMENTATIONS = ("attndesk MultiHeadAttention", "F.scaled_dot_product_attention", "nn.MultiheadAttention")


@dataclass
class ImplementationComparison:
    """Best-of-``repeats`` seconds per implementation (after one untimed warm-up call) and the max
    |difference| from attndesk's result."""

    timings: dict[str, float]
    max_abs_output: dict[str, float]  # vs attndesk (attndesk itself: 0.0)
    max_abs_weights: dict[str, float | None]  # None: that implementation returns no weights
    length: int
    device: str
    dtype: str
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[tuple[str, float | None, float | None, float | None]]:
        """(name, seconds, max |d output|, max |d weights|) in IMPLEMENTATIONS order."""
        return [
            (name, self.timings.get(name), self.max_abs_output.get(name), self.max_abs_weights.get(name))
            for name in IMPLEMENTATIONS
            if name in self.timings
        ]


def _best_time(fn, repeats: int, device: torch.device):
    result = fn()  # warm-up, untimed: first calls pay for allocations and kernel selection
    best = math.inf
    for _ in range(max(1, repeats)):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return result, best


def _max_abs(ref: torch.Tensor, other: torch.Tensor, notes: list[str], name: str) -> float:
    d = (other.double() - ref.double()).abs()
    bad = ~torch.isfinite(d)
    if bool(bad.any()):  # e.g. SDPA gives NaN for a query whose keys are all masked; attndesk gives 0
        notes.append(f"{name}: {int(bad.sum())} non-finite value(s) (rows with every key masked) left out")
        d = d[~bad]
    return float(d.max()) if d.numel() else 0.0


def _layer_kwargs(config: AttentionConfig, scale: float) -> dict:
    """The variant settings attndesk's layer takes per call."""
    position = config.position if config.position in ("rope", "alibi") else "none"
    sinks = config.scoring(scale).sinks
    return dict(scale=scale, softcap=config.softcap, position=position, window=config.window, sinks=sinks)


def _sdpa_call(config: AttentionConfig, layer, x: torch.Tensor, mask: torch.Tensor | None, scale: float):
    """The same layer on F.scaled_dot_product_attention: the layer's projections (+ RoPE), a
    float mask carrying ALiBi's bias, grouped K/V heads through enable_gqa."""
    heads, kv = config.num_heads, config.num_kv_heads
    length = x.shape[1]
    if config.window is not None:
        band = window_mask(length, length, config.window, device=x.device)
        mask = band if mask is None else mask & band
    attn_mask = mask
    if config.position == "alibi":
        bias = alibi_bias(heads, length, dtype=x.dtype, device=x.device)[None]  # [1, H, L, L]
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))

    def call():
        split = "b l (h d) -> b h l d"
        q = rearrange(layer.q_proj(x), split, h=heads)
        k, v = (rearrange(p(x), split, h=kv) for p in (layer.k_proj, layer.v_proj))
        if config.position == "rope":
            q, k = rope(q), rope(k)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale, enable_gqa=kv != heads)
        ctx = rearrange(ctx, "b h l d -> b l (h d)")
        return ctx if heads == 1 else layer.out_proj(ctx)

    return call


def _torch_mha_call(config: AttentionConfig, layer, x: torch.Tensor, mask: torch.Tensor | None, scale: float):
    """The same layer as an nn.MultiheadAttention, or the reason it cannot be one."""
    plain = config.num_kv_heads == config.num_heads and config.position in ("sinusoidal", "none")
    if config.num_heads == 1:
        return None, (
            "nn.MultiheadAttention skipped: the single-head layer projects to hidden_dim and has no "
            "output projection, which nn.MultiheadAttention cannot express"
        )
    if not plain or config.softcap is not None or config.sink != "none":
        return None, (
            "nn.MultiheadAttention skipped: it has no grouped K/V heads, RoPE, ALiBi, soft-cap or softmax sink "
            "(F.scaled_dot_product_attention does this comparison)"
        )
    length = x.shape[1]
    mha = nn.MultiheadAttention(
        config.embed_dim, config.num_heads, bias=config.bias, batch_first=True, device=x.device, dtype=x.dtype
    ).eval()
    # nn.MultiheadAttention always divides by sqrt(d_k): fold the wanted scale into its Q weights
    q_factor = scale * math.sqrt(config.head_dim)
    mha.in_proj_weight.copy_(torch.cat([layer.q_proj.weight * q_factor, layer.k_proj.weight, layer.v_proj.weight]))
    if config.bias:
        mha.in_proj_bias.copy_(torch.cat([layer.q_proj.bias * q_factor, layer.k_proj.bias, layer.v_proj.bias]))
        mha.out_proj.bias.copy_(layer.out_proj.bias)
    mha.out_proj.weight.copy_(layer.out_proj.weight)
    if config.window is not None:
        band = window_mask(length, length, config.window, device=x.device)
        mask = band if mask is None else mask & band
    # its bool mask means the opposite: True = may NOT attend; [L, L]
    blocked = None if mask is None else ~torch.broadcast_to(mask, (1, 1, length, length))[0, 0]
    note = (
        "unscaled: nn.MultiheadAttention's fixed 1/sqrt(d_k) is undone in its query weights"
        if not config.scaled
        else None
    )
    return (lambda: mha(x, x, x, attn_mask=blocked, need_weights=True, average_attn_weights=False)), note


def _input_of(config: AttentionConfig, model, text: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The config's embedded input [1, L, E] (+ sinusoidal positions) and its mask."""
    if not text_argument("text", text).strip():
        raise ConfigError("type some text to attend over: the input is empty")
    ids = WordTokenizer(config.vocab_size).encode(text, config.pad_to).ids
    if not ids:
        raise ConfigError("type some text to attend over: no tokens found")
    # attndesk's, SDPA's and nn.MultiheadAttention's weights and score buffers, beside one run's peak
    _check_full_size(config, len(ids), 4 * config.torch_dtype.itemsize, "the comparison with PyTorch's implementations")
    id_t = torch.tensor([ids], device=model.embedding.weight.device)  # [1, L]
    x = model.embedding(id_t)  # [1, L, E]
    if config.position == "sinusoidal":
        x = x + sinusoidal_encoding(len(ids), config.embed_dim, dtype=x.dtype, device=x.device)
    return x, build_mask(config.mask, id_t, pad_id=PAD_ID)  # bool, True = may attend


def compare_implementations(config: AttentionConfig, text: str, *, repeats: int = 3) -> ImplementationComparison:
    """The config's input (embeddings + positions, mask) through attndesk's attention layer,
    F.scaled_dot_product_attention and nn.MultiheadAttention, all with the same projection weights,
    in eval mode (no dropout). Timings cover projections, attention and the output projection.
    Variants go to each as far as it can express them (SDPA has no soft-cap; nn.MHA none at all)."""
    config.validate()
    device = resolve_device(config.device)
    model = build_model(config, device)
    layer = model.attention
    notes = ["compared in eval mode: dropout off for all three"] if config.training and config.dropout > 0 else []
    scale = 1.0 / math.sqrt(config.head_dim) if config.scaled else 1.0
    timings: dict[str, float] = {}
    out_diff: dict[str, float] = {}
    w_diff: dict[str, float | None] = {}
    with torch.inference_mode():
        was_training = layer.training
        layer.eval()
        try:
            x, mask = _input_of(config, model, text)
            ours = lambda: layer(x, mask=mask, **_layer_kwargs(config, scale))  # noqa: E731
            (ref_out, ref_w), timings[IMPLEMENTATIONS[0]] = _best_time(ours, repeats, device)
            if config.num_heads == 1:
                ref_w = ref_w[:, None]  # [B, L, L] -> [B, 1, L, L]
            out_diff[IMPLEMENTATIONS[0]], w_diff[IMPLEMENTATIONS[0]] = 0.0, 0.0
            if config.softcap is not None or config.sink != "none":
                notes.append("F.scaled_dot_product_attention skipped: it has no soft-cap or softmax sink")
            else:
                out, timings[IMPLEMENTATIONS[1]] = _best_time(
                    _sdpa_call(config, layer, x, mask, scale), repeats, device
                )
                out_diff[IMPLEMENTATIONS[1]] = _max_abs(ref_out, out, notes, IMPLEMENTATIONS[1])
                w_diff[IMPLEMENTATIONS[1]] = None
            call, note = _torch_mha_call(config, layer, x, mask, scale)
            notes += [note] if note else []
            if call is not None:
                (out, w), timings[IMPLEMENTATIONS[2]] = _best_time(call, repeats, device)
                out_diff[IMPLEMENTATIONS[2]] = _max_abs(ref_out, out, notes, IMPLEMENTATIONS[2])
                w_diff[IMPLEMENTATIONS[2]] = _max_abs(ref_w, w, notes, IMPLEMENTATIONS[2] + " weights")
        finally:
            layer.train(was_training)
    return ImplementationComparison(
        timings=timings,
        max_abs_output=out_diff,
        max_abs_weights=w_diff,
        length=int(x.shape[1]),
        device=str(device),
        dtype=config.dtype,
        notes=notes,
    )


__all__ = [
    "IMPLEMENTATIONS",
    "TEACHING_KINDS",
    "VARIANT_KINDS",
    "ComparisonError",
    "ImplementationComparison",
    "ResultDiff",
    "TeachingComparison",
    "compare_implementations",
    "diff_arrays",
    "diff_results",
    "teaching_comparison",
]
