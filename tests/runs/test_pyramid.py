"""The display pyramid: tile max and mean equal a numpy reference; a single spike survives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attndesk.attention.blocked import MEAN, ExactAttention, MaskSpec, blocked_attention
from attndesk.core import AttentionConfig, run_attention
from attndesk.runs.pyramid import PyramidBuilder


def _tiles(m: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference (max, mean) of f x f tiles of [..., R, C] >= 0 (ragged edge tiles are smaller)."""
    *lead, r, c = m.shape
    R, C = math.ceil(r / f), math.ceil(c / f)
    padded = np.zeros((*lead, R * f, C * f))
    padded[..., :r, :c] = m
    tiles = padded.reshape(*lead, R, f, C, f)
    counts = np.outer(np.minimum(r - np.arange(R) * f, f), np.minimum(c - np.arange(C) * f, f))
    return tiles.max(axis=(-3, -1)), tiles.sum(axis=(-3, -1)) / counts


def _feed(weights: np.ndarray, factor: int, block: int) -> PyramidBuilder:
    heads, lq, lk = weights.shape
    builder = PyramidBuilder(heads, lq, lk, factor)
    w = torch.from_numpy(weights)
    for row0 in range(0, lq, block):
        row1 = min(row0 + block, lq)
        for h in range(heads):
            builder.add(h, row0, w[h, row0:row1].clone())
        builder.end_block(row0, row1)
    return builder


@pytest.mark.parametrize("factor, block", [(1, 5), (3, 3), (3, 7), (4, 8), (4, 5), (5, 50), (8, 13), (8, 3)])
def test_builder_equals_the_reference_tiles(factor, block):
    rng = np.random.default_rng(factor * 100 + block)
    weights = rng.random((3, 47, 38)).astype(np.float32)  # ragged against every factor
    pyramid = _feed(weights, factor, block).finish(None, MaskSpec(47, 38))
    assert pyramid.factor == factor
    mx, mean = _tiles(weights, factor)
    head_mean = weights.mean(axis=0)
    mmx, mmean = _tiles(head_mean, factor)
    for h in range(3):
        np.testing.assert_allclose(pyramid.overview(h), mx[h], atol=1e-7)
        np.testing.assert_allclose(pyramid.overview(h, "mean"), mean[h], atol=1e-6)
    # the mean-over-heads view keeps the max of the head mean, not a mean of maxima
    np.testing.assert_allclose(pyramid.overview(MEAN), mmx, atol=1e-6)
    np.testing.assert_allclose(pyramid.overview(MEAN, "mean"), mmean, atol=1e-6)
    assert pyramid.head_max(1) == pytest.approx(weights[1].max())


def test_coarser_levels_halve_and_keep_max_and_mean():
    rng = np.random.default_rng(7)
    weights = rng.random((2, 300, 290)).astype(np.float32)
    pyramid = _feed(weights, 2, 64).finish(None, MaskSpec(300, 290), min_side=40)
    factors = [lv.factor for lv in pyramid.levels]
    assert factors == [2, 4, 8]
    assert [lv.shape for lv in pyramid.levels] == [(150, 145), (75, 73), (38, 37)]
    for level, f in enumerate(factors):
        mx, mean = _tiles(weights, f)
        np.testing.assert_allclose(pyramid.overview(1, "max", level), mx[1], atol=1e-7)
        np.testing.assert_allclose(pyramid.overview(1, "mean", level), mean[1], atol=1e-6)
    assert pyramid.level_for(100) == 1 and pyramid.level_for(1000) == 0 and pyramid.level_for(10) == 2
    assert pyramid.nbytes > 0 and "overview 145 x 150 px" in pyramid.describe()


def test_a_single_planted_spike_survives_the_overview():
    # 4 heads, 200 tokens; head 2's query 101 attends almost only to key 37: one sharp weight
    # among ~1/200 values. The 8x8 tile mean dilutes it 64-fold; the tile max must keep it.
    heads, n, d = 4, 200, 8
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(heads, n, d, generator=gen) * 0.1
    k = torch.randn(heads, n, d, generator=gen) * 0.1
    v = torch.randn(heads, n, d, generator=gen)
    q[2, :, 0] = 0.0  # only query 101 uses feature 0, the one key 37 stands out on
    q[2, 101] = 0.0
    q[2, 101, 0] = 40.0
    k[2, 37, 0] = 40.0
    spec = MaskSpec(n, n)
    builder = PyramidBuilder(heads, n, n, 8)
    blocked_attention(q, k, v, spec, scale=1.0, block_rows=19, sink=builder)  # 19: blocks straddle tiles
    pyramid = builder.finish(ExactAttention(q, k, spec, scale=1.0), spec)
    spike = pyramid.value(2, 101, 37)
    assert spike > 0.99
    tile = (101 // 8, 37 // 8)
    assert pyramid.overview(2)[tile] == pytest.approx(spike, rel=1e-6)
    assert pyramid.overview(2, "mean")[tile] < spike / 30  # the mean alone would hide it
    assert pyramid.head_max(2) == pytest.approx(spike, rel=1e-6)
    others = np.delete(pyramid.overview(2).ravel(), tile[0] * pyramid.overview(2).shape[1] + tile[1])
    assert others.max() < 0.05
    # the mean-over-heads overview still shows a quarter of it at the same tile
    assert pyramid.overview(MEAN)[tile] == pytest.approx(pyramid.value(MEAN, 101, 37), rel=1e-5)
    assert pyramid.value(MEAN, 101, 37) > 0.24


@pytest.mark.parametrize("mask", ["padding", "padding+causal"])
def test_over_budget_run_returns_the_overview_of_the_full_weights(mask):
    config = AttentionConfig(embed_dim=32, num_heads=4, mask=mask, pad_to=301, seed=5)
    text = " ".join(["a cat sat on the mat and the dog barked"] * 25)
    full = run_attention(config, text)
    bounded = run_attention(config.replace(memory_budget=60_000), text)
    assert bounded.plan.kind == "pyramid"
    pyramid = bounded.pyramid
    f = pyramid.factor
    assert f > 1 and bounded.weights.shape == (4, math.ceil(301 / f), math.ceil(301 / f))
    mx, mean = _tiles(full.weights, f)
    np.testing.assert_allclose(bounded.weights, mx, atol=2e-6)  # weights = the tile-max overview
    np.testing.assert_allclose(np.stack([pyramid.overview(h, "mean") for h in range(4)]), mean, atol=2e-6)
    np.testing.assert_allclose(bounded.output, full.output, atol=2e-6)
    # the overview mask is False exactly where a whole tile is masked
    dead = ~np.pad(full.mask, ((0, f * mx.shape[1] - 301),) * 2).reshape(mx.shape[1], f, mx.shape[2], f).any(
        axis=(1, 3)
    )
    np.testing.assert_array_equal(bounded.mask, ~dead)
    assert bounded.num_heads == 4 and bounded.shape == (301, 301)
    assert any("exact on demand" in n for n in bounded.notices)
    assert bounded.timings["overview"] > 0
    assert bounded.timings["total"] >= sum(v for k, v in bounded.timings.items() if k != "total")
    # a region for drawing a zoom: exact cells once they fit
    region, factor = pyramid.region_view(3, 40, 90, 100, 180, max_side=100)
    assert factor == 1
    np.testing.assert_allclose(region, full.weights[3, 40:90, 100:180], atol=2e-6)
    region, factor = pyramid.region_view(3, 0, 301, 0, 301, max_side=100)
    assert factor == 4 and region.shape == (76, 76)
    np.testing.assert_allclose(region, _tiles(full.weights[3], 4)[0], atol=2e-6)
