"""Two published eviction bugs, reproduced on real runs (the pictures: ``scripts/kvcache_regressions.py``,
the tests: ``tests/kvcache/test_regressions.py``).

- **H2O without the grace rule keeps its prompt forever.** New keys enter with score 0 while the
  prompt's keys have accumulated attention, so each new key is the first evicted: after N decode
  steps the kept set is still the prompt's (``h2o_grace``).
- **StreamingLLM without sinks collapses.** A model that parks attention on its first token (an
  attention sink, as trained LLMs do) loses it once the window slides past: the softmax spreads that
  mass over the window and the output moves far from the full run's (``sink_collapse``). The model
  here is built by hand to lean on a sink (``sink_model``): a random toy decoder whose first token
  (id 0) draws most of every query's weight and carries a zero value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attndesk.train import TrainConfig, make_task
from attndesk.train.model import build_model
from attndesk.train.run import TrainRun

from .simulate import KVRun, simulate

SINK_VOCAB, SINK_LENGTH = 64, 96


def _sink_weights(vocab: int, embed_dim: int, heads: int, seed: int, sink_weight: float) -> dict[str, torch.Tensor]:
    """The sink model's weights (one layer, ``heads`` heads, drawn from ``seed``): token 0 is the
    sink, every query's constant part aims at it with the score that gives it ``sink_weight``."""
    generator = torch.Generator().manual_seed(seed)
    e, d = embed_dim, embed_dim // heads

    def normal(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=generator)

    embed = normal(vocab, e)
    embed[:, 0] = 0.0
    embed[0] = 0.0
    embed[0, 0] = 1.0  # the sink token: only dimension 0
    # every query: a constant along each head's first dimension, plus a little content
    q_weight, k_weight = normal(e, e, scale=0.1), normal(e, e, scale=0.3)
    q_bias = torch.zeros(e)
    k_weight[:, 0] = 0.0
    logit = float(np.log(sink_weight / (1 - sink_weight) * (SINK_LENGTH - 1)))  # the sink's score
    for head in range(heads):
        q_bias[head * d] = 4.0
        q_weight[head * d] = 0.0
        k_weight[head * d] = 0.0
        k_weight[head * d, 0] = logit * np.sqrt(d) / 4.0
    v_weight = normal(e, e)
    v_weight[:, 0] = 0.0  # the sink carries nothing
    attn = "blocks.0.attn."
    return {
        "embed.weight": embed,
        attn + "q_proj.weight": q_weight,
        attn + "q_proj.bias": q_bias,
        attn + "k_proj.weight": k_weight,
        attn + "k_proj.bias": torch.zeros(e),
        attn + "v_proj.weight": v_weight,
        attn + "v_proj.bias": torch.zeros(e),
        attn + "out_proj.weight": normal(e, e),
        attn + "out_proj.bias": torch.zeros(e),
        "unembed.weight": normal(vocab, e),
    }


def sink_model(seed: int = 0, sink_weight: float = 0.95):
    """A one-layer toy decoder (``TrainRun``, 2 heads, no positions) whose last query puts about
    ``sink_weight`` of its weight on token 0 at the start (more for earlier queries, which see fewer
    keys) and spreads the rest over the content keys."""

    cfg = TrainConfig(
        task="induction",
        layers=1,
        heads=2,
        embed_dim=16,
        position="none",
        mlp=False,
        layernorm=False,
        vocab_size=SINK_VOCAB,
        seq_len=SINK_LENGTH,
        seed=seed,
    )
    model = build_model(cfg)
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    state.update(_sink_weights(cfg.vocab, cfg.embed_dim, cfg.heads, seed, sink_weight))
    model.load_state_dict(state)
    return TrainRun(cfg, make_task(cfg), model, status="finished", message="built by hand: a sink model")


def sink_text(length: int = SINK_LENGTH, seed: int = 1) -> list[int]:
    """Token 0 (the sink) and then random content tokens."""
    rng = np.random.default_rng(seed)
    return [0, *rng.integers(1, SINK_VOCAB, size=length - 1).tolist()]


@dataclass
class Comparison:
    """Two runs of the same input that differ in one rule."""

    with_rule: KVRun
    without_rule: KVRun


def h2o_grace(model, ids, budget: int = 8, steps: int = 24) -> Comparison:
    """H2O (no recent window) with and without the grace rule, ``steps`` generated tokens."""
    return Comparison(
        with_rule=simulate(model, ids, "h2o", budget, generate=steps, recent=0),
        without_rule=simulate(model, ids, "h2o", budget, generate=steps, recent=0, grace=False),
    )


def sink_collapse(model=None, ids=None, budget: int = 16, sinks: int = 4) -> Comparison:
    """StreamingLLM with ``sinks`` sinks and with none, over the sink model's text by default."""
    model = sink_model() if model is None else model
    ids = sink_text() if ids is None else ids
    return Comparison(
        with_rule=simulate(model, ids, "streaming", budget, sinks=sinks),
        without_rule=simulate(model, ids, "streaming", budget, sinks=0),
    )


__all__ = ["Comparison", "h2o_grace", "sink_collapse", "sink_model", "sink_text"]
