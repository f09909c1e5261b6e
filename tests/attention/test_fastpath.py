"""The blocked CPU inference fast path computes exactly what the reference attention computes.

Small sizes with tiny query blocks, so every case crosses several blocks and a ragged last one.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attndesk.attention import fastpath
from attndesk.attention import kernel as core
from attndesk.core import MultiHeadAttention, SingleHeadAttention, scaled_dot_product_attention
from attndesk.system.timing import StageTimer

B, H, LQ, LK, D = 2, 3, 11, 13, 5
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12)}


def textbook(q, k, v, mask, scale):
    """softmax(q k^T * scale) v in float64, masked keys removed, rows without keys all zero."""
    q, k, v = q.double(), k.double(), v.double()
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # all -inf rows -> NaN -> attend to nothing
    return torch.matmul(weights, v), weights


def make_mask(shape, seed, *, empty_rows=True):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=gen) > 0.4
    if empty_rows and mask.shape[-2] > 1:
        mask[..., 1, :] = False  # a query row with no key at all
    return mask


def qkv(dtype, seed=0, lq=LQ, lk=LK):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=gen, dtype=dtype) for n in (lq, lk, lk))


@pytest.fixture
def fast_everywhere(monkeypatch):
    """Route even tiny inputs through the fast path, and count how often it runs."""
    calls = []
    real = core._blocked_attention

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs, block_bytes=4 * LK * 4)  # 4 float32 rows per block

    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 0)
    monkeypatch.setattr(core, "_blocked_attention", counted)
    return calls


MASK_SHAPES = [
    (LQ, LK),
    (1, LK),
    (LQ, 1),
    (B, 1, 1, LK),
    (B, 1, LQ, LK),
    (B, H, LQ, LK),
    (B, H, 1, LK),
    (1, H, LQ, LK),
    (H, LQ, LK),
    (1, 1, 1, LK),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [None, *MASK_SHAPES], ids=str)
@pytest.mark.parametrize("scale", [None, 1.0, 0.37])
def test_blocked_equals_textbook_for_every_mask_shape(dtype, shape, scale):
    q, k, v = qkv(dtype, seed=hash(shape) % 1000)
    mask = None if shape is None else make_mask(shape, seed=3)
    scale_value = 1 / math.sqrt(D) if scale is None else scale
    assert core._fast_path_ok(q, k, v, mask) or core.FAST_PATH_MIN_ELEMENTS > B * H * LQ * LK
    for block_bytes in (1, 3 * LK * q.element_size(), 1 << 30):  # 8-row minimum, ragged, one block
        out, w = core._blocked_attention(q, k, v, mask, scale_value, block_bytes=block_bytes)
        want_out, want_w = textbook(q, k, v, mask, scale_value)
        assert w.dtype == dtype and w.shape == (B, H, LQ, LK) and out.shape == (B, H, LQ, D)
        assert not torch.isnan(w).any() and not torch.isnan(out).any()
        torch.testing.assert_close(w.double(), want_w, **TOL[dtype])
        torch.testing.assert_close(out.double(), want_out, **TOL[dtype])
        if mask is not None:
            full = torch.broadcast_to(mask, w.shape)
            assert (w[~full] == 0).all(), "masked keys must get exactly zero weight"
            empty = ~full.any(-1)
            assert (out[empty] == 0).all() and (w[empty] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_key_padding_that_masks_every_key_of_one_sequence(dtype):
    q, k, v = qkv(dtype)
    mask = torch.ones(B, 1, 1, LK, dtype=torch.bool)
    mask[1] = False  # sequence 1 is all padding
    mask[0, ..., -3:] = False
    out, w = core._blocked_attention(q, k, v, mask, 0.5, block_bytes=1)
    assert (w[1] == 0).all() and (out[1] == 0).all()
    want_out, want_w = textbook(q, k, v, mask, 0.5)
    torch.testing.assert_close(w.double(), want_w, **TOL[dtype])
    torch.testing.assert_close(out.double(), want_out, **TOL[dtype])


@pytest.mark.parametrize("scale", [-0.5, 0.0])
def test_key_mask_with_non_positive_scale_still_masks(scale):
    # the 0/-inf key bias would turn into +inf or NaN under such a scale; the path masks instead
    q, k, v = qkv(torch.float64)
    mask = make_mask((B, 1, 1, LK), seed=5, empty_rows=False)
    out, w = core._blocked_attention(q, k, v, mask, scale, block_bytes=1)
    want_out, want_w = textbook(q, k, v, mask, scale)
    torch.testing.assert_close(w, want_w)
    torch.testing.assert_close(out, want_out)


def test_cross_attention_and_broadcast_batch_dims():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, 7, D, generator=gen)
    k = torch.randn(1, H, 19, D, generator=gen)  # shared over the batch
    v = torch.randn(1, H, 19, 4, generator=gen)  # d_v != d_k
    mask = make_mask((B, 1, 7, 19), seed=2)
    assert core._fast_path_ok(q, k, v, mask) or core.FAST_PATH_MIN_ELEMENTS > 0
    out, w = core._blocked_attention(q, k, v, mask, 0.3, block_bytes=1)
    want_out, want_w = textbook(q, k, v, mask, 0.3)
    assert out.shape == (B, H, 7, 4)
    torch.testing.assert_close(w.double(), want_w, **TOL[torch.float32])
    torch.testing.assert_close(out.double(), want_out, **TOL[torch.float32])


def test_fast_path_refuses_what_it_cannot_do_exactly(monkeypatch):
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 0)
    q, k, v = qkv(torch.float32)
    assert core._fast_path_ok(q, k, v, None)
    assert not core._fast_path_ok(q.bfloat16(), k.bfloat16(), v.bfloat16(), None)
    assert not core._fast_path_ok(q, k, v, torch.ones(LQ, LK))  # not a bool mask
    assert not core._fast_path_ok(q, k, v, torch.ones(LK, dtype=torch.bool))  # 1-D: reference path
    assert not core._fast_path_ok(q, k, v, torch.ones(4, B, H, LQ, LK, dtype=torch.bool))  # would grow
    assert not core._fast_path_ok(q.requires_grad_(), k, v, None)
    with torch.no_grad():
        assert core._fast_path_ok(q, k, v, None)
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 10**9)
    assert not core._fast_path_ok(q.detach(), k, v, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_public_function_takes_the_fast_path_and_matches_reference(fast_everywhere, dtype, monkeypatch):
    q, k, v = qkv(dtype)
    mask = make_mask((B, 1, LQ, LK), seed=9)
    with torch.inference_mode():
        out, w = scaled_dot_product_attention(q, k, v, mask)
    assert len(fast_everywhere) == 1
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 10**9)
    with torch.inference_mode():
        ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask)
    assert len(fast_everywhere) == 1  # the reference run did not use it
    torch.testing.assert_close(w, ref_w, **TOL[dtype])
    torch.testing.assert_close(out, ref_out, **TOL[dtype])


def test_gradients_use_the_reference_path_and_flow(fast_everywhere):
    q, k, v = (t.requires_grad_() for t in qkv(torch.float64))
    mask = make_mask((B, 1, 1, LK), seed=4, empty_rows=False)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    (out.sum() + (w * w).sum()).backward()
    assert not fast_everywhere
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, mask[:1, ..., :5])[0],
        (q[:1, :1, :4], k[:1, :1, :5], v[:1, :1, :5]),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_shape", [None, (B, 1, 1, LQ), (LQ, LQ), (B, LQ, LQ)], ids=str)
def test_multi_head_fast_path_equals_reference_path(fast_everywhere, monkeypatch, dtype, mask_shape):
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).to(dtype).eval()
    x = torch.randn(B, LQ, 12, dtype=dtype)
    mask = None if mask_shape is None else make_mask(mask_shape, seed=6)
    with torch.inference_mode():
        out, w = mha(x, mask=mask)
        head_out, _ = mha(x, mask=mask, head_mask=torch.tensor([1.0, 0.0, 1.0], dtype=dtype))
    assert len(fast_everywhere) == 2
    # the reference: whole-tensor path, with autograd on (so no fused projections either)
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 10**9)
    ref_out, ref_w = mha(x, mask=mask)
    ref_head_out, _ = mha(x, mask=mask, head_mask=torch.tensor([1.0, 0.0, 1.0], dtype=dtype))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else TOL[dtype]
    torch.testing.assert_close(w, ref_w.detach(), **tol)
    torch.testing.assert_close(out, ref_out.detach(), **tol)
    torch.testing.assert_close(head_out, ref_head_out.detach(), **tol)
    assert not torch.isnan(w).any() and not torch.isnan(out).any()


def test_multi_head_fast_path_matches_torch_multihead_attention(fast_everywhere):
    torch.manual_seed(1)
    ours = MultiHeadAttention(16, 4).eval()
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(B, LQ, 16)
    keep = torch.ones(B, LQ, dtype=torch.bool)
    keep[0, -4:] = False
    with torch.inference_mode():
        out, w = ours(x, mask=keep[:, None, None, :])
        ref_out, ref_w = theirs(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
    assert fast_everywhere
    torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)


def test_cross_attention_and_single_head_modules(fast_everywhere, monkeypatch):
    torch.manual_seed(2)
    mha, single = MultiHeadAttention(12, 3).eval(), SingleHeadAttention(12, 6).eval()
    x, y = torch.randn(B, 5, 12), torch.randn(B, 9, 12)
    cross_mask = make_mask((B, 1, 5, 9), seed=8)
    self_mask = make_mask((B, 1, 5), seed=7, empty_rows=False)[:, None]  # [B, 1, 1, 5]
    with torch.inference_mode():
        fast = [mha(x, y, y, mask=cross_mask, scale=0.25), single(x, mask=self_mask)]
    assert len(fast_everywhere) == 2
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 10**9)
    with torch.inference_mode():
        ref = [mha(x, y, y, mask=cross_mask, scale=0.25), single(x, mask=self_mask)]
    for (out, w), (ref_out, ref_w) in zip(fast, ref):
        torch.testing.assert_close(w, ref_w)
        torch.testing.assert_close(out, ref_out)


def test_a_timer_times_the_fast_path_itself_and_kept_runs_use_the_reference(fast_everywhere):
    torch.manual_seed(3)
    mha = MultiHeadAttention(12, 3).eval()
    x = torch.randn(1, LQ, 12)
    mask = make_mask((1, 1, 1, LQ), seed=1, empty_rows=False)
    timer, keep = StageTimer(torch.device("cpu")), {}
    with torch.inference_mode():
        fast_out, fast_w = mha(x, mask=mask)
        timed_out, timed_w = mha(x, mask=mask, timer=timer)
        kept_out, kept_w = mha(x, mask=mask, keep=keep)
    assert len(fast_everywhere) == 2  # timed or not, the same (fast) path; keeping needs the reference
    assert list(timer.seconds) == ["projections", "attention", "weighted sum", "output projection"]
    assert all(seconds > 0 for seconds in timer.seconds.values())
    assert {"q", "k", "v", "scores", "scaled", "masked", "weights", "context", "output"} <= set(keep)
    for out, w in ((timed_out, timed_w), (kept_out, kept_w)):
        torch.testing.assert_close(w, fast_w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out, fast_out, rtol=1e-5, atol=1e-5)


def test_onednn_linear_agrees_with_torch_linear():
    layer = torch.nn.Linear(24, 10)
    x = torch.randn(3, 7, 24)
    with torch.inference_mode():
        got = core._linear(x, layer)
    torch.testing.assert_close(got, layer(x).detach(), rtol=1e-5, atol=1e-5)
    with torch.inference_mode():  # odd layouts: a transposed batch, a strided last axis, one vector
        for odd in (x.transpose(0, 1), torch.randn(24, 5).t(), x[0, 0]):
            torch.testing.assert_close(core._linear(odd, layer), F.linear(odd, layer.weight, layer.bias))
    if fastpath.onednn() is not None:  # and its -inf bias stays -inf, the key-mask trick relies on it
        bias = torch.zeros(10).masked_fill_(torch.arange(10) > 6, float("-inf"))
        scores = fastpath.onednn()(x[0], layer.weight.detach(), bias, "none", [None], "")
        assert torch.isneginf(scores[:, 7:]).all() and torch.isfinite(scores[:, :7]).all()


@settings(max_examples=40, deadline=None)
@given(
    lq=st.integers(1, 12),
    lk=st.integers(1, 12),
    heads=st.integers(1, 3),
    rows_per_block=st.integers(1, 5),
    mask_kind=st.sampled_from(["none", "key", "full", "row"]),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_property_rows_sum_to_one_or_zero(lq, lk, heads, rows_per_block, mask_kind, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, n, 3, generator=gen, dtype=dtype) for n in (lq, lk, lk))
    shapes = {"none": None, "key": (1, 1, 1, lk), "full": (1, heads, lq, lk), "row": (1, 1, lq, 1)}
    mask = None if shapes[mask_kind] is None else torch.rand(shapes[mask_kind], generator=gen) > 0.5
    out, w = core._blocked_attention(q, k, v, mask, 0.7, block_bytes=rows_per_block * lk * q.element_size())
    want_out, want_w = textbook(q, k, v, mask, 0.7)
    torch.testing.assert_close(w.double(), want_w, **TOL[dtype])
    torch.testing.assert_close(out.double(), want_out, **TOL[dtype])
    full = torch.ones_like(w, dtype=torch.bool) if mask is None else torch.broadcast_to(mask, w.shape)
    sums = w.double().sum(-1)
    has_key = full.any(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]), **TOL[dtype])
    assert (sums[~has_key] == 0).all() and (w[~full] == 0).all()


@pytest.mark.parametrize("lead", [(), (4,)], ids=["2-D", "3-D"])
def test_unbatched_and_3d_inputs(fast_everywhere, lead):
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(*lead, n, D, generator=gen) for n in (LQ, LK, LK))
    mask = make_mask((LQ, LK), seed=12)
    with torch.inference_mode():
        out, w = scaled_dot_product_attention(q, k, v, mask, scale=0.5)
    assert fast_everywhere and w.shape == (*lead, LQ, LK) and out.shape == (*lead, LQ, D)
    want_out, want_w = textbook(q, k, v, mask, 0.5)
    torch.testing.assert_close(w.double(), want_w, **TOL[torch.float32])
    torch.testing.assert_close(out.double(), want_out, **TOL[torch.float32])
