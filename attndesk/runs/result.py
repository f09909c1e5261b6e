"""The one result record of a toy-model run: plain numpy and Python, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attndesk.attention.alibi import alibi_slopes
from attndesk.attention.types import AttentionMap, Head, Intermediates
from attndesk.system.timing import TimedRun

from .config import AttentionConfig

if TYPE_CHECKING:  # only for annotations: result.py stays import-light
    from attndesk.attention.blocked import ExactAttention

    from .plan import RunPlan
    from .pyramid import AttentionPyramid

# the phases every run times, in order; long runs add OVERVIEW (the display pyramid) after them
STAGES = ("embed", "projections", "attention", "weighted sum", "output projection")
OVERVIEW = "overview"


@dataclass
class AttentionResult(TimedRun):
    """Everything a view needs to draw one run.

    Shapes (batch of one, L query tokens, Lk key tokens, H heads, E embed dim):
    ``weights`` [H, L, Lk] float32; ``output`` [L, E] (or [L, hidden_dim] single-head);
    ``mask`` [L, Lk] bool, True = may attend (None when nothing is masked).

    Memory-bounded runs (``plan.kind != "full"``, chosen when the full weights would not fit
    the memory budget) differ only in what ``weights``/``mask`` hold:

    - ``plan.kind == "pyramid"``: ``weights`` is the display overview, float32 [H, R, C] where
      each cell is the MAX of an f x f tile of the real matrix (f = ``pyramid.factor``;
      R = ceil(L/f), C = ceil(Lk/f)), and ``mask`` is [R, C] (False where the whole tile is
      masked). Safe to draw as-is; NOT indexable by token position. ``pyramid`` holds the tile
      max and mean of every head and of the head mean at several levels, and exact values of any
      cell/rows/region (``pyramid.value``, ``pyramid.region``).
    - ``plan.kind == "blocked"``: ``weights`` is the full [H, L, Lk] matrix in ``plan.storage``
      (float16 to halve it, or float32); ``mask`` is [L, Lk]; ``pyramid`` is built as well.

    In both, ``exact`` recomputes exact weights on demand; ``weight_at(h, q, k)`` works for
    every kind of run, and ``exact_weights`` says whether ``weights`` is the exact float32 matrix.
    ``timings`` holds seconds per stage (STAGES, then OVERVIEW on the bounded paths) and their
    sum under "total". ``unknown`` / ``key_unknown`` flag the tokens that became [UNK] (query
    and, for cross-attention, key side). ``intermediates`` every stage of the computation when
    the run was asked to keep them.
    """

    tokens: list[str]
    token_ids: np.ndarray  # [L] int64
    weights: np.ndarray  # [H, L, Lk] float32
    output: np.ndarray  # [L, E]
    timings: dict[str, float]  # stage -> seconds, then "total"
    flops: int
    peak_bytes: int
    device: str
    config: AttentionConfig
    mask: np.ndarray | None = None  # [L, Lk] bool
    key_tokens: list[str] | None = None  # cross-attention: the key/value sequence
    key_token_ids: np.ndarray | None = None
    intermediates: Intermediates | None = None
    notices: list[str] = field(default_factory=list)
    unknown: list[bool] | None = None  # [L]: the query token was outside the vocabulary
    key_unknown: list[bool] | None = None  # [Lk] for cross-attention
    plan: RunPlan | None = None  # what the run kept (None: a full run made before plans existed)
    pyramid: AttentionPyramid | None = None  # the overview + exact access (memory-bounded runs only)
    exact: ExactAttention | None = None  # exact recomputation (memory-bounded runs only)

    @property
    def num_heads(self) -> int:
        return int(self.weights.shape[0])

    @property
    def exact_weights(self) -> bool:
        """True when ``weights`` is the exact float32 [H, L, Lk] matrix (every full run)."""
        kept_all = self.plan is None or self.plan.kind != "pyramid"
        return kept_all and self.weights.dtype == np.float32

    @property
    def shape(self) -> tuple[int, int]:
        """(queries L, keys Lk) of the attention matrix, whatever ``weights`` holds."""
        return (len(self.tokens), len(self.keys))

    def weight_at(self, head: Head, q: int, k: int) -> float:
        """The exact weight of query q on key k for ``head`` (an int, or MEAN over heads)."""
        return AttentionMap.weight_at(self, head, q, k)  # type: ignore[arg-type]  # duck-typed: the same fields: weights, exact, exact_weights

    @property
    def keys(self) -> list[str]:
        """Token labels of the key axis (the query tokens for self-attention)."""
        return self.key_tokens if self.key_tokens is not None else self.tokens

    def attention_map(self) -> AttentionMap:
        """These weights as the map the window, the renderer and the CLI draw."""
        cfg = self.config
        slopes = alibi_slopes(self.num_heads).astype(np.float32) if cfg.position == "alibi" else None
        return AttentionMap(
            queries=list(self.tokens),
            keys=list(self.keys),
            weights=self.weights,
            mask=self.mask,
            title="cross-attention" if self.key_tokens is not None else "self-attention",
            summary=settings_summary(self),
            file_tag=file_tag(cfg, self.num_heads),
            kv_heads=cfg.num_kv_heads,
            window=cfg.window,
            alibi_slopes=slopes,
            notices=list(self.notices),
            pyramid=self.pyramid,
            exact=self.exact,
        )


def variant_parts(config: AttentionConfig) -> list[str]:
    """How the attention differs from the 2017 layer, in words (empty for plain MHA)."""
    parts = []
    kv = config.num_kv_heads
    if kv != config.num_heads:
        parts.append("multi-query (1 K/V head)" if kv == 1 else f"grouped-query ({kv} K/V heads)")
    if config.window is not None:
        parts.append(f"window {config.window}")
    if config.softcap is not None:
        parts.append(f"soft-cap {config.softcap:g}")
    if config.sink == "learned":
        logit = "drawn per head" if config.sink_logit is None else f"s = {config.sink_logit:g}"
        parts.append(f"learned sinks ({logit})")
    elif config.sink == "off-by-one":
        parts.append("off-by-one softmax")
    return parts


_POSITION_WORDS = {
    "sinusoidal": "sinusoidal positions",
    "rope": "RoPE",
    "alibi": "ALiBi",
    "none": "no positional encoding",
}


def settings_summary(result: AttentionResult) -> str:
    """One line naming everything that shaped these weights (for captions)."""
    cfg = result.config
    queries, keys = result.shape
    heads = result.num_heads
    parts = [
        f"{queries} tokens" if result.key_tokens is None else f"{queries} query x {keys} key tokens",
        f"{heads} head{'s' if heads != 1 else ''}",
        f"embed {cfg.embed_dim}",
        f"d_k {cfg.head_dim}",
        f"mask: {cfg.mask}",
        "scaled by 1/\u221ad_k" if cfg.scaled else "unscaled",
        _POSITION_WORDS[cfg.position],
        *variant_parts(cfg),
    ]
    if cfg.dropout:
        parts.append(f"dropout {cfg.dropout:g} ({'training' if cfg.training else 'eval, off'})")
    parts += [f"seed {cfg.seed}", f"{result.device} {cfg.dtype}"]
    return " \u00b7 ".join(parts)


def file_tag(cfg: AttentionConfig, heads: int) -> str:
    """A file-name stem, e.g. h8_e64_causal_scaled_rope_kv2_win16_seed0."""
    parts = [f"h{heads}", f"e{cfg.embed_dim}", cfg.mask.replace("+", "-"), "scaled" if cfg.scaled else "unscaled"]
    parts += {"sinusoidal": [], "none": ["nopos"], "rope": ["rope"], "alibi": ["alibi"]}[cfg.position]
    if cfg.num_kv_heads != cfg.num_heads:
        parts.append(f"kv{cfg.num_kv_heads}")
    if cfg.window is not None:
        parts.append(f"win{cfg.window}")
    if cfg.softcap is not None:
        parts.append(f"cap{cfg.softcap:g}")
    if cfg.sink != "none":
        parts.append(
            "ob1" if cfg.sink == "off-by-one" else "sink" + ("" if cfg.sink_logit is None else f"{cfg.sink_logit:g}")
        )
    if cfg.dropout and cfg.training:
        parts.append(f"drop{cfg.dropout:g}")
    parts.append(f"seed{cfg.seed}")
    if cfg.dtype != "float32":
        parts.append(cfg.dtype)
    return "_".join(parts)
