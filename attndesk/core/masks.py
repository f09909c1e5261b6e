"""Boolean attention masks. Convention everywhere: True = this query may attend to this key
(the same as torch.nn.functional.scaled_dot_product_attention)."""

from __future__ import annotations

import torch


def padding_mask(token_ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Keys that are real tokens: ids [B, L] -> bool [B, 1, 1, L].

    The mask lies along the KEY axis (the last one), so every query row ignores padded keys;
    it broadcasts over heads and query positions.
    """
    if token_ids.dim() == 1:
        token_ids = token_ids.unsqueeze(0)
    return (token_ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """bool [L, L], True on and below the diagonal: position i sees positions 0..i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril_()


def build_mask(
    kind: str,
    query_ids: torch.Tensor,
    key_ids: torch.Tensor | None = None,
    pad_id: int = 0,
) -> torch.Tensor | None:
    """The mask for a config's ``mask`` kind, broadcastable to [B, 1, Lq, Lk]; None for "none"."""
    key_ids = query_ids if key_ids is None else key_ids
    mask = None
    if "padding" in kind:
        mask = padding_mask(key_ids, pad_id)
    if "causal" in kind:
        causal = causal_mask(query_ids.shape[-1], device=query_ids.device)
        mask = causal if mask is None else mask & causal
    return mask
