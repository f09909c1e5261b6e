"""Sample images for vision models: the pictures attndesk ships (``attndesk/resources/images``,
drawn by ``scripts/make_sample_images.py``) and the 8x8 handwritten digits scikit-learn ships
(``sklearn.datasets.load_digits``: 1,797 images, offline). Every image is an HxWx3 uint8 array,
what ``run_pretrained`` takes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
from PIL import Image

from attndesk.errors import ConfigError


@dataclass(frozen=True, eq=False)
class SampleImage:
    """``name`` ("shapes", "digit 3 (#3)"), ``pixels`` [H, W, 3] uint8, ``label`` (a digit's class, or None)."""

    name: str
    pixels: np.ndarray
    label: int | None = None
    source: str = "attndesk"  # "attndesk" or "scikit-learn digits"


def shipped_image_names() -> list[str]:
    return list(_shipped_names())


@lru_cache(maxsize=1)
def _shipped_names() -> tuple[str, ...]:
    folder = resources.files("attndesk.resources").joinpath("images")
    return tuple(sorted(p.name[: -len(".png")] for p in folder.iterdir() if p.name.endswith(".png")))


@lru_cache(maxsize=16)
def _shipped(name: str) -> np.ndarray:
    where = resources.files("attndesk.resources").joinpath("images", f"{name}.png")
    with resources.as_file(where) as path, Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
    pixels.setflags(write=False)
    return pixels


def shipped_image(name: str) -> SampleImage:
    names = shipped_image_names()
    if name not in names:
        raise ConfigError(f"no sample image {name!r}: attndesk ships {', '.join(names)}")
    return SampleImage(name, _shipped(name))


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError(
            "the 8x8 digits come with scikit-learn, which is not installed (pip install scikit-learn)"
        ) from None
    data = load_digits()
    return np.asarray(data.images), np.asarray(data.target, dtype=np.int64)


def digit_images(count: int = 10, *, start: int = 0) -> list[SampleImage]:
    """``count`` of scikit-learn's 8x8 digits from index ``start`` as 8x8x3 uint8 (ink 0..16 -> 255..0:
    dark ink on white, as written)."""
    images, targets = _digits()
    if not 0 <= start < len(images) or count < 1:
        raise ConfigError(f"the digits set has images 0..{len(images) - 1}; asked for {count} from {start}")
    out = []
    for i in range(start, min(start + count, len(images))):
        grey = (255.0 - images[i] * (255.0 / 16.0)).round().astype(np.uint8)
        pixels = np.repeat(grey[:, :, None], 3, axis=2)
        pixels.setflags(write=False)
        out.append(SampleImage(f"digit {int(targets[i])} (#{i})", pixels, int(targets[i]), "scikit-learn digits"))
    return out


def sample_images(*, digits: int = 10) -> list[SampleImage]:
    """The shipped pictures, then the first ``digits`` of scikit-learn's digits (one of each class
    for the default 10; none when scikit-learn is missing). Built once per ``digits``: the images
    are frozen and their pixels read-only."""
    return list(_sample_images(digits))


@lru_cache(maxsize=4)
def _sample_images(digits: int) -> tuple[SampleImage, ...]:
    images = [shipped_image(name) for name in _shipped_names()]
    if digits:
        try:
            images += digit_images(digits)
        except ConfigError:
            pass  # scikit-learn is optional: the shipped pictures stand alone
    return tuple(images)


SAMPLE = "sample:"  # an image choice naming a sample image, e.g. "sample:shapes", "sample:digit 3 (#3)"
DEFAULT_SAMPLE = "shapes"


def image_choice(choice: str) -> tuple[str, np.ndarray | str]:
    """(a short name, what ``run_pretrained`` takes) of an image choice: ``"sample:NAME"`` a
    sample image (``sample_images``), ``""`` the default one (``DEFAULT_SAMPLE``), anything else a file's path
    (read, and refused in one line, when the model runs). A shipped picture needs no digits loaded."""
    if choice and not choice.startswith(SAMPLE):
        return choice.replace("\\", "/").rsplit("/", 1)[-1], choice
    name = choice[len(SAMPLE) :] or DEFAULT_SAMPLE
    if name in _shipped_names():
        return name, _shipped(name)
    samples = _sample_images(10)
    for sample in samples:
        if sample.name == name:
            return sample.name, sample.pixels
    raise ConfigError(f"no sample image {name!r}: the samples are {', '.join(s.name for s in samples)}")


__all__ = [
    "DEFAULT_SAMPLE",
    "SAMPLE",
    "SampleImage",
    "digit_images",
    "image_choice",
    "sample_images",
    "shipped_image",
    "shipped_image_names",
]
