"""Property tests: for any shape and mask, the weights are a proper (masked) distribution."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attndesk.core import scaled_dot_product_attention


@st.composite
def attention_inputs(draw):
    batch = draw(st.integers(1, 2))
    heads = draw(st.integers(1, 3))
    lq = draw(st.integers(1, 9))
    lk = draw(st.integers(1, 9))
    d = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    mask_shape = draw(st.sampled_from([(lq, lk), (batch, 1, 1, lk), (batch, heads, lq, lk), (1, 1, lq, 1)]))
    mask = torch.rand(mask_shape, generator=gen) < draw(st.floats(0.0, 1.0))
    scale = draw(st.sampled_from([None, 1.0, 0.1]))
    q = torch.randn(batch, heads, lq, d, generator=gen) * 4
    k = torch.randn(batch, heads, lk, d, generator=gen) * 4
    v = torch.randn(batch, heads, lk, d, generator=gen)
    return q, k, v, mask, scale


@settings(max_examples=150, deadline=None)
@given(attention_inputs())
def test_weights_are_a_masked_distribution(inputs):
    q, k, v, mask, scale = inputs
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    full_mask = torch.broadcast_to(mask, weights.shape)
    assert not torch.isnan(weights).any() and not torch.isnan(out).any()
    assert (weights[~full_mask] == 0).all(), "a masked key got weight"
    row_has_key = full_mask.any(-1)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[row_has_key], torch.ones_like(sums[row_has_key]))
    assert (weights[~row_has_key] == 0).all(), "a fully masked row is not all zero"
    assert (out[~row_has_key] == 0).all(), "a fully masked row gave a non-zero output"
    assert (weights >= 0).all()
