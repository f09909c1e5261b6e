"""runs/select.py: the one place that turns an AttentionMap into matrices (heads, regions, tiles)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attndesk.attention.types import MEAN, AttentionMap
from attndesk.core import AttentionConfig, run_attention
from attndesk.runs import select

TEXT = " ".join(["the cat sat on the mat and the dog barked at it"] * 20)  # 240 tokens


@pytest.fixture(scope="module")
def maps():
    config = AttentionConfig(embed_dim=32, num_heads=4, mask="padding+causal", pad_to=250, seed=3)
    full = run_attention(config, TEXT)
    bounded = run_attention(config.replace(memory_budget=60_000), TEXT)
    assert full.plan.kind == "full" and bounded.plan.kind == "pyramid"
    return full, full.attention_map(), bounded.attention_map()


def test_heads_mean_and_regions_of_an_exact_map(maps):
    full, exact, _ = maps
    w = full.weights
    np.testing.assert_array_equal(select.weights(exact, 2), w[2])
    mean = select.weights(exact, MEAN)
    assert mean.dtype == np.float32
    np.testing.assert_allclose(mean, w.astype(np.float64).mean(axis=0), rtol=1e-6, atol=1e-9)
    region = ((10, 40), (5, 30))
    np.testing.assert_array_equal(select.weights(exact, 1, region), w[1, 10:40, 5:30])
    every = select.stack(exact, "all")
    assert every.shape == w.shape and np.shares_memory(every, w)  # no copy of [H, L, Lk]
    np.testing.assert_array_equal(select.stack(exact, "all", region), w[:, 10:40, 5:30])
    np.testing.assert_array_equal(select.stack(exact, "head3")[0], w[3])
    np.testing.assert_array_equal(select.mask(exact, region), full.mask[10:40, 5:30])
    assert select.heads_of(exact, "all") == [0, 1, 2, 3] and select.heads_of(exact, "mean") == [MEAN]


def test_a_pyramid_map_gives_exact_regions_and_refuses_the_whole(maps):
    full, _, bounded = maps
    region = ((100, 180), (20, 150))
    for head in (0, 3, MEAN):
        expected = full.weights.mean(axis=0) if head == MEAN else full.weights[head]
        np.testing.assert_allclose(select.weights(bounded, head, region), expected[100:180, 20:150], atol=2e-6)
    np.testing.assert_array_equal(select.mask(bounded, region), full.mask[100:180, 20:150])
    with pytest.raises(select.OverviewOnly, match="only an overview"):
        select.weights(bounded, 0)
    tiles, factor = select.overview(bounded, "all")
    assert tiles.shape == (4, -(-250 // factor), -(-250 // factor))  # a 250-token overview keeps every cell
    np.testing.assert_allclose(tiles[1], select.tile_reduce(full.weights[1], factor), atol=2e-6)
    assert select.is_causal(bounded) and select.is_causal(maps[1])


@pytest.mark.parametrize("bad", [4, -1, "max", 1.5, True, "head 9"])
def test_which_and_regions_are_checked(maps, bad):
    with pytest.raises(ValueError):
        select.parse_which(bad, 4)
    with pytest.raises(ValueError):
        select.check_region(maps[1], ((0, 300), (0, 2)))
    with pytest.raises(ValueError):
        select.check_region(maps[1], ((5, 5), (0, 2)))


def _brute(m: np.ndarray, fr: int, fc: int, how: str, ignore: np.ndarray | None) -> np.ndarray:
    rows, cols = -(-m.shape[0] // fr), -(-m.shape[1] // fc)
    out = np.zeros((rows, cols))
    for i in range(rows):
        for j in range(cols):
            tile = m[i * fr : (i + 1) * fr, j * fc : (j + 1) * fc]
            keep = (
                np.ones(tile.shape, bool) if ignore is None else ~ignore[i * fr : (i + 1) * fr, j * fc : (j + 1) * fc]
            )
            vals = tile[keep]
            out[i, j] = 0.0 if vals.size == 0 else {"max": vals.max, "mean": vals.mean, "sum": vals.sum}[how]()
    return out


@given(
    rows=st.integers(1, 30),
    cols=st.integers(1, 30),
    fr=st.integers(1, 7),
    fc=st.integers(1, 7),
    how=st.sampled_from(["max", "mean", "sum"]),
    masked=st.booleans(),
    seed=st.integers(0, 5),
)
@settings(max_examples=60, deadline=None)
def test_tile_reduce_equals_the_tile_by_tile_answer(rows, cols, fr, fc, how, masked, seed):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((rows, cols)).astype(np.float32)
    ignore = rng.random((rows, cols)) < 0.4 if masked else None
    out = select.tile_reduce(m, (fr, fc), how, ignore=ignore)
    np.testing.assert_allclose(out, _brute(m, fr, fc, how, ignore), rtol=1e-5, atol=1e-5)


def test_tile_reduce_matches_torch_pooling_and_folds_masks():
    rng = np.random.default_rng(1)
    w = rng.random((3, 37, 53)).astype(np.float32)
    pooled = torch.nn.functional.max_pool2d(torch.from_numpy(w), 4, 4, ceil_mode=True).numpy()
    np.testing.assert_array_equal(select.tile_reduce(w, 4), pooled)  # leading axes kept
    assert select.tile_reduce(w, 1) is w
    mask = np.zeros((5, 5), dtype=bool)
    mask[:4, :4] = True
    assert select.tile_reduce(mask, 2, "all").tolist() == [
        [True, True, False],
        [True, True, False],
        [False, False, False],
    ]
    assert select.tile_reduce(mask, 2, "any").tolist() == [
        [True, True, False],
        [True, True, False],
        [False, False, False],
    ]
    assert select.tile_reduce(~mask, 2, "any")[2].all()
    with pytest.raises(ValueError):
        select.tile_reduce(w, 0)
    with pytest.raises(ValueError):
        select.tile_reduce(w, 2, "median")


def _sink_map(heads: int = 3, length: int = 7) -> AttentionMap:
    rng = np.random.default_rng(4)
    w = rng.random((heads, length, length))
    w[:, :, 0] += 4.0
    w /= w.sum(-1, keepdims=True)
    return AttentionMap(
        queries=[f"q{i}" for i in range(length)],
        keys=[f"k{i}" for i in range(length)],
        weights=w.astype(np.float32),
        file_tag="sink",
    )


def test_drop_keys_renormalises_or_records_the_hidden_mass():
    m = _sink_map()
    renorm = select.drop_keys(m, [0], renormalise=True)
    assert renorm.keys == m.keys[1:] and renorm.weights.shape == (3, 7, 6)
    np.testing.assert_allclose(renorm.weights.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        renorm.weights, m.weights[:, :, 1:] / m.weights[:, :, 1:].sum(-1, keepdims=True), rtol=1e-6
    )
    assert "renormalised" in renorm.legend and renorm.file_tag == "sink_nokey0" and renorm.hidden_mass is None
    kept = select.drop_keys(m, [0], renormalise=False)
    np.testing.assert_array_equal(kept.weights, m.weights[:, :, 1:])
    np.testing.assert_allclose(kept.hidden_mass, m.weights[:, :, 0], rtol=1e-6)
    assert "NOT renormalised" in kept.legend
    with pytest.raises(ValueError):
        select.drop_keys(m, range(7), renormalise=True)


def test_hiding_a_key_makes_one_copy_and_it_must_fit_the_budget_with_the_weights():
    import tracemalloc

    from attndesk.errors import ConfigError

    m = _sink_map(heads=4, length=400)  # 2.56 MB of weights, a 2.55 MB copy
    size = m.weights.nbytes
    with pytest.raises(ConfigError, match=r"over the 4.0 MiB memory budget"):
        select.drop_keys(m, [0], renormalise=True, budget=4 * 2**20)
    tracemalloc.start()
    hidden = select.drop_keys(m, [0], renormalise=True, budget=2 * size)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert hidden.weights.shape == (4, 400, 399)
    assert peak < 1.2 * size, f"{peak / size:.2f} x the weights at peak (one copy expected)"


def test_alibi_bias_titles_and_group_labels():
    m = _sink_map(heads=4, length=5)
    m.alibi_slopes = 2.0 ** -np.arange(1, 5)  # Press et al. for 4 heads: 1/2, 1/4, 1/8, 1/16
    i, j = np.indices((5, 5))
    np.testing.assert_allclose(select.alibi_bias(m, 2), -0.125 * np.abs(i - j))
    np.testing.assert_allclose(select.alibi_bias(m, MEAN), -m.alibi_slopes.mean() * np.abs(i - j), rtol=1e-6)
    assert select.head_title(m, 3) == "H3 \u00b7 m=1/16" and select.slope_text(0.0884) == "0.0884"
    assert select.head_title(m, MEAN) == "mean over 4 heads"
    m.head_labels = [f"L2 head {h}" for h in range(4)]
    assert select.head_title(m, MEAN) == "L2 mean over 4 heads"
    m.kv_heads = 2
    assert [m.kv_head_of(h) for h in range(4)] == [0, 0, 1, 1]
    assert select.group_label(m, 1) == "kv 1: q 2\u20133"
