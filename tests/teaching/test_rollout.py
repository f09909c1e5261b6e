"""attention_rollout on a 2-layer example computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.teaching.rollout import attention_rollout, layer_transition

LAYER1 = np.array([[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.5, 0.5]]])
LAYER2 = np.array([[[0.0, 1.0], [0.0, 1.0]], [[0.5, 0.5], [1.0, 0.0]]])


def test_layer_transition_by_hand():
    # mean [[1, 0], [.5, .5]] + I = [[2, 0], [.5, 1.5]] -> rows / 2
    np.testing.assert_allclose(layer_transition(LAYER1), [[1.0, 0.0], [0.25, 0.75]])
    # mean [[.25, .75], [.5, .5]] + I = [[1.25, .75], [.5, 1.5]] -> rows / 2
    np.testing.assert_allclose(layer_transition(LAYER2), [[0.625, 0.375], [0.25, 0.75]])


def test_two_layer_rollout_by_hand():
    rollout = attention_rollout(np.stack([LAYER1, LAYER2]))
    # A2 @ A1 = [[.625 + .375*.25, .375*.75], [.25 + .75*.25, .75*.75]]
    expected = np.array([[0.71875, 0.28125], [0.4375, 0.5625]])
    np.testing.assert_allclose(rollout, expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(rollout.sum(axis=1), 1.0)
    # the order matters: the first layer on the left would give another matrix
    assert not np.allclose(rollout, layer_transition(LAYER1) @ layer_transition(LAYER2))


def test_upto_and_single_layer():
    w = np.stack([LAYER1, LAYER2])
    np.testing.assert_allclose(attention_rollout(w, upto=1), layer_transition(LAYER1))
    with pytest.raises(ValueError):
        attention_rollout(w, upto=3)


def test_identity_attention_rolls_out_to_identity():
    eye = np.broadcast_to(np.eye(5), (3, 4, 5, 5))
    np.testing.assert_allclose(attention_rollout(eye), np.eye(5))


def test_rejects_non_square():
    with pytest.raises(ValueError, match="layers, H, L, L"):
        attention_rollout(np.zeros((2, 2, 3, 4)))
