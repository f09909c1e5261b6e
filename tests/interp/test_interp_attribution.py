"""Input attributions against autograd on transformers' eager model and against captum's
IntegratedGradients / InputXGradient on the same embedding-level function."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pretrained_models import eager

from attndesk.errors import ConfigError
from attndesk.interp import (
    attention_x_gradient,
    gradient_x_input,
    integrated_gradients,
    integrated_gradients_report,
    step_attributions,
)
from attndesk.models import encode, load_pretrained

TEXT, TARGET = "the cat sat on the mat", "dog"


def eager_function(folder, model):
    ref = eager(folder)
    ids = torch.tensor([encode(model, TEXT).ids])
    target = model.tokenizer.convert_tokens_to_ids(TARGET)
    embeds = ref.get_input_embeddings()(ids).detach()

    def f(e):
        return ref(inputs_embeds=e).logits[:, -1, target]

    return ref, ids, target, embeds, f


@pytest.mark.parametrize("name", ["gpt2", "llama-pad"])
def test_gradient_x_input_equals_eager_autograd_and_captum(folders, name):
    from captum.attr import InputXGradient

    model = load_pretrained(folders[name])
    ours = gradient_x_input(model, TEXT, TARGET)
    _, _, _, embeds, f = eager_function(folders[name], model)
    x = embeds.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(x).sum(), x)
    expected = (grad * embeds).sum(-1)[0].numpy()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5 * scale)
    captum = InputXGradient(f).attribute(embeds.clone()).sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(ours, captum, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("name", ["gpt2", "llama-pad"])
def test_integrated_gradients_complete_and_equal_captum(folders, name):
    from captum.attr import IntegratedGradients

    model = load_pretrained(folders[name])
    report = integrated_gradients_report(model, TEXT, TARGET, steps=64)
    assert report.baseline == "pad" and report.completeness_error < 0.05
    assert report.scores.sum() == pytest.approx(report.target_logit - report.baseline_logit, rel=0.05)
    np.testing.assert_allclose(integrated_gradients(model, TEXT, TARGET, steps=64), report.scores, rtol=1e-6)
    ref, _, _, embeds, f = eager_function(folders[name], model)
    pad = ref.get_input_embeddings()(torch.zeros_like(torch.tensor([encode(model, TEXT).ids]))).detach()
    captum, delta = IntegratedGradients(f).attribute(embeds, baselines=pad, n_steps=64, return_convergence_delta=True)
    expected = captum.sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(report.scores, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    # the same completeness error as captum's convergence delta says
    assert report.completeness_error == pytest.approx(
        abs(float(delta)) / abs(report.target_logit - report.baseline_logit), rel=0.05, abs=1e-4
    )


def test_a_tight_budget_and_progress_give_the_same_integral(folders):
    model = load_pretrained(folders["gpt2"])
    from attndesk.interp.attribution import gradient_pass_bytes

    seen: list[float] = []
    full = integrated_gradients_report(model, TEXT, TARGET, steps=16)
    tight = integrated_gradients_report(
        model,
        TEXT,
        TARGET,
        steps=16,
        progress=lambda f, m: seen.append(f),
        memory_budget=gradient_pass_bytes(model, 5, len(encode(model, TEXT).ids)),
    )
    assert len(seen) == 4 and seen[-1] == 1.0
    np.testing.assert_allclose(tight.scores, full.scores, rtol=1e-5, atol=1e-7)


def test_zero_and_zeroed_pad_baselines_warn(folders):
    model = load_pretrained(folders["llama"])
    with pytest.warns(UserWarning, match="degenerate"):
        report = integrated_gradients_report(model, TEXT, TARGET, steps=8, baseline="zero")
    assert report.notices and report.baseline == "zero"
    with pytest.warns(UserWarning, match="all zeros"):
        integrated_gradients_report(model, TEXT, TARGET, steps=8)


def test_attention_x_gradient_equals_eager_attentions_gradient(folders):
    model = load_pretrained(folders["gpt2"])
    ours = attention_x_gradient(model, TEXT, TARGET)
    ref, ids, target, _, _ = eager_function(folders["gpt2"], model)
    out = ref(input_ids=ids, output_attentions=True)
    grads = torch.autograd.grad(out.logits[0, -1, target], out.attentions)
    expected = np.stack([(a * g)[0, :, -1].detach().numpy() for a, g in zip(out.attentions, grads)])
    np.testing.assert_allclose(ours.per_head, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_allclose(ours.scores, expected.sum((0, 1)), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: gradient_x_input(m, TEXT, 10**6), "outside the model's vocabulary"),
        (lambda m: gradient_x_input(m, TEXT, "unbelievably"), "is 5 tokens"),
        (lambda m: integrated_gradients(m, TEXT, TARGET, steps=0), "1 to 4096 steps"),
        (lambda m: integrated_gradients_report(m, TEXT, TARGET, baseline=np.zeros(3)), "custom baseline"),
    ],
)
def test_bad_input_is_one_line(folders, call, message):
    with pytest.raises(ConfigError, match=message) as info:
        call(load_pretrained(folders["gpt2"]))
    assert "\n" not in str(info.value)


def test_an_encoder_has_no_target_logit(folders):
    with pytest.raises(ConfigError, match="encoder-only"):
        integrated_gradients(load_pretrained(folders["bert"]), TEXT, TARGET)


@pytest.mark.parametrize("name", ["gpt2", "llama-pad"])
def test_step_attributions_row_by_row_equal_each_prefix_by_eager_autograd_and_captum(folders, name):
    from captum.attr import InputXGradient, IntegratedGradients

    model = load_pretrained(folders[name])
    ref = eager(folders[name])
    ids = torch.tensor([encode(model, TEXT).ids])
    embeds = ref.get_input_embeddings()(ids).detach()
    length = ids.shape[1]
    gxi = step_attributions(model, TEXT, TARGET)
    targets = [*ids[0, 1:].tolist(), model.tokenizer.convert_tokens_to_ids(TARGET)]
    assert (
        gxi.scores.shape == (length, length)
        and len(gxi.targets) == length
        and gxi.sources == encode(model, TEXT).tokens
    )
    assert np.isnan(gxi.scores[np.triu_indices(length, 1)]).all()  # no source after its step
    logits = ref(inputs_embeds=embeds).logits[0].double()
    probs = torch.softmax(logits, -1)[torch.arange(length), targets].detach().numpy()
    np.testing.assert_allclose(gxi.probabilities, probs, rtol=1e-5)
    for t in (0, length // 2, length - 1):  # each step alone: the prefix 0..t and its own target
        prefix = embeds[:, : t + 1].clone()

        def f(e, t=t):
            return ref(inputs_embeds=e).logits[:, -1, targets[t]]

        expected = InputXGradient(f).attribute(prefix).sum(-1)[0].detach().numpy()
        scale = np.abs(expected).max()
        np.testing.assert_allclose(gxi.scores[t, : t + 1], expected, rtol=1e-4, atol=1e-5 * scale)
    ig = step_attributions(model, TEXT, TARGET, method="integrated_gradients", steps=16)
    t = length - 1  # the last step against captum on the whole text, the pad baseline as the report's
    pad = model.tokenizer.pad_token_id
    base = ref.get_input_embeddings()(torch.full_like(ids, pad)).detach()

    def last(e):
        return ref(inputs_embeds=e).logits[:, -1, targets[t]]

    expected = IntegratedGradients(last).attribute(embeds, base, n_steps=16, method="gausslegendre")
    expected = expected.sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(ig.scores[t], expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())
    report = integrated_gradients_report(model, TEXT, TARGET, steps=16)
    np.testing.assert_allclose(ig.scores[t], report.scores, rtol=1e-4, atol=1e-6 * np.abs(report.scores).max())


def test_step_attributions_refuse_what_they_cannot_read(folders):
    with pytest.raises(ConfigError, match="decoder-only"):
        step_attributions(load_pretrained(folders["t5"]), TEXT)
    with pytest.raises(ConfigError, match="step attributions take"):
        step_attributions(load_pretrained(folders["gpt2"]), TEXT, method="attention")
