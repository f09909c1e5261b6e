"""Where a loaded model's pieces are, for interpretability: per attention layer its module, its
output projection (whose input holds every head's context, head after head), the layer block
(whose input is the residual stream) and the block's MLP; the embeddings and the LM head.

Everything is found from ``LoadedModel.sites`` (the attention modules the loader saw call
attndesk's ``attend``) and the modules' names, never from a per-family table: the output
projection is the attention module's child called ``o_proj``, ``out_proj``, ``c_proj``,
``dense`` or ``o``; the MLP is the block's ``mlp``, ``DenseReluDense``, ``feed_forward`` or
(BART, OPT) ``fc2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attndesk.errors import ConfigError, NoLMHead
from attndesk.models.loader import LoadedModel, output_embeddings, token_embeddings
from attndesk.models.sites import layer_path

_OUT_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "o")
_MLP_NAMES = ("mlp", "DenseReluDense", "feed_forward", "fc2")


@dataclass(frozen=True)
class LayerParts:
    """One attention layer: ``part`` ("self", "decoder", "cross"), its index, and its modules."""

    part: str
    layer: int
    attention: nn.Module
    out_proj: nn.Module
    block: nn.Module
    mlp: nn.Module | None
    heads: int
    head_dim: int


def _out_proj(name: str, module: nn.Module) -> nn.Module:
    children = dict(module.named_children())
    for candidate in _OUT_NAMES:
        if candidate in children:
            return children[candidate]
    raise ConfigError(
        f"the attention module {name} has no output projection attndesk knows "
        f"({', '.join(_OUT_NAMES)}): heads cannot be patched in this model"
    )


def _mlp(block: nn.Module) -> nn.Module | None:
    for wanted in _MLP_NAMES:
        for name, module in block.named_modules():
            if name.split(".")[-1] == wanted:
                return module
    return None


def _in_features(module: nn.Module) -> int:
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:
        raise ConfigError(f"{type(module).__name__} is not a linear output projection")
    # nn.Linear stores [out, in]; GPT-2's Conv1D stores [in, out] and says nf = out
    return int(weight.shape[0]) if hasattr(module, "nf") else int(weight.shape[1])


def layer_parts(model: LoadedModel) -> dict[str, list[LayerParts]]:
    """part -> its layers in order, each with its attention, output projection, block and MLP."""
    modules = dict(model.model.named_modules())
    found: dict[str, dict[int, LayerParts]] = {}
    for name, module in modules.items():
        site = model.sites.get(id(module))
        if site is None:
            continue
        located = layer_path(name)
        if located is None:  # the loader's check refuses such a model already
            continue
        block = modules[located[0]]
        out = _out_proj(name, module)
        width = _in_features(out)
        found.setdefault(site.part, {})[site.layer] = LayerParts(
            site.part, site.layer, module, out, block, _mlp(block), model.num_heads, width // model.num_heads
        )
    return {part: [layers[i] for i in sorted(layers)] for part, layers in found.items()}


def check_lm(model: LoadedModel, what: str = "a logit metric") -> nn.Module:
    """The LM head, or a one-line ConfigError for an encoder or a model without one."""
    if model.family == "encoder":
        raise ConfigError(
            f"{model.name} is an encoder-only model: it predicts no next token, so {what} has "
            "nothing to measure; choose a decoder or an encoder-decoder"
        )
    head = output_embeddings(model.model)
    if getattr(model, "headless", False) or head is None or getattr(head, "weight", None) is None:
        raise NoLMHead(model.name, what)
    return head


def vocabulary(model: LoadedModel) -> int:
    head = output_embeddings(model.model)
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    return int(token_embeddings(model.model).num_embeddings)


def input_embeddings(model: LoadedModel) -> nn.Embedding:
    """The token embedding table the model reads ``input_ids`` through (the encoder's, for T5/BART)."""
    return token_embeddings(model.model)


def hidden_size(model: LoadedModel) -> int:
    return int(input_embeddings(model).embedding_dim)


def intermediate_size(model: LoadedModel) -> int:
    config = model.model.config
    for key in ("intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "hidden_dim"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 4 * hidden_size(model)


def device_of(model: LoadedModel) -> torch.device:
    return model.device


__all__ = [
    "LayerParts",
    "check_lm",
    "hidden_size",
    "input_embeddings",
    "intermediate_size",
    "layer_parts",
    "vocabulary",
]
