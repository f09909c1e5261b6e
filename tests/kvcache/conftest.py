"""Tiny random Llama and Qwen2 checkpoints (128 positions) and a shipped trained toy model, built once per session."""

from __future__ import annotations

import pytest
from pretrained_models import build

from attndesk.models import load_pretrained
from attndesk.models.loader import transformers_offline

POSITIONS = 128


@pytest.fixture(scope="session")
def kv_folders(tmp_path_factory):
    transformers_offline()
    root = tmp_path_factory.mktemp("kvcache-models")
    return {name: build(name, root / name, max_position_embeddings=POSITIONS) for name in ("llama", "qwen2")}


@pytest.fixture(scope="session")
def llama(kv_folders):
    return load_pretrained(kv_folders["llama"])


@pytest.fixture(scope="session")
def qwen2(kv_folders):
    return load_pretrained(kv_folders["qwen2"])


@pytest.fixture(scope="session")
def toy():
    from attndesk.train.presets import load_preset

    return load_preset("induction")
