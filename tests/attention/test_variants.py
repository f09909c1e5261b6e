"""The modern variants against independent references: grouped-query heads (repeated K/V heads,
torch's SDPA with enable_gqa), RoPE (the complex-number rotation, transformers' LLaMA rotary),
ALiBi (a hand-built bias, transformers' BLOOM slopes and bias), sliding windows (a banded mask),
soft-capping (transformers' Gemma 2 eager attention); and the config's explanations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attndesk.attention import kernel as core
from attndesk.attention.alibi import alibi_bias, alibi_slopes
from attndesk.attention.rope import apply_rope, rope, rope_angles, rope_cos_sin, rope_relative_scores
from attndesk.core import AttentionConfig, ConfigError, ConfigTypeError, MultiHeadAttention, run_attention

TEXT = "the cat sat on the mat because it was tired and the dog barked at it"


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes,message",
    [
        (
            dict(num_heads=8, kv_heads=3),
            r"3 K/V heads cannot be shared evenly by 8 query heads; valid K/V head counts: 1, 2, 4, 8",
        ),
        (dict(num_heads=6, embed_dim=48, kv_heads=4), r"valid K/V head counts: 1, 2, 3, 6"),
        (dict(kv_heads=0), r"kv_heads must be a positive whole number, got 0"),
        (dict(kv_heads=True), r"kv_heads must be a positive whole number, got True \(bool\)"),
        (dict(num_heads=1, kv_heads=2), r"valid K/V head counts: 1"),
        (dict(window=0), r"window must be a whole number of tokens >= 1 \(1 = each query sees only itself\) or None"),
        (dict(window=2.5), r"window must be a positive whole number, got 2.5 \(float\)"),
        (dict(softcap=0.0), r"softcap must be a positive finite number"),
        (dict(softcap=-3), r"softcap must be a positive finite number"),
        (dict(softcap=float("inf")), r"softcap must be a positive finite number"),
        (dict(softcap=float("nan")), r"softcap must be a positive finite number"),
        (dict(position="learned"), r"unknown position 'learned'; choose one of: sinusoidal, rope, alibi, none"),
        (
            dict(position="rope", embed_dim=20, num_heads=4),
            r"head dimension must be even, got d_k = 5.*even d_k: 2, 5, 10",
        ),
        (dict(position="rope", num_heads=1, hidden_dim=7), r"choose an even hidden_dim \(got 7\)"),
    ],
)
def test_bad_variants_are_explained(changes, message):
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(**changes).validate()


def test_good_variants_validate_and_round_trip():
    cfg = AttentionConfig(num_heads=8, kv_heads=2, position="alibi", window=16, softcap=30.0).validate()
    assert cfg.num_kv_heads == 2 and AttentionConfig().num_kv_heads == 4
    assert AttentionConfig.from_dict(cfg.to_dict()) == cfg
    assert {"kv_heads", "position", "window", "softcap"} <= set(cfg.to_dict()) and "positional" not in cfg.to_dict()


def test_the_old_positional_flag_still_loads():
    assert AttentionConfig.from_dict({"positional": True}).position == "sinusoidal"
    assert AttentionConfig.from_dict({"positional": False}).position == "none"
    assert AttentionConfig.from_dict({"positional": False, "position": "none"}).position == "none"
    assert not AttentionConfig(position="rope").positional and AttentionConfig().positional
    with pytest.raises(ConfigError, match="contradicts"):
        AttentionConfig.from_dict({"positional": False, "position": "sinusoidal"})
    with pytest.raises(ConfigTypeError, match=r"positional must be true or false, got 1 \(int\)"):
        AttentionConfig.from_dict({"positional": 1})


def test_cross_attention_refuses_distances_between_two_texts_but_takes_rope():
    with pytest.raises(ConfigError, match="sliding window measures the distance"):
        run_attention(AttentionConfig(window=3), "where is it", key_text=TEXT)
    with pytest.raises(ConfigError, match="ALiBi penalises the distance"):
        run_attention(AttentionConfig(position="alibi"), "where is it", key_text=TEXT)
    result = run_attention(AttentionConfig(position="rope", kv_heads=2), "where is it", key_text=TEXT)
    assert result.weights.shape == (4, 3, 16)


# --- grouped-query heads ----------------------------------------------------------------------


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_gqa_run_equals_mha_with_repeated_kv_heads_and_torch_sdpa(kv):
    cfg = AttentionConfig(embed_dim=32, num_heads=4, kv_heads=kv, mask="padding+causal", pad_to=18, dtype="float64")
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    inter = result.intermediates
    assert inter.q.shape == (4, 18, 8) and inter.k.shape == (kv, 18, 8) and inter.v.shape == (kv, 18, 8)
    q, k, v = (torch.from_numpy(x).double() for x in (inter.q, inter.k, inter.v))
    k_rep, v_rep = k.repeat_interleave(4 // kv, 0), v.repeat_interleave(4 // kv, 0)  # head h reads h // G
    mask = torch.from_numpy(np.ascontiguousarray(result.mask))
    want = torch.softmax((q @ k_rep.transpose(-1, -2) / math.sqrt(8)).masked_fill(~mask, float("-inf")), -1)
    np.testing.assert_allclose(result.weights, want.numpy(), atol=1e-6)
    np.testing.assert_allclose(inter.context, (want @ v_rep).numpy(), atol=1e-6)
    sdpa = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, enable_gqa=True)[0]
    np.testing.assert_allclose(inter.context, sdpa.numpy(), atol=1e-6)


def test_gqa_shrinks_the_k_and_v_projections_only():
    layer = MultiHeadAttention(64, 8, kv_heads=2)
    assert layer.q_proj.weight.shape == (64, 64) and layer.out_proj.weight.shape == (64, 64)
    assert layer.k_proj.weight.shape == (16, 64) and layer.v_proj.weight.shape == (16, 64)
    with pytest.raises(ValueError, match="do not divide"):
        MultiHeadAttention(64, 8, kv_heads=3)


@pytest.mark.parametrize("fast", [True, False])
def test_gqa_layer_matches_sdpa_on_both_paths(fast, monkeypatch):
    monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", 0 if fast else 10**12)
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 8, kv_heads=2).double().eval()
    x = torch.randn(2, 13, 32, dtype=torch.float64)
    keep = torch.ones(2, 13, dtype=torch.bool)
    keep[1, -4:] = False
    with torch.inference_mode():
        out, w = layer(x, mask=keep[:, None, None, :])
        q = layer.q_proj(x).view(2, 13, 8, 4).transpose(1, 2)
        k, v = (p(x).view(2, 13, 2, 4).transpose(1, 2) for p in (layer.k_proj, layer.v_proj))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], enable_gqa=True)
        want = layer.out_proj(ctx.transpose(1, 2).reshape(2, 13, 32))
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    assert w.shape == (2, 8, 13, 13) and (w[1, :, :, -4:] == 0).all()


# --- RoPE --------------------------------------------------------------------------------------


def test_rope_equals_the_complex_rotation():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, 16, generator=gen, dtype=torch.float64)  # [H, L, d]
    got = rope(x)
    # rotate_half pairs dimension i with i + d/2: z = x_i + i x_{i+d/2} turns by m theta_i
    theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    z = torch.complex(x[..., :8], x[..., 8:]) * torch.polar(
        torch.ones(40, 8, dtype=torch.float64), torch.arange(40, dtype=torch.float64)[:, None] * theta
    )
    torch.testing.assert_close(got, torch.cat([z.real, z.imag], -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths


def test_rope_matches_transformers_llama_rotary():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=128, rope_theta=10000.0)
    rotary = LlamaRotaryEmbedding(config)
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 4, 50, 16, generator=gen), torch.randn(1, 4, 50, 16, generator=gen)
    cos, sin = rotary(q, torch.arange(50)[None])
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    ours_cos, ours_sin = rope_cos_sin(50, 16)
    torch.testing.assert_close(ours_cos, cos[0], rtol=0, atol=2e-5)  # they multiply angles in float32
    torch.testing.assert_close(apply_rope(q, ours_cos, ours_sin), want_q, rtol=0, atol=5e-5)
    torch.testing.assert_close(rope(k), want_k, rtol=0, atol=5e-5)


def test_rope_scores_depend_only_on_the_offset():
    gen = np.random.default_rng(2)
    q, k = gen.normal(size=32), gen.normal(size=32)
    scores = rope_relative_scores(q, k, np.arange(-20, 21), anchors=(0, 7, 1000, 5000))
    assert scores.shape == (4, 41)
    np.testing.assert_allclose(scores, np.broadcast_to(scores[0], scores.shape), atol=1e-9)
    assert scores[0, 20] == pytest.approx(float(q @ k))  # offset 0: no net rotation
    assert rope_angles(3, 4)[2, 1] == pytest.approx(2 * 10000**-0.5)


def test_rope_run_rotates_q_and_k_after_the_projection():
    cfg = AttentionConfig(embed_dim=32, num_heads=4, kv_heads=2, position="rope", mask="none", dtype="float64")
    inter = run_attention(cfg, TEXT, keep_intermediates=True).intermediates
    np.testing.assert_allclose(inter.q, rope(torch.from_numpy(inter.q_raw).double()).numpy(), atol=1e-6)
    np.testing.assert_allclose(inter.k, rope(torch.from_numpy(inter.k_raw).double()).numpy(), atol=1e-6)
    plain = run_attention(cfg.replace(position="none"), TEXT, keep_intermediates=True).intermediates
    np.testing.assert_array_equal(inter.q_raw, plain.q)  # nothing was added to the embeddings
    assert plain.q_raw is None


# --- ALiBi -------------------------------------------------------------------------------------


def test_alibi_slopes_follow_press_et_al_and_bloom():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for heads in (1, 2, 4, 8, 16):
        np.testing.assert_allclose(alibi_slopes(heads), [2 ** (-8 * (h + 1) / heads) for h in range(heads)])
    for heads in (3, 5, 6, 12, 20):
        bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)  # [H, 1, 2]: slope * key position
        np.testing.assert_allclose(alibi_slopes(heads), bloom[:, 0, 1].double().numpy(), rtol=1e-6)
    np.testing.assert_allclose(alibi_slopes(6), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])


def test_alibi_bias_is_the_hand_built_distance_penalty():
    bias = alibi_bias(4, 5, 7, dtype=torch.float64)
    slopes = alibi_slopes(4)
    for h in range(4):
        for i in range(5):
            for j in range(7):
                assert float(bias[h, i, j]) == -slopes[h] * abs(i - j)


def test_alibi_run_equals_bloom_under_a_causal_mask():
    # BLOOM adds +slope * j: under a causal mask that differs from -slope |i - j| = slope (j - i) by a
    # constant per row, which the softmax ignores
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    cfg = AttentionConfig(embed_dim=48, num_heads=6, position="alibi", mask="causal", dtype="float64")
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    inter, n = result.intermediates, len(result.tokens)
    np.testing.assert_allclose(inter.bias, alibi_bias(6, n).numpy(), atol=1e-6)
    bloom = build_alibi_tensor(torch.ones(1, n), 6, torch.float64)  # [H, 1, L]
    scores = torch.from_numpy(inter.scaled).double() + bloom
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    want = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)
    np.testing.assert_allclose(result.weights, want.numpy(), atol=2e-6)


# --- sliding window ----------------------------------------------------------------------------


@pytest.mark.parametrize("mask", ["none", "padding", "causal", "padding+causal"])
@pytest.mark.parametrize("window", [1, 3, 40])
def test_window_equals_a_banded_mask(mask, window):
    cfg = AttentionConfig(embed_dim=16, num_heads=2, mask=mask, window=window, pad_to=20, dtype="float64")
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    i, j = np.arange(20)[:, None], np.arange(20)[None, :]
    band = np.abs(i - j) < window
    if "causal" in mask:
        band &= j <= i
    if "padding" in mask:
        band &= np.array(result.token_ids)[None, :] != 0
    if band.all():  # a window longer than the text masks nothing
        assert result.mask is None
    else:
        np.testing.assert_array_equal(result.mask, band)
    scaled = torch.from_numpy(result.intermediates.scaled).double()
    want = torch.nan_to_num(torch.softmax(scaled.masked_fill(~torch.from_numpy(band), float("-inf")), -1))
    np.testing.assert_allclose(result.weights, want.numpy(), atol=1e-6)
    assert (result.weights[:, ~band] == 0).all()


def test_window_in_the_layer_equals_the_band_as_a_mask(monkeypatch):
    torch.manual_seed(4)
    layer = MultiHeadAttention(24, 3).double().eval()
    x = torch.randn(1, 30, 24, dtype=torch.float64)
    band = (torch.arange(30)[:, None] - torch.arange(30)[None, :]).abs() < 5
    for threshold in (0, 10**12):  # the fast path and the reference
        monkeypatch.setattr(core, "FAST_PATH_MIN_ELEMENTS", threshold)
        with torch.inference_mode():
            got = layer(x, window=5)
            want = layer(x, mask=band)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


# --- soft-capping ------------------------------------------------------------------------------


@pytest.mark.parametrize("kv", [4, 2])
def test_softcap_matches_transformers_gemma2_eager_attention(kv):
    from types import SimpleNamespace

    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    cfg = AttentionConfig(embed_dim=32, num_heads=4, kv_heads=kv, mask="causal", softcap=1.5, dtype="float64")
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    inter, n = result.intermediates, len(result.tokens)
    q, k, v = (torch.from_numpy(x).double()[None] for x in (inter.q, inter.k, inter.v))
    module = SimpleNamespace(head_dim=8, num_key_value_groups=4 // kv, training=False)
    causal = torch.zeros(n, n, dtype=torch.float64).masked_fill(
        ~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")
    )
    out, weights = eager_attention_forward(module, q, k, v, causal, scaling=8**-0.5, softcap=1.5)
    np.testing.assert_allclose(result.weights, weights[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(inter.context, out[0].transpose(0, 1).numpy(), atol=1e-6)  # theirs: [B, L, H, d]
    np.testing.assert_allclose(inter.capped, 1.5 * np.tanh(inter.scaled / 1.5), atol=1e-6)
    assert np.abs(inter.capped).max() < 1.5


def test_softcap_squashes_only_large_scores():
    loose = run_attention(AttentionConfig(softcap=1e6), TEXT)
    plain = run_attention(AttentionConfig(), TEXT)
    np.testing.assert_allclose(loose.weights, plain.weights, atol=1e-6)
    tight = run_attention(AttentionConfig(softcap=0.05, scaled=False, embed_dim=128), TEXT)
    assert tight.weights.max() < plain.weights.max()
