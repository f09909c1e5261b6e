"""The shipped vision presets: each loads offline as a transformers folder and evaluates to its
recorded test accuracy on this machine (within the one test image another machine's rounding may
flip); its record holds the split, the seed and the machine; a re-train reproduces it (slow)."""

from __future__ import annotations

import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.system.machine import machine_fingerprint
from attndesk.train.images.data import digits_split
from attndesk.train.images.presets import (
    EVAL_TOL_IMAGES,
    MODEL_FILES,
    VISION_PRESETS,
    check_preset,
    evaluate_preset,
    preset_folder,
    read_record,
)


@pytest.mark.parametrize("name", list(VISION_PRESETS))
def test_a_preset_evaluates_to_its_recorded_accuracy(name):
    recorded, now, images = evaluate_preset(name)
    assert abs(now - recorded) <= EVAL_TOL_IMAGES / images + 1e-12, (now, recorded)
    assert recorded >= (0.95 if VISION_PRESETS[name].task == "digits" else 0.6)


@pytest.mark.parametrize("name", list(VISION_PRESETS))
def test_a_preset_records_its_run(name, sklearn_digits):
    folder = preset_folder(name)
    assert all((folder / file).is_file() for file in MODEL_FILES)
    record = read_record(folder)
    spec = VISION_PRESETS[name]
    assert record["preset"] == name and record["spec"] == spec.to_dict()
    assert record["history"][-1]["test_accuracy"] == record["test_accuracy"]
    assert len(record["history"]) == spec.epochs
    assert set(record["machine"]) == set(machine_fingerprint())
    assert record["threads"] == 1 and record["seconds"]["cpu"] > 0
    if spec.task == "digits":
        assert record["split"]["test_rows"] == digits_split(sklearn_digits.target)[1].tolist()
    else:
        assert record["split"]["seed"] == spec.seed and record["split"]["test_images"] == spec.test_images


def test_an_unknown_preset_is_refused():
    with pytest.raises(ConfigError, match="no vision preset 'cats'"):
        preset_folder("cats")


@pytest.mark.slow
def test_the_digits_preset_trains_again_to_its_record():
    before = torch.get_num_threads()
    try:
        ok, line = check_preset("digits-vit")
    finally:
        torch.set_num_threads(before)
    assert ok, line
