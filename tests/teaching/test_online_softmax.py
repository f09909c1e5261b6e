"""One head's walk from a run's Q, K and V: ``project_text`` gives what the run projects (no
scores), ``head_attention`` runs ``attend`` for one head, and the walk over its scores equals
torch's softmax and ``F.scaled_dot_product_attention`` on the same Q, K and V."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attndesk.attention.alibi import alibi_bias
from attndesk.core import AttentionConfig, run_attention
from attndesk.runs.pipeline import project_text
from attndesk.teaching.online_softmax import head_attention, online_softmax

TEXT = "the cat sat on the mat because it was tired and the dog barked at it"
CONFIGS = [
    AttentionConfig(num_heads=4, mask="none"),
    AttentionConfig(num_heads=4, kv_heads=2, mask="causal", position="rope", window=5),
    AttentionConfig(num_heads=4, kv_heads=1, mask="padding", pad_to=20, position="alibi", softcap=2.0),
    AttentionConfig(num_heads=1, embed_dim=16, hidden_dim=8, scaled=False),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["mha", "gqa-rope-window", "mqa-alibi-softcap", "one-head"])
def test_project_text_is_what_the_run_projects(config):
    run = run_attention(config, TEXT, keep_intermediates=True)
    projected = project_text(config, TEXT)
    for name in ("embeddings", "q", "k", "v", "q_raw", "k_raw"):
        want, got = getattr(run.intermediates, name), getattr(projected.intermediates, name)
        assert (want is None) == (got is None), name
        if want is not None:
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert projected.intermediates.scores is None and projected.intermediates.weights is None
    np.testing.assert_array_equal(projected.mask, run.mask)


@pytest.mark.parametrize("config", CONFIGS, ids=["mha", "gqa-rope-window", "mqa-alibi-softcap", "one-head"])
def test_head_attention_is_the_runs_head(config):
    run = run_attention(config, TEXT, keep_intermediates=True)
    projected = project_text(config, TEXT)
    for head in range(config.num_heads):
        one = head_attention(config, projected.intermediates, projected.mask, head)
        assert one.kv_head == head // (config.num_heads // config.num_kv_heads)
        np.testing.assert_allclose(one.scores, run.intermediates.masked[head], rtol=1e-6, atol=1e-6)  # one head's GEMM
        np.testing.assert_allclose(one.context, run.intermediates.context[head], atol=1e-6)


def test_walk_equals_torch_softmax_and_sdpa():
    config = AttentionConfig(num_heads=4, kv_heads=2, mask="causal", position="alibi")
    projected = project_text(config, TEXT)
    inter = projected.intermediates
    for head in range(4):
        one = head_attention(config, inter, projected.mask, head)
        walk = online_softmax(one.scores, one.values, block=3)
        # torch's softmax of the very scores the walk read (float64): equal to rounding
        softmax = torch.softmax(torch.from_numpy(one.scores.astype(np.float64)), -1) @ torch.from_numpy(
            one.values.astype(np.float64)
        )
        np.testing.assert_allclose(walk.output, softmax.numpy(), rtol=0, atol=1e-14)
        # torch's fused attention from Q, K, V (float64): the same numbers, from its own scores
        q, k, v = (
            torch.from_numpy(x.astype(np.float64)) for x in (inter.q[head], inter.k[one.kv_head], inter.v[one.kv_head])
        )
        bias = alibi_bias(4, q.shape[0], dtype=torch.float64)[head]
        bias = bias.masked_fill(~torch.from_numpy(projected.mask), float("-inf"))
        sdpa = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=bias[None])[0]
        np.testing.assert_allclose(walk.output, sdpa.numpy(), rtol=0, atol=1e-5)  # the run's scores are float32
        assert walk.max_abs_diff < 1e-14


def test_head_attention_says_what_is_missing():
    config = AttentionConfig(num_heads=2)
    projected = project_text(config, TEXT)
    with pytest.raises(IndexError, match=r"out of range 0..1"):
        head_attention(config, projected.intermediates, projected.mask, 2)
    with pytest.raises(ValueError, match="Q, K and V"):
        head_attention(config, None, None, 0)


def _kept(walk) -> int:
    arrays = [walk.output, walk.reference, walk.weights]
    for s in walk.steps:
        arrays += [s.scores, s.probs, s.block_max, s.max_after, s.rescale, s.sum_after, s.output]
    return sum(a.nbytes for a in arrays)  # max_before / sum_before are the previous step's arrays


@pytest.mark.parametrize("lq, lk, dv, block", [(40, 40, 8, 1), (40, 37, 16, 4), (13, 100, 4, 32), (7, 5, 3, 64)])
def test_walk_bytes_is_what_a_walk_keeps(lq, lk, dv, block):
    from attndesk.teaching.online_softmax import walk_bytes

    rng = np.random.default_rng(0)
    walk = online_softmax(rng.standard_normal((lq, lk)), rng.standard_normal((lk, dv)), block)
    assert abs(walk_bytes(lq, lk, dv, block) - _kept(walk)) <= 0.05 * _kept(walk)


def test_a_walk_over_the_budget_is_refused_before_it_starts_and_says_what_fits():
    from attndesk.errors import ConfigError
    from attndesk.teaching.online_softmax import fitting_block, walk_bytes

    lq = lk = 1900
    dv = 64
    assert walk_bytes(lq, lk, dv, 1) > 1.7e9  # every step keeps O [Lq, dv]: the soak's 4 GiB
    budget = 128 << 20
    fits = fitting_block(lq, lk, dv, budget)
    assert walk_bytes(lq, lk, dv, fits) <= budget < walk_bytes(lq, lk, dv, fits // 2)
    scores = np.zeros((lq, lk))  # 29 MB: the walk would keep 1.8 GB more
    with pytest.raises(
        ConfigError, match=rf"blocks of 1 key\(s\) keeps 1\.\d GiB \(1,900 steps .*; blocks of {fits} keys fit"
    ):
        online_softmax(scores, np.zeros((lk, dv)), 1, budget=budget)
    with pytest.raises(ConfigError, match="no block size fits: shorten the text or raise the budget"):
        online_softmax(scores, np.zeros((lk, dv)), 64, budget=1 << 20)
    assert online_softmax(scores[:50, :50], np.zeros((50, dv)), 1, budget=budget).steps  # small ones run
