"""The one validated set of hyper-parameters behind every toy-model run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from .checks import boolean, choice, real_number, whole_number
from .devices import DEVICE_NAMES, DTYPES, device_availability, available_devices
from .errors import ConfigError
from .memory import check_length, check_parameters

MASK_KINDS = ("none", "padding", "causal", "padding+causal")
_WHOLE_FIELDS = ("embed_dim", "hidden_dim", "num_heads", "vocab_size")
_FLAG_FIELDS = ("scaled", "positional", "training", "bias")


def divisors(n: int) -> list[int]:
    """Every head count that divides an embedding dim of n, ascending (O(sqrt n): a huge embed
    dim in a session must not stall the message that lists them)."""
    small = [h for h in range(1, math.isqrt(n) + 1) if n % h == 0]
    return small + [n // h for h in reversed(small) if h * h != n]


def _listed(values: list[int], most: int = 16) -> str:
    """'1, 2, 4, ...' with at most ``most`` entries: the smallest, then the largest."""
    if len(values) <= most:
        return ", ".join(map(str, values))
    return ", ".join(map(str, values[: most - 2])) + ", ..., " + ", ".join(map(str, values[-2:]))


def default_memory_budget() -> int:
    """Bytes the attention weights may take: an eighth of RAM, at most 2 GiB, at least 256 MiB."""
    try:
        import psutil

        total = psutil.virtual_memory().total
    except Exception:  # psutil missing or sandboxed: assume a small machine
        total = 8 * 2**30
    return int(min(2 * 2**30, max(256 * 2**20, total // 8)))


@dataclass
class AttentionConfig:
    """Hyper-parameters of a toy attention run. ``AttentionConfig()`` is valid as it stands.

    ``num_heads == 1`` is the single-head case (three Linear layers into ``hidden_dim``);
    more heads use the 4-Linear multi-head layer with ``embed_dim // num_heads`` per head.
    """

    embed_dim: int = 64
    hidden_dim: int = 64
    num_heads: int = 4
    mask: str = "padding"
    scaled: bool = True
    positional: bool = True
    dropout: float = 0.0
    training: bool = False  # dropout acts only in training mode
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    pad_to: int | None = None
    vocab_size: int = 16384
    bias: bool = True
    memory_budget: int | None = None  # bytes for the weights; None = default_memory_budget()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- validation -------------------------------------------------------------------------
    def validate(self) -> "AttentionConfig":
        """Raise ConfigError naming the first bad value and how to fix it; return self.

        Types first (a wrong type is a ``ConfigTypeError``, also a TypeError), then ranges and
        the device, then sizes: the model's parameters and a padded length must fit in memory
        (``memory.check_parameters``, ``memory.check_length``), checked before anything exists."""
        self._check_fields()
        self._check_device()
        check_parameters(self)
        if self.embed_dim % self.num_heads:
            raise ConfigError(
                f"{self.num_heads:,} heads do not divide embed_dim {self.embed_dim}; "
                f"valid head counts: {_listed(divisors(self.embed_dim))}", field="num_heads"
            )
        if self.pad_to is not None:
            check_length(self, self.pad_to, "pad_to", field="pad_to")
        return self

    def _check_fields(self) -> None:
        for name in _WHOLE_FIELDS:
            whole_number(name, getattr(self, name))
        if self.vocab_size < 3:
            raise ConfigError(f"vocab_size must be at least 3 ([PAD], [UNK] and one word), got {self.vocab_size}",
                              field="vocab_size")
        for name in _FLAG_FIELDS:
            boolean(name, getattr(self, name))
        choice("mask", self.mask, MASK_KINDS)
        choice("dtype", self.dtype, DTYPES)
        real_number("dropout", self.dropout, low=0.0, high=1.0, high_open=True)
        whole_number("seed", self.seed, minimum=0, maximum=2**63 - 1)
        if self.pad_to is not None:
            whole_number("pad_to", self.pad_to)
        if self.memory_budget is not None:
            whole_number("memory_budget", self.memory_budget)
        choice("device", self.device, DEVICE_NAMES)

    def _check_device(self) -> None:
        reasons = device_availability()
        if self.device != "auto" and reasons[self.device] is not None:
            raise ConfigError(
                f"device {self.device!r} is not available ({reasons[self.device]}); "
                f"available: {', '.join(available_devices())}", field="device"
            )
        if self.dtype == "float64" and self.device == "mps":
            raise ConfigError("MPS has no float64; choose float32 or bfloat16, or the cpu device", field="dtype")

    # -- conveniences -----------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """d_k: the width of one head (hidden_dim in the single-head case)."""
        return self.hidden_dim if self.num_heads == 1 else self.embed_dim // self.num_heads

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def budget_bytes(self) -> int:
        return self.memory_budget if self.memory_budget is not None else default_memory_budget()

    def replace(self, **changes: Any) -> "AttentionConfig":
        """A copy with some fields changed (not validated: call validate())."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("extra")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AttentionConfig":
        """Build from a plain dict (e.g. a session file); unknown keys are a ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError("a configuration must be a mapping of field names to values")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(unknown)}")
        return cls(**data)
