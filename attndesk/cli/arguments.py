"""The commands' shared argument types (each raises argparse.ArgumentTypeError, which the parser
reports in one line) and ``add_fields``: a settings spec's fields (``runs.fields.param``) as flags."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from attndesk.errors import ConfigError
from attndesk.runs.fields import Param, check_value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def real(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def size(text: str) -> tuple[int, int]:
    parts = text.lower().replace("\u00d7", "x").split("x")
    try:
        width, height = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels such as 1600x1200, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"width and height must be positive, got {text!r}")
    return width, height


def byte_size(text: str) -> int:
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in units and raw[-1:] else ""
    number = raw[: len(raw) - len(unit)]
    try:
        value = int(float(number) * units[unit])
    except (ValueError, OverflowError):  # not a number, or inf
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 2G or 512M, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


def list_of(choices: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(bad) or repr(text)}; choose from {', '.join(choices)}"
            )
        return list(dict.fromkeys(items))

    return parse


def which(text: str) -> list[str | int]:
    items: list[str | int] = []
    for part in (t.strip().lower() for t in text.split(",")):
        if part in ("all", "mean"):
            items.append(part)
        elif part.isdigit():
            items.append(int(part))
        else:
            raise argparse.ArgumentTypeError(f"expected all, mean or a head number (comma-separated), got {part!r}")
    if not items:
        raise argparse.ArgumentTypeError("expected all, mean or a head number")
    return list(dict.fromkeys(items))


def region(text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    try:
        q, k = text.split(",")
        q0, q1 = (int(v) for v in q.split(":"))
        k0, k1 = (int(v) for v in k.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected Q0:Q1,K0:K1 (token index ranges, end exclusive), got {text!r}"
        ) from None
    if q0 < 0 or k0 < 0:
        raise argparse.ArgumentTypeError(
            f"token positions count from 0 (not from the end), so a range cannot start below 0; got {text!r}"
        )
    if not (q0 < q1 and k0 < k1):
        raise argparse.ArgumentTypeError(f"each range must satisfy 0 <= start < end (end exclusive), got {text!r}")
    return (q0, q1), (k0, k1)


_DASH_VALUE = re.compile(r"-([\d.]|nan|inf)", re.IGNORECASE)  # "-1:2,0:2", "-.5", "-inf": a value, not a flag


def engine_arguments(p: argparse.ArgumentParser, *, default: str | None = "local") -> None:
    """The corpus engines' flags (``attndesk corpus``, ``attndesk kvcache --corpus``): --engine,
    --workers, --ray-address. ``default=None`` leaves --engine unset when not given (a command
    that refuses it without its corpus)."""
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default=default,
        help="local (this process) or ray (Ray Data actors; RAY_ADDRESS or --ray-address joins a cluster)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="local: torch threads (default: torch's own); ray: actors, one model and one CPU each (default 2)",
    )
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="a Ray cluster to join (else RAY_ADDRESS)")


def attach_dash_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """argparse takes a value that starts with '-' for a flag ('--region -1:2,0:2' gives "expected
    one argument"): join such a value to its option as '--region=-1:2,0:2', so that the option's
    own check explains what is wrong with it. Plain negative numbers argparse already accepts."""
    takes_value = {
        opt
        for action in _all_actions(parser)
        if action.nargs is None and action.option_strings
        for opt in action.option_strings
    }
    out: list[str] = []
    argv = list(argv)
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] in takes_value and i + 1 < len(argv) and _DASH_VALUE.match(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions and those of its subcommands."""
    actions = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                actions += _all_actions(sub)
    return actions


class Given(argparse.Action):
    """Stores the value and records that the flag was given (``args.given``), so that a flag equal
    to its default still counts (``--no-positional --position sinusoidal`` contradicts itself)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = (*getattr(namespace, "given", ()), self.dest)


def arg_type(spec: Param) -> Callable[[str], Any]:
    """A field's argument type: sizes for bytes, whole numbers (positive when the field's are), numbers,
    free text (a path)."""
    if spec.kind is str:
        return str
    if spec.unit == "bytes":
        return byte_size
    if spec.kind is int:
        return positive_int if (spec.low or 0) >= 1 else _int
    return real


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number no smaller than ``minimum``."""

    def parse(text: str) -> int:
        value = _int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        return value

    return parse


def checked_type(spec: Param) -> Callable[[str], Any]:
    """The field's argument type that also refuses what the spec refuses (its range), with the
    spec's one-line message: a whole number below the spec's smallest is refused as ``at_least``."""
    parse = at_least(int(spec.low) if spec.low is not None else 1) if spec.kind is int else arg_type(spec)

    def check(text: str) -> Any:
        value = parse(text)
        try:
            check_value(spec, value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return check


def add_fields(group: Any, fields: Iterable[Param], *, unset: bool = False) -> None:
    """One flag per field of a settings spec: its flag, dest (the field's name), choices, type and help
    come from the spec. By default each flag's default is the spec's, the value is checked when the
    settings are validated, and ``args.given`` records which flags were given. ``unset``: every default
    is None (a flag not given leaves the field to the settings' default or a preset's) and each value is
    checked against the spec's range as it is parsed."""
    for spec in fields:
        if spec.kind is bool:
            if unset:
                group.add_argument(
                    spec.flag,
                    dest=spec.dest,
                    action="store_const",
                    const=not spec.default,
                    default=None,
                    help=spec.help(),
                )
            else:
                group.add_argument(spec.flag, dest=spec.dest, action=spec.cli_action(), help=spec.help())
            continue
        extra: dict[str, Any] = (
            {"choices": spec.choices}
            if spec.choices
            else {"type": checked_type(spec) if unset else arg_type(spec), "metavar": spec.metavar}
        )
        if unset:
            group.add_argument(spec.flag, dest=spec.dest, default=None, help=spec.help(), **extra)
        else:
            group.add_argument(spec.flag, dest=spec.dest, default=spec.default, action=Given, help=spec.help(), **extra)


def token_arg(text: str) -> str | int:
    """A token flag's value: a text, or "id:N" for the token id N."""
    if text.startswith("id:") and text[3:].isdigit():
        return int(text[3:])
    return text


def optional_token(text: str | None) -> str | int | None:
    """``token_arg`` of a flag that may be absent."""
    return None if text is None else token_arg(text)
