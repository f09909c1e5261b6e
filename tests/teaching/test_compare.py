"""B - A of two results, the teaching comparisons, and attndesk vs PyTorch's implementations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.core import AttentionConfig, ConfigError, run_attention
from attndesk.teaching.compare import (
    IMPLEMENTATIONS,
    ComparisonError,
    compare_implementations,
    diff_arrays,
    diff_results,
    teaching_comparison,
)
from attndesk.teaching.tutorial import create_padding_mark, float32_relative_bound, tutorial_masked_softmax

TEXT = "the cat sat on the mat"
CFG = AttentionConfig(num_heads=2, embed_dim=16, mask="causal")


def test_diff_is_exactly_b_minus_a():
    a = run_attention(CFG, TEXT)
    b = run_attention(CFG.replace(seed=3), TEXT)
    d = diff_results(a, b)
    assert d.diff.dtype == np.float64
    assert np.array_equal(d.diff, b.weights.astype(np.float64) - a.weights.astype(np.float64))
    assert d.max_abs == float(np.abs(d.diff).max()) > 0
    assert abs(d.diff[d.argmax]) == d.max_abs
    assert d.notes == ()


def test_diff_of_identical_runs_is_zero():
    a = run_attention(CFG, TEXT)
    d = diff_results(a, run_attention(CFG, TEXT))
    assert d.max_abs == 0.0 and not d.diff.any()


def test_different_heads_is_a_clear_message():
    a = run_attention(CFG, TEXT)
    b = run_attention(CFG.replace(num_heads=4), TEXT)
    with pytest.raises(ComparisonError, match=r"A is 2 head\(s\) x 6 queries x 6 keys, B is 4 head.*heads back to 2"):
        diff_results(a, b)


def test_different_lengths_and_tokens():
    a = run_attention(CFG, TEXT)
    with pytest.raises(ComparisonError, match="token counts"):
        diff_results(a, run_attention(CFG, "the cat sat"))
    d = diff_results(a, run_attention(CFG, "a dog ran on the mat"))
    assert d.notes and "different tokens" in d.notes[0] and "position 0" in d.notes[0]


def test_diff_of_output_and_intermediates():
    a = run_attention(CFG, TEXT, keep_intermediates=True)
    b = run_attention(CFG.replace(scaled=False), TEXT, keep_intermediates=True)
    d = diff_results(a, b, "output")
    assert np.array_equal(d.diff, b.output.astype(np.float64) - a.output.astype(np.float64))
    d = diff_results(a, b, "scaled")
    assert d.diff.shape == a.intermediates.scaled.shape
    with pytest.raises(ComparisonError, match="no such intermediate"):
        diff_results(run_attention(CFG, TEXT), b, "scaled")


def test_diff_arrays_ignores_non_finite_in_max():
    a = np.array([[0.0, -np.inf]])
    b = np.array([[0.5, -np.inf]])
    d = diff_arrays(a, b, "masked")
    assert d.max_abs == 0.5 and d.argmax == (0, 0)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (4, 6, 6), (1, 9, 2), (0, 3, 3)])
def test_the_largest_difference_slice_by_slice_is_the_whole_arrays(shape):
    """B - A's largest |difference| is searched one head at a time (no second whole-size array);
    it must be the first largest finite cell of the whole array, as np.argmax finds it."""
    rng = np.random.default_rng(sum(shape))
    a = rng.integers(0, 4, shape).astype(np.float32) / 4  # few values: ties across heads
    b = rng.integers(0, 4, shape).astype(np.float32) / 4
    if a.size:
        a.flat[rng.integers(0, a.size, 3)] = -np.inf
        b.flat[rng.integers(0, b.size, 3)] = np.inf
    d = diff_arrays(a, b, "masked")
    with np.errstate(invalid="ignore"):
        whole = np.subtract(b, a, dtype=np.float64)
    finite = np.where(np.isfinite(whole), np.abs(whole), 0.0)
    assert np.array_equal(d.diff, whole, equal_nan=True)
    if a.size:
        assert d.argmax == np.unravel_index(int(np.argmax(finite)), shape) and d.max_abs == finite.max()
    else:
        assert d.argmax == () and d.max_abs == 0.0


def test_teaching_scaled_vs_unscaled():
    t = teaching_comparison("scaled", CFG, TEXT)
    assert t.a.config.scaled and not t.b.config.scaled
    assert np.array_equal(t.diff.diff, t.b.weights.astype(np.float64) - t.a.weights.astype(np.float64))
    assert "entropy" in t.explanation


def test_teaching_masked_vs_unmasked_defaults_to_causal():
    t = teaching_comparison("masked", CFG.replace(mask="none"), TEXT)
    assert t.a.config.mask == "causal" and t.b.config.mask == "none"
    upper = np.triu(np.ones((6, 6), dtype=bool), 1)
    assert np.all(t.a.weights[:, upper] == 0) and np.all(t.b.weights[:, upper] > 0)
    assert np.all(t.diff.diff[:, upper] > 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_teaching_tutorial_variant_shows_its_real_effect(dtype):
    cfg = CFG.replace(mask="none", dtype=dtype)
    t = teaching_comparison("tutorial", cfg, TEXT)
    a, b = t.a, t.b
    assert a.tokens[-1] == "[PAD]" and a.config.mask == "padding"
    assert b.mask is None  # nothing is really masked in B
    pad = a.token_ids == 0
    real = ~pad
    # A: the correct mask; B: the variant's weights, recomputed here from A's scores
    assert np.all(a.weights[:, :, pad] == 0)
    scores = torch.as_tensor(a.intermediates.scaled).to(cfg.torch_dtype)[None]
    mark = create_padding_mark(torch.as_tensor(a.token_ids)[None])
    expected = tutorial_masked_softmax(scores, mark)[0].float().numpy()
    assert np.array_equal(b.weights, expected)
    unmasked = torch.softmax(scores, dim=-1)[0].numpy()
    # the variant masks nothing: real queries keep attending to padding like with no mask at all
    assert np.all(b.weights[:, real][:, :, pad] > 0)
    gap = np.abs(b.weights.astype(np.float64) - unmasked.astype(np.float64))
    if dtype == "float64":
        assert gap.max() < 1e-7  # only the float32 storage of the weights remains
    else:
        assert 0 < gap.max() <= float32_relative_bound()
    # padded query rows are untouched by the variant
    assert np.array_equal(b.weights[:, pad], unmasked[:, pad].astype(np.float32))
    # B - A is the mass moved back onto padded keys
    assert np.array_equal(t.diff.diff, b.weights.astype(np.float64) - a.weights.astype(np.float64))
    assert t.diff.max_abs > 0.05
    assert "masks nothing" in t.explanation and "measured here" in t.explanation
    assert t.effect.padded_rows_unchanged
    # B's output: its weights times A's values, through the same output projection
    assert b.output.shape == a.output.shape and not np.array_equal(b.output, a.output)


def test_teaching_unknown_kind():
    with pytest.raises(ConfigError, match="unknown comparison"):
        teaching_comparison("nope", CFG, TEXT)


@pytest.mark.parametrize("mask", ["none", "padding", "causal", "padding+causal"])
def test_implementations_agree(mask):
    cfg = AttentionConfig(num_heads=4, embed_dim=32, mask=mask, pad_to=9)
    c = compare_implementations(cfg, TEXT, repeats=1)
    assert list(c.timings) == list(IMPLEMENTATIONS)
    assert all(t > 0 for t in c.timings.values())
    assert c.length == 9
    assert c.max_abs_output[IMPLEMENTATIONS[0]] == 0.0
    assert c.max_abs_output[IMPLEMENTATIONS[1]] < 1e-5
    assert c.max_abs_output[IMPLEMENTATIONS[2]] < 1e-5
    assert c.max_abs_weights[IMPLEMENTATIONS[1]] is None
    assert c.max_abs_weights[IMPLEMENTATIONS[2]] < 1e-5
    assert len(c.rows()) == 3


def test_implementations_unscaled_float64_and_single_head():
    c = compare_implementations(
        AttentionConfig(num_heads=2, embed_dim=16, scaled=False, dtype="float64"), TEXT, repeats=1
    )
    assert c.max_abs_output[IMPLEMENTATIONS[2]] < 1e-12 and c.max_abs_weights[IMPLEMENTATIONS[2]] < 1e-12
    assert any("undone" in n for n in c.notes)
    single = compare_implementations(AttentionConfig(num_heads=1, embed_dim=16, hidden_dim=8), TEXT, repeats=1)
    assert IMPLEMENTATIONS[2] not in single.timings
    assert single.max_abs_output[IMPLEMENTATIONS[1]] < 1e-5
    assert any("skipped" in n for n in single.notes)


def test_implementations_bad_input():
    with pytest.raises(ConfigError, match="empty"):
        compare_implementations(CFG, "   ")


def test_max_abs_sees_differences_and_skips_nan():
    from attndesk.teaching.compare import _max_abs

    notes = []
    ref = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    other = torch.tensor([[0.25, 0.75], [float("nan"), float("nan")]])
    assert _max_abs(ref, other, notes, "x") == 0.25
    assert notes and "2 non-finite" in notes[0]


def test_teaching_masked_falls_back_to_causal_when_the_mask_blocks_nothing():
    t = teaching_comparison("masked", CFG.replace(mask="padding"), TEXT)  # no padding in TEXT
    assert t.a.config.mask == "causal" and "blocks nothing" in t.explanation
    assert t.diff.max_abs > 0
