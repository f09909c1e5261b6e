"""TrainConfig: one validated set of choices behind a training run (task, model, optimiser)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attndesk.attention.sinks import SINK_KINDS
from attndesk.errors import ConfigError
from attndesk.runs.config import divisors
from attndesk.runs.fields import check_value, fields_of, param

# where token order enters: added to the embeddings (sinusoidal, learned), rotating Q and K
# (rope), a distance penalty on the scores (alibi), or nowhere (none)
TRAIN_POSITIONS = ("sinusoidal", "rope", "alibi", "learned", "none")
TASK_NAMES = ("induction", "copy", "reverse", "sort", "previous-token", "brackets", "needle", "text")
TEXT_LEVELS = ("char", "word")

# the task defaults: (vocab_size, seq_len); every other field has one default for all tasks
_TASK_SHAPES = {
    "induction": (32, 32),
    "copy": (12, 18),
    "reverse": (12, 18),
    "sort": (12, 18),
    "previous-token": (16, 24),
    "brackets": (8, 24),
    "needle": (32, 40),
    "text": (96, 32),
}


@dataclass
class TrainConfig:
    """What to train and how. ``TrainConfig(task="induction", seed=0)`` trains a 2-layer,
    4-head, attention-only decoder that forms induction heads (see docs/train.md).

    Model: ``layers`` blocks of attndesk's ``MultiHeadAttention`` (``heads`` query heads,
    ``kv_heads`` K/V heads, ``embed_dim`` wide, causal, optional sliding ``window`` and
    ``softcap``, a softmax ``sink``: "learned" per-head sink logits trained with the rest, or
    "off-by-one", a sink fixed at 0), each with an MLP when ``mlp`` and a pre-LayerNorm when ``layernorm``.
    ``vocab_size`` / ``seq_len`` None take the task's defaults (filled in on creation).
    ``text_path`` None with ``task="text"`` trains on the bundled sample.

    Every field is declared once with ``param`` (``runs.fields``): its checks, the Train tab's
    form (the fields with a ``label``) and ``attndesk train``'s flags (the fields with a ``flag``)
    are built from these declarations (``TRAIN_FIELDS``).
    """

    task: str = param(
        "induction",
        kind=str,
        choices=TASK_NAMES,
        label="Task",
        tip="what the model learns to predict (docs/train.md)",
        flag="--task",
    )
    layers: int = param(2, kind=int, low=1, window_max=8, label="Layers", tip="decoder blocks", flag="--layers")
    heads: int = param(
        4,
        kind=int,
        low=1,
        window_max=32,
        label="Heads",
        tip="query heads per layer; they must divide the width",
        flag="--heads",
    )
    kv_heads: int | None = param(
        None,
        kind=int,
        low=1,
        none="one per query head",
        control="zero",
        window_max=32,
        label="K/V heads",
        tip="K/V heads shared by the query heads (grouped-query attention); they must divide the heads",
        flag="--kv-heads",
    )
    embed_dim: int = param(
        64,
        kind=int,
        low=1,
        window_max=1024,
        label="Width",
        tip="embed_dim: the residual stream's width",
        flag="--embed-dim",
    )
    position: str = param(
        "rope",
        kind=str,
        choices=TRAIN_POSITIONS,
        label="Positions",
        tip="where token order enters the model",
        flag="--position",
    )
    window: int | None = param(
        None,
        kind=int,
        low=1,
        none="global",
        control="zero",
        window_max=2048,
        label="Window",
        tip="sliding window W: each query sees its last W tokens",
        flag="--window",
    )
    softcap: float | None = param(
        None,
        kind=float,
        low=0.0,
        low_open=True,
        must_be="a positive finite number",
        none="no cap",
        control="zero",
        window_max=1000,
        step=5.0,
        decimals=1,
        label="Soft-cap",
        tip="soft-cap C on the scores: C·tanh(score / C)",
        flag="--softcap",
    )
    sink: str = param(
        "none",
        kind=str,
        choices=SINK_KINDS,
        label="Sink",
        tip="a softmax sink: learned per-head sink logits, or off-by-one (a sink fixed at 0); rows then sum to less than 1",
        flag="--sink",
    )
    mlp: bool = param(False, kind=bool, label="MLP", tip="a 4x GELU MLP after each attention layer", flag="--mlp")
    layernorm: bool = param(
        False, kind=bool, label="LayerNorm", tip="pre-LayerNorm before each sublayer", flag="--layernorm"
    )
    vocab_size: int | None = param(
        None, kind=int, low=1, none="the task's", label="", tip="vocabulary", flag="--vocab-size"
    )
    seq_len: int | None = param(
        None,
        kind=int,
        low=4,
        high=2048,
        none="the task's",
        window_max=512,
        label="Sequence length",
        tip="tokens per training sequence",
        flag="--seq-len",
    )
    text_path: str | None = param(
        None,
        kind=str,
        none="the bundled sample",
        label="",
        tip="the text task's UTF-8 file",
        flag="--text-file",
        metavar="PATH",
    )
    text_level: str = param(
        "char",
        kind=str,
        choices=TEXT_LEVELS,
        label="Text level",
        tip="the text task's tokens: characters or words",
        flag="--level",
    )
    steps: int = param(
        1000, kind=int, low=1, window_max=1_000_000, label="Steps", tip="optimiser steps", flag="--steps"
    )  # induction heads form in about 100-150 steps (docs/train.md)
    batch_size: int = param(
        64, kind=int, low=1, window_max=4096, label="Batch", tip="sequences per step", flag="--batch-size"
    )
    lr: float = param(
        3e-3,
        kind=float,
        low=0.0,
        low_open=True,
        high=10.0,
        must_be="above 0 and at most 10",
        decimals=5,
        step=1e-3,
        label="Learning rate",
        tip="AdamW's learning rate",
        flag="--lr",
    )
    weight_decay: float = param(0.01, kind=float, low=0.0, high=10.0, label="", tip="AdamW's weight decay", flag="")
    head_l1: float = param(
        0.0,
        kind=float,
        low=0.0,
        high=10.0,
        label="",
        tip="weight of a group-lasso penalty on each head's value and output weights (head sparsity)",
        flag="",
    )  # loss + head_l1 * head_norms(model) (model.head_norms); 0 trains on the loss alone
    grad_clip: float | None = param(
        1.0, kind=float, low=0.0, high=1e6, none="no clipping", label="", tip="gradient norm clip", flag=""
    )
    seed: int = param(
        0,
        kind=int,
        low=0,
        high=2**63 - 1,
        window_max=2**31 - 1,
        label="Seed",
        tip="seed of the weights and the data: the same seed trains the same model, step for step",
        flag="--seed",
    )
    eval_every: int = param(
        25, kind=int, low=1, label="", tip="steps between measurements of accuracy and pattern scores", flag=""
    )  # 256 sequences each
    checkpoint_every: int = param(
        10,  # the animation picks its frames among them (render.training.animation_steps)
        kind=int,
        low=1,
        window_max=100_000,
        label="Checkpoint every",
        tip="steps between kept checkpoints (held within a memory budget: older ones are thinned out)",
        flag="--checkpoint-every",
    )
    checkpoint_budget: int = param(
        64 * 2**20, kind=int, low=1, unit="bytes", label="", tip="bytes of checkpoints kept in memory", flag=""
    )
    probe_every_ms: int = param(
        500, kind=int, low=0, label="", tip="a probe snapshot at most this often (callbacks)", flag=""
    )

    def __post_init__(self) -> None:
        if isinstance(self.task, str) and self.task in _TASK_SHAPES:
            vocab, length = _TASK_SHAPES[self.task]
            if self.vocab_size is None:
                self.vocab_size = vocab
            if self.seq_len is None:
                self.seq_len = length

    def validate(self) -> TrainConfig:
        """Raise ConfigError naming the first bad value and what would work; return self."""
        for spec in TRAIN_FIELDS:
            check_value(spec, getattr(self, spec.name))
        self._check_heads()
        if self.embed_dim * self.layers > 8192:
            raise ConfigError(
                "this trainer is for small models: width (embed_dim) x layers at most 8192",
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
        if self.kv_heads is not None and self.heads % self.kv_heads:
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


TRAIN_FIELDS = fields_of(TrainConfig)  # the spec: every field's declaration, in order
