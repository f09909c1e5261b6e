"""The sample images: the shipped pictures are what the script draws, the digits are
scikit-learn's, and each runs through a vision model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from attndesk.core.errors import ConfigError
from attndesk.core.images import digit_images, sample_images, shipped_image, shipped_image_names
from attndesk.core.pretrained import run_pretrained

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
