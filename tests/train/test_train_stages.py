"""``attndesk.train.stages``: a trained decoder as the toy views' result. Every stacked head's
weights are ``run.attention``'s, its stages agree with torch's own softmax, and the initial run
is the weights the trainer starts from (its checkpoint at step 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.runs.config import TRAINED_PRESETS, AttentionConfig
from attndesk.runs.pipeline import run_attention
from attndesk.train import TrainConfig, train
from attndesk.train.presets import PRESETS
from attndesk.train.stages import head_labels, initial_run, trained_result


@pytest.fixture(scope="module")
def run():
    cfg = TrainConfig(
        task="previous-token", layers=2, heads=2, kv_heads=1, embed_dim=16, seq_len=12, steps=8, batch_size=4,
        checkpoint_every=4, position="rope", window=5, mlp=True, layernorm=True,
    )  # fmt: skip
    return train(cfg)


def test_every_stacked_head_is_the_models_attention_with_its_stages(run):
    result = trained_result(run, "trained")
    ids = run.task.probe().ids[:1]
    expected = run.attention(ids)[0].numpy().reshape(4, *result.weights.shape[-2:])
    np.testing.assert_allclose(result.weights, expected, rtol=0, atol=1e-6)  # the same layers; Q unfolded
    assert head_labels(run) == ["L0 H0", "L0 H1", "L1 H0", "L1 H1"]
    inter = result.intermediates
    assert inter.q.shape[0] == 4 and inter.k.shape[0] == 2  # one K/V head per layer, stacked
    torch.testing.assert_close(torch.softmax(torch.as_tensor(inter.masked), -1), torch.as_tensor(result.weights))
    length = ids.shape[1]
    i, j = np.indices((length, length))
    np.testing.assert_array_equal(result.mask, (j <= i) & (i - j < 5))
    assert result.config.num_heads == 4 and result.config.head_dim == 8 and result.config.num_kv_heads == 2
    assert inter.embeddings is None  # two layers: a layer's input is not every head's


def test_the_initial_run_is_the_trainers_step_0(run):
    first = run.checkpoints.get(0).state
    for name, tensor in initial_run(run).model.state_dict().items():
        torch.testing.assert_close(tensor, first[name], rtol=0, atol=0)


def test_the_configs_preset_names_are_the_shipped_presets_and_the_toy_pipeline_refuses_them():
    assert tuple(PRESETS) == TRAINED_PRESETS
    with pytest.raises(ConfigError, match="random weights only"):
        run_attention(AttentionConfig(weights_from="induction"), "a b c")


def test_the_timing_panel_gets_the_attention_flops_and_the_kept_bytes(run):
    """Counted per layer as the core counts a toy run of the same shape (GQA, window, causal)."""
    from attndesk.runs.memory import estimate_run

    result = trained_result(run, "trained")
    length = result.weights.shape[-1]
    layer = AttentionConfig(embed_dim=16, num_heads=2, kv_heads=1, mask="causal", window=5)
    assert result.flops == 2 * estimate_run(layer, length).flops
    assert result.peak_bytes >= result.weights.nbytes > 0
