"""Image maps against the reference formulas written out here on the same tensors: rollout and
gradient rollout as vit-explain's code computes them, attention x gradient as Chefer et al.'s
ViT example does, integrated gradients as captum's on transformers' eager model; the gradients themselves
against transformers' eager attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.interp.flow import attention_flow
from attndesk.interp.image_maps import (
    attention_gradients,
    chefer_map,
    default_query,
    flow_map,
    grad_rollout_map,
    head_maps,
    integrated_gradients_map,
    probe_maps,
    rollout_map,
)
from attndesk.models import run_pretrained
from attndesk.models.vision import pixel_values, read_image

TOL = 1e-6


def vit_explain_rollout(attentions, discard_ratio, head_fusion, keep_first=True, specials=1):
    """vit-explain's rollout / grad_rollout loop body in torch (float64), the class token's row."""
    result = torch.eye(attentions[0].size(-1), dtype=torch.float64)
    for attention in attentions:  # [1, H, N, N]
        if head_fusion == "mean":
            fused = attention.mean(axis=1)
        elif head_fusion == "max":
            fused = attention.max(axis=1)[0]
        else:
            fused = attention.min(axis=1)[0]
        flat = fused.view(fused.size(0), -1)
        _, indices = flat.topk(int(flat.size(-1) * discard_ratio), -1, False)
        if keep_first:
            indices = indices[indices != 0]
        flat[0, indices] = 0
        eye = torch.eye(fused.size(-1), dtype=torch.float64)
        a = (fused + 1.0 * eye) / 2
        a = a / a.sum(dim=-1)
        result = torch.matmul(a, result)
    mask = result[0, 0, specials:]
    return (mask / mask.max()).numpy()


@pytest.fixture(scope="module")
def vit(vision, image):
    model, reference, _ = vision("deit")  # two special tokens: the patches start at 2
    return model, reference, run_pretrained(model, image), attention_gradients(model, image)


def test_head_maps_are_the_query_rows(vit):
    _, _, result, _ = vit
    maps = head_maps(result, 1, query=1)  # from [DIST]
    rows, cols = result.grid
    np.testing.assert_array_equal(maps, result.weights[1, :, 1, 2:].reshape(-1, rows, cols))
    mean = head_maps(result, 0, query=None)
    np.testing.assert_allclose(mean, result.weights[0, :, 2:, 2:].mean(axis=1).reshape(-1, rows, cols), atol=1e-7)


@pytest.mark.parametrize(("fusion", "discard"), [("mean", 0.0), ("max", 0.5), ("min", 0.3)])
def test_rollout_is_vit_explains(vit, fusion, discard):
    _, _, result, _ = vit
    attentions = [torch.from_numpy(layer[None].astype(np.float64)) for layer in result.weights]
    expected = vit_explain_rollout(attentions, discard, fusion, specials=2)
    ours = rollout_map(result, head_fusion=fusion, discard_ratio=discard)
    assert ours.shape == result.grid
    np.testing.assert_allclose(ours.ravel(), expected, atol=1e-9)


def test_gradients_equal_transformers_eager(vit, image):
    model, reference, _, grads = vit
    pixels = pixel_values(model, read_image(image))
    out = reference(pixel_values=pixels, output_attentions=True)
    for attention in out.attentions:
        attention.retain_grad()
    out.logits[0, grads.target].backward()
    assert grads.target == int(out.logits[0].argmax())
    for n, attention in enumerate(out.attentions):
        np.testing.assert_allclose(grads.weights[n], attention[0].detach().numpy(), atol=TOL, err_msg=f"layer {n}")
        np.testing.assert_allclose(grads.grads[n], attention.grad[0].numpy(), atol=TOL, err_msg=f"layer {n}")


def test_grad_rollout_is_vit_explains(vit):
    _, _, result, grads = vit
    attentions = [torch.from_numpy(a[None]) for a in grads.weights]
    gradients = [torch.from_numpy(g[None]) for g in grads.grads]
    fused = [torch.clamp((a * g).mean(axis=1, keepdim=True), min=0) for a, g in zip(attentions, gradients, strict=True)]
    expected = vit_explain_rollout(fused, 0.4, "mean", keep_first=False, specials=2)
    np.testing.assert_allclose(grad_rollout_map(result, grads, discard_ratio=0.4).ravel(), expected, atol=1e-9)


def test_chefer_is_the_generic_rule(vit):
    _, _, result, grads = vit
    relevance = torch.eye(result.length, dtype=torch.float64)
    for attention, grad in zip(grads.weights, grads.grads, strict=True):
        cam = (torch.from_numpy(grad) * torch.from_numpy(attention)).clamp(min=0).mean(dim=0)
        relevance += torch.matmul(cam, relevance)
    expected = relevance[0, 2:].numpy()
    np.testing.assert_allclose(chefer_map(result, grads).ravel(), expected, atol=1e-12)


def test_flow_map_is_the_flow_into_the_query(vit):
    _, _, result, _ = vit
    flow = attention_flow(result.weights, rows=[0]).flow[0, 2:]
    np.testing.assert_allclose(flow_map(result).ravel(), flow, atol=1e-12)
    assert flow.min() >= 0 and flow.max() > 0


def test_integrated_gradients_equal_captums_on_the_eager_model(vit, image):
    from captum.attr import IntegratedGradients

    model, reference, _, _ = vit
    got = integrated_gradients_map(model, image, steps=8)
    x = pixel_values(model, read_image(image))
    x0 = pixel_values(model, read_image(np.zeros_like(image)))
    captum = IntegratedGradients(lambda p: reference(pixel_values=p).logits[:, got.target])
    pixels = captum.attribute(x, baselines=x0, n_steps=8, method="gausslegendre", internal_batch_size=8)
    expected = pixels[0].sum(0).detach().double().numpy().reshape(4, 8, 4, 8).sum(axis=(1, 3))
    np.testing.assert_allclose(got.map, expected, atol=1e-6)
    assert got.completeness_error < 0.05


def test_models_without_a_class_token(vision, image):
    model, _, _ = vision("siglip_vision_model")
    result = run_pretrained(model, image)
    assert default_query(result) is None
    probe = probe_maps(model, result)  # the pooling head's probe, against nn.MultiheadAttention's own weights
    _, reference, _ = vision("siglip_vision_model")
    with torch.inference_mode():
        last = reference(pixel_values=pixel_values(model, read_image(image))).last_hidden_state
        head = reference.vision_model.head if hasattr(reference, "vision_model") else reference.head
        expected = head.attention(head.probe, last, last, need_weights=True, average_attn_weights=False)[1]
    np.testing.assert_allclose(probe.reshape(4, -1), expected[0, :, 0].numpy(), atol=TOL)
    assert probe.shape == (4, *result.grid)
    grads = attention_gradients(model, image)
    assert grads.target is None and grads.label == "pooled output length"
    for got in (rollout_map(result, query=None), chefer_map(result, grads, query=None)):
        assert got.shape == result.grid and np.isfinite(got).all()
    swin, _, _ = vision("swin")
    windows = run_pretrained(swin, image)
    assert head_maps(windows, 0, query=None).shape == (2, 8, 8)
    with pytest.raises(ConfigError, match="Swin's token grid changes"):
        rollout_map(windows, query=None)
    assert integrated_gradients_map(swin, image, steps=2).map.shape == (8, 8)
