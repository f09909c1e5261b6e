"""One declaration per user parameter of the toy model: the field spec.

Each ``AttentionConfig`` field is declared with ``param(default, ...)``: its type, range or
choices, default, label, tooltip, CLI flag, what None means, and how a real model treats it.
Everything that shows or takes the parameters is built from these declarations: the core's
per-field checks (``check_value``), the parameters panel (one control per field, its range and
tooltip), ``attndesk render``'s model flags, the state's window limits and the session's keys
(the config's dump). The dataclass default IS the spec's default: ``fields_of`` reads it.

Qt-free: the panel's hints here are plain data (a label, a unit, a ``control`` kind).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from attndesk.checks import boolean, choice, real_number, shown, text_argument, type_name, whole_number
from attndesk.errors import ConfigError, ConfigTypeError

# How a real model (``--model``, the pretrained mode) treats a field: it acts on the real model too,
# the checkpoint's architecture fixes it (shown fixed, or "unknown"), or it belongs to the toy model only.
RealModel = Literal["acts", "fixed", "toy"]
# How the panel shows a field beyond its type: "switch" = a tick box that turns None into a value
# (and a spin box for it), "zero" = a spin box whose 0 stands for None, "divisors" = the divisors of
# the field named by ``of``, "" = by type (bool: tick box; choices: combo; number: spin box).
Control = Literal["", "switch", "zero", "divisors"]


@dataclass(frozen=True)
class Param:
    """One user parameter. ``name`` and ``default`` come from the dataclass field it describes."""

    kind: type  # int, float, bool or str
    label: str  # the panel's row label (a bool: its tick box's text)
    tip: str  # the panel's tooltip and the CLI's help
    flag: str  # the CLI flag; a bool's flag sets the opposite of its default
    choices: tuple[str, ...] = ()
    low: float | None = None  # the smallest value (a whole number's, or a float's; see low_open)
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    none: str = ""  # what None means ("" = None is not allowed)
    must_be: str = ""  # the refusal's wording for a value out of range ("" = from the range)
    window_max: int | None = None  # the largest value the window's controls can show
    unit: str = ""  # "tokens" (a suffix), "bytes" (panel in MiB, CLI as 2G / 512M)
    decimals: int = 2  # a float's spin box
    step: float = 1
    suggested: Any = None  # a "switch" control: the value its first tick sets
    control: Control = ""
    of: str = ""  # a "divisors" control: the field whose divisors are offered
    choice_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    choice_tips: Mapping[str, str] = dataclasses.field(default_factory=dict)
    auto: Callable[[], int] | None = None  # the value None stands for, worked out (the memory budget)
    unavailable: Callable[[], Mapping[str, str | None]] | None = None  # choice -> why not on this machine
    acts_when: Callable[[Mapping[str, Any]], bool] | None = None  # given every field's value: does it act?
    metavar: str | None = None
    widget: str = ""  # the controls' objectName stem when it is not the field's camelCase name
    real_model: RealModel = "toy"
    group: Literal["model", "variant"] = "model"
    name: str = ""
    default: Any = None

    @property
    def optional(self) -> bool:
        return bool(self.none)

    @property
    def stem(self) -> str:
        """The controls' objectName stem: ``embed_dim`` -> ``embedDim`` (``embedDimSpin``)."""
        if self.widget:
            return self.widget
        head, *rest = self.name.split("_")
        return head + "".join(part.title() for part in rest)

    @property
    def dest(self) -> str:
        """The argparse destination: the field's name (the flag sets that field)."""
        return self.name

    def cli_action(self) -> str:
        """argparse's action: a bool flag stores the opposite of the default."""
        if self.kind is bool:
            return "store_false" if self.default else "store_true"
        return "store"

    def help(self) -> str:
        """The CLI help: the tooltip with the default (or what None means)."""
        if self.kind is bool:
            return f"turn {'off' if self.default else 'on'}: {self.tip[:1].lower()}{self.tip[1:]}"
        if self.default is None:
            return f"{self.tip} (default: {self.none})"
        return f"{self.tip} (default {self.default})"

    def window_problem(self, value: Any) -> str | None:
        """Why the window cannot show ``value`` (a spin box holds 32-bit numbers), or None."""
        if self.window_max is not None and isinstance(value, int) and value > self.window_max:
            return f"{self.name} {value:,} is beyond what the window can show (at most {self.window_max:,})"
        return None


def param(default: Any, **spec: Any) -> Any:
    """A dataclass field described by a ``Param`` (``fields_of`` reads both back)."""
    return dataclasses.field(default=default, metadata={"param": Param(**spec)})


@functools.cache
def fields_of(cls: type) -> tuple[Param, ...]:
    """Every ``param`` field of the dataclass ``cls``, in declaration order, name and default filled in."""
    return tuple(
        dataclasses.replace(f.metadata["param"], name=f.name, default=f.default)
        for f in dataclasses.fields(cls)
        if "param" in f.metadata
    )


def check_value(p: Param, value: Any) -> None:
    """The field's own check (type, choices, range); ConfigError / ConfigTypeError naming it."""
    if value is None and p.optional:
        return
    if p.kind is bool:
        boolean(p.name, value)
    elif p.kind is str and p.choices:
        choice(p.name, value, p.choices)
    elif p.kind is str:  # free text (a path)
        text_argument(p.name, value)
    elif p.kind is int:
        _check_whole(p, value)
    else:
        _check_real(p, value)


def _check_whole(p: Param, value: Any) -> None:
    low = int(p.low) if p.low is not None else 1
    if p.must_be and isinstance(value, int) and not isinstance(value, bool) and value < low:
        raise ConfigError(f"{p.name} must be {p.must_be}, got {value}", field=p.name)
    whole_number(
        p.name, value, minimum=min(low, 1) if p.must_be else low, maximum=int(p.high) if p.high is not None else None
    )


def _check_real(p: Param, value: Any) -> None:
    low, high = p.low if p.low is not None else -math.inf, p.high if p.high is not None else math.inf
    if not p.must_be:
        real_number(p.name, value, low=low, high=high, high_open=p.high_open)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(
            f"{p.name} must be a number{' or None' if p.optional else ''}, got {shown(value)} ({type_name(value)})",
            field=p.name,
        )
    inside = (
        math.isfinite(value)
        and (value > low if p.low_open else value >= low)
        and (value < high if p.high_open else value <= high)
    )
    if not inside:
        raise ConfigError(f"{p.name} must be {p.must_be}, got {value!r}", field=p.name)


__all__ = ["Param", "RealModel", "check_value", "fields_of", "param"]
