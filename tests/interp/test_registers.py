"""Registers' shares of attention and the high-norm tokens, on hand-made weights and norms."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.errors import ConfigError
from attndesk.interp.registers import high_norm_tokens, register_shares

TOKENS = ["[CLS]", "[REG0]", "[REG1]", "(0,0)", "(0,1)", "(1,0)", "(1,1)"]


def _weights() -> np.ndarray:
    """2 layers, 2 heads, 7 tokens. Layer 0 head 0: every patch puts 0.6 on [REG1], 0.1 on
    [CLS], 0.3 on (1,1); layer 1 head 1: every row uniform; the rest: each row on itself."""
    w = np.tile(np.eye(7), (2, 2, 1, 1))
    w[0, 0, 3:] = 0.0
    w[0, 0, 3:, 2] = 0.6
    w[0, 0, 3:, 0] = 0.1
    w[0, 0, 3:, 6] = 0.3
    w[1, 1] = 1 / 7
    return w


def test_register_shares_read_the_patch_queries():
    shares = register_shares(_weights(), TOKENS)
    assert shares.register_names == ["[REG0]", "[REG1]"]
    assert shares.registers.shape == (2, 2, 2)
    np.testing.assert_allclose(shares.registers[0, 0], [0.0, 0.6])
    np.testing.assert_allclose(shares.registers[1, 1], [1 / 7, 1 / 7])
    np.testing.assert_allclose(shares.registers[0, 1], [0.0, 0.0])  # each patch on itself
    assert shares.cls[0, 0] == pytest.approx(0.1) and shares.cls[1, 1] == pytest.approx(1 / 7)
    assert shares.top_patches[0, 0] == pytest.approx(0.3)
    assert shares.top_patches[0, 1] == pytest.approx(0.25)  # on itself: each patch key gets 1/4 on average
    assert register_shares(_weights(), TOKENS, top=2).top_patches[1, 1] == pytest.approx(2 / 7)


def test_a_model_without_registers_has_none():
    w = _weights()[:, :, [0, 3, 4, 5, 6]][:, :, :, [0, 3, 4, 5, 6]]
    shares = register_shares(w, [TOKENS[i] for i in (0, 3, 4, 5, 6)])
    assert shares.registers.shape == (2, 2, 0) and shares.register_names == []


def test_high_norm_tokens_stand_out_from_the_median_patch():
    norms = np.array([[1.0, 9.0, 1.0, 2.0, 2.0, 2.0, 7.0], [1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0]])
    found = high_norm_tokens(norms, TOKENS)
    np.testing.assert_allclose(found.median, [2.0, 3.0])
    assert [(layer, name) for layer, name, _, _ in found.outliers] == [(0, "[REG0]"), (0, "(1,1)")]
    assert found.outliers[0][2:] == (9.0, 4.5)
    assert high_norm_tokens(norms, TOKENS, ratio=4).outliers == [(0, "[REG0]", 9.0, 4.5)]


def test_bad_shapes_are_refused():
    with pytest.raises(ConfigError, match="7 tokens"):
        register_shares(np.zeros((1, 1, 6, 6)), TOKENS)
    with pytest.raises(ConfigError, match="no patch tokens"):
        register_shares(np.zeros((1, 1, 2, 2)), ["[CLS]", "[REG0]"])
    with pytest.raises(ConfigError, match="7 tokens"):
        high_norm_tokens(np.zeros((2, 6)), TOKENS)
    with pytest.raises(ConfigError, match="exceed 1"):
        high_norm_tokens(np.ones((2, 7)), TOKENS, ratio=1.0)


def test_vision_registers_on_a_run_match_transformers_eager_attention(tmp_path):
    torch = pytest.importorskip("torch")
    from attndesk.interp.registers import vision_registers
    from attndesk.models import load_pretrained, run_pretrained
    from attndesk.train.images.data import shapes
    from attndesk.train.images.models import VisionSpec, build_model, image_processor, pixel_values
    from attndesk.train.images.presets import save_vision_run
    from attndesk.train.images.trainer import VisionRun

    spec = VisionSpec(task="shapes", arch="dinov2-registers", registers=2, hidden=16, mlp=32, heads=2)
    torch.manual_seed(0)
    model = build_model(spec, ("a", "b"))
    processor = image_processor(spec)
    save_vision_run(VisionRun(spec, model, processor, [{"epoch": 1, "loss": 1.0, "test_accuracy": 0.5}]), tmp_path)
    image = shapes("test", 1).images[0]
    shares, high = vision_registers(run_pretrained(load_pretrained(tmp_path), image))
    with torch.no_grad():  # the reference: transformers' own eager attention and hidden states
        out = model(
            pixel_values=pixel_values(processor, image[None]), output_attentions=True, output_hidden_states=True
        )
    eager = torch.stack([a[0] for a in out.attentions]).double().numpy()  # [layers, heads, N, N]
    np.testing.assert_allclose(shares.registers, eager[:, :, 3:, 1:3].mean(axis=2), atol=1e-6)
    np.testing.assert_allclose(shares.cls, eager[:, :, 3:, 0].mean(axis=2), atol=1e-6)
    norms = torch.stack([h[0].norm(dim=-1) for h in out.hidden_states[1:]]).double().numpy()
    np.testing.assert_allclose(high.median, np.median(norms[:, 3:], axis=1), rtol=1e-5)
