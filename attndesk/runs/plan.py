"""Decide, before a run starts, what it keeps: the full weights when they fit the memory budget,
else (optionally) full weights in float16, else a display pyramid + exact values on demand.

``plan_run`` is cheap (arithmetic only) so the app can show ``RunPlan.describe()`` before it
starts computing, e.g. "8 heads x 16,384 tokens: full weights 8.0 GiB exceed the 2.0 GiB budget,
keeping a 2048 px overview + exact on demand".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from attndesk.attention.masks import visible_cells
from attndesk.errors import ConfigError
from attndesk.system import free_memory
from attndesk.system.devices import DTYPES, resolve_device
from attndesk.system.free_memory import format_bytes

from .config import AttentionConfig
from .memory import estimate_run, largest_fitting

FULL, BLOCKED, PYRAMID = "full", "blocked", "pyramid"
OVERVIEW_PX = 2048  # the overview's larger side, in tiles (pixels), when the budget allows
MIN_OVERVIEW_PX = 256
STORED_OVERVIEW_PX = 512  # the overview kept beside float16 weights
BLOCK_BYTES = 16 * 2**20  # one [block, Lk] score buffer; small enough to stay near the caches
HALF_STORAGE = ("float16",)  # numpy has no bfloat16: float16 is the half storage on offer

# Rough sustained rates of the attention work (GFLOP/s) for the time estimate only; measured by
# benchmarks/bench_long.py on a 2-core CPU. A GPU is much faster; we do not guess how much.
_RATE = {"cpu": 50e9}
# With small heads the per-cell softmax/exp and memory traffic dominate the FLOPs (docs/benchmarks.md,
# long sequences): at least this long per cell.
CELL_SECONDS = 5e-9


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class RunPlan:
    """What a run of ``num_heads`` x ``lq`` x ``lk`` will keep, and what it will cost.

    kind: "full" (the unblocked fast path, float32 weights), "blocked" (blocked path storing
    every weight in ``storage``, e.g. float16, plus the overview) or "pyramid" (blocked path
    keeping only an overview of ``overview_px`` px at ``factor`` cells per pixel); both blocked
    kinds recompute exact values on demand.
    """

    kind: str
    num_heads: int
    lq: int
    lk: int
    budget: int
    weights_bytes: int  # the full float32 [H, Lq, Lk] weights
    full_peak_bytes: int  # what the full path would allocate at its peak
    peak_bytes: int  # this plan's estimated peak
    storage: str  # "float32", "float16" or "pyramid"
    block_rows: int  # queries per block on the blocked paths (Lq on the full path)
    factor: int  # cells per overview pixel (1 = every cell)
    overview_px: int
    flops: int
    seconds: float | None  # a rough time estimate, None when we cannot guess
    intermediates: bool = False  # planned for a run that keeps its intermediates (more on the full path)
    window: int | None = None  # a sliding window: only its band is computed (the flops count that)

    @property
    def size_text(self) -> str:
        """'8 heads x 16,384 tokens' (or 'x 100 x 2,000 tokens' for cross-attention)."""
        size = f"{self.lq:,} tokens" if self.lq == self.lk else f"{self.lq:,} x {self.lk:,} tokens"
        return f"{self.num_heads} head{'s' if self.num_heads != 1 else ''} x {size}"

    @property
    def blocked(self) -> bool:
        return self.kind != FULL

    @property
    def block_flops(self) -> float:
        """FLOPs per head and query block, about one op's work: what the run's thread count is
        chosen by (``attndesk.system.threads``)."""
        blocks = -(-self.lq // max(1, self.block_rows))
        return self.flops / max(1, self.num_heads * blocks)

    def describe(self, *, eta: bool = True) -> str:
        """One line for the status bar: sizes, budget, and what will be kept; ``eta=False`` leaves out
        the time estimate (a finished run's notice: its real time is known, the estimate is FLOPs only)."""
        head = self.size_text
        budget = format_bytes(self.budget)
        weights = format_bytes(self.weights_bytes)
        eta_text = "" if self.seconds is None or not eta else f" ({_duration(self.seconds)})"
        if self.kind == FULL:
            return f"{head}: full weights {weights} fit the {budget} budget{eta_text}"
        if self.full_peak_bytes <= self.budget:
            why = f"full weights {weights} fit the {budget} budget but a blocked run was asked for"
        elif self.weights_bytes > self.budget:
            why = f"full weights {weights} exceed the {budget} budget"
        else:
            why = f"the full path needs {format_bytes(self.full_peak_bytes)} (weights {weights}), over the {budget} budget"
        band = "" if self.window is None else f", computing only the band |i - j| < {self.window}"
        if self.kind == BLOCKED:
            return (
                f"{head}: {why}, keeping every weight as {self.storage} ({format_bytes(self.weights_bytes // 2)})"
                f" + exact on demand{band}{eta_text}"
            )
        line = f"{head}: {why}, keeping a {self.overview_px} px overview + exact on demand{band}{eta_text}"
        if self.peak_bytes > self.budget:  # the projections alone outgrow the budget: say so
            line += f"; even so it needs about {format_bytes(self.peak_bytes)}, over the budget"
        return line


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    return f"about {seconds / 60:.0f} min"


def _blocked_peak(config: AttentionConfig, lq: int, lk: int, block_rows: int, stored: int) -> int:
    """Bytes alive at the peak of the blocked path: inputs, projections (kept for exact
    read-outs), context and output, two block buffers + the head-mean block, plus what is stored."""
    e, width = config.embed_dim, config.num_heads * config.head_dim
    item = DTYPES[config.dtype].itemsize
    small = item * ((lq + lk) * e + 2 * (lq + 2 * lk) * width + lq * width + lq * e)  # fused qkv + contiguous heads
    blocks = item * 3 * block_rows * lk + 4 * 2 * block_rows * lk  # scores, weights, head mean; float32 reductions
    return int(small + blocks + stored + 4 * lk)


def _pyramid_bytes(num_heads: int, lq: int, lk: int, factor: int) -> int:
    """Level 0 (max and sum, H+1 matrices) and the coarser levels (a third more), built once in float32."""
    tiles = _ceil_div(lq, factor) * _ceil_div(lk, factor)
    return int(2 * (num_heads + 1) * tiles * 4 * (1 + 1 / 3) * 1.5)  # x1.5: the mean levels made at the end


def plan_run(
    config: AttentionConfig,
    lq: int,
    lk: int | None = None,
    *,
    half_storage: str | None = None,
    overview_px: int = OVERVIEW_PX,
    block_bytes: int = BLOCK_BYTES,
    force: str | None = None,
    keep_intermediates: bool = False,
) -> RunPlan:
    """Plan a run of ``lq`` queries over ``lk`` keys (default: self-attention) within ``config.budget_bytes``.

    The full path is chosen exactly when it fits (so in-budget runs are unchanged); otherwise,
    with ``half_storage="float16"``, every weight is kept in float16 when that fits; otherwise a
    pyramid whose overview is the largest power-of-two size up to ``overview_px`` that fits.
    ``force`` ("full", "blocked", "pyramid") overrides the choice (tests, benchmarks).
    ``keep_intermediates`` counts the stage copies the full path then keeps (see ``estimate_run``).
    """
    lk = lq if lk is None else lk
    _check_request(lq, lk, half_storage, force)
    h = config.num_heads
    item = DTYPES[config.dtype].itemsize
    budget = config.budget_bytes
    estimate = estimate_run(config, lq, lk, keep_intermediates=keep_intermediates)
    plan = partial(
        RunPlan,
        num_heads=h,
        lq=lq,
        lk=lk,
        budget=budget,
        weights_bytes=estimate.weights_bytes,
        full_peak_bytes=estimate.peak_bytes,
        flops=estimate.flops,
        seconds=_seconds(config, estimate.flops, lq, lk),
        intermediates=keep_intermediates,
        window=config.window,
    )

    kind = force
    if kind is None:
        kind = FULL if estimate.peak_bytes <= budget else None
    if kind == FULL:
        return plan(
            kind=FULL,
            peak_bytes=estimate.peak_bytes,
            storage="float32",
            block_rows=lq,
            factor=1,
            overview_px=max(lq, lk),
        )

    # a score block is at most a sixteenth of the budget, so a small budget means small blocks
    block_rows = max(1, min(lq, min(block_bytes, budget // 16) // max(1, lk * item)))
    storage = half_storage or ("float32" if kind == BLOCKED else None)
    if kind in (None, BLOCKED) and storage is not None:
        blocked = _blocked_plan(config, lq, lk, block_rows, storage, overview_px, plan)
        if kind == BLOCKED or blocked.peak_bytes <= budget:
            return blocked
    return _pyramid_plan(config, lq, lk, block_rows, overview_px, plan)


def _seconds(config: AttentionConfig, flops: float, lq: int, lk: int) -> float | None:
    """The run's estimated time on its device (None where no rate is known)."""
    rate = _RATE.get(str(config.device))
    cells = config.num_heads * visible_cells(lq, lk, causal="causal" in config.mask, window=config.window)
    return max(flops / rate, cells * CELL_SECONDS) if rate else None  # only the cells computed count


def _check_request(lq: int, lk: int, half_storage: str | None, force: str | None) -> None:
    if lq < 1 or lk < 1:
        raise ConfigError("a run needs at least one query and one key token")
    if half_storage is not None and half_storage not in HALF_STORAGE:
        raise ConfigError(f"half storage must be one of: {', '.join(HALF_STORAGE)}; got {half_storage!r}")
    if force is not None and force not in (FULL, BLOCKED, PYRAMID):
        raise ConfigError(f"unknown plan kind {force!r}; choose full, blocked or pyramid")


def _blocked_plan(
    config: AttentionConfig, lq: int, lk: int, block_rows: int, storage: str, overview_px: int, plan
) -> RunPlan:
    """The blocked path keeping every weight in ``storage``, with a small overview to draw from."""
    h = config.num_heads
    stored = h * lq * lk * (2 if storage == "float16" else 4)
    peak = _blocked_peak(config, lq, lk, block_rows, stored)
    # a small overview is built alongside (for drawing; exact cells come from the storage)
    px = min(overview_px, STORED_OVERVIEW_PX)
    factor = max(1, _ceil_div(max(lq, lk), px))
    peak += _pyramid_bytes(h, lq, lk, factor)
    return plan(
        kind=BLOCKED,
        peak_bytes=peak,
        storage=storage,
        block_rows=block_rows,
        factor=factor,
        overview_px=min(px, max(lq, lk)),
    )


def _pyramid_plan(
    config: AttentionConfig, lq: int, lk: int, block_rows: int, overview_px: int, plan: Callable[..., RunPlan]
) -> RunPlan:
    """The pyramid (``plan``: RunPlan with the fields every kind shares): the largest overview (a power of two, down to MIN_OVERVIEW_PX) that fits;
    when even the smallest does not fit (the projections of a huge document alone are over the
    budget) shrinking it all the way would only lose detail: it just keeps the overview itself
    within a quarter of the budget."""
    h, budget = config.num_heads, config.budget_bytes
    floor = min(MIN_OVERVIEW_PX, overview_px)

    def sized(px: int) -> tuple[int, int, int]:
        factor = max(1, _ceil_div(max(lq, lk), px))
        # whole tile rows per block keep the pyramid's fold simplest; a tile taller than a block
        # (a huge document) is folded across blocks instead of growing the block
        rows = block_rows // factor * factor if block_rows >= factor else block_rows
        return factor, rows, _blocked_peak(config, lq, lk, rows, _pyramid_bytes(h, lq, lk, factor))

    px = overview_px
    factor, rows, peak = sized(px)
    fits_at_all = sized(floor)[2] <= budget
    while px > floor and (peak > budget if fits_at_all else _pyramid_bytes(h, lq, lk, factor) > budget // 4):
        px //= 2
        factor, rows, peak = sized(px)
    return plan(
        kind=PYRAMID,
        peak_bytes=peak,
        storage="pyramid",
        block_rows=min(rows, lq),
        factor=factor,
        overview_px=min(px, max(lq, lk)),
    )


def check_memory(plan: RunPlan, config: AttentionConfig) -> None:
    """ConfigError when ``plan``'s peak exceeds the machine's free memory, saying what fits: a
    full run allowed by a budget larger than the free memory should go through blocks; a
    blocked run too large even so should be shorter (the largest length that fits is given)."""
    if plan.peak_bytes <= free_memory.SMALL_BYTES:
        return
    free = free_memory.available_memory(str(resolve_device(config.device)))
    if free is None or plan.peak_bytes <= free:
        return
    need, room = format_bytes(plan.peak_bytes), format_bytes(free)
    if plan.kind == FULL:
        raise ConfigError(
            f"{plan.size_text}: the full run needs {need}, more than the {room} of free memory; "
            f"set the memory budget below {room} so that it runs in blocks"
        )

    def peak(n: int) -> int:  # the plan's peak at n queries (keys scaled alike)
        lk = max(1, plan.lk * n // plan.lq)
        return plan_run(config, n, lk, keep_intermediates=plan.intermediates).peak_bytes

    fit = largest_fitting(peak, 1, plan.lq, free)
    tokens = "tokens" if plan.lq == plan.lk else "query tokens"
    what = f"at most {fit:,} {tokens} fit" if fit >= 1 else "not even one token fits"
    raise ConfigError(
        f"{plan.size_text}: even the memory-bounded run needs about {need}, more than the {room} of free memory; {what}"
    )
