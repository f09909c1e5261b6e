"""Every choice the user makes in the window, in one evented model (psygnal + pydantic v2).

``AppState`` is the single source of truth: panels write their edits into it and redraw from
its events, the compute controller watches it to know when to run, and a session file is its
dump (``file.py``). Nothing here knows about Qt widgets.

- ``text`` / ``key_text`` / ``cross``: the input (keys/values come from ``key_text`` only when
  ``cross`` is on; the key text is kept while cross-attention is off).
- ``mode``: a typed ``ModeId`` ("toy", or "pretrained" with an optional model folder), never a
  display string.
- ``config``: the toy model's ``AttentionConfig`` (the core's one field list), validated only when
  a run or a session needs it: while the user edits, 6 heads for 64 dims is a state the panel
  explains, not an error. In the pretrained mode it keeps the toy settings; ``scaled`` and the
  causal part of ``mask`` act on the real model too.
- ``view``: colormap, shared or per-head scale, log colours, the shown head ("all", "mean" or a
  head), the display options (first key hidden, ALiBi's bias), the tab on screen, the zoomed
  region (not saved: it depends on the result).
- ``pretrained``: the layer shown, hidden special tokens, ablated heads, the grid's scale, and
  which part of an encoder-decoder is drawn (its encoder's, its decoder's self-attention, or the
  cross-attention of target rows over source columns).
- ``target_text``: an encoder-decoder's target (the decoder's input); other models ignore it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from psygnal import EventedModel
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    PlainSerializer,
    PlainValidator,
    model_validator,
)

from attndesk.attention.types import MEAN
from attndesk.runs.config import FIELDS, AttentionConfig

ALL: Literal["all"] = "all"
# Far beyond any model the window can load; a bound so that a session's 10**40 is refused in one line.
MAX_INDEX = 1 << 20
# Tab ids (``view.tab``): the central tabs; modes may add their own (e.g. "all-layers").
HEATMAPS_TAB = "heatmaps"
STEP_THROUGH_TAB = "step-through"
IMAGE_TAB = "image"  # a vision model's input and overlays

_STRICT = ConfigDict(strict=True, extra="forbid", validate_assignment=True)


class ModeId(BaseModel):
    """Which model computes: the toy model, or a pretrained one (``path`` None = the packaged
    all-MiniLM-L6-v2, else the absolute path of an opened model folder). Frozen: a mode is a
    value, compared by equality; adding a kind means adding it to ``kind`` and a Mode to handle it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    kind: Literal["toy", "pretrained"] = "toy"
    path: str | None = None

    @model_validator(mode="after")
    def _toy_has_no_folder(self) -> ModeId:
        if self.kind == "toy" and self.path is not None:
            raise ValueError("the toy model has no model folder")
        return self


TOY = ModeId()
PACKAGED = ModeId(kind="pretrained")


def _as_config(value: Any) -> AttentionConfig:
    """A session's config object (missing keys take the core's defaults); validated later."""
    if isinstance(value, AttentionConfig):
        return value
    if isinstance(value, Mapping):
        return AttentionConfig.from_dict(dict(value))
    raise ValueError(f"should be an object of model parameters, got {type(value).__name__}")


Config = Annotated[
    InstanceOf[AttentionConfig],
    BeforeValidator(_as_config),
    PlainSerializer(lambda config: config.to_dict(), return_type=dict),
]


def _target(value: Any) -> Any:
    if value in (ALL, MEAN) and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_INDEX:
        return value
    raise ValueError(f"should be 'all', 'mean' or a head number >= 0, got {value!r}")


Target = Annotated[Literal["all", "mean"] | int, PlainValidator(_target)]
Index = Annotated[int, Field(ge=0, lt=MAX_INDEX)]


def _tuples(value: Any) -> Any:
    """JSON arrays (a session file) as the tuples the state holds; anything else is validated as is."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


Pair = Annotated[tuple[Index, Index], BeforeValidator(_tuples)]
Part = Literal["self", "decoder", "cross"]  # an encoder-decoder's attention ("self" otherwise)
Region = Annotated[tuple[Pair, Pair], BeforeValidator(_tuples)]


# What the window's controls can show (each field's spec says): a session beyond these is refused,
# never clamped by a spin box (the core's own limits are checked by AttentionConfig.validate()).
WINDOW_MAX = {spec.name: spec.window_max for spec in FIELDS if spec.window_max is not None}


def window_problem(config: AttentionConfig) -> str | None:
    """Which value the window cannot show (a QSpinBox holds 32-bit numbers), or None."""
    for spec in FIELDS:
        problem = spec.window_problem(getattr(config, spec.name, None))
        if problem is not None:
            return problem
    return None


@dataclass(frozen=True)
class ModeChoice:
    """A Mode-combo entry: the typed mode and its label."""

    id: ModeId
    label: str
    tooltip: str = ""


@dataclass(frozen=True)
class PanelView:
    """How the parameters panel shows the state while a mode is on. ``fixed``: config fields shown
    with these values and disabled (a pretrained model's architecture); ``causal_only``: the mask
    combo offers none/causal and edits only the causal part (the toy model's padding choice is
    kept for it); ``info``: a line for the "Model" row ("6 layers x 12 heads"); ``toy_acts``: the
    fixed values are trained toy weights' shape, and the other controls act as their spec says (a
    real model's architecture, False, disables every control it does not use); ``off_choices``:
    choices of a field the mode cannot take now, greyed with the reason (field -> choice -> reason:
    the Train tab's model before anything is trained)."""

    fixed: dict[str, Any] = field(default_factory=dict)
    causal_only: bool = False
    mask_tip: str = ""
    info: str = ""
    toy_acts: bool = False
    off_choices: dict[str, dict[str, str]] = field(default_factory=dict)


class ViewState(EventedModel):
    """How results are drawn (nothing here starts a run, except a tab that needs more from one)."""

    model_config = _STRICT

    colormap: Literal["viridis", "magma", "CET-L1"] = "viridis"
    shared_scale: bool = True
    target: Target = ALL  # "all" heads, their "mean", or one head enlarged
    log_scale: bool = False  # colour log10 of the weights (a decoder's sink takes most of each row)
    hide_first_key: bool = False  # leave out key 0, rows renormalised over the rest (labelled so)
    alibi_bias: bool = False  # draw ALiBi's bias instead of the weights (ALiBi maps only)
    tab: str = HEATMAPS_TAB
    region: Region | None = Field(default=None, exclude=True)  # ((q0, q1), (k0, k1)) zoomed, end exclusive


class PretrainedState(EventedModel):
    """The pretrained mode's choices; layer and heads are checked against the model once it is known."""

    model_config = _STRICT

    layer: Index = 0
    hide_special: bool = False
    ablate: Annotated[
        tuple[Pair, ...], BeforeValidator(_tuples)
    ] = ()  # (layer, head) pairs whose output is zeroed, sorted
    grid_scale: Literal["per-head", "shared"] = "per-head"
    part: Part = "self"  # an encoder-decoder's view; "self" otherwise
    image: str = Field(
        default="", max_length=4096
    )  # a vision model's input: a file, "sample:NAME", "" = the first sample

    @model_validator(mode="after")
    def _sorted_pairs(self) -> PretrainedState:
        pairs = tuple(sorted(set(self.ablate)))
        if pairs != self.ablate:
            object.__setattr__(self, "ablate", pairs)  # one order: equal sets compare equal
        return self


class AppState(EventedModel):
    """The window's whole state; ``AppState()`` is the window of a first launch."""

    model_config = _STRICT

    text: str = Field(default="The cat sat on the mat because it was tired.", max_length=8 * 2**20)
    key_text: str = Field(default="Le chat dort sur le tapis.", max_length=8 * 2**20)
    cross: bool = False
    target_text: str = Field(default="", max_length=8 * 2**20)  # an encoder-decoder's decoder input
    mode: ModeId = TOY
    config: Config = Field(default_factory=AttentionConfig)
    view: ViewState = Field(default_factory=ViewState)
    pretrained: PretrainedState = Field(default_factory=PretrainedState)

    def keys_text(self) -> str | None:
        """The key/value text when cross-attention is on, else None (self-attention)."""
        return self.key_text if self.cross else None

    def set_config(self, **changes: Any) -> None:
        """Change some config fields (one ``config`` event; the new config is not validated)."""
        config = self.config.replace(**changes)
        if config != self.config:
            self.config = config

    def assign(self, other: AppState) -> None:
        """Become ``other`` (a loaded session): every changed field emits its event once."""
        for name in ("view", "pretrained"):
            getattr(self, name).update(getattr(other, name).model_dump(exclude={"region"}))
        self.view.region = None
        self.update(
            {name: getattr(other, name) for name in ("text", "key_text", "cross", "target_text", "mode", "config")}
        )


def state_from_flags(flags: Mapping[str, Any], *, text: str | None = None, key_text: str | None = None) -> AppState:
    """The state a command line describes (``attndesk render``): every flag named like a config
    field (the spec's dest) sets it, the rest keep the core's defaults; a flag named like a view
    setting sets that."""
    config = AttentionConfig.from_dict({spec.name: flags[spec.name] for spec in FIELDS if spec.name in flags})
    view = {k: v for k, v in flags.items() if k in ("colormap", "shared_scale", "log_scale")}
    state = AppState(config=config, view=ViewState(**view))
    if text is not None:
        state.text = text
    if key_text is not None:
        state.update({"key_text": key_text, "cross": True})
    return state


__all__ = [
    "ALL",
    "HEATMAPS_TAB",
    "IMAGE_TAB",
    "PACKAGED",
    "STEP_THROUGH_TAB",
    "TOY",
    "WINDOW_MAX",
    "AppState",
    "ModeChoice",
    "ModeId",
    "PanelView",
    "Part",
    "PretrainedState",
    "ViewState",
    "state_from_flags",
    "window_problem",
]
