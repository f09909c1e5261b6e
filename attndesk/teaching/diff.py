"""B - A of two results, cell by cell, and the record of a one-click teaching comparison."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from einops import rearrange

from attndesk.attention.kernel import MultiHeadAttention
from attndesk.errors import ConfigError
from attndesk.runs.config import AttentionConfig
from attndesk.runs.pipeline import build_model
from attndesk.runs.result import AttentionResult
from attndesk.system.devices import resolve_device
from attndesk.system.free_memory import format_bytes, require_free_memory

from .kv_cost import KVCacheRow
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


# Bytes per cell while B - A is made: the float64 difference kept, and |B - A| of one slice at a time
DIFF_BYTES_PER_CELL = 8


def diff_bytes(shape: tuple[int, ...]) -> int:
    """What ``diff_arrays`` allocates for arrays of ``shape``: the float64 B - A (kept) and
    |B - A| of its largest slice (the search for the largest difference goes slice by slice)."""
    cells = int(np.prod(shape, dtype=np.int64)) if shape else 1
    slice_cells = cells // shape[0] if shape and shape[0] else cells
    return DIFF_BYTES_PER_CELL * cells + 9 * slice_cells  # one slice: float64 |B - A| and a bool mask


def _check_diff_size(shape: tuple[int, ...], what: str, budget: int | None) -> None:
    """ComparisonError, before anything is allocated, when B - A exceeds the memory budget or the
    free memory; the message says what does fit."""
    need, described = diff_bytes(shape), _describe(shape, what)
    if budget is not None and need > budget:
        fits = ""
        one_head = diff_bytes((1, *shape[1:]))
        if what == "weights" and len(shape) == 3 and one_head <= budget:
            fits = f"; one head's would fit ({format_bytes(one_head)}): compare fewer heads, "
        raise ComparisonError(
            f"B - A of {what} ({described}) needs {format_bytes(need)} in float64, more than the "
            f"{format_bytes(budget)} memory budget{fits or ': '}raise the budget or compare shorter texts"
        )
    try:
        require_free_memory(need, f"B - A of {what} ({described})", "compare shorter texts or fewer heads")
    except ConfigError as exc:
        raise ComparisonError(str(exc)) from None


def _largest(diff: np.ndarray) -> tuple[tuple[int, ...], float]:
    """Index and size of the largest finite |B - A| (the first on ties), one leading slice at a
    time so that no second whole-size array is made."""
    if diff.size == 0:
        return (), 0.0
    best, where = -1.0, (0,) * diff.ndim
    for i, part in enumerate(diff if diff.ndim > 1 else [diff]):
        size = np.abs(part)
        size[~np.isfinite(size)] = 0.0  # -inf - -inf (a cell masked in both) is NaN: no difference
        flat = int(np.argmax(size))
        if size.flat[flat] > best:
            best = float(size.flat[flat])
            inner = tuple(int(j) for j in np.unravel_index(flat, part.shape))
            where = (i, *inner) if diff.ndim > 1 else inner
    return where, best


def diff_arrays(a, b, what: str = "weights", notes: tuple[str, ...] = (), budget: int | None = None) -> ResultDiff:
    """B - A of two same-shaped arrays; a ComparisonError names both shapes otherwise, or says
    what fits when B - A exceeds ``budget`` bytes (None: only the free memory is checked)."""
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
    _check_diff_size(a.shape, what, budget)
    # float64 of float32 values: the subtraction is exact for weights in [0, 1]
    with np.errstate(invalid="ignore"):  # -inf - -inf is NaN, ignored by _largest
        diff = np.subtract(b, a, dtype=np.float64)
    idx, max_abs = _largest(diff)
    return ResultDiff(a=a, b=b, diff=diff, max_abs=max_abs, argmax=idx, what=what, notes=tuple(notes))


def _array(result: AttentionResult, what: str) -> np.ndarray:
    if what in ("weights", "output"):
        return getattr(result, what)
    if result.intermediates is None or getattr(result.intermediates, what, None) is None:
        raise ComparisonError(f"cannot compare {what}: the result kept no such intermediate")
    return getattr(result.intermediates, what)


def diff_results(
    a: AttentionResult, b: AttentionResult, what: str = "weights", budget: int | None = None
) -> ResultDiff:
    """B - A of two results' ``what`` (weights by default). Different shapes are a ComparisonError
    with the reason, and so is a B - A over ``budget`` bytes; different tokens at the same length
    are compared position by position and said so in ``notes``."""
    notes = []
    if list(a.tokens) != list(b.tokens) or list(a.keys) != list(b.keys):
        first = next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y), None)
        where = f" (first at position {first}: {a.tokens[first]!r} vs {b.tokens[first]!r})" if first is not None else ""
        notes.append(f"A and B have different tokens{where}: cells are compared position by position")
    return diff_arrays(_array(a, what), _array(b, what), what, tuple(notes), budget)


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
            attention = model.attention
            assert isinstance(attention, MultiHeadAttention), "more than one head"
            out = attention.out_proj(rearrange(ctx, "h l d -> l (h d)"))
    return out.float().cpu().numpy()


__all__ = [
    "ComparisonError",
    "ResultDiff",
    "TeachingComparison",
    "diff_arrays",
    "diff_bytes",
    "diff_results",
    "out_projection",
]
