"""Rotary position embedding (RoPE; Su et al., 2021), in the rotate_half layout of LLaMA and
transformers: dimension i of the first half pairs with dimension i + d/2, and the pair turns by
the angle ``position * base^(-2i/d)``. Applied to Q and K per head after the projection, so a
score q_m . k_n depends on the positions only through m - n.
"""

from __future__ import annotations

import numpy as np
import torch

ROPE_BASE = 10000.0


def rope_frequencies(dim: int, base: float = ROPE_BASE) -> torch.Tensor:
    """The d/2 angular frequencies base^(-2i/d), float64 [d/2]."""
    if dim <= 0 or dim % 2:
        raise ValueError(f"RoPE needs an even, positive head dimension, got {dim}")
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def rope_angles(length: int, dim: int, *, base: float = ROPE_BASE, start: int = 0) -> torch.Tensor:
    """Angle of every position and pair, float64 [L, d/2]: (start + m) * base^(-2i/d).

    Computed in float64 so that long positions keep their precision (transformers multiplies in
    float32; the two agree to ~1e-7 relative).
    """
    positions = torch.arange(start, start + length, dtype=torch.float64)
    return torch.outer(positions, rope_frequencies(dim, base))


def rope_cos_sin(
    length: int, dim: int, *, dtype=torch.float32, device=None, base: float = ROPE_BASE, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [L, d] in the rotate_half layout (each angle twice: halves, not interleaved)."""
    angles = rope_angles(length, dim, base=base, start=start)
    both = torch.cat([angles, angles], dim=-1)  # [L, d]
    return both.cos().to(dtype=dtype, device=device), both.sin().to(dtype=dtype, device=device)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last axis (halves)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., L, d] by its positions' angles: x cos + rotate_half(x) sin."""
    return x * cos + rotate_half(x) * sin


def rope(x: torch.Tensor, *, base: float = ROPE_BASE, start: int = 0) -> torch.Tensor:
    """x [..., L, d] rotated by positions start..start+L-1."""
    cos, sin = rope_cos_sin(x.shape[-2], x.shape[-1], dtype=x.dtype, device=x.device, base=base, start=start)
    return apply_rope(x, cos, sin)


def rope_relative_scores(
    q: np.ndarray | torch.Tensor,
    k: np.ndarray | torch.Tensor,
    offsets,
    *,
    base: float = ROPE_BASE,
    anchors=(0, 37, 1000),
) -> np.ndarray:
    """q . k after rotating q to position m + offset and k to position m, for each offset.

    Returns float64 [len(anchors), len(offsets)]: one row per absolute position m. The rows are
    equal (to rounding): the rotated score depends only on the offset, not on where the pair
    sits. That is RoPE's point, and what the Positions tab draws beside sinusoidal PE . PE^T.
    """
    q = torch.as_tensor(np.asarray(q), dtype=torch.float64)
    k = torch.as_tensor(np.asarray(k), dtype=torch.float64)
    if q.shape != k.shape or q.dim() != 1:
        raise ValueError(f"q and k must be two vectors of one even length, got {tuple(q.shape)} and {tuple(k.shape)}")
    offsets = torch.as_tensor(np.asarray(offsets), dtype=torch.float64)
    freqs = rope_frequencies(q.shape[0], base)
    rows = []
    for m in anchors:
        angle_q = torch.outer(m + offsets, freqs)  # [n, d/2]
        angle_k = (m * freqs)[None, :]
        cq, sq = torch.cat([angle_q, angle_q], -1).cos(), torch.cat([angle_q, angle_q], -1).sin()
        ck, sk = torch.cat([angle_k, angle_k], -1).cos(), torch.cat([angle_k, angle_k], -1).sin()
        rows.append((apply_rope(q[None], cq, sq) * apply_rope(k[None], ck, sk)).sum(-1))
    return torch.stack(rows).numpy()


__all__ = [
    "ROPE_BASE",
    "apply_rope",
    "rope",
    "rope_angles",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_relative_scores",
    "rotate_half",
]
