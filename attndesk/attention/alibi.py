"""ALiBi (Press et al., 2022): no position embedding; each head h adds -slope_h |i - j| to the
score of query i on key j, so attention fades with distance at a per-head rate.

Slopes: for H a power of two, slope_h = 2^(-8 (h + 1) / H) (h = 0..H-1), a geometric sequence;
otherwise the paper's interpolation, as BLOOM / transformers' ``build_alibi_tensor`` do: the
slopes of the nearest smaller power of two, then every other slope of the next power of two.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def alibi_slopes(num_heads: int) -> np.ndarray:
    """float64 [H] slopes, largest (steepest fade) first."""
    if num_heads < 1:
        raise ValueError(f"need at least one head, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    slopes = geometric(closest)
    if closest != num_heads:
        # the next power of two's odd-numbered slopes fall between the ones above
        slopes += geometric(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, dtype=np.float64)


def distances(q0: int, q1: int, k0: int, k1: int, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """|i - j| for queries q0..q1-1 (rows) and keys k0..k1-1 (columns): [q1-q0, k1-k0]."""
    qi = torch.arange(q0, q1, device=device, dtype=dtype)[:, None]
    kj = torch.arange(k0, k1, device=device, dtype=dtype)[None, :]
    return (qi - kj).abs_()


def alibi_bias(num_heads: int, lq: int, lk: int | None = None, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """The bias [H, Lq, Lk] = -slope_h |i - j| (float64 arithmetic, then cast)."""
    return slope_bias(alibi_slopes(num_heads), lq, lq if lk is None else lk, dtype=dtype, device=device)


def slope_bias(slopes, lq: int, lk: int, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """The bias [H, Lq, Lk] = -slopes[h] |i - j| of given slopes [H] (float64 arithmetic, then cast)."""
    column = torch.as_tensor(slopes, dtype=torch.float64)[:, None, None]  # [H, 1, 1]
    return (-column * distances(0, lq, 0, lk, dtype=torch.float64)[None]).to(dtype=dtype, device=device)


__all__ = ["alibi_bias", "alibi_slopes", "distances", "slope_bias"]
