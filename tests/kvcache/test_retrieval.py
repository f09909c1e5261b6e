"""Retrieval scores (Wu et al. 2024) against a loop over sequences, steps and heads written from the
definition, head ablation against the attention layer's own head mask, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.core.errors import ConfigError
from attndesk.kvcache.retrieval import (
    ablation_check,
    needle_accuracy,
    needle_batch,
    retrieval_report,
    retrieval_scores,
    top_heads,
)
from attndesk.train import TrainConfig
from attndesk.train.model import build_model
from attndesk.train.run import TrainRun
from attndesk.train.tasks import make_task


def _run(task: str = "needle", seed: int = 1, **extra) -> TrainRun:
    given = dict(task=task, layers=2, heads=2, embed_dim=16, seq_len=16, vocab_size=8, seed=seed) | extra
    cfg = TrainConfig(**given)
    return TrainRun(cfg.validate(), make_task(cfg), build_model(cfg))


def _accuracy_by_hand(run: TrainRun, batch, ablate) -> float:
    """Needle accuracy with the heads ``ablate`` removed, block by block: each head's context from the
    attention layer, the ablated ones set to 0, then the merge, the output projection, the residual
    and the MLP (not ``head_mask``: the check's own path)."""
    model = run.model
    model.eval()
    ids = batch.ids
    b, n = ids.shape
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    with torch.no_grad():
        x = model.embed(ids)
        for layer, block in enumerate(model.blocks):
            h = x if block.ln1 is None else block.ln1(x)
            keep: dict = {}
            block.attn(h, mask=causal, position="rope", sinks=block.sinks, keep=keep)
            context = keep["context"].clone()  # [B, H, L, d]
            for where, head in ablate:
                if where == layer:
                    context[:, head] = 0
            x = x + block.attn.out_proj(context.transpose(1, 2).reshape(b, n, -1))
            if block.mlp is not None:
                x = x + block.mlp(x if block.ln2 is None else block.ln2(x))
        if model.ln_f is not None:
            x = model.ln_f(x)
        logits = model.unembed(x)
    return float((logits.argmax(-1) == batch.targets)[batch.mask].double().mean())


def _loop_scores(run: TrainRun, ids: torch.Tensor) -> np.ndarray:
    m, length = run.task.VALUE_TOKENS, ids.shape[1]
    run.model.eval()
    with torch.no_grad():
        logits, weights = run.model(ids)
    scores = np.zeros((run.cfg.layers, run.cfg.heads))
    for b in range(ids.shape[0]):
        row = ids[b].tolist()
        key = row[length - 1 - m]
        needle = row.index(key, 1)  # its first occurrence: the planted one
        value_span = range(needle + 1, needle + 1 + m)
        for step in range(m):
            query = length - 1 - m + step
            said = int(logits[b, query].argmax())
            for layer in range(run.cfg.layers):
                for head in range(run.cfg.heads):
                    looked = int(weights[layer][b, head, query].argmax())
                    if looked in value_span and row[looked] == said:
                        scores[layer, head] += 1 / m
    return scores / ids.shape[0]


@pytest.mark.parametrize("seed", [1, 2])
def test_retrieval_scores_follow_the_definition(seed):
    run = _run(seed=seed)
    batch = needle_batch(run, 64, seed=seed)
    with torch.no_grad():  # a model that copies: the value tokens' own embeddings read straight out
        run.model.unembed.weight.copy_(run.model.embed.weight * 4)
    np.testing.assert_allclose(retrieval_scores(run, batch), _loop_scores(run, batch.ids), atol=1e-12)


def test_ablation_zeroes_the_heads_context():
    run = _run()
    batch = needle_batch(run, 32)
    mask = torch.ones(2, 2)
    mask[1, 0] = 0.0
    run.model.eval()
    with torch.no_grad():
        logits, _ = run.model(batch.ids, head_mask=mask)
        # by hand: layer 1's head 0 contributes its context through out_proj's first half of columns
        x = run.model.embed(batch.ids)
        causal = torch.tril(torch.ones(16, 16, dtype=torch.bool))
        x, _ = run.model.blocks[0](x, causal)
        block = run.model.blocks[1]
        keep: dict = {}
        block.attn(x, mask=causal, position="rope", keep=keep)
        context = keep["context"].clone()  # [B, H, L, d]
        context[:, 0] = 0
        merged = context.transpose(1, 2).reshape(32, 16, 16)
        x = x + block.attn.out_proj(merged)
        by_hand = run.model.unembed(x)
    torch.testing.assert_close(logits, by_hand, rtol=1e-5, atol=1e-5)
    want = float((by_hand.argmax(-1) == batch.targets)[batch.mask].double().mean())
    assert needle_accuracy(run, batch, [(1, 0)]) == pytest.approx(want)


def test_the_check_reports_the_accuracy_of_the_heads_it_ablates():
    from attndesk.train.presets import load_preset

    run = load_preset("needle")  # trained: it answers, and ablating heads moves its accuracy
    batch = needle_batch(run, 32, seed=5)
    report = retrieval_report(run, [1, 4], draws=3, seed=7, batch=batch)
    np.testing.assert_allclose(report.scores, retrieval_scores(run, batch))
    assert [c.k for c in report.checks] == [1, 4]
    accuracies = set()
    for k, check in zip((1, 4), report.checks, strict=True):
        assert check.top_heads == top_heads(retrieval_scores(run, batch), k)
        assert 100 * _accuracy_by_hand(run, batch, ()) == pytest.approx(check.full, abs=1e-9)
        assert 100 * _accuracy_by_hand(run, batch, check.top_heads) == pytest.approx(check.top_ablated, abs=1e-9)
        for heads, accuracy in zip(check.random_heads, check.random_ablated, strict=True):
            assert len(set(heads)) == k and not set(heads) & set(check.top_heads)
            assert 100 * _accuracy_by_hand(run, batch, heads) == pytest.approx(accuracy, abs=1e-9)
        row = check.row()
        assert row["top_drop"] == pytest.approx(check.full - check.top_ablated)
        assert row["passed"] == (check.top_drop >= 50 and check.random_drop <= 5)
        accuracies |= {check.full, check.top_ablated, *check.random_ablated}
    assert len(accuracies) >= 3  # ablation moves the accuracy: the comparison has teeth


def test_top_heads_and_refusals():
    scores = np.array([[0.1, 0.9], [0.9, 0.3]])
    assert top_heads(scores, 3) == ((0, 1), (1, 0), (1, 1))
    with pytest.raises(ConfigError, match="needle task"):
        retrieval_scores(_run("copy"))
    with pytest.raises(ConfigError, match="k must be 1 to 3"):
        ablation_check(_run(), 4)
