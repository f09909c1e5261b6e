"""What the window's KV cache tab computes, off the GUI thread: one compressed run with what its
pictures need (``lab_run``), a sweep of a policy and the oracle over budgets (``lab_sweep``), and
the curves of a sweep over a corpus read from its store (``corpus_curves``).

A model source is ``("preset", name)`` (a shipped toy preset, ``attndesk.train.presets``) or
``("pretrained", path)`` (a decoder folder). A toy reads its token ids (an empty text: the task's
probe input); a pretrained decoder reads text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attndesk import kvcache
from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.models import load_pretrained
from attndesk.train.presets import load_preset
from attndesk.train.run import TrainRun
from attndesk.train.tasks import Needle

from .model import kv_model
from .retrieval import AblationCheck, needle_batch, retrieval_report
from .simulate import KVRun, simulate_passes
from .sinks import SinkReport, sink_report
from .sweep import default_budgets, sweep

Source = tuple[str, str]
LAB_SEQUENCES = 64  # the tab's retrieval check: fewer sequences and draws than the CLI's, to stay interactive
LAB_DRAWS = 5


def open_model(source: Source, *, ctx: JobContext | None = None):
    """The model of ``source``: a ``TrainRun`` for a preset, a ``LoadedModel`` for a folder."""
    kind, name = source
    if kind == "preset":
        return load_preset(name)
    if kind == "pretrained":
        return load_pretrained(name, ctx=ctx)
    raise ConfigError(f"a model source is a preset or a pretrained folder, got {kind!r}")


def input_ids(model, text: str) -> tuple[list[int], dict[int, int]]:
    """(the input's ids, the answer rows {row: token} of a toy task's probe, else {})."""
    if isinstance(model, TrainRun) and not text.strip():
        probe = model.task.probe()
        ids = probe.ids[0].tolist()
        return ids, {int(r): int(probe.targets[0, r]) for r in probe.mask[0].nonzero().flatten()}
    if not text.strip():
        raise ConfigError("give a text to read")
    return kv_model(model).encode(text), {}


@dataclass(eq=False)
class LabRun:
    """One compressed run and the arrays the tab draws (float32 [layers, H, N, N] weights)."""

    run: KVRun
    weights: np.ndarray  # the compressed run's
    full_weights: np.ndarray  # the full run's
    sinks: SinkReport  # of the full run
    retrieval: np.ndarray | None  # [layers, H]: a needle toy's retrieval scores, else None
    ablation: tuple[AblationCheck, ...] | None  # a needle toy's causal check at k = 1 .. heads per layer
    # (on LAB_SEQUENCES sequences, LAB_DRAWS random draws)
    answers: dict[int, int]
    groups: int  # query heads per K/V head


def lab_run(
    source: Source,
    text: str,
    policy: str,
    budget: int,
    *,
    decode: int,
    options: dict[str, Any] | None = None,
    ctx: JobContext | None = None,
) -> LabRun:
    ctx = job_context(ctx)
    model = open_model(source, ctx=ctx.scaled(0.0, 0.0))
    ids, answers = input_ids(model, text)
    if not 1 <= decode < len(ids):
        raise ConfigError(f"decode steps: 1 to {len(ids) - 1} for this input of {len(ids)} tokens, got {decode}")
    run, compressed, full_pass = simulate_passes(
        model, ids, policy, budget, prefill=len(ids) - decode, ctx=ctx.scaled(0.0, 0.8), **(options or {})
    )
    ctx.check()
    weights = np.stack(compressed.weights)
    full = np.stack(full_pass.weights)
    groups = kv_model(model).groups
    ctx.progress(0.9, "sink and retrieval scores")
    retrieval, ablation = None, None
    if isinstance(model, TrainRun) and isinstance(model.task, Needle):
        batch = needle_batch(model, LAB_SEQUENCES)
        report = retrieval_report(model, draws=LAB_DRAWS, batch=batch, ctx=ctx.scaled(0.9, 1.0, "retrieval heads: "))
        retrieval, ablation = report.scores, report.checks
    ctx.progress(1.0, "done")
    return LabRun(run, weights, full, sink_report(full), retrieval, ablation, answers, groups)


def lab_sweep(
    source: Source,
    text: str,
    policies: list[str],
    *,
    decode: int,
    options: dict[str, dict[str, Any]] | None = None,
    ctx: JobContext | None = None,
) -> list[dict[str, Any]]:
    """``policies`` at the default budgets of the input (``sweep``)."""
    ctx = job_context(ctx)
    model = open_model(source, ctx=ctx.scaled(0.0, 0.0))
    ids, answers = input_ids(model, text)
    if not 1 <= decode < len(ids):
        raise ConfigError(f"decode steps: 1 to {len(ids) - 1} for this input of {len(ids)} tokens, got {decode}")
    prompt = len(ids) - decode
    answers = {row: token for row, token in answers.items() if row >= prompt}  # the decode steps' answers
    return sweep(
        model, ids, policies, default_budgets(prompt), decode=decode, answers=answers or None, options=options, ctx=ctx
    )


@dataclass
class CorpusCurves:
    """A sweep store's curves over its texts: per policy the mean KL and the accuracy (``metric``:
    "accuracy" where the texts have task answers, else "agree", agreement with the full run), each a
    ``sweep_store.Curve`` whose band spans the texts' first to third quartile."""

    model: str
    texts: int
    metric: str
    kl: dict[str, Any]
    accuracy: dict[str, Any]


def corpus_curves(path, *, ctx: JobContext | None = None) -> CorpusCurves:
    """Read the curves of the sweep store ``path`` (one small DuckDB query; ConfigError if it is not one)."""
    job_context(ctx).check()
    with kvcache.open_kv_sweep(path) as store:
        kl = store.curves("kl_mean", "quartiles")
        accuracy = store.curves("accuracy", "quartiles")
        metric = "accuracy" if any(c.texts.any() for c in accuracy.values()) else "agree"
        if metric == "agree":
            accuracy = store.curves("agree", "quartiles")
        return CorpusCurves(store.manifest["model"]["name"], int(store.manifest["data"]["texts"]), metric, kl, accuracy)


__all__ = ["CorpusCurves", "LabRun", "Source", "corpus_curves", "input_ids", "lab_run", "lab_sweep", "open_model"]
