"""Sinusoidal positional encoding (Vaswani et al., 2017)."""

from __future__ import annotations

import torch


def sinusoidal_encoding(
    length: int, dim: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """[length, dim] with PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(same angle).

    An odd ``dim`` gets one more sine column than cosine columns. Computed in float64 so that
    long positions keep their precision, then cast.
    """
    if length < 0 or dim <= 0:
        raise ValueError(f"need length >= 0 and dim > 0, got {length}, {dim}")
    position = torch.arange(length, dtype=torch.float64)[:, None]  # [L, 1]
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)  # [ceil(dim/2)]
    angle = position / torch.pow(10000.0, two_i / dim)  # [L, ceil(dim/2)]
    pe = torch.empty(length, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return pe.to(dtype=dtype, device=device)


def positional_similarity(encoding: torch.Tensor) -> torch.Tensor:
    """PE . PE^T [L, L]: depends only on the distance between positions (for even dim)."""
    return encoding @ encoding.T


__all__ = ["positional_similarity", "sinusoidal_encoding"]
