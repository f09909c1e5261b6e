"""The one validated set of hyper-parameters behind every toy-model run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from .checks import boolean, choice, real_number, shown, type_name, whole_number
from .devices import DEVICE_NAMES, DTYPES, device_availability, available_devices
from .errors import ConfigError, ConfigTypeError
from .memory import check_length, check_parameters

MASK_KINDS = ("none", "padding", "causal", "padding+causal")
# where token order enters: added to the embeddings (sinusoidal), rotating Q and K (rope), a
# distance penalty on the scores (alibi), or nowhere
POSITIONS = ("sinusoidal", "rope", "alibi", "none")
_WHOLE_FIELDS = ("embed_dim", "hidden_dim", "num_heads", "vocab_size")
_FLAG_FIELDS = ("scaled", "training", "bias")


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
        self._check_variants()
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
        choice("position", self.position, POSITIONS)
        if self.kv_heads is not None:
            whole_number("kv_heads", self.kv_heads)
        if isinstance(self.window, int) and not isinstance(self.window, bool) and self.window < 1:
            raise ConfigError(f"window must be a whole number of tokens >= 1 (1 = each query sees only itself) "
                              f"or None for global attention, got {self.window}", field="window")
        if self.window is not None:
            whole_number("window", self.window)
        if self.softcap is not None and (isinstance(self.softcap, bool) or not isinstance(self.softcap, (int, float))):
            raise ConfigTypeError(f"softcap must be a number or None, got {shown(self.softcap)} "
                                  f"({type_name(self.softcap)})", field="softcap")

    def _check_variants(self) -> None:
        """The modern-attention fields: each bad combination is named with what would work instead."""
        if self.kv_heads is not None and self.num_heads % self.kv_heads:
            raise ConfigError(
                f"{self.kv_heads:,} K/V heads cannot be shared evenly by {self.num_heads:,} query heads; valid "
                f"K/V head counts: {_listed(divisors(self.num_heads))} (1 = multi-query, {self.num_heads:,} = "
                "plain multi-head)", field="kv_heads")
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(f"RoPE rotates pairs of dimensions, so the head dimension must be even, "
                              f"got d_k = {self.head_dim}; {_even_head_dims_hint(self)}", field="position")
        if self.softcap is not None and (not math.isfinite(self.softcap) or self.softcap <= 0):
            raise ConfigError(f"softcap must be a positive finite number (Gemma 2 uses 50) or None for "
                              f"no cap, got {self.softcap!r}", field="softcap")

    def check_cross_attention(self) -> None:
        """Refuse what needs ONE sequence: keys from another text have no distance to the queries.

        A sliding window and ALiBi both use |i - j| between query i and key j; across two texts
        that number means nothing (encoder-decoder models use neither in cross-attention).
        RoPE and sinusoidal positions are allowed: each text is encoded by its own positions.
        """
        if self.window is not None:
            raise ConfigError("a sliding window measures the distance |i - j| within one text: "
                              "switch cross-attention off or set the window to none (global)", field="window")
        if self.position == "alibi":
            raise ConfigError("ALiBi penalises the distance |i - j| within one text: switch cross-attention "
                              "off or choose another position (sinusoidal, rope or none)", field="position")

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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AttentionConfig":
        """Build from a plain dict (e.g. a session file); unknown keys are a ConfigError.

        The old ``positional`` flag still loads: True is ``position="sinusoidal"``, False "none".
        """
        if not isinstance(data, dict):
            raise ConfigError("a configuration must be a mapping of field names to values")
        data = _legacy_position(data)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(unknown)}")
        return cls(**data)


def _legacy_position(data: dict[str, Any]) -> dict[str, Any]:
    """Map the old ``positional: bool`` onto ``position``; both at once must agree."""
    if "positional" not in data:
        return data
    data = dict(data)
    flag = boolean("positional", data.pop("positional"))
    mapped = "sinusoidal" if flag else "none"
    if "position" in data and (data["position"] == "sinusoidal") != flag:
        raise ConfigError(f"positional={flag} contradicts position={shown(data['position'])}: give position alone",
                          field="position")
    data.setdefault("position", mapped)
    return data


def _even_head_dims_hint(config: AttentionConfig) -> str:
    if config.num_heads == 1:
        return f"choose an even hidden_dim (got {config.hidden_dim})"
    good = [h for h in divisors(config.embed_dim) if (config.embed_dim // h) % 2 == 0 and h > 1]
    return (f"embed_dim {config.embed_dim} / {config.num_heads} heads = {config.head_dim}; head counts giving an "
            f"even d_k: {_listed(good) if good else 'none (make embed_dim even)'}")
