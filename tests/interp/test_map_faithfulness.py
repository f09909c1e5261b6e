"""Deletion and insertion curves, their areas and the pointing game, on hand-made maps and a
score whose answer is known: the mean of the pixels inside an evidence mask."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.errors import ConfigError
from attndesk.interp.map_faithfulness import (
    curve_auc,
    deletion_curve,
    insertion_curve,
    patch_mask,
    patch_order,
    pointing_hit,
)

RNG = np.random.default_rng(0)


def _evidence():
    """A 3-channel 8x8 image of ones, a mask over an L of 12 pixels (three whole 2x2 patches:
    (0,2), (1,2), (1,3)), and a score reading only it."""
    pixels = np.ones((3, 8, 8), dtype=np.float32)
    mask = np.zeros((8, 8), dtype=bool)
    mask[0:4, 4:6] = True
    mask[2:4, 6:8] = True

    def score(images: np.ndarray) -> np.ndarray:
        return images[:, :, mask].mean(axis=(1, 2))

    return pixels, mask, score


def test_patch_order_ranks_most_salient_first_and_keeps_ties_in_place():
    saliency = np.array([[0.1, 0.5], [0.5, 0.9]])
    assert patch_order(saliency).tolist() == [3, 1, 2, 0]
    assert patch_order(np.zeros((2, 3))).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ConfigError, match="finite"):
        patch_order(np.array([[np.nan, 1.0]]))


def test_curves_follow_the_patches_removed_in_the_maps_order():
    pixels, mask, score = _evidence()
    truth = patch_mask(mask, (4, 4))  # the fraction of each 2x2 patch the mask covers
    deletion = deletion_curve(score, pixels, truth)
    insertion = insertion_curve(score, pixels, truth)
    # the mask's 3 patches go first, one at a time: 4 of its 12 pixels each
    covered = int((truth > 0).sum())
    assert covered == 3
    np.testing.assert_allclose(deletion[: covered + 1], [1.0, 2 / 3, 1 / 3, 0.0])
    np.testing.assert_allclose(deletion[covered:], 0.0)
    np.testing.assert_allclose(insertion[: covered + 1], [0.0, 1 / 3, 2 / 3, 1.0])
    assert len(deletion) == len(insertion) == 17
    np.testing.assert_allclose(deletion + insertion, 1.0)  # this score is linear in the kept pixels


def test_the_true_mask_ranks_best_and_its_reverse_worst():
    pixels, mask, score = _evidence()
    truth = patch_mask(mask, (4, 4))
    maps = {"truth": truth, "reverse": -truth, **{f"random{i}": RNG.random((4, 4)) for i in range(5)}}
    deletion = {k: curve_auc(deletion_curve(score, pixels, m)) for k, m in maps.items()}
    insertion = {k: curve_auc(insertion_curve(score, pixels, m)) for k, m in maps.items()}
    assert min(deletion, key=deletion.get) == "truth" and max(deletion, key=deletion.get) == "reverse"
    assert max(insertion, key=insertion.get) == "truth" and min(insertion, key=insertion.get) == "reverse"
    # the truth's deletion curve: 1, 2/3, 1/3, then 0, each step 1/16 wide
    assert deletion["truth"] == pytest.approx((5 / 6 + 1 / 2 + 1 / 6) / 16)


def test_a_baseline_replaces_the_removed_pixels():
    pixels, mask, score = _evidence()
    curve = deletion_curve(score, pixels, patch_mask(mask, (4, 4)), baseline=0.5)
    assert curve[0] == pytest.approx(1.0) and curve[-1] == pytest.approx(0.5)
    per_channel = np.array([0.0, 0.5, 1.0], dtype=np.float32)[:, None, None]
    curve = insertion_curve(score, pixels, patch_mask(mask, (4, 4)), baseline=per_channel)
    assert curve[0] == pytest.approx(0.5)


def test_steps_of_several_patches_and_their_area():
    pixels, mask, score = _evidence()
    truth = patch_mask(mask, (4, 4))
    coarse = deletion_curve(score, pixels, truth, step=3)
    assert len(coarse) == 7  # 0, 3, ..., 15 patches, then all 16
    np.testing.assert_allclose(coarse, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert curve_auc(coarse, patches=16, step=3) == pytest.approx(0.5 * 3 / 16)
    assert curve_auc([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], patches=16, step=3) == pytest.approx((15 + 0.5) / 16)
    with pytest.raises(ConfigError, match="step"):
        deletion_curve(score, pixels, truth, step=0)


def test_curve_area_by_the_trapezoid_rule():
    assert curve_auc([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert curve_auc([1.0, 0.0]) == pytest.approx(0.5)
    assert curve_auc(np.linspace(0, 1, 11)) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="two points"):
        curve_auc([1.0])


def test_pointing_game_on_the_patch_grid():
    _, mask, _ = _evidence()
    truth = patch_mask(mask, (4, 4))
    assert pointing_hit(truth, mask)
    assert not pointing_hit(-truth, mask)
    miss = np.zeros((4, 4))
    miss[3, 0] = 1.0
    assert not pointing_hit(miss, mask)
    edge = np.zeros((4, 4))
    edge[1, 3] = 1.0  # patch (1,3) holds pixels (2..3, 6..7) of the mask
    assert pointing_hit(edge, mask)
    assert pointing_hit(np.zeros((8, 8)) + np.eye(8)[2][:, None] * np.eye(8)[4], mask)  # a pixel-level map


def test_a_map_that_does_not_tile_the_image_is_refused():
    pixels, mask, score = _evidence()
    with pytest.raises(ConfigError, match="does not tile"):
        deletion_curve(score, pixels, np.zeros((3, 3)))
    with pytest.raises(ConfigError, match=r"\[rows, cols\]"):
        insertion_curve(score, pixels, np.zeros(16))
    with pytest.raises(ConfigError, match="does not tile"):
        pointing_hit(np.zeros((3, 3)), mask)
