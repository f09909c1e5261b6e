"""head_statistics on hand-made weight matrices whose answers are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndesk.core import AttentionConfig, run_attention
from attndesk.teaching.statistics import STAT_FIELDS, head_statistics, layer_statistics, statistics_csv

L = 4


def uniform(n=L):
    return np.full((n, n), 1.0 / n)


def previous_token(n=L):
    w = np.zeros((n, n))
    w[0, 0] = 1.0  # the first token has no previous one: it attends to itself
    w[np.arange(1, n), np.arange(n - 1)] = 1.0
    return w


def test_uniform_head():
    (s,) = head_statistics(uniform()[None])
    assert s.entropy == pytest.approx(math.log(L))
    assert s.max_weight == pytest.approx(0.25)
    # rows: mean |i-j| = 1.5, 1, 1, 1.5
    assert s.mean_distance == pytest.approx(1.25)
    assert s.self_share == pytest.approx(0.25)
    assert s.previous_share == pytest.approx(0.75 * 0.25)
    assert s.next_share == pytest.approx(0.75 * 0.25)
    assert s.first_share == pytest.approx(0.25)
    assert s.special_share == 0.0
    assert s.rows == L


def test_identity_head():
    (s,) = head_statistics(np.eye(L)[None])
    assert s.entropy == pytest.approx(0.0)
    assert s.max_weight == 1.0
    assert s.mean_distance == 0.0
    assert (s.self_share, s.previous_share, s.next_share) == (1.0, 0.0, 0.0)
    assert s.first_share == pytest.approx(1 / L)  # only row 0 looks at key 0


def test_previous_token_head():
    (s,) = head_statistics(previous_token()[None])
    assert s.entropy == pytest.approx(0.0)
    assert s.mean_distance == pytest.approx(3 / 4)
    assert s.self_share == pytest.approx(1 / 4)
    assert s.previous_share == pytest.approx(3 / 4)
    assert s.next_share == 0.0
    assert s.first_share == pytest.approx(2 / 4)  # rows 0 and 1


def test_heads_are_independent_and_ordered():
    stats = head_statistics(np.stack([uniform(), np.eye(L), previous_token()]))
    assert [s.head for s in stats] == [0, 1, 2]
    assert [round(s.entropy, 9) for s in stats] == [round(math.log(L), 9), 0.0, 0.0]


def test_rows_without_weight_are_excluded_not_counted_as_zero():
    w = np.eye(L)
    w[2] = 0.0  # a query that attends to nothing (all keys masked)
    (s,) = head_statistics(w[None])
    assert s.rows == L - 1
    assert s.self_share == 1.0  # mean over the 3 real rows, not 3/4
    w = uniform()
    w[1] = 0.0
    (s,) = head_statistics(w[None])
    assert s.entropy == pytest.approx(math.log(L))


def test_rows_are_normalised_before_shares():
    (a,) = head_statistics(previous_token()[None])
    (b,) = head_statistics(2.0 * previous_token()[None])  # like inverted dropout scaling
    assert a.previous_share == b.previous_share and a.entropy == b.entropy
    assert b.max_weight == 2.0  # max_weight reports the raw weight


def test_special_share_by_tokens_mask_and_indices():
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    by_tokens = head_statistics(uniform()[None], special=tokens)[0].special_share
    by_mask = head_statistics(uniform()[None], special=np.array([True, False, False, True]))[0].special_share
    by_index = head_statistics(uniform()[None], special=[0, 3])[0].special_share
    assert by_tokens == by_mask == by_index == pytest.approx(0.5)


def test_two_point_rows_entropy():
    w = np.zeros((2, 2))
    w[0] = [0.5, 0.5]
    w[1] = [0.9, 0.1]
    (s,) = head_statistics(w[None])
    expected = (math.log(2) + -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))) / 2
    assert s.entropy == pytest.approx(expected)
    assert s.mean_distance == pytest.approx((0.5 + 0.9) / 2)


def test_rectangular_cross_attention():
    w = np.full((2, 3), 1 / 3)
    (s,) = head_statistics(w)
    assert s.self_share == pytest.approx(1 / 3)
    assert s.next_share == pytest.approx(1 / 3)
    assert s.previous_share == pytest.approx(1 / 6)


def test_on_real_run_matches_manual_numpy():
    result = run_attention(AttentionConfig(num_heads=2, embed_dim=8, mask="causal"), "the cat sat on the mat")
    stats = head_statistics(result.weights)
    w = result.weights.astype(np.float64)
    for h, s in enumerate(stats):
        assert s.max_weight == pytest.approx(float(w[h].max()))
        assert s.self_share == pytest.approx(float(np.mean(np.diag(w[h]))))
        row_entropy = -np.sum(np.where(w[h] > 0, w[h] * np.log(np.where(w[h] > 0, w[h], 1)), 0), axis=1)
        assert s.entropy == pytest.approx(float(row_entropy.mean()), rel=1e-6)
    # causal: no weight on later keys
    assert all(s.next_share == 0.0 for s in stats)


def test_layer_statistics_and_csv():
    w = np.stack([np.stack([uniform(), np.eye(L)]), np.stack([previous_token(), uniform()])])
    stats = layer_statistics(w)
    assert [(s.layer, s.head) for s in stats] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    text = statistics_csv(stats)
    lines = text.strip().split("\n")
    assert lines[0].split(",") == list(STAT_FIELDS)
    assert len(lines) == 5
    assert float(lines[2].split(",")[STAT_FIELDS.index("self_share")]) == 1.0


def test_bad_shape():
    with pytest.raises(ValueError, match="H, L, Lk"):
        head_statistics(np.zeros((1, 2, 3, 4)))
