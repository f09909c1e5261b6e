"""The core against PyTorch's own attention: same numbers, every mask kind, both precisions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from attndesk.core import (
    MultiHeadAttention,
    SingleHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float64: dict(atol=1e-11, rtol=1e-9)}


def _ids(lengths: list[int], total: int) -> torch.Tensor:
    """Token ids [B, total] with real tokens (>0) then padding (0)."""
    ids = torch.zeros(len(lengths), total, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.arange(1, n + 1)
    return ids


def _masks(ids: torch.Tensor) -> dict[str, torch.Tensor | None]:
    length = ids.shape[1]
    return {
        "none": None,
        "padding": padding_mask(ids),
        "causal": causal_mask(length),
        "padding+causal": padding_mask(ids) & causal_mask(length),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "padding", "causal", "padding+causal"])
def test_sdpa_matches_torch(dtype, kind):
    torch.manual_seed(1)
    ids = _ids([7, 4], 7)
    q, k, v = (torch.randn(2, 3, 7, 8, dtype=dtype) for _ in range(3))
    mask = _masks(ids)[kind]
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, **TOL[dtype])
    # weights, recomputed by hand from the formula
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(weights, torch.softmax(scores, -1), **TOL[dtype])


def test_sdpa_scale_one_is_the_unscaled_variant():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 5, 16, dtype=torch.float64) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, scale=1.0)
    torch.testing.assert_close(weights, torch.softmax(q @ k.transpose(-2, -1), -1))
    out, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3))


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = (torch.randn(1, 1, 3, 4) for _ in range(3))
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(weights).any() and not torch.isnan(out).any()
    assert torch.equal(weights[0, 0, 1], torch.zeros(3))
    assert torch.equal(out[0, 0, 1], torch.zeros(4))
    assert weights[0, 0, 0, 0] == 1.0


def test_dropout_only_in_training_and_seeded():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(1, 6, 16)
    mha.eval()
    _, w_eval = mha(x)
    torch.testing.assert_close(w_eval.sum(-1), torch.ones(1, 2, 6))
    mha.train()
    torch.manual_seed(5)
    _, w1 = mha(x)
    torch.manual_seed(5)
    _, w2 = mha(x)
    assert torch.equal(w1, w2)
    assert (w1 == 0).any()  # some weights dropped
    kept = w1 != 0
    torch.testing.assert_close(w1[kept], (w_eval * 2)[kept])  # inverted dropout scales by 1/(1-p)


def _copy_into_torch_mha(ours: MultiHeadAttention) -> torch.nn.MultiheadAttention:
    ref = torch.nn.MultiheadAttention(ours.embed_dim, ours.num_heads, batch_first=True)
    ref = ref.to(ours.q_proj.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "padding", "causal", "padding+causal"])
@pytest.mark.parametrize("inference", [False, True])
def test_multihead_matches_torch_multiheadattention(dtype, kind, inference):
    torch.manual_seed(3)
    ours = MultiHeadAttention(24, 4).to(dtype).eval()
    ref = _copy_into_torch_mha(ours)
    ids = _ids([9, 5], 9)
    x = torch.randn(2, 9, 24, dtype=dtype)
    mask = _masks(ids)[kind]
    torch_mask = None if mask is None else ~torch.broadcast_to(mask, (2, 1, 9, 9)).expand(2, 4, 9, 9).reshape(8, 9, 9)
    context = torch.inference_mode() if inference else torch.enable_grad()
    with context:
        out, weights = ours(x, mask=mask)
    exp_out, exp_w = ref(x, x, x, attn_mask=torch_mask, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, exp_out, **TOL[dtype])
    torch.testing.assert_close(weights, exp_w, **TOL[dtype])
    assert weights.shape == (2, 4, 9, 9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_attention_matches_torch(dtype):
    torch.manual_seed(4)
    ours = MultiHeadAttention(16, 2).to(dtype).eval()
    ref = _copy_into_torch_mha(ours)
    query, memory = torch.randn(2, 3, 16, dtype=dtype), torch.randn(2, 6, 16, dtype=dtype)
    key_ids = _ids([6, 2], 6)
    mask = padding_mask(key_ids)  # [B, 1, 1, Lk]
    out, weights = ours(query, memory, memory, mask)
    key_padding = ~mask[:, 0, 0, :]
    exp_out, exp_w = ref(query, memory, memory, key_padding_mask=key_padding, average_attn_weights=False)
    assert weights.shape == (2, 2, 3, 6)
    torch.testing.assert_close(out, exp_out, **TOL[dtype])
    torch.testing.assert_close(weights, exp_w, **TOL[dtype])


def test_gradients_flow_through_the_layer():
    torch.manual_seed(6)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8, requires_grad=True)
    out, _ = mha(x, mask=causal_mask(4))
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert mha.q_proj.weight.grad is not None and mha.q_proj.weight.grad.abs().sum() > 0


def test_single_head_matches_formula():
    torch.manual_seed(7)
    sha = SingleHeadAttention(12, 10).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    ids = _ids([5, 3], 5)
    out, weights = sha(x, padding_mask(ids))
    q, k, v = sha.q_proj(x), sha.k_proj(x), sha.v_proj(x)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(10)).masked_fill(ids[:, None, :] == 0, float("-inf"))
    torch.testing.assert_close(weights, torch.softmax(scores, -1))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v)
    assert out.shape == (2, 5, 10) and weights.shape == (2, 5, 5)


def test_einops_split_equals_view_transpose():
    x = torch.randn(5, 16, 312)
    ours = rearrange(x, "b l (h d) -> b h l d", h=6)
    by_hand = x.view(5, 16, 6, 52).transpose(1, 2)  # [B, L, H, d] -> [B, H, L, d]
    assert torch.equal(ours, by_hand)
    assert torch.equal(rearrange(ours, "b h l d -> b l (h d)"), x)


@pytest.mark.parametrize("shape,heads", [((5, 16, 312), 6), ((2, 4, 512), 8)])
def test_source_material_shapes(shape, heads):
    torch.manual_seed(8)
    mha = MultiHeadAttention(shape[-1], heads)
    out, weights = mha(torch.rand(*shape))
    assert out.shape == shape
    assert weights.shape == (shape[0], heads, shape[1], shape[1])
    assert mha.head_dim == shape[-1] // heads
    assert sum(isinstance(m, torch.nn.Linear) for m in mha.modules()) == 4


def test_head_mask_ablates_a_head():
    torch.manual_seed(9)
    mha = MultiHeadAttention(8, 2).double().eval()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    out_all, _ = mha(x)
    out_same, _ = mha(x, head_mask=torch.ones(2))
    out_ablated, _ = mha(x, head_mask=torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(out_all, out_same)
    # by hand: zero head 1's context before the output projection
    q, k, v = (rearrange(p(x), "b l (h d) -> b h l d", h=2) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    context = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v
    context[:, 1] = 0
    torch.testing.assert_close(out_ablated, mha.out_proj(rearrange(context, "b h l d -> b l (h d)")))


@pytest.mark.parametrize("position", ["none", "rope"])
def test_query_mask_zeroes_a_heads_query_rows(position):
    """A zeroed query row scores every visible key 0 (RoPE rotates a zero to zero): uniform weights
    over the causal prefix, the context the mean of the values; other rows and heads unchanged."""
    torch.manual_seed(10)
    mha = MultiHeadAttention(8, 2).double().eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    out_all, weights_all = mha(x, mask=causal, position=position)
    out_same, _ = mha(x, mask=causal, position=position, query_mask=torch.ones(2, 5))
    torch.testing.assert_close(out_all, out_same)
    factors = torch.ones(2, 5)
    factors[1, 3:] = 0.0  # head 1, rows 3 and 4
    out, weights = mha(x, mask=causal, position=position, query_mask=factors)
    want = weights_all.clone()
    want[:, 1, 3] = torch.tensor([1 / 4] * 4 + [0.0], dtype=torch.float64)
    want[:, 1, 4] = 1 / 5
    torch.testing.assert_close(weights, want)
    v = rearrange(mha.v_proj(x), "b l (h d) -> b h l d", h=2)
    context = weights_all @ v
    context[:, 1, 3] = v[:, 1, :4].mean(dim=1)
    context[:, 1, 4] = v[:, 1].mean(dim=1)
    torch.testing.assert_close(out, mha.out_proj(rearrange(context, "b h l d -> b l (h d)")))
