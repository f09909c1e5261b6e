"""How a head is named: one spelling for every tab, page and export."""

from __future__ import annotations

from attndesk.core.types import head_name


def test_a_head_is_named_by_layer_and_head():
    assert head_name(1, 3) == "L1 H3"
    assert head_name(None, 3) == "H3"  # a single layer
