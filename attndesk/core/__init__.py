"""attndesk's public Python API: the names below, and the documented older paths of the modules
that now live in their own packages (docs/architecture.md draws the stack).

>>> from attndesk.core import AttentionConfig, run_attention
>>> result = run_attention(AttentionConfig(num_heads=2, embed_dim=8), "the cat sat")
>>> result.weights.shape
(2, 3, 3)

Nothing else lives here. The modules are in ``attndesk.attention`` (the exact kernel and its
variants), ``attndesk.runs`` (settings, plans, the run and its result), ``attndesk.teaching``,
``attndesk.models`` (local checkpoints), ``attndesk.interp``, ``attndesk.system`` (devices, threads,
timing, free memory), ``attndesk.files``, ``attndesk.errors`` and ``attndesk.checks``. The older
paths the docs show stay: ``pretrained`` (``attndesk.models``'s names), ``interp`` (``attndesk.interp``'s,
with ``interp.image_maps`` and ``interp.registers``), and the modules ``attention``, ``bundle``,
``config``, ``errors``, ``images``, ``machine``, ``pipeline``, ``rollout``, ``scoring``,
``statistics``, ``threads`` and ``types``, each the moved module itself.

The names below are imported on first use (PEP 562), so importing this package loads nothing
heavy (no torch until a name needs it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# submodule -> the names it exports here
_EXPORTS: dict[str, tuple[str, ...]] = {
    "attndesk.attention.kernel": (
        "MultiHeadAttention",
        "SingleHeadAttention",
        "masked_softmax",
        "scaled_dot_product_attention",
    ),
    "attndesk.attention.masks": ("causal_mask", "padding_mask"),
    "attndesk.attention.positional": ("sinusoidal_encoding",),
    "attndesk.attention.types": ("MEAN", "AttentionMap", "Head", "Intermediates"),
    "attndesk.errors": ("Cancelled", "ConfigError", "ConfigTypeError"),
    "attndesk.models": ("PretrainedResult", "load_pretrained", "run_pretrained"),
    "attndesk.runs.config": ("MASK_KINDS", "POSITIONS", "AttentionConfig", "divisors"),
    "attndesk.runs.memory": ("estimate_run",),
    "attndesk.runs.pipeline": ("run_attention",),
    "attndesk.runs.result": ("AttentionResult",),
    "attndesk.system.devices": ("available_devices", "device_availability"),
    "attndesk.system.free_memory": ("format_bytes",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

if TYPE_CHECKING:  # the same names for type checkers (tests/core/test_core_exports.py keeps the lists equal)
    from attndesk.attention.kernel import (
        MultiHeadAttention,
        SingleHeadAttention,
        masked_softmax,
        scaled_dot_product_attention,
    )
    from attndesk.attention.masks import causal_mask, padding_mask
    from attndesk.attention.positional import sinusoidal_encoding
    from attndesk.attention.types import MEAN, AttentionMap, Head, Intermediates
    from attndesk.errors import Cancelled, ConfigError, ConfigTypeError
    from attndesk.models import PretrainedResult, load_pretrained, run_pretrained
    from attndesk.runs.config import MASK_KINDS, POSITIONS, AttentionConfig, divisors
    from attndesk.runs.memory import estimate_run
    from attndesk.runs.pipeline import run_attention
    from attndesk.runs.result import AttentionResult
    from attndesk.system.devices import available_devices, device_availability
    from attndesk.system.free_memory import format_bytes


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
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
