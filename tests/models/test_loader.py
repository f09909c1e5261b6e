"""all-MiniLM-L6-v2 through transformers with attndesk's attention reproduces the model: published
cosines, and attention weights equal to an independent plain-torch BERT written here from the
safetensors file (no attndesk or transformers code)."""

from __future__ import annotations

import itertools
import math
import re
import threading

import numpy as np
import pytest
import torch

from attndesk.errors import Cancelled, ConfigError
from attndesk.models import (
    cosine,
    encode,
    is_loaded,
    load_pretrained,
    loader,
    packaged_model_dir,
    pretrained_job,
    run_pretrained,
    sentence_embeddings,
)
from tests.conftest import TIMEOUT_MS

FOOD, BREAD, HORSE = "A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."


@pytest.fixture(scope="module")
def model():
    return load_pretrained()


# -- an independent reference: BERT from the raw tensors, written out by hand ------------------
def _reference(text: str, scale_scores: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """(attention probabilities per layer [H, L, L], mean-pooled unit embedding [E])."""
    import json

    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    folder = packaged_model_dir()
    cfg = json.loads((folder / "config.json").read_text())
    t = load_file(str(folder / "model.safetensors"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    ids = torch.tensor(tok.encode(text).ids)
    n_heads, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]

    def ln(x, name):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * t[name + ".weight"] + t[name + ".bias"]

    def dense(x, name):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    length = ids.shape[0]
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:length]
    x = ln(x + t["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    probs = []
    for n in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        e = x.shape[-1]
        d = e // n_heads
        q, k, v = (
            dense(x, p + f"attention.self.{s}").reshape(length, n_heads, d).transpose(0, 1)
            for s in ("query", "key", "value")
        )  # [H, L, d]
        scores = q @ k.transpose(1, 2)
        if scale_scores:
            scores = scores / math.sqrt(d)
        a = torch.exp(scores - scores.max(-1, keepdim=True).values)
        a = a / a.sum(-1, keepdim=True)
        probs.append(a.numpy())
        ctx = (a @ v).transpose(0, 1).reshape(length, e)
        x = ln(x + dense(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        x = ln(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
    pooled = x.mean(0)
    return probs, (pooled / pooled.norm()).numpy()


def test_published_cosines(model):
    food, bread, horse = (run_pretrained(model, s).embedding for s in (FOOD, BREAD, HORSE))
    assert cosine(food, bread) == pytest.approx(0.755, abs=0.005)
    assert cosine(food, horse) == pytest.approx(0.247, abs=0.005)
    assert np.linalg.norm(food) == pytest.approx(1.0, abs=1e-5)


def test_batched_padding_matches_single_runs(model):
    batch = sentence_embeddings(model, [FOOD, BREAD, HORSE])  # FOOD and HORSE get padded
    singles = np.stack([run_pretrained(model, s).embedding for s in (FOOD, BREAD, HORSE)])
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    assert float(batch[0] @ batch[1]) == pytest.approx(0.755, abs=0.005)


@pytest.mark.parametrize("scaled", [True, False])
def test_weights_match_independent_reference(model, scaled):
    result = run_pretrained(model, BREAD, scaled=scaled)
    probs, embedding = _reference(BREAD, scale_scores=scaled)
    assert result.weights.shape == (6, 12, len(result.tokens), len(result.tokens))
    assert result.weights.dtype == np.float32
    for n, expected in enumerate(probs):
        np.testing.assert_allclose(result.weights[n], expected, atol=2e-5, err_msg=f"layer {n}")
    np.testing.assert_allclose(result.embedding, embedding, atol=2e-5)
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)


def test_tokens_specials_and_shapes(model):
    result = run_pretrained(model, "The cat sat.")
    assert result.tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert result.special.tolist() == [True, False, False, False, False, True]
    assert result.token_ids[0] == 101 and result.token_ids[-1] == 102
    assert result.hidden_states.shape == (7, 6, 384)
    assert list(result.timings) == ["embed", *(f"layer {i}" for i in range(6)), "pooling", "total"]
    assert result.timings["total"] == pytest.approx(sum(v for k, v in result.timings.items() if k != "total"))
    assert not result.altered and result.cosine_to_normal is None and result.notices == []


def test_untouched_toggles_are_identical(model):
    a = run_pretrained(model, FOOD)
    b = run_pretrained(model, FOOD, scaled=True, causal=False, ablate=[])
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.embedding, b.embedding)


@pytest.mark.parametrize("toggle", [{"scaled": False}, {"causal": True}, {"ablate": [(1, 3), (1, 7)]}])
def test_toggles_change_later_layers_and_embedding(model, toggle):
    normal = run_pretrained(model, FOOD)
    altered = run_pretrained(model, FOOD, **toggle)
    assert altered.altered
    assert altered.cosine_to_normal == pytest.approx(cosine(altered.embedding, normal.embedding), abs=1e-6)
    assert altered.cosine_to_normal < 0.9999
    np.testing.assert_allclose(altered.normal_embedding, normal.embedding, atol=1e-6)
    assert np.abs(altered.weights[-1] - normal.weights[-1]).max() > 1e-3  # the last layer sees it


def test_ablation_leaves_earlier_layers_alone(model):
    normal = run_pretrained(model, FOOD)
    altered = run_pretrained(model, FOOD, ablate=[(2, 0)])
    # Ablation acts after layer 2's weights are computed: layers 0..2 attend exactly as before.
    np.testing.assert_array_equal(altered.weights[:3], normal.weights[:3])
    np.testing.assert_array_equal(altered.hidden_states[:3], normal.hidden_states[:3])
    assert np.abs(altered.hidden_states[3] - normal.hidden_states[3]).max() > 1e-3
    assert altered.is_ablated(2, 0) and not altered.is_ablated(2, 1)


def test_causal_mask_zeroes_the_future(model):
    result = run_pretrained(model, FOOD, causal=True)
    upper = np.triu(np.ones(result.weights.shape[-2:], dtype=bool), k=1)
    assert np.all(result.weights[..., upper] == 0.0)
    assert result.mask is not None and not result.mask[upper].any()


def test_unscaled_attention_is_sharper(model):
    normal = run_pretrained(model, FOOD).weights[0]
    unscaled = run_pretrained(model, FOOD, scaled=False).weights[0]
    assert unscaled.max(axis=-1).mean() > normal.max(axis=-1).mean()


def test_long_input_is_truncated_with_a_notice(model):
    result = run_pretrained(model, "cat " * 530)  # 530 words + [CLS] + [SEP]
    assert result.length == 512 and result.tokens[-1] == "[SEP]" and result.tokens[0] == "[CLS]"
    assert result.dropped_tokens == 20
    assert result.notices == ["input had 532 tokens; the model takes 512, so 20 were dropped"]


def test_bad_inputs_are_config_errors(model):
    with pytest.raises(ConfigError, match="empty"):
        run_pretrained(model, "   ")
    with pytest.raises(ConfigError, match=r"layers 0..5"):
        run_pretrained(model, FOOD, ablate=[(6, 0)])
    with pytest.raises(ConfigError, match="pairs"):
        run_pretrained(model, FOOD, ablate=[3])


def test_views_of_the_weights(model):
    result = run_pretrained(model, "The cat sat.")
    follow = result.follow_token(2)
    assert follow.shape == (6, 6)
    np.testing.assert_allclose(follow, result.weights[:, :, 2, :].mean(axis=1), atol=1e-6)
    np.testing.assert_array_equal(result.follow_token(2, head=5), result.weights[:, 5, 2, :])
    w, tokens, hidden = result.without_special(3)
    assert tokens == ["the", "cat", "sat", "."]
    np.testing.assert_array_equal(w, result.weights[3][:, 1:5, 1:5])  # not re-normalised
    np.testing.assert_allclose(w.sum(-1) + hidden, 1.0, atol=1e-5)
    assert hidden.min() > 0  # BERT heads put real mass on [CLS]/[SEP]
    # 6 layers x (8*L*E^2 + 4*L^2*E + 4*L*E*I) at L=6, E=384, I=1536
    assert result.flops == 6 * (8 * 6 * 384**2 + 4 * 36 * 384 + 4 * 6 * 384 * 1536)
    assert result.peak_bytes >= result.weights.nbytes + result.hidden_states.nbytes


def test_layer_map(model):
    result = run_pretrained(model, "The cat sat.")
    amap = result.layer_map(4)
    assert amap.weights.shape == (12, 6, 6) and amap.queries == amap.keys == result.tokens
    np.testing.assert_array_equal(amap.weights, result.weights[4])
    assert amap.mask is None and amap.hidden_mass is None and amap.layer_kind == "global" and amap.window is None
    assert amap.kv_heads == 12 and amap.groups == 1 and amap.weight_at(3, 1, 2) == float(result.weights[4, 3, 1, 2])
    assert "layer 4 of 6" in amap.summary and amap.file_tag == "all-MiniLM-L6-v2_layer4"
    with pytest.raises(IndexError):
        result.layer_map(6)
    with pytest.raises(ValueError, match="no 'cross' attention"):
        result.layer_map(0, part="cross")
    w, _, hidden = result.without_special(3)
    hidden_view = result.layer_map(3, hide_special=True)
    assert hidden_view.queries == hidden_view.keys == ["the", "cat", "sat", "."]
    np.testing.assert_array_equal(hidden_view.weights, w)
    np.testing.assert_array_equal(hidden_view.hidden_mass, hidden)
    assert "[CLS]/[SEP] hidden, rows NOT re-normalised" in hidden_view.legend
    assert hidden_view.notices[-1] == hidden_view.legend
    causal = run_pretrained(model, "The cat sat.", causal=True).layer_map(0, hide_special=True)
    assert causal.mask.shape == (4, 4) and not causal.mask[0, 1] and causal.mask[1, 0]
    assert "layer 0 of 6" in causal.summary and "causal mask (forced)" in causal.summary
    assert "seed" not in causal.summary and causal.file_tag == "all-MiniLM-L6-v2_layer0_causal"


def test_a_layer_outside_the_model_is_an_index_error(model):
    result = run_pretrained(model, "The cat sat.")
    with pytest.raises(IndexError, match="out of range"):
        result.layer_map(6)


def test_intermediates_of_one_layer(model):
    result = run_pretrained(model, FOOD, layer=2)
    stages = result.intermediates["self"]
    assert result.intermediates_layer == 2 and stages.q_raw is None  # learned positions: no rotary
    np.testing.assert_array_equal(stages.weights, result.weights[2])
    np.testing.assert_allclose(stages.scores, stages.q @ stages.k.transpose(0, 2, 1), atol=1e-4)
    np.testing.assert_allclose(stages.scaled, stages.scores / math.sqrt(32), atol=1e-5)
    np.testing.assert_array_equal(stages.embeddings, result.hidden_states[2])  # layer 2's input
    np.testing.assert_allclose(stages.context, stages.weights @ stages.v, atol=1e-5)
    assert stages.output.shape == (result.length, 384)
    with pytest.raises(ConfigError, match="layer 6 out of range"):
        run_pretrained(model, FOOD, layer=6)


def test_run_memory_budget(model):
    # 40 tokens: weights 6 x 12 x 40^2 x 4 B + hidden states 7 x 40 x 384 x 4 B = 870 KiB
    message = (
        "6 layers x 12 heads x 40\u00b2 tokens of attention weights take 870.0 KiB, over the memory budget of "
        "256.0 KiB: shorten the text to about 30 tokens or raise the budget"
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        run_pretrained(model, "cat " * 38, memory_budget=256 * 1024)
    assert run_pretrained(model, "cat " * 38, memory_budget=870 * 1024).length == 40


def test_cached_once_and_thread_safe(model):
    assert is_loaded() and load_pretrained() is model and model.name == "all-MiniLM-L6-v2"
    assert load_pretrained(packaged_model_dir()) is model  # the same folder by path: the same cache entry
    got = []
    threads = [threading.Thread(target=lambda: got.append(load_pretrained())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(m is model for m in got) and len(got) == 4


def test_progress_and_cancel(model):
    seen = []
    run_pretrained(model, FOOD, progress=lambda f, m: seen.append((f, m)))
    assert seen[-1][0] == pytest.approx(1.0) and [m for _, m in seen][:2] == ["embed", "layer 0"]
    assert all(a[0] < b[0] for a, b in itertools.pairwise(seen))
    calls = []

    def cancel_after_embed():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        run_pretrained(model, FOOD, should_cancel=cancel_after_embed)


def test_job_function_for_the_worker(model):
    seen = []
    result = pretrained_job(None, FOOD, ablate=[(0, 0)], progress=lambda f, m: seen.append(f))
    assert result.ablate == ((0, 0),) and result.cosine_to_normal < 1
    assert seen and seen[-1] == pytest.approx(1.0)
    with pytest.raises(Cancelled):
        pretrained_job(None, FOOD, should_cancel=lambda: True)


def test_encode_counts_wordpieces(model):
    encoded = encode(model, "unbelievably tokenization")
    assert encoded.tokens[0] == "[CLS]" and any(t.startswith("##") for t in encoded.tokens)
    assert encoded.dropped == 0


@pytest.mark.slow  # a fresh interpreter or a large allocation: make test, not test-fast
def test_core_pretrained_does_not_import_qt():
    import subprocess
    import sys

    code = (
        "import sys, attndesk.models as p; "
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', 'transformers'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow  # a fresh interpreter or a large allocation: make test, not test-fast
def test_transformers_long_lived_objects_stay_out_of_full_collections():
    """The first import of transformers is frozen out of the collector: a full collection over its
    ~150k objects took ~70 ms in whichever thread allocated, the window's included."""
    import subprocess
    import sys

    code = (
        "import gc, sys\n"
        "from attndesk.models.loader import transformers_offline\n"
        "before = len(gc.get_objects())\n"
        "t = transformers_offline()\n"
        "frozen, tracked = gc.get_freeze_count(), len(gc.get_objects())\n"
        "assert not any(o is t.PreTrainedModel for o in gc.get_objects()), 'PreTrainedModel still tracked'\n"
        "n = gc.get_freeze_count()\n"
        "transformers_offline()\n"
        "assert gc.get_freeze_count() == n, 'frozen again on a later load'\n"
        "print(before, frozen, tracked)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    before, frozen, tracked = map(int, done.stdout.split())
    assert frozen > 50_000 and tracked < before + 5_000, (before, frozen, tracked)


def test_asking_whether_a_model_is_loaded_never_waits_for_a_load():
    """Soak (seed 101, action 117): the GUI thread stood 3.7 s in ``is_loaded`` (the pretrained
    mode's request) while a worker held the model cache's lock to load a model. The answer must
    come while the lock is still held."""
    with loader._models_lock:  # what load_pretrained holds while it loads
        answered: list[bool] = []
        asker = threading.Thread(target=lambda: answered.append(loader.is_loaded("/no/such/model-folder")))
        asker.start()
        asker.join(TIMEOUT_MS / 1000)  # a bound, not a speed check: a waiting asker never answers in it
        held_answer = list(answered)
    asker.join()
    assert held_answer == [False], "is_loaded waited for the loader's lock"
