"""The fast path equals the reference path for every combination of variants, on full, blocked
and memory-bounded runs and for exact read-outs; a window computes only its band; a timer times
the fast path itself."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attndesk.attention import fastpath
from attndesk.attention import kernel as core
from attndesk.attention.alibi import alibi_bias, alibi_slopes
from attndesk.attention.kernel import attend
from attndesk.attention.masks import MaskSpec
from attndesk.attention.scoring import Scoring
from attndesk.core import AttentionConfig, run_attention
from attndesk.runs.plan import plan_run


def _configs():
    return st.builds(
        lambda heads, kv_pick, position, window, softcap, mask, scaled, seed: AttentionConfig(
            embed_dim=4 * heads if heads > 1 else 8,
            hidden_dim=6,
            num_heads=heads,
            kv_heads=[d for d in range(1, heads + 1) if heads % d == 0][
                kv_pick % sum(heads % d == 0 for d in range(1, heads + 1))
            ],
            position=position,
            window=window,
            softcap=softcap,
            mask=mask,
            scaled=scaled,
            seed=seed,
            dtype="float64",
            pad_to=23,
        ),
        heads=st.sampled_from([1, 2, 4, 6]),
        kv_pick=st.integers(0, 5),
        position=st.sampled_from(["sinusoidal", "rope", "alibi", "none"]),
        window=st.one_of(st.none(), st.integers(1, 9)),
        softcap=st.one_of(st.none(), st.sampled_from([0.3, 2.0, 40.0])),
        mask=st.sampled_from(["none", "padding", "causal", "padding+causal"]),
        scaled=st.booleans(),
        seed=st.integers(0, 50),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=_configs(), words=st.integers(1, 23), block_rows=st.integers(1, 9))
def test_every_path_gives_the_reference_numbers(config, words, block_rows, monkeypatch, text_of):
    text = text_of(words)
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 10**12)
    reference = run_attention(config, text)
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 0)
    fast = run_attention(config, text)
    blocked = run_attention(
        config, text, plan=dataclasses.replace(plan_run(config, 23, force="blocked"), block_rows=block_rows)
    )
    bounded = run_attention(
        config,
        text,
        plan=dataclasses.replace(plan_run(config, 23, force="pyramid", overview_px=8), block_rows=block_rows),
    )
    for other in (fast, blocked):
        np.testing.assert_allclose(other.weights, reference.weights, rtol=0, atol=1e-12)
        np.testing.assert_allclose(other.output, reference.output, rtol=0, atol=1e-12)
    np.testing.assert_allclose(bounded.output, reference.output, rtol=0, atol=1e-12)
    np.testing.assert_allclose(bounded.exact.region("mean", 0, 23, 0, 23), reference.weights.mean(0), atol=1e-7)
    for h in range(config.num_heads):
        np.testing.assert_allclose(bounded.exact.rows(h, 0, 23), reference.weights[h], atol=1e-7)
    f = bounded.pyramid.factor
    padded = np.zeros((config.num_heads, -(-23 // f) * f, -(-23 // f) * f))
    padded[:, :23, :23] = reference.weights
    tiles = padded.reshape(config.num_heads, padded.shape[1] // f, f, padded.shape[2] // f, f).max(axis=(2, 4))
    np.testing.assert_allclose(bounded.weights, tiles, atol=1e-7)


def _dense_inputs(seed: int, heads: int, kv: int, lq: int, lk: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, lq, 5, generator=gen, dtype=torch.float64)
    k = torch.randn(2, kv, lk, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(2, kv, lk, 3, generator=gen, dtype=torch.float64)
    return q, k, v


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 999),
    kv_heads=st.sampled_from([1, 2, 4]),
    lq=st.integers(1, 14),
    lk=st.integers(1, 14),
    mask_kind=st.sampled_from(["none", "key", "row", "head", "full"]),
    window=st.one_of(st.none(), st.integers(1, 6)),
    softcap=st.one_of(st.none(), st.just(0.7)),
    alibi=st.booleans(),
    bias=st.booleans(),
    block_bytes=st.integers(1, 400),
)
def test_dense_fast_path_equals_attend(seed, kv_heads, lq, lk, mask_kind, window, softcap, alibi, bias, block_bytes):
    q, k, v = _dense_inputs(seed, 4, kv_heads, lq, lk)
    gen = torch.Generator().manual_seed(seed + 1)
    shapes = {"none": None, "key": (2, 1, 1, lk), "row": (lq, 1), "head": (1, 4, lq, lk), "full": (2, 4, lq, lk)}
    mask = None if shapes[mask_kind] is None else torch.rand(shapes[mask_kind], generator=gen) > 0.3
    full_mask = mask
    if window is not None:  # the reference gets the band as a mask; the fast path makes it per block
        band = (torch.arange(lq)[:, None] - torch.arange(lk)[None, :]).abs() < window
        full_mask = band if mask is None else mask & band
    extra = torch.randn(1, 4, lq, lk, generator=gen, dtype=torch.float64) if bias else None
    slopes = tuple(float(s) for s in alibi_slopes(4)) if alibi else None
    total = extra
    if alibi:
        total = (
            alibi_bias(4, lq, lk, dtype=torch.float64)
            if total is None
            else total + alibi_bias(4, lq, lk, dtype=torch.float64)
        )
    want_ctx, want_w = attend(q, k, v, mask=full_mask, bias=total, scale=0.4, softcap=softcap)
    scoring = Scoring(0.4, softcap=softcap, slopes=slopes, window=window)
    ctx, w = core._blocked_attention(q, k, v, mask, scoring, bias=extra, block_bytes=block_bytes)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(ctx, want_ctx, rtol=0, atol=1e-12)
    assert not torch.isnan(w).any()


@pytest.fixture
def cells(monkeypatch):
    """The score cells (rows x keys) of every block the fast path computes."""
    seen = []
    real = fastpath.block_weights

    def counted(q, k, *args, **kwargs):
        seen.append(q.shape[0] * k.shape[0])
        return real(q, k, *args, **kwargs)

    monkeypatch.setattr(fastpath, "block_weights", counted)
    return seen


def test_a_window_computes_only_its_band(cells, text_of):
    """Count the score cells the fast path computes: O(L W), not O(L^2)."""
    length, window = 600, 16
    config = AttentionConfig(embed_dim=16, num_heads=2, mask="none", window=window, memory_budget=200_000)
    result = run_attention(config, text_of(length))
    assert result.plan.kind == "pyramid"
    computed = sum(cells)
    assert computed <= 2 * length * (2 * window - 1 + 2 * result.plan.block_rows + 2 * result.plan.factor)
    assert computed < 0.25 * 2 * length * length
    # outside the band the exact weights are zero and the overview's tiles too
    assert result.weight_at(0, 500, 10) == 0.0 and result.weight_at(1, 300, 300) > 0
    far = result.pyramid.levels[0].max[:, 0, -1]
    assert (far == 0).all()


def test_causal_blocks_skip_the_upper_triangle_and_still_write_its_zeros(cells):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 64, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    spec = MaskSpec(64, 64, causal=True)
    weights = torch.full((1, 2, 64, 64), float("nan"), dtype=torch.float64)  # every cell must be written
    rule = fastpath.SpecRule(spec, dtype=torch.float64)
    context = fastpath.fast_attention(q, k, v, rule, fastpath.Scoring(0.5), weights=weights, block_rows=8)
    assert sum(cells) == 2 * sum(8 * stop for stop in range(8, 65, 8))  # each block up to its last query
    want_ctx, want_w = attend(q, k, v, mask=spec.to_tensor(), scale=0.5)
    torch.testing.assert_close(weights, want_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(context, want_ctx, rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", [{}, {"kv_heads": 2}, {"window": 8}, {"position": "alibi", "softcap": 5.0}])
def test_a_real_timer_times_the_fast_path_itself(monkeypatch, variant, text_of):
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 0)
    calls = []
    real = fastpath.fast_attention

    def counted(*args, **kwargs):
        calls.append(kwargs.get("timer"))
        return real(*args, **kwargs)

    monkeypatch.setattr("attndesk.runs.pipeline.fast_attention", counted)
    result = run_attention(AttentionConfig(**variant), text_of(40))
    assert len(calls) == 1 and calls[0] is not None and hasattr(calls[0], "seconds")
    assert list(result.timings) == ["embed", "projections", "attention", "weighted sum", "output projection", "total"]
    assert all(result.timings[s] > 0 for s in ("attention", "weighted sum"))
    assert result.timings["total"] == pytest.approx(sum(v for s, v in result.timings.items() if s != "total"))


def test_bounded_runs_time_the_overview_as_a_stage(text_of):
    result = run_attention(AttentionConfig(embed_dim=16, num_heads=2, window=5, memory_budget=30_000), text_of(200))
    assert result.plan.kind == "pyramid"
    assert list(result.timings) == [
        "embed",
        "projections",
        "attention",
        "weighted sum",
        "output projection",
        "overview",
        "total",
    ]
    assert result.timings["overview"] > 0
    assert result.timings["total"] == pytest.approx(sum(v for s, v in result.timings.items() if s != "total"))


def test_gqa_and_window_plan_less_work():
    base = AttentionConfig(embed_dim=512, num_heads=8)
    full = plan_run(base, 16384)
    assert plan_run(base.replace(kv_heads=2), 16384).flops < full.flops
    windowed = plan_run(base.replace(window=512), 16384)
    assert windowed.flops < 0.15 * full.flops  # the projections stay; the attention is 6% of the cells
    assert windowed.seconds < 0.15 * full.seconds


@pytest.mark.parametrize(
    "variant",
    [
        {"position": "alibi"},
        {"position": "rope", "kv_heads": 2, "window": 20, "softcap": 3.0, "mask": "padding+causal"},
    ],
)
def test_bfloat16_long_runs_equal_the_full_run(variant):
    # the long path rounds each stage as the reference does (ALiBi's bias once, from exact distances)
    config = AttentionConfig(dtype="bfloat16", pad_to=310, **variant)
    text = " ".join(["the cat sat on the mat and the dog barked"] * 30)
    full, bounded = run_attention(config, text), run_attention(config.replace(memory_budget=200_000), text)
    assert bounded.plan.kind == "pyramid"
    np.testing.assert_array_equal(bounded.output, full.output)
    for h, q, k in [(0, 5, 3), (3, 290, 280), (2, 100, 99)]:
        assert bounded.weight_at(h, q, k) == full.weight_at(h, q, k)
