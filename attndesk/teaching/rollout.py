"""Attention rollout (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers").

Per layer l: average the heads, add the identity (the residual connection carries each token's
own state forward), re-normalise every row to sum 1:  A_l = rownorm(mean_h W_l + I).
The rollout multiplies these through the layers, the last layer on the left:
    R = A_L @ A_{L-1} @ ... @ A_1
Row i of R says how much each input token contributes to token i's representation after
the last layer. Under a softmax sink the heads' rows sum to less than 1: the re-normalisation
spreads the sink's share over the tokens in proportion (the sink itself carries no value).
"""

from __future__ import annotations

import numpy as np


def layer_transition(weights) -> np.ndarray:
    """One layer's [H, L, L] weights -> rownorm(mean over heads + identity), [L, L] float64."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 3 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"one layer's weights must be [H, L, L] (self-attention), got shape {w.shape}")
    a = w.mean(axis=0) + np.eye(w.shape[-1])
    return a / a.sum(axis=-1, keepdims=True)  # rows >= 1 from the identity: never a division by 0


def attention_rollout(weights_per_layer, *, upto: int | None = None) -> np.ndarray:
    """[layers, H, L, L] -> [L, L]: the rollout through the first ``upto`` layers (default all)."""
    w = np.asarray(weights_per_layer, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"weights_per_layer must be [layers, H, L, L], got shape {w.shape}")
    layers = w.shape[0] if upto is None else int(upto)
    if not 1 <= layers <= w.shape[0]:
        raise ValueError(f"upto must be between 1 and {w.shape[0]}, got {upto}")
    rollout = np.eye(w.shape[-1])
    for layer in range(layers):
        rollout = layer_transition(w[layer]) @ rollout  # later layers act on the left
    return rollout


__all__ = ["attention_rollout", "layer_transition"]
