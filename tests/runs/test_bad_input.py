"""Bad input to the core API: every case gets one line that says what to change, raised before
anything large is allocated (sizes are checked against the memory budget and a fixed free memory)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from attndesk.attention.kernel import attend, scaled_dot_product_attention
from attndesk.checks import check_finite_tensors
from attndesk.core import AttentionConfig, MultiHeadAttention, SingleHeadAttention, run_attention
from attndesk.errors import ConfigError, ConfigTypeError
from attndesk.runs import memory
from attndesk.runs.memory import estimate_parameters, estimate_run
from attndesk.runs.pipeline import plan_text
from attndesk.runs.plan import plan_run
from attndesk.system import free_memory
from attndesk.teaching.compare import compare_implementations, teaching_comparison

GIB = 2**30
FREE = 8 * GIB  # the free memory every test here sees


@pytest.fixture(autouse=True)
def fixed_free_memory(monkeypatch):
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: FREE)


def _config(**changes) -> AttentionConfig:
    return AttentionConfig(memory_budget=2 * GIB, **changes)


CONFIG_CASES = [
    # sizes: one line with what fits, from arithmetic alone
    (
        dict(embed_dim=10**9),
        ConfigError,
        "embed dim 1,000,000,000 needs 13.9 EiB for the Q/K/V/output projections "
        "(24.3 EiB in all); at most 7,664 fits in the 2.0 GiB memory budget",
    ),
    (dict(embed_dim=10**6), ConfigError, "embed dim 1,000,000 needs 14.6 TiB"),
    (
        dict(vocab_size=10**9),
        ConfigError,
        "vocab size 1,000,000,000 needs 238.4 GiB for the embedding table; "
        "at most 8,388,156 fits in the 2.0 GiB memory budget",
    ),
    (
        dict(num_heads=1, hidden_dim=10**9),
        ConfigError,
        "hidden dim 1,000,000,000 needs 726.4 GiB for the Q/K/V projections; at most 2,747,806 fits",
    ),
    (
        dict(pad_to=10**8),
        ConfigError,
        "pad_to 100,000,000 needs at least 125.2 GiB for the token embeddings and "
        "projections; at most 6,391,320 tokens fit in the 8.0 GiB of free memory",
    ),
    (dict(embed_dim=10**9, num_heads=3), ConfigError, "at most 7,664 fits"),  # the size, not 100 divisors
    (dict(num_heads=10**9), ConfigError, "1,000,000,000 heads do not divide embed_dim 64; valid head counts: 1, 2, 4"),
    # types: bools are bools, ints are not bools, numbers are finite
    (dict(scaled="no"), ConfigTypeError, "scaled must be true or false, got 'no' (str)"),
    (dict(position=1), ConfigError, "unknown position 1; choose one of: sinusoidal, rope, alibi, none"),
    (dict(kv_heads="2"), ConfigTypeError, "kv_heads must be a positive whole number, got '2' (str)"),
    (dict(window=True), ConfigTypeError, "window must be a positive whole number, got True (bool)"),
    (dict(softcap="5"), ConfigTypeError, "softcap must be a number or None, got '5' (str)"),
    (dict(training="yes"), ConfigTypeError, "training must be true or false"),
    (dict(bias=None), ConfigTypeError, "bias must be true or false, got None (None)"),
    (dict(embed_dim=True), ConfigTypeError, "embed_dim must be a positive whole number, got True (bool)"),
    (dict(embed_dim=64.0), ConfigTypeError, "embed_dim must be a positive whole number, got 64.0 (float)"),
    (dict(num_heads="4"), ConfigTypeError, "num_heads must be a positive whole number, got '4' (str)"),
    (dict(num_heads=0), ConfigError, "num_heads must be a positive whole number, got 0"),
    (dict(hidden_dim=-1), ConfigError, "hidden_dim must be a positive whole number, got -1"),
    (dict(vocab_size=2), ConfigError, "vocab_size must be at least 3"),
    (dict(dropout=math.nan), ConfigError, "dropout must be in [0, 1), got nan"),
    (dict(dropout=math.inf), ConfigError, "dropout must be in [0, 1), got inf"),
    (dict(dropout=True), ConfigTypeError, "dropout must be a number in [0, 1), got True (bool)"),
    (dict(dropout="0.1"), ConfigTypeError, "dropout must be a number in [0, 1), got '0.1' (str)"),
    (
        dict(seed=10**5000),
        ConfigError,
        "seed must be a whole number >= 0 and at most 9,223,372,036,854,775,807, got a 5,001-digit number",
    ),
    (dict(seed=1.5), ConfigTypeError, "seed must be a whole number >= 0"),
    (dict(pad_to=True), ConfigTypeError, "pad_to must be a positive whole number, got True (bool)"),
    (dict(pad_to=0), ConfigError, "pad_to must be a positive whole number, got 0"),
    (dict(mask=None), ConfigError, "unknown mask None; choose one of: none, padding, causal, padding+causal"),
    (dict(mask=["causal"]), ConfigError, "unknown mask ['causal']"),
    (dict(dtype="float16"), ConfigError, "unknown dtype 'float16'; choose one of: float32, float64, bfloat16"),
    (dict(device=3), ConfigError, "unknown device 3; choose one of: auto, cpu, cuda, mps"),
]


@pytest.mark.parametrize("changes, kind, fragment", CONFIG_CASES, ids=[c[2][:50] for c in CONFIG_CASES])
def test_bad_config_values_get_one_line(changes, kind, fragment):
    with pytest.raises(kind) as info:
        _config(**changes).validate()
    message = str(info.value)
    assert fragment in message and "\n" not in message, message


@pytest.mark.perf
def test_bad_config_values_are_refused_before_any_allocation():
    for changes, kind, _fragment in CONFIG_CASES:
        start = time.perf_counter()
        with pytest.raises(kind):
            _config(**changes).validate()
        assert time.perf_counter() - start < 1.0, changes  # arithmetic only: nothing was allocated


@pytest.mark.parametrize(
    "changes", [dict(memory_budget=True), dict(memory_budget=1.5), dict(memory_budget=0), dict(memory_budget=math.inf)]
)
def test_bad_memory_budgets(changes):
    with pytest.raises(ConfigError, match="memory_budget must be a positive whole number"):
        AttentionConfig(**changes).validate()


def test_a_wrong_type_is_both_a_config_error_and_a_type_error():
    with pytest.raises(TypeError):
        AttentionConfig(scaled="no").validate()
    with pytest.raises(ValueError):
        AttentionConfig(scaled="no").validate()


def test_what_fits_really_fits_and_one_more_does_not():
    config = _config()
    limit = 2 * GIB
    assert estimate_parameters(config.replace(embed_dim=7664)).total <= limit
    assert estimate_parameters(config.replace(embed_dim=7665)).total > limit
    _config(embed_dim=7664, num_heads=8).validate()  # and the config is accepted
    assert memory.minimum_run_bytes(config, 6_391_320) <= FREE < memory.minimum_run_bytes(config, 6_391_321)


def test_the_parameter_estimate_is_the_model_built(monkeypatch):
    from attndesk.runs.pipeline import ToyModel

    for config in (_config(), _config(num_heads=1, hidden_dim=24, bias=False), _config(embed_dim=48, num_heads=3)):
        model = ToyModel(config)
        built = sum(p.numel() * p.element_size() for p in model.parameters())
        estimate = estimate_parameters(config)
        assert estimate.embedding + estimate.projections == built


def test_the_parameter_limit_is_the_free_memory_when_smaller(monkeypatch):
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 300 * 2**20)
    with pytest.raises(ConfigError, match=r"embed dim 4,096 needs .* fits in the 300\.0 MiB of free memory"):
        _config(embed_dim=4096).validate()


def test_a_vocabulary_as_far_over_as_the_embed_dim_is_the_one_named(monkeypatch):
    """The embedding table grows with both: 32,898,547 words at the default embed dim of 64 are as
    far over 3 GiB as the embed dim is, and the message names the vocabulary (the value a person
    raised), with the largest that fits."""
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 3 * GIB)
    with pytest.raises(ConfigError) as info:
        AttentionConfig(vocab_size=32_898_547, memory_budget=2**50).validate()
    assert info.value.field == "vocab_size"
    assert str(info.value).startswith("vocab size 32,898,547 needs 7.8 GiB for the embedding table; at most ")
    fit = int(str(info.value).split("at most ")[1].split()[0].replace(",", ""))
    AttentionConfig(vocab_size=fit, memory_budget=2**50).validate()
    with pytest.raises(ConfigError):
        AttentionConfig(vocab_size=fit + 1, memory_budget=2**50).validate()


def test_a_tiny_budget_still_allows_a_toy_model():
    # tests and benchmarks force blocked runs with budgets of a few KiB: the model itself is not refused
    AttentionConfig(memory_budget=10_000).validate()
    with pytest.raises(ConfigError, match=r"fits in the 256.0 MiB allowed for a model's parameters"):
        AttentionConfig(memory_budget=10_000, embed_dim=4096).validate()


TEXT_CASES = [
    (dict(text=None), "text must be a str, got None"),
    (dict(text=b"the cat"), "text must be a str, got bytes: decode it first"),
    (dict(text=42), "text must be a str, got int"),
    (dict(text="the cat", key_text=123), "key_text must be a str, got int"),
    (dict(text="the cat", key_text=b"a mat"), "key_text must be a str, got bytes"),
]


@pytest.mark.parametrize("kwargs, fragment", TEXT_CASES)
def test_texts_of_the_wrong_type_are_named(kwargs, fragment):
    text = kwargs.pop("text")
    for call in (run_attention, plan_text):
        with pytest.raises(ConfigTypeError, match=fragment):
            call(_config(), text, **({"key_text": kwargs["key_text"]} if kwargs else {}))


LAYER_CASES = [
    (lambda: MultiHeadAttention(64, 0), ConfigError, "num_heads must be a positive whole number, got 0"),
    (lambda: MultiHeadAttention(64, -4), ConfigError, "num_heads must be a positive whole number, got -4"),
    (
        lambda: MultiHeadAttention(64.0, 4),
        ConfigTypeError,
        "embed_dim must be a positive whole number, got 64.0 (float)",
    ),
    (
        lambda: MultiHeadAttention(64, True),
        ConfigTypeError,
        "num_heads must be a positive whole number, got True (bool)",
    ),
    (lambda: MultiHeadAttention(64, 6), ConfigError, "6 heads do not divide embed_dim 64"),
    (lambda: MultiHeadAttention(64, 4, dropout=1.5), ConfigError, "dropout must be in [0, 1), got 1.5"),
    (lambda: MultiHeadAttention(64, 4, dropout=math.nan), ConfigError, "dropout must be in [0, 1), got nan"),
    (lambda: MultiHeadAttention(64, 4, bias="yes"), ConfigTypeError, "bias must be true or false"),
    (
        lambda: MultiHeadAttention(10**6, 4),
        ConfigError,
        "the weights of MultiHeadAttention(1,000,000, 4) (4 Linear "
        "layers of 1,000,000 x 1,000,000) would take 14.6 TiB, more "
        "than the 8.0 GiB of free memory",
    ),
    (lambda: SingleHeadAttention(0, 64), ConfigError, "embed_dim must be a positive whole number, got 0"),
    (
        lambda: SingleHeadAttention(64, "8"),
        ConfigTypeError,
        "hidden_dim must be a positive whole number, got '8' (str)",
    ),
    (lambda: SingleHeadAttention(64, 10**9), ConfigError, "would take 726.4 GiB, more than the 8.0 GiB of free memory"),
]


@pytest.mark.parametrize("make, kind, fragment", LAYER_CASES, ids=[c[2][:40] for c in LAYER_CASES])
def test_bad_layer_arguments_get_one_line(make, kind, fragment):
    with pytest.raises(kind) as info:
        make()
    assert fragment in str(info.value), str(info.value)


def _huge(*shape: int) -> torch.Tensor:
    """A tensor of a large shape that takes no memory (a broadcast view of one element)."""
    return torch.zeros((1,) * len(shape)).expand(*shape)


@pytest.mark.parametrize(
    "call",
    [
        lambda: scaled_dot_product_attention(
            _huge(1, 8, 100_000, 16), _huge(1, 8, 100_000, 16), _huge(1, 8, 100_000, 16)
        ),
        lambda: scaled_dot_product_attention(
            _huge(8, 100_000, 16), _huge(8, 100_000, 16), _huge(8, 100_000, 16), dropout=0.1
        ),
        lambda: attend(_huge(1, 8, 100_000, 16), _huge(1, 2, 100_000, 16), _huge(1, 2, 100_000, 16)),
        lambda: MultiHeadAttention(16, 2)(_huge(1, 100_000, 16)),
    ],
)
def test_whole_matrix_paths_refuse_what_cannot_fit(call):
    with pytest.raises(
        ConfigError,
        match=r"the attention weights \[.*100000, 100000\] \(\d buffers\) would take .* "
        r"more than the 8\.0 GiB of free memory",
    ):
        call()


def test_a_run_whose_full_path_exceeds_free_memory_is_refused_before_it_starts(monkeypatch):
    text = " ".join(["the cat sat on the mat"] * 400)  # 2,400 tokens: full peak ~ 0.4 GiB at 8 heads
    config = AttentionConfig(num_heads=8, memory_budget=64 * GIB)  # a budget larger than the machine
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 200 * 2**20)
    with pytest.raises(
        ConfigError,
        match=r"8 heads x 2,400 tokens: the full run needs .* more than the 200\.0 MiB of "
        r"free memory; set the memory budget below 200\.0 MiB so that it runs in blocks",
    ):
        run_attention(config, text)
    # what the message suggests works
    result = run_attention(config.replace(memory_budget=100 * 2**20), text)
    assert result.plan.kind == "pyramid"


def test_a_memory_bounded_run_too_large_says_how_many_tokens_fit(monkeypatch):
    config = AttentionConfig(embed_dim=512, num_heads=8, memory_budget=2 * GIB)
    text = "word " * 200_000
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 1 * GIB)
    with pytest.raises(ConfigError) as info:
        plan_text(config, text)
    message = str(info.value)
    assert message.startswith("8 heads x 200,000 tokens: even the memory-bounded run needs about")
    fit = int(message.rsplit("at most ", 1)[1].split(" ")[0].replace(",", ""))
    assert plan_run(config, fit).peak_bytes <= GIB < plan_run(config, fit + 1).peak_bytes


def test_kept_intermediates_are_planned_for(monkeypatch):
    # a budget that the plain full run fits but the run keeping every stage does not
    text = " ".join(["the cat sat on the mat"] * 50)  # 300 tokens
    config = AttentionConfig(num_heads=4)
    plain = estimate_run(config, 300)
    kept = estimate_run(config, 300, keep_intermediates=True)
    assert kept.peak_bytes > plain.peak_bytes + 3 * 4 * 300 * 300 * 4  # four more [H, L, L] copies
    config = config.replace(memory_budget=(plain.peak_bytes + kept.peak_bytes) // 2)
    plan = plan_text(config, text)  # as the window plans: without the intermediates
    assert plan.kind == "full"
    result = run_attention(config, text, keep_intermediates=True, plan=plan)
    assert result.plan.kind == "pyramid" and result.plan.intermediates
    assert any("not kept as intermediates" in n for n in result.notices)


def test_dropout_in_training_counts_its_buffers():
    config = AttentionConfig(num_heads=4, dropout=0.1)
    eval_mode = estimate_run(config, 500).peak_bytes
    training = estimate_run(config.replace(training=True), 500).peak_bytes
    assert training - eval_mode == 2 * 4 * 500 * 500 * 4


def test_comparisons_that_need_every_weight_refuse_a_text_over_the_budget():
    text = " ".join(["the cat sat on the mat"] * 100)  # 600 tokens
    config = AttentionConfig(num_heads=4, memory_budget=8 * 2**20)
    with pytest.raises(
        ConfigError,
        match=r"the comparison with PyTorch's implementations keeps every weight of 600 "
        r"tokens x 4 heads: .* over the 8\.0 MiB memory budget; at most \d+ tokens fit",
    ):
        compare_implementations(config, text)
    with pytest.raises(ConfigError, match="the scaled vs unscaled comparison keeps every weight of 600 tokens"):
        teaching_comparison("scaled", config, text)
    with pytest.raises(ConfigTypeError, match="text must be a str, got None"):
        compare_implementations(config, None)


def test_nan_and_inf_weights_are_named():
    good = {"a": torch.ones(3), "ids": torch.arange(3)}
    check_finite_tensors(good, "model.safetensors")
    bad = {
        "a": torch.ones(3),
        "encoder.layer.0.attention.self.query.weight": torch.tensor([[1.0, math.nan], [math.inf, 2.0]]),
    }
    with pytest.raises(
        ConfigError,
        match=r"model.safetensors: tensor 'encoder.layer.0.attention.self.query.weight' "
        r"holds 2 NaN and infinite value\(s\) of 4; the checkpoint is damaged",
    ):
        check_finite_tensors(bad, "model.safetensors")


def test_a_checkpoint_with_nan_weights_is_refused_naming_the_tensor(tmp_path):
    from pretrained_models import build
    from safetensors.torch import load_file, save_file

    from attndesk.models import load_pretrained

    folder = build("bert", tmp_path / "nan-bert", num_hidden_layers=1)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["encoder.layer.0.attention.self.key.weight"][3, 1] = math.nan
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        ConfigError, match=r"tensor 'encoder.layer.0.attention.self.key.weight' holds 1 NaN value\(s\) of 1,024"
    ):
        load_pretrained(folder)


def test_a_model_config_json_nested_too_deeply_or_with_a_huge_number(tmp_path):
    from attndesk.models.checkpoint import read_spec

    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="cannot be read as JSON: nested too deeply"):
        read_spec(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": ' + "9" * 5000 + "}")
    with pytest.raises(ConfigError, match="cannot be read as JSON: Exceeds the limit"):
        read_spec(tmp_path)


def test_good_input_still_runs():
    result = run_attention(AttentionConfig(num_heads=2, embed_dim=8), "the cat sat")
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-6)


def test_a_difference_too_large_for_memory_is_a_comparison_error(monkeypatch):
    from attndesk.teaching.compare import ComparisonError, diff_arrays

    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 100 * 2**20)
    big = np.broadcast_to(np.float32(0.5), (8, 2000, 2000))  # no memory of its own
    with pytest.raises(
        ComparisonError,
        match=r"B - A of weights \(8 head\(s\) x 2000 queries x 2000 keys\) would take "
        r"278\.5 MiB, more than the 100\.0 MiB of free memory",
    ):
        diff_arrays(big, big)
    small = diff_arrays(np.zeros((2, 3, 3)), np.ones((2, 3, 3)))
    assert small.max_abs == 1.0


def test_a_difference_over_the_budget_says_what_fits_before_allocating(monkeypatch):
    from attndesk.teaching import diff
    from attndesk.teaching.compare import ComparisonError, diff_arrays

    monkeypatch.setattr(diff.np, "subtract", lambda *a, **k: pytest.fail("allocated B - A"))
    big = np.broadcast_to(np.float32(0.5), (8, 2000, 2000))
    with pytest.raises(
        ComparisonError,
        match=r"B - A of weights \(8 head\(s\) x 2000 queries x 2000 keys\) needs "
        r"278\.5 MiB in float64, more than the 96\.0 MiB memory budget; one "
        r"head's would fit \(64\.8 MiB\): compare fewer heads, raise the budget",
    ):
        diff_arrays(big, big, budget=96 * 2**20)
    with pytest.raises(
        ComparisonError,
        match=r"more than the 16\.0 MiB memory budget: raise the budget or compare "
        r"shorter texts",
    ):
        diff_arrays(big, big, budget=16 * 2**20)


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(embed_dim=10**6), "embed_dim"),
        (dict(vocab_size=10**9), "vocab_size"),
        (dict(num_heads=1, hidden_dim=10**9), "hidden_dim"),
        (dict(pad_to=10**8), "pad_to"),
        (dict(num_heads=6), "num_heads"),
        (dict(scaled="no"), "scaled"),
        (dict(dropout=2.0), "dropout"),
        (dict(mask="x"), "mask"),
        (dict(seed=-1), "seed"),
        (dict(memory_budget=0), "memory_budget"),
    ],
)
def test_the_error_names_the_field_at_fault(changes, field):
    # the window shows the message next to that field's control
    with pytest.raises(ConfigError) as info:
        AttentionConfig(**changes).validate()
    assert info.value.field == field


def test_free_memory_of_a_cuda_device_is_the_smaller_of_ram_and_the_gpu(monkeypatch):
    import types

    import psutil

    monkeypatch.undo()  # the real available_memory, with psutil and CUDA answers of our own
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(available=20 * GIB))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (5 * GIB, 80 * GIB))
    assert free_memory.available_memory() == 20 * GIB
    assert free_memory.available_memory("cpu") == 20 * GIB
    assert free_memory.available_memory("cuda:0") == 5 * GIB
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 * GIB, 141 * GIB))
    assert free_memory.available_memory("cuda") == 20 * GIB
