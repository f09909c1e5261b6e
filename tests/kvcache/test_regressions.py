"""The two published eviction bugs, reproduced (``attndesk.kvcache.regressions``; pictured by
``scripts/kvcache_regressions.py`` in docs/kvcache.md)."""

from __future__ import annotations

import numpy as np

from attndesk.kvcache.regressions import h2o_grace, sink_collapse, sink_model, sink_text

PROMPT = [(7 * i + 3) % 29000 + 1000 for i in range(14)]


def test_h2o_without_the_grace_rule_keeps_the_prompt_after_n_steps(llama):
    steps = 24
    runs = h2o_grace(llama, PROMPT, budget=8, steps=steps)
    stuck = runs.without_rule.keep[:, :, len(PROMPT) :, :]
    first = stuck[:, :, :1]
    assert (stuck == first).all()  # the kept set after 24 decode steps is the one after the first
    assert first[..., : len(PROMPT)].sum(-1).min() == 8 and not stuck[..., len(PROMPT) :].any()
    graced = runs.with_rule.keep[:, :, len(PROMPT) :, :]
    assert (graced != graced[:, :, :1]).any()  # with the rule the set moves with the text
    assert graced[..., len(PROMPT) :].any(-1).all()  # and every decode row sees a generated key (its own)


def test_the_sink_model_leans_on_its_first_token():
    import torch

    weights = sink_model().attention(torch.tensor([sink_text()]))[0]  # [layers, H, L, L]
    assert weights[..., 16:, 0].min() > 0.9


def test_streaming_without_sinks_collapses():
    runs = sink_collapse(budget=16, sinks=4)
    kept, dropped = runs.with_rule, runs.without_rule
    assert (kept.keep[..., 16:, 0]).all() and not dropped.keep[..., 16:, 0].any()
    assert dropped.kl[16:].mean() > 100 * kept.kl[16:].mean()
    assert dropped.agree[16:].mean() < 0.2 < 0.6 < kept.agree[16:].mean()
    assert np.array_equal(kept.kl[:16], np.zeros(16))  # within the budget both are the full run
