"""The heatmap data source (overview + exact values) and the token axis, without a window."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attndesk.app.sources.heatmap_source import BiasSource, ExactSource, HeatmapSource
from attndesk.app.sources.long_source import source_for_map
from attndesk.attention.types import MEAN, AttentionMap
from attndesk.core import AttentionConfig, run_attention
from attndesk.runs.select import tile_reduce


@given(rows=st.integers(1, 40), cols=st.integers(1, 40), factor=st.integers(1, 9), seed=st.integers(0, 10))
@settings(max_examples=40, deadline=None)
def test_tile_reduce_keeps_the_max_of_every_tile(rows, cols, factor, seed):
    m = np.random.default_rng(seed).random((2, rows, cols)).astype(np.float32)
    out = tile_reduce(m, factor)
    assert out.shape == (2, -(-rows // factor), -(-cols // factor))
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            tile = m[:, i * factor : (i + 1) * factor, j * factor : (j + 1) * factor]
            np.testing.assert_array_equal(out[:, i, j], tile.max(axis=(1, 2)))


def test_tile_reduce_all_for_masks():
    mask = np.zeros((5, 5), dtype=bool)
    mask[:4, :4] = True
    out = tile_reduce(mask, 2, "all")
    assert out.tolist() == [[True, True, False], [True, True, False], [False, False, False]]


def test_small_result_is_drawn_exactly():
    result = run_attention(AttentionConfig(num_heads=2, mask="causal"), "one two three four")
    source = ExactSource(result.attention_map())
    assert isinstance(source, HeatmapSource)
    assert source.factor == 1 and source.downsample_note() == ""
    np.testing.assert_array_equal(source.display_matrix(1), result.weights[1])
    np.testing.assert_allclose(source.display_matrix(MEAN), result.weights.mean(axis=0), rtol=1e-6)
    assert source.display_mask().tolist() == (~result.mask).tolist()
    assert source.value_at(1, 3, 2) == float(result.weights[1, 3, 2])
    assert source.level_range(0) == (0.0, float(result.weights[0].max()))


def test_large_result_overview_keeps_a_spike_and_values_stay_exact():
    text = " ".join(f"w{i}" for i in range(600))
    result = run_attention(AttentionConfig(num_heads=2, embed_dim=16, mask="none"), text)
    result.weights[1, 301, 17] = 0.99  # a single sharp weight
    source = ExactSource(result.attention_map(), max_display=256)
    assert source.factor == 3
    overview = source.display_matrix(1)
    assert overview.shape == (200, 200)
    assert overview[301 // 3, 17 // 3] == pytest.approx(0.99)
    assert source.value_at(1, 301, 17) == pytest.approx(0.99)
    assert source.value_at(0, 5, 7) == float(result.weights[0, 5, 7])
    assert "exact" in source.downsample_note()


def test_token_axis_thins_labels_when_crowded(qapp):
    from attndesk.app.widgets.token_axis import TokenAxis, elide

    axis = TokenAxis("left")
    axis.set_labels([f"t{i}" for i in range(100)])
    assert axis.visible_ticks(0, 100, 5000) == list(range(100))  # 50 px per cell: all labels
    thin = axis.visible_ticks(0, 100, 200)  # 2 px per cell
    assert len(thin) < 30 and thin == sorted(thin) and len(set(np.diff(thin))) == 1
    assert axis.visible_ticks(40, 50, 500) == list(range(40, 50))  # zoomed in: every label again
    assert elide("internationalization") == "internation…" and elide("cat") == "cat"


def _decoder_map(rng, heads=4, length=6) -> AttentionMap:
    """A causal map whose rows put most weight on the first token, as decoders do."""
    w = rng.random((heads, length, length)).astype(np.float32)
    mask = np.tril(np.ones((length, length), dtype=bool))
    w[:, :, 0] += 5.0
    w = np.where(mask, w, 0.0)
    w /= w.sum(-1, keepdims=True)
    return AttentionMap(
        queries=[f"t{i}" for i in range(length)],
        keys=[f"t{i}" for i in range(length)],
        weights=w.astype(np.float32),
        mask=mask,
        file_tag="dec",
    )


def test_hiding_the_first_key_renormalises_rows_and_keeps_positions():
    m = _decoder_map(np.random.default_rng(0))
    source = source_for_map(m, hide_first_key=True)
    assert source.shape == (6, 5) and source.key_offset == 1 and source.base_map is m
    expected = m.weights[:, :, 1:] / m.weights[:, :, 1:].sum(-1, keepdims=True).clip(1e-30)
    expected[:, 0] = 0.0  # query 0 sees only key 0: nothing left to show
    np.testing.assert_allclose(source.display_matrix(2), expected[2], rtol=1e-6)
    assert source.value_at(1, 4, 2) == pytest.approx(float(expected[1, 4, 2]), rel=1e-6)
    assert "renormalised" in source.downsample_note()
    assert source.mask.shape == (6, 5) and not source.mask[1, 1]  # query 1 may not see key 2


def test_alibi_bias_source_draws_minus_slope_times_distance():
    m = _decoder_map(np.random.default_rng(1), heads=2, length=5)
    m.alibi_slopes = np.array([0.5, 0.25])
    source = source_for_map(m, show="alibi bias")
    assert isinstance(source, BiasSource)
    i, j = np.indices((5, 5))
    np.testing.assert_allclose(source.display_matrix(1), -0.25 * np.abs(i - j))
    assert source.value_at(0, 4, 1) == -1.5 and source.level_range(0) == (-2.0, 0.0)
    assert source.head_title(1) == "H1 \u00b7 m=1/4"
    big = AttentionMap(
        queries=list("x" * 600),
        keys=list("x" * 600),
        weights=np.zeros((1, 1, 1), np.float32),
        alibi_slopes=np.array([0.5]),
    )
    tiles = BiasSource(big, max_display=256)  # 3 x 3 tiles: each the largest bias in its tile
    dense = -0.5 * np.abs(np.arange(600)[:, None] - np.arange(600)[None, :])
    np.testing.assert_allclose(tiles.display_matrix(0), tile_reduce(dense, 3))
