"""Training induction for real (about 10 s on a busy 2-core machine): the default configuration forms
induction heads in its second layer."""

from __future__ import annotations

import torch

from attndesk.train import TrainConfig, train


def test_default_config_forms_induction_heads():
    run = train(TrainConfig(task="induction", seed=0, steps=150, eval_every=150))
    fresh = run.task.sample(128, torch.Generator().manual_seed(31337))
    metrics = run.evaluate(fresh)
    assert metrics["accuracy"] >= 0.9
    scores = metrics["scores"]  # [layers, heads]
    assert scores[1].max() >= 0.5 and scores[0].max() < 0.5  # the induction heads sit in the second layer
