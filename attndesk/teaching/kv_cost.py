"""What a decoder's K/V cache costs per variant: the reason grouped-query attention exists.

Generating token t+1 reuses the keys and values of tokens 0..t, so every layer keeps K and V:
2 x KV heads x d_k numbers per token. H query heads sharing KV heads shrink that by H / KV
while the queries (which are not cached) stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

from attndesk.runs.config import AttentionConfig, divisors
from attndesk.system.devices import DTYPES

CACHE_LENGTHS = (4096, 32768, 131072)  # 4k / 32k / 128k tokens


def kv_cache_bytes(kv_heads: int, head_dim: int, tokens: int, *, layers: int = 1, itemsize: int = 2) -> int:
    """Bytes of K and V for ``tokens`` tokens: 2 x layers x KV x d_k x tokens x itemsize."""
    return 2 * layers * kv_heads * head_dim * tokens * itemsize


@dataclass(frozen=True)
class KVCacheRow:
    """One K/V head count at the config's shape: its name and bytes at each length."""

    kv_heads: int
    label: str  # e.g. "GQA, 2 K/V heads (4 queries each)"
    bytes_per_token: int
    bytes: dict[int, int]  # tokens -> bytes
    current: bool  # the config's own choice

    def ratio_to(self, other: KVCacheRow) -> float:
        return self.bytes_per_token / other.bytes_per_token


def _label(kv: int, heads: int) -> str:
    if kv == heads:
        return f"MHA, {kv} K/V heads (one per query head)"
    if kv == 1:
        return f"MQA, 1 K/V head (all {heads} queries share it)"
    return f"GQA, {kv} K/V heads ({heads // kv} queries each)"


def kv_cache_table(
    config: AttentionConfig, lengths: tuple[int, ...] = CACHE_LENGTHS, *, layers: int = 1, dtype: str | None = None
) -> list[KVCacheRow]:
    """Every valid K/V head count for the config's heads and d_k, most heads first, with the
    cache at each length (``layers`` layers, batch 1, ``dtype`` default the config's)."""
    itemsize = DTYPES[dtype or config.dtype].itemsize
    rows = []
    for kv in sorted(divisors(config.num_heads), reverse=True):
        per_token = kv_cache_bytes(kv, config.head_dim, 1, layers=layers, itemsize=itemsize)
        rows.append(
            KVCacheRow(
                kv,
                _label(kv, config.num_heads),
                per_token,
                {n: per_token * n for n in lengths},
                kv == config.num_kv_heads,
            )
        )
    return rows


def window_cache_row(
    config: AttentionConfig,
    window: int,
    lengths: tuple[int, ...] = CACHE_LENGTHS,
    *,
    layers: int = 1,
    dtype: str | None = None,
) -> KVCacheRow:
    """The config's K/V heads under a sliding window of ``window`` keys: a decoder needs only the
    last ``window`` tokens' K and V (a rolling buffer, as Mistral keeps), so the cache stops growing."""
    if window < 1:
        raise ValueError(f"a window is at least 1 key, got {window}")
    itemsize = DTYPES[dtype or config.dtype].itemsize
    kv = config.num_kv_heads
    per_token = kv_cache_bytes(kv, config.head_dim, 1, layers=layers, itemsize=itemsize)
    label = f"{_label(kv, config.num_heads).split(',')[0]} + window {window} (keeps the last {window} tokens)"
    return KVCacheRow(kv, label, per_token, {n: per_token * min(n, window) for n in lengths}, False)


__all__ = ["CACHE_LENGTHS", "KVCacheRow", "kv_cache_bytes", "kv_cache_table", "window_cache_row"]
