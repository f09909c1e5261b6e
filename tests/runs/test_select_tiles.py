"""select.tile_reduce (the overview's tiles, reduced one axis at a time) against a plain loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndesk.runs.select import tile_reduce


def brute(matrix: np.ndarray, f: int, how: str) -> np.ndarray:
    *lead, rows, cols = matrix.shape
    out = np.empty((*lead, math.ceil(rows / f), math.ceil(cols / f)), dtype=matrix.dtype)
    for r in range(out.shape[-2]):
        for c in range(out.shape[-1]):
            tile = matrix[..., r * f : (r + 1) * f, c * f : (c + 1) * f]
            out[..., r, c] = getattr(tile, how)(axis=(-2, -1))
    return out


@pytest.mark.parametrize("shape, factor", [((7, 9), 2), ((3, 10, 10), 5), ((2, 11, 4), 3), ((6, 6), 1), ((5, 13), 8)])
def test_tile_reduce_equals_a_plain_loop(shape, factor):
    rng = np.random.default_rng(sum(shape) + factor)
    weights = rng.random(shape).astype(np.float32)
    np.testing.assert_array_equal(
        tile_reduce(weights, factor), brute(weights, factor, "max") if factor > 1 else weights
    )
    np.testing.assert_allclose(
        tile_reduce(weights, factor, "sum"), brute(weights, factor, "sum") if factor > 1 else weights, rtol=1e-6
    )
    masked = rng.random(shape) < 0.7
    for how in ("all", "any"):
        expected = brute(masked, factor, how) if factor > 1 else masked
        np.testing.assert_array_equal(tile_reduce(masked, factor, how), expected)


@pytest.mark.parametrize("how", ["max", "sum", "all"])
def test_tile_reduce_of_ragged_tiles_never_copies_the_whole_input(how):
    """A 7,050-token run's overview is 28 x 28 tiles with a short last one: reducing it must not
    pad (copy) the whole matrix, which may take most of the memory budget."""
    import tracemalloc

    rng = np.random.default_rng(0)
    weights = rng.random((4, 1001, 1003)).astype(np.float32)
    if how == "all":
        weights = weights < 0.9
    tracemalloc.start()
    out = tile_reduce(weights, 8, how)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.shape == (4, 126, 126)
    assert peak < 0.3 * weights.nbytes, f"{peak / weights.nbytes:.2f} x the input at peak"
    np.testing.assert_allclose(out[..., -1, -1], brute(weights[..., -9:, -11:], 8, how)[..., -1, -1], rtol=1e-6)
