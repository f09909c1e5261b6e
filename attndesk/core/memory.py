"""What a run will allocate, worked out before it starts, so that it can be refused or re-planned."""

from __future__ import annotations

from dataclasses import dataclass

from .config import AttentionConfig
from .devices import DTYPES
from .masks import visible_cells


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units, as RAM is sold and reported."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class RunEstimate:
    """Bytes of the tensors a full (unblocked) toy run allocates, and its matmul FLOPs."""

    weights_bytes: int  # the [H, Lq, Lk] float32 weights handed back to the caller
    peak_bytes: int  # every tensor alive at the softmax, the peak of the run
    flops: int

    def describe(self) -> str:
        return f"weights {format_bytes(self.weights_bytes)}, peak {format_bytes(self.peak_bytes)}"


def estimate_run(config: AttentionConfig, query_len: int, key_len: int | None = None) -> RunEstimate:
    """Exact sizes of the tensors ``run_attention`` creates for these lengths (batch of one)."""
    lq, lk = query_len, query_len if key_len is None else key_len
    e, h, d = config.embed_dim, config.num_heads, config.head_dim
    width = h * d  # E for multi-head, hidden_dim for one head
    kv_width = config.num_kv_heads * d  # K and V shrink with grouped-query heads
    item = DTYPES[config.dtype].itemsize
    hll = h * lq * lk
    weights_bytes = hll * 4
    # embeddings (query and key side), q/k/v, the score buffer and the softmax output, the
    # context and the merged output, plus the bool mask.
    peak = item * ((lq + lk) * e + lq * width + 2 * lk * kv_width + 2 * hll + 2 * lq * width) + lq * lk
    if config.dtype != "float32":
        peak += weights_bytes  # the float32 copy handed back
    proj = 2 * lq * e * width + 2 * 2 * lk * e * kv_width
    out = 2 * lq * width * e if h > 1 else 0
    # QK^T and weights@V, ~5 ops/element softmax, over the cells a causal mask or window leaves
    cells = h * visible_cells(lq, lk, causal="causal" in config.mask, window=config.window)
    flops = proj + 2 * 2 * cells * d + 5 * cells + out
    return RunEstimate(weights_bytes=weights_bytes, peak_bytes=int(peak), flops=int(flops))
