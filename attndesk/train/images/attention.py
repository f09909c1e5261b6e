"""A trained vision model's attention, token names and patch maps (Qt-free), read through
transformers' eager attention of the model itself (the models are built with it).

Token order is the model's: the class token, then the registers (DINOv2 with registers), then
the patches row by row, named as ``run_pretrained`` names them: ``"[CLS]"``, ``"[REG0]"``, ...,
``"(r,c)"``. A map is ``[rows, cols]`` over the patch grid, what the faithfulness measures rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attndesk.core.interp.flow import attention_flow
from attndesk.core.rollout import attention_rollout


def patch_grid(model: Any) -> tuple[int, int]:
    """(rows, cols) of a square vision model's patch grid at its configured image size."""
    side = int(model.config.image_size) // int(model.config.patch_size)
    return side, side


def vision_tokens(model: Any) -> list[str]:
    """The token names of a vision model's sequence (see the module's docstring)."""
    rows, cols = patch_grid(model)
    registers = int(getattr(model.config, "num_register_tokens", 0) or 0)
    return [
        "[CLS]",
        *(f"[REG{i}]" for i in range(registers)),
        *(f"({r},{c})" for r in range(rows) for c in range(cols)),
    ]


@dataclass(frozen=True)
class VisionForward:
    """One image through a model: every layer's weights ``[layers, heads, N, N]`` and output
    token norms ``[layers, N]`` (float32), the class probabilities, the token names."""

    weights: np.ndarray
    norms: np.ndarray
    probs: np.ndarray
    tokens: list[str]


@torch.no_grad()
def forward_with_attention(model: Any, pixels: torch.Tensor) -> VisionForward:
    """Run one image ``[1, C, H, W]`` (or ``[C, H, W]``) with its attention and hidden states returned."""
    if pixels.ndim == 3:
        pixels = pixels[None]
    model.eval()
    out = model(pixel_values=pixels, output_attentions=True, output_hidden_states=True)
    weights = torch.stack([a[0] for a in out.attentions]).float().numpy()
    norms = torch.stack([h[0].norm(dim=-1) for h in out.hidden_states[1:]]).float().numpy()
    return VisionForward(weights, norms, torch.softmax(out.logits[0], -1).float().numpy(), vision_tokens(model))


def _patches(row: np.ndarray, model: Any) -> np.ndarray:
    rows, cols = patch_grid(model)
    return np.asarray(row[-rows * cols :], dtype=np.float64).reshape(rows, cols)


def cls_attention_map(model: Any, pixels: torch.Tensor) -> np.ndarray:
    """The last layer's class-token row over the patches, the heads averaged."""
    return _patches(forward_with_attention(model, pixels).weights[-1].mean(axis=0)[0], model)


def rollout_map(model: Any, pixels: torch.Tensor) -> np.ndarray:
    """The class token's row of the attention rollout (``attndesk.core.rollout``) over the patches."""
    return _patches(attention_rollout(forward_with_attention(model, pixels).weights)[0], model)


def flow_map(model: Any, pixels: torch.Tensor) -> np.ndarray:
    """The maximum attention flow into the class token (``attndesk.core.interp.flow``) from each patch."""
    return _patches(attention_flow(forward_with_attention(model, pixels).weights, rows=[0]).flow[0], model)


__all__ = [
    "VisionForward",
    "cls_attention_map",
    "flow_map",
    "forward_with_attention",
    "patch_grid",
    "rollout_map",
    "vision_tokens",
]
