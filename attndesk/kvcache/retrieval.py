"""Retrieval heads on the toy needle task: the score of Wu et al. 2024 ("Retrieval head mechanistically
explains long-context factuality") and the causal check that ablating them breaks retrieval.

**Retrieval score.** At each answer step the model predicts a token w (argmax). A head copies at
that step when its most-weighted key lies in the needle's value span and holds w. A head's score is
the share of the needle's value tokens it copies: the steps where it copied over the value's
length, averaged over sequences (Wu et al. count the needle tokens a head copies during
generation over the needle's length; the toy task's answer is read with teacher forcing, one
answer step per value token).

**Causal check.** Needle accuracy (argmax == the value token at each answer step) of the model,
of the model with its k best retrieval heads ablated (their context zeroed before the output
projection), and with k heads drawn at random among the others (``draws`` draws, seeded; the
random heads are drawn outside the top k, as Wu et al. compare retrieval heads with random
non-retrieval heads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attndesk.core.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.train.run import TrainRun
from attndesk.train.tasks import Batch, Needle

from .sinks import toy_activations

SEQUENCES = 256  # fresh needle sequences per measurement
TOP_DROP = 50.0  # the check passes when the top-k heads ablated cost at least this many points
RANDOM_DROP = 5.0  # ... and k random other heads ablated cost at most this many (mean over the draws)
DATA_SEED = 33_000  # their seed: none of the trainer's batches (seed-driven) nor its evaluation set
RANDOM_DRAWS = 10


def needle_task(run: TrainRun) -> Needle:
    if not isinstance(run.task, Needle):
        raise ConfigError(f"retrieval scores read the needle task; this model was trained on {run.cfg.task!r}")
    return run.task


def needle_batch(run: TrainRun, sequences: int = SEQUENCES, seed: int = DATA_SEED) -> Batch:
    """Fresh needle sequences of the model's length, the same for a seed."""
    return needle_task(run).sample(sequences, torch.Generator().manual_seed(seed))


def retrieval_scores(run: TrainRun, batch: Batch | None = None) -> np.ndarray:
    """[layers, heads] float64: each head's retrieval score on ``batch`` (default ``needle_batch``)."""
    task = needle_task(run)
    batch = needle_batch(run) if batch is None else batch
    logits, weights, _ = toy_activations(run.model, batch.ids)
    queries, sources = task.answer_sources(batch)  # [m], [B, m]
    predicted = logits[:, queries].argmax(dim=-1)  # [B, m]
    looked = weights[:, :, :, queries].argmax(dim=-1)  # [B, N, H, m]: each head's most-weighted key
    in_value = (looked >= sources[:, None, None, :1]) & (looked <= sources[:, None, None, -1:])
    holds = torch.gather(batch.ids, 1, looked.flatten(1)).view_as(looked) == predicted[:, None, None]
    return (in_value & holds).double().mean(dim=(0, 3)).numpy()


def needle_accuracy(run: TrainRun, batch: Batch, ablate: list[tuple[int, int]] | tuple = ()) -> float:
    """Accuracy over the answer steps with the heads ``ablate`` ((layer, head) pairs) zeroed."""
    mask = torch.ones(run.cfg.layers, run.cfg.heads)
    for layer, head in ablate:
        mask[layer, head] = 0.0
    logits, _, _ = toy_activations(run.model, batch.ids, head_mask=mask if ablate else None)
    return run.task.accuracy(logits, batch)


@dataclass(frozen=True)
class AblationCheck:
    """Needle accuracy in points (0-100): full, with the top-k retrieval heads ablated, and with
    k random other heads ablated in each draw."""

    k: int
    top_heads: tuple[tuple[int, int], ...]
    full: float
    top_ablated: float
    random_heads: tuple[tuple[tuple[int, int], ...], ...]
    random_ablated: tuple[float, ...]

    @property
    def top_drop(self) -> float:
        return self.full - self.top_ablated

    @property
    def random_drop(self) -> float:
        """The mean drop over the random draws."""
        return self.full - float(np.mean(self.random_ablated))

    @property
    def passed(self) -> bool:
        """The top-k heads ablated cost at least ``TOP_DROP`` points, k random others at most ``RANDOM_DROP``."""
        return self.top_drop >= TOP_DROP and self.random_drop <= RANDOM_DROP

    def row(self) -> dict[str, object]:
        """One row of a table (points of needle accuracy)."""
        return {
            "k": self.k,
            "top_heads": " ".join(f"L{layer + 1}H{head + 1}" for layer, head in self.top_heads),
            "full": self.full,
            "top_ablated": self.top_ablated,
            "top_drop": self.top_drop,
            "random_ablated_mean": float(np.mean(self.random_ablated)),
            "random_drop": self.random_drop,
            "random_drop_worst": self.full - min(self.random_ablated),
            "draws": len(self.random_ablated),
            "passed": self.passed,
        }

    def summary(self) -> str:
        heads = ", ".join(f"L{layer + 1} H{head + 1}" for layer, head in self.top_heads)
        return (
            f"needle accuracy {self.full:.1f}%; top-{self.k} retrieval heads ({heads}) ablated: "
            f"{self.top_ablated:.1f}% (-{self.top_drop:.1f} points); {self.k} random heads ablated: "
            f"{np.mean(self.random_ablated):.1f}% on average over {len(self.random_ablated)} draws "
            f"(-{self.random_drop:.1f} points, worst -{self.full - min(self.random_ablated):.1f})"
        )


def top_heads(scores: np.ndarray, k: int) -> tuple[tuple[int, int], ...]:
    """The k heads with the highest scores, best first (ties: the earlier layer and head)."""
    order = np.argsort(-scores.ravel(), kind="stable")[:k]
    return tuple((int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in order)


def ablation_check(
    run: TrainRun,
    k: int = 1,
    *,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
    batch: Batch | None = None,
    scores: np.ndarray | None = None,
    ctx: JobContext | None = None,
) -> AblationCheck:
    """Ablate the top-k retrieval heads, then k random heads among the others ``draws`` times
    (``scores``: ``retrieval_scores`` of ``batch``, when already computed)."""
    ctx = job_context(ctx)
    total = run.cfg.layers * run.cfg.heads
    if not 1 <= k < total:
        raise ConfigError(f"k must be 1 to {total - 1} (the model has {total} heads), got {k}")
    batch = needle_batch(run) if batch is None else batch
    scores = retrieval_scores(run, batch) if scores is None else scores
    best = top_heads(scores, k)
    full = 100 * needle_accuracy(run, batch)
    ctx.progress(1 / (draws + 2), "full model")
    ablated = 100 * needle_accuracy(run, batch, best)
    others = [(layer, head) for layer in range(run.cfg.layers) for head in range(run.cfg.heads)]
    others = [h for h in others if h not in best]
    rng = np.random.default_rng(seed)
    picks, accuracies = [], []
    for draw in range(draws):
        ctx.check()
        chosen = tuple(others[i] for i in sorted(rng.choice(len(others), size=min(k, len(others)), replace=False)))
        picks.append(chosen)
        accuracies.append(100 * needle_accuracy(run, batch, chosen))
        ctx.progress((draw + 2) / (draws + 2), f"random draw {draw + 1} of {draws}")
    return AblationCheck(k, best, full, ablated, tuple(picks), tuple(accuracies))


@dataclass(frozen=True)
class RetrievalReport:
    """A needle model's retrieval scores [layers, heads] and the causal check at each k."""

    scores: np.ndarray
    checks: tuple[AblationCheck, ...]

    def score_rows(self) -> list[dict[str, object]]:
        return [
            {"layer": layer + 1, "head": head + 1, "retrieval_score": float(self.scores[layer, head])}
            for layer in range(self.scores.shape[0])
            for head in range(self.scores.shape[1])
        ]


def retrieval_report(
    run: TrainRun,
    ks: list[int] | tuple[int, ...] | None = None,
    *,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
    batch: Batch | None = None,
    ctx: JobContext | None = None,
) -> RetrievalReport:
    """The scores and ``ablation_check`` at each k (default 1 .. heads per layer) on one batch of
    fresh needle sequences (default ``needle_batch``)."""
    ctx = job_context(ctx)
    needle_task(run)
    ks = tuple(range(1, run.cfg.heads + 1)) if ks is None else tuple(ks)
    total = run.cfg.layers * run.cfg.heads
    bad = [k for k in ks if not 1 <= k < total]
    if bad or not ks:
        raise ConfigError(f"k must be 1 to {total - 1} (the model has {total} heads), got {bad[0] if bad else 'none'}")
    batch = needle_batch(run) if batch is None else batch
    scores = retrieval_scores(run, batch)
    checks = []
    for i, k in enumerate(ks):
        part = ctx.scaled(i / len(ks), (i + 1) / len(ks), f"k={k}: ")
        checks.append(ablation_check(run, k, draws=draws, seed=seed, batch=batch, scores=scores, ctx=part))
    return RetrievalReport(scores, tuple(checks))


__all__ = [
    "RANDOM_DROP",
    "TOP_DROP",
    "AblationCheck",
    "RetrievalReport",
    "ablation_check",
    "needle_accuracy",
    "needle_batch",
    "retrieval_report",
    "retrieval_scores",
    "top_heads",
]
