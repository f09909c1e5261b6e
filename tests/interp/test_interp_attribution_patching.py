"""Attribution patching: (clean - corrupt) . gradient at the corrupted run, against the same
product computed with plain hooks and autograd on transformers' eager model; and its agreement
with exact patching."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pretrained_models import eager

from attndesk.interp import activation_patching, attribution_patching
from attndesk.models import encode, load_pretrained

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the rug"


def test_head_estimates_equal_eager_autograd_and_agree_with_exact_patching(folders):
    from scipy.stats import spearmanr  # here, not at collection (every test worker collects this module)

    model = load_pretrained(folders["gpt2"])
    sites = ("head", "head_position", "attn")
    exact = activation_patching(model, CLEAN, CORRUPT, "cat", "dog", sites=sites)
    approx = attribution_patching(model, CLEAN, CORRUPT, "cat", "dog", sites=sites, exact=exact)
    ref = eager(folders["gpt2"])
    answer, wrong = (model.tokenizer.convert_tokens_to_ids(t) for t in ("cat", "dog"))
    clean, corrupt = (torch.tensor([encode(model, t).ids]) for t in (CLEAN, CORRUPT))
    projections = [block.attn.c_proj for block in ref.transformer.h]
    saved: dict = {}
    handles = [
        p.register_forward_pre_hook(lambda m, a, n=n: saved.__setitem__(n, a[0])) for n, p in enumerate(projections)
    ]
    with torch.no_grad():
        ref(clean)
    z_clean = dict(saved)
    logits = ref(corrupt).logits[0, -1]
    grads = torch.autograd.grad(logits[answer] - logits[wrong], [saved[n] for n in range(len(projections))])
    for h in handles:
        h.remove()
    heads, d = model.num_heads, z_clean[0].shape[-1] // model.num_heads
    expected = np.array(
        [
            [float(((z_clean[n] - saved[n].detach()) * grads[n])[..., h * d : (h + 1) * d].sum()) for h in range(heads)]
            for n in range(len(projections))
        ]
    )
    expected /= exact.clean_metric - exact.corrupt_metric
    np.testing.assert_allclose(approx.estimates["head"], expected, rtol=1e-4, atol=1e-6)
    # per position, the head estimates sum to the whole-sequence estimate (the product is linear)
    np.testing.assert_allclose(
        approx.estimates["head_position"].sum(-1), approx.estimates["head"], rtol=1e-5, atol=1e-8
    )
    for site in sites:
        rho = spearmanr(approx.estimates[site].ravel(), exact.results[site].effects.ravel()).statistic
        assert approx.agreement[site] == pytest.approx(rho)
    assert approx.agreement["head"] > 0.9  # on this tiny model the first-order estimate ranks the heads alike
