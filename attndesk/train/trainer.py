"""The training loop: seeded, deterministic on the CPU, observable step by step, stoppable.

``train(cfg)`` blocks and returns a ``TrainRun``. A window drives the same loop through
``Trainer(cfg).steps(ctx, pause=)`` (a generator of ``StepReport``) or ``train(cfg, ctx=,
pause=)`` from a worker thread: every step reports its loss; every ``eval_every`` steps the
accuracy and pattern scores on a fixed evaluation set; at most every ``probe_every_ms`` a
``ProbeSnapshot`` (the attention on the task's fixed probe input). ``pause`` (an Event) and the
job context's cancel are checked between steps, so a stop never cuts a step in half; a cancelled
context ends the run as "stopped" (no ``Cancelled``). The older ``stop=`` Event and ``on_step=``
callback still work.
Checkpoints stay in memory within ``checkpoint_budget`` bytes (``CheckpointStore``).

Determinism: the weights come from ``seed`` (torch's RNG forked, so the caller's is untouched),
the batches from a private generator seeded with ``seed``, the evaluation set from another; on
one machine with one thread count the loss curve is the same bit for bit.

Threads: ``threads=None`` (the default) trains on torch's count as the caller set it (the presets
set theirs); a number trains on that many; ``"auto"`` lets ``attndesk.system.threads`` choose by the
model's size and the machine's load, again every ``RECHECK_STEPS`` steps (the count may then
change during a run, and with it the last bits of the weights). The count is set around each
step in the thread that runs it, and restored after.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from attndesk.jobs import Cancel, JobContext, job_context
from attndesk.system.threads import AdaptiveThreads, torch_threads

from .checkpoints import CheckpointStore, state_bytes
from .config import TrainConfig
from .model import build_model, head_norms
from .run import TrainRun
from .tasks import Batch, Task, make_task

EVAL_SEQUENCES = 256
_EVAL_SEED_OFFSET = 1_000_003  # the evaluation set never shares the training batches' stream
_PAUSE_POLL_S = 0.02
RECHECK_STEPS = 25  # steps between two choices of the thread count under threads="auto"


@dataclass
class ProbeSnapshot:
    """The attention on the task's fixed probe input at one step."""

    step: int
    labels: list[str]
    weights: np.ndarray  # float32 [layers, heads, L, L]


@dataclass
class StepReport:
    """One step: ``loss``, ``batch_accuracy`` and ``batch_pattern`` (on the training batch,
    before the update: free, and noisy) always; ``accuracy``, ``pattern`` (the best head's
    score) and ``scores`` [layers, heads] on the fixed evaluation set on evaluation steps (else
    None); ``probe`` when one was due."""

    step: int
    steps: int
    loss: float
    elapsed_s: float
    batch_accuracy: float = float("nan")
    batch_pattern: float = float("nan")
    accuracy: float | None = None
    pattern: float | None = None
    scores: np.ndarray | None = None
    probe: ProbeSnapshot | None = None
    checkpoint: bool = False


@dataclass
class _Loop:
    """What the loop carries from step to step."""

    start: float
    last_probe: float = -math.inf
    last_good: dict[str, torch.Tensor] = field(default_factory=dict)


class Trainer:
    """One training run of ``cfg``; ``steps()`` advances it, ``run`` holds the result so far.
    ``threads``: None, a count or "auto" (see the module's docstring)."""

    def __init__(self, cfg: TrainConfig, *, text: str | None = None, threads: int | Literal["auto"] | None = None):
        self.cfg = cfg
        self.task: Task = make_task(cfg, text)  # validates cfg; ConfigError for a shape the task cannot use
        model = build_model(cfg)
        self.run = TrainRun(cfg, self.task, model, checkpoints=CheckpointStore(cfg.checkpoint_budget))
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.data = torch.Generator().manual_seed(cfg.seed)
        self.eval_batch = self.task.sample(EVAL_SEQUENCES, torch.Generator().manual_seed(cfg.seed + _EVAL_SEED_OFFSET))
        self.probe = self.task.probe()
        self.threads = None
        if threads is not None:
            fixed = None if threads == "auto" else int(threads)
            self.threads = AdaptiveThreads(step_work(self.cfg), fixed=fixed)

    def steps(
        self, ctx: JobContext | None = None, *, pause: threading.Event | None = None, stop: Cancel | None = None
    ) -> Iterator[StepReport]:
        """Train to ``cfg.steps``, yielding a report per step (and its progress to ``ctx``); returns
        early when ``ctx`` (or ``stop``) is cancelled (status "stopped") or on a non-finite loss
        (status "diverged", the last good weights restored)."""
        ctx = job_context(ctx, cancel=stop)
        run, loop = self.run, _Loop(start=time.perf_counter())
        if run.step == 0 and not run.checkpoints.steps:
            run.checkpoints.add(0, run.model.state_dict())
        while run.step < self.cfg.steps:
            if _wait_while_paused(pause, ctx):
                run.status, run.message = "stopped", f"stopped at step {run.step:,} of {self.cfg.steps:,}"
                return
            if self.threads is not None and run.step % RECHECK_STEPS == 0:
                self.threads.recheck()
            with torch_threads(None if self.threads is None else self.threads.count):
                report = self._one_step(loop)
            if report is None:
                return
            ctx.progress(run.step / self.cfg.steps, f"step {run.step:,} of {self.cfg.steps:,}")
            yield report
        run.status, run.message = "finished", f"trained {run.step:,} steps"

    def _one_step(self, loop: _Loop) -> StepReport | None:
        run, cfg = self.run, self.cfg
        batch = self.task.sample(cfg.batch_size, self.data)
        run.model.train()
        logits, weights = run.model(batch.ids)
        loss = F.cross_entropy(logits[batch.mask], batch.targets[batch.mask])
        value = float(loss.detach())
        with torch.no_grad():
            batch_accuracy = self.task.accuracy(logits.detach(), batch)
            batch_pattern = float(self.task.pattern_scores(torch.stack(weights, 1).detach(), batch).max())
        if not math.isfinite(value):
            self._diverged(value, loop)
            return None
        loop.last_good = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        good_step = run.step
        self.optimizer.zero_grad(set_to_none=True)
        objective = loss + cfg.head_l1 * head_norms(run.model) if cfg.head_l1 else loss
        objective.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        run.step = good_step + 1
        report = StepReport(run.step, cfg.steps, value, time.perf_counter() - loop.start, batch_accuracy, batch_pattern)
        row = {"step": run.step, "loss": value, "time_s": report.elapsed_s}
        if run.step % cfg.eval_every == 0 or run.step == cfg.steps:
            metrics = run.evaluate(self.eval_batch)
            report.accuracy, report.pattern, report.scores = metrics["accuracy"], metrics["pattern"], metrics["scores"]
            row.update(accuracy=report.accuracy, pattern=report.pattern)
        run.history.append(row)
        if run.step % cfg.checkpoint_every == 0 or run.step == cfg.steps:
            run.checkpoints.add(run.step, run.model.state_dict(), loss=value)
            report.checkpoint = True
        now = time.perf_counter()
        if (now - loop.last_probe) * 1000 >= cfg.probe_every_ms or run.step == cfg.steps:
            loop.last_probe = now
            report.probe = self.snapshot()
        return report

    def _diverged(self, value: float, loop: _Loop) -> None:
        """A non-finite loss: the weights that gave it are bad; go back to the last good ones."""
        run = self.run
        bad_step = run.step
        if loop.last_good:
            run.model.load_state_dict(loop.last_good)
            run.step = max(0, bad_step - 1)
            run.history = [row for row in run.history if row["step"] <= run.step]
            run.checkpoints.drop_after(run.step)
        run.status = "diverged"
        run.message = (
            f"the loss became {value} at step {bad_step + 1:,}: training stopped and kept the last good "
            f"weights (step {run.step:,}); lower the learning rate (lr {self.cfg.lr:g})"
        )

    def snapshot(self) -> ProbeSnapshot:
        """The attention on the fixed probe input now."""
        weights = self.run.attention(self.probe.ids)[0].numpy()
        return ProbeSnapshot(self.run.step, self.task.labels(self.probe.ids[0]), weights)


def step_work(cfg: TrainConfig) -> float:
    """FLOPs of one of a step's typical ops: a [d x d] projection of the whole batch."""
    return 2.0 * cfg.batch_size * cfg.length * cfg.embed_dim * cfg.embed_dim


def _wait_while_paused(pause: threading.Event | None, ctx: JobContext) -> bool:
    """Block while ``pause`` is set, the job marked as waiting for its user (``ctx.paused``); True
    when ``ctx`` is cancelled (before or during the pause)."""
    if pause is None or not pause.is_set():
        return ctx.cancelled
    with ctx.paused():
        while pause.is_set() and not ctx.cancelled:
            time.sleep(_PAUSE_POLL_S)
    return ctx.cancelled


def train(
    cfg: TrainConfig,
    *,
    on_step: Callable[[StepReport], None] | None = None,
    pause: threading.Event | None = None,
    stop: Cancel | None = None,
    text: str | None = None,
    threads: int | Literal["auto"] | None = None,
    ctx: JobContext | None = None,
) -> TrainRun:
    """Train ``cfg`` to the end (or a stop / divergence) and return the run. Every ``StepReport``
    goes to ``ctx.report`` (or the older ``on_step``) in the training thread."""
    ctx = job_context(ctx, cancel=stop, report=on_step)
    trainer = Trainer(cfg, text=text, threads=threads)
    for report in trainer.steps(ctx, pause=pause):
        ctx.report(report)
    return trainer.run


__all__ = [
    "RECHECK_STEPS",
    "Batch",
    "ProbeSnapshot",
    "StepReport",
    "Trainer",
    "build_model",
    "state_bytes",
    "step_work",
    "train",
]
