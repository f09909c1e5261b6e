"""The one validated set of hyper-parameters behind every toy-model run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from .devices import DEVICE_NAMES, DTYPES, device_availability, available_devices
from .errors import ConfigError

MASK_KINDS = ("none", "padding", "causal", "padding+causal")


def divisors(n: int) -> list[int]:
    """Every head count that divides an embedding dim of n."""
    return [h for h in range(1, n + 1) if n % h == 0]


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
        """Raise ConfigError naming the first bad value and how to fix it; return self."""
        for name in ("embed_dim", "hidden_dim", "num_heads", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive whole number, got {value!r}")
        if self.vocab_size < 3:
            raise ConfigError(f"vocab_size must be at least 3 ([PAD], [UNK] and one word), got {self.vocab_size}")
        if self.embed_dim % self.num_heads:
            valid = ", ".join(map(str, divisors(self.embed_dim)))
            raise ConfigError(
                f"{self.num_heads} heads do not divide embed_dim {self.embed_dim}; "
                f"valid head counts: {valid}"
            )
        if self.mask not in MASK_KINDS:
            raise ConfigError(f"unknown mask {self.mask!r}; choose one of: {', '.join(MASK_KINDS)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {self.dtype!r}; choose one of: {', '.join(DTYPES)}")
        if not isinstance(self.dropout, (int, float)) or math.isnan(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed must be a whole number in [0, 2**63), got {self.seed!r}")
        if self.pad_to is not None and (isinstance(self.pad_to, bool) or not isinstance(self.pad_to, int) or self.pad_to <= 0):
            raise ConfigError(f"pad_to must be a positive length or None, got {self.pad_to!r}")
        if self.memory_budget is not None and (not isinstance(self.memory_budget, int) or self.memory_budget <= 0):
            raise ConfigError(f"memory_budget must be a positive number of bytes or None, got {self.memory_budget!r}")
        if self.device not in DEVICE_NAMES:
            raise ConfigError(f"unknown device {self.device!r}; choose one of: {', '.join(DEVICE_NAMES)}")
        reasons = device_availability()
        if self.device != "auto" and reasons[self.device] is not None:
            raise ConfigError(
                f"device {self.device!r} is not available ({reasons[self.device]}); "
                f"available: {', '.join(available_devices())}"
            )
        if self.dtype == "float64" and self.device == "mps":
            raise ConfigError("MPS has no float64; choose float32 or bfloat16, or the cpu device")
        return self

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
