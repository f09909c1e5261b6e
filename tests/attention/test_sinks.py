"""Softmax sinks (learned per-head sink logits, the off-by-one softmax) in every attention path,
against a plain torch reference written here: the sink logit as one more column of the scores,
torch.softmax over the row, the column dropped."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from attndesk.attention import kernel as core
from attndesk.attention.alibi import alibi_slopes
from attndesk.attention.blocked import ExactAttention, FullSink, blocked_attention
from attndesk.attention.kernel import attend
from attndesk.attention.masks import MaskSpec
from attndesk.attention.scoring import Scoring, softmax_rows
from attndesk.attention.sinks import sink_logits
from attndesk.core import AttentionConfig, ConfigError, run_attention
from attndesk.runs.plan import plan_run
from attndesk.teaching.online_softmax import online_softmax

TEXT = "the cat sat on the mat because it was tired and the dog barked at it"
NEG_INF = float("-inf")


def reference_weights(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """scores [..., H, Lq, Lk] (-inf where masked), sinks [H]: softmax over [scores | s_h], sink column dropped."""
    column = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def reference_scores(q, k, scale, *, softcap=None, mask=None, slopes=None, window=None) -> torch.Tensor:
    """Q K^T (grouped K/V heads repeated) -> scale -> cap -> ALiBi -> -inf where masked or out of the window."""
    groups = q.shape[-3] // k.shape[-3]
    s = q @ k.repeat_interleave(groups, dim=-3).transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    lq, lk = s.shape[-2:]
    dist = (torch.arange(lq)[:, None] - torch.arange(lk)[None, :]).abs().to(torch.float64)
    if slopes is not None:
        s = s - (torch.tensor(slopes, dtype=torch.float64)[:, None, None] * dist).to(s.dtype)
    allowed = torch.ones(lq, lk, dtype=torch.bool) if mask is None else mask
    if window is not None:
        allowed = allowed & (dist < window)
    return s.masked_fill(~allowed, NEG_INF)


def _qkv(heads=4, kv=2, lq=23, lk=23, d=8, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, lq, d, generator=gen, dtype=dtype)
    k = torch.randn(2, kv, lk, d, generator=gen, dtype=dtype)
    v = torch.randn(2, kv, lk, d, generator=gen, dtype=dtype)
    mask = torch.rand(lq, lk, generator=gen) > 0.3
    mask[5] = False  # a query with no key left
    return q, k, v, mask


VARIANTS = {"learned": (1.5, -2.0, 0.25, 4.0), "off-by-one": (0.0, 0.0, 0.0, 0.0)}


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_attend_with_sinks_is_the_extra_column_softmax(kind):
    q, k, v, mask = _qkv()
    sinks = VARIANTS[kind]
    keep: dict = {}
    context, weights = attend(q, k, v, mask=mask, scoring=Scoring(0.4, softcap=3.0, sinks=sinks), keep=keep)
    want = reference_weights(reference_scores(q, k, 0.4, softcap=3.0, mask=mask), torch.tensor(sinks))
    torch.testing.assert_close(weights, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(context, want @ v.repeat_interleave(2, dim=-3), rtol=0, atol=1e-13)
    assert not torch.isnan(weights).any()
    assert (weights[..., 5, :] == 0).all()  # no key: zeros, the whole row to the sink
    sums = weights.sum(-1)
    assert (sums < 1).all()
    torch.testing.assert_close(keep["sink"][..., 0], 1 - sums, rtol=0, atol=1e-14)  # the sink's share
    assert keep["sink_logit"].reshape(-1, 4)[0].tolist() == list(sinks)


def test_the_sink_is_stable_and_subtracts_the_row_maximum_with_the_sink():
    scores = torch.tensor([[1000.0, 999.0, NEG_INF], [-1000.0, -1001.0, NEG_INF]], dtype=torch.float64)
    for sink in (1000.5, -1000.5, 0.0):
        got = softmax_rows(scores, sink=sink)
        want = reference_weights(scores[None], torch.tensor([sink]))[0]
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
    huge = softmax_rows(torch.tensor([[0.0, 1.0]]), sink=1e4)  # the sink dwarfs the keys: weights 0, not NaN
    assert huge.tolist() == [[0.0, 0.0]]


def test_off_by_one_is_one_plus_the_sum_in_the_denominator():
    x = torch.randn(6, 9, dtype=torch.float64)
    want = x.exp() / (1 + x.exp().sum(-1, keepdim=True))
    torch.testing.assert_close(softmax_rows(x, sink=0.0), want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("kind", list(VARIANTS))
@pytest.mark.parametrize("alibi,window", [(False, None), (True, None), (False, 6), (True, 4)])
def test_the_fast_path_equals_the_reference(kind, alibi, window):
    q, k, v, mask = _qkv()
    slopes = tuple(float(s) for s in alibi_slopes(4)) if alibi else None
    scoring = Scoring(0.4, softcap=2.0, slopes=slopes, window=window, sinks=VARIANTS[kind])
    want_ctx, want_w = attend(q, k, v, mask=mask, scoring=scoring)
    ctx, w = core._blocked_attention(q, k, v, mask, scoring, block_bytes=1)  # blocks of 8 rows
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-13)
    torch.testing.assert_close(ctx, want_ctx, rtol=0, atol=1e-13)
    ref = reference_weights(
        reference_scores(q, k, 0.4, softcap=2.0, mask=mask, slopes=slopes, window=window), torch.tensor(scoring.sinks)
    )
    torch.testing.assert_close(w, ref, rtol=0, atol=1e-13)
    assert not torch.isnan(w).any()


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_the_blocked_path_and_exact_recompute_equal_the_reference(kind):
    q, k, v, _ = _qkv()
    q, k, v = q[0], k[0], v[0]  # [H, L, d]
    spec = MaskSpec(23, 23, causal=True, window=7)
    scoring = Scoring(0.5, window=7, sinks=VARIANTS[kind])
    sink = FullSink(4, 23, 23)
    context = blocked_attention(q.float(), k.float(), v.float(), spec, scoring=scoring, block_rows=5, sink=sink)
    causal = torch.ones(23, 23, dtype=torch.bool).tril()
    ref = reference_weights(reference_scores(q, k, 0.5, mask=causal, window=7), torch.tensor(VARIANTS[kind]))
    np.testing.assert_allclose(sink.weights, ref.numpy(), rtol=0, atol=2e-7)
    ref_ctx = ref @ v.repeat_interleave(2, dim=0)
    np.testing.assert_allclose(context.numpy(), ref_ctx.numpy(), rtol=0, atol=2e-6)
    exact = ExactAttention(q, k, spec, scoring=scoring)
    np.testing.assert_allclose(exact.rows(2, 0, 23), ref[2].numpy(), rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="window 3 is not the mask's"):
        ExactAttention(q, k, spec, scoring=Scoring(0.5, window=3))


@pytest.mark.parametrize("sink", [0.0, 2.5, -3.0])
@pytest.mark.parametrize("block", [1, 3, 40])
def test_the_online_softmax_folds_the_sink_in_first(sink, block):
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((7, 11)) * 3
    scores[2] = -np.inf  # no key: zeros
    scores[4, ::2] = -np.inf
    values = rng.standard_normal((11, 5))
    walk = online_softmax(scores, values, block, sink=sink)
    ref = reference_weights(torch.as_tensor(scores)[None], torch.tensor([sink]))[0].numpy()
    np.testing.assert_allclose(walk.weights, ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(walk.output, ref @ values, rtol=0, atol=1e-13)
    assert walk.max_abs_diff < 1e-13 and not np.isnan(walk.output).any()
    assert (walk.output[2] == 0).all()
    first = walk.steps[0]
    assert (first.max_before == sink).all() and (first.sum_before == 1.0).all()  # m = s, l = exp(s - s)


# --- the toy model ------------------------------------------------------------------------------


def _reference_from_intermediates(result, config: AttentionConfig, sinks) -> np.ndarray:
    inter = result.intermediates
    q, k = torch.as_tensor(inter.q, dtype=torch.float64), torch.as_tensor(inter.k, dtype=torch.float64)
    scale = config.head_dim**-0.5 if config.scaled else 1.0
    mask = None if result.mask is None else torch.as_tensor(result.mask)
    slopes = alibi_slopes(config.num_heads) if config.position == "alibi" else None
    scores = reference_scores(q, k, scale, softcap=config.softcap, mask=mask, slopes=slopes, window=config.window)
    return reference_weights(scores, torch.tensor(sinks, dtype=torch.float64)).numpy()


@pytest.mark.parametrize(
    "changes",
    [
        dict(sink="off-by-one"),
        dict(sink="learned"),
        dict(sink="learned", sink_logit=1.25, mask="causal", position="alibi", softcap=2.0),
        dict(sink="off-by-one", mask="padding", pad_to=20, window=3, kv_heads=2),
    ],
)
def test_run_attention_with_a_sink_equals_the_reference(changes):
    config = AttentionConfig(**changes)
    sinks = sink_logits(config.sink, config.num_heads, value=config.sink_logit, seed=config.seed)
    result = run_attention(config, TEXT, keep_intermediates=True)  # the reference path, every stage kept
    want = _reference_from_intermediates(result, config, sinks)
    np.testing.assert_allclose(result.weights, want, rtol=0, atol=2e-6)
    np.testing.assert_allclose(result.intermediates.sink[..., 0], 1 - want.sum(-1), rtol=0, atol=2e-6)
    assert not np.isnan(result.weights).any() and (result.weights.sum(-1) < 1).all()
    fast = run_attention(config, TEXT)  # the fast path where it applies
    np.testing.assert_allclose(fast.weights, result.weights, rtol=0, atol=1e-6)


def test_a_bounded_run_with_a_sink_is_exact_on_demand():
    config = AttentionConfig(sink="learned", mask="causal", window=5, num_heads=2, embed_dim=16)
    full = run_attention(config, TEXT, keep_intermediates=True)
    lq = full.weights.shape[-1]
    for force in ("blocked", "pyramid"):
        plan = dataclasses.replace(plan_run(config, lq, force=force, overview_px=8), block_rows=3)
        bounded = run_attention(config, TEXT, plan=plan)
        assert bounded.exact is not None
        for head in range(2):
            np.testing.assert_allclose(bounded.exact.rows(head, 0, lq), full.weights[head], rtol=0, atol=1e-6)
        if force == "blocked":
            np.testing.assert_allclose(bounded.weights, full.weights, rtol=0, atol=1e-6)


def test_the_toy_sink_logits():
    assert sink_logits("none", 4) is None
    assert sink_logits("off-by-one", 3) == (0.0, 0.0, 0.0)
    assert sink_logits("learned", 2, value=-1.5) == (-1.5, -1.5)
    drawn = sink_logits("learned", 4, seed=7)
    assert drawn == sink_logits("learned", 4, seed=7) != sink_logits("learned", 4, seed=8)
    assert drawn is not None and len(set(drawn)) == 4 and all(math.isfinite(x) for x in drawn)
    zero = run_attention(AttentionConfig(sink="learned", sink_logit=0.0), TEXT).weights
    np.testing.assert_array_equal(zero, run_attention(AttentionConfig(sink="off-by-one"), TEXT).weights)


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(sink="gpt"), r"unknown sink 'gpt'; choose one of: none, learned, off-by-one"),
        (dict(sink="learned", sink_logit=500.0), r"sink_logit must be a number in \[-100, 100\]"),
        (dict(sink_logit=float("nan")), r"sink_logit must be a number in \[-100, 100\]"),
    ],
)
def test_bad_sink_settings_are_explained(changes, message):
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(**changes).validate()


def test_scoring_is_given_once():
    q, k, v, _ = _qkv()
    with pytest.raises(ValueError, match="not both"):
        attend(q, k, v, scale=0.5, scoring=Scoring(0.5))
    for wrong in ((0.0,) * 3, (0.0,) * 5):  # one logit per query head, in every path
        with pytest.raises(ValueError, match="one sink logit per query head"):
            attend(q, k, v, scoring=Scoring(0.5, sinks=wrong))
        with pytest.raises(ValueError, match="one sink logit per query head"):
            core._blocked_attention(q, k, v, None, Scoring(0.5, sinks=wrong))
    plain = attend(q, k, v, scale=0.5, softcap=2.0)
    same = attend(q, k, v, scoring=Scoring(0.5, softcap=2.0))
    torch.testing.assert_close(plain, same, rtol=0, atol=0)


def test_a_learned_sink_gets_its_gradient_through_the_reference_path():
    q, k, v, mask = _qkv(dtype=torch.float64)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    _, weights = core.attention_core(q, k, v, mask, Scoring(0.4, sinks=sinks))
    weights.sum().backward()
    assert sinks.grad is not None and (sinks.grad < 0).all()  # a larger sink takes weight from the keys
    check = sinks.detach().clone().requires_grad_(True)
    torch.autograd.gradcheck(lambda s: attend(q, k, v, mask=mask, scoring=Scoring(0.4, sinks=s))[1], (check,))


def test_half_precision_sinks_softmax_in_float32():
    q, k, v, mask = _qkv(dtype=torch.float32)
    want = attend(q, k, v, mask=mask, scoring=Scoring(0.4, sinks=VARIANTS["learned"]))[1]
    got = attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask=mask, scoring=Scoring(0.4, sinks=VARIANTS["learned"]))[
        1
    ]
    assert got.dtype == torch.bfloat16 and not torch.isnan(got).any()
    torch.testing.assert_close(got.float(), want, rtol=0, atol=0.03)
