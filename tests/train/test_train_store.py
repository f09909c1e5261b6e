"""Save and load: safetensors + JSON, the same logits and attention back, checkpoints, refusals."""

from __future__ import annotations

import json

import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.train import TrainConfig, load_trained, train
from attndesk.train.store import FORMAT_VERSION

TINY = {
    "embed_dim": 16,
    "heads": 2,
    "seq_len": 12,
    "vocab_size": 8,
    "eval_every": 2,
    "checkpoint_every": 2,
    "batch_size": 8,
}


@pytest.fixture(scope="module")
def run():
    return train(TrainConfig(task="induction", steps=5, **TINY))


def test_round_trip(run, tmp_path):
    run.save(tmp_path / "m")
    back = load_trained(tmp_path / "m")
    ids = run.task.sample(4, torch.Generator().manual_seed(9)).ids
    assert torch.equal(run.logits(ids), back.logits(ids))
    assert torch.equal(run.attention(ids), back.attention(ids))
    assert back.step == 5 and back.cfg == run.cfg and back.history == run.history
    assert back.checkpoints.steps == run.checkpoints.steps == [0, 2, 4, 5]
    for step in run.checkpoints.steps:
        for name, tensor in run.checkpoints.get(step).state.items():
            assert torch.equal(tensor, back.checkpoints.get(step).state[name])
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    assert meta["task"] == "induction" and meta["seed"] == 0 and meta["step"] == 5
    assert meta["format_version"] == FORMAT_VERSION and meta["attndesk_version"]


def test_a_checkpoint_can_be_viewed(run):
    early = run.at_checkpoint(2)
    ids = run.task.probe().ids
    assert early.step == 2 and not torch.equal(early.attention(ids), run.attention(ids))


def test_text_run_round_trip(tmp_path):
    text = "abcabcabd abcabcabd abcabcabd " * 3
    cfg = TrainConfig(task="text", steps=2, **(TINY | {"vocab_size": 6, "seq_len": 8}))
    run = train(cfg, text=text)
    run.save(tmp_path / "t")
    back = load_trained(tmp_path / "t")
    assert back.task.vocab == run.task.vocab
    ids = run.task.probe().ids
    assert torch.equal(back.task.probe().ids, ids)  # the figures show the text the run was shown
    assert back.task.labels(ids[0]) == run.task.labels(ids[0])
    assert torch.equal(back.logits(ids), run.logits(ids))


def test_another_format_version_is_refused(run, tmp_path):
    run.save(tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    meta = json.loads(config.read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    config.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=f"format version {FORMAT_VERSION + 1}.*reads version {FORMAT_VERSION}"):
        load_trained(tmp_path / "m")


def test_not_a_trained_model(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        load_trained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"config\.json, model\.safetensors, history\.json missing"):
        load_trained(tmp_path / "empty")


def test_weights_that_do_not_fit_the_config(run, tmp_path):
    run.save(tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    meta = json.loads(config.read_text())
    meta["train_config"]["embed_dim"] = 32
    config.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="do not fit"):
        load_trained(tmp_path / "m")


def test_a_failed_save_leaves_the_folder_as_it_was(run, tmp_path, monkeypatch):
    run.save(tmp_path / "m")
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    import attndesk.train.run as run_module

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_module, "save_file", broken)
    with pytest.raises(ConfigError, match="No space left"):
        run.save(tmp_path / "m")
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
