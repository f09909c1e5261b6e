"""How a head is named: one spelling for every tab, page and export."""

from __future__ import annotations

from types import SimpleNamespace

from attndesk.attention.types import head_name


def test_a_head_is_named_by_layer_and_head():
    assert head_name(1, 3) == "L1 H3"
    assert head_name(None, 3) == "H3"  # a single layer


def test_the_toy_models_heads_and_the_cli_tables_use_the_same_name():
    import numpy as np

    from attndesk.attention.types import AttentionMap
    from attndesk.cli.interp_job import labels

    tokens = ["a", "b"]
    toy = AttentionMap(tokens, tokens, np.zeros((3, 2, 2), np.float32))
    assert [toy.label(h) for h in range(3)] == ["H0", "H1", "H2"]  # one layer: no layer in the name

    effects = SimpleNamespace(effects=np.zeros((2, 3)))  # a patching report of 2 layers x 3 heads
    report = SimpleNamespace(positions=tokens, results={"head": effects, "head_position": effects})
    rows = labels(report, "head_position", 3)[0]
    assert rows == [head_name(n, h) for n in range(2) for h in range(3)] and rows[4] == "L1 H1"
    assert labels(report, "head", 3)[1] == ["H0", "H1", "H2"]
