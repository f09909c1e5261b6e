"""The tiny random checkpoints every interpretability test shares, built once per session."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pretrained_models import build


class Folders(dict):
    """name -> a tiny checkpoint folder, built on first use (seeds fixed: the same weights every run);
    a name without a recipe is the ``pretrained_models.CONFIGS`` entry of that name."""

    RECIPES: ClassVar[dict] = {
        "gpt2": ("gpt2", {"seed": 3}),
        "llama": ("llama", {"seed": 3}),
        # LLaMA zeroes its pad token's embedding row at init; with no pad id in the config the row
        # is random (the tokenizer's [PAD] still names it), as in a trained model
        "llama-pad": ("llama", {"seed": 5, "pad_token_id": None}),
        "t5": ("t5", {"seed": 3}),
        "bert": ("bert", {"seed": 3}),
        "gemma2": ("gemma2", {"seed": 3}),  # normalises each block's output before the residual add
    }

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, name: str):
        kind, options = self.RECIPES.get(name, (name, {"seed": 3}))  # any other: CONFIGS[name], seed 3
        self[name] = build(kind, self.root / name, **options)
        return self[name]


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    return Folders(tmp_path_factory.mktemp("interp-models"))
