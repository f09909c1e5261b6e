"""Weight-only head views against their direct formulas, TransformerLens' factored-matrix
composition scores and transformers' eager GPT-2 / LLaMA weights, with grouped K/V heads indexed
by their group."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pretrained_models import eager

from attndesk.errors import ConfigError
from attndesk.interp import composition_scores, head_weights, ov_copying_scores, qk_positional
from attndesk.interp.composition import MODES
from attndesk.models import load_pretrained
from attndesk.train import TrainConfig
from attndesk.train.model import build_model


def _toy(**options):
    cfg = TrainConfig(task="induction", layers=3, heads=4, embed_dim=16, vocab_size=12, seq_len=10, **options)
    return build_model(cfg, seed=11)


def _per_head(model):
    """Each head's W_Q, W_K, W_V, W_O read straight from the projections, group by group."""
    out = []
    for block in model.requires_grad_(False).blocks:
        a, d = block.attn, block.attn.head_dim
        group = a.heads // a.kv_heads
        for h in range(a.heads):
            g = h // group
            out.append(
                (
                    a.q_proj.weight.double()[h * d : (h + 1) * d].T,
                    a.k_proj.weight.double()[g * d : (g + 1) * d].T,
                    a.v_proj.weight.double()[g * d : (g + 1) * d].T,
                    a.out_proj.weight.double()[:, h * d : (h + 1) * d].T,
                )
            )
    return out


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_composition_scores_match_the_direct_formula(mode):
    model = _toy(position="learned", kv_heads=2)
    scores = composition_scores(model, mode)
    np.testing.assert_array_equal(composition_scores(model, mode, into=(2, 1)), scores[:, :, 2, 1])
    heads = _per_head(model)
    for first in range(12):
        for second in range(12):
            l1, l2 = first // 4, second // 4
            value = scores[l1, first % 4, l2, second % 4]
            if l1 >= l2:
                assert value == 0.0
                continue
            _, _, wv1, wo1 = heads[first]
            wq2, wk2, wv2, wo2 = heads[second]
            left = wv1 @ wo1
            right = {"Q": wq2 @ wk2.T, "K": (wq2 @ wk2.T).T, "V": wv2 @ wo2}[mode]
            expected = torch.linalg.norm(left @ right) / torch.linalg.norm(left) / torch.linalg.norm(right)
            assert value == pytest.approx(float(expected), rel=1e-10)


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_composition_scores_match_transformer_lens(mode):
    factored = pytest.importorskip("transformer_lens.FactoredMatrix").FactoredMatrix
    tl_scores = pytest.importorskip("transformer_lens.utilities.matrix").composition_scores
    model = _toy(position="rope", kv_heads=1)
    w = head_weights(model)
    # TransformerLens expands grouped K/V heads to one per query head (its _expand_kv_heads)
    left = factored(w.v.repeat_interleave(4, 1), w.o)
    qk = factored(w.q, w.k.repeat_interleave(4, 1).transpose(-2, -1))
    right = {"Q": qk, "K": qk.T, "V": left}[mode]
    later = (np.arange(3)[:, None] < np.arange(3)[None])[:, None, :, None]
    np.testing.assert_allclose(composition_scores(model, mode), tl_scores(left, right).numpy() * later, atol=1e-12)


def test_ov_copying_score_from_the_full_vocabulary_circuit():
    model = _toy(position="learned", layernorm=True)
    scores = ov_copying_scores(model)
    embed, unembed = model.embed.weight.double(), model.unembed.weight.double().T * model.ln_f.weight.double()[:, None]
    for index, (_, _, wv, wo) in enumerate(_per_head(model)):
        gain = model.blocks[index // 4].ln1.weight.double()[:, None]
        full = embed @ (gain * wv) @ wo @ unembed  # [V, V]
        values = torch.linalg.eigvals(full)
        assert scores[index // 4, index % 4] == pytest.approx(float(values.sum().real / values.abs().sum()), abs=1e-9)


def test_a_copying_head_scores_one():
    model = _toy(position="learned")
    with torch.no_grad():
        e = model.blocks[0].attn
        # W_V W_O = identity on head 0's subspace and W_U = W_E^T: the full OV circuit is W_E P W_E^T (PSD)
        e.v_proj.weight.zero_()
        e.out_proj.weight.zero_()
        e.v_proj.weight[:4, :4] = torch.eye(4)
        e.out_proj.weight[:4, :4] = torch.eye(4)
        model.unembed.weight.copy_(model.embed.weight)
    assert ov_copying_scores(model)[0, 0] == pytest.approx(1.0, abs=1e-9)


def test_positional_qk_circuit():
    model = _toy(position="learned")
    circuits, previous = qk_positional(model)
    table = model.pos.weight.detach().double()
    wq, wk, _, _ = _per_head(model)[5]  # layer 1, head 1
    np.testing.assert_allclose(circuits[1, 1], (table @ wq @ wk.T @ table.T).numpy(), atol=1e-12)
    scores = torch.from_numpy(circuits[1, 1]) / 2.0  # scale 1/sqrt(4)
    weights = torch.softmax(scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), -torch.inf), -1)
    assert previous[1, 1] == pytest.approx(float(torch.diagonal(weights, -1).mean()), abs=1e-12)
    with pytest.raises(ConfigError, match="position table"):
        qk_positional(_toy(position="rope"))
    with pytest.raises(ConfigError, match="one of Q, K, V"):
        composition_scores(model, "O")


def _eager_heads(ref, name: str):
    """Per head (W_Q, W_K, W_V, W_O) of transformers' eager model, its input norm's gain folded in."""
    out = []
    if name == "gpt2":
        for block in ref.transformer.h:
            w, o, g = block.attn.c_attn.weight.double(), block.attn.c_proj.weight.double(), block.ln_1.weight.double()
            for h in range(4):
                cols = slice(h * 8, (h + 1) * 8)
                out.append(
                    tuple(g[:, None] * w[:, off:][:, :32][:, cols] for off in (0, 32, 64)) + (o[cols],)  # Conv1D: x @ W
                )
        return out
    for layer in ref.model.layers:
        a, g = layer.self_attn, layer.input_layernorm.weight.double()
        for h in range(4):
            kv = h // 2  # 4 query heads share 2 K/V heads
            out.append(
                (
                    g[:, None] * a.q_proj.weight.double()[h * 8 : (h + 1) * 8].T,
                    g[:, None] * a.k_proj.weight.double()[kv * 8 : (kv + 1) * 8].T,
                    g[:, None] * a.v_proj.weight.double()[kv * 8 : (kv + 1) * 8].T,
                    a.o_proj.weight.double()[:, h * 8 : (h + 1) * 8].T,
                )
            )
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_pretrained_decoders_weight_views_match_transformers_weights(folders, name):
    model = load_pretrained(folders[name])
    ref = eager(folders[name]).double().requires_grad_(False)
    heads = _eager_heads(ref, name)
    for mode in MODES:
        scores = composition_scores(model, mode)
        for first in range(4):  # layer 0 -> layer 1
            for second in range(4, 8):
                _, _, wv1, wo1 = heads[first]
                wq2, wk2, wv2, wo2 = heads[second]
                left = wv1 @ wo1
                right = {"Q": wq2 @ wk2.T, "K": wk2 @ wq2.T, "V": wv2 @ wo2}[mode]
                expected = torch.linalg.norm(left @ right) / torch.linalg.norm(left) / torch.linalg.norm(right)
                assert scores[0, first, 1, second - 4] == pytest.approx(float(expected), rel=1e-9)
    final = ref.transformer.ln_f if name == "gpt2" else ref.model.norm
    embed, unembed = (
        ref.get_input_embeddings().weight.double(),
        ref.lm_head.weight.double().T * final.weight.double()[:, None],
    )
    copying = ov_copying_scores(model)
    for index, (_, _, wv, wo) in enumerate(heads):
        values = torch.linalg.eigvals(wo @ unembed @ embed @ wv)
        assert copying[index // 4, index % 4] == pytest.approx(float(values.sum().real / values.abs().sum()), abs=1e-9)
    if name == "gpt2":
        circuits, _ = qk_positional(model)
        table = ref.transformer.wpe.weight.double()
        wq, wk, _, _ = heads[5]
        np.testing.assert_allclose(circuits[1, 1], (table @ wq @ wk.T @ table.T).numpy(), atol=1e-9)
    else:
        with pytest.raises(ConfigError, match="position table"):
            qk_positional(model)
