"""Retrieval heads on the toy needle task: the score of Wu et al. 2024 ("Retrieval head mechanistically
explains long-context factuality") and the causal check that masking them breaks retrieval.

**Retrieval score.** At each answer step the model predicts a token w (argmax). A head copies at
that step when its most-weighted key lies in the needle's value span and holds w. A head's score is
the share of the needle's value tokens it copies: the steps where it copied over the value's
length, averaged over sequences (Wu et al. count the needle tokens a head copies during
generation over the needle's length; the toy task's answer is read with teacher forcing, one
answer step per value token).

**Causal check.** Needle accuracy (argmax == the value token at each answer step) of the model,
of the model with its k best retrieval heads masked, and with k random non-retrieval heads masked
(heads scoring at most ``RETRIEVAL_THRESHOLD``, Wu et al.'s line for a retrieval head; every such
k-subset when there are at most ``draws`` of them, else ``draws`` seeded draws). A head is masked
as Wu et al.'s code masks it: its query is zeroed, so it weighs its visible keys uniformly, on the
decode rows only (the answer steps; they prefill the prompt unmasked and generate the answer with
the heads masked). ``rows="all"`` masks every row instead, the prefill's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from math import comb

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.train.run import TrainRun
from attndesk.train.tasks import Batch, Needle

from .sinks import toy_activations

SEQUENCES = 256  # fresh needle sequences per measurement
TOP_DROP = 50.0  # the check passes when the top-k heads masked cost at least this many points
RANDOM_DROP = 5.0  # ... and k random non-retrieval heads masked cost at most this many (mean over the draws)
DATA_SEED = 33_000  # their seed: none of the trainer's batches (seed-driven) nor its evaluation set
RANDOM_DRAWS = 20
RETRIEVAL_THRESHOLD = 0.1  # Wu et al.: a head scoring above this is a retrieval head
ROWS = ("decode", "all")  # where a masked head's query is zeroed: the answer steps, or every row
RETRIEVAL_PRESET = "needle-deep"  # the check's default model: the trained preset that meets its figure


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


def ablation_mask(
    run: TrainRun, batch: Batch, heads: list[tuple[int, int]] | tuple, rows: str = "decode"
) -> torch.Tensor:
    """[layers, H, L] query factors for ``batch``: 0 on the rows of ``heads`` ((layer, head) pairs)
    that ``rows`` names (``decode``: the answer steps; ``all``: every row), 1 elsewhere."""
    if rows not in ROWS:
        raise ConfigError(f"rows is one of {', '.join(ROWS)}, got {rows!r}")
    mask = torch.ones(run.cfg.layers, run.cfg.heads, batch.ids.shape[1])
    where = needle_task(run).answer_sources(batch)[0] if rows == "decode" else slice(None)
    for layer, head in heads:
        mask[layer, head, where] = 0.0
    return mask


def needle_accuracy(
    run: TrainRun, batch: Batch, ablate: list[tuple[int, int]] | tuple = (), rows: str = "decode"
) -> float:
    """Accuracy over the answer steps with the heads ``ablate`` ((layer, head) pairs) masked on
    ``rows`` (``ablation_mask``)."""
    mask = ablation_mask(run, batch, ablate, rows)
    logits, _, _ = toy_activations(run.model, batch.ids, query_mask=mask if ablate else None)
    return run.task.accuracy(logits, batch)


@dataclass(frozen=True)
class AblationCheck:
    """Needle accuracy in points (0-100): full, with the top-k retrieval heads masked, and with k
    random non-retrieval heads masked in each draw (none when fewer than k heads are non-retrieval)."""

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
    def random_drops(self) -> np.ndarray:
        """The drop of each random draw (points)."""
        return self.full - np.asarray(self.random_ablated, dtype=np.float64)

    @property
    def random_drop(self) -> float:
        """The mean drop over the random draws (NaN without a draw)."""
        drops = self.random_drops
        return float(drops.mean()) if drops.size else float("nan")

    @property
    def passed(self) -> bool:
        """The top-k heads masked cost at least ``TOP_DROP`` points, k random non-retrieval heads at
        most ``RANDOM_DROP`` on average (False without a draw)."""
        return self.top_drop >= TOP_DROP and self.random_drop <= RANDOM_DROP

    def row(self) -> dict[str, object]:
        """One row of a table (points of needle accuracy)."""
        return {
            "k": self.k,
            "top_heads": " ".join(f"L{layer + 1}H{head + 1}" for layer, head in self.top_heads),
            "full": self.full,
            "top_ablated": self.top_ablated,
            "top_drop": self.top_drop,
            "random_ablated_mean": self.full - self.random_drop,
            "random_drop": self.random_drop,
            "random_drop_sd": float(self.random_drops.std()) if self.random_ablated else float("nan"),
            "random_drop_worst": float(self.random_drops.max()) if self.random_ablated else float("nan"),
            "draws": len(self.random_ablated),
            "passed": self.passed,
        }

    def summary(self) -> str:
        heads = ", ".join(f"L{layer + 1} H{head + 1}" for layer, head in self.top_heads)
        top = (
            f"needle accuracy {self.full:.1f}%; top-{self.k} retrieval heads ({heads}) masked: "
            f"{self.top_ablated:.1f}% (-{self.top_drop:.1f} points); "
        )
        if not self.random_ablated:
            return top + f"fewer than {self.k} non-retrieval heads to draw from"
        drops = self.random_drops
        return top + (
            f"{self.k} random non-retrieval heads masked: {self.full - self.random_drop:.1f}% on average over "
            f"{drops.size} draws (-{self.random_drop:.1f} points, sd {drops.std():.1f}, worst -{drops.max():.1f})"
        )


def top_heads(scores: np.ndarray, k: int) -> tuple[tuple[int, int], ...]:
    """The k heads with the highest scores, best first (ties: the earlier layer and head)."""
    order = np.argsort(-scores.ravel(), kind="stable")[:k]
    return tuple((int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in order)


def non_retrieval_heads(scores: np.ndarray) -> list[tuple[int, int]]:
    """The heads scoring at most ``RETRIEVAL_THRESHOLD`` (Wu et al.'s non-retrieval heads), in order."""
    return [(int(layer), int(head)) for layer, head in zip(*np.nonzero(scores <= RETRIEVAL_THRESHOLD), strict=True)]


def random_head_sets(pool: list[tuple[int, int]], k: int, draws: int, seed: int) -> list[tuple[tuple[int, int], ...]]:
    """k-subsets of ``pool`` (each in ``pool``'s order): all of them when there are at most ``draws``,
    else ``draws`` seeded draws without replacement inside a draw; none when ``pool`` has fewer than k."""
    if len(pool) < k:
        return []
    if comb(len(pool), k) <= draws:
        return list(combinations(pool, k))
    rng = np.random.default_rng(seed)
    return [tuple(pool[i] for i in sorted(rng.choice(len(pool), size=k, replace=False))) for _ in range(draws)]


def ablation_check(
    run: TrainRun,
    k: int = 1,
    *,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
    rows: str = "decode",
    batch: Batch | None = None,
    scores: np.ndarray | None = None,
    ctx: JobContext | None = None,
) -> AblationCheck:
    """Mask the top-k retrieval heads, then k random non-retrieval heads (``random_head_sets``) on
    ``rows`` (``ablation_mask``; ``scores``: ``retrieval_scores`` of ``batch``, when already computed)."""
    ctx = job_context(ctx)
    total = run.cfg.layers * run.cfg.heads
    if not 1 <= k < total:
        raise ConfigError(f"k must be 1 to {total - 1} (the model has {total} heads), got {k}")
    batch = needle_batch(run) if batch is None else batch
    scores = retrieval_scores(run, batch) if scores is None else scores
    best = top_heads(scores, k)
    full = 100 * needle_accuracy(run, batch)
    picks = random_head_sets([h for h in non_retrieval_heads(scores) if h not in best], k, draws, seed)
    steps = len(picks) + 2
    ctx.progress(1 / steps, "full model")
    ablated = 100 * needle_accuracy(run, batch, best, rows)
    accuracies = []
    for draw, chosen in enumerate(picks):
        ctx.check()
        accuracies.append(100 * needle_accuracy(run, batch, chosen, rows))
        ctx.progress((draw + 2) / steps, f"random draw {draw + 1} of {len(picks)}")
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
    rows: str = "decode",
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
        checks.append(ablation_check(run, k, draws=draws, seed=seed, rows=rows, batch=batch, scores=scores, ctx=part))
    return RetrievalReport(scores, tuple(checks))


__all__ = [
    "RANDOM_DROP",
    "RETRIEVAL_PRESET",
    "RETRIEVAL_THRESHOLD",
    "ROWS",
    "TOP_DROP",
    "AblationCheck",
    "RetrievalReport",
    "ablation_check",
    "ablation_mask",
    "needle_accuracy",
    "needle_batch",
    "non_retrieval_heads",
    "random_head_sets",
    "retrieval_report",
    "retrieval_scores",
    "top_heads",
]
