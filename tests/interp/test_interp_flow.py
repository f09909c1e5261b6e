"""Attention flow against networkx's maximum flow on the same layered graph, and by hand."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from attndesk.errors import ConfigError
from attndesk.interp import attention_flow
from attndesk.teaching.rollout import attention_rollout, layer_transition


def random_weights(layers=3, heads=2, length=5, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((layers, heads, length, length)) * np.tril(np.ones((length, length)))  # causal
    return w / w.sum(-1, keepdims=True)


def test_one_layer_flow_is_the_edge_and_rollout_is_kept():
    w = random_weights(layers=1)
    result = attention_flow(w)
    np.testing.assert_allclose(result.flow, layer_transition(w[0]), atol=1e-6)
    np.testing.assert_allclose(result.rollout, attention_rollout(w))


def test_flow_equals_networkx_maximum_flow():
    nx = pytest.importorskip("networkx")
    w = random_weights()
    seen: list[float] = []
    result = attention_flow(w, rows=[4, 2], progress=lambda f, m: seen.append(f))
    length = w.shape[-1]
    graph = nx.DiGraph()
    for layer in range(w.shape[0]):
        a = layer_transition(w[layer])
        for i in range(length):
            for j in range(length):
                if a[i, j] > 0:
                    graph.add_edge((layer, j), (layer + 1, i), capacity=a[i, j])
    for r, i in enumerate([4, 2]):
        for j in range(length):
            expected = nx.maximum_flow_value(graph, (0, j), (w.shape[0], i)) if graph.has_node((0, j)) else 0.0
            assert result.flow[r, j] == pytest.approx(expected, abs=1e-5)
    assert seen == [0.5, 1.0]
    # causal: a token receives no flow from later tokens
    assert result.flow[1, 3:].max() == 0.0


def test_batched_pairs_equal_one_maximum_flow_per_pair(monkeypatch):
    """Several (source, sink) pairs per scipy call, in chunks, without a causal mask: each pair's
    value is scipy's own maximum flow on the graph alone."""
    from scipy.sparse.csgraph import maximum_flow

    from attndesk.interp import flow as flow_module

    rng = np.random.default_rng(1)
    w = rng.random((3, 2, 9, 9)) * (rng.random((3, 1, 9, 9)) < 0.5)  # sparse, not causal
    w = w / np.maximum(w.sum(-1, keepdims=True), 1e-12)
    monkeypatch.setattr(flow_module, "BATCH", 4)  # 9 sources: chunks of 4, 4 and 1
    result = attention_flow(w)
    graph = flow_module._graph([layer_transition(w[n]) for n in range(3)], result.scale)
    expected = [[maximum_flow(graph, j, 3 * 9 + i).flow_value / result.scale for j in range(9)] for i in range(9)]
    np.testing.assert_array_equal(result.flow, np.array(expected))


def test_a_large_graph_is_not_copied_past_the_edge_bound(monkeypatch):
    """Copies per call are bounded by edges: a graph over ``BATCH_EDGES`` goes one copy per call
    (32 copies of a 512-token encoder's graph took gigabytes), with the same values."""
    import scipy.sparse.csgraph as csgraph

    from attndesk.interp import flow as flow_module

    rng = np.random.default_rng(2)
    w = rng.random((2, 2, 12, 12))
    w /= w.sum(-1, keepdims=True)
    batched = attention_flow(w, rows=[11]).flow
    edges = []
    real = csgraph.maximum_flow

    def counting(graph, source, sink):
        edges.append(graph.nnz)
        return real(graph, source, sink)

    monkeypatch.setattr(csgraph, "maximum_flow", counting)
    monkeypatch.setattr(flow_module, "BATCH_EDGES", 300)  # what leads to token 11: 12 x 12 + 12 edges
    np.testing.assert_array_equal(attention_flow(w, rows=[11]).flow, batched)
    assert edges == [144 + 12 + 2] * 12  # one copy (and its two super edges) per call, for 12 sources


def test_cancel_is_seen_between_scipy_calls_within_one_row(monkeypatch):
    """One output row of a large graph is many calls: a cancel lands before the next call, not
    after the row (a 512-token row is hundreds of calls; quitting waited for it)."""
    import scipy.sparse.csgraph as csgraph

    from attndesk.errors import Cancelled
    from attndesk.interp import flow as flow_module

    rng = np.random.default_rng(3)
    w = rng.random((2, 2, 12, 12))
    w /= w.sum(-1, keepdims=True)
    stop = threading.Event()
    calls = []
    real = csgraph.maximum_flow

    def counting(graph, source, sink):
        calls.append(1)
        if len(calls) == 3:
            stop.set()  # the user pressed Cancel during the third call
        return real(graph, source, sink)

    monkeypatch.setattr(csgraph, "maximum_flow", counting)
    monkeypatch.setattr(flow_module, "BATCH_EDGES", 300)  # one copy per call: 12 calls for the row
    with pytest.raises(Cancelled):
        attention_flow(w, rows=[11], cancel=stop)
    assert len(calls) == 3


def test_bad_shapes_are_refused():
    with pytest.raises(ConfigError, match=r"\[layers, H, L, L\]"):
        attention_flow(np.ones((2, 3, 3)))
    with pytest.raises(ConfigError, match="rows"):
        attention_flow(random_weights(), rows=[9])


def test_a_models_flow_uses_its_own_attention(folders):
    from attndesk.interp.flow import model_attention_flow
    from attndesk.models import load_pretrained, run_pretrained

    model = load_pretrained(folders["gpt2"])
    result = model_attention_flow(model, "the cat sat", rows=[0, 4])
    run = run_pretrained(model, "the cat sat")
    np.testing.assert_allclose(result.rollout, attention_rollout(run.weights))
    assert result.tokens == run.tokens and result.flow.shape == (2, len(run.tokens))
    # the first token attends only to itself in a decoder: all its flow is its own
    assert result.flow[0, 0] == pytest.approx(1.0, abs=1e-5) and result.flow[0, 1:].max() == 0.0
