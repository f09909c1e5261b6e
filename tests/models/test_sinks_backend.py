"""GPT-OSS's learned sinks through attndesk's attention backend: transformers hands them over as
``s_aux`` and the backend's one ``Scoring`` carries them into ``attend``; the weights and the
output equal transformers' own GPT-OSS eager attention."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attndesk.models.backend import attndesk_attention


class _Layer(nn.Module):
    """What both attention functions read from a GPT-OSS attention module."""

    def __init__(self, heads: int, kv_heads: int, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.sinks = nn.Parameter(torch.randn(heads, generator=gen) * 2)
        self.num_key_value_groups = heads // kv_heads
        self.training = False


@pytest.mark.parametrize("masked", [False, True])
def test_sinks_equal_transformers_gpt_oss_eager(masked):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 9, 8, generator=gen)
    k, v = torch.randn(2, 2, 9, 8, generator=gen), torch.randn(2, 2, 9, 8, generator=gen)
    module = _Layer(4, 2, seed=1)
    mask = None
    if masked:  # a causal float mask, as transformers builds it
        mask = torch.full((9, 9), float("-inf")).triu(1)[None, None].expand(2, 1, 9, 9)
    with torch.no_grad():
        want_out, want_w = _gpt_oss().eager_attention_forward(module, q, k, v, mask, scaling=0.35)
        out, w = attndesk_attention(module, q, k, v, mask, scaling=0.35, s_aux=module.sinks)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-6)
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-6)
    assert (w.sum(-1) < 1).all()


def _gpt_oss():
    """transformers' GPT-OSS modelling module, imported by the test that runs (not at collection,
    where every worker would pay for it)."""
    return pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
