"""Checks at the core's doors: each wrong value gets one line saying what to change, raised
before anything is allocated. Config validation, the layer constructors, the pipeline's text
arguments and the checkpoint loaders share them, so one mistake reads the same everywhere."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from attndesk.errors import ConfigError, ConfigTypeError

if TYPE_CHECKING:
    import torch


def shown(value: Any, limit: int = 40) -> str:
    """``value`` for a message: a short repr and, for a wrong type, its type's name.

    A huge integer has no repr (Python refuses str() beyond 4,300 digits): its size is given."""
    if isinstance(value, int) and abs(value).bit_length() > 4000 * 3.32:  # past ~4,000 digits
        return f"a {int(abs(value).bit_length() * math.log10(2)) + 1:,}-digit number"
    try:
        text = repr(value)
    except Exception:  # a repr that fails is still a value of some type
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def whole_number(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An int (not a bool) in [minimum, maximum]; ConfigTypeError / ConfigError otherwise."""
    what = "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(f"{name} must be {what}, got {shown(value)} ({type_name(value)})", field=name)
    if value < minimum or (maximum is not None and value > maximum):
        bound = "" if maximum is None else f" and at most {maximum:,}"
        raise ConfigError(f"{name} must be {what}{bound}, got {shown(value)}", field=name)
    return value


def real_number(name: str, value: Any, *, low: float, high: float, high_open: bool = False) -> float:
    """A finite int or float (not a bool) in [low, high] (or [low, high)); else one line."""
    interval = f"[{low:g}, {high:g}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(
            f"{name} must be a number in {interval}, got {shown(value)} ({type_name(value)})", field=name
        )
    value = float(value)
    if not math.isfinite(value) or value < low or value > high or (high_open and value == high):
        raise ConfigError(f"{name} must be in {interval}, got {value!r}", field=name)
    return value


def boolean(name: str, value: Any) -> bool:
    """True or False only: a string such as "no" is truthy, which is why it is refused."""
    if not isinstance(value, bool):
        raise ConfigTypeError(f"{name} must be true or false, got {shown(value)} ({type_name(value)})", field=name)
    return value


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise ConfigError(f"unknown {name} {shown(value)}; choose one of: {', '.join(options)}", field=name)
    return value


def text_argument(name: str, value: Any) -> str:
    """A str to attend over; a wrong type is named (None, bytes, a number), not called empty."""
    if isinstance(value, (bytes, bytearray)):
        raise ConfigTypeError(
            f"{name} must be a str, got {type_name(value)}: decode it first (e.g. .decode('utf-8'))", field=name
        )
    if not isinstance(value, str):
        raise ConfigTypeError(f"{name} must be a str, got {type_name(value)}", field=name)
    return value


def check_finite_tensors(tensors: Mapping[str, torch.Tensor], where: str) -> None:
    """Refuse weights holding NaN or infinity, naming the first such tensor: a model with them
    computes NaN attention everywhere they reach, silently. Checks one tensor at a time."""
    import torch  # here, so the field spec (and the CLI's flags built from it) load no torch

    for name, tensor in tensors.items():
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            bad = int(finite.numel() - finite.sum())
            nan = int(torch.isnan(tensor).sum())
            kinds = " and ".join(k for k, n in (("NaN", nan), ("infinite", bad - nan)) if n)
            raise ConfigError(
                f"{where}: tensor {name!r} holds {bad:,} {kinds} value(s) of {tensor.numel():,}; "
                "the checkpoint is damaged or was saved after a diverged training run"
            )
