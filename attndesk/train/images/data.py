"""The image tasks' data (Qt-free): scikit-learn's 8x8 digits with a fixed split, and
procedurally drawn shapes with the masks of where they are.

Every image is an ``HxWx3`` uint8 array, the form ``run_pretrained`` and the image processors
take; a model's input is what its saved image processor makes of it, so a preset folder gives
the same pixels to the trainer, the window and the faithfulness measures.

- ``digits``: the 1,797 images of ``sklearn.datasets.load_digits`` as the window's sample images
  show them (``attndesk.models.images.digit_images``: dark ink on white, three channels), split by
  ``digits_split``: a stratified split drawn once from a seeded generator,
  ``DIGITS_TEST_PER_CLASS`` images of each class for the test.
- ``shapes``: ``SHAPES_SIZE`` x ``SHAPES_SIZE`` images of one shape (``SHAPE_CLASSES``) in a
  random colour, size and place over a noisy background, with a few clutter pixels; the mask is
  exactly the pixels the shape was drawn on (``draw_shape`` is the one rasteriser of both).
  Image ``i`` of a split is drawn from ``numpy.random.default_rng([seed, split_id, i])``, so any
  image can be drawn again alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.errors import ConfigError
from attndesk.models.images import digit_images

DIGITS_COUNT = 1797  # sklearn.datasets.load_digits
DIGITS_SPLIT_SEED = 0
DIGITS_TEST_PER_CLASS = 36  # 360 test images, 1,437 for training

SHAPES_SIZE = 16
SHAPE_CLASSES = ("square", "disc", "triangle", "cross")
SHAPES_SPLITS = {"train": 0, "test": 1}


@dataclass(frozen=True)
class ImageSet:
    """Images ``[n, H, W, 3]`` uint8, labels ``[n]`` int64, the class names, and where the
    evidence is (``masks [n, H, W]`` bool) when the task knows it. ``index`` names each image in
    its source (the digits' row in ``load_digits``, the shapes' draw number)."""

    images: np.ndarray
    labels: np.ndarray
    classes: tuple[str, ...]
    index: np.ndarray
    masks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)


def _all_digits() -> tuple[np.ndarray, np.ndarray]:
    """Every digit as the window's samples show it (``attndesk.models.images``): [1797, 8, 8, 3] uint8, labels."""
    found = digit_images(DIGITS_COUNT)
    return np.stack([d.pixels for d in found]), np.array([d.label for d in found], dtype=np.int64)


def digits_split(labels: np.ndarray, seed: int = DIGITS_SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) of the digits, both sorted: ``DIGITS_TEST_PER_CLASS`` test rows
    of every class, drawn by a generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    test = []
    for cls in np.unique(labels):
        rows = np.flatnonzero(labels == cls)
        test.append(rng.choice(rows, size=DIGITS_TEST_PER_CLASS, replace=False))
    test_rows = np.sort(np.concatenate(test))
    train_rows = np.setdiff1d(np.arange(len(labels)), test_rows)
    return train_rows, test_rows


def digits(split: str) -> ImageSet:
    """The ``"train"`` or ``"test"`` part of the digits (see ``digits_split``)."""
    images, labels = _all_digits()
    train_rows, test_rows = digits_split(labels)
    rows = {"train": train_rows, "test": test_rows}.get(split)
    if rows is None:
        raise ConfigError(f"no digits split {split!r}; splits: train, test")
    return ImageSet(images[rows], labels[rows], tuple(str(d) for d in range(10)), rows)


def draw_shape(kind: str, centre: tuple[float, float], radius: float, size: int = SHAPES_SIZE) -> np.ndarray:
    """The ``[size, size]`` bool mask of a shape, tested at the pixel centres."""
    y, x = np.mgrid[0:size, 0:size] + 0.5
    dy, dx = y - centre[0], x - centre[1]
    if kind == "square":
        return (np.abs(dy) <= radius * 0.8) & (np.abs(dx) <= radius * 0.8)
    if kind == "disc":
        return dy**2 + dx**2 <= radius**2
    if kind == "triangle":  # apex up: the half-width grows from 0 at the top to radius at the base
        return (dy >= -radius) & (dy <= radius * 0.7) & (np.abs(dx) <= (dy + radius) / 1.7)
    if kind == "cross":
        arm = max(radius / 3.0, 0.75)
        inside = (np.abs(dy) <= radius) & (np.abs(dx) <= radius)
        return inside & ((np.abs(dy) <= arm) | (np.abs(dx) <= arm))
    raise ConfigError(f"no shape {kind!r}; shapes: {', '.join(SHAPE_CLASSES)}")


def draw_shapes_image(seed: int, split: str, i: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Image ``i`` of a shapes split: (``[H, W, 3]`` uint8, its ``[H, W]`` mask, its label)."""
    rng = np.random.default_rng([seed, SHAPES_SPLITS[split], i])
    label = int(rng.integers(len(SHAPE_CLASSES)))
    radius = float(rng.uniform(3.5, 5.5))
    centre = (float(rng.uniform(radius, SHAPES_SIZE - radius)), float(rng.uniform(radius, SHAPES_SIZE - radius)))
    mask = draw_shape(SHAPE_CLASSES[label], centre, radius)
    image = rng.normal(40.0, 12.0, size=(SHAPES_SIZE, SHAPES_SIZE, 3))
    clutter = rng.random((SHAPES_SIZE, SHAPES_SIZE)) < 0.03  # single bright pixels: not the evidence
    image[clutter & ~mask] = rng.uniform(120, 255, size=(int((clutter & ~mask).sum()), 3))
    image[mask] = rng.uniform(150, 255, size=3)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), mask, label


def shapes(split: str, n: int, seed: int = 0, start: int = 0) -> ImageSet:
    """Images ``start .. start + n - 1`` of a shapes split (``"train"`` or ``"test"``) with their masks."""
    if split not in SHAPES_SPLITS:
        raise ConfigError(f"no shapes split {split!r}; splits: {', '.join(SHAPES_SPLITS)}")
    drawn = [draw_shapes_image(seed, split, i) for i in range(start, start + n)]
    return ImageSet(
        np.stack([d[0] for d in drawn]),
        np.array([d[2] for d in drawn], dtype=np.int64),
        SHAPE_CLASSES,
        np.arange(start, start + n),
        np.stack([d[1] for d in drawn]),
    )


__all__ = [
    "DIGITS_SPLIT_SEED",
    "DIGITS_TEST_PER_CLASS",
    "SHAPES_SIZE",
    "SHAPE_CLASSES",
    "ImageSet",
    "digits",
    "digits_split",
    "draw_shape",
    "draw_shapes_image",
    "shapes",
]
