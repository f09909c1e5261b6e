"""The one validated set of hyper-parameters behind every toy-model run."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psutil
import torch

from attndesk.attention.alibi import alibi_slopes
from attndesk.attention.scoring import Scoring
from attndesk.attention.sinks import SINK_KINDS, SINK_LABELS, SINK_TIPS, sink_logits
from attndesk.checks import boolean, shown
from attndesk.errors import ConfigError
from attndesk.system.devices import DEVICE_NAMES, DTYPES, available_devices, device_availability

from .fields import Param, check_value, fields_of, param
from .memory import check_length, check_parameters

MASK_KINDS = ("none", "padding", "causal", "padding+causal")
# where token order enters: added to the embeddings (sinusoidal), rotating Q and K (rope), a
# distance penalty on the scores (alibi), or nowhere
POSITIONS = ("sinusoidal", "rope", "alibi", "none")


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
        total = psutil.virtual_memory().total
    except Exception:  # psutil missing or sandboxed: assume a small machine
        total = 8 * 2**30
    return int(min(2 * 2**30, max(256 * 2**20, total // 8)))


# the toy model's weights: random (seeded), a shipped trained preset (attndesk/resources/trained,
# ``attndesk.train.presets.PRESETS``), or "trained": the model open in the window's Train tab
TRAINED_PRESETS = (
    "induction",
    "induction-sparse",
    "reverse",
    "previous-token",
    "brackets",
    "needle",
    "needle-sink",
    "needle-off-by-one",
    "needle-deep",
)
WEIGHTS = ("random", *TRAINED_PRESETS, "trained")
WEIGHT_LABELS = {"random": "Random", "trained": "Trained: the Train tab's model"} | {
    name: f"Trained: {name}" for name in TRAINED_PRESETS
}
WEIGHT_TIPS = {
    "random": "random weights from the seed: every parameter below is live",
    "induction": "2 layers trained on repeated segments: a previous-token head feeds an induction head",
    "induction-sparse": "the induction model trained with a penalty on each head's weights: one previous-token head feeds one induction head",
    "reverse": "2 layers trained to reverse a sequence: the anti-diagonal",
    "previous-token": "1 layer trained to repeat the token before: each token looks one back",
    "brackets": "2 layers trained on bracket depth: a head spread evenly over the prefix",
    "needle": "2 layers trained to find a key's value in filler: retrieval heads in layer 2",
    "needle-sink": "the needle model trained with a learned softmax sink per head",
    "needle-off-by-one": "the needle model trained with an off-by-one softmax",
    "needle-deep": "4 layers with MLPs trained on the needle task: retrieval heads in layer 2",
    "trained": "the model trained or opened in the Train tab (its button Open in views)",
}


def _random_weights(values: Mapping[str, Any]) -> bool:
    """Whether the toy model's own shape and seed act: trained weights bring their own (panel greys them)."""
    return values.get("weights_from", "random") == "random"


_ARCHITECTURE: dict[str, Any] = dict(real_model="fixed", acts_when=_random_weights)
_VARIANT: dict[str, Any] = dict(real_model="fixed", group="variant", acts_when=_random_weights)
_TOY: dict[str, Any] = dict(acts_when=_random_weights)


def _learned_sink(values: Mapping[str, Any]) -> bool:
    """Whether the sink logit acts: random weights with learned per-head sinks."""
    return _random_weights(values) and values.get("sink") == "learned"


_WINDOW_INT = 2**31 - 1  # a QSpinBox holds 32-bit numbers
POSITION_LABELS = {"sinusoidal": "sinusoidal", "rope": "RoPE", "alibi": "ALiBi", "none": "none"}
POSITION_TIPS = {
    "sinusoidal": "sin/cos waves added to the token embeddings (the 2017 Transformer)",
    "rope": "rotary: Q and K of each head rotated by an angle proportional to the position (LLaMA, Mistral)",
    "alibi": "no embedding: each head subtracts slope·|i − j| from its scores (BLOOM, MPT)",
    "none": "no position information: the attention sees a bag of tokens",
}


@dataclass
class _Shape:
    """The toy model's weights and shape (the panel's first rows)."""

    weights_from: str = param(
        "random",
        kind=str,
        label="Weights",
        flag="--weights-from",
        choices=WEIGHTS,
        choice_labels=WEIGHT_LABELS,
        choice_tips=WEIGHT_TIPS,
        tip="Random weights of the shape below, or a small model attndesk trained on a toy task (its "
        "every head on the task's probe input: the shape, text and seed below then do not act)",
    )
    embed_dim: int = param(
        64,
        kind=int,
        label="Embedding dim",
        flag="--embed-dim",
        low=1,
        window_max=_WINDOW_INT,
        tip="Embedding size E of every token (split across the heads)",
        **_ARCHITECTURE,
    )
    num_heads: int = param(
        4,
        kind=int,
        label="Heads",
        flag="--heads",
        low=1,
        window_max=_WINDOW_INT,
        widget="heads",
        tip="Number of heads; must divide the embedding dim",
        **_ARCHITECTURE,
    )
    hidden_dim: int = param(
        64,
        kind=int,
        label="Hidden dim",
        flag="--hidden-dim",
        low=1,
        window_max=_WINDOW_INT,
        acts_when=lambda values: values["num_heads"] == 1 and _random_weights(values),
        tip="Width d_k of the single head (used only when heads = 1)",
        real_model="fixed",
    )


@dataclass
class _Scores(_Shape):
    """Which keys each query sees, and whether its scores are scaled by 1/sqrt(d_k)."""

    mask: str = param(
        "padding",
        kind=str,
        label="Mask",
        flag="--mask",
        choices=MASK_KINDS,
        real_model="acts",
        tip="padding: ignore [PAD] keys; causal: each token sees only earlier ones",
        **_TOY,
    )
    pad_to: int | None = param(
        None,
        kind=int,
        label="Pad to length",
        flag="--pad-to",
        low=1,
        none="no padding",
        control="zero",
        window_max=_WINDOW_INT,
        metavar="N",
        tip="Pad the tokens with [PAD] up to this length (shows the padding mask at work)",
        **_TOY,
    )
    scaled: bool = param(
        True,
        kind=bool,
        label="Scale scores by 1/√d_k",
        flag="--no-scale",
        widget="scale",
        real_model="acts",
        tip="Divide the scores by √d_k before the softmax",
        **_TOY,
    )


@dataclass
class _Variants(_Scores):
    """The modern variants: positions, grouped K/V heads, a sliding window, a soft-cap, a softmax sink."""

    position: str = param(
        "sinusoidal",
        kind=str,
        label="Position",
        flag="--position",
        choices=POSITIONS,
        choice_labels=POSITION_LABELS,
        choice_tips=POSITION_TIPS,
        **_VARIANT,
        tip="Where token order enters the attention: sinusoidal (added to the embeddings), rope "
        "(rotates Q and K), alibi (a distance penalty on the scores) or none",
    )
    kv_heads: int | None = param(
        None,
        kind=int,
        label="K/V heads",
        flag="--kv-heads",
        low=1,
        control="divisors",
        of="num_heads",
        none="one per query head, plain multi-head",
        metavar="KV",
        **_VARIANT,
        tip="Key/value heads shared by groups of query heads: fewer K/V heads, a smaller "
        "K/V cache; must divide the heads (1 = multi-query)",
    )
    # the toy sentence has ~11 tokens, so a first window of 3 shows a clear band
    window: int | None = param(
        None,
        kind=int,
        label="Window",
        flag="--window",
        low=1,
        none="global",
        unit="tokens",
        control="switch",
        suggested=3,
        window_max=_WINDOW_INT,
        metavar="W",
        **_VARIANT,
        must_be="a whole number of tokens >= 1 (1 = each query sees only itself) or None for global attention",
        tip="Sliding window: query i sees key j only when |i − j| < W (Mistral, Gemma 2)",
    )
    # random toy weights give scaled scores of a few units, so a first cap of 1 visibly bends them
    softcap: float | None = param(
        None,
        kind=float,
        label="Soft-cap",
        flag="--softcap",
        low=0.0,
        low_open=True,
        high=1e6,
        none="no cap",
        control="switch",
        suggested=1.0,
        step=0.5,
        metavar="C",
        must_be="a positive finite number (Gemma 2 uses 50) or None for no cap",
        **_VARIANT,
        tip="Soft-cap: scaled scores s become C·tanh(s / C), bounded by ±C, before the mask (Gemma 2 uses 50)",
    )
    sink: str = param(
        "none",
        kind=str,
        label="Softmax sink",
        flag="--sink",
        choices=SINK_KINDS,
        choice_labels=SINK_LABELS,
        choice_tips=SINK_TIPS,
        **_VARIANT,
        tip="A logit per head in the softmax's denominator that takes weight and gives no value: "
        "learned per head (GPT-OSS) or fixed at 0 (off-by-one softmax); rows then sum to less than 1",
    )
    sink_logit: float | None = param(
        None,
        kind=float,
        label="Sink logit",
        flag="--sink-logit",
        low=-100.0,
        high=100.0,
        none="drawn per head from the seed, N(0, 1)",
        control="switch",
        suggested=0.0,
        step=0.5,
        metavar="S",
        must_be="a number in [-100, 100] or None (drawn per head from the seed)",
        real_model="fixed",
        group="variant",
        acts_when=_learned_sink,
        tip="The learned sink's logit s in every head (exp(s) joins each row's denominator); "
        "None draws one per head from the seed",
    )


@dataclass
class _Run(_Variants):
    """The run: dropout, the seed, the vocabulary, the bias, the device, the dtype and the memory budget."""

    dropout: float = param(
        0.0,
        kind=float,
        label="Dropout",
        flag="--dropout",
        low=0.0,
        high=1.0,
        high_open=True,
        step=0.05,
        tip="Dropout on the attention weights, in [0, 1) (acts only in training mode)",
        **_TOY,
    )
    training: bool = param(
        False,
        kind=bool,
        label="Training mode (dropout on)",
        flag="--train",
        widget="train",
        tip="Training mode: dropout acts on the weights",
        **_TOY,
    )
    seed: int = param(
        0,
        kind=int,
        label="Seed",
        flag="--seed",
        low=0,
        high=2**63 - 1,
        window_max=_WINDOW_INT,
        tip="Seed of the random weights (same seed, same model)",
        **_TOY,
    )
    vocab_size: int = param(
        16384,
        kind=int,
        label="Vocabulary",
        flag="--vocab-size",
        low=3,
        window_max=_WINDOW_INT,
        must_be="at least 3 ([PAD], [UNK] and one word)",
        tip="Vocabulary size of the word tokenizer (rarer words become [UNK])",
        **_TOY,
    )
    bias: bool = param(
        True,
        kind=bool,
        label="Bias in the Linear layers",
        flag="--no-bias",
        tip="The Q, K, V and output Linear layers have a bias",
        **_TOY,
    )
    device: str = param(
        "cpu",
        kind=str,
        label="Device",
        flag="--device",
        choices=DEVICE_NAMES,
        unavailable=device_availability,
        tip="Torch device; auto picks the best available",
    )
    dtype: str = param(
        "float32", kind=str, label="Dtype", flag="--dtype", choices=tuple(DTYPES), tip="Compute precision"
    )
    memory_budget: int | None = param(
        None,
        kind=int,
        label="Memory budget",
        flag="--memory-budget",
        low=1,
        none="auto",
        auto=default_memory_budget,
        unit="bytes",
        control="zero",
        step=256,
        window_max=2**50,
        metavar="BYTES",
        real_model="acts",
        tip="Memory the attention weights may take. Runs whose weights do not fit keep "
        "a zoomable overview and recompute exact values on demand.",
    )


@dataclass
class AttentionConfig(_Run):
    """Hyper-parameters of a toy attention run. ``AttentionConfig()`` is valid as it stands.

    ``num_heads == 1`` is the single-head case (three Linear layers into ``hidden_dim``);
    more heads use the 4-Linear multi-head layer with ``embed_dim // num_heads`` per head.

    Modern variants: ``kv_heads`` K/V heads shared by groups of query heads (None = one per
    query head; 1 = multi-query), ``position`` (see POSITIONS), a sliding ``window`` (query i
    sees key j only when |i - j| < window; None = global), a ``softcap`` C on the scaled
    scores (s -> C tanh(s / C); None = none) and a softmax ``sink`` (see ``sinks``: learned
    per-head logits, ``sink_logit`` or drawn from the seed, or the off-by-one softmax).

    Each field is declared with its spec (``fields.param``): the panel, the CLI flags, the
    window's limits and the session keys are built from these declarations (``FIELDS``), in
    this order (the panel's rows). The declarations stand in four groups, the bases this class
    extends in order: ``_Shape``, ``_Scores``, ``_Variants`` and ``_Run``.
    """

    # -- validation -------------------------------------------------------------------------
    def validate(self) -> AttentionConfig:
        """Raise ConfigError naming the first bad value and how to fix it; return self.

        Types first (a wrong type is a ``ConfigTypeError``, also a TypeError), then ranges and
        the device, then sizes: the model's parameters and a padded length must fit in memory
        (``memory.check_parameters``, ``memory.check_length``), checked before anything exists.

        Checked once per set of values: the window's request, the run's plan and the run itself
        each call validate() on the same config, and only the first one checks (a field changed
        since is checked again; free memory and devices are read at that first check)."""
        values = self._values()
        if self.__dict__.get("_valid_as") == values:
            return self
        self._check_fields()
        self._check_device()
        check_parameters(self)
        if self.embed_dim % self.num_heads:
            raise ConfigError(
                f"{self.num_heads:,} heads do not divide embed_dim {self.embed_dim}; "
                f"valid head counts: {_listed(divisors(self.embed_dim))}",
                field="num_heads",
            )
        if self.pad_to is not None:
            check_length(self, self.pad_to, "pad_to", field="pad_to")
        self._check_variants()
        self.__dict__["_valid_as"] = values
        return self

    def _values(self) -> tuple:
        """Every field's type and value (1, 1.0 and True differ: each is checked on its own)."""
        return tuple((type(v), v) for v in (getattr(self, f.name) for f in dataclasses.fields(self)))

    def _check_fields(self) -> None:
        for spec in fields_of(type(self)):  # type: ignore[arg-type]  # a class is hashable (mypy reads the instances' __hash__ = None); each field's own type, choices and range, as its spec declares
            check_value(spec, getattr(self, spec.name))

    def _check_variants(self) -> None:
        """The modern-attention fields: each bad combination is named with what would work instead."""
        if self.kv_heads is not None and self.num_heads % self.kv_heads:
            raise ConfigError(
                f"{self.kv_heads:,} K/V heads cannot be shared evenly by {self.num_heads:,} query heads; valid "
                f"K/V head counts: {_listed(divisors(self.num_heads))} (1 = multi-query, {self.num_heads:,} = "
                "plain multi-head)",
                field="kv_heads",
            )
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(
                f"RoPE rotates pairs of dimensions, so the head dimension must be even, "
                f"got d_k = {self.head_dim}; {_even_head_dims_hint(self)}",
                field="position",
            )

    def check_cross_attention(self) -> None:
        """Refuse what needs ONE sequence: keys from another text have no distance to the queries.

        A sliding window and ALiBi both use |i - j| between query i and key j; across two texts
        that number means nothing (encoder-decoder models use neither in cross-attention).
        RoPE and sinusoidal positions are allowed: each text is encoded by its own positions.
        """
        if self.window is not None:
            raise ConfigError(
                "a sliding window measures the distance |i - j| within one text: "
                "switch cross-attention off or set the window to none (global)",
                field="window",
            )
        if self.position == "alibi":
            raise ConfigError(
                "ALiBi penalises the distance |i - j| within one text: switch cross-attention "
                "off or choose another position (sinusoidal, rope or none)",
                field="position",
            )

    def _check_device(self) -> None:
        reasons = device_availability()
        if self.device != "auto" and reasons[self.device] is not None:
            raise ConfigError(
                f"device {self.device!r} is not available ({reasons[self.device]}); "
                f"available: {', '.join(available_devices())}",
                field="device",
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

    def scoring(self, scale: float) -> Scoring:
        """Every score modifier of this layer as one value, with ``scale`` still to apply to Q K^T
        (1.0 when the projection folded it into Q): soft-cap, ALiBi slopes, window, sinks."""
        slopes = tuple(float(s) for s in alibi_slopes(self.num_heads)) if self.position == "alibi" else None
        sinks = sink_logits(self.sink, self.num_heads, value=self.sink_logit, seed=self.seed)
        return Scoring(scale=scale, softcap=self.softcap, slopes=slopes, window=self.window, sinks=sinks)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def budget_bytes(self) -> int:
        return self.memory_budget if self.memory_budget is not None else default_memory_budget()

    def replace(self, **changes: Any) -> AttentionConfig:
        """A copy with some fields changed (not validated: call validate())."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionConfig:
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


FIELDS: tuple[Param, ...] = fields_of(AttentionConfig)  # the field spec, in the panel's order


def field_spec(name: str) -> Param:
    """The spec of one ``AttentionConfig`` field (KeyError for another name)."""
    return _BY_NAME[name]


_BY_NAME = {spec.name: spec for spec in FIELDS}


def _legacy_position(data: dict[str, Any]) -> dict[str, Any]:
    """Map the old ``positional: bool`` onto ``position``; both at once must agree."""
    if "positional" not in data:
        return data
    data = dict(data)
    flag = boolean("positional", data.pop("positional"))
    mapped = "sinusoidal" if flag else "none"
    if "position" in data and (data["position"] == "sinusoidal") != flag:
        raise ConfigError(
            f"positional={flag} contradicts position={shown(data['position'])}: give position alone", field="position"
        )
    data.setdefault("position", mapped)
    return data


def _even_head_dims_hint(config: AttentionConfig) -> str:
    if config.num_heads == 1:
        return f"choose an even hidden_dim (got {config.hidden_dim})"
    good = [h for h in divisors(config.embed_dim) if (config.embed_dim // h) % 2 == 0 and h > 1]
    return (
        f"embed_dim {config.embed_dim} / {config.num_heads} heads = {config.head_dim}; head counts giving an "
        f"even d_k: {_listed(good) if good else 'none (make embed_dim even)'}"
    )
