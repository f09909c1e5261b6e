"""The blocked path gives the full path's numbers: weights, outputs, every mask kind, odd blocks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attndesk.attention.blocked import ExactAttention, FullSink, MaskSpec, blocked_attention
from attndesk.core import AttentionConfig, Cancelled, ConfigError, run_attention, scaled_dot_product_attention
from attndesk.runs.plan import plan_run


def _tols(dtype: str) -> dict:
    # float64 is exact to rounding; float32 may differ in the last bits where a block's GEMM is
    # blocked differently from the full one (e.g. a single row)
    return dict(rtol=0, atol=1e-12) if dtype == "float64" else dict(rtol=0, atol=2e-6)


def _blocked_plan(config: AttentionConfig, lq: int, lk: int, block_rows: int, **kw):
    return dataclasses.replace(plan_run(config, lq, lk, **kw), block_rows=block_rows)


@pytest.mark.parametrize("mask", ["none", "padding", "causal", "padding+causal"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_blocked_equals_full_for_every_mask(mask, dtype, text_of):
    # 37 real tokens padded to 53: padding rows and keys, L not a multiple of any block
    config = AttentionConfig(embed_dim=24, num_heads=3, mask=mask, dtype=dtype, pad_to=53, seed=3)
    text = text_of(37)
    full = run_attention(config, text)
    assert full.plan.kind == "full"
    for block_rows in (1, 7, 16, 53, 64):
        plan = _blocked_plan(config, 53, 53, block_rows, force="blocked")
        blocked = run_attention(config, text, plan=plan)
        assert blocked.plan.kind == "blocked" and blocked.weights.shape == (3, 53, 53)
        np.testing.assert_allclose(blocked.weights, full.weights, **_tols(dtype))
        np.testing.assert_allclose(blocked.output, full.output, **_tols(dtype))
        if full.mask is None:
            assert blocked.mask is None
        else:
            np.testing.assert_array_equal(blocked.mask, full.mask)
        # the same stage names, then the overview's, then total
        assert list(blocked.timings) == [*list(full.timings)[:-1], "overview", "total"]
        assert blocked.timings["total"] >= blocked.timings["attention"] > 0


@pytest.mark.parametrize("heads", [1, 4])
def test_blocked_equals_full_single_head_and_unscaled(heads, text_of):
    config = AttentionConfig(
        embed_dim=16, hidden_dim=12, num_heads=heads, mask="padding+causal", scaled=False, pad_to=90, dtype="float64"
    )
    text = text_of(71)
    full = run_attention(config, text)
    blocked = run_attention(config, text, plan=_blocked_plan(config, 90, 90, 11, force="blocked"))
    np.testing.assert_allclose(blocked.weights, full.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(blocked.output, full.output, rtol=0, atol=1e-12)
    assert blocked.output.shape == full.output.shape


def test_blocked_equals_full_for_cross_attention(text_of):
    # pad_to=40 pads the 29 keys (padding mask on keys) and leaves the 45 queries alone
    config = AttentionConfig(embed_dim=32, num_heads=4, mask="padding", dtype="float64", pad_to=40)
    text, keys = text_of(45), text_of(29)
    full = run_attention(config, text, key_text=keys)
    blocked = run_attention(config, text, key_text=keys, plan=_blocked_plan(config, 45, 40, 13, force="blocked"))
    assert blocked.weights.shape == (4, 45, 40)
    assert (blocked.weights[:, :, 29:] == 0).all()
    np.testing.assert_allclose(blocked.weights, full.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(blocked.output, full.output, rtol=0, atol=1e-12)
    assert blocked.keys == full.keys


def test_blocked_attention_equals_the_sdpa_function_directly():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 8, generator=gen, dtype=torch.float64) for n in (41, 29, 29))
    key_valid = torch.ones(29, dtype=torch.bool)
    key_valid[[3, 17, 28]] = False
    spec = MaskSpec(41, 29, key_valid=key_valid)
    sink = FullSink(2, 41, 29)
    context = blocked_attention(q, k, v, spec, scale=0.3, block_rows=9, sink=sink)
    expected, weights = scaled_dot_product_attention(q, k, v, key_valid[None, :], scale=0.3)
    torch.testing.assert_close(context, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sink.weights, weights.numpy(), rtol=0, atol=1e-7)  # stored as float32
    assert (sink.weights[:, :, [3, 17, 28]] == 0).all()


def test_mask_spec_rows_equal_the_full_mask_and_tiles():
    key_valid = torch.tensor([True] * 20 + [False] * 5)
    spec = MaskSpec(25, 25, key_valid=key_valid, causal=True)
    full = torch.ones(25, 25, dtype=torch.bool).tril() & key_valid[None, :]
    assert torch.equal(spec.rows(0, 25), full)
    assert torch.equal(spec.rows(6, 13), full[6:13])
    np.testing.assert_array_equal(spec.to_numpy(), full.numpy())
    assert spec.allowed(4, 4) and not spec.allowed(4, 5) and not spec.allowed(22, 21)
    # a tile is "all masked" exactly when none of its cells may attend
    f = 4
    tiles = spec.tile_all_masked(f)
    padded = np.zeros((28, 28), dtype=bool)
    padded[:25, :25] = full.numpy()
    expected = ~padded.reshape(7, f, 7, f).any(axis=(1, 3))
    np.testing.assert_array_equal(tiles, expected)


def test_exact_read_outs_equal_the_full_weights(text_of):
    config = AttentionConfig(embed_dim=32, num_heads=4, mask="padding+causal", pad_to=77, dtype="float64")
    text = text_of(60)
    full = run_attention(config, text)
    bounded = run_attention(config.replace(memory_budget=50_000), text)
    assert bounded.plan.kind == "pyramid" and not bounded.exact_weights
    exact = bounded.exact
    for h, q, k in [(0, 0, 0), (3, 76, 5), (2, 40, 40), (1, 59, 59), (1, 10, 60)]:
        assert bounded.weight_at(h, q, k) == pytest.approx(full.weights[h, q, k], abs=1e-12)
        assert full.weight_at(h, q, k) == float(full.weights[h, q, k])
    assert bounded.weight_at("mean", 30, 12) == pytest.approx(full.weights[:, 30, 12].mean(), abs=1e-12)
    np.testing.assert_allclose(exact.rows(2, 5, 19), full.weights[2, 5:19], atol=1e-7)
    np.testing.assert_allclose(exact.region(1, 20, 70, 3, 44), full.weights[1, 20:70, 3:44], atol=1e-7)
    np.testing.assert_allclose(exact.region("mean", 0, 77, 0, 77), full.weights.mean(axis=0), atol=1e-7)
    tiles = exact.region_overview(0, 0, 77, 0, 77, 5)  # [16, 16] max of 5x5 tiles
    padded = np.zeros((80, 80))
    padded[:77, :77] = full.weights[0]
    np.testing.assert_allclose(tiles, padded.reshape(16, 5, 16, 5).max(axis=(1, 3)), atol=1e-7)
    with pytest.raises(IndexError):
        exact.value(4, 0, 0)
    with pytest.raises(IndexError):
        exact.value(0, 77, 0)
    with pytest.raises(ConfigError, match="too large"):
        exact.region(0, 0, 77, 0, 77, max_cells=100)


def test_progress_is_per_block_and_head_and_cancel_stops_within_a_block(text_of):
    config = AttentionConfig(embed_dim=16, num_heads=2, mask="padding", pad_to=60, memory_budget=20_000)
    text = text_of(50)
    before = run_attention(config, text)
    assert before.plan.kind == "pyramid"
    blocks = -(-60 // before.plan.block_rows)
    assert blocks >= 3
    seen: list[tuple[float, str]] = []
    run_attention(config, text, progress=lambda f, m: seen.append((f, m)))
    per_block = [m for _, m in seen if m.startswith("block ")]
    assert len(per_block) == blocks * 2
    assert per_block[0] == f"block 1/{blocks}, head 1/2" and per_block[-1] == f"block {blocks}/{blocks}, head 2/2"
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0

    calls = []

    def cancel_after_three():
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(Cancelled):
        run_attention(config, text, should_cancel=cancel_after_three)
    assert len(calls) == 4  # polled before each head of each block: stopped at the first poll that said so
    # nothing half-done survives: the next run equals the one before the cancelled run
    after = run_attention(config, text)
    np.testing.assert_array_equal(after.weights, before.weights)
    np.testing.assert_array_equal(after.output, before.output)


def test_exact_attention_value_for_a_single_query_row():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 10, 4, generator=gen), torch.randn(3, 12, 4, generator=gen)
    exact = ExactAttention(q, k, MaskSpec(10, 12), scale=0.5)
    expected = torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1)
    assert exact.value(2, 7, 11) == pytest.approx(float(expected[2, 7, 11]), abs=1e-7)
    assert exact.shape == (3, 10, 12)


def test_training_dropout_is_refused_on_the_bounded_path(text_of):
    config = AttentionConfig(embed_dim=16, num_heads=2, dropout=0.1, training=True, memory_budget=10_000)
    with pytest.raises(ConfigError, match="training mode"):
        run_attention(config, text_of(60))


def test_bounded_intermediates_keep_only_the_small_tensors(text_of):
    config = AttentionConfig(embed_dim=16, num_heads=2, mask="padding", pad_to=40)
    full = run_attention(config, text_of(30), keep_intermediates=True)
    bounded = run_attention(config.replace(memory_budget=5_000), text_of(30), keep_intermediates=True)
    assert bounded.plan.kind == "pyramid"
    assert set(bounded.intermediates.available()) == {"embeddings", "q", "k", "v", "context", "output"}
    for name in ("embeddings", "q", "k", "v", "context", "output"):
        np.testing.assert_allclose(getattr(bounded.intermediates, name), getattr(full.intermediates, name), atol=2e-6)
    assert any("not kept as intermediates" in n for n in bounded.notices)
