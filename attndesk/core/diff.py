"""B - A of two results, cell by cell, and the record of a one-click teaching comparison."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from einops import rearrange

from .config import AttentionConfig
from .devices import resolve_device
from .errors import ConfigError
from .kvcache import KVCacheRow
from .memory import require_free_memory
from .pipeline import build_model
from .result import AttentionResult
from .tutorial import TutorialEffect


class ComparisonError(ValueError):
    """A and B cannot be compared cell by cell; the message says why and what to change."""


# --- B - A ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResultDiff:
    """``diff`` = B - A exactly (float64 of the stored values), cell by cell."""

    a: np.ndarray
    b: np.ndarray
    diff: np.ndarray
    max_abs: float
    argmax: tuple[int, ...]  # index of the largest |difference| (first one on ties)
    what: str  # which array: "weights", "output", or an intermediate's name
    notes: tuple[str, ...] = ()


def _describe(shape: tuple[int, ...], what: str) -> str:
    if what == "weights" and len(shape) == 3:
        return f"{shape[0]} head(s) x {shape[1]} queries x {shape[2]} keys"
    return " x ".join(map(str, shape))


def diff_arrays(a, b, what: str = "weights", notes: tuple[str, ...] = ()) -> ResultDiff:
    """B - A of two same-shaped arrays; a ComparisonError names both shapes otherwise."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        hint = ""
        if what == "weights" and a.ndim == b.ndim == 3:
            if a.shape[0] != b.shape[0]:
                hint = f": set the heads back to {a.shape[0]}, or pin B as the new A"
            elif a.shape[1:] != b.shape[1:]:
                hint = ": the texts have different token counts; match them (or pad both to one length), or pin again"
        raise ComparisonError(
            f"cannot compare {what}: A is {_describe(a.shape, what)}, B is {_describe(b.shape, what)}{hint}"
        )
    try:  # B - A and |B - A| in float64: four times float32 weights
        require_free_memory(16 * a.size, f"B - A of {what} ({_describe(a.shape, what)})",
                            "compare shorter texts or fewer heads")
    except ConfigError as exc:
        raise ComparisonError(str(exc)) from None
    # float64 of float32 values: the subtraction is exact for weights in [0, 1]
    with np.errstate(invalid="ignore"):  # -inf - -inf (a cell masked in both) is NaN: no difference to show
        diff = np.subtract(b, a, dtype=np.float64)
    finite = np.where(np.isfinite(diff), np.abs(diff), 0.0)
    if diff.size:
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(finite)), diff.shape))
        max_abs = float(finite[idx])
    else:
        idx, max_abs = (), 0.0
    return ResultDiff(a=a, b=b, diff=diff, max_abs=max_abs, argmax=idx, what=what, notes=tuple(notes))


def _array(result: AttentionResult, what: str) -> np.ndarray:
    if what in ("weights", "output"):
        return getattr(result, what)
    if result.intermediates is None or getattr(result.intermediates, what, None) is None:
        raise ComparisonError(f"cannot compare {what}: the result kept no such intermediate")
    return getattr(result.intermediates, what)


def diff_results(a: AttentionResult, b: AttentionResult, what: str = "weights") -> ResultDiff:
    """B - A of two results' ``what`` (weights by default). Different shapes are a ComparisonError
    with the reason; different tokens at the same length are compared position by position and
    said so in ``notes``."""
    notes = []
    if list(a.tokens) != list(b.tokens) or list(a.keys) != list(b.keys):
        first = next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y), None)
        where = f" (first at position {first}: {a.tokens[first]!r} vs {b.tokens[first]!r})" if first is not None else ""
        notes.append(f"A and B have different tokens{where}: cells are compared position by position")
    return diff_arrays(_array(a, what), _array(b, what), what, tuple(notes))


@dataclass
class TeachingComparison:
    kind: str
    title: str
    a: AttentionResult
    b: AttentionResult
    a_label: str
    b_label: str
    diff: ResultDiff
    explanation: str
    effect: TutorialEffect | None = None
    kv_cache: list[KVCacheRow] | None = None  # MHA vs GQA: the K/V cache of every head count


def out_projection(config: AttentionConfig, context: np.ndarray) -> np.ndarray:
    """context [H, L, d] -> [L, E] through the same seeded model's output projection."""
    device = resolve_device(config.device)
    model = build_model(config, device)
    ctx = torch.as_tensor(context, device=device).to(config.torch_dtype)
    with torch.inference_mode():
        if config.num_heads == 1:
            out = rearrange(ctx, "1 l d -> l d")
        else:
            out = model.attention.out_proj(rearrange(ctx, "h l d -> l (h d)"))
    return out.float().cpu().numpy()


__all__ = ["ComparisonError", "ResultDiff", "TeachingComparison", "diff_arrays", "diff_results", "out_projection"]
