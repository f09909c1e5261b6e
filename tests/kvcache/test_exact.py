"""The compressed run is exact: budget = everything is the full run bit for bit, and a compressed
run's logits equal transformers' own eager attention given the same per-head masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.errors import Cancelled
from attndesk.jobs import JobContext
from attndesk.kvcache import POLICIES, simulate

IDS = [(11 * i + 5) % 29000 + 1000 for i in range(20)]
OPTIONS = {"snapkv": {"window": 4}, "pyramidkv": {"window": 4}, "adakv": {"window": 4}}


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_budget_of_everything_is_the_full_run(llama, toy, name):
    for model, ids in ((llama, IDS), (toy, [i % 30 + 1 for i in IDS])):
        run = simulate(model, ids, name, len(ids) + 3, generate=3, prefill=12, **OPTIONS.get(name, {}))
        n = run.rows
        assert (run.keep == np.tril(np.ones((n, n), bool))).all()
        assert np.array_equal(run.logits, run.full_logits)
        assert (run.kl == 0).all() and (run.error == 0).all()


def test_the_full_logits_are_the_models_own(llama):
    run = simulate(llama, IDS, "streaming", 8)
    with torch.inference_mode():
        plain = llama.model(input_ids=torch.tensor([IDS]), use_cache=False).logits[0].numpy()
    assert np.array_equal(run.full_logits, plain)
    assert run.kl.dtype == np.float64 and run.kl[8:].min() > 0  # rows past the budget are compressed


_MASKS: dict[int, torch.Tensor] = {}


def _masked_eager(module, query, key, value, attention_mask, **kwargs):
    """transformers' eager attention, the per-head keep mask [H, N, N] of this layer as an additive mask."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    keep = _MASKS[module.layer_idx][None, :, -query.shape[2] :, : key.shape[2]]
    additive = torch.zeros(keep.shape, dtype=query.dtype).masked_fill(~keep, torch.finfo(query.dtype).min)
    return eager_attention_forward(module, query, key, value, additive, **kwargs)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("name", ["streaming", "h2o", "snapkv", "adakv", "duo"])
def test_compressed_logits_equal_transformers_eager_with_the_same_masks(kv_folders, request, family, name):
    from pretrained_models import eager
    from transformers import AttentionInterface

    AttentionInterface.register("kv_eager", _masked_eager)
    model = request.getfixturevalue(family)
    run = simulate(model, IDS, name, 7, generate=4, prefill=14, **OPTIONS.get(name, {}))
    reference = eager(kv_folders[family])
    reference.set_attn_implementation("kv_eager")
    groups = reference.config.num_attention_heads // reference.config.num_key_value_heads
    for layer in range(reference.config.num_hidden_layers):
        _MASKS[layer] = torch.from_numpy(run.keep[layer]).repeat_interleave(groups, dim=0)
    with torch.no_grad():
        logits = reference(input_ids=torch.from_numpy(run.ids)[None], use_cache=False).logits[0].numpy()
    assert np.abs(logits - run.logits).max() < 1e-5
    assert np.abs(logits - run.full_logits).max() > 1e-3  # the masks change the output: the check has teeth


def test_progress_and_cancel(llama):
    seen = []
    ctx = JobContext(lambda fraction, message: seen.append(fraction))
    simulate(llama, IDS, "h2o", 6, generate=2, prefill=14, ctx=ctx)
    assert seen[-1] == 1.0 and seen == sorted(seen)
    ctx = JobContext()
    ctx.cancel()
    with pytest.raises(Cancelled):
        simulate(llama, IDS, "h2o", 6, generate=2, ctx=ctx)


@pytest.mark.parametrize("which", ["llama", "toy"])
def test_the_cache_stepper_gives_the_full_prefix_rows(request, which):
    from attndesk.kvcache.model import Stepper, kv_model

    model = request.getfixturevalue(which)
    ids = IDS if which == "llama" else [i % 30 + 1 for i in IDS]
    kvm = kv_model(model)
    run = simulate(model, ids, "tova", 6, prefill=12)
    cached, plain = kvm.stepper(kvm.causal_pass(ids[:12]), 11), Stepper(kvm)
    assert cached.resume is not None and plain.resume is None
    for i in range(11, len(ids)):
        (a_logits, a_weights), (b_logits, b_weights) = cached.row(ids, i, run.keep), plain.row(ids, i, run.keep)
        assert np.abs(a_logits - b_logits).max() < 1e-5 and np.abs(a_weights - b_weights).max() < 1e-6
        groups = kvm.heads // kvm.kv_heads
        assert np.array_equal(a_weights > 0, run.keep[:, :, i, : i + 1].repeat(groups, axis=1))  # the mask it saw
