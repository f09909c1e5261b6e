"""A sliding window's K/V cache (a rolling buffer of the last W tokens) and the W the window pair uses."""

from __future__ import annotations

import pytest

from attndesk.core import AttentionConfig
from attndesk.teaching.kv_cost import CACHE_LENGTHS, kv_cache_bytes, window_cache_row
from attndesk.teaching.variant_compare import comparison_window


def test_window_cache_stops_growing_at_the_window():
    config = AttentionConfig(embed_dim=512, num_heads=8, kv_heads=2, dtype="bfloat16")
    row = window_cache_row(config, 4096)
    assert row.kv_heads == 2 and not row.current and "window 4096" in row.label and row.label.startswith("GQA")
    assert row.bytes_per_token == kv_cache_bytes(2, 64, 1, itemsize=2) == 512
    assert row.bytes == {n: kv_cache_bytes(2, 64, min(n, 4096), itemsize=2) for n in CACHE_LENGTHS}
    assert row.bytes[4096] == row.bytes[32768] == row.bytes[131072] == 2 * 2 * 64 * 4096 * 2
    with pytest.raises(ValueError, match="at least 1"):
        window_cache_row(config, 0)


def test_comparison_window_is_the_configs_or_a_quarter():
    assert comparison_window(AttentionConfig(window=5), 100) == 5
    assert comparison_window(AttentionConfig(), 100) == 25
    assert comparison_window(AttentionConfig(), 3) == 2
