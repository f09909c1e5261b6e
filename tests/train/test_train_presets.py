"""The shipped presets: listed, loadable, small, solving their task, and reproducible (the first
CHECK_STEPS steps re-trained now give the hash the shipped file records; the full re-training is
make train-presets-check)."""

from __future__ import annotations

import pytest
import torch

from attndesk.core.errors import ConfigError
from attndesk.train.presets import (
    CHECK_STEPS,
    PRESETS,
    check_prefix,
    list_presets,
    load_preset,
    trained_dir,
)
from attndesk.train.store import read_metadata

NAMES = ["induction", "reverse", "previous-token", "brackets"]


def test_every_preset_is_listed_and_shipped():
    listed = list_presets()
    assert [p["name"] for p in listed] == NAMES and all(p["shipped"] for p in listed)


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_preset_solves_its_task(name):
    folder = trained_dir() / name
    assert sum(p.stat().st_size for p in folder.iterdir()) < 2**20
    run = load_preset(name)
    assert run.step == PRESETS[name].steps and run.status == "finished"
    fresh = run.task.sample(64, torch.Generator().manual_seed(777))  # sequences it never saw in training
    metrics = run.evaluate(fresh)
    assert metrics["accuracy"] >= 0.9 and metrics["pattern"] >= 0.5, metrics


@pytest.mark.parametrize("name", NAMES)
def test_the_first_steps_reproduce_the_recorded_hash(name):
    recorded = read_metadata(trained_dir() / name)["check"]
    assert recorded["steps"] == CHECK_STEPS
    assert check_prefix(name) == recorded["sha256"]


def test_unknown_preset():
    with pytest.raises(ConfigError, match="no preset 'nope'; presets: induction"):
        load_preset("nope")
