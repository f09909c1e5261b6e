"""The sample images: the shipped pictures are what the script draws, the digits are
scikit-learn's, and each runs through a vision model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from attndesk.errors import ConfigError
from attndesk.models import images, run_pretrained
from attndesk.models.images import (
    DEFAULT_SAMPLE,
    SAMPLE,
    digit_images,
    image_choice,
    sample_images,
    shipped_image,
    shipped_image_names,
)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_sample_images.py"


def _script():
    spec = importlib.util.spec_from_file_location("make_sample_images", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_pictures_are_the_scripts_drawings():
    drawn = _script().IMAGES
    assert shipped_image_names() == sorted(drawn)
    for name, draw in drawn.items():
        picture = shipped_image(name)
        assert picture.pixels.dtype == np.uint8 and picture.pixels.shape == (96, 96, 3)
        np.testing.assert_array_equal(picture.pixels, np.asarray(draw()))


def test_digits_are_scikit_learns():
    from sklearn.datasets import load_digits

    data = load_digits()
    digits = digit_images(10)
    assert [d.label for d in digits] == list(range(10)) == data.target[:10].tolist()
    for i, digit in enumerate(digits):
        assert digit.pixels.shape == (8, 8, 3)
        np.testing.assert_array_equal(digit.pixels[:, :, 0], np.round(255 - data.images[i] * 255 / 16).astype(np.uint8))
    with pytest.raises(ConfigError, match=r"images 0\.\.1796"):
        digit_images(1, start=5000)
    with pytest.raises(ConfigError, match="ships"):
        shipped_image("nothing")


def test_every_sample_runs_through_a_vision_model(vision):
    model, _, _ = vision("vit")
    images = sample_images(digits=2)
    assert len(images) == len(shipped_image_names()) + 2
    for sample in images:
        result = run_pretrained(model, sample.pixels)
        assert result.grid == (4, 4) and np.isfinite(result.weights).all()


def test_the_samples_are_listed_once_and_a_shipped_picture_loads_no_digits(monkeypatch):
    real = images.digit_images
    calls = []

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(images, "digit_images", counting)
    images._sample_images.cache_clear()
    try:
        name, pixels = image_choice("")
        assert calls == [] and name == DEFAULT_SAMPLE
        assert pixels is shipped_image(DEFAULT_SAMPLE).pixels
        first, second = sample_images(), sample_images()
        assert len(calls) == 1 and [s.name for s in first] == [s.name for s in second]
        assert all(a is b for a, b in zip(first, second)) and first is not second  # a fresh list, shared images
        name, pixels = image_choice(SAMPLE + "digit 3 (#3)")
        assert len(calls) == 1 and name == "digit 3 (#3)"
        np.testing.assert_array_equal(pixels, real(1, start=3)[0].pixels)
        with pytest.raises(ConfigError, match="no sample image 'nothing'"):
            image_choice(SAMPLE + "nothing")
    finally:
        images._sample_images.cache_clear()
