"""What a run will allocate, worked out before it starts, so that it can be refused or re-planned.

Two limits apply. The memory budget (``AttentionConfig.budget_bytes``) bounds what a run keeps:
the planner (plan.py) sends a run whose full weights do not fit through query blocks. The
machine's free memory is the hard limit: a size that cannot fit at all (an embedding table of
61 GiB, a padded length of 10^8 tokens) is refused here, before anything is allocated, with one
line that says how large a value does fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attndesk.attention.masks import visible_cells
from attndesk.errors import ConfigError
from attndesk.system import free_memory
from attndesk.system.devices import DTYPES, resolve_device
from attndesk.system.free_memory import format_bytes

if TYPE_CHECKING:  # config.py imports this module to check sizes in validate()
    from .config import AttentionConfig

# The model's parameters may take the memory budget, and never less than this (a budget of a
# few KiB forces blocked runs in tests and benchmarks; it should not also refuse a toy model).
PARAMETER_FLOOR = 256 * 2**20
# Per token, beside the tensors: the tokenizer's three Python lists (tokens, ids, unknown flags:
# a pointer each) and the int64 ids tensor.
TOKEN_LIST_BYTES = 32


def _device_of(config: AttentionConfig) -> str:
    return str(resolve_device(config.device))


def largest_fitting(need: Callable[[int], int], low: int, high: int, limit: int) -> int:
    """The largest n in [low, high] with need(n) <= limit (need grows with n); low - 1 if none."""
    if need(low) > limit:
        return low - 1
    while low < high:
        mid = (low + high + 1) // 2
        if need(mid) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


# -- parameters ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParameterEstimate:
    """Bytes of the toy model's parameters, and the copies made while building and running it."""

    embedding: int  # the [vocab, E] table
    projections: int  # Q/K/V (and output) weights and biases
    working: int  # the float32 build before a dtype cast, or the fused [3E, E] QKV weight of a run

    @property
    def total(self) -> int:
        return self.embedding + self.projections + self.working

    def largest_part(self) -> tuple[str, int]:
        if self.embedding >= self.projections:
            return "the embedding table", self.embedding
        return "the Q/K/V/output projections", self.projections


def estimate_parameters(config: AttentionConfig) -> ParameterEstimate:
    """Sizes of ``ToyModel(config)`` in ``config.dtype``; arithmetic only (config fields must be
    positive ints already)."""
    item = DTYPES[config.dtype].itemsize
    e = config.embed_dim
    width = config.hidden_dim if config.num_heads == 1 else e
    layers = 3 if config.num_heads == 1 else 4  # q, k, v (+ out)
    projections = layers * (e * width + (width if config.bias else 0))
    embedding = config.vocab_size * e
    build = 4 * (embedding + projections) if config.dtype != "float32" else 0  # made in float32, then cast
    fused = 3 * e * e * item if config.num_heads > 1 else 0
    return ParameterEstimate(embedding * item, projections * item, max(build, fused))


def parameter_limit(config: AttentionConfig) -> tuple[int, str]:
    """(bytes the parameters may take, what that limit is, for a message)."""
    budget = max(config.budget_bytes, PARAMETER_FLOOR)
    free = free_memory.available_memory(_device_of(config))
    if free is not None and free < budget:
        return free, f"the {format_bytes(free)} of free memory"
    if config.budget_bytes < PARAMETER_FLOOR:
        return budget, f"the {format_bytes(budget)} allowed for a model's parameters"
    return budget, f"the {format_bytes(budget)} memory budget"


_SIZE_FIELDS = {"embed_dim": ("embed dim", 1), "vocab_size": ("vocab size", 3), "hidden_dim": ("hidden dim", 1)}


def check_parameters(config: AttentionConfig) -> None:
    """ConfigError when the model's parameters do not fit (see ``parameter_limit``), naming the
    size field most over what fits and the largest value of it that fits."""
    estimate = estimate_parameters(config)
    if estimate.total <= free_memory.SMALL_BYTES:
        return
    limit, where = parameter_limit(config)
    if estimate.total <= limit:
        return
    fields = [f for f in _SIZE_FIELDS if f != "hidden_dim" or config.num_heads == 1]
    fits = {}
    for name in fields:
        value, low = getattr(config, name), _SIZE_FIELDS[name][1]

        def need(n: int, name: str = name) -> int:
            return estimate_parameters(config.replace(**{name: n})).total

        fits[name] = largest_fitting(need, low, value, limit)
    # blame the field that alone can fix it and is furthest over (1,000,000 where 7,664 fits)
    fixable = [f for f in fields if fits[f] >= _SIZE_FIELDS[f][1]]
    candidates = fixable or fields

    def over(f: str) -> float:
        return getattr(config, f) / max(fits[f], 1)

    # The table grows with the vocabulary and the embed dim alike, so both can be as far over (a
    # fit is a whole number: an embed dim of 64 where 24 fits is 64/25 to 64/24 over, as far as
    # a vocabulary 2.61 times what fits); then the one furthest above its default is named (33
    # million words, not the default embed dim of 64).
    furthest = max(candidates, key=over)
    least = getattr(config, furthest) / (fits[furthest] + 1)
    defaults = type(config)()
    name = max(
        (f for f in candidates if over(f) >= least),
        key=lambda f: getattr(config, f) / max(getattr(defaults, f), 1),
    )
    label, value, fit = _SIZE_FIELDS[name][0], getattr(config, name), fits[name]
    part, size = _part_of(name, estimate)
    line = f"{label} {value:,} needs {format_bytes(size)} for {part}"
    if size < 0.95 * estimate.total:
        line += f" ({format_bytes(estimate.total)} in all)"
    if fixable:
        raise ConfigError(f"{line}; at most {fit:,} fits in {where}", field=name)
    raise ConfigError(
        f"{line}; the model does not fit in {where} even at the smallest sizes: raise the memory budget",
        field="memory_budget",
    )


def _part_of(name: str, estimate: ParameterEstimate) -> tuple[str, int]:
    """The part of the model a size field grows: the table for the vocabulary, the projections
    for the hidden dim, the larger of the two for the embed dim."""
    if name == "vocab_size":
        return "the embedding table", estimate.embedding
    if name == "hidden_dim":
        return "the Q/K/V projections", estimate.projections
    return estimate.largest_part()


# -- tokens ----------------------------------------------------------------------------------
def minimum_run_bytes(config: AttentionConfig, query_len: int, key_len: int | None = None) -> int:
    """What any run of these lengths allocates, whichever path it takes: the token lists, the
    embeddings and the Q/K/V projections (the blocked paths keep them all)."""
    lq, lk = query_len, query_len if key_len is None else key_len
    item = DTYPES[config.dtype].itemsize
    width = config.num_heads * config.head_dim
    return int(TOKEN_LIST_BYTES * (lq + lk) + item * ((lq + lk) * config.embed_dim + (lq + 2 * lk) * width))


def check_length(config: AttentionConfig, length: int, what: str, field: str | None = None) -> None:
    """ConfigError when ``length`` tokens cannot fit in free memory on any path, saying how many
    do (e.g. for pad_to, checked before the tokenizer builds a list of that many [PAD])."""
    need = minimum_run_bytes(config, length)
    free = free_memory.available_memory(_device_of(config)) if need > free_memory.SMALL_BYTES else None
    if free is None or need <= free:
        return
    fit = largest_fitting(lambda n: minimum_run_bytes(config, n), 1, length, free)
    raise ConfigError(
        f"{what} {length:,} needs at least {format_bytes(need)} for the token embeddings and projections; "
        f"at most {fit:,} tokens fit in the {format_bytes(free)} of free memory",
        field=field,
    )


# -- one run ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunEstimate:
    """Bytes of the tensors a full (unblocked) toy run allocates, and its matmul FLOPs."""

    weights_bytes: int  # the [H, Lq, Lk] float32 weights handed back to the caller
    peak_bytes: int  # every tensor alive at the softmax, the peak of the run
    flops: int

    def describe(self) -> str:
        return f"weights {format_bytes(self.weights_bytes)}, peak {format_bytes(self.peak_bytes)}"


def estimate_run(
    config: AttentionConfig, query_len: int, key_len: int | None = None, *, keep_intermediates: bool = False
) -> RunEstimate:
    """Sizes of the tensors ``run_attention`` creates on its full path for these lengths (batch
    of one), counting what dropout and kept intermediates add."""
    lq, lk = query_len, query_len if key_len is None else key_len
    e, h, d = config.embed_dim, config.num_heads, config.head_dim
    width = h * d  # E for multi-head, hidden_dim for one head
    kv_width = config.num_kv_heads * d  # K and V shrink with grouped-query heads
    item = DTYPES[config.dtype].itemsize
    hll = h * lq * lk
    weights_bytes = hll * 4
    # token lists, embeddings (query and key side), q/k/v, the score buffer and the softmax
    # output, the context and the merged output, plus the bool masks (the mask, its complement)
    peak = (
        TOKEN_LIST_BYTES * (lq + lk)
        + item * ((lq + lk) * e + lq * width + 2 * lk * kv_width + 2 * hll + 2 * lq * width)
        + 2 * lq * lk
    )
    if config.dtype != "float32":
        peak += weights_bytes  # the float32 copy handed back
    if config.training and config.dropout > 0:
        peak += 2 * hll * item  # the dropout noise and the dropped weights
    if keep_intermediates:
        # copies of the scores, the scaled and the masked scores, and the unmasked softmax input,
        # the soft-capped scores and the ALiBi bias when there are such
        kept = 4 + (config.softcap is not None) + (config.position == "alibi")
        peak += kept * hll * item + (kept * hll * 4 if config.dtype != "float32" else 0)  # + their float32 copies
    proj = 2 * lq * e * width + 2 * 2 * lk * e * kv_width
    out = 2 * lq * width * e if h > 1 else 0
    # QK^T and weights@V, ~5 ops/element softmax, over the cells a causal mask or window leaves
    cells = h * visible_cells(lq, lk, causal="causal" in config.mask, window=config.window)
    flops = proj + 2 * 2 * cells * d + 5 * cells + out
    return RunEstimate(weights_bytes=weights_bytes, peak_bytes=int(peak), flops=int(flops))
