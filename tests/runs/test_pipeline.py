"""run_attention, the config's validation, masks, positional encoding and the Qt-free boundary."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from attndesk.attention.positional import positional_similarity
from attndesk.core import AttentionConfig, ConfigError, causal_mask, padding_mask, run_attention, sinusoidal_encoding
from attndesk.runs.tokenizer import PAD, UNK_ID, WordTokenizer

TEXT = "The cat sat on the mat because it was tired."


def test_default_config_is_valid_and_runs():
    result = run_attention(AttentionConfig(), TEXT)
    cfg = result.config
    n = len(result.tokens)
    assert result.tokens[:3] == ["the", "cat", "sat"] and result.tokens[-1] == "."
    assert result.weights.shape == (cfg.num_heads, n, n) and result.weights.dtype == np.float32
    assert result.output.shape == (n, cfg.embed_dim)
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    assert list(result.timings) == [
        "embed",
        "projections",
        "attention",
        "weighted sum",
        "output projection",
        "total",
    ]
    assert result.timings["total"] == pytest.approx(sum(v for k, v in result.timings.items() if k != "total"))
    assert result.flops > 0 and result.peak_bytes > result.weights.nbytes
    assert result.device == "cpu"


def test_same_seed_same_weights_other_seed_differs():
    a = run_attention(AttentionConfig(seed=3), TEXT)
    b = run_attention(AttentionConfig(seed=3), TEXT)
    c = run_attention(AttentionConfig(seed=4), TEXT)
    assert np.array_equal(a.weights, b.weights)
    assert not np.allclose(a.weights, c.weights)


def test_pipeline_equals_recomputation_from_intermediates():
    cfg = AttentionConfig(num_heads=2, embed_dim=16, mask="padding+causal", pad_to=14, dtype="float64")
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    inter = result.intermediates  # float32 copies of the float64 run
    q, k, v = (torch.from_numpy(getattr(inter, n)).double() for n in ("q", "k", "v"))
    scores = q @ k.transpose(-2, -1)
    np.testing.assert_allclose(inter.scores, scores.numpy(), atol=1e-5)
    scaled = scores / math.sqrt(cfg.head_dim)
    np.testing.assert_allclose(inter.scaled, scaled.numpy(), atol=1e-5)
    mask = torch.from_numpy(result.mask)
    assert np.isneginf(inter.masked[:, ~result.mask]).all()
    weights = torch.softmax(scaled.masked_fill(~mask, float("-inf")), -1)
    np.testing.assert_allclose(result.weights, weights.numpy(), atol=1e-6)
    np.testing.assert_allclose(inter.context, (weights @ v).numpy(), atol=1e-6)


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "padding+causal"])
def test_masks_in_the_pipeline(kind):
    cfg = AttentionConfig(mask=kind, pad_to=15)
    result = run_attention(cfg, TEXT)
    w, n_real = result.weights, 11
    if "causal" in kind:
        assert np.all(np.triu(w, k=1) == 0)
    if "padding" in kind:
        assert np.all(w[:, :, n_real:] == 0), "padded keys must get no weight"
        assert result.tokens[n_real:] == [PAD] * 4
    if kind == "none":
        assert result.mask is None and np.all(w > 0)
    else:
        assert np.all(w[:, ~result.mask] == 0)


def test_unscaled_variant_is_sharper():
    scaled = run_attention(AttentionConfig(scaled=True, embed_dim=256), TEXT)
    unscaled = run_attention(AttentionConfig(scaled=False, embed_dim=256), TEXT)
    assert unscaled.weights.max(-1).mean() > scaled.weights.max(-1).mean()


def test_single_head_uses_hidden_dim():
    result = run_attention(AttentionConfig(num_heads=1, embed_dim=32, hidden_dim=12), TEXT, keep_intermediates=True)
    assert result.weights.shape == (1, 11, 11)
    assert result.output.shape == (11, 12)
    assert result.intermediates.q.shape == (1, 11, 12)


def test_cross_attention_from_a_second_text():
    result = run_attention(AttentionConfig(mask="padding"), "where is the cat ?", key_text=TEXT)
    assert result.weights.shape == (4, 5, 11) and result.keys[1] == "cat"
    with pytest.raises(ConfigError, match="causal"):
        run_attention(AttentionConfig(mask="causal"), "a b", key_text="c d")


def test_dropout_in_training_mode_only():
    cfg = AttentionConfig(dropout=0.5, training=True, mask="none")
    a, b = run_attention(cfg, TEXT), run_attention(cfg, TEXT)
    assert np.array_equal(a.weights, b.weights), "dropout must repeat for a seed"
    assert (a.weights == 0).any()
    ev = run_attention(cfg.replace(training=False), TEXT)
    assert not (ev.weights == 0).any()


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_other_dtypes(dtype):
    result = run_attention(AttentionConfig(dtype=dtype), TEXT)
    assert result.weights.dtype == np.float32
    np.testing.assert_allclose(
        result.weights.sum(-1), 1.0, atol=2e-2 if dtype == "bfloat16" else 1e-6
    )  # weights come back as float32


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(num_heads=6, embed_dim=512), "valid head counts: 1, 2, 4, 8, 16, 32, 64, 128, 256, 512"),
        (dict(embed_dim=0), "embed_dim must be a positive"),
        (dict(hidden_dim=-3), "hidden_dim must be a positive"),
        (dict(num_heads=0), "num_heads must be a positive"),
        (dict(vocab_size=0), "vocab_size must be at least 3"),
        (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
        (dict(dropout=-0.1), r"dropout must be in \[0, 1\)"),
        (dict(mask="diagonal"), "unknown mask 'diagonal'; choose one of: none, padding, causal, padding\\+causal"),
        (dict(dtype="float16"), "unknown dtype 'float16'; choose one of: float32, float64, bfloat16"),
        (dict(device="tpu"), "unknown device 'tpu'"),
        (dict(pad_to=0), "pad_to must be a positive"),
        (dict(seed=-1), "seed must be"),
    ],
)
def test_config_errors_are_actionable(changes, message):
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(**changes).validate()


def test_unavailable_device_names_the_available_ones():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ConfigError, match=r"device 'cuda' is not available \(.*\); available: cpu"):
        AttentionConfig(device="cuda").validate()


def test_auto_device_picks_an_available_one():
    assert run_attention(AttentionConfig(device="auto"), "hi there").device in {"cpu", "cuda", "cuda:0", "mps"}


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_is_refused(text):
    with pytest.raises(ConfigError, match="type some text"):
        run_attention(AttentionConfig(), text)


def test_over_budget_takes_the_bounded_path_and_says_so():
    result = run_attention(AttentionConfig(memory_budget=10_000), TEXT * 10)
    assert result.plan.kind == "pyramid"
    assert result.shape == (110, 110)
    assert any("exceed" in notice for notice in result.notices), result.notices
    full = run_attention(AttentionConfig(), TEXT * 10)
    assert result.weight_at(2, 57, 13) == pytest.approx(float(full.weights[2, 57, 13]), abs=1e-6)


def test_config_dict_round_trip_and_unknown_fields():
    cfg = AttentionConfig(num_heads=8, mask="causal", pad_to=20)
    assert AttentionConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown configuration field"):
        AttentionConfig.from_dict({"heads": 3})


def test_mask_helpers():
    ids = torch.tensor([[5, 6, 0, 0]])
    pm = padding_mask(ids)
    assert pm.shape == (1, 1, 1, 4) and pm.dtype == torch.bool
    assert pm[0, 0, 0].tolist() == [True, True, False, False]
    cm = causal_mask(3)
    assert cm.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    both = pm & causal_mask(4)
    assert both.shape == (1, 1, 4, 4) and not both[0, 0, 3, 2] and both[0, 0, 3, 1]


@pytest.mark.parametrize("dim", [6, 7, 64])
def test_sinusoidal_encoding_matches_the_formula(dim):
    pe = sinusoidal_encoding(50, dim, dtype=torch.float64)
    assert pe.shape == (50, dim)
    for pos in (0, 1, 17, 49):
        for j in range(dim):
            i = j // 2
            angle = pos / 10000 ** (2 * i / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[pos, j].item() == pytest.approx(expected, abs=1e-12)


def test_positional_similarity_depends_on_distance():
    sim = positional_similarity(sinusoidal_encoding(40, 32, dtype=torch.float64))
    assert sim[3, 7].item() == pytest.approx(sim[20, 24].item(), abs=1e-9)
    assert sim[5, 5].item() == pytest.approx(16.0)


def test_tokenizer_ids_pad_and_unknown():
    tok = WordTokenizer(vocab_size=100)
    encoded = tok.encode("The zyzzyva!", pad_to=5)
    assert encoded.tokens == ["the", "zyzzyva", "!", PAD, PAD]
    assert encoded.ids[1] == UNK_ID and encoded.unknown == [False, True, False, False, False]
    assert encoded.ids[3:] == [0, 0]
    assert all(0 <= i < 100 for i in encoded.ids)


@pytest.mark.slow  # a fresh interpreter or a large allocation: make test, not test-fast
def test_core_imports_without_qt():
    """attndesk.core must work where PySide6/pyqtgraph cannot even be imported."""
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in {'PySide6', 'pyqtgraph', 'shiboken6', 'PyQt5', 'PyQt6', 'superqt'}:
                    raise ImportError('Qt is blocked in this test: ' + name)
        sys.meta_path.insert(0, Block())
        import importlib, pkgutil
        import attndesk.core as core
        for info in pkgutil.walk_packages(core.__path__, 'attndesk.core.'):
            importlib.import_module(info.name)  # every core module, present and future
        r = core.run_attention(core.AttentionConfig(), 'qt free')
        assert r.weights.shape[1:] == (2, 2)
        assert not any(m.split('.')[0] in {'PySide6', 'pyqtgraph'} for m in sys.modules)
        print('ok')
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_toy_model_cache_keeps_what_fits_half_the_memory_budget():
    """A toy model may be as large as the budget: the cache keeps the newest, and older ones only
    while together they fit in half the budget (at most four)."""
    from attndesk.runs import pipeline

    pipeline._models.clear()
    small = AttentionConfig(embed_dim=64, num_heads=4, vocab_size=4096)
    model_bytes = sum(
        p.numel() * p.element_size() for p in pipeline.build_model(small, torch.device("cpu")).parameters()
    )
    for seed in range(1, 6):
        pipeline.build_model(small.replace(seed=seed), torch.device("cpu"))
    assert len(pipeline._models) == 4  # all fit: the count bounds them
    tight = small.replace(seed=99, memory_budget=3 * model_bytes)  # half of it holds one model
    newest = pipeline.build_model(tight, torch.device("cpu"))
    assert list(pipeline._models.values()) == [newest]
    pipeline._models.clear()


def test_a_prepared_text_runs_without_tokenizing_or_checking_memory_again(monkeypatch):
    from attndesk.runs import pipeline

    cfg = AttentionConfig(num_heads=2, embed_dim=16)
    plain = run_attention(cfg, TEXT, key_text="a mat")
    prepared = pipeline.prepare_text(cfg, TEXT, "a mat")
    calls = {"encode": 0, "check_memory": 0}
    encode, check = WordTokenizer.encode, pipeline.check_memory
    monkeypatch.setattr(
        WordTokenizer, "encode", lambda *a, **k: calls.__setitem__("encode", calls["encode"] + 1) or encode(*a, **k)
    )
    monkeypatch.setattr(
        pipeline, "check_memory", lambda *a: calls.__setitem__("check_memory", calls["check_memory"] + 1) or check(*a)
    )
    again = run_attention(cfg, TEXT, key_text="a mat", prepared=prepared)
    assert calls == {"encode": 0, "check_memory": 0}
    np.testing.assert_array_equal(again.weights, plain.weights)
    assert again.key_tokens == plain.key_tokens == ["a", "mat"] and again.plan is prepared.plan
    # prepared for other arguments (another text, or a full run without its intermediates): prepared again
    other = run_attention(cfg, "the dog ran", prepared=prepared)
    assert other.tokens == ["the", "dog", "ran"] and calls == {"encode": 1, "check_memory": 1}
    kept = run_attention(cfg, TEXT, True, key_text="a mat", prepared=prepared)
    assert kept.plan.intermediates and kept.intermediates is not None and calls["check_memory"] == 2
    np.testing.assert_array_equal(kept.weights, plain.weights)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"num_heads": 1, "hidden_dim": 32},
        {"bias": False},
        {"num_heads": 4, "kv_heads": 2},
        {"dtype": "float64"},
    ],
)
def test_draw_model_gives_the_weights_of_the_seeded_construction_bit_for_bit(changes):
    """The cache's draw (a generator of its own, modules made without storage) against the plain
    construction after torch.manual_seed: every parameter equal, torch's global generator untouched."""
    from attndesk.runs import pipeline

    config = AttentionConfig(embed_dim=32, vocab_size=700, seed=41, **changes)
    before = torch.get_rng_state()
    drawn = pipeline.draw_model(config).to(dtype=config.torch_dtype).state_dict()
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(config.seed)
    reference = pipeline.ToyModel(config).to(dtype=config.torch_dtype).state_dict()
    assert drawn.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(drawn[name], tensor), name
    assert torch.count_nonzero(drawn["embedding.weight"][0]) == 0  # the padding row


def test_a_prefetched_neighbour_seed_runs_exactly_as_a_fresh_draw(monkeypatch):
    """After a run, the seeds beside it are drawn in the background; the next seed's run takes that
    model (no draw of its own) and its numbers equal a run on a freshly drawn model."""
    from attndesk.runs import pipeline

    config = AttentionConfig(embed_dim=32, num_heads=4, vocab_size=900, seed=20)
    pipeline._models.clear()
    run_attention(config, TEXT)
    pipeline.prefetch_neighbours(config)
    assert pipeline.prefetch_idle(30.0)
    assert len(pipeline.cached_models()) == 3
    for seed in (19, 21):
        kept = pipeline._models[pipeline._model_key(config.replace(seed=seed), torch.device("cpu"))]
        fresh = pipeline.draw_model(config.replace(seed=seed)).state_dict()
        assert all(torch.equal(kept.state_dict()[k], v) for k, v in fresh.items())

    def no_draw(config):
        raise AssertionError("the prefetched model was drawn again")

    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "draw_model", no_draw)
        prefetched = run_attention(config.replace(seed=21), TEXT)
    pipeline._models.clear()
    fresh = run_attention(config.replace(seed=21), TEXT)
    assert np.array_equal(prefetched.weights, fresh.weights)
    assert np.array_equal(prefetched.output, fresh.output)
    pipeline._models.clear()


def test_no_prefetch_where_the_neighbours_would_crowd_out_the_model_in_use():
    """Three models of this size do not fit in half the budget: nothing is drawn in the background,
    and the model in use stays."""
    from attndesk.runs import pipeline

    config = AttentionConfig(embed_dim=32, num_heads=4, vocab_size=900, seed=5)
    pipeline._models.clear()
    model = pipeline.build_model(config, torch.device("cpu"))
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    pipeline.prefetch_neighbours(config.replace(memory_budget=5 * model_bytes))  # half: 2.5 models
    assert pipeline.prefetch_idle(30.0)
    assert pipeline.cached_models() == [model]
    pipeline._models.clear()


def test_a_model_being_drawn_is_waited_for_not_drawn_twice(monkeypatch):
    """Two threads asking for one model at once: one draws, the other takes its model."""
    import threading

    from attndesk.runs import pipeline

    config = AttentionConfig(embed_dim=32, num_heads=4, vocab_size=900, seed=8)
    pipeline._models.clear()
    drawing, release, draws = threading.Event(), threading.Event(), []
    plain = pipeline.draw_model

    def slow_draw(config):
        draws.append(config.seed)
        drawing.set()
        assert release.wait(30.0)
        return plain(config)

    class Watched(dict):
        """The models being drawn; ``asked`` once the second thread found its model among them."""

        asked = threading.Event()

        def get(self, key, default=None):
            found = super().get(key, default)
            if found is not None and threading.current_thread() is second:
                self.asked.set()
            return found

    monkeypatch.setattr(pipeline, "draw_model", slow_draw)
    monkeypatch.setattr(pipeline, "_drawing", Watched())
    got: list = []
    first = threading.Thread(target=lambda: got.append(pipeline.build_model(config, torch.device("cpu"))))
    first.start()
    assert drawing.wait(30.0)
    second = threading.Thread(target=lambda: got.append(pipeline.build_model(config, torch.device("cpu"))))
    second.start()
    assert Watched.asked.wait(30.0)  # the second asks while the first still draws
    release.set()
    first.join(30.0)
    second.join(30.0)
    assert not first.is_alive() and not second.is_alive()
    assert draws == [8] and len(got) == 2 and got[0] is got[1]
    pipeline._models.clear()


@pytest.mark.slow
def test_the_interpreter_exits_cleanly_while_a_prefetch_draws():
    """Exiting at once after asking for a prefetch of large models: the draw under way finishes
    before torch is torn down (a thread inside torch then aborts the process)."""
    script = textwrap.dedent(
        """
        from attndesk.core import AttentionConfig, run_attention
        from attndesk.core import pipeline
        config = AttentionConfig(embed_dim=512, num_heads=8, vocab_size=65536)
        run_attention(config, 'exit while drawing')
        pipeline.prefetch_neighbours(config)
        with pipeline._prefetch_lock:
            assert pipeline._prefetch_lock.wait_for(lambda: pipeline._held.prefetching, timeout=60)
        print('ok')
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and "terminate" not in done.stderr
