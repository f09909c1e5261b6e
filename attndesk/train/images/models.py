"""The vision models the image tasks train (Qt-free): transformers' own classes built from
configs, so a trained model is an ordinary transformers folder (config, weights, image
processor) that ``attndesk.models.load_pretrained`` opens like a downloaded one.

- ``"vit"``: ``ViTForImageClassification`` (a class token, the class token's state classifies);
- ``"dinov2"``: ``Dinov2ForImageClassification`` (class token and the mean of the patches);
- ``"dinov2-registers"``: ``Dinov2WithRegistersForImageClassification``, the same with
  ``registers`` register tokens between the class token and the patches.

Each is built with eager attention (its weights can be returned) and no dropout.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from attndesk.errors import ConfigError

from .data import SHAPES_SIZE

ARCHITECTURES = ("vit", "dinov2", "dinov2-registers")
NORMALISE = 0.5  # the image processors' mean and standard deviation per channel: pixels map to [-1, 1]


@dataclass(frozen=True)
class VisionSpec:
    """One vision model and how it is trained: the task (``"digits"`` or ``"shapes"``), the
    architecture (``ARCHITECTURES``), its size, the seed, the epochs and the optimiser's
    settings (AdamW with a one-cycle learning rate), and for shapes how many images are drawn
    (``train_images`` new ones each epoch, ``test_images`` once)."""

    task: str
    arch: str = "vit"
    patch: int = 2
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    mlp: int = 128
    registers: int = 0
    seed: int = 0
    epochs: int = 30
    batch: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.05
    train_images: int = 2000
    test_images: int = 500

    def __post_init__(self) -> None:
        if self.task not in ("digits", "shapes"):
            raise ConfigError(f"no image task {self.task!r}; tasks: digits, shapes")
        if self.arch not in ARCHITECTURES:
            raise ConfigError(f"no vision architecture {self.arch!r}; architectures: {', '.join(ARCHITECTURES)}")
        if (self.arch == "dinov2-registers") != (self.registers > 0):
            raise ConfigError("registers > 0 goes with arch 'dinov2-registers', and only with it")
        if self.hidden % self.heads or self.mlp % self.hidden:
            raise ConfigError(f"hidden {self.hidden} must divide by heads {self.heads}, and mlp {self.mlp} by hidden")

    @property
    def image_size(self) -> int:
        return 8 if self.task == "digits" else SHAPES_SIZE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_model(spec: VisionSpec, classes: tuple[str, ...]) -> Any:
    """A freshly initialised model of ``spec`` for ``classes``; the caller seeds torch first."""
    from transformers import (
        Dinov2Config,
        Dinov2ForImageClassification,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersForImageClassification,
        ViTConfig,
        ViTForImageClassification,
    )

    common: dict[str, Any] = {
        "image_size": spec.image_size,
        "patch_size": spec.patch,
        "num_channels": 3,
        "hidden_size": spec.hidden,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "num_labels": len(classes),
        "id2label": dict(enumerate(classes)),
        "label2id": {c: i for i, c in enumerate(classes)},
    }
    model: Any
    if spec.arch == "vit":
        model = ViTForImageClassification(ViTConfig(intermediate_size=spec.mlp, **common))
    elif spec.arch == "dinov2":
        model = Dinov2ForImageClassification(Dinov2Config(mlp_ratio=spec.mlp // spec.hidden, **common))
    else:
        config = Dinov2WithRegistersConfig(
            mlp_ratio=spec.mlp // spec.hidden, num_register_tokens=spec.registers, **common
        )
        model = Dinov2WithRegistersForImageClassification(config)
        # transformers starts the registers at zero: identical, with no position to tell them apart,
        # they would train as copies of one register; drawn like weights, each can learn its own role
        with torch.no_grad():
            model.dinov2_with_registers.embeddings.register_tokens.normal_(0.0, config.initializer_range)
    model.config._attn_implementation = "eager"  # the weights are returned, as a reference can read them
    return model


def image_processor(spec: VisionSpec):
    """The image processor saved with a model of ``spec``: resize to the model's size, scale to
    [0, 1], normalise with mean and deviation ``NORMALISE`` (ViT's for ``"vit"``, BiT's as
    DINOv2 ships for the others). The PIL processors: they need no torchvision."""
    from transformers import BitImageProcessorPil, ViTImageProcessorPil

    size, norm = spec.image_size, [NORMALISE] * 3
    if spec.arch == "vit":
        return ViTImageProcessorPil(size={"height": size, "width": size}, image_mean=norm, image_std=norm)
    return BitImageProcessorPil(
        size={"shortest_edge": size}, crop_size={"height": size, "width": size}, image_mean=norm, image_std=norm
    )


def pixel_values(processor, images: np.ndarray) -> torch.Tensor:
    """``[n, H, W, 3]`` uint8 images -> the processor's ``[n, 3, H', W']`` float32 tensor."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = processor(list(images), return_tensors="pt")["pixel_values"]
    return torch.as_tensor(np.asarray(out), dtype=torch.float32)


__all__ = ["ARCHITECTURES", "NORMALISE", "VisionSpec", "build_model", "image_processor", "pixel_values"]
