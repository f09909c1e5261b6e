"""What every eviction policy shares: its options, the budget, the selection rule, and what it reads.

A policy decides, for each query row t and each (layer, K/V head), which keys 0..t stay visible:
the row of the keep mask. Three kinds (``Policy.kind``):

- ``"prefill"``: scores the prompt's keys once, after the prefill, from the prefill's own arrays
  (what a server sees: kvpress's presses). The prompt's rows stay full (causal); decode row t keeps
  the ``g = t - P + 1`` generated keys (the newest ``budget`` of them) and the prompt's top
  ``budget - g`` keys: the cache holds ``budget`` keys and each new key pushes out the lowest-scored
  prompt key. ``prefill_keep(budget)`` is the cache right after the prefill (the set compared with
  kvpress).
- ``"stream"``: evicts as it reads, from the first row (StreamingLLM, recency): row t's candidates
  are row t-1's visible keys and the new key t (an evicted key never comes back).
- ``"adaptive"``: prompt rows full, then from the first decode row the candidates are the previous
  row's keys and the new key, ranked by scores read from the compressed run itself (H2O's
  accumulated attention, TOVA's last query).

The oracle is apart: each decode row keeps the keys the full run's same query attends to most
(no cache: an evicted key may come back), the upper bound a per-step selection can reach.

**Selection and ties.** Keys are ranked by (protected, score, position), highest first, and the
first ``budget`` are kept: a protected key (a sink, a window, the newest key) always ranks above
a scored one, and of two keys with the same score the later one is kept. kvpress breaks exact ties
by ``torch.topk``'s order, which is unspecified; its scores tie only inside the blocks it protects
(sinks, windows, padded with max + 1), so both agree whenever the budget keeps those blocks whole.

**Grouped K/V heads.** Every score is per K/V head: where a policy reads attention weights or
queries, it averages over the query heads of the group, as kvpress does (TOVA averages over every
head). Qt-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from attndesk.errors import ConfigError
from attndesk.runs.fields import Param, check_value, fields_of

from .model import KVModel, Pass

Kind = Literal["prefill", "stream", "adaptive", "oracle"]


@dataclass(frozen=True)
class NoOptions:
    """A policy without options."""


def top_keys(
    scores: np.ndarray, candidates: np.ndarray, budget: int | np.ndarray, protected: np.ndarray | None = None
) -> np.ndarray:
    """bool [..., n]: the first ``budget`` candidates by (protected, score, position), highest first.

    ``scores`` float [..., n] (finite where a candidate), ``candidates`` bool [..., n], ``budget`` an int
    or an int array broadcast over the leading axes. The tie rule of the module docstring: of two
    equal keys the later one is kept.
    """
    s = np.where(candidates, np.asarray(scores, np.float64), -np.inf)
    if protected is not None:
        s = np.where(protected & candidates, np.inf, s)
    n = s.shape[-1]
    order = np.argsort(-s[..., ::-1], axis=-1, kind="stable")  # reversed: a stable sort puts later keys first
    positions = n - 1 - order
    take = np.arange(n) < np.asarray(budget)[..., None]
    keep = np.zeros(s.shape, bool)
    np.put_along_axis(keep, positions, np.broadcast_to(take, s.shape), axis=-1)
    return keep & candidates


def group_mean(per_query_head: np.ndarray, kv_heads: int) -> np.ndarray:
    """[H, ...] -> [KV, ...]: the mean over each K/V head's group of query heads (float64)."""
    h = per_query_head.shape[0]
    return np.asarray(per_query_head, np.float64).reshape(kv_heads, h // kv_heads, *per_query_head.shape[1:]).mean(1)


def resolve_budget(budget: int | float, prompt: int) -> int:
    """A budget as tokens per K/V head: an int (>= 1) as it is, a ratio in (0, 1] of the prompt's
    length as ``max(1, int(prompt * ratio))`` (kvpress's count for a compression ratio 1 - ratio)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)):
        raise ConfigError(f"the budget is a token count or a ratio in (0, 1], got {budget!r}")
    if isinstance(budget, (int, np.integer)):
        if budget < 1:
            raise ConfigError(f"a budget of {int(budget)} keeps no key: give at least 1 token (or a ratio above 0)")
        return int(budget)
    if not 0 < budget <= 1:
        raise ConfigError(f"a budget ratio is in (0, 1] of the prompt, got {budget}")
    return max(1, int(prompt * float(budget)))


@dataclass
class View:
    """What a policy reads: the model's shape, the prompt length ``prompt`` (P), the prefill pass
    over the prompt (``prefill``: its arrays are [.., P, ..]) and, for the adaptive kind, the
    compressed run so far (``rows[t]``: row t's weights [layers, H, t + 1])."""

    model: KVModel
    ids: list[int]
    prompt: int
    prefill: Pass  # (a check before the run reads only the model, the prompt's length and the budget)
    budget: int = 0  # the run's budget (keys per K/V head)
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    cache: dict[Any, Any] = field(default_factory=dict)  # a policy's per-run memo (scores, allocations)

    @property
    def layers(self) -> int:
        return self.model.layers

    @property
    def kv_heads(self) -> int:
        return self.model.kv_heads


class Policy:
    """One eviction policy: its name, one line about it, its options (a dataclass of ``param`` fields)."""

    name: ClassVar[str]
    title: ClassVar[str]
    about: ClassVar[str]
    kind: ClassVar[Kind] = "prefill"
    options: ClassVar[type] = NoOptions

    # -- options ---------------------------------------------------------------------------------
    @classmethod
    def option_fields(cls) -> tuple[Param, ...]:
        return fields_of(cls.options)

    @classmethod
    def parse(cls, given: dict[str, Any]) -> Any:
        """The options instance from keyword values; an option the policy does not take is refused."""
        fields = {p.name: p for p in cls.option_fields()}
        for key, value in given.items():
            if key not in fields:
                takes = f"its options: {', '.join(fields)}" if fields else "it takes no options"
                raise ConfigError(f"{cls.name} takes no option {key!r}; {takes}", field=key)
            check_value(fields[key], value)
        return cls.options(**given)

    def check(self, view: View, budget: int, opts: Any) -> None:
        """Refuse a combination that cannot work (an option against the prompt's length or the budget)."""

    # -- the prefill kind --------------------------------------------------------------------------
    def prefill_scores(self, view: View, opts: Any) -> np.ndarray:
        """float64 [layers, KV, P]: each prompt key's score after the prefill (higher = kept)."""
        raise NotImplementedError

    def prefill_protected(self, view: View, opts: Any) -> np.ndarray | None:
        """bool [layers, KV, P]: prompt keys kept before any scored one (None: none)."""
        return None

    def prefill_keep(self, view: View, budget: int, opts: Any) -> np.ndarray:
        """bool [layers, KV, P]: the prompt's keys in the cache right after the prefill, ``budget`` per
        K/V head (on average, for a policy that moves budget between heads)."""
        key = ("prefill_keep", budget)
        if key not in view.cache:
            shape = (view.layers, view.kv_heads, view.prompt)
            if budget <= 0:
                view.cache[key] = np.zeros(shape, bool)
            elif budget >= view.prompt:
                view.cache[key] = np.ones(shape, bool)
            else:
                scores = self._scores(view, opts)
                candidates = np.ones(scores.shape, bool)
                view.cache[key] = self.allocate(
                    view, scores, candidates, budget, self.prefill_protected(view, opts), opts
                )
        return view.cache[key]

    def _scores(self, view: View, opts: Any) -> np.ndarray:
        if "scores" not in view.cache:
            view.cache["scores"] = self.prefill_scores(view, opts)
        return view.cache["scores"]

    def allocate(
        self,
        view: View,
        scores: np.ndarray,
        candidates: np.ndarray,
        budget: int,
        protected: np.ndarray | None,
        opts: Any,
    ) -> np.ndarray:
        """The kept keys given scores [layers, KV, n]: the top ``budget`` in every head (PyramidKV and
        AdaKV override it to move budget between layers or heads)."""
        return top_keys(scores, candidates, budget, protected)

    # -- the stream and adaptive kinds -------------------------------------------------------------
    def row_scores(self, view: View, t: int, opts: Any) -> np.ndarray:
        """float64 [layers, KV, t + 1]: the scores of keys 0..t at row t."""
        raise NotImplementedError

    def row_protected(self, view: View, t: int, budget: int, opts: Any) -> np.ndarray | None:
        """bool [layers, KV, t + 1]: keys of row t kept before any scored one."""
        return None

    def stream_keep(self, view: View, n: int, budget: int, opts: Any) -> np.ndarray | None:
        """bool [layers, KV, n, n]: the stream kind's keep rows 0..n-1 at once, where its rule has a
        closed form (equal to the rows ``row_scores`` and ``row_protected`` give one by one); None:
        row by row."""
        return None


def options_dict(opts: Any) -> dict[str, Any]:
    return dataclasses.asdict(opts)


__all__ = [
    "Kind",
    "NoOptions",
    "Policy",
    "View",
    "group_mean",
    "options_dict",
    "resolve_budget",
    "top_keys",
]
