"""The logit lens and direct logit attribution against transformers' eager GPT-2 (hidden states,
final norm and LM head applied by hand), and their decomposition checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from pretrained_models import eager

from attndesk.errors import ConfigError
from attndesk.interp import direct_logit_attribution, logit_lens, patch_heads
from attndesk.models import encode, load_pretrained

TEXT = "the cat sat on the mat"


def test_logit_lens_equals_eager_hidden_states_through_ln_f_and_the_head(folders):
    model = load_pretrained(folders["gpt2"])
    lens = logit_lens(model, TEXT, k=3, answer="cat")
    ref = eager(folders["gpt2"])
    ids = torch.tensor([encode(model, TEXT).ids])
    with torch.no_grad():
        out = ref(ids, output_hidden_states=True)
        # hidden_states[n] enters layer n; the last one is already through ln_f: the model's logits
        levels = [ref.lm_head(ref.transformer.ln_f(h[0])) for h in out.hidden_states[:-1]] + [out.logits[0]]
    for n, logits in enumerate(levels):
        probs = torch.softmax(logits, -1)
        top = torch.topk(probs, 3)
        np.testing.assert_array_equal(lens.top_ids[n], top.indices.numpy())
        np.testing.assert_allclose(lens.top_probs[n], top.values.numpy(), rtol=1e-4)
        cat = model.tokenizer.convert_tokens_to_ids("cat")
        np.testing.assert_allclose(lens.answer_prob[n], probs[:, cat].numpy(), rtol=1e-4)
    assert lens.labels == ["layer 0 in", "layer 1 in", "output"] and lens.top_tokens[0][0][
        0
    ] == model.tokenizer.convert_ids_to_tokens(int(lens.top_ids[0, 0, 0]))


def test_direct_logit_attribution_equals_eager_head_outputs(folders):
    model = load_pretrained(folders["gpt2"])
    dla = direct_logit_attribution(model, TEXT, "cat", "dog")
    ref = eager(folders["gpt2"])
    ids = torch.tensor([encode(model, TEXT).ids])
    saved: dict = {}
    handles = [
        b.attn.c_proj.register_forward_pre_hook(lambda m, a, n=n: saved.__setitem__(n, a[0][0, -1]))
        for n, b in enumerate(ref.transformer.h)
    ]
    with torch.no_grad():
        final = ref(ids, output_hidden_states=True)
    for h in handles:
        h.remove()
    # the final residual before ln_f: ln_f's input, recovered from the last block
    x = _last_block_output(ref, ids)
    ln = ref.transformer.ln_f
    std = torch.sqrt(x.var(unbiased=False) + ln.eps)
    cat, dog = (model.tokenizer.convert_tokens_to_ids(t) for t in ("cat", "dog"))
    u = ref.lm_head.weight[cat] - ref.lm_head.weight[dog]
    heads, d = model.num_heads, saved[0].shape[-1] // model.num_heads
    expected = np.zeros((model.num_layers, heads))
    for n, block in enumerate(ref.transformer.h):  # under no_grad: the reference is plain arithmetic
        w = block.attn.c_proj.weight  # Conv1D: [in, out]
        for h in range(heads):
            with torch.no_grad():
                out = saved[n][h * d : (h + 1) * d] @ w[h * d : (h + 1) * d]
                expected[n, h] = float(((out - out.mean()) / std * ln.weight) @ u)
    np.testing.assert_allclose(dla.heads["self"], expected, rtol=1e-4, atol=1e-6)
    logits = final.logits[0, -1]
    assert dla.total == pytest.approx(float(logits[cat] - logits[dog]), rel=1e-5)
    assert dla.error < 1e-4 and dla.reconstructed == pytest.approx(dla.total, rel=1e-4) and not dla.notices


def _last_block_output(ref, ids):
    saved = {}
    handle = ref.transformer.h[-1].register_forward_hook(
        lambda m, a, o: saved.update(x=(o[0] if isinstance(o, tuple) else o))
    )
    with torch.no_grad():
        ref(ids)
    handle.remove()
    return saved["x"][0, -1]


@pytest.mark.parametrize("name", ["llama", "t5"])
def test_other_families_decompose_exactly(folders, name):
    model = load_pretrained(folders[name])
    dla = direct_logit_attribution(model, TEXT, "cat")
    assert dla.error < 1e-4 and not dla.notices
    assert set(dla.heads) == ({"decoder", "cross"} if name == "t5" else {"self"})


def test_post_norm_blocks_get_a_notice(folders):
    dla = direct_logit_attribution(load_pretrained(folders["gemma2"]), TEXT, "cat", "dog")
    assert dla.error > 1e-3 and "approximate" in dla.notices[0]


def test_lens_and_dla_refuse_what_they_cannot_read(folders):
    with pytest.raises(ConfigError, match="encoder-only"):
        logit_lens(load_pretrained(folders["bert"]), TEXT)
    gpt2 = load_pretrained(folders["gpt2"])
    headless = dataclasses.replace(gpt2, model=gpt2.model.transformer)  # the decoder stack without its LM head
    with pytest.raises(ConfigError, match="no LM head"):
        direct_logit_attribution(headless, TEXT, "cat")
    with pytest.raises(ConfigError, match="no LM head"):
        patch_heads(headless, TEXT, "the dog sat on the rug", "cat", "dog")
    with pytest.raises(ConfigError, match="outside the model's vocabulary"):
        logit_lens(gpt2, TEXT, answer=30522)
