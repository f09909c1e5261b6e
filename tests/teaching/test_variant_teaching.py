"""The teaching cores of the variants: the online-softmax walk-through, the K/V cache table, the
one-click comparisons, the attention map a result hands the window, and the headless flags."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attndesk.attention.kernel import attend
from attndesk.core import AttentionConfig, ConfigError, run_attention
from attndesk.teaching.compare import VARIANT_KINDS, compare_implementations, teaching_comparison
from attndesk.teaching.kv_cost import CACHE_LENGTHS, kv_cache_bytes, kv_cache_table
from attndesk.teaching.online_softmax import online_softmax, walk_head

TEXT = "the cat sat on the mat because it was tired and the dog barked at it"


# --- online softmax ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    lq=st.integers(1, 9),
    lk=st.integers(1, 17),
    block=st.integers(1, 20),
    seed=st.integers(0, 10**6),
    masked=st.floats(0.0, 0.9),
    spread=st.sampled_from([0.1, 3.0, 60.0]),
)
def test_online_softmax_equals_the_full_softmax(lq, lk, block, seed, masked, spread):
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=spread, size=(lq, lk))
    scores[rng.random((lq, lk)) < masked] = -np.inf
    values = rng.normal(size=(lk, 3))
    walk = online_softmax(scores, values, block)
    with np.errstate(invalid="ignore"):
        weights = torch.nan_to_num(torch.softmax(torch.from_numpy(scores), -1)).numpy()  # independent: torch
    np.testing.assert_allclose(walk.weights, weights, rtol=0, atol=1e-15)
    np.testing.assert_allclose(walk.output, weights @ values, rtol=1e-12, atol=1e-13)
    assert walk.max_abs_diff < 1e-12 and walk.agrees_when_printed(6)
    assert len(walk.steps) == -(-lk // block)
    empty = np.isneginf(scores).all(axis=1)
    assert (walk.output[empty] == 0).all()
    # the running maximum only grows, the running sum is the sum so far against the latest maximum
    for before, step in zip([None, *walk.steps], walk.steps):
        assert (step.max_after >= step.max_before).all()
        seen = np.isfinite(step.max_after)
        k1 = step.keys[1]
        want = np.exp(scores[seen, :k1] - step.max_after[seen, None]).sum(axis=1)
        np.testing.assert_allclose(step.sum_after[seen], want, rtol=1e-12)
        if before is not None:
            moved = seen & np.isfinite(before.max_after)
            np.testing.assert_allclose(step.rescale[moved], np.exp(before.max_after[moved] - step.max_after[moved]))


def test_online_softmax_rescales_when_a_later_block_holds_the_max():
    scores = np.array([[1.0, 2.0, 10.0, 0.0]])
    values = np.eye(4)
    walk = online_softmax(scores, values, 2)
    first, second = walk.steps
    assert first.max_after[0] == 2.0 and second.max_after[0] == 10.0
    assert second.rescale[0] == pytest.approx(np.exp(-8.0))
    np.testing.assert_allclose(walk.output[0], np.exp(scores[0] - 10) / np.exp(scores[0] - 10).sum())
    assert walk.kept_bytes == 4 * (4 + 2) and walk.weights_bytes == 16
    with pytest.raises(ValueError, match="block"):
        online_softmax(scores, values, 0)


def test_walk_of_a_grouped_head_uses_its_kv_head():
    result = run_attention(
        AttentionConfig(num_heads=4, kv_heads=2, mask="causal", position="alibi", softcap=3.0),
        TEXT,
        keep_intermediates=True,
    )
    for head in range(4):
        walk = walk_head(result.intermediates, head, block=5)
        np.testing.assert_allclose(walk.weights, result.weights[head], atol=1e-6)
        np.testing.assert_allclose(walk.output, result.intermediates.context[head], atol=1e-5)
    with pytest.raises(ValueError, match="intermediates"):
        walk_head(run_attention(AttentionConfig(), TEXT).intermediates, 0, 4)


# --- K/V cache ---------------------------------------------------------------------------------


def test_kv_cache_table_for_the_current_shape():
    config = AttentionConfig(embed_dim=512, num_heads=8, kv_heads=2)
    rows = kv_cache_table(config)
    assert [r.kv_heads for r in rows] == [8, 4, 2, 1] and [r.current for r in rows] == [False, False, True, False]
    mha, gqa = rows[0], rows[2]
    assert mha.bytes[4096] == 2 * 8 * 64 * 4096 * 4  # K and V, 8 heads, d_k 64, float32
    assert mha.bytes[131072] == 32 * mha.bytes[4096] and tuple(mha.bytes) == CACHE_LENGTHS
    assert mha.ratio_to(gqa) == 4 and "GQA" in gqa.label and "MQA" in rows[3].label
    assert kv_cache_bytes(8, 128, 32768, layers=32, itemsize=2) == 4 * 2**30  # LLaMA-2-7B-ish: 4 GiB at 32k


# --- one-click comparisons ---------------------------------------------------------------------


def test_mha_vs_gqa_pools_the_kv_heads_of_a():
    config = AttentionConfig(num_heads=4, dtype="float64", mask="padding", pad_to=18)
    t = teaching_comparison("gqa", config, TEXT)
    assert t.b.config.kv_heads == 2 and t.a.config.num_kv_heads == 4 and t.kv_cache is not None
    a = run_attention(config, TEXT, keep_intermediates=True)  # independent recomputation of B
    k = a.intermediates.k.reshape(2, 2, 18, 16).mean(axis=1).repeat(2, axis=0)  # pooled, repeated per head
    scores = np.einsum("hqd,hkd->hqk", a.intermediates.q, k) / 4.0
    scores[:, ~a.mask] = -np.inf
    want = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(t.b.weights, want / want.sum(-1, keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(t.a.weights, a.weights)
    assert "less than A" in t.explanation and "128k tokens" in t.explanation
    with pytest.raises(ConfigError, match="one head has nothing to share"):
        teaching_comparison("gqa", AttentionConfig(num_heads=1), TEXT)


@pytest.mark.parametrize("kind", ["rope", "window", "softcap"])
def test_variant_comparisons_run_a_and_b_as_configured(kind):
    config = AttentionConfig(num_heads=2, embed_dim=16)
    t = teaching_comparison(kind, config, TEXT)
    assert t.title == VARIANT_KINDS[kind]
    b_config = t.b.config
    np.testing.assert_array_equal(t.b.weights, run_attention(b_config, TEXT).weights)
    np.testing.assert_array_equal(t.diff.diff, t.b.weights.astype(np.float64) - t.a.weights.astype(np.float64))
    if kind == "rope":
        assert (t.a.config.position, b_config.position) == ("sinusoidal", "rope")
    elif kind == "window":
        n = len(t.b.tokens)
        far = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) >= b_config.window
        assert t.a.config.window is None and (t.b.weights[:, far] == 0).all() and (t.a.weights[:, far] > 0).all()
    else:
        assert t.a.config.softcap is None and b_config.softcap > 0 and t.diff.max_abs > 0


def test_implementation_comparison_passes_the_variants_to_sdpa():
    cmp = compare_implementations(
        AttentionConfig(num_heads=4, kv_heads=2, position="rope", window=4, mask="padding", pad_to=20), TEXT
    )
    assert cmp.max_abs_output["F.scaled_dot_product_attention"] < 1e-5
    assert "nn.MultiheadAttention" not in cmp.timings and any("grouped K/V" in n for n in cmp.notes)
    alibi = compare_implementations(AttentionConfig(num_heads=4, position="alibi", window=3), TEXT)
    assert alibi.max_abs_output["F.scaled_dot_product_attention"] < 1e-5
    windowed = compare_implementations(AttentionConfig(num_heads=4, window=3), TEXT)
    assert windowed.max_abs_weights["nn.MultiheadAttention"] < 1e-6
    capped = compare_implementations(AttentionConfig(softcap=2.0), TEXT)
    assert list(capped.timings) == ["attndesk MultiHeadAttention"]  # neither of torch's has a soft-cap
    assert any("it has no soft-cap" in n for n in capped.notes)


# --- what the window draws ---------------------------------------------------------------------


def test_attention_map_carries_the_variant():
    result = run_attention(
        AttentionConfig(num_heads=8, embed_dim=64, kv_heads=2, position="alibi", window=4, softcap=20.0, mask="causal"),
        TEXT,
    )
    amap = result.attention_map()
    assert amap.kv_heads == 2 and amap.groups == 4 and amap.kv_head_of(5) == 1 and amap.window == 4
    np.testing.assert_allclose(amap.alibi_slopes, [2 ** (-(h + 1)) for h in range(8)])
    assert amap.weights is result.weights and amap.queries == result.tokens and amap.mask is result.mask
    assert "grouped-query (2 K/V heads)" in amap.summary and "ALiBi" in amap.summary and "window 4" in amap.summary
    assert amap.file_tag == "h8_e64_causal_scaled_alibi_kv2_win4_cap20_seed0"
    assert amap.weight_at(3, 5, 4) == result.weight_at(3, 5, 4)
    plain = run_attention(AttentionConfig(), TEXT).attention_map()
    assert plain.alibi_slopes is None and plain.window is None and plain.groups == 1
    assert plain.file_tag == "h4_e64_padding_scaled_seed0" and "sinusoidal positions" in plain.summary


def test_unknown_tokens_are_typed_fields():
    result = run_attention(AttentionConfig(), "the zzqxv cat", key_text="a qqzzx dog")
    assert result.unknown == [False, True, False] and result.key_unknown == [False, True, False]
    assert not hasattr(result, "extra")
    assert run_attention(AttentionConfig(), "the cat").key_unknown is None


def test_render_takes_the_variant_flags(tmp_path, capsys):
    from attndesk.cli import main

    code = main(
        [
            "render",
            "--text",
            TEXT,
            "--heads",
            "8",
            "--embed-dim",
            "64",
            "--kv-heads",
            "2",
            "--position",
            "rope",
            "--window",
            "4",
            "--softcap",
            "30",
            "--which",
            "all",
            "--weights",
            "npy",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    npy = [p for p in tmp_path.iterdir() if p.suffix == ".npy"]
    want = run_attention(
        AttentionConfig(num_heads=8, embed_dim=64, kv_heads=2, position="rope", window=4, softcap=30.0), TEXT
    ).weights
    np.testing.assert_array_equal(np.load(npy[0]), want)
    capsys.readouterr()
    assert main(["render", "--kv-heads", "3", "--out", str(tmp_path / "other")]) == 2
    assert "valid K/V head counts: 1, 2, 4" in capsys.readouterr().err
    assert main(["render", "--no-positional", "--position", "alibi", "--out", str(tmp_path / "other")]) == 2
    assert "contradicts" in capsys.readouterr().err


def test_reference_attend_is_what_every_stage_is_kept_from():
    # the intermediates are the reference's own stages, and they reproduce the weights
    result = run_attention(
        AttentionConfig(
            num_heads=2,
            embed_dim=16,
            kv_heads=1,
            position="alibi",
            softcap=2.0,
            window=3,
            mask="padding",
            pad_to=17,
            dtype="float64",
        ),
        TEXT,
        keep_intermediates=True,
    )
    inter = result.intermediates
    assert inter.available() == (
        "embeddings",
        "q",
        "k",
        "v",
        "scores",
        "scaled",
        "capped",
        "bias",
        "masked",
        "weights",
        "context",
        "output",
    )
    q, k, v = (torch.from_numpy(x).double() for x in (inter.q, inter.k, inter.v))
    ctx, w = attend(
        q,
        k,
        v,
        mask=torch.from_numpy(np.ascontiguousarray(result.mask)),
        bias=torch.from_numpy(inter.bias).double(),
        softcap=2.0,
    )
    np.testing.assert_allclose(w.numpy(), result.weights, atol=1e-6)
    np.testing.assert_allclose(ctx.numpy(), inter.context, atol=1e-6)
