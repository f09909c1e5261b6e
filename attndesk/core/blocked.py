"""Query-blocked attention: the same numbers as the full path, with a score buffer of block x Lk.

The full path materialises [H, Lq, Lk] scores and weights at once (8 heads x 16k tokens: 8 GiB).
Here queries go through in blocks of ``block_rows``; for each block and head the weights row
block [b, Lk] is computed exactly as the full path computes it (Q K^T, scale, masked softmax),
used for the weighted sum, handed to a *sink* (which stores it or folds it into a display
pyramid) and dropped. The mask is never built as an [Lq, Lk] matrix either: ``MaskSpec`` makes
each block's rows on the fly.

``ExactAttention`` keeps the projected Q and K (O(L x E) memory) and recomputes any rows or
cells on demand with the very same function, so hover read-outs are exact weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch

from .attention import masked_softmax
from .errors import Cancelled, ConfigError
from .timing import NULL_TIMER

MEAN = "mean"  # the head argument meaning "mean over heads" (the heatmap panel's convention)


@dataclass(frozen=True)
class MaskSpec:
    """A run's mask without its [Lq, Lk] matrix: which keys are real tokens, and causality.

    ``key_valid`` [Lk] bool (None = every key is real); ``causal``: query i sees keys 0..i.
    True = may attend, as everywhere in attndesk.
    """

    lq: int
    lk: int
    key_valid: torch.Tensor | None = None
    causal: bool = False

    @property
    def is_none(self) -> bool:
        return self.key_valid is None and not self.causal

    def rows(self, q0: int, q1: int) -> torch.Tensor | None:
        """The mask rows of queries q0..q1-1: [q1-q0, Lk] (or [1, Lk] when rows do not differ)."""
        mask = None if self.key_valid is None else self.key_valid[None, :]  # [1, Lk]
        if self.causal:
            device = self.key_valid.device if self.key_valid is not None else None
            qi = torch.arange(q0, q1, device=device)[:, None]  # [b, 1]
            ki = torch.arange(self.lk, device=device)[None, :]  # [1, Lk]
            causal = ki <= qi  # [b, Lk]
            mask = causal if mask is None else causal & mask
        return mask

    def allowed(self, q: int, k: int) -> bool:
        """May query q attend to key k?"""
        if self.causal and k > q:
            return False
        return self.key_valid is None or bool(self.key_valid[k])

    def to_numpy(self) -> np.ndarray | None:
        """The full [Lq, Lk] bool matrix (only for small runs); a broadcast view for padding alone."""
        if self.is_none:
            return None
        if not self.causal:
            return np.broadcast_to(self.key_valid.cpu().numpy()[None, :], (self.lq, self.lk))
        return self.rows(0, self.lq).cpu().numpy()

    def tile_all_masked(self, factor: int) -> np.ndarray | None:
        """[ceil(Lq/f), ceil(Lk/f)] bool: True where every cell of the f x f tile is masked.

        Worked out from the key vector and the diagonal, never from the full matrix.
        """
        if self.is_none:
            return None
        rows, cols = -(-self.lq // factor), -(-self.lk // factor)
        out = np.zeros((rows, cols), dtype=np.bool_)
        if self.key_valid is not None:
            valid = self.key_valid.cpu().numpy()
            padded = np.zeros(cols * factor, dtype=np.bool_)
            padded[: self.lk] = valid
            col_dead = ~padded.reshape(cols, factor).any(axis=1)  # [C]: no real key in the tile
            out |= col_dead[None, :]
        if self.causal:
            # a tile is wholly above the diagonal when its first key comes after its last query
            first_key = np.arange(cols) * factor  # [C]
            last_query = np.minimum((np.arange(rows) + 1) * factor, self.lq) - 1  # [R]
            out |= first_key[None, :] > last_query[:, None]
        return out


def attention_rows(q: torch.Tensor, k: torch.Tensor, mask_rows: torch.Tensor | None, *, scale: float) -> torch.Tensor:
    """Exact weights of some query rows: q [..., b, d], k [..., Lk, d] -> [..., b, Lk].

    The same operations, in the same order, as ``attention.attend_heads`` (Q K^T, the scale,
    the masked softmax), so a block equals the matching rows of the full matrix.
    """
    scores = torch.matmul(q, k.transpose(-2, -1))  # [..., b, Lk]
    if scale != 1.0:
        scores.mul_(scale)
    return masked_softmax(scores, mask_rows, inplace=True)


def _masked_softmax_into(scores: torch.Tensor, mask: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``attention.masked_softmax`` (the same operations, so the same numbers) writing into a
    reused buffer: a fresh [block, Lk] tensor per head and block would page-fault every time."""
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    torch.softmax(scores, dim=-1, out=out)
    if mask is not None:
        row_has_key = mask.any(dim=-1, keepdim=True)  # [b or 1, 1]
        if not bool(row_has_key.all()):
            out.masked_fill_(~row_has_key, 0.0)  # softmax of an all -inf row is NaN: attend to nothing
    return out


class WeightsSink(Protocol):
    """Receives each exact weights block once; keeps what it wants of it."""

    def add(self, head: int, row0: int, weights: torch.Tensor) -> None:
        """weights [b, Lk] of ``head`` for queries row0..row0+b-1."""

    def end_block(self, row0: int, row1: int) -> None:
        """Every head of queries row0..row1-1 has been added."""


class FullSink:
    """Stores every weight into an [H, Lq, Lk] numpy array (float32, or float16 to halve it)."""

    def __init__(self, num_heads: int, lq: int, lk: int, dtype=np.float32):
        self.weights = np.empty((num_heads, lq, lk), dtype=dtype)

    def add(self, head: int, row0: int, weights: torch.Tensor) -> None:
        block = weights.detach().to("cpu", torch.float32 if self.weights.dtype == np.float32 else torch.float16)
        self.weights[head, row0 : row0 + block.shape[0]] = block.numpy()

    def end_block(self, row0: int, row1: int) -> None:
        return None


class TeeSink:
    """Hands every block to several sinks (e.g. stored weights and the overview)."""

    def __init__(self, *sinks: WeightsSink):
        self.sinks = sinks

    def add(self, head: int, row0: int, weights: torch.Tensor) -> None:
        for sink in self.sinks:
            sink.add(head, row0, weights)

    def end_block(self, row0: int, row1: int) -> None:
        for sink in self.sinks:
            sink.end_block(row0, row1)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: MaskSpec,
    *,
    scale: float,
    block_rows: int,
    sink: WeightsSink | None = None,
    timer=NULL_TIMER,
    progress: Callable[[int, int, int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> torch.Tensor:
    """Attention per head over query blocks: q [H, Lq, d], k [H, Lk, d], v [H, Lk, dv] -> context [H, Lq, dv].

    Live memory beyond the inputs and the context is one [block_rows, Lk] score buffer and its
    softmax, both reused by every block (sinks must copy what they keep). ``timer`` accumulates the usual stages (scores, mask+softmax, weighted sum) over all
    blocks; the sink's own time is added to ``timer.seconds["overview"]`` when the timer has seconds.
    ``progress(block, blocks, head, heads)`` follows each head of each block; ``should_cancel`` is
    polled before each one and raises ``Cancelled`` (within one block's time of the request).
    """
    if block_rows < 1:
        raise ConfigError(f"block_rows must be at least 1, got {block_rows}")
    heads, lq, _ = q.shape
    lk = k.shape[1]
    context = torch.empty((heads, lq, v.shape[-1]), dtype=v.dtype, device=v.device)  # [H, Lq, dv]
    rows_max = min(block_rows, lq)
    score_buf = torch.empty((rows_max, lk), dtype=q.dtype, device=q.device)  # reused by every block
    weight_buf = torch.empty((rows_max, lk), dtype=q.dtype, device=q.device)
    blocks = -(-lq // block_rows)
    seconds = getattr(timer, "seconds", None)
    for b, row0 in enumerate(range(0, lq, block_rows)):
        row1 = min(row0 + block_rows, lq)
        rows = mask.rows(row0, row1)
        for h in range(heads):
            if should_cancel is not None and should_cancel():
                raise Cancelled("cancelled")
            with timer.stage("scores"):
                scores = torch.matmul(q[h, row0:row1], k[h].transpose(-2, -1), out=score_buf[: row1 - row0])  # [b, Lk]
                if scale != 1.0:
                    scores.mul_(scale)
            with timer.stage("mask+softmax"):
                weights = _masked_softmax_into(scores, rows, weight_buf[: row1 - row0])  # [b, Lk]
            with timer.stage("weighted sum"):
                torch.matmul(weights, v[h], out=context[h, row0:row1])
            if sink is not None:
                start = time.perf_counter()
                sink.add(h, row0, weights)
                if seconds is not None:
                    seconds["overview"] = seconds.get("overview", 0.0) + time.perf_counter() - start
            if progress is not None:
                progress(b, blocks, h, heads)
        if sink is not None:
            start = time.perf_counter()
            sink.end_block(row0, row1)
            if seconds is not None:
                seconds["overview"] = seconds.get("overview", 0.0) + time.perf_counter() - start
    return context


class ExactAttention:
    """Exact weights on demand from the kept projections: q [H, Lq, d] (scale folded in or not),
    k [H, Lk, d] and the mask spec. Memory O((Lq + Lk) x E); one cell costs one row (Lk x d)."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, mask: MaskSpec, *, scale: float, block_bytes: int = 32 * 2**20):
        self.q, self.k, self.mask, self.scale = q, k, mask, float(scale)
        self.num_heads, self.lq, self.lk = int(q.shape[0]), int(q.shape[1]), int(k.shape[1])
        self._block_rows = max(1, block_bytes // max(1, self.lk * 4 * self.num_heads))

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.num_heads, self.lq, self.lk)

    def _check(self, head, q0: int, q1: int) -> None:
        if head != MEAN and not (isinstance(head, (int, np.integer)) and 0 <= head < self.num_heads):
            raise IndexError(f"head {head!r} out of range 0..{self.num_heads - 1} (or {MEAN!r})")
        if not 0 <= q0 <= q1 <= self.lq:
            raise IndexError(f"query rows {q0}:{q1} out of range 0:{self.lq}")

    def _rows(self, head, q0: int, q1: int) -> torch.Tensor:
        """[q1-q0, Lk] weights of one head (or their mean over heads) in the compute dtype."""
        rows = self.mask.rows(q0, q1)
        with torch.inference_mode():
            if head == MEAN:
                w = attention_rows(self.q[:, q0:q1], self.k, rows, scale=self.scale)  # [H, b, Lk]
                return w.mean(dim=0)
            return attention_rows(self.q[int(head), q0:q1], self.k[int(head)], rows, scale=self.scale)

    def value(self, head, q: int, k: int) -> float:
        """The exact weight of one cell: ``head`` an int or ``"mean"`` (mean over heads)."""
        self._check(head, q, q + 1)
        if not 0 <= k < self.lk:
            raise IndexError(f"key {k} out of range 0..{self.lk - 1}")
        return float(self._rows(head, q, q + 1)[0, k])

    def rows(self, head, q0: int, q1: int) -> np.ndarray:
        """Exact float32 weights [q1-q0, Lk] of queries q0..q1-1."""
        return self.region(head, q0, q1, 0, self.lk)

    def region(self, head, q0: int, q1: int, k0: int, k1: int, max_cells: int = 64 * 2**20) -> np.ndarray:
        """Exact float32 weights [q1-q0, k1-k0]; computed a block of rows at a time.

        Refuses (ConfigError) a region over ``max_cells`` cells rather than allocating it: ask
        ``region_overview`` for a downsampled view of large regions.
        """
        self._check(head, q0, q1)
        if not 0 <= k0 <= k1 <= self.lk:
            raise IndexError(f"keys {k0}:{k1} out of range 0:{self.lk}")
        cells = (q1 - q0) * (k1 - k0)
        if cells > max_cells:
            raise ConfigError(
                f"an exact region of {q1 - q0:,} x {k1 - k0:,} cells is too large to hold at once "
                f"(limit {max_cells:,} cells); zoom in further or ask for a downsampled overview"
            )
        out = np.empty((q1 - q0, k1 - k0), dtype=np.float32)
        for r0 in range(q0, q1, self._block_rows):
            r1 = min(r0 + self._block_rows, q1)
            out[r0 - q0 : r1 - q0] = self._rows(head, r0, r1)[:, k0:k1].float().cpu().numpy()
        return out

    def region_overview(self, head, q0: int, q1: int, k0: int, k1: int, factor: int, how: str = "max") -> np.ndarray:
        """A region reduced by ``factor`` x ``factor`` tiles (``how`` = "max" or "mean"), exact
        inputs, computed a block of rows at a time: float32 [ceil((q1-q0)/f), ceil((k1-k0)/f)]."""
        self._check(head, q0, q1)
        if factor < 1:
            raise ValueError("factor must be >= 1")
        if factor == 1:
            return self.region(head, q0, q1, k0, k1)
        rows_out, cols_out = -(-(q1 - q0) // factor), -(-(k1 - k0) // factor)
        out = np.zeros((rows_out, cols_out), dtype=np.float32)
        step = max(factor, self._block_rows // factor * factor)  # whole tile rows per block
        for r0 in range(q0, q1, step):
            r1 = min(r0 + step, q1)
            w = self._rows(head, r0, r1)[:, k0:k1].float()[None]  # [1, b, k]
            if how == "max":
                tiles = torch.nn.functional.max_pool2d(w, factor, factor, ceil_mode=True)
            else:
                tiles = torch.nn.functional.avg_pool2d(w, factor, factor, ceil_mode=True)
            t0 = (r0 - q0) // factor
            out[t0 : t0 + tiles.shape[1]] = tiles[0].cpu().numpy()
        return out
