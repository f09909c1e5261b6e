"""TrainConfig: one validated set of choices behind a training run (task, model, optimiser)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from attndesk.core.checks import boolean, choice, real_number, whole_number
from attndesk.core.config import divisors
from attndesk.core.errors import ConfigError

# where token order enters: added to the embeddings (sinusoidal, learned), rotating Q and K
# (rope), a distance penalty on the scores (alibi), or nowhere (none)
TRAIN_POSITIONS = ("sinusoidal", "rope", "alibi", "learned", "none")
TASK_NAMES = ("induction", "copy", "reverse", "sort", "previous-token", "brackets", "text")
TEXT_LEVELS = ("char", "word")

# the task defaults: (vocab_size, seq_len); every other field has one default for all tasks
_TASK_SHAPES = {
    "induction": (32, 32),
    "copy": (12, 18),
    "reverse": (12, 18),
    "sort": (12, 18),
    "previous-token": (16, 24),
    "brackets": (8, 24),
    "text": (96, 32),
}


@dataclass
class TrainConfig:
    """What to train and how. ``TrainConfig(task="induction", seed=0)`` trains a 2-layer,
    4-head, attention-only decoder that forms induction heads (see docs/train.md).

    Model: ``layers`` blocks of attndesk's ``MultiHeadAttention`` (``heads`` query heads,
    ``kv_heads`` K/V heads, ``embed_dim`` wide, causal, optional sliding ``window`` and
    ``softcap``), each with an MLP when ``mlp`` and a pre-LayerNorm when ``layernorm``.
    ``vocab_size`` / ``seq_len`` None take the task's defaults (filled in on creation).
    ``text_path`` None with ``task="text"`` trains on the bundled sample.
    """

    task: str = "induction"
    seed: int = 0
    steps: int = 1000  # induction heads form in about 100-150 steps (docs/train.md)
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    grad_clip: float | None = 1.0
    layers: int = 2
    heads: int = 4
    kv_heads: int | None = None
    embed_dim: int = 64
    position: str = "rope"
    window: int | None = None
    softcap: float | None = None
    mlp: bool = False
    layernorm: bool = False
    vocab_size: int | None = None
    seq_len: int | None = None
    text_path: str | None = None
    text_level: str = "char"
    eval_every: int = 25  # steps between measurements of accuracy and pattern scores (256 sequences)
    checkpoint_every: int = 50  # steps between checkpoints kept in memory (heads form early)
    checkpoint_budget: int = 64 * 2**20  # bytes of checkpoints kept in memory
    probe_every_ms: int = 500  # a probe snapshot at most this often (callbacks)

    def __post_init__(self) -> None:
        if isinstance(self.task, str) and self.task in _TASK_SHAPES:
            vocab, length = _TASK_SHAPES[self.task]
            if self.vocab_size is None:
                self.vocab_size = vocab
            if self.seq_len is None:
                self.seq_len = length

    def validate(self) -> TrainConfig:
        """Raise ConfigError naming the first bad value and what would work; return self."""
        choice("task", self.task, TASK_NAMES)
        for name in (
            "steps",
            "batch_size",
            "layers",
            "heads",
            "embed_dim",
            "vocab_size",
            "seq_len",
            "eval_every",
            "checkpoint_every",
            "checkpoint_budget",
        ):
            whole_number(name, getattr(self, name))
        whole_number("probe_every_ms", self.probe_every_ms, minimum=0)
        whole_number("seed", self.seed, minimum=0, maximum=2**63 - 1)
        real_number("lr", self.lr, low=0.0, high=10.0)
        if self.lr <= 0:
            raise ConfigError(f"lr must be above 0, got {self.lr}", field="lr")
        real_number("weight_decay", self.weight_decay, low=0.0, high=10.0)
        if self.grad_clip is not None:
            real_number("grad_clip", self.grad_clip, low=0.0, high=1e6)
        choice("position", self.position, TRAIN_POSITIONS)
        choice("text_level", self.text_level, TEXT_LEVELS)
        boolean("mlp", self.mlp)
        boolean("layernorm", self.layernorm)
        self._check_heads()
        if self.window is not None:
            whole_number("window", self.window)
        if self.softcap is not None and not (
            isinstance(self.softcap, (int, float))
            and not isinstance(self.softcap, bool)
            and math.isfinite(self.softcap)
            and self.softcap > 0
        ):
            raise ConfigError(
                f"softcap must be a positive finite number or None, got {self.softcap!r}", field="softcap"
            )
        if self.length < 4:
            raise ConfigError(f"seq_len must be at least 4 tokens, got {self.seq_len}", field="seq_len")
        if self.embed_dim * self.layers > 8192 or self.length > 2048:
            raise ConfigError(
                "this trainer is for small models: width (embed_dim) x layers at most 8192 and seq_len at most 2048",
                field="embed_dim",
            )
        return self

    def _check_heads(self) -> None:
        if self.embed_dim % self.heads:
            raise ConfigError(
                f"{self.heads} heads do not divide the width (embed_dim) {self.embed_dim}; valid head counts: "
                f"{', '.join(map(str, divisors(self.embed_dim)[:12]))}",
                field="heads",
            )
        if self.kv_heads is not None:
            whole_number("kv_heads", self.kv_heads)
            if self.heads % self.kv_heads:
                raise ConfigError(
                    f"{self.kv_heads} K/V heads cannot be shared evenly by {self.heads} query heads; "
                    f"valid: {', '.join(map(str, divisors(self.heads)))}",
                    field="kv_heads",
                )
        if self.position == "rope" and (self.embed_dim // self.heads) % 2:
            raise ConfigError(
                f"RoPE needs an even head dimension; width (embed_dim) {self.embed_dim} / {self.heads} heads "
                f"= {self.embed_dim // self.heads}",
                field="position",
            )

    @property
    def vocab(self) -> int:
        """``vocab_size`` as an int: the task's default is filled in on creation, validate() refuses the rest."""
        assert self.vocab_size is not None, "an unknown task (validate() refuses it)"
        return self.vocab_size

    @property
    def length(self) -> int:
        """``seq_len`` as an int (as ``vocab``)."""
        assert self.seq_len is not None, "an unknown task (validate() refuses it)"
        return self.seq_len

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.heads

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """From a plain dict (a saved run's config); unknown keys are a ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError("a training configuration must be a mapping of field names to values")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown training field(s): {', '.join(unknown)}")
        return cls(**data)
