"""The one attention function behind every variant: grouped-query heads, soft-cap, bias, masks."""

import math

import pytest
import torch
import torch.nn.functional as F

from attndesk.attention.kernel import attend


def _qkv(heads=8, kv=2, lq=7, lk=9, d=16, batch=2, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, lq, d, generator=g, dtype=dtype)
    k = torch.randn(batch, kv, lk, d, generator=g, dtype=dtype)
    v = torch.randn(batch, kv, lk, d + 3, generator=g, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("kv", [1, 2, 4, 8])
def test_grouped_heads_equal_repeated_kv_and_torch_sdpa(kv):
    q, k, v = _qkv(kv=kv)
    mask = torch.rand(2, 1, 7, 9, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[..., 0] = True  # every row keeps a key: torch's SDPA gives NaN for empty rows
    context, weights = attend(q, k, v, mask=mask)
    groups = 8 // kv
    k_rep, v_rep = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # head h reads h // G
    scores = (q @ k_rep.transpose(-1, -2)) / math.sqrt(16)
    want_w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(weights, want_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(context, want_w @ v_rep, rtol=0, atol=1e-12)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(context, sdpa, rtol=0, atol=1e-12)


def test_softcap_then_bias_then_mask_and_empty_rows_are_zero():
    q, k, v = _qkv(heads=4, kv=4, lq=5, lk=5)
    bias = -torch.arange(4, dtype=q.dtype)[:, None, None] * (torch.arange(5)[None, :] - torch.arange(5)[:, None]).abs()
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[2] = False  # query 2 has no key at all
    keep = {}
    context, weights = attend(q, k, v, mask=mask, bias=bias, scale=0.3, softcap=2.0, keep=keep)
    scores = (q @ k.transpose(-1, -2)) * 0.3
    capped = 2.0 * torch.tanh(scores / 2.0)
    want = torch.softmax((capped + bias).masked_fill(~mask, float("-inf")), dim=-1)
    want[..., 2, :] = 0.0
    assert not torch.isnan(weights).any()
    torch.testing.assert_close(weights, want, rtol=0, atol=1e-12)
    assert torch.count_nonzero(context[..., 2, :]) == 0
    assert set(keep) == {"scores", "scaled", "capped", "bias", "masked", "weights", "context"}
    torch.testing.assert_close(keep["capped"], capped)


def test_grouping_that_does_not_divide_is_refused():
    q, k, v = _qkv(heads=6, kv=4)
    with pytest.raises(ValueError, match="do not divide"):
        attend(q, k, v)


def test_in_place_fast_path_equals_the_kept_path_and_spares_the_inputs():
    """Without ``keep`` attend scales, biases and masks its score buffer in place; the result is the
    same, the caller's tensors are untouched, and a row emptied by a -inf bias alone is zeros."""
    q, k, v = _qkv(heads=4, kv=2, lq=6, lk=6)
    bias = torch.zeros(4, 6, 6, dtype=q.dtype)
    bias[:, 3] = float("-inf")  # query 3 sees nothing, through the bias only
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    copies = [t.clone() for t in (q, k, v, bias, mask)]
    fast = attend(q, k, v, mask=mask, bias=bias, scale=0.4)
    kept = attend(q, k, v, mask=mask, bias=bias, scale=0.4, keep={})
    for a, b in zip(fast, kept):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.isnan(fast[1]).any() and torch.count_nonzero(fast[1][..., 3, :]) == 0
    for before, after in zip(copies, (q, k, v, bias, mask)):
        assert torch.equal(before, after)
    q.requires_grad_(True)
    attend(q, k, v, mask=mask, scale=0.4)[0].sum().backward()  # the gradient path stays out of place
    assert q.grad is not None and torch.isfinite(q.grad).all()
