"""Random checkpoints of 25 architectures across the three families, run by transformers with
attndesk's attention: every layer's weights (and the model's outputs) equal transformers' own
eager attention with ``output_attentions=True``; masks, windows, soft-caps, grouped K/V heads,
intermediates, ablation, layer maps and the generation stepper are checked on real arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pretrained_models import CONFIGS, build, eager

from attndesk.errors import Cancelled, ConfigError
from attndesk.models import Generator, clear_cache, load_pretrained, run_pretrained
from attndesk.models.loader import transformers_offline

TEXT = "the cat sat on the mat and looked at the dog"
TARGET = "a dog sat on a mat"
TOL = 1e-5


class _Folders(dict):
    """Checkpoints built on first use (a test run with -k builds only what it needs)."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, name):
        self[name] = build(name, self.root / name)
        return self[name]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Each architecture's checkpoint, built once for the module."""
    transformers_offline()
    return _Folders(tmp_path_factory.mktemp("families"))


@pytest.fixture(scope="module")
def models(folders):
    loaded: dict = {}

    def get(name):
        if name not in loaded:
            loaded[name] = (load_pretrained(folders[name]), eager(folders[name]))
        return loaded[name]

    yield get
    for name in folders:
        clear_cache(folders[name])


def _eager_run(reference, result):
    ids = torch.from_numpy(result.token_ids)[None]
    extra = {} if result.target_ids is None else {"decoder_input_ids": torch.from_numpy(result.target_ids)[None]}
    with torch.inference_mode():
        return reference(input_ids=ids, output_attentions=True, output_hidden_states=True, **extra)


def _assert_layers_equal(ours: np.ndarray, theirs, what: str) -> None:
    assert ours.shape[0] == len(theirs) and ours.dtype == np.float32
    for n, layer in enumerate(theirs):
        np.testing.assert_allclose(ours[n], layer[0].numpy(), atol=TOL, rtol=0, err_msg=f"{what} layer {n}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_weights_equal_transformers_eager_layer_by_layer(models, name):
    model, reference = models(name)
    target = TARGET if model.family == "encoder-decoder" else None
    result = run_pretrained(model, TEXT, target=target)
    out = _eager_run(reference, result)
    if model.family == "encoder-decoder":
        _assert_layers_equal(result.weights, out.encoder_attentions, "encoder")
        _assert_layers_equal(result.decoder_weights, out.decoder_attentions, "decoder")
        _assert_layers_equal(result.cross_weights, out.cross_attentions, "cross")
        assert result.cross_weights.shape[2:] == (len(result.target_tokens), result.length)
    else:
        _assert_layers_equal(result.weights, out.attentions, "self")
    hidden = out.encoder_hidden_states if model.family == "encoder-decoder" else out.hidden_states
    np.testing.assert_allclose(result.hidden_states, np.stack([h[0].numpy() for h in hidden]), atol=TOL)
    if model.family == "encoder":
        pooled = torch.nn.functional.normalize(out.last_hidden_state[0].mean(0), dim=-1).numpy()
        np.testing.assert_allclose(result.embedding, pooled, atol=TOL)
    else:
        logprobs = torch.log_softmax(out.logits[0, -1], dim=-1).numpy()
        np.testing.assert_allclose(result.next_token.logprobs, logprobs, atol=1e-4)
        assert result.next_token.ids[0] == int(np.argmax(logprobs))
    assert result.family == model.family and result.tokens[0] == "[CLS]" and result.special[0]


def test_grouped_query_heads_read_their_kv_head(models):
    model, _ = models("llama")  # 4 query heads over 2 K/V heads: heads 0-1 read kv 0, heads 2-3 kv 1
    result = run_pretrained(model, TEXT, layer=1)
    stages = result.intermediates["self"]
    assert (model.num_heads, model.kv_heads, result.kv_heads) == (4, 2, 2)
    assert stages.q.shape[0] == 4 and stages.k.shape[0] == 2 and stages.v.shape[0] == 2
    for head in range(4):
        np.testing.assert_allclose(stages.scores[head], stages.q[head] @ stages.k[head // 2].T, atol=1e-5)
    np.testing.assert_array_equal(stages.weights, result.weights[1])
    amap = result.layer_map(1)
    assert amap.kv_heads == 2 and amap.groups == 2 and amap.kv_head_of(3) == 1


def test_rotary_intermediates_before_and_after(models):
    model, _ = models("llama")
    stages = run_pretrained(model, TEXT, layer=0).intermediates["self"]
    assert stages.q_raw is not None and stages.k_raw.shape == stages.k.shape
    # position 0 is not rotated (cos 1, sin 0); every later position is
    np.testing.assert_allclose(stages.q_raw[:, 0], stages.q[:, 0], atol=1e-6)
    assert np.abs(stages.q_raw[:, 1:] - stages.q[:, 1:]).max() > 1e-3
    # rotation keeps each query's length
    np.testing.assert_allclose(np.linalg.norm(stages.q_raw, axis=-1), np.linalg.norm(stages.q, axis=-1), atol=1e-5)
    assert run_pretrained(models("gpt2")[0], TEXT, layer=0).intermediates["self"].q_raw is None  # no rotary


def test_sliding_window_layers_and_masks(models):
    model, _ = models("gemma2")  # layer 0 local (window 3), layer 1 global; soft-capped at 5
    result = run_pretrained(model, TEXT, layer=0)
    assert result.layer_kinds == ["local", "global"] and result.window == [3, None]
    n = result.length
    i, j = np.indices((n, n))
    np.testing.assert_array_equal(result.layer_mask(0), (j <= i) & (i - j < 3))
    np.testing.assert_array_equal(result.layer_mask(1), j <= i)
    np.testing.assert_array_equal(result.mask, j <= i)  # the first global layer's
    assert np.all(result.weights[0][:, ~result.layer_mask(0)] == 0.0)
    assert result.weights[1][:, i - j >= 3].max() > 0  # the global layer sees far back
    local = result.layer_map(0)
    assert (local.layer_kind, local.window, local.kv_heads) == ("local", 3, 2)
    assert "causal mask, window 3" in local.summary
    capped = result.intermediates["self"].capped
    assert capped is not None and np.abs(capped).max() <= 5.0
    np.testing.assert_allclose(capped, 5.0 * np.tanh(result.intermediates["self"].scaled / 5.0), atol=1e-5)


def test_mistral_window_and_multi_query(models):
    model, _ = models("mistral")
    result = run_pretrained(model, TEXT)
    assert model.kv_heads == 1 and result.layer_kinds == ["local", "local"] and result.window == [3, 3]
    assert (result.weights > 0).sum(-1).max() == 3  # no query sees more than 3 keys


def test_encoder_local_attention_is_banded(models):
    model, _ = models("modernbert")
    result = run_pretrained(model, TEXT)
    assert result.layer_kinds == ["global", "local", "local"] and result.window == [None, 3, 3]
    n = result.length
    i, j = np.indices((n, n))
    np.testing.assert_array_equal(result.layer_mask(1), np.abs(i - j) < 3)
    assert result.layer_mask(0) is None and result.mask is None


def test_decoder_ablation_reports_next_token_change(models):
    model, _ = models("llama")
    normal = run_pretrained(model, TEXT)
    altered = run_pretrained(model, TEXT, ablate=[(1, 2), (0, 0)])
    assert altered.ablate == ((0, 0), (1, 2)) and altered.altered
    assert altered.kl_to_normal > 0 and altered.cosine_to_normal is None
    np.testing.assert_array_equal(altered.normal_next.logprobs, normal.next_token.logprobs)
    p = np.exp(normal.next_token.logprobs.astype(np.float64))
    expected = float(np.sum(p * (normal.next_token.logprobs - altered.next_token.logprobs)))
    assert altered.kl_to_normal == pytest.approx(expected, rel=1e-4)
    assert len(altered.normal_next.top()) == 5 and len(altered.next_token.top()) == 5
    np.testing.assert_array_equal(altered.weights[0], normal.weights[0])  # ablation acts after layer 0's weights
    assert np.abs(altered.weights[1] - normal.weights[1]).max() > 1e-4
    assert "KL to normal" in altered.summary(1)


def test_ablated_head_contributes_nothing(models):
    model, _ = models("llama")
    stages = run_pretrained(model, TEXT, layer=1, ablate=[(1, 2)]).intermediates["self"]
    # the stored context is attend's; the module's output equals o_proj of the context with head 2 zeroed
    context = stages.context.copy()
    context[2] = 0.0
    o_proj = model.model.model.layers[1].self_attn.o_proj
    merged = torch.from_numpy(context).permute(1, 0, 2).reshape(context.shape[1], -1)  # [H, L, d] -> [L, H*d]
    np.testing.assert_allclose(stages.output, o_proj(merged).detach().numpy(), atol=1e-5)


def test_encoder_decoder_parts_and_maps(models):
    model, _ = models("t5")
    result = run_pretrained(model, TEXT, target=TARGET)
    assert result.parts() == ("self", "decoder", "cross")
    cross = result.layer_map(1, part="cross")
    assert cross.queries == result.target_tokens and cross.keys == result.tokens and cross.mask is None
    assert cross.weights.shape == (4, len(result.target_tokens), result.length) and cross.kv_heads is None
    decoder = result.layer_map(0, part="decoder")
    t = len(result.target_tokens)
    np.testing.assert_array_equal(decoder.mask, np.tril(np.ones((t, t), bool)))
    assert "cross-attention" in cross.title and cross.file_tag.endswith("layer1_cross")
    hidden = result.layer_map(1, part="cross", hide_special=True)
    assert "[CLS]" not in hidden.keys and "[SEP]" not in hidden.queries
    assert result.layer_map(0).mask is None  # the encoder's self-attention is not causal
    no_target = run_pretrained(model, TEXT)
    assert len(no_target.target_tokens) == 1 and no_target.notices[-1].startswith("no target text")
    stages = run_pretrained(model, TEXT, target=TARGET, layer=0).intermediates
    assert set(stages) == {"self", "decoder", "cross"} and stages["self"].bias is not None  # T5's relative bias


def test_target_for_a_decoder_is_refused(models):
    model, _ = models("gpt2")
    with pytest.raises(ConfigError, match="gpt2 is a decoder model: a target text needs an encoder-decoder"):
        run_pretrained(model, TEXT, target="x")
    with pytest.raises(ConfigError, match="cannot ablate a 'cross' head"):
        run_pretrained(model, TEXT, ablate=[("cross", 0, 0)])


def test_hide_first_token_and_renormalise(models):
    model, _ = models("gpt2")
    result = run_pretrained(model, TEXT)
    kept = result.layer_map(1, hide_first=True)
    full = result.weights[1]
    np.testing.assert_array_equal(kept.weights, full[:, 1:, 1:])
    np.testing.assert_allclose(kept.hidden_mass, full[:, 1:, 0], atol=1e-6)
    assert "NOT re-normalised" in kept.legend
    renormalised = result.layer_map(1, hide_first=True, renormalise=True)
    np.testing.assert_allclose(renormalised.weights.sum(-1), 1.0, atol=1e-5)
    assert "renormalised" in renormalised.legend and kept.queries == result.tokens[1:]


def _full_rows(reference, generator):
    """The eager model's attention over the whole generated sequence (no cache)."""
    ids = torch.tensor([generator.ids])
    with torch.inference_mode():
        if generator.model.family == "encoder-decoder":
            out = reference(
                input_ids=torch.tensor([generator.source.ids]), decoder_input_ids=ids, output_attentions=True
            )
            return out, out.decoder_attentions, out.cross_attentions
        out = reference(input_ids=ids, output_attentions=True)
        return out, out.attentions, None


@pytest.mark.parametrize("name", ["mistral", "gemma2", "t5"])
def test_generation_steps_equal_a_full_forward(models, name):
    model, reference = models(name)
    target = "a" if model.family == "encoder-decoder" else None
    generator = Generator(model, "the cat sat on", target=target, top=3, max_new_tokens=6)
    steps = generator.run(6)
    assert len(steps) == 6 and steps[-1].finished and generator.finished
    out, attentions, cross = _full_rows(reference, generator)
    for step in steps:
        q = step.query_position
        assert step.attention.shape == (len(attentions), 4, q + 1)  # sliding-window layers too: right-aligned
        np.testing.assert_allclose(
            step.attention, np.stack([a[0, :, q, : q + 1].numpy() for a in attentions]), atol=TOL
        )
        if cross is not None:
            np.testing.assert_allclose(step.cross_attention, np.stack([c[0, :, q].numpy() for c in cross]), atol=TOL)
        probs = torch.softmax(out.logits[0, q], -1)
        assert step.token_id == int(probs.argmax()) and step.probability == pytest.approx(float(probs.max()), rel=1e-4)
        assert step.distribution.ids[0] == step.token_id and len(step.distribution.probs) == 3
    with pytest.raises(ConfigError, match="generation has finished"):
        generator.step()


def test_sampling_is_seeded_and_cancel_keeps_the_state(models):
    model, _ = models("llama")
    runs = [Generator(model, "the cat", sampling="sample", temperature=1.5, top_k=50, seed=7).run(5) for _ in range(2)]
    assert [s.token_id for s in runs[0]] == [s.token_id for s in runs[1]]
    greedy = Generator(model, "the cat")
    expected = [s.token_id for s in Generator(model, "the cat").run(3)]
    greedy.step()
    calls = []

    def cancel_midway():
        calls.append(1)
        return len(calls) == 2  # inside the forward pass, after layer 0 started

    with pytest.raises(Cancelled):
        greedy.step(should_cancel=cancel_midway)
    assert len(greedy.steps) == 1
    assert [greedy.step().token_id, greedy.step().token_id] == expected[1:]  # nothing half-done survived
    with pytest.raises(ConfigError, match="temperature must be a positive number"):
        Generator(model, "x", sampling="sample", temperature=0)
    seen = []
    Generator(model, "the cat").run(3, progress=lambda f, m: seen.append(f))
    assert seen == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_the_unaltered_runs_cache_never_answers_for_another_model(tmp_path, monkeypatch):
    """Two models whose id() coincide (an id is reused once its object is freed; emulated here by
    giving every object the same id): each altered run compares with its own model's normal run."""
    from attndesk.models import run as run_module

    monkeypatch.setattr(run_module, "id", lambda obj: 7, raising=False)
    first, second = (load_pretrained(build("llama", tmp_path / f"llama{seed}", seed=seed)) for seed in (1, 2))
    try:
        assert run_pretrained(first, TEXT, ablate=[(0, 1)]).normal_next is not None  # first's normal run is cached
        altered = run_pretrained(second, TEXT, ablate=[(0, 1)])
        expected = run_pretrained(second, TEXT).next_token.logprobs
        np.testing.assert_allclose(altered.normal_next.logprobs, expected, atol=1e-6)
        assert first.serial != second.serial
    finally:
        clear_cache(first.path)
        clear_cache(second.path)
