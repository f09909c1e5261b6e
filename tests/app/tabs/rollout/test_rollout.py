"""The rollout view shows attention_rollout through the chosen layers and one token's path."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attndesk.app.tabs.rollout.view import RolloutView
from attndesk.core import AttentionConfig, run_attention
from attndesk.interp import attention_flow


def fake_pretrained(layers=3, heads=2, length=5, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((layers, heads, length, length))
    w /= w.sum(-1, keepdims=True)
    return SimpleNamespace(weights=w.astype(np.float32), tokens=["[CLS]", "a", "b", "c", "[SEP]"][:length])


@pytest.fixture
def view(qtbot):
    v = RolloutView()
    qtbot.addWidget(v)
    v.resize(900, 450)
    v.show()
    return v


def manual_rollout(w, n):
    r = np.eye(w.shape[-1])
    for layer in range(n):
        a = w[layer].astype(np.float64).mean(0) + np.eye(w.shape[-1])
        r = (a / a.sum(-1, keepdims=True)) @ r
    return r


def test_rollout_through_all_and_fewer_layers(view):
    result = fake_pretrained()
    view.set_result(result)
    np.testing.assert_allclose(view.rolloutPlot.matrix, manual_rollout(result.weights, 3), atol=1e-12)
    np.testing.assert_allclose(view.rollout.sum(-1), 1.0)
    view.set_layers(1)
    np.testing.assert_allclose(view.rolloutPlot.matrix, manual_rollout(result.weights, 1), atol=1e-12)
    assert "layers 0–0" in view.rolloutPlot.title.text()


def test_follow_a_token(view, qtbot):
    result = fake_pretrained()
    view.set_result(result)
    with qtbot.waitSignal(view.queryChanged) as blocker:
        view.set_query(2)
    assert blocker.args == [2]
    np.testing.assert_allclose(view.followPlot.matrix, result.weights[:, :, 2, :].mean(axis=1), atol=1e-7)
    assert view.followPlot.row_labels == ["layer 0", "layer 1", "layer 2"]
    view.set_head(1)
    assert np.array_equal(view.followPlot.matrix, result.weights[:, 1, 2, :])
    assert '"b"' in view.followPlot.title.text()


def test_toy_result_shows_a_note(view):
    view.set_result(run_attention(AttentionConfig(num_heads=2, embed_dim=8), "a b c"))
    assert view.rolloutPlot.matrix is None and "pretrained" in view.rolloutPlot.message.text()


def test_attention_flow_beside_the_rollout(view):
    result = fake_pretrained()
    view.set_result(result)
    assert view.flow is None and not view.flowPlot.isVisible()
    view.set_flow_shown(True)  # no tracer: computed here
    expected = attention_flow(result.weights)
    np.testing.assert_allclose(view.flow, expected.flow, atol=1e-12)
    np.testing.assert_allclose(view.flowPlot.matrix, expected.flow, atol=1e-12)
    assert view.flowPlot.isVisible() and view.rolloutPlot.isVisible()
    view.set_layers(1)  # one layer: the flow is its transition matrix, as is the rollout
    np.testing.assert_allclose(view.flow, view.rollout, atol=1e-6)
    view.set_flow_shown(False)
    assert view.flow is None and not view.flowPlot.isVisible()


def test_hovering_while_a_shorter_result_is_traced_reads_the_drawn_trace(view):
    view.set_result(fake_pretrained(length=5))  # traced here (no tracer): drawn
    drawn = view.rollout.copy()
    waiting = []
    view.set_tracer(waiting.append)  # the next trace is computed elsewhere and has not come back
    view.set_result(fake_pretrained(length=3, seed=1))
    assert waiting and view.rollout.shape == (5, 5)
    view._hover_rollout(4, 4)  # a cell of the drawn 5 x 5 rollout, beyond the new result's 3 tokens
    assert view.readout.text() == f'rollout: "[SEP]" (4) ← input "[SEP]" (4): {drawn[4, 4]:.4f}'
    view._hover_follow(0, 4)
    assert '"[SEP]" (4)' in view.readout.text()
