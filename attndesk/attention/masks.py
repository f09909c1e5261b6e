"""Boolean attention masks. Convention everywhere: True = this query may attend to this key
(the same as torch.nn.functional.scaled_dot_product_attention).

``MaskSpec`` describes a run's mask without its [Lq, Lk] matrix (padded keys, causality, a
sliding window), so long runs make each block's rows on the fly and visit only the band of
keys a windowed or causal block can see.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
import torch


def padding_mask(token_ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Keys that are real tokens: ids [B, L] -> bool [B, 1, 1, L].

    The mask lies along the KEY axis (the last one), so every query row ignores padded keys;
    it broadcasts over heads and query positions.
    """
    if token_ids.dim() == 1:
        token_ids = token_ids.unsqueeze(0)
    return (token_ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """bool [L, L], True on and below the diagonal: position i sees positions 0..i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril_()


def window_mask(lq: int, lk: int, window: int, device: torch.device | str | None = None) -> torch.Tensor:
    """bool [Lq, Lk], True where |i - j| < window: the sliding-window band."""
    qi = torch.arange(lq, device=device)[:, None]
    kj = torch.arange(lk, device=device)[None, :]
    return (qi - kj).abs_() < window


def build_mask(
    kind: str,
    query_ids: torch.Tensor,
    key_ids: torch.Tensor | None = None,
    pad_id: int = 0,
    *,
    window: int | None = None,
) -> torch.Tensor | None:
    """The mask for a config's ``mask`` kind (and sliding ``window``), broadcastable to
    [B, 1, Lq, Lk]; None when nothing is masked."""
    key_ids = query_ids if key_ids is None else key_ids
    mask = None
    if "padding" in kind:
        mask = padding_mask(key_ids, pad_id)
    if "causal" in kind:
        causal = causal_mask(query_ids.shape[-1], device=query_ids.device)
        mask = causal if mask is None else mask & causal
    if window is not None:
        band = window_mask(query_ids.shape[-1], key_ids.shape[-1], window, device=query_ids.device)
        mask = band if mask is None else mask & band
    return mask


def visible_cells(lq: int, lk: int, *, causal: bool = False, window: int | None = None) -> int:
    """How many (query, key) cells a causal mask and a window leave (padding aside): the work
    per head of a run that skips the rest."""
    i = np.arange(lq, dtype=np.int64)
    lo = np.zeros_like(i) if window is None else np.maximum(0, i - window + 1)
    hi = np.full_like(i, lk) if window is None else np.minimum(lk, i + window)
    if causal:
        hi = np.minimum(hi, i + 1)
    return int(np.maximum(0, hi - lo).sum())


_SHARED_CELLS = 1 << 20  # blocks up to this size are cached across runs (4 MiB as float32 biases)


@lru_cache(maxsize=32)
def _shared_band(causal: bool, window: int | None, offset: int, rows: int, cols: int, device: str | None):
    return _make_band(causal, window, offset, rows, cols, device)


@lru_cache(maxsize=32)
def _shared_bias(causal: bool, window: int | None, offset: int, rows: int, cols: int, dtype, device: str | None):
    return _make_bias(_shared_band(causal, window, offset, rows, cols, device), dtype)


def _make_band(causal: bool, window: int | None, offset: int, rows: int, cols: int, device) -> torch.Tensor:
    """bool [rows, cols]: True where j - i is allowed, for a block whose first query is ``offset``
    positions after its first key."""
    diff = (
        torch.arange(rows, dtype=torch.int32, device=device)[:, None]
        - torch.arange(cols, dtype=torch.int32, device=device)[None, :]
    ) + offset  # i - j
    band = diff >= 0 if causal else None
    if window is not None:
        near = diff < window if causal else diff.abs_() < window
        band = near if band is None else band & near
    assert band is not None, "a band needs a causal mask or a window"  # else _inside() answered first
    return band


def _make_bias(band: torch.Tensor, dtype) -> torch.Tensor:
    return torch.zeros(band.shape, dtype=dtype, device=band.device).masked_fill_(~band, float("-inf"))


class BandMasks:
    """What causality and a window allow in a block of queries q0..q1-1 x keys k0..k1-1:
    bool [b, w], True = may attend; None when they allow every cell of it. Blocks with the same
    shape and offset q0 - k0 share one mask (every interior block of a windowed run; small ones
    across runs too), so a run makes only a few."""

    def __init__(self, *, causal: bool = False, window: int | None = None, device=None):
        self.causal, self.window, self.device = causal, window, device
        self._cache: dict[tuple, torch.Tensor] = {}  # this run's blocks too large to share

    def _inside(self, q0: int, q1: int, k0: int, k1: int) -> bool:
        """Whether the band allows every cell of the block (from its extreme offsets alone)."""
        if not self.causal and self.window is None:
            return True
        low, high = q0 - (k1 - 1), (q1 - 1) - k0  # the smallest and largest i - j in the block
        causal_ok = not self.causal or low >= 0
        return causal_ok and (self.window is None or (high < self.window and (self.causal or -low < self.window)))

    def _get(self, kind: str, q0: int, q1: int, k0: int, k1: int, dtype=None) -> torch.Tensor | None:
        if self._inside(q0, q1, k0, k1):
            return None
        shape = (self.causal, self.window, q0 - k0, q1 - q0, k1 - k0)
        device = None if self.device is None else str(self.device)
        if (q1 - q0) * (k1 - k0) <= _SHARED_CELLS:
            return _shared_band(*shape, device) if kind == "band" else _shared_bias(*shape, dtype, device)
        key = (kind, dtype, *shape)
        if key not in self._cache:
            if len(self._cache) > 16:
                self._cache.clear()
            band = _make_band(*shape, self.device)
            self._cache[key] = band if kind == "band" else _make_bias(band, dtype)
        return self._cache[key]

    def __call__(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor | None:
        return self._get("band", q0, q1, k0, k1)

    def bias(self, q0: int, q1: int, k0: int, k1: int, dtype=torch.float32) -> torch.Tensor | None:
        """The band as an additive score bias [b, w]: 0 inside, -inf outside (cached as well).
        Adding it is ~25x faster than a boolean masked_fill on the CPU."""
        return self._get("bias", q0, q1, k0, k1, dtype)


@dataclass(frozen=True)
class MaskSpec:
    """A run's mask without its [Lq, Lk] matrix: which keys are real tokens, causality and a
    sliding window. True = may attend, as everywhere in attndesk.

    ``key_valid`` [Lk] bool (None = every key is real); ``causal``: query i sees keys 0..i;
    ``window`` W: query i sees key j only when |i - j| < W (None = no window).
    """

    lq: int
    lk: int
    key_valid: torch.Tensor | None = None
    causal: bool = False
    window: int | None = None

    @property
    def is_none(self) -> bool:
        return self.key_valid is None and not self.causal and self.window is None

    @property
    def device(self):
        return self.key_valid.device if self.key_valid is not None else None

    def key_range(self, q0: int, q1: int, align: int = 1) -> tuple[int, int]:
        """The keys k0..k1-1 that queries q0..q1-1 may see at all (every key without a window or
        causality), widened to multiples of ``align`` (e.g. the overview's tile side)."""
        k0, k1 = 0, self.lk
        if self.window is not None:
            k0 = max(0, q0 - self.window + 1)
            k1 = min(self.lk, q1 - 1 + self.window)
        if self.causal:
            k1 = min(k1, q1)
        k1 = min(self.lk, -(-k1 // align) * align)
        k0 = min(k0 // align * align, k1)
        return k0, k1

    def rows(self, q0: int, q1: int, k0: int = 0, k1: int | None = None) -> torch.Tensor | None:
        """The mask of queries q0..q1-1 over keys k0..k1-1: [q1-q0, k1-k0] (or [1, k1-k0] when the
        rows do not differ); None when nothing in it is masked."""
        k1 = self.lk if k1 is None else k1
        mask = None if self.key_valid is None else self.key_valid[None, k0:k1]  # [1, w]
        band = self.band_masks(q0, q1, k0, k1)
        if band is not None:
            mask = band if mask is None else band & mask
        return mask

    @cached_property
    def band_masks(self) -> BandMasks:
        """The causal/window part of the mask, block by block (cached per block shape)."""
        return BandMasks(causal=self.causal, window=self.window, device=self.device)

    @cached_property
    def _valid_before(self) -> torch.Tensor | None:
        """[Lk + 1]: how many real keys come before each position (for empty-row checks)."""
        if self.key_valid is None:
            return None
        counts = torch.zeros(self.lk + 1, dtype=torch.int64, device=self.device)
        counts[1:] = torch.cumsum(self.key_valid.to(torch.int64), 0)
        return counts

    def empty_rows(self, q0: int, q1: int) -> torch.Tensor | None:
        """[q1-q0, 1] bool, True for a query that may see no key at all; None when none is empty."""
        qi = torch.arange(q0, q1, device=self.device)
        lo = torch.zeros_like(qi) if self.window is None else (qi - self.window + 1).clamp_(min=0)
        hi = torch.full_like(qi, self.lk)  # exclusive
        if self.window is not None:
            hi = torch.minimum(hi, qi + self.window)
        if self.causal:
            hi = torch.minimum(hi, qi + 1)
        hi = torch.maximum(hi, lo)
        if self._valid_before is None:
            seen = hi - lo
        else:
            seen = self._valid_before[hi] - self._valid_before[lo]
        empty = seen == 0
        return empty[:, None] if bool(empty.any()) else None

    def allowed(self, q: int, k: int) -> bool:
        """May query q attend to key k?"""
        if self.causal and k > q:
            return False
        if self.window is not None and abs(q - k) >= self.window:
            return False
        return self.key_valid is None or bool(self.key_valid[k])

    def to_tensor(self) -> torch.Tensor | None:
        """The full [Lq, Lk] bool matrix (only for runs small enough to hold it)."""
        rows = None if self.is_none else self.rows(0, self.lq)
        return None if rows is None else torch.broadcast_to(rows, (self.lq, self.lk))

    def to_numpy(self) -> np.ndarray | None:
        """The full [Lq, Lk] bool matrix (only for small runs); a broadcast view for padding alone."""
        full = self.to_tensor()
        return None if full is None else full.cpu().numpy()

    def tile_all_masked(self, factor: int) -> np.ndarray | None:
        """[ceil(Lq/f), ceil(Lk/f)] bool: True where every cell of the f x f tile is masked.

        Worked out from the key vector, the diagonal and the band, never from the full matrix
        (a tile masked only by padding and band together, neither alone, counts as not masked).
        """
        if self.is_none:
            return None
        rows, cols = -(-self.lq // factor), -(-self.lk // factor)
        out = np.zeros((rows, cols), dtype=np.bool_)
        if self.key_valid is not None:
            valid = self.key_valid.cpu().numpy()
            padded = np.zeros(cols * factor, dtype=np.bool_)
            padded[: self.lk] = valid
            col_dead = np.asarray(~padded.reshape(cols, factor).any(axis=1))  # [C]: no real key in the tile
            out |= col_dead[None, :]
        first_key = np.arange(cols) * factor  # [C]
        last_key = np.minimum(first_key + factor, self.lk) - 1
        first_query = np.arange(rows) * factor  # [R]
        last_query = np.minimum(first_query + factor, self.lq) - 1
        if self.causal:
            # a tile is wholly above the diagonal when its first key comes after its last query
            out |= first_key[None, :] > last_query[:, None]
        if self.window is not None:
            # the closest pair of a tile is this far apart; the whole tile is outside the band
            gap = np.maximum(first_key[None, :] - last_query[:, None], first_query[:, None] - last_key[None, :])
            out |= gap >= self.window
        return out
