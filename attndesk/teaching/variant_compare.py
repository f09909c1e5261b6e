"""One-click comparisons of the modern variants: MHA vs GQA, sinusoidal vs RoPE, full vs a
sliding window, with vs without a soft-cap. Each runs A and B on the same text and seed and
says in numbers what changed."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from einops import reduce

from attndesk.attention.kernel import attend
from attndesk.attention.masks import visible_cells
from attndesk.errors import ConfigError
from attndesk.runs.config import AttentionConfig
from attndesk.runs.pipeline import run_attention
from attndesk.runs.result import AttentionResult
from attndesk.system.free_memory import format_bytes

from .diff import TeachingComparison, diff_results, out_projection
from .kv_cost import kv_cache_table
from .statistics import head_statistics

VARIANT_KINDS = {
    "gqa": "MHA vs GQA",
    "rope": "sinusoidal vs RoPE",
    "window": "full vs sliding window",
    "softcap": "without vs with soft-cap",
}


def _grouped_kv(config: AttentionConfig) -> int:
    """The K/V heads B uses: the config's own grouping, else half the heads (or one)."""
    if config.num_heads == 1:
        raise ConfigError("one head has nothing to share: choose 2 or more heads to compare MHA with GQA")
    if config.num_kv_heads < config.num_heads:
        return config.num_kv_heads
    return config.num_heads // 2 if config.num_heads % 2 == 0 else 1


def _pooled_b(a: AttentionResult, config: AttentionConfig, kv: int) -> AttentionResult:
    """B = A's layer with each group's K and V heads mean-pooled into one (how MHA checkpoints
    become GQA, Ainslie et al. 2023): the same queries, only the sharing differs."""
    inter = a.intermediates
    assert inter is not None, "A is run with keep_intermediates"
    dtype = config.torch_dtype

    def pool(x):  # [H, L, d] -> [KV, L, d]
        return torch.as_tensor(reduce(x, "(kv g) l d -> kv l d", "mean", kv=kv)).to(dtype)[None]

    q = torch.as_tensor(inter.q).to(dtype)[None]
    mask = None if a.mask is None else torch.as_tensor(np.ascontiguousarray(a.mask))
    bias = None if inter.bias is None else torch.as_tensor(inter.bias).to(dtype)
    # A's scoring; its ALiBi bias and window are already in the kept bias and mask
    scoring = dataclasses.replace(
        config.scoring(config.head_dim**-0.5 if config.scaled else 1.0), slopes=None, window=None
    )
    with torch.inference_mode():
        context, weights = attend(q, pool(inter.k), pool(inter.v), mask=mask, bias=bias, scoring=scoring)
    b_config = config.replace(kv_heads=kv)
    return dataclasses.replace(
        a,
        weights=weights[0].float().numpy(),
        output=out_projection(config, context[0].float().numpy()),
        config=b_config,
        intermediates=None,
        notices=[*a.notices, f"B: A's K/V heads mean-pooled into {kv} group(s) of {config.num_heads // kv}"],
    )


def _compare_gqa(config: AttentionConfig, text: str) -> TeachingComparison:
    kv = _grouped_kv(config)
    a_config = config.replace(kv_heads=None, dropout=0.0)
    a = run_attention(a_config, text, keep_intermediates=True)
    b = _pooled_b(a, a_config, kv)
    rows = kv_cache_table(config)
    mha, gqa = rows[0], next(r for r in rows if r.kv_heads == kv)
    table = "\n".join(
        f"  {r.label}: " + ", ".join(f"{n // 1024}k tokens {format_bytes(b_)}" for n, b_ in r.bytes.items())
        for r in rows
    )
    explanation = (
        f"A has one K and V head per query head; B shares {kv} K/V head(s) among the {config.num_heads} "
        f"query heads (heads {config.num_heads // kv} by {config.num_heads // kv} read the same keys: their "
        "K and V are the mean of A's, as when a model is converted to GQA). The queries are unchanged, so "
        "heads in a group still attend differently, but within the same keys.\n"
        f"Why: a decoder caches K and V of every past token. For this layer's shape (d_k {config.head_dim}, "
        f"{config.dtype}) the cache per layer is:\n{table}\n"
        f"B keeps {mha.ratio_to(gqa):.0f}x less than A, at the same query cost."
    )
    diff = diff_results(a, b, budget=config.budget_bytes)
    return TeachingComparison(
        "gqa",
        VARIANT_KINDS["gqa"],
        a,
        b,
        f"A: MHA ({config.num_heads} K/V heads)",
        f"B: GQA ({kv} K/V heads, pooled)",
        diff,
        explanation,
        kv_cache=rows,
    )


def _mean_distance(result: AttentionResult) -> float:
    return float(np.nanmean([s.mean_distance for s in head_statistics(result.weights)]))


def _compare_rope(config: AttentionConfig, text: str) -> TeachingComparison:
    a = run_attention(config.replace(position="sinusoidal"), text)
    b = run_attention(config.replace(position="rope"), text)
    explanation = (
        "A adds sinusoidal positions to the embeddings, so position mixes into the token's vector before "
        "Q and K are made. B adds nothing there: it rotates each pair of Q and K dimensions by an angle "
        "proportional to the position (base 10000, as LLaMA), so q_i . k_j depends on the positions only "
        "through i - j, and the values carry no position at all.\n"
        f"Mean attention distance: A {_mean_distance(a):.2f} tokens, B {_mean_distance(b):.2f} tokens. "
        "The weights are random here, so neither prefers near tokens; what RoPE guarantees is that a shift "
        "of both positions leaves every score unchanged (see Positions)."
    )
    return TeachingComparison(
        "rope",
        VARIANT_KINDS["rope"],
        a,
        b,
        "A: sinusoidal positions",
        "B: RoPE",
        diff_results(a, b, budget=config.budget_bytes),
        explanation,
    )


def comparison_window(config: AttentionConfig, length: int) -> int:
    """The W of "full vs window W": the config's own window, else a quarter of the text (at least 2)."""
    return config.window or max(2, length // 4)


def _compare_window(config: AttentionConfig, text: str, window: int | None = None) -> TeachingComparison:
    a = run_attention(config.replace(window=None), text)
    lq, lk = a.shape
    w = window or comparison_window(config, lq)
    b = run_attention(config.replace(window=w), text)
    outside = np.abs(np.subtract.outer(np.arange(lq), np.arange(lk))) >= w  # [L, Lk] beyond the band
    mass = float((a.weights * outside).sum(axis=-1).mean())
    causal = "causal" in config.mask
    share = visible_cells(lq, lk, causal=causal, window=w) / max(1, visible_cells(lq, lk, causal=causal))
    explanation = (
        f"B lets query i see key j only when |i - j| < {w} (Mistral, Gemma 2/3 and ModernBERT layers do this). "
        "A masked key's weight is 0 and the rest of the row is re-normalised over the band.\n"
        f"A puts {mass:.3f} of each row's weight (mean over rows and heads) beyond the band: that is what "
        f"B redistributes. B computes {share:.0%} of A's cells; at long lengths the work and the memory grow "
        f"like L x {w}, not L^2 (a 16k-token run with window 512 computes 6% of the cells)."
    )
    return TeachingComparison(
        "window",
        VARIANT_KINDS["window"],
        a,
        b,
        "A: global attention",
        f"B: window {w}",
        diff_results(a, b, budget=config.budget_bytes),
        explanation,
    )


def _compare_softcap(config: AttentionConfig, text: str, cap: float | None = None) -> TeachingComparison:
    a = run_attention(config.replace(softcap=None), text, keep_intermediates=True)
    assert a.intermediates is not None and a.intermediates.scaled is not None, "run with keep_intermediates"
    top = float(np.abs(a.intermediates.scaled).max())
    c = cap or config.softcap or max(0.1, round(top / 2, 2))  # a cap this run's scores reach
    b = run_attention(config.replace(softcap=c), text)
    explanation = (
        f"B replaces each scaled score s by {c:g} tanh(s / {c:g}) before the mask (Gemma 2 uses 50 on "
        "its scores): small scores pass almost unchanged, large ones are squashed towards +-"
        f"{c:g}, so no single key can dominate a row by a huge margin (and logits stay finite in training).\n"
        f"Largest |score|: A {top:.3f}, B {c * np.tanh(top / c):.3f}; largest weight: A "
        f"{float(a.weights.max()):.3f}, B {float(b.weights.max()):.3f}."
    )
    a = dataclasses.replace(a, intermediates=None)
    return TeachingComparison(
        "softcap",
        VARIANT_KINDS["softcap"],
        a,
        b,
        "A: no soft-cap",
        f"B: soft-cap {c:g}",
        diff_results(a, b, budget=config.budget_bytes),
        explanation,
    )


def variant_comparison(kind: str, config: AttentionConfig, text: str) -> TeachingComparison:
    """Run one of VARIANT_KINDS for ``config`` and ``text`` (self-attention)."""
    config.validate()
    runs = {"gqa": _compare_gqa, "rope": _compare_rope, "window": _compare_window, "softcap": _compare_softcap}
    if kind not in runs:
        raise ConfigError(f"unknown comparison {kind!r}; choose one of: {', '.join(VARIANT_KINDS)}")
    return runs[kind](config, text)


__all__ = ["VARIANT_KINDS", "comparison_window", "variant_comparison"]
