"""The fast engine against the step-by-step one: the same keep masks, logits and KL whether the
rows before the first pruned row come from the full run and decode steps read a cache (``Resume``),
or every row is a forward pass over its whole prefix and the stream kind's rule runs row by row."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.kvcache import POLICIES, simulate
from attndesk.kvcache.model import CausalMemo, Resume, kv_model
from attndesk.kvcache.simulate import first_pruned
from attndesk.train import TrainConfig
from attndesk.train.model import build_model
from attndesk.train.run import TrainRun
from attndesk.train.tasks import make_task

IDS = [(11 * i + 5) % 29000 + 1000 for i in range(20)]
OPTIONS = {"snapkv": {"window": 4}, "pyramidkv": {"window": 4}, "adakv": {"window": 4}}


class StepByStep(CausalMemo):
    """No cache to go on from: the stepper re-runs each prefix and the compressed run is one
    forward pass over every row with the keep mask (the engine before ``Resume``)."""

    def cache_after(self, base, rows: int) -> Resume | None:
        return None


def _row_by_row(name: str):
    policy = type(POLICIES[name])()
    policy.stream_keep = lambda *args: None  # type: ignore[method-assign]
    return policy


@pytest.fixture(scope="module")
def rope_toy() -> TrainRun:
    """A random-weight toy with RoPE, an MLP, LayerNorm, a learned sink and grouped K/V heads."""
    cfg = TrainConfig(
        task="copy", layers=2, heads=4, kv_heads=2, embed_dim=16, seq_len=24, mlp=True, layernorm=True, sink="learned"
    ).validate()
    return TrainRun(cfg, make_task(cfg), build_model(cfg, seed=3))


@pytest.mark.parametrize("name", ["streaming", "recency", "h2o", "tova", "snapkv", "oracle"])
@pytest.mark.parametrize("which", ["llama", "rope_toy"])
def test_the_fast_path_equals_the_step_by_step_path(request, monkeypatch, which, name):
    model = request.getfixturevalue(which)
    ids = IDS if which == "llama" else [i % 8 + 2 for i in IDS]
    opts = OPTIONS.get(name, {})
    generate = 0 if which == "rope_toy" else 2  # the toy's 24 positions: 20 read, rows 13.. as decode steps
    fast = simulate(model, ids, name, 6, generate=generate, prefill=13, **opts)
    monkeypatch.setitem(POLICIES, name, _row_by_row(name))
    slow = simulate(StepByStep(kv_model(model)), ids, name, 6, generate=generate, prefill=13, **opts)
    assert first_pruned(fast.keep) < fast.rows - 1  # the fast path computes rows of its own
    assert np.array_equal(fast.keep, slow.keep) and np.array_equal(fast.ids, slow.ids)
    assert np.array_equal(fast.full_logits, slow.full_logits)
    assert np.abs(fast.logits - slow.logits).max() < 1e-5
    assert np.abs(fast.kl - slow.kl).max() < 1e-6 and np.abs(fast.error - slow.error).max() < 1e-5
    assert np.abs(fast.logits - fast.full_logits).max() > 1e-3  # the masks change the output: the check has teeth


def test_first_pruned():
    keep = np.broadcast_to(np.tril(np.ones((5, 5), bool)), (2, 2, 5, 5)).copy()
    assert first_pruned(keep) == 5
    keep[1, 0, 3, 1] = False
    assert first_pruned(keep) == 3
    keep[0, 1, 2, 0] = False
    assert first_pruned(keep) == 2
