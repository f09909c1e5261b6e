"""Vision training: a short run learns, a run saves and loads as a transformers folder with its
record, the models name their tokens and return their attention."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext
from attndesk.models import load_pretrained, run_pretrained
from attndesk.train.images.data import shapes
from attndesk.train.images.models import VisionSpec, build_model, image_processor, pixel_values
from attndesk.train.images.presets import FORMAT, load_vision_run, read_record, save_vision_run
from attndesk.train.images.trainer import VisionRun, accuracy, evaluation_set, train_vision


@pytest.fixture(scope="module")
def short_digits_run():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_vision(VisionSpec(task="digits", epochs=5, lr=5e-3))
    finally:
        torch.set_num_threads(before)


def test_a_short_run_learns_the_digits(short_digits_run):
    run = short_digits_run
    assert [row["epoch"] for row in run.history] == [1, 2, 3, 4, 5]
    assert run.history[-1]["loss"] < 0.5 * run.history[0]["loss"]
    assert run.accuracy > 0.5  # chance is 0.1
    assert run.accuracy == pytest.approx(accuracy(run.model, run.processor, evaluation_set(run.spec)))


def test_a_run_saves_and_loads_with_its_record(short_digits_run, tmp_path):
    run = short_digits_run
    folder = save_vision_run(run, tmp_path / "digits")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "run.json",
    ]
    model, processor, record = load_vision_run(folder)
    assert record["format"] == FORMAT and record["spec"]["epochs"] == 5
    assert record["test_accuracy"] == run.accuracy and record["split"]["test_rows"][:3] == list(
        map(int, evaluation_set(run.spec).index[:3])
    )
    test = evaluation_set(run.spec)
    np.testing.assert_array_equal(
        pixel_values(processor, test.images[:4]).numpy(), pixel_values(run.processor, test.images[:4]).numpy()
    )
    assert accuracy(model, processor, test) == run.accuracy
    assert model.config.id2label[3] == "3"


def test_a_folder_without_a_record_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        read_record(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigError, match="not an attndesk vision run"):
        read_record(tmp_path)


def test_training_stops_when_cancelled():
    ctx = JobContext()
    ctx.cancel()
    run = train_vision(VisionSpec(task="shapes", epochs=2, train_images=8, test_images=8), ctx=ctx)
    assert run.history == []


@pytest.mark.parametrize(
    ("arch", "registers", "first"),
    [
        ("vit", 0, ["[CLS]", "(0,0)"]),
        ("dinov2", 0, ["[CLS]", "(0,0)"]),
        ("dinov2-registers", 2, ["[CLS]", "[REG0]", "[REG1]", "(0,0)"]),
    ],
)
def test_a_saved_run_opens_in_load_pretrained_with_its_classifier(arch, registers, first, tmp_path):
    spec = VisionSpec(task="shapes", arch=arch, registers=registers, hidden=16, mlp=32, heads=2)
    torch.manual_seed(0)
    model = build_model(spec, ("a", "b"))
    run = VisionRun(spec, model, image_processor(spec), [{"epoch": 1, "loss": 1.0, "test_accuracy": 0.5}])
    save_vision_run(run, tmp_path / arch)
    loaded = load_pretrained(tmp_path / arch)
    image = shapes("test", 1).images[0]
    result = run_pretrained(loaded, image)
    assert result.tokens[: len(first)] == first and result.tokens[-1] == "(7,7)"
    assert result.weights.shape == (2, 2, 1 + registers + 64, 1 + registers + 64)
    assert result.labels == ["a", "b"]
    expected = model(pixel_values=pixel_values(run.processor, image[None])).logits[0].detach().numpy()
    np.testing.assert_allclose(result.logits, expected, atol=1e-5)


def test_a_spec_refuses_what_it_cannot_build():
    with pytest.raises(ConfigError, match="no image task"):
        VisionSpec(task="text")
    with pytest.raises(ConfigError, match="registers"):
        VisionSpec(task="shapes", arch="vit", registers=2)
    with pytest.raises(ConfigError, match="divide"):
        VisionSpec(task="shapes", hidden=30, heads=4)


def test_registers_start_apart():
    torch.manual_seed(0)
    model = build_model(VisionSpec(task="shapes", arch="dinov2-registers", registers=4), ("a", "b"))
    registers = model.dinov2_with_registers.embeddings.register_tokens[0].detach()
    gaps = torch.cdist(registers, registers) + torch.eye(4) * 1e9
    assert float(gaps.min()) > 0.1  # no two alike: identical registers would train as copies of one
