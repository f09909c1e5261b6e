"""Checkpoints saved without their LM head (a bare ``LlamaModel``, ``Qwen2Model``, ...): every
layer's attention equals transformers' eager attention of the same base model; statistics,
rollout and A/B diffs work; generation, the next-token distribution and an ablation's KL are
off with one line that says why; any other missing weight is still refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pretrained_models import build_bare
from safetensors.torch import load_file, save_file

from attndesk.errors import NO_LM_HEAD, ConfigError, NoLMHead
from attndesk.models import Generator, clear_cache, load_pretrained, read_spec, run_pretrained
from attndesk.models.loader import transformers_offline
from attndesk.teaching.diff import diff_arrays
from attndesk.teaching.rollout import attention_rollout
from attndesk.teaching.statistics import head_statistics

TEXT = "the cat sat on the mat"
BARE = ("llama", "qwen2", "phi3", "gpt_neox", "olmo2", "bart")


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    transformers_offline()
    root = tmp_path_factory.mktemp("bare")
    folders = {name: build_bare(name, root / name) for name in BARE}
    yield folders
    for folder in folders.values():
        clear_cache(folder)


@pytest.mark.parametrize("name", BARE)
def test_a_bare_base_model_opens_and_its_attention_equals_eager(bare, name):
    transformers = transformers_offline()
    model = load_pretrained(bare[name])
    assert model.headless and model.head_params == 0
    assert any(NO_LM_HEAD in notice for notice in model.notices)
    target = "a dog" if model.family == "encoder-decoder" else None
    run = run_pretrained(model, TEXT, target=target)
    reference = transformers.AutoModel.from_pretrained(bare[name], attn_implementation="eager").eval()
    extra = {} if target is None else {"decoder_input_ids": torch.from_numpy(run.target_ids)[None]}
    with torch.inference_mode():
        out = reference(input_ids=torch.from_numpy(run.token_ids)[None], output_attentions=True, **extra)
    theirs = out.encoder_attentions if target else out.attentions
    np.testing.assert_allclose(run.weights, np.stack([a[0].numpy() for a in theirs]), atol=1e-5, rtol=0)
    assert run.next_token is None and run.next_token_off and NO_LM_HEAD in run.next_token_off


def test_statistics_rollout_and_diff_work_and_ablation_says_why_no_kl(bare):
    model = load_pretrained(bare["llama"])
    normal = run_pretrained(model, TEXT)
    ablated = run_pretrained(model, TEXT, ablate=[(0, 1)])
    assert ablated.altered and ablated.kl_to_normal is None and ablated.normal_next is None
    assert NO_LM_HEAD in ablated.next_token_off
    np.testing.assert_array_equal(
        ablated.weights[0, 1], normal.weights[0, 1]
    )  # the weights stay; the context is zeroed
    assert not np.allclose(ablated.weights[1], normal.weights[1])  # a later layer sees the change
    stats = head_statistics(normal.weights[0])
    assert len(stats) == model.num_heads and all(np.isfinite(s.entropy) for s in stats)
    rollout = attention_rollout(normal.weights)
    np.testing.assert_allclose(rollout.sum(axis=-1), 1.0, atol=1e-5)
    assert diff_arrays(normal.weights, ablated.weights).max_abs > 0


def test_generation_is_refused_with_the_reason(bare):
    for name in ("llama", "bart"):
        with pytest.raises(NoLMHead, match=f"generation off: {NO_LM_HEAD}"):
            Generator(load_pretrained(bare[name]), TEXT)


def test_a_missing_weight_other_than_the_head_is_still_refused(tmp_path):
    folder = build_bare("llama", tmp_path / "broken")
    tensors = load_file(folder / "model.safetensors")
    del tensors["layers.1.self_attn.q_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match=r"weight model\.layers\.1\.self_attn\.q_proj\.weight is missing"):
        load_pretrained(folder)


def test_a_bare_model_of_a_type_outside_the_table_is_still_a_decoder(tmp_path):
    """config.json names only ``GraniteModel``: transformers' auto mappings say granite is a
    causal LM (with no masked-LM variant), so it opens as a decoder, not as an encoder."""
    transformers = transformers_offline()
    folder = build_bare("llama", tmp_path / "granite", model_type="granite")
    assert read_spec(folder).family == "decoder" and not read_spec(folder).tested
    model = load_pretrained(folder)
    try:
        assert model.family == "decoder" and model.headless
        run = run_pretrained(model, TEXT)
        assert run.mask is not None and not run.mask[0, 1]  # causal: the first token sees only itself
        reference = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
        with torch.inference_mode():
            out = reference(input_ids=torch.from_numpy(run.token_ids)[None], output_attentions=True)
        np.testing.assert_allclose(run.weights, np.stack([a[0].numpy() for a in out.attentions]), atol=1e-5, rtol=0)
    finally:
        clear_cache(folder)
