"""attndesk's attention core: pure torch + numpy, no Qt.

>>> from attndesk.core import AttentionConfig, run_attention
>>> result = run_attention(AttentionConfig(num_heads=2, embed_dim=8), "the cat sat")
>>> result.weights.shape
(2, 3, 3)

What it holds (docs/architecture.md draws the layout):

- settings: ``fields`` (the field spec, ``param``), ``config`` (``AttentionConfig``), ``checks`` and
  ``errors`` (the core's doors and its exceptions);
- attention: ``attention`` (``attend``, the layers), ``scoring`` (``Scoring``, the one softmax),
  ``sinks``, ``fastpath``, ``blocked``, ``online_softmax``, ``kvcache`` (the teaching cache);
- positions and masks: ``masks``, ``positional``, ``rope``, ``alibi``;
- runs: ``pipeline`` (``run_attention``), ``plan``, ``memory``, ``pyramid``, ``select``, ``types``,
  ``result``, ``timing``, ``threads``, ``devices``, ``machine``, ``process``;
- teaching comparisons: ``compare``, ``diff``, ``variant_compare``, ``tutorial``, ``statistics``,
  ``rollout``;
- input and files: ``tokenizer``, ``textfile``, ``images``, ``atomic``, ``bundle``;
- subpackages: ``pretrained`` (any local transformers checkpoint) and ``interp`` (interpretability
  on a loaded model).

The names below are imported on first use (PEP 562), so a module that needs only a light part of
the core (``atomic``, ``errors``: a corpus store opened to be read) does not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# submodule -> the names it exports here
_EXPORTS: dict[str, tuple[str, ...]] = {
    "attention": ("MultiHeadAttention", "SingleHeadAttention", "masked_softmax", "scaled_dot_product_attention"),
    "config": ("MASK_KINDS", "POSITIONS", "AttentionConfig", "divisors"),
    "devices": ("available_devices", "device_availability"),
    "errors": ("Cancelled", "ConfigError", "ConfigTypeError"),
    "masks": ("causal_mask", "padding_mask"),
    "memory": ("estimate_run", "format_bytes"),
    "pipeline": ("run_attention",),
    "positional": ("sinusoidal_encoding",),
    "pretrained": ("PretrainedResult", "load_pretrained", "run_pretrained"),
    "result": ("AttentionResult",),
    "types": ("MEAN", "AttentionMap", "Head", "Intermediates"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

if TYPE_CHECKING:  # the same names for type checkers (tests/core/test_core_exports.py keeps the lists equal)
    from .attention import MultiHeadAttention, SingleHeadAttention, masked_softmax, scaled_dot_product_attention
    from .config import MASK_KINDS, POSITIONS, AttentionConfig, divisors
    from .devices import available_devices, device_availability
    from .errors import Cancelled, ConfigError, ConfigTypeError
    from .masks import causal_mask, padding_mask
    from .memory import estimate_run, format_bytes
    from .pipeline import run_attention
    from .positional import sinusoidal_encoding
    from .pretrained import PretrainedResult, load_pretrained, run_pretrained
    from .result import AttentionResult
    from .types import MEAN, AttentionMap, Head, Intermediates


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "MASK_KINDS",
    "MEAN",
    "POSITIONS",
    "AttentionConfig",
    "AttentionMap",
    "AttentionResult",
    "Cancelled",
    "ConfigError",
    "ConfigTypeError",
    "Head",
    "Intermediates",
    "MultiHeadAttention",
    "PretrainedResult",
    "SingleHeadAttention",
    "available_devices",
    "causal_mask",
    "device_availability",
    "divisors",
    "estimate_run",
    "format_bytes",
    "load_pretrained",
    "masked_softmax",
    "padding_mask",
    "run_attention",
    "run_pretrained",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
