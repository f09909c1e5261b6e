"""The image tasks' data: the digits' split is fixed and recorded, the shapes are seeded and
their masks are exactly the drawn pixels."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.errors import ConfigError
from attndesk.train.images.data import (
    DIGITS_TEST_PER_CLASS,
    SHAPE_CLASSES,
    digits,
    digits_split,
    draw_shape,
    draw_shapes_image,
    shapes,
)
from attndesk.train.images.models import VisionSpec
from attndesk.train.images.trainer import split_record


def test_digits_split_is_fixed_stratified_and_disjoint(sklearn_digits):
    labels = sklearn_digits.target
    train, test = digits_split(labels)
    again_train, again_test = digits_split(labels)
    np.testing.assert_array_equal(test, again_test)
    np.testing.assert_array_equal(train, again_train)
    assert len(np.intersect1d(train, test)) == 0
    assert len(train) + len(test) == len(labels) == 1797
    assert np.bincount(labels[test]).tolist() == [DIGITS_TEST_PER_CLASS] * 10
    assert not np.array_equal(test, digits_split(labels, seed=1)[1])  # the seed decides it


def test_digits_images_are_the_dataset_as_dark_ink_on_white(sklearn_digits):
    bunch = sklearn_digits
    test = digits("test")
    assert test.images.shape == (len(test), 8, 8, 3) and test.images.dtype == np.uint8
    row = int(test.index[5])
    np.testing.assert_array_equal(test.images[5, :, :, 1], np.rint(255 - bunch.images[row] * 255 / 16).astype(np.uint8))
    assert test.labels[5] == bunch.target[row]
    assert (test.images[..., 0] == test.images[..., 2]).all()


def test_the_run_records_the_split(sklearn_digits):
    record = split_record(VisionSpec(task="digits"))
    assert record["test_rows"] == [int(r) for r in digits_split(sklearn_digits.target)[1]]
    assert record["train_images"] == 1797 - 360
    shapes_record = split_record(VisionSpec(task="shapes", train_images=100, epochs=3, test_images=50))
    assert shapes_record["train_images"] == 300 and shapes_record["test_images"] == 50


def test_shape_masks_match_their_drawing():
    data = shapes("train", 40, seed=3)
    assert data.masks is not None
    assert sorted(set(data.labels.tolist())) == list(range(len(SHAPE_CLASSES)))
    for image, mask in zip(data.images, data.masks, strict=True):
        assert mask.sum() >= 8  # every shape is drawn on pixels
        colour = image[mask]
        assert (colour == colour[0]).all()  # one flat colour, exactly on the mask
        assert (colour[0] >= 150).all()
        outside = image[~mask]
        assert not (outside == colour[0]).all(axis=-1).any()  # no background pixel has the shape's colour


def test_shapes_are_seeded_and_drawn_alone_the_same():
    a, b = shapes("test", 6, seed=0), shapes("test", 6, seed=0)
    np.testing.assert_array_equal(a.images, b.images)
    image, mask, label = draw_shapes_image(0, "test", 4)
    np.testing.assert_array_equal(image, a.images[4])
    np.testing.assert_array_equal(mask, a.masks[4])
    assert label == a.labels[4]
    later = shapes("test", 2, seed=0, start=4)
    np.testing.assert_array_equal(later.images[0], a.images[4])
    assert not np.array_equal(shapes("train", 6, seed=0).images, a.images)


def test_each_shape_has_its_own_outline():
    centre, radius = (8.0, 8.0), 5.0
    square, disc = draw_shape("square", centre, radius), draw_shape("disc", centre, radius)
    triangle, cross = draw_shape("triangle", centre, radius), draw_shape("cross", centre, radius)
    assert square[8, 4] and square[5, 5] and not square[1, 8]
    assert disc[8, 3] and not square[8, 3]  # a disc reaches further along the axes
    assert disc[3, 8] and not disc[3, 3]  # and misses its bounding box's corners
    assert triangle[11, 4] and not triangle[4, 4]  # wide at the base, narrow at the top
    assert cross[8, 3] and cross[3, 8] and not cross[4, 4]
    assert len({m.tobytes() for m in (square, disc, triangle, cross)}) == 4
    with pytest.raises(ConfigError, match="no shape"):
        draw_shape("star", centre, radius)
