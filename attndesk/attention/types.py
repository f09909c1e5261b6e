"""Typed records shared by the core, the window, the renderer and the CLI.

- ``Head``: which weights a view means, a head index or ``MEAN`` (their mean over heads).
- ``Intermediates``: every stage of one attention layer's computation, for the step-through
  (the x-transformers ``Intermediates`` idea, for one batch item; numpy, float32), and the
  step-through's stage names (``BASE_STAGES``, ``SHOWN_STAGES``, ``LAYER_STAGES``, ``PER_HEAD_STAGES``,
  ``KV_STAGES``), declared once for the window and the trainer.
- ``AttentionMap``: one set of H heads over queries x keys, ready to draw, export or inspect,
  whatever produced it (the toy model, one layer of a real model, a cross-attention block).

Everything here is plain numpy and Python: safe to hand from the worker to the GUI thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # annotations only: types.py stays import-light
    from attndesk.runs.pyramid import AttentionPyramid

    from .blocked import ExactAttention

MEAN: Literal["mean"] = "mean"
Head = int | Literal["mean"]


def head_name(layer: int | None, head: int) -> str:
    """How every view, page, export and CLI table names a head for a person: ``L1 H3``, layer and head
    counted from 0 as the window's layer and head controls count them (layer 1 is the second); ``H3``
    alone where the run has a single attention layer (the toy model)."""
    return f"H{head}" if layer is None else f"L{layer} H{head}"


@dataclass(frozen=True, eq=False)
class Intermediates:
    """One layer's stages for one sequence (H query heads, KV key/value heads, d per head).

    ``q_raw`` / ``k_raw`` are the projections before a rotary embedding (None without one);
    ``q`` [H, Lq, d] and ``k`` [KV, Lk, d] are what the scores use; ``v`` [KV, Lk, d_v].
    Score stages are [H, Lq, Lk]: ``scores`` = Q K^T, ``scaled`` = scores x scale,
    ``capped`` = C tanh(scaled / C) under a soft-cap, ``bias`` the additive score bias
    (ALiBi), ``masked`` = the softmax input (-inf where masked), ``weights`` after the softmax
    (and dropout), ``sink`` [H, Lq, 1] the share of each row a softmax sink took (``sink_logit`` [H, 1, 1] its
    logit per head), ``context`` [H, Lq, d_v] = weights @ V, ``output`` [Lq, E] after the merge.
    Fields a run did not produce are None.
    """

    embeddings: np.ndarray | None = None
    q_raw: np.ndarray | None = None
    k_raw: np.ndarray | None = None
    q: np.ndarray | None = None
    k: np.ndarray | None = None
    v: np.ndarray | None = None
    scores: np.ndarray | None = None
    scaled: np.ndarray | None = None
    capped: np.ndarray | None = None
    bias: np.ndarray | None = None
    masked: np.ndarray | None = None
    weights: np.ndarray | None = None
    sink: np.ndarray | None = None
    sink_logit: np.ndarray | None = None
    context: np.ndarray | None = None
    output: np.ndarray | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Intermediates:
        """From a stage-name -> array mapping (unknown names are a programming error)."""
        unknown = set(arrays) - set(cls.names())
        if unknown:
            raise KeyError(f"unknown intermediate stage(s): {', '.join(sorted(unknown))}")
        return cls(**dict(arrays))

    def available(self) -> tuple[str, ...]:
        """The stages this run kept, in computation order."""
        return tuple(name for name in self.names() if getattr(self, name) is not None)


# The step-through's stage names, declared once (the window's step-through and the trainer's
# stacked stages read them). The 2017 layer's ten stages, always there:
BASE_STAGES = ("embeddings", "q", "k", "v", "scores", "scaled", "masked", "weights", "context", "output")
# Every stage a run can show, in the order of the computation: the ``Intermediates`` fields, but
# with "angles" (RoPE's rotation angle of every position and dimension pair, derived from the
# positions) and without "sink_logit" (a number per head, shown in the sink's formula, not a matrix).
SHOWN_STAGES = (
    "embeddings",
    "q_raw",
    "k_raw",
    "angles",
    "q",
    "k",
    "v",
    "scores",
    "scaled",
    "capped",
    "bias",
    "masked",
    "weights",
    "sink",
    "context",
    "output",
)
LAYER_STAGES = ("embeddings", "output")  # one per layer, shared by its heads
PER_HEAD_STAGES = frozenset(SHOWN_STAGES) - {*LAYER_STAGES, "angles"}  # one matrix per query head
KV_STAGES = frozenset({"k_raw", "k", "v"})  # one per K/V head; their rows are the keys


@dataclass(eq=False)
class AttentionMap:
    """H heads of attention weights over ``queries`` (rows) x ``keys`` (columns), to show.

    ``weights`` float32 [H, Lq, Lk], rows summing to 1 over attendable keys, unless ``pyramid``
    is set: then it is a display overview [H, R, C] of tile maxima (see ``AttentionPyramid``)
    and ``exact`` recomputes exact cells. ``mask`` [Lq, Lk] bool, True = may attend (the
    overview's [R, C] tile mask with a pyramid), None when nothing is masked.

    ``kv_heads`` < H: grouped-query heads; query head h reads K/V head h // (H // kv_heads).
    ``window``: the sliding window W (query i sees keys with |i - j| < W), None when global.
    ``hidden_mass`` [H, Lq]: the share of each row that went to keys a view hid (rows are not
    re-normalised). ``head_labels`` default to ``head_name``'s "H0", "H1", ...
    """

    queries: list[str]
    keys: list[str]
    weights: np.ndarray
    mask: np.ndarray | None = None
    title: str = ""
    summary: str = ""  # the one-line caption a figure carries (model, shape, mask)
    file_tag: str = ""  # a short tag for exported file names
    head_labels: list[str] | None = None
    kv_heads: int | None = None
    window: int | None = None
    layer_kind: str | None = None  # e.g. "global" / "local" for models mixing both
    alibi_slopes: np.ndarray | None = None  # [H]: ALiBi's per-head slope, bias = -slope |i - j|
    hidden_mass: np.ndarray | None = None
    legend: str = ""
    notices: list[str] = field(default_factory=list)
    pyramid: AttentionPyramid | None = None
    exact: ExactAttention | None = None

    @property
    def num_heads(self) -> int:
        return int(self.weights.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """(queries, keys) of the attention matrix, whatever ``weights`` holds."""
        return (len(self.queries), len(self.keys))

    @property
    def exact_weights(self) -> bool:
        """True when ``weights`` is the exact float32 [H, Lq, Lk] matrix."""
        return self.pyramid is None and self.weights.dtype == np.float32

    @property
    def groups(self) -> int:
        """Query heads per K/V head (1 without grouping)."""
        kv = self.kv_heads or self.num_heads
        return max(1, self.num_heads // kv)

    def kv_head_of(self, head: int) -> int:
        """The K/V head that query head ``head`` reads."""
        return int(head) // self.groups

    def label(self, head: int) -> str:
        if self.head_labels is not None:
            return self.head_labels[int(head)]
        return head_name(None, int(head))

    def weight_at(self, head: Head, q: int, k: int) -> float:
        """The exact weight of query q on key k for ``head`` (an int, or MEAN)."""
        if self.exact is not None and not self.exact_weights:
            return self.exact.value(head, q, k)
        if head == MEAN:
            return float(self.weights[:, q, k].astype(np.float64).mean())
        return float(self.weights[int(head), q, k])


__all__ = [
    "BASE_STAGES",
    "KV_STAGES",
    "LAYER_STAGES",
    "MEAN",
    "PER_HEAD_STAGES",
    "SHOWN_STAGES",
    "AttentionMap",
    "Head",
    "Intermediates",
]
