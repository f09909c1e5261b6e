"""score_terms: the terms sum to attend's pre-softmax score within 1e-9 (float64) for the toy
mode's one-layer model, trained toy decoders of every variant and the tiny pretrained families; the scores agree with the float32
run and single terms with hand-computed ones from transformers' eager GPT-2."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pretrained_models import CONFIGS, build, eager

from attndesk.attention.alibi import alibi_slopes
from attndesk.errors import ConfigError
from attndesk.interp import score_terms
from attndesk.models import encode, load_pretrained
from attndesk.models.backend import Capture, capturing
from attndesk.runs.config import AttentionConfig
from attndesk.runs.pipeline import run_attention
from attndesk.train import TrainConfig
from attndesk.train.model import build_model

TEXT = "the cat sat on the mat"
IDS = [1, 5, 3, 7, 2, 1, 5, 3]
VARIANTS = {
    "rope-gqa-ln-mlp": {"position": "rope", "layernorm": True, "mlp": True, "kv_heads": 2},
    "alibi-softcap-sink": {"position": "alibi", "softcap": 3.0, "sink": "learned"},
    "learned-window": {"position": "learned", "window": 4},
    "sinusoidal-ln": {"position": "sinusoidal", "layernorm": True, "mlp": True},
}


def _toy(**options):
    cfg = TrainConfig(task="induction", layers=3, heads=4, embed_dim=16, vocab_size=12, seq_len=10, **options)
    return build_model(cfg, seed=7)


def _reference(model, ids, layer: int, stage: str) -> torch.Tensor:
    """The stage ``stage`` of layer ``layer`` from the decoder's own float64 forward pass."""
    twin = model.double().eval()
    keeps = [{} for _ in twin.blocks]
    with torch.no_grad():
        twin(torch.tensor([ids]), keeps=keeps)
    return keeps[layer][stage][0]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_toy_terms_sum_to_attends_score(variant):
    options = VARIANTS[variant]
    model = _toy(**options)
    key = 4 if options.get("window") else 2
    result = score_terms(model, IDS, 2, 1, 6, key)
    masked = _reference(_toy(**options), IDS, 2, "masked")
    assert result.score == pytest.approx(float(masked[1, 6, key]), abs=1e-12)
    assert abs(result.terms["term"].sum() - result.decomposed) <= 1e-9
    components = set(result.terms["query_component"])
    assert {"embed", "L0.H0", "L1.H3", "bias"} <= components
    assert ("L0.MLP" in components) == bool(options.get("mlp"))
    assert ("pos" in components) == (options["position"] in ("learned", "sinusoidal"))
    kinds = set(result.terms["kind"])
    assert ("rope" in kinds) == (options["position"] == "rope")
    if options.get("softcap"):
        cap = options["softcap"]
        scaled = float(_reference(_toy(**options), IDS, 2, "scaled")[1, 6, key])
        slope = alibi_slopes(4)[1]
        assert result.decomposed == pytest.approx(scaled - slope * (6 - key), abs=1e-12)
        assert result.score == pytest.approx(cap * math.tanh(scaled / cap) - slope * (6 - key), abs=1e-12)
        assert any("before the cap" in note for note in result.notes)
        position = result.terms[result.terms["kind"] == "position"]
        assert position["term"].tolist() == pytest.approx([-slope * (6 - key)])


def test_toy_rope_content_terms_are_the_unrotated_product():
    options = VARIANTS["rope-gqa-ln-mlp"]
    result = score_terms(_toy(**options), IDS, 1, 3, 5, 1)
    q_raw = _reference(_toy(**options), IDS, 1, "q_raw")[3, 5]
    k_raw = _reference(_toy(**options), IDS, 1, "k_raw")[3 // 2, 1]  # query head 3 reads K/V head 1
    content = result.terms[result.terms["kind"] == "content"]["term"].sum()
    assert content == pytest.approx(float(q_raw @ k_raw) / math.sqrt(4), abs=1e-12)
    matrix = result.matrix()
    assert matrix.to_numpy().sum() == pytest.approx(result.decomposed, abs=1e-9)
    assert list(matrix.index) == list(result.components)


def test_toy_refusals():
    model = _toy(position="learned")
    with pytest.raises(ConfigError, match="does not see key"):
        score_terms(model, IDS, 0, 0, 2, 5)
    with pytest.raises(ConfigError, match=r"layer must be 0\.\.2"):
        score_terms(model, IDS, 3, 0, 2, 1)
    with pytest.raises(ConfigError, match="token ids, not text"):
        score_terms(model, "abc", 0, 0, 2, 1)


def test_shipped_preset_decomposes():
    from attndesk.train.presets import load_preset

    run = load_preset("induction")
    ids = [int(i) for i in torch.arange(run.cfg.length) % run.cfg.vocab][:12]
    result = score_terms(run, ids, run.cfg.layers - 1, 0, 11, 3)
    assert abs(result.terms["term"].sum() - result.decomposed) <= 1e-9 * max(1.0, abs(result.decomposed))


def _float32_scores(model, part: str, layer: int, target: str | None = None) -> np.ndarray:
    """[H, Lq, Lk] attend's pre-softmax scores of the model's own float32 pass."""
    from attndesk.interp.inputs import prompt

    p = prompt(model, TEXT, target) if model.family == "encoder-decoder" else prompt(model, TEXT)
    capture = Capture(sites=model.sites, layers=dict(model.layers), keep_layer=layer)
    kwargs = {"input_ids": p.ids}
    if p.decoder_ids is not None:
        kwargs["decoder_input_ids"] = p.decoder_ids
    with torch.inference_mode(), capturing(capture):
        model.model(**kwargs)
    return capture.intermediates[part]["masked"]


@pytest.mark.parametrize(
    ("name", "part", "layer", "head", "query", "key"),
    [
        ("gpt2", "self", 1, 2, 4, 1),
        ("llama", "self", 1, 3, 5, 2),  # grouped K/V heads, RoPE
        ("gemma2", "self", 1, 1, 3, 2),  # soft-cap, sandwich norms, (1 + w) RMSNorm
        ("bert", "self", 1, 0, 1, 4),  # post-norm encoder
        ("t5", "self", 1, 1, 3, 2),  # relative position bias
        ("t5", "cross", 1, 2, 1, 3),  # cross-attention: decoder queries, encoder keys
    ],
)
def test_pretrained_terms_sum_to_the_score(folders, name, part, layer, head, query, key):
    model = load_pretrained(folders[name])
    target = "a dog" if model.family == "encoder-decoder" else None
    result = score_terms(model, TEXT, layer, head, query, key, part=part, target=target)
    assert abs(result.terms["term"].sum() - result.decomposed) <= 1e-9 * max(1.0, abs(result.decomposed))
    reference = _float32_scores(model, part, layer, target)[head, query, key]
    assert result.score == pytest.approx(float(reference), rel=1e-4, abs=1e-5)
    if name == "t5":
        bias = result.terms[result.terms["kind"] == "position"]
        assert list(bias["query_component"]) == ["relative bias"]
    if part == "cross":  # decoder components ask, encoder components answer
        pairs = result.terms[result.terms["kind"] != "position"]
        assert all(c.startswith(("dec.", "cross.", "bias")) for c in pairs["query_component"])
        assert all(c.startswith(("enc.", "bias")) for c in pairs["key_component"])
    if name == "gemma2":
        assert any("before the cap" in note for note in result.notes)


def test_gpt2_embedding_terms_by_hand(folders):
    """Layer 0 reads tokens + positions through ln_1: the (embed, pos) term from eager GPT-2's weights."""
    model = load_pretrained(folders["gpt2"])
    ref = eager(folders["gpt2"]).double()
    ids = torch.tensor(encode(model, TEXT).ids)
    head, query, key, d = 1, 4, 2, 8
    result = score_terms(model, TEXT, 0, head, query, key)
    tok, pos = ref.transformer.wte.weight[ids], ref.transformer.wpe.weight[: len(ids)]
    ln = ref.transformer.h[0].ln_1
    x = tok + pos
    sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + ln.eps)

    def folded(c):
        return (c - c.mean(-1, keepdim=True)) / sigma * ln.weight

    w = ref.transformer.h[0].attn.c_attn.weight  # Conv1D [E, 3E]: x @ w
    wq, wk = w[:, head * d : (head + 1) * d], w[:, 32 + head * d : 32 + (head + 1) * d]
    expected = float(folded(tok)[query] @ wq @ (folded(pos)[key] @ wk)) / math.sqrt(d)
    terms = result.terms.set_index(["query_component", "key_component", "kind"])["term"]
    assert terms[("embed", "pos", "content")] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_pretrained_refuses_a_masked_pair(folders):
    model = load_pretrained(folders["gpt2"])
    with pytest.raises(ConfigError, match="does not see key"):
        score_terms(model, TEXT, 0, 0, 1, 3)
    with pytest.raises(ConfigError, match="reads text"):
        score_terms(model, [1, 2], 0, 0, 1, 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_family_sums_to_the_score(tmp_path, name):
    model = load_pretrained(build(name, tmp_path / name))
    parts = ("self", "decoder", "cross") if model.family == "encoder-decoder" else ("self",)
    for part in parts:
        target = "a dog" if model.family == "encoder-decoder" else None
        query = 3 if part == "self" else 1
        key = query - 1  # inside every sliding window
        result = score_terms(model, TEXT, model.layers[part] - 1, 1, query, key, part=part, target=target)
        assert abs(result.terms["term"].sum() - result.decomposed) <= 1e-9 * max(1.0, abs(result.decomposed))
        reference = _float32_scores(model, part, model.layers[part] - 1, target)[1, query, key]
        assert result.score == pytest.approx(float(reference), rel=1e-4, abs=1e-5)


def test_a_float64_copy_over_the_budget_is_refused_in_one_line(folders):
    model = load_pretrained(folders["gpt2"])
    with pytest.raises(ConfigError, match=r"float64 copy of .* over the memory budget"):
        score_terms(model, TEXT, 0, 0, 1, 0, memory_budget=1024)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"position": "rope", "num_heads": 4, "kv_heads": 2},
        {"position": "alibi", "num_heads": 4, "softcap": 2.0},
        {"position": "sinusoidal", "num_heads": 1, "hidden_dim": 16, "mask": "causal"},
    ],
)
def test_the_toy_modes_one_layer_model_decomposes(options):
    text = "the cat sat on the mat because it was tired"
    config = AttentionConfig(**options)
    result = score_terms(config, text, 0, 0, 5, 2)
    assert abs(result.terms["term"].sum() - result.decomposed) <= 1e-9 * max(1.0, abs(result.decomposed))
    masked = run_attention(config, text, keep_intermediates=True).intermediates.masked
    reference = masked[5, 2] if masked.ndim == 2 else masked[0, 5, 2]
    assert result.score == pytest.approx(float(reference), rel=1e-5, abs=1e-6)
    assert ("pos" in result.components) == (config.position == "sinusoidal")
    assert ("rope" in set(result.terms["kind"])) == (config.position == "rope")
    if config.mask == "causal":
        with pytest.raises(ConfigError, match="does not see key"):
            score_terms(config, text, 0, 0, 2, 5)
