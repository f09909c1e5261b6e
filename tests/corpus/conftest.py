"""Tiny random checkpoints (tests/pretrained_models.py) and a handful of short texts, shared by the corpus tests."""

from __future__ import annotations

import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from pretrained_models import build  # noqa: E402

# repeats (duplicate and induction patterns), lengths from 2 to ~20 tokens, one cut by max_tokens
TEXTS = [
    "the cat sat on the mat and the cat slept",
    "hello world",
    "red green blue red green blue red green blue",
    "one two three four five one two three four five six",
    "a quiet morning by the river",
    "to be or not to be",
    "numbers like 12 and 12 and 34 repeat",
    "a long line that keeps going with more and more words so that max tokens cuts it short in the end",
]


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict:
    """name -> folder of a tiny random checkpoint (built once per session)."""
    root = tmp_path_factory.mktemp("corpus-models")
    return {name: build(name, root / name) for name in ("bert", "gpt2", "t5")}


@pytest.fixture(scope="session")
def bert_store(models, tmp_path_factory):
    """The tiny BERT's store over TEXTS (small shards, so resume and merging are exercised)."""
    from attndesk.corpus import analyze_corpus

    out = tmp_path_factory.mktemp("corpus-bert") / "store"
    store = analyze_corpus(TEXTS, out, model=models["bert"], max_tokens=16, shard_size=3, atlas_points=12)
    yield store
    store.close()
