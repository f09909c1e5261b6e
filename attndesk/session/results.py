"""What the compute controller publishes and the views draw: typed records, no ``Any``.

A ``Shown`` is one result as the window presents it, whatever mode made it: the ``AttentionMap``
the heatmaps draw (with its heatmap source, built off the GUI thread), the run's facts for the
timing panel and the status line, the tokens for the token table, and the mode's own run for the
views that need more than one map (``toy``: the toy result and its input texts, for the
step-through, positions, compare and the teaching pairs; ``layers``: every layer of a real
model, for the grid, rollout and per-layer statistics). A view asks for the part it needs and
says so when the result lacks it.

``run_id`` / ``shown_id`` come from the controller's one counter: a run's result keeps its
``run_id`` when another view of it is presented (e.g. another layer), which gets a new
``shown_id``. Side jobs are tied to one or the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attndesk.attention.types import AttentionMap
from attndesk.models import PretrainedResult
from attndesk.runs.plan import RunPlan
from attndesk.runs.result import AttentionResult
from attndesk.runs.tokenizer import PAD_ID
from attndesk.system.timing import TimedRun

from .state import ModeId

if TYPE_CHECKING:  # annotation only: the heatmap widgets' source protocol (panels import this module)
    from attndesk.app.sources.heatmap_source import HeatmapSource
    from attndesk.teaching.diff import TeachingComparison


@dataclass(frozen=True)
class RunFacts(TimedRun):
    """What the timing panel and the status line say about a run."""

    timings: dict[str, float]  # stage -> seconds, in order, then "total"
    flops: int
    peak_bytes: int
    device: str
    dtype: str


@dataclass(frozen=True)
class TokenRows:
    """One side's tokens as the model saw them (ids, and which became [UNK])."""

    tokens: list[str]
    ids: np.ndarray
    unknown: list[bool] | None = None
    raw: list[str] | None = None  # the tokenizer's own tokens where they differ in spelling from ``tokens``
    labels: list[str] | None = None  # what each token is, shown in place of its id (an image's patches)


@dataclass(frozen=True, eq=False)
class ToyRun:
    """A toy-model result and the texts it was computed from (results do not keep their input)."""

    result: AttentionResult
    text: str
    key_text: str | None
    # trained weights: the same input through the model's random initial weights (A) and the
    # trained ones (B), for the compare tab's "before vs after training"
    before_after: TeachingComparison | None = None


@dataclass(frozen=True, eq=False)
class Shown:
    """One result as presented (see the module docstring)."""

    mode: ModeId
    map: AttentionMap
    source: HeatmapSource
    facts: RunFacts
    queries: TokenRows
    keys: TokenRows | None  # None: self-attention (the keys are the queries)
    notices: tuple[str, ...] = ()
    toy: ToyRun | None = None
    layers: PretrainedResult | None = None
    layer: int | None = None  # which of ``layers`` the map shows
    output: np.ndarray | None = None  # [Lq, E]: the layer's output for the map's query rows (compare's "output")
    asked: frozenset[str] = frozenset()  # what the run was asked to keep (e.g. "intermediates")
    present_key: Hashable = None  # the presentation choices this map reflects (e.g. layer, hidden tokens)
    run_id: int = 0
    shown_id: int = 0
    new_run: bool = True  # False: another view of a run already shown (the timing history stays)

    def replace(self, **changes) -> Shown:
        return dataclasses.replace(self, **changes)

    @property
    def length(self) -> int:
        return len(self.queries.tokens)

    @property
    def indexable(self) -> bool:
        """Whether the map holds every weight by position (a memory-bounded run keeps an overview)."""
        w = self.map.weights
        return self.map.pyramid is None and np.ndim(w) == 3 and tuple(np.shape(w)[1:]) == self.map.shape


@dataclass(frozen=True)
class Job:
    """A callable for the worker, its arguments, and the status line while it runs. ``announce``:
    the controller passes ``announce=callable`` for reports made before the result (a run's plan)."""

    fn: Callable[..., object]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    description: str = "computing"
    announce: bool = False


@dataclass(frozen=True)
class Request:
    """What the active mode would run for the current state. Equal ``key``s are the same run;
    ``needs`` are extras a run must be asked for (a run asked for them satisfies a request
    that needs fewer)."""

    key: Hashable
    job: Job
    needs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Held:
    """The worker's answer for a long run that only an explicit Run (F5) starts."""

    plan: RunPlan


@dataclass(frozen=True)
class ConfigProblem:
    """A config the core refuses: its message, and the field at fault (None: no single one)."""

    message: str
    field: str | None = None


class InputProblem(ValueError):
    """The text (not a parameter) is unusable: said in the status bar, not next to a control."""


def format_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def size_words(queries: int, keys: int, cross: bool) -> str:
    return f"{queries} tokens" if not cross else f"{queries} queries × {keys} keys"


def done_line(shown: Shown) -> str:
    """The status line once a result is on screen."""
    keys = shown.keys.tokens if shown.keys is not None else shown.queries.tokens
    heads = shown.map.num_heads
    size = size_words(len(shown.queries.tokens), len(keys), shown.keys is not None)
    line = (
        f"done in {format_seconds(shown.facts.total_seconds)} · {size} · {heads} head{'s' if heads != 1 else ''}"
        f" · {shown.facts.device}"
    )
    if shown.notices:
        line += " · " + "; ".join(shown.notices)
    return line


def notices_of(*groups: Sequence[str | None]) -> tuple[str, ...]:
    """Notices in order, each once (None and empty ones left out)."""
    return tuple(dict.fromkeys(n for group in groups for n in group if n))


__all__ = [
    "ConfigProblem",
    "Held",
    "InputProblem",
    "Job",
    "Request",
    "RunFacts",
    "Shown",
    "TokenRows",
    "ToyRun",
    "done_line",
    "format_seconds",
    "notices_of",
    "size_words",
    "text_of",
]


def text_of(result: AttentionResult) -> str:
    """The input text back from a toy result: its tokens without padding, joined by spaces
    (the word tokenizer splits that into the same tokens; padding comes back from pad_to)."""
    return " ".join(t for t, i in zip(result.tokens, result.token_ids) if int(i) != PAD_ID)
