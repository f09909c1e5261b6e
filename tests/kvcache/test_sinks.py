"""Sink scores, secondary sinks, the softmax sink's share and massive activations: on hand-made
weights against a loop written from the definitions, and on the trainer's toy model against its
own forward pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.kvcache.sinks import massive_activations, sink_report, toy_activations
from attndesk.train import TrainConfig
from attndesk.train.model import build_model


def _causal_rows(rng: np.random.Generator, layers: int, heads: int, length: int, first: np.ndarray) -> np.ndarray:
    """Causal rows: weight first[l, h] on key 0 (rows after the first), the rest spread at random."""
    w = np.zeros((layers, heads, length, length))
    for layer in range(layers):
        for head in range(heads):
            w[layer, head, 0, 0] = 1.0
            for i in range(1, length):
                rest = rng.random(i)
                w[layer, head, i, 1 : i + 1] = (1 - first[layer, head]) * rest / rest.sum()
                w[layer, head, i, 0] = first[layer, head]
    return w


def test_first_token_weight_sink_heads_and_share_by_layer():
    rng = np.random.default_rng(0)
    first = np.array([[0.9, 0.1, 0.5, 0.29], [0.31, 0.0, 0.05, 0.7]])
    report = sink_report(_causal_rows(rng, 2, 4, 12, first))
    np.testing.assert_allclose(report.first_token, first, atol=1e-12)
    assert report.is_sink.tolist() == [[True, False, True, False], [True, False, False, True]]
    np.testing.assert_allclose(report.sink_share_by_layer, [0.5, 0.5])
    assert report.softmax_sink is None  # rows sum to 1


def test_secondary_sinks_follow_the_definition():
    rng = np.random.default_rng(1)
    length = 16
    w = _causal_rows(rng, 1, 2, length, np.full((1, 2), 0.2))
    w[0, 0, 6:, 5] += 0.3  # key 5: a sink of head 0 for every later row
    w[0, 0, 6:] /= w[0, 0, 6:].sum(-1, keepdims=True)
    report = sink_report(w, top=3)
    for head in range(2):  # a loop over keys: mean over the rows strictly after each key
        means = {j: w[0, head, j + 1 :, j].mean() for j in range(1, length) if length - 1 - j >= (length - 1) // 4}
        expect = sorted(means, key=lambda j: -means[j])[:3]
        assert report.secondary_keys[0, head].tolist() == expect
        np.testing.assert_allclose(report.secondary_weights[0, head], [means[j] for j in expect], atol=1e-12)
    assert report.secondary_keys[0, 0, 0] == 5


def test_a_softmax_sink_takes_its_share():
    rng = np.random.default_rng(2)
    w = _causal_rows(rng, 1, 2, 10, np.full((1, 2), 0.4))
    w[0, 1] *= 0.75  # head 1 gives a quarter of every row to a softmax sink
    report = sink_report(w)
    assert report.softmax_sink is not None
    np.testing.assert_allclose(report.softmax_sink[0], [0.0, 0.25], atol=1e-12)
    np.testing.assert_allclose(report.first_token[0], [0.4, 0.3], atol=1e-12)


def test_massive_activations_are_found_where_planted():
    rng = np.random.default_rng(3)
    h = rng.normal(size=(3, 20, 32))  # median magnitude about 0.67
    h[2, 0, 7] = -900.0  # 1000x the median is about 670: massive
    h[1, 4, 3] = 150.0  # over 100 but about 220x the median: not massive
    found, peak = massive_activations(h)
    assert [(m.layer, m.token, m.dim, m.value) for m in found] == [(2, 0, 7, -900.0)]
    assert found[0].ratio == pytest.approx(900.0 / np.median(np.abs(h[2])))
    assert peak[1] == pytest.approx(150.0 / np.median(np.abs(h[1])))
    lower, _ = massive_activations(h, ratio=100.0)
    assert {(m.layer, m.dim) for m in lower} == {(2, 7), (1, 3)}
    assert sink_report(np.tril(np.ones((1, 1, 4, 4))) / np.arange(1, 5)[:, None], h).massive_dims == [7]


def test_bad_shapes_are_one_line():
    with pytest.raises(ConfigError, match="axes"):
        sink_report(np.ones((4, 4)))
    with pytest.raises(ConfigError, match="at least 2 tokens"):
        sink_report(np.ones((1, 1, 1, 1)))


@pytest.mark.parametrize("sink", ["none", "learned"])
def test_toy_activations_are_the_models_own(sink):
    cfg = TrainConfig(task="needle", layers=2, heads=2, embed_dim=16, seq_len=12, sink=sink, seed=3).validate()
    model = build_model(cfg)
    if sink == "learned":
        with torch.no_grad():
            for block in model.blocks:
                block.sinks.copy_(torch.tensor([1.5, -0.5]))
    ids = torch.randint(0, cfg.vocab, (3, 12), generator=torch.Generator().manual_seed(0))
    logits, weights, stream = toy_activations(model, ids)
    model.eval()
    with torch.no_grad():
        want_logits, want_weights = model(ids)
        x = model.embed(ids)  # rope: no positions added to the stream
        want_stream = [x]
        for block in model.blocks:
            x, _ = block(x, torch.tril(torch.ones(12, 12, dtype=torch.bool)))
            want_stream.append(x)
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=0)
    torch.testing.assert_close(weights, torch.stack(want_weights, 1), rtol=0, atol=0)
    torch.testing.assert_close(stream, torch.stack(want_stream, 1), rtol=1e-6, atol=1e-6)
    report = sink_report(weights)
    assert (report.softmax_sink is not None) == (sink == "learned")
    ablated, _, _ = toy_activations(model, ids, head_mask=torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
    assert not torch.allclose(ablated, logits)
