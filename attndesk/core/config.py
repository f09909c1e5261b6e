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
# where token order enters: added to the embeddings (sinusoidal), rotating Q and K (rope), a
# distance penalty on the scores (alibi), or nowhere
POSITIONS = ("sinusoidal", "rope", "alibi", "none")


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

    Modern variants: ``kv_heads`` K/V heads shared by groups of query heads (None = one per
    query head; 1 = multi-query), ``position`` (see POSITIONS), a sliding ``window`` (query i
    sees key j only when |i - j| < window; None = global) and a ``softcap`` C on the scaled
    scores (s -> C tanh(s / C); None = none).
    """

    embed_dim: int = 64
    hidden_dim: int = 64
    num_heads: int = 4
    mask: str = "padding"
    scaled: bool = True
    position: str = "sinusoidal"
    dropout: float = 0.0
    training: bool = False  # dropout acts only in training mode
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    pad_to: int | None = None
    vocab_size: int = 16384
    bias: bool = True
    memory_budget: int | None = None  # bytes for the weights; None = default_memory_budget()
    kv_heads: int | None = None  # None = num_heads (plain multi-head)
    window: int | None = None  # tokens; None = every query sees every key
    softcap: float | None = None  # None = no soft-capping
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
        self._validate_variants()
        return self

    def _validate_variants(self) -> None:
        """The modern-attention fields: each bad value is named with what would work instead."""
        if self.kv_heads is not None:
            valid = ", ".join(map(str, divisors(self.num_heads)))
            if isinstance(self.kv_heads, bool) or not isinstance(self.kv_heads, int) or self.kv_heads <= 0:
                raise ConfigError(f"kv_heads must be a positive whole number or None (one per query head), "
                                  f"got {self.kv_heads!r}; valid for {self.num_heads} heads: {valid}")
            if self.num_heads % self.kv_heads:
                raise ConfigError(
                    f"{self.kv_heads} K/V heads cannot be shared evenly by {self.num_heads} query heads; "
                    f"valid K/V head counts: {valid} (1 = multi-query, {self.num_heads} = plain multi-head)"
                )
        if self.position not in POSITIONS:
            raise ConfigError(f"unknown position {self.position!r}; choose one of: {', '.join(POSITIONS)}")
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(f"RoPE rotates pairs of dimensions, so the head dimension must be even, "
                              f"got d_k = {self.head_dim}; {_even_head_dims_hint(self)}")
        if self.window is not None and (isinstance(self.window, bool) or not isinstance(self.window, int)
                                        or self.window < 1):
            raise ConfigError(f"window must be a whole number of tokens >= 1 (1 = each query sees only "
                              f"itself) or None for global attention, got {self.window!r}")
        if self.softcap is not None and (isinstance(self.softcap, bool) or not isinstance(self.softcap, (int, float))
                                         or not math.isfinite(self.softcap) or self.softcap <= 0):
            raise ConfigError(f"softcap must be a positive finite number (Gemma 2 uses 50) or None for "
                              f"no cap, got {self.softcap!r}")

    def check_cross_attention(self) -> None:
        """Refuse what needs ONE sequence: keys from another text have no distance to the queries.

        A sliding window and ALiBi both use |i - j| between query i and key j; across two texts
        that number means nothing (encoder-decoder models use neither in cross-attention).
        RoPE and sinusoidal positions are allowed: each text is encoded by its own positions.
        """
        if self.window is not None:
            raise ConfigError("a sliding window measures the distance |i - j| within one text: "
                              "switch cross-attention off or set the window to none (global)")
        if self.position == "alibi":
            raise ConfigError("ALiBi penalises the distance |i - j| within one text: switch cross-attention "
                              "off or choose another position (sinusoidal, rope or none)")

    # -- conveniences -----------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """d_k: the width of one head (hidden_dim in the single-head case)."""
        return self.hidden_dim if self.num_heads == 1 else self.embed_dim // self.num_heads

    @property
    def num_kv_heads(self) -> int:
        """K/V heads: ``kv_heads``, or one per query head."""
        return self.num_heads if self.kv_heads is None else self.kv_heads

    @property
    def positional(self) -> bool:
        """Whether sinusoidal positions are added to the embeddings (the field before ``position``)."""
        return self.position == "sinusoidal"

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
        """Build from a plain dict (e.g. a session file); unknown keys are a ConfigError.

        The old ``positional`` flag still loads: True is ``position="sinusoidal"``, False "none".
        """
        if not isinstance(data, dict):
            raise ConfigError("a configuration must be a mapping of field names to values")
        data = _legacy_position(data)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(unknown)}")
        return cls(**data)


def _legacy_position(data: dict[str, Any]) -> dict[str, Any]:
    """Map the old ``positional: bool`` onto ``position``; both at once must agree."""
    if "positional" not in data:
        return data
    data = dict(data)
    flag = data.pop("positional")
    if not isinstance(flag, bool):
        raise ConfigError(f"positional must be true or false, got {flag!r}")
    mapped = "sinusoidal" if flag else "none"
    if "position" in data and (data["position"] == "sinusoidal") != flag:
        raise ConfigError(f"positional={flag} contradicts position={data['position']!r}: give position alone")
    data.setdefault("position", mapped)
    return data


def _even_head_dims_hint(config: AttentionConfig) -> str:
    if config.num_heads == 1:
        return f"choose an even hidden_dim (got {config.hidden_dim})"
    good = [h for h in divisors(config.embed_dim) if (config.embed_dim // h) % 2 == 0 and h > 1]
    return (f"embed_dim {config.embed_dim} / {config.num_heads} heads = {config.head_dim}; head counts giving an even d_k: "
            f"{', '.join(map(str, good)) or 'none (make embed_dim even)'}")
