"""The Train tab: trains a small decoder (``attndesk.train``) while the window draws it learning.

The trainer's generator runs as a streaming side job (``SideJobs`` channel "train", which never
waits for the other side jobs' turn): each ``StepReport`` is queued with ``report`` and reaches
the GUI thread in batches. The presenter folds them into ``Gathered`` and draws at most every
``DRAW_INTERVAL_MS`` (a 30,000-step run still draws a few times a second, never per step); a
probe snapshot comes every ``PROBE_EVERY_MS``, so the heatmaps change about three times a second.

Pause and Stop are the trainer's own events, checked between steps; closing the window cancels
the job, which the stop check sees too (paused or not), so no step is cut in half and no thread
is left. A non-finite loss ends the run with the last good weights and says so. The timeline
slider scrubs the kept checkpoints: the attention of the checkpoint's weights on the probe input
is computed off the GUI thread (``Background``) from the checkpoint's own copy of the weights,
so scrubbing works while the run goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PySide6.QtCore import QEvent, QObject, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QFileDialog

from attndesk.app.widgets.named import named
from attndesk.errors import ConfigError
from attndesk.files.atomic import occupied
from attndesk.jobs import Cancel, JobContext, job_context
from attndesk.session.state import HEATMAPS_TAB, TOY, AppState
from attndesk.train import (
    TASK_NAMES,
    StepReport,
    TrainConfig,
    Trainer,
    TrainRun,
    make_task,
)
from attndesk.train.presets import list_presets, load_preset
from attndesk.train.store import load_run
from attndesk.train.trainer import _EVAL_SEED_OFFSET as EVAL_SEED_OFFSET
from attndesk.train.trainer import EVAL_SEQUENCES, ProbeSnapshot

from ...jobs.background import Background
from ...jobs.channels import CHECKPOINTS, TRAIN
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .view import TrainView

TRAIN_TAB = "train"
DRAW_INTERVAL_MS = 250  # the window draws the run at most this often
PROBE_EVERY_MS = 300  # the trainer's probe snapshots (a forward pass on one sequence)
PHASE_JUMP = 0.2  # a rise of the best head's pattern score between two evaluations this large is a phase change
# refusals of a field without a control of its own, shown at the control that changes it
FIELD_CONTROL = {"vocab_size": "seq_len"}


def phase_change(eval_steps: list[int], pattern: list[float], jump: float = PHASE_JUMP) -> int | None:
    """The step of the evaluation after the largest rise of the pattern score, if that rise is at
    least ``jump`` (the score is the task's best head's, in 0..1); else None."""
    if len(pattern) < 2:
        return None
    rises = np.diff(np.asarray(pattern, dtype=float))
    best = int(np.nanargmax(rises)) if np.isfinite(rises).any() else 0
    return int(eval_steps[best + 1]) if rises[best] >= jump else None


@dataclass
class Gathered:
    """What the reports of one run have said so far (GUI thread)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    pattern: list[float] = field(default_factory=list)
    scores: np.ndarray | None = None
    probe: ProbeSnapshot | None = None
    reports: int = 0

    def add(self, report: StepReport) -> None:
        self.reports += 1
        self.steps.append(report.step)
        self.loss.append(report.loss)
        if report.accuracy is not None:
            self.eval_steps.append(report.step)
            assert report.pattern is not None, "an evaluation step reports accuracy and pattern together"
            self.accuracy.append(float(report.accuracy))
            self.pattern.append(float(report.pattern))
            self.scores = report.scores
        if report.probe is not None:
            self.probe = report.probe


def warm_optimiser() -> int:
    """Build and drop a one-parameter AdamW (off the GUI thread, when the tab is first shown): torch's
    optimiser imports ``torch._dynamo`` on first use, ~200 modules and ~1 s of CPU, which the
    first Start would otherwise wait for. Returns the id of the thread that paid it."""
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    return threading.get_ident()


def train_job(
    cfg: TrainConfig,
    pause: threading.Event,
    stop: Cancel,
    *,
    ctx: JobContext,
) -> TrainRun:
    """The side job: build the trainer (its optimiser's imports are warmed when the tab is first
    shown, ``warm_optimiser``), report its run, then train to the end, the Stop button (``stop``),
    the job cancelled (the window closing) or a divergence, queueing every report."""
    trainer = Trainer(cfg, threads="auto")  # this job's thread sets its own count around each step
    ctx.report(trainer.run)
    last = None
    for last in trainer.steps(job_context(ctx, cancel=stop), pause=pause):
        ctx.report(last)
    if not ctx.cancelled and (last is None or last.probe is None or last.step != trainer.run.step):
        ctx.report(trainer.snapshot())  # stopped or diverged: the weights kept, on the probe input
    return trainer.run


@dataclass
class Opened:
    """A saved run read back (a shipped preset or a folder), with what the tab draws of it."""

    name: str
    run: TrainRun
    probe: ProbeSnapshot
    scores: np.ndarray


def open_run(name: str, load: Callable[[], TrainRun]) -> Opened:
    """Load a saved run, its attention on the probe input and its pattern scores per head on a
    fresh evaluation set (the trainer's), all off the GUI thread."""
    run = load()
    ids = run.task.probe().ids
    probe = ProbeSnapshot(run.step, run.task.labels(ids[0]), run.attention(ids)[0].numpy())
    return Opened(name, run, probe, head_scores(run))


def head_scores(run: TrainRun) -> np.ndarray:
    """[layers, heads] pattern scores of ``run``'s weights on the trainer's evaluation set."""
    batch = run.task.sample(EVAL_SEQUENCES, torch.Generator().manual_seed(run.cfg.seed + EVAL_SEED_OFFSET))
    return run.evaluate(batch)["scores"]


def checkpoint_attention(run: TrainRun, step: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(step, attention [layers, heads, L, L] on the probe input, pattern scores [layers, heads])
    of the checkpoint at ``step``."""
    checkpoint = run.at_checkpoint(step)
    return step, checkpoint.attention(run.task.probe().ids)[0].numpy(), head_scores(checkpoint)


def _saver(run: TrainRun, folder: str) -> Callable[[], str]:
    """The pool job of a save: write ``run`` into ``folder``, all or nothing, and give the folder back."""

    def write() -> str:
        run.save(folder)
        return folder

    return write


class TrainTab(TabPresenter):
    """The presenter of ``TrainView`` (see the module docstring). ``drawn`` is emitted after
    each draw; ``finished(run)`` when a run ends (finished, stopped or diverged)."""

    tab_id = TRAIN_TAB
    drawn = Signal()
    finished = Signal(object)
    scrubbed = Signal(int)  # a checkpoint's attention is on screen (its step)
    opened = Signal(object)  # a saved run is on screen (its TrainRun)
    warmed = Signal()  # the optimiser's first-use imports are done (off the GUI thread)

    def __init__(
        self, state: AppState, compute: ComputeController, view: TrainView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        self.side = compute.side
        self.run: TrainRun | None = None  # the run on screen (training or ended)
        self.gathered = Gathered()
        self.phase = "idle"
        self.scrub_step: int | None = None  # a checkpoint on screen instead of the newest weights
        self.shown: tuple[int, np.ndarray, list[str]] | None = None  # (step, [layers, heads, L, L], labels)
        self.draw_times: list[float] = []  # when each draw happened (perf_counter), for the figures
        self._pause, self._stop = threading.Event(), threading.Event()
        self._last_draw = -1e9
        self._scores_drawn: np.ndarray | None = None
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._draw)
        self._scrub = Background(self, CHECKPOINTS)
        view.set_presets([(str(p["name"]), str(p["about"])) for p in list_presets() if p["shipped"]])
        self.run_name = ""  # the run on screen: "" (trained here), a preset's name or a folder
        self.preset = False  # the run on screen is a shipped preset, unchanged
        # (name, run, preset) -> the toy mode shows that run's weights (the window's factory sets it)
        self.views_opener: Callable[[str, TrainRun, bool], None] | None = None
        self._warm = Background(self, CHECKPOINTS)
        self.warmed_in: int | None = None  # the thread that imported the optimiser's modules
        self.files = TrainFiles(self)
        view.installEventFilter(self)
        view.startRequested.connect(self.start)
        view.pauseRequested.connect(self.pause)
        view.resumeRequested.connect(self.resume)
        view.stopRequested.connect(self.stop)
        view.settingsEdited.connect(self._on_edited)
        task = view.controls["task"]
        assert isinstance(task, QComboBox), "the task is a choice"
        task.currentTextChanged.connect(self._task_defaults)
        view.timelineMoved.connect(self._on_timeline)
        view.liveRequested.connect(self._follow_latest)
        view.layerChanged.connect(lambda _layer: self._show_probe())
        self._task_defaults(view.settings()["task"])

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.view and event.type() == QEvent.Type.Show and self.warmed_in is None:
            self.warmed_in = 0  # asked once
            self._warm.start(warm_optimiser, done=self._warmed, failed=lambda _exc: None)
        return False

    def _warmed(self, thread: int) -> None:
        self.warmed_in = thread
        self.warmed.emit()

    # -- settings -------------------------------------------------------------------------------
    def config(self) -> TrainConfig:
        """The view's settings as a checked ``TrainConfig`` (ConfigError names the field at fault)."""
        cfg = TrainConfig(**self.view.settings(), probe_every_ms=PROBE_EVERY_MS)
        cfg.validate()
        make_task(cfg)  # a shape the task cannot use (reverse with an odd length, ...)
        return cfg

    def _check(self) -> TrainConfig | None:
        try:
            cfg = self.config()
        except ConfigError as exc:
            field: str | None = getattr(exc, "field", None)
            self.view.show_problem(None if field is None else FIELD_CONTROL.get(field, field), str(exc))
            return None
        self.view.show_problem(None, "")
        return cfg

    def _on_edited(self) -> None:
        if self.phase == "idle":
            self._check()

    def _task_defaults(self, task: str) -> None:
        """A new task starts from its own sequence length (reverse and copy need an even one)."""
        if task in TASK_NAMES:
            self.view.set_settings({"seq_len": TrainConfig(task=task).seq_len})

    # -- the run --------------------------------------------------------------------------------
    def start(self) -> bool:
        """Start a new run of the view's settings; False (and a message at the control) if refused."""
        if self.phase != "idle":
            return False
        cfg = self._check()
        if cfg is None:
            return False
        self.run, self.gathered, self.scrub_step, self.shown = None, Gathered(), None, None
        self._pause.clear()
        self._stop.clear()
        self._scrub.forget()
        self.view.set_layers(cfg.layers)
        self.view.prepare_heads(cfg.heads)
        self.view.show_scores(None)
        self._scores_drawn = None
        self._set_phase("running")
        self.view.show_message(f"training {cfg.task}: {cfg.layers} layer(s) x {cfg.heads} heads, {cfg.steps:,} steps")
        self.side.submit(
            TRAIN,
            train_job,
            cfg,
            self._pause,
            self._stop,
            done=self._ended,
            failed=self._failed,
            scope=None,
            reported=self._on_reports,
        )
        return True

    def pause(self) -> None:
        if self.phase == "running":
            self._pause.set()
            self._set_phase("paused")
            self._draw()
            self.view.show_message(f"paused at step {self.gathered.steps[-1] if self.gathered.steps else 0:,}")

    def resume(self) -> None:
        if self.phase == "paused":
            self._pause.clear()
            self._set_phase("running")
            self.view.show_message("training")

    def stop(self) -> None:
        """End the run after the step in flight; what was trained is kept."""
        if self.phase in ("running", "paused"):
            self._stop.set()
            self._pause.clear()
            self.view.show_message("stopping after the step in flight…")

    def is_training(self) -> bool:
        return self.phase != "idle"

    def shutdown(self) -> None:
        """Stop training now (the window closes): the job ends after its step; SideJobs joins it."""
        self._stop.set()
        self._pause.clear()
        self._timer.stop()
        self.side.cancel(TRAIN)

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        self.view.set_phase(phase)

    def _on_reports(self, items: list) -> None:
        for report in items:
            if isinstance(report, TrainRun):
                self.run = report  # the job's first item: the run being trained
            elif isinstance(report, ProbeSnapshot):
                self.gathered.probe = report  # the weights a stopped or diverged run kept
            else:
                self.gathered.add(report)
        if not self._timer.isActive():
            wait = DRAW_INTERVAL_MS - (time.perf_counter() - self._last_draw) * 1000
            self._timer.start(max(0, int(wait)))

    def _ended(self, run: TrainRun) -> None:
        self.run = run
        self._set_phase("idle")
        self._timer.stop()
        self._draw()
        if run.status == "diverged":
            kept = run.checkpoints.steps
            self.view.show_message(
                f"{run.message}. The checkpoints up to step {kept[-1] if kept else 0:,} are kept.", error=True
            )
        else:
            self.view.show_message(run.message)
        self.view.saveButton.setEnabled(True)
        self.view.viewsButton.setEnabled(self.views_opener is not None)
        self.run_name, self.preset = "", False
        self.finished.emit(run)

    def _failed(self, message: str) -> None:
        self._set_phase("idle")
        self._timer.stop()
        self.view.show_message(f"training failed: {message}", error=True)

    # -- saved runs (TrainFiles) ----------------------------------------------------------------
    def open(self, name: str, load: Callable[[], TrainRun], *, preset: bool = False) -> None:
        self.files.open(name, load, preset=preset)

    def open_dialog(self) -> None:
        self.files.open_dialog()

    def save(self, folder: str) -> None:
        self.files.save(folder)

    # -- drawing --------------------------------------------------------------------------------
    def _draw(self) -> None:
        """Curves, scores, the timeline and (following the newest weights) the probe heatmaps."""
        self._last_draw = time.perf_counter()
        self.draw_times.append(self._last_draw)
        g, run = self.gathered, self.run
        self.view.show_curves(*(np.asarray(a) for a in (g.steps, g.loss, g.eval_steps, g.accuracy, g.pattern)))
        if g.scores is not None and run is not None and g.scores is not self._scores_drawn:
            self._scores_drawn = g.scores
            self.view.show_scores(g.scores, run.task.pattern)
            self.view.set_layer(int(np.argmax(np.max(g.scores, axis=1))))  # where the pattern forms
        self._draw_timeline()
        if self.scrub_step is None and g.probe is not None and (self.shown is None or self.shown[0] != g.probe.step):
            self.shown = (g.probe.step, g.probe.weights, g.probe.labels)
            self._show_probe()
        self.drawn.emit()

    def checkpoint_steps(self) -> list[int]:
        """The steps of the checkpoints kept now (the store thins them out within its budget)."""
        return list(self.run.checkpoints.steps) if self.run is not None else []

    def _draw_timeline(self) -> None:
        steps = self.checkpoint_steps()
        phase = phase_change(self.gathered.eval_steps, self.gathered.pattern)
        mark = None if phase is None or not steps else int(np.argmin(np.abs(np.asarray(steps) - phase)))
        self.view.show_phase(phase, mark)
        if self.scrub_step is not None and self.scrub_step in steps:
            index = steps.index(self.scrub_step)
        else:
            index = max(len(steps) - 1, 0)
        self.view.show_timeline(steps, index)
        latest = self.gathered.steps[-1] if self.gathered.steps else 0
        if self.scrub_step is None:
            where = f"the newest weights (step {latest:,})"
        else:
            where = f"the checkpoint at step {self.scrub_step:,} of {latest:,}"
        jump = f" · phase change at step {phase:,}" if phase is not None else ""
        kept = f"{len(steps)} kept" if steps else "no checkpoints in this run"
        self.view.set_timeline_text(f"{kept} · showing {where}{jump}")

    def _show_probe(self) -> None:
        if self.shown is None:
            return
        step, weights, labels = self.shown
        layer = min(self.view.layer(), weights.shape[0] - 1)
        what = "the newest weights" if self.scrub_step is None else "the checkpoint"
        self.view.show_probe(weights[layer], labels, f"layer {layer} on the probe input at step {step:,} ({what})")

    def shown_weights(self) -> np.ndarray | None:
        """The attention the heatmaps show now, [layers, heads, L, L] (one layer drawn at a time)."""
        return None if self.shown is None else self.shown[1]

    # -- the timeline ---------------------------------------------------------------------------
    def _on_timeline(self, index: int) -> None:
        steps = self.checkpoint_steps()
        if not steps or self.run is None:
            return
        if index >= len(steps) - 1 and self.phase != "idle":
            self._follow_latest()
            return
        self.scrub_to(steps[min(index, len(steps) - 1)])

    def scrub_to(self, step: int) -> None:
        """Show the checkpoint at ``step`` (computed off the GUI thread; ``scrubbed`` when drawn)."""
        run = self.run
        if run is None:  # nothing on screen to scrub (the timeline asks only once a run is shown)
            return
        self.scrub_step = step
        self._draw_timeline()
        self._scrub.start(
            lambda: checkpoint_attention(run, step),
            done=self._scrub_done,
            failed=self._scrub_failed,
            expected=(KeyError, ConfigError),
        )

    def _scrub_done(self, answer: tuple[int, np.ndarray, np.ndarray]) -> None:
        step, weights, scores = answer
        if step != self.scrub_step or self.run is None:
            return
        self.shown = (step, weights, self.run.task.labels(self.run.task.probe().ids[0]))
        self._show_probe()
        self._scores_drawn = scores
        self.view.show_scores(scores, self.run.task.pattern, step)
        self.scrubbed.emit(step)

    def _scrub_failed(self, exc: Exception) -> None:
        self.view.show_message(f"that checkpoint is gone (the memory budget thinned it out): {exc}", error=True)
        self._follow_latest()

    def _follow_latest(self) -> None:
        self.scrub_step = None
        self._scrub.forget()
        probe, g = self.gathered.probe, self.gathered
        if probe is not None:
            self.shown = (probe.step, probe.weights, probe.labels)
            self._show_probe()
        if g.scores is not None and self.run is not None and g.scores is not self._scores_drawn:
            self._scores_drawn = g.scores
            self.view.show_scores(g.scores, self.run.task.pattern)
        self._draw_timeline()


class TrainFiles:
    """The Train tab's saved runs: a folder or a preset opened off the GUI thread, the run on screen
    saved (all or nothing), and shown in the toy views."""

    def __init__(self, tab: TrainTab) -> None:
        self.tab = tab
        self._open = Background(tab, CHECKPOINTS)
        self._save = Background(tab, CHECKPOINTS)
        view = tab.view
        view.presetRequested.connect(lambda name: self.open(name, lambda: load_preset(name), preset=True))
        view.openRequested.connect(self.open_dialog)
        view.saveRequested.connect(self.save_dialog)
        view.viewsRequested.connect(self.open_in_views)

    def open_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self.tab.view, "Open trained model (a folder saved by attndesk train)"
        )
        if folder:
            self.open(folder, lambda: load_run(folder))

    def open(self, name: str, load: Callable[[], TrainRun], *, preset: bool = False) -> None:
        """Show a saved run (``load()`` runs off the GUI thread): curves from its history, its
        scores, its attention on the probe input, its checkpoints on the timeline."""
        if self.tab.phase != "idle":
            self.tab.view.show_message("stop the training run first", error=True)
            return
        self.tab.view.show_message(f"opening {name}…")
        self._open.start(
            lambda: open_run(name, load),
            done=lambda opened: self._opened(opened, preset),
            failed=self._open_failed,
            expected=(ConfigError, OSError, KeyError, ValueError),
        )

    def _opened(self, opened: Opened, preset: bool = False) -> None:
        tab, run, g = self.tab, opened.run, Gathered()
        tab.run_name, tab.preset = opened.name, preset
        for row in run.history:
            g.steps.append(row["step"])
            g.loss.append(row["loss"])
            if "pattern" in row:
                g.eval_steps.append(row["step"])
                g.accuracy.append(row["accuracy"])
                g.pattern.append(row["pattern"])
        g.scores, g.probe = opened.scores, opened.probe
        tab.run, tab.gathered, tab.scrub_step, tab.shown = run, g, None, None
        tab.view.set_settings({k: v for k, v in run.cfg.to_dict().items() if k in tab.view.controls})
        tab.view.set_layers(run.cfg.layers)
        tab.view.show_scores(None)  # another task's title goes
        tab._scores_drawn = None
        tab._draw()
        self.tab.view.show_message(
            f"{opened.name}: {run.cfg.task}, {run.step:,} steps ({run.status}); "
            f"best {run.task.pattern} score {float(np.max(opened.scores)):.2f}"
        )
        self.tab.view.saveButton.setEnabled(True)
        self.tab.view.viewsButton.setEnabled(self.tab.views_opener is not None)
        tab.opened.emit(run)

    def open_in_views(self) -> None:
        """Show the run on screen in the toy views (its newest weights, even while scrubbing)."""
        run = self.tab.run
        if run is None or self.tab.phase != "idle" or self.tab.views_opener is None:
            return
        name = self.tab.run_name or f"the model trained here ({run.cfg.task}, seed {run.cfg.seed})"
        self.tab.views_opener(name, run, self.tab.preset)

    def save_dialog(self) -> None:
        folder = QFileDialog.getSaveFileName(self.tab.view, "Save the trained model as a folder", "trained-run")[0]
        if folder:
            self.save(folder)

    def save(self, folder: str) -> None:
        """Write the run on screen into ``folder`` (all or nothing) off the GUI thread."""
        run = self.tab.run
        if run is None or self.tab.phase != "idle":
            return
        problem = occupied(folder)  # as the command line refuses a non-empty --out: nothing is touched
        if problem is not None:
            self.tab.view.show_message(f"not saved: {problem}; choose an empty or new folder", error=True)
            return
        self.tab.view.show_message(f"saving to {folder}…")

        self._save.start(
            _saver(run, folder),
            done=lambda f: self.tab.view.show_message(f"saved {f}"),
            failed=lambda exc: self.tab.view.show_message(f"not saved: {exc}", error=True),
            expected=(ConfigError, OSError),
        )

    def _open_failed(self, exc: Exception) -> None:
        self.tab.view.show_message(f"not opened: {exc}", error=True)


def train_presenter(ui: Any, view: TrainView) -> TrainTab:
    """The registry's factory: the presenter, and File > Open trained model… (the window's
    ``Assembly`` gives the menus)."""
    tab = TrainTab(ui.state, ui.compute, view, view)
    action = named(QAction("Open &trained model…", view), "openTrainedAction")
    action.setToolTip("a folder saved by attndesk train: its curves, scores, heatmaps and checkpoints")
    action.triggered.connect(lambda _checked=False: tab.open_dialog())
    ui.menus.add("file", action, "model")
    tab.views_opener = lambda name, run, preset: open_in_views(ui, name, run, preset)
    return tab


def open_in_views(ui: Any, name: str, run: TrainRun, preset: bool) -> None:
    """The toy mode shows ``run``'s weights in the heatmaps: a shipped preset by its name (a
    session keeps it), another run as "trained" (the toy mode holds it); one state change each."""
    if not preset:
        ui.toy.set_trained(name, run)
    weights = name if preset else "trained"
    ui.state.mode = TOY
    ui.state.view.tab = HEATMAPS_TAB
    ui.state.set_config(weights_from=weights)
    ui.compute.evaluate()  # "trained" again, with another run: the state did not change
