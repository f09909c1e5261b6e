"""The trainer's softmax sinks: learned per-head sink logits are parameters that training moves,
the off-by-one softmax is a fixed 0 outside the checkpoints, and a trained model's attention
equals a plain torch softmax over [scores | sink logit] computed here from its own Q and K."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.train import TrainConfig, load_trained, train
from attndesk.train.stages import trained_result


def _cfg(sink: str) -> TrainConfig:
    return TrainConfig(
        task="previous-token", layers=2, heads=2, embed_dim=16, seq_len=12, steps=6, batch_size=8,
        checkpoint_every=3, eval_every=3, position="rope", sink=sink, lr=3e-2,
    )  # fmt: skip


@pytest.fixture(scope="module", params=["learned", "off-by-one"])
def run(request):
    return train(_cfg(request.param))


def _reference(q: torch.Tensor, k: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """q [H, L, d] (rotated), k [KV, L, d] -> causal softmax over [Q K^T / sqrt(d) | s_h], the sink column dropped."""
    scores = q.double() @ k.double().repeat_interleave(q.shape[0] // k.shape[0], 0).transpose(-1, -2)
    scores = scores / q.shape[-1] ** 0.5
    length = scores.shape[-1]
    scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
    column = sinks.double()[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], -1), -1)[..., :-1]


def test_a_trained_models_attention_is_the_sink_softmax(run):
    ids = run.task.probe().ids[:1]
    keeps = [{} for _ in run.model.blocks]
    with torch.no_grad():
        run.model.eval()
        _, weights = run.model(ids, keeps)
    for block, keep, w in zip(run.model.blocks, keeps, weights, strict=True):
        want = _reference(keep["q"][0], keep["k"][0], block.sinks.detach())
        np.testing.assert_allclose(w[0].double().numpy(), want.numpy(), rtol=0, atol=1e-6)
        assert (w.sum(-1) < 1).all()
    np.testing.assert_allclose(run.attention(ids)[0, 0].numpy(), weights[0][0].numpy(), rtol=0, atol=1e-6)


def test_learned_sinks_train_and_off_by_one_stays_zero(run):
    state = run.model.state_dict()
    names = [name for name in state if name.endswith("sinks")]
    if run.cfg.sink == "learned":
        assert names == ["blocks.0.sinks", "blocks.1.sinks"]
        assert all(bool((state[name] != 0).any()) for name in names)  # they start at 0 and moved
        assert (run.checkpoints.get(0).state["blocks.0.sinks"] == 0).all()
    else:
        assert names == []
        assert all(bool((block.sinks == 0).all()) for block in run.model.blocks)


def test_the_step_through_of_a_trained_sink_model_shows_the_sinks_share(run):
    result = trained_result(run, "trained")
    inter = result.intermediates
    assert result.config.sink == run.cfg.sink
    assert inter.sink.shape == (*result.weights.shape[:2], 1) and inter.sink_logit.shape == (4, 1, 1)
    np.testing.assert_allclose(inter.sink[..., 0] + result.weights.sum(-1), 1.0, rtol=0, atol=1e-6)
    logits = np.concatenate([block.sinks.detach().numpy() for block in run.model.blocks])
    np.testing.assert_allclose(inter.sink_logit[:, 0, 0], logits, rtol=0, atol=0)


def test_an_unknown_sink_is_refused():
    with pytest.raises(ConfigError, match="unknown sink 'gpt'"):
        _cfg("gpt").validate()


def test_a_saved_sink_model_loads_with_its_sinks_and_the_same_attention(run, tmp_path):
    run.save(tmp_path / "m")
    back = load_trained(tmp_path / "m")
    assert back.cfg.sink == run.cfg.sink
    for ours, theirs in zip(run.model.blocks, back.model.blocks, strict=True):
        torch.testing.assert_close(theirs.sinks, ours.sinks, rtol=0, atol=0)
    ids = run.task.probe().ids[:2]
    torch.testing.assert_close(back.attention(ids), run.attention(ids), rtol=0, atol=0)
