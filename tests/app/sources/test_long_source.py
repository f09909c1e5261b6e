"""The long-run heatmap source: the panel's interface over a pyramid, exact read-outs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndesk.app.sources.heatmap_source import ExactSource, HeatmapSource
from attndesk.app.sources.long_source import CellMask, PyramidHeatmapSource, source_for_map
from attndesk.attention.types import MEAN
from attndesk.core import AttentionConfig, run_attention


def source_for_result(result, max_display=256):
    return source_for_map(result.attention_map(), max_display)


TEXT = " ".join(["the cat sat on the mat and the dog barked at it"] * 24)  # 288 tokens


@pytest.fixture(scope="module")
def runs():
    config = AttentionConfig(embed_dim=32, num_heads=4, mask="padding+causal", pad_to=333, seed=2)
    full = run_attention(config, TEXT)
    bounded = run_attention(config.replace(memory_budget=60_000), TEXT)
    assert full.plan.kind == "full" and bounded.plan.kind == "pyramid"
    return full, bounded


def _tile_max(m: np.ndarray, f: int) -> np.ndarray:
    r, c = m.shape
    padded = np.zeros((math.ceil(r / f) * f, math.ceil(c / f) * f))
    padded[:r, :c] = m
    return padded.reshape(padded.shape[0] // f, f, padded.shape[1] // f, f).max(axis=(1, 3))


def test_the_source_follows_the_panel_interface(runs):
    full, bounded = runs
    source = source_for_result(bounded, max_display=100)
    assert isinstance(source, PyramidHeatmapSource) and isinstance(source, HeatmapSource)
    assert source.num_heads == 4 and source.shape == (333, 333)
    assert list(source.query_labels) == full.tokens and list(source.key_labels) == full.keys
    f = source.factor
    assert f > 1 and max(source.display_matrix(0).shape) <= 100
    for head in (0, 3):
        np.testing.assert_allclose(source.display_matrix(head), _tile_max(full.weights[head], f), atol=2e-6)
    np.testing.assert_allclose(source.display_matrix(MEAN), _tile_max(full.weights.mean(axis=0), f), atol=2e-6)
    assert source.display_mean(1).shape == source.display_matrix(1).shape
    mask = source.display_mask()
    assert mask.shape == source.display_matrix(0).shape and mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, _tile_max(full.mask.astype(float), f) == 0)  # no cell may attend
    assert source.level_max(2) == pytest.approx(full.weights[2].max(), abs=2e-6)
    assert source.global_max() == pytest.approx(full.weights.max(), abs=2e-6)
    assert source.head_title(MEAN) == "mean over 4 heads" and source.head_title(1) == "H1"
    assert f"{f}x{f} tile" in source.downsample_note() and "exact" in source.downsample_note()


def test_hover_values_and_mask_are_exact(runs):
    full, bounded = runs
    source = source_for_result(bounded)
    for head, q, k in [(0, 0, 0), (1, 200, 3), (3, 332, 332), (2, 287, 100), (2, 100, 287)]:
        assert source.value_at(head, q, k) == pytest.approx(float(full.weights[head, q, k]), abs=2e-7)
        assert source.mask[q, k] == bool(full.mask[q, k])
    assert source.value_at(MEAN, 150, 20) == pytest.approx(float(full.weights[:, 150, 20].mean()), abs=2e-7)
    assert isinstance(source.mask, CellMask) and source.mask.shape == (333, 333)
    with pytest.raises(IndexError):
        source.mask[333, 0]
    with pytest.raises(TypeError):
        source.mask[0:3, 0]


def test_zoom_regions_are_exact_cells_once_they_fit(runs):
    full, bounded = runs
    source = source_for_result(bounded)
    region, factor = source.region(2, 40, 120, 10, 90, max_side=256)
    assert factor == 1
    np.testing.assert_allclose(region, full.weights[2, 40:120, 10:90], atol=2e-6)
    region, factor = source.region(1, -5, 400, 0, 333, max_side=64)  # clipped to the matrix
    assert factor == 6
    np.testing.assert_allclose(region, _tile_max(full.weights[1], 6), atol=2e-6)
    np.testing.assert_allclose(source.exact_region(MEAN, 5, 9, 0, 333), full.weights.mean(axis=0)[5:9], atol=2e-6)
    assert source.region(0, 50, 50, 0, 10)[0].size == 0


def test_levels_of_detail(runs):
    _, bounded = runs
    source = PyramidHeatmapSource(bounded.attention_map(), max_display=4096)
    finest = source.display_matrix(0).shape
    source.set_max_display(60)
    assert max(source.display_matrix(0).shape) <= 60 < max(finest)
    assert [lv[0] for lv in source.levels] == sorted(lv[0] for lv in source.levels)


def test_in_budget_results_keep_the_plain_source(runs):
    full, _ = runs
    source = source_for_result(full)
    assert type(source) is ExactSource
    with pytest.raises(ValueError, match="no pyramid"):
        PyramidHeatmapSource(full.attention_map())
