"""The teaching tabs of the main window: step-through, positions, head statistics, compare,
rollout, and the attndesk-vs-PyTorch table in the timing dock.

``TeachingTabs(window)`` builds the views, adds them as tabs, and owns three side ``JobRunner``s so
their work never cancels (or is cancelled by) the main run:

- ``prepRunner``: what the visible tab needs and the main run did not bring (head statistics,
  a large B - A); the newest request wins, like the tabs themselves.
- ``teachRunner``: the one-click teaching comparisons (they run the model two or three times).
- ``implRunner``: the implementation comparison (timed runs of three implementations).

Results arrive in GUI-thread slots of this object. Only the visible tab is updated when a result
arrives; the others catch up when shown. The window calls ``keep_intermediates`` while building
a job, ``show_payload`` after each result, and ``shutdown`` when closing.

Intermediates (about 4 * H * L * Lk float32 more: ~1 GB at 16 heads x 2048 tokens) are kept only
while the step-through tab is visible; opening it on a result without them recomputes the current
input through the main runner. A rerun rather than a side job: with intermediates the core keeps Q
unscaled instead of folding the scale into its fused projection, so the weights can differ in the
last bits (~1e-7), and the step-through must show the very result on screen.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QTabWidget, QWidget

from attndesk.core.compare import (
    ImplementationComparison, TeachingComparison, compare_implementations, diff_results, teaching_comparison,
)
from attndesk.core.statistics import head_statistics, layer_statistics

from .views.compare import CompareView, ImplementationPanel, text_of
from .views.headstats import HeadStatsView
from .views.positional import PositionalView
from .views.rollout import RolloutView
from .views.stepthrough import StepThroughView
from .worker import JobRunner

def _statistics_job(weights, special, layered: bool):
    """Worker thread: per-head (or per layer and head) statistics of ``weights``."""
    if layered:
        return "stats", layer_statistics(weights, special=special)
    return "stats", head_statistics(weights, special=special)


def _diff_job(a, b, what):
    """Worker thread: B - A of a large pair, and its mean over heads (what the view shows first)."""
    diff = diff_results(a, b, what)
    mean = diff.diff.mean(axis=0) if what == "weights" else None
    return "diff", (a, b, what, diff, mean)


def _teaching_job(kind, config, text):
    return teaching_comparison(kind, config, text)


def _implementation_job(config, text):
    return compare_implementations(config, text, repeats=3)


def pretrained_run(payload):
    """The PretrainedResult behind a payload (``payload.run`` or its result's ``extra["run"]``),
    or None in toy mode."""
    run = getattr(payload, "run", None)
    if run is None:
        run = (getattr(getattr(payload, "result", None), "extra", None) or {}).get("run")
    return run


def indexable_weights(result) -> bool:
    """Whether ``result.weights`` holds every [H, L, Lk] weight by position (a memory-bounded run
    may keep only a downsampled overview, useless for statistics or B - A)."""
    w = getattr(result, "weights", None)
    if w is None or np.ndim(w) != 3:
        return False
    return tuple(np.shape(w)[1:]) == (len(result.tokens), len(result.keys))


def is_toy(payload) -> bool:
    result = payload.result
    return pretrained_run(payload) is None and not (getattr(result, "extra", None) or {}).get("pretrained")


class TeachingTabs(QObject):
    """Creates and feeds the teaching views of ``window`` (a MainWindow)."""

    statisticsShown = Signal()  # the head-statistics table shows the current result
    stepThroughShown = Signal()  # the step-through shows the current result (with intermediates)
    teachingShown = Signal(object)  # a TeachingComparison is on screen
    implementationShown = Signal(object)  # an ImplementationComparison is in the timing dock
    sideFailed = Signal(str)  # a side job failed (the message is also shown in its view)

    TITLES = ("Step-through", "Positions", "Head stats", "Compare", "Rollout")

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.stepThroughView = StepThroughView()
        self.positionalView = PositionalView()
        self.headStatsView = HeadStatsView()
        self.compareView = CompareView()
        self.rolloutView = RolloutView()
        self.implementationPanel = ImplementationPanel()
        self.views: dict[str, QWidget] = dict(zip(self.TITLES, (
            self.stepThroughView, self.positionalView, self.headStatsView, self.compareView, self.rolloutView)))
        for title, view in self.views.items():
            window.add_view_tab(view, title)
        tabs = window.viewTabs
        tabs.setTabToolTip(tabs.indexOf(self.stepThroughView), "one head's computation, stage by stage")
        tabs.setTabToolTip(tabs.indexOf(self.positionalView), "the sinusoidal positional encoding")
        tabs.setTabToolTip(tabs.indexOf(self.headStatsView), "entropy, distance and where each head looks")
        tabs.setTabToolTip(tabs.indexOf(self.compareView), "pin a result, change anything, see B − A")
        tabs.setTabToolTip(tabs.indexOf(self.rolloutView), "pretrained mode: rollout across layers, follow a token")

        # the timing dock becomes two tabs: the timing panel and the implementation comparison
        self.timingTabs = QTabWidget(objectName="timingTabs")
        self.timingTabs.setDocumentMode(True)
        self.timingTabs.addTab(window.timingPanel, "Timing")
        self.timingTabs.addTab(self.implementationPanel, "attndesk vs PyTorch")
        self.timingTabs.setTabToolTip(1, "the same attention through attndesk, F.scaled_dot_product_attention "
                                         "and nn.MultiheadAttention: timings and max differences")
        window.timingDock.setWidget(self.timingTabs)

        self.prepRunner = JobRunner(self, name="attndesk-prepare")
        self.teachRunner = JobRunner(self, name="attndesk-teaching")
        self.implRunner = JobRunner(self, name="attndesk-implementations")
        self.prepRunner.finished.connect(self._on_prepared)
        self.prepRunner.failed.connect(self._on_prep_failed)
        self.teachRunner.finished.connect(self._on_teaching)
        self.teachRunner.failed.connect(self._on_teaching_failed)
        self.teachRunner.cancelled.connect(self._on_teaching_cancelled)
        self.implRunner.finished.connect(self._on_implementation)
        self.implRunner.failed.connect(self._on_implementation_failed)
        self.implRunner.cancelled.connect(self._on_implementation_cancelled)
        self.compareView.set_teaching_runner(self._run_teaching)
        self.compareView.set_diff_runner(self._run_diff)
        self.implementationPanel.set_runner(self._run_implementation)
        self.headStatsView.layerHeadSelected.connect(self._on_head_row)
        tabs.currentChanged.connect(self._on_tab_changed)

        self._payload = None
        self._fresh: set[str] = set()  # views already showing the current payload
        self._prep_for: tuple[str, int] | None = None  # (kind, id(payload)) requested and not back yet
        self._stats_for = None  # what the table's statistics describe: a toy payload, or a pretrained run
        self._prep_payload = None  # the payload the running prep job works for
        self._closed = False

    # -- called by the window -------------------------------------------------------------------
    def keep_intermediates(self, config=None, text: str | None = None, key_text: str | None = None) -> bool:
        """Whether the next toy run should keep its intermediates: while the step-through is on screen."""
        return self.window.viewTabs.currentWidget() is self.stepThroughView

    def show_payload(self, payload) -> None:
        """A new result is on screen: drop side work for the old one, refresh the visible tab."""
        self._payload = payload
        self._fresh = set()
        self._prep_for = None
        self.prepRunner.cancel()  # statistics / reruns for the previous result are stale now
        self.teachRunner.cancel()  # a teaching pair for the old settings would confuse
        result = payload.result
        text = self._text_of(payload) if is_toy(payload) else None
        # cheap and always current: the timing dock's comparison input, the rollout tab's state
        self.implementationPanel.set_result(result, text)
        self._update_rollout_tab()
        self._refresh(self.window.viewTabs.currentWidget())

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        for runner in (self.prepRunner, self.teachRunner, self.implRunner):
            runner.shutdown()

    # -- what each tab shows --------------------------------------------------------------------
    def payload(self):
        return self._payload

    def _text_of(self, payload) -> str:
        return getattr(payload, "text", None) or text_of(payload.result)

    @Slot(int)
    def _on_tab_changed(self, index: int) -> None:
        self._refresh(self.window.viewTabs.widget(index))

    def _refresh(self, widget) -> None:
        """Bring ``widget`` (a tab) up to date with the current payload, once per payload."""
        payload = self._payload
        if payload is None or self._closed:
            return
        name = next((t for t, v in self.views.items() if v is widget), None)
        if name == "Compare" and name in self._fresh and self.compareView.is_computing():
            self.compareView.refresh()  # its B - A job gave way to another tab's work: ask again
            return
        if name is None or name in self._fresh:
            return
        result = payload.result
        pres = pretrained_run(payload)
        if name == "Step-through":
            self._show_step_through(payload)
        elif name == "Positions":
            self.positionalView.set_result(result)
            self._fresh.add(name)
        elif name == "Head stats":
            self._request_statistics(payload)
        elif name == "Compare":
            layer_result = result
            extra = getattr(result, "extra", None) or {}
            if pres is not None and not extra.get("pretrained"):
                layer_result = pres.layer_result(int(extra.get("layer", 0)))
            if not indexable_weights(layer_result):
                self.compareView.set_result(None)  # no stale B left on screen
                self.compareView.maxLabel.setText(
                    "this run is too long to keep every weight (memory-bounded): shorten the text to compare")
            else:
                self.compareView.set_result(layer_result, None if pres is not None else self._text_of(payload))
            self._fresh.add(name)
        elif name == "Rollout":
            self._update_rollout_tab()
            self._fresh.add(name)

    def _update_rollout_tab(self) -> None:
        pres = pretrained_run(self._payload) if self._payload is not None else None
        index = self.window.viewTabs.indexOf(self.rolloutView)
        if pres is None:
            self.rolloutView.set_unavailable(
                "Attention rollout and “follow a token” trace attention through the layers of a model, "
                "and the toy model has a single attention layer: there is nothing to trace. "
                "Switch the mode to the pretrained model (Model parameters → Mode) to use this tab.")
            self.window.viewTabs.setTabToolTip(index, "pretrained mode only: rollout across layers, follow a token")
        else:
            self.window.viewTabs.setTabToolTip(index, "rollout across layers, follow a token")
            if self.rolloutView._result is not pres:
                self.rolloutView.set_result(pres)

    def _show_step_through(self, payload) -> None:
        result = payload.result
        if not is_toy(payload):
            self.stepThroughView.set_result(result)  # says it follows the toy model
            self._fresh.add("Step-through")
            return
        inter = result.intermediates
        if inter is not None and inter.weights is not None:
            self.stepThroughView.set_result(result)
            self._fresh.add("Step-through")
            self.stepThroughShown.emit()
            return
        if inter is not None and inter.weights is None or getattr(getattr(result, "plan", None), "blocked", False):
            self.stepThroughView.set_result(None)
            self.stepThroughView.infoLabel.setText(
                "This run is memory-bounded (too long to hold every score matrix at once), so the step-through "
                "cannot show its stages: shorten the text or use fewer heads.")
            self._fresh.add("Step-through")
            return
        # the step-through is visible now, so this run keeps its intermediates
        self.stepThroughView.set_result(None)
        self.stepThroughView.infoLabel.setText("recomputing this input with every intermediate kept…")
        self.window.compute_now()
        if not self.window.runner.is_busy():  # the current parameters or text cannot run
            self.stepThroughView.infoLabel.setText(
                f"the step-through needs a new run with its intermediates: {self.window.status_text()}")

    def _request_statistics(self, payload) -> None:
        result = payload.result
        pres = pretrained_run(payload)
        if self._stats_for is not None and self._stats_for is (pres if pres is not None else payload):
            self._fresh.add("Head stats")  # e.g. another layer of the same pretrained run
            return
        if pres is not None:
            self.headStatsView.infoLabel.setText("computing the statistics of every layer and head…")
            self._submit_prep("stats", payload, _statistics_job, pres.weights, list(pres.tokens), True)
            return
        if not indexable_weights(result):
            self.headStatsView.set_statistics([], (len(result.tokens), len(result.keys)))
            self.headStatsView.infoLabel.setText(
                "this run is too long to keep every weight (memory-bounded): shorten the text for head statistics")
            self._fresh.add("Head stats")
            return
        self.headStatsView.infoLabel.setText("computing head statistics…")
        self._submit_prep("stats", payload, _statistics_job, result.weights, list(result.keys), False)

    def _submit_prep(self, kind: str, payload, fn, *args) -> None:
        key = (kind, id(payload))
        if self._prep_for == key:
            return  # already on its way
        self._prep_for = key
        self._prep_payload = payload
        self.prepRunner.submit(self.prepRunner.next_generation(), fn, *args)

    def _run_diff(self, a, b, what: str) -> None:
        """The compare view's B - A for large results: in the worker (the newest request wins)."""
        self._prep_for = None
        self.prepRunner.submit(self.prepRunner.next_generation(), _diff_job, a, b, what)

    @Slot(int, object)
    def _on_prepared(self, _generation: int, answer) -> None:
        kind, value = answer
        payload = self._prep_payload
        self._prep_for = None
        if kind == "diff":
            self.compareView.show_diff(*value)  # the view ignores a pair it no longer shows
            return
        same_run = pretrained_run(payload) is not None and pretrained_run(payload) is pretrained_run(self._payload)
        if payload is not self._payload and not (kind == "stats" and same_run):
            return  # a newer result arrived meanwhile (another layer of the same run keeps its statistics)
        payload = self._payload
        result = payload.result
        if kind == "stats":
            pres = pretrained_run(payload)
            self._stats_for = pres if pres is not None else payload
            # the statistics cover the whole run: with special tokens hidden the shown layer is smaller
            shape = tuple(pres.weights.shape[-2:]) if pres is not None else (len(result.tokens), len(result.keys))
            self.headStatsView.set_statistics(value, shape)
            self._fresh.add("Head stats")
            self.statisticsShown.emit()

    @Slot(int, str)
    def _on_prep_failed(self, _generation: int, message: str) -> None:
        kind = self._prep_for[0] if self._prep_for else None
        self._prep_for = None
        if kind == "stats":
            self.headStatsView.infoLabel.setText(f"head statistics failed: {message}")
        if self.compareView.is_computing():
            self.compareView.maxLabel.setText(f"<span style='color:#a33'>B − A failed: {message}</span>")
        self.sideFailed.emit(message)

    # -- head selection ---------------------------------------------------------------------------
    @Slot(int, int)
    def _on_head_row(self, layer: int, head: int) -> None:
        """A row of the statistics: layer -1 is the toy model's single layer."""
        if layer < 0 or self._payload is None or is_toy(self._payload):
            self.open_head(head)
            return
        self.compareView.set_head(head)
        pretrained = getattr(self.window, "pretrained", None)
        if pretrained is not None and hasattr(pretrained, "open_head"):
            pretrained.open_head(layer, head)  # that layer, that head, large in the Heatmaps tab
        self.window.viewTabs.setCurrentWidget(self.window.heatmapPanel)

    @Slot(int)
    def open_head(self, head: int) -> None:
        """A head chosen in the statistics: open it in the step-through, compare and heatmaps."""
        result = self._payload.result if self._payload is not None else None
        if result is None:
            return
        toy = is_toy(self._payload)
        num_heads = result.num_heads
        if head < num_heads:
            self.window.heatmapPanel.set_view_target(int(head))
        self.compareView.set_head(head)
        if toy:
            self.stepThroughView.set_head(head)
            self.window.viewTabs.setCurrentWidget(self.stepThroughView)
        else:
            self.window.viewTabs.setCurrentWidget(self.window.heatmapPanel)

    # -- teaching comparisons ---------------------------------------------------------------------
    def _run_teaching(self, kind: str, config, text: str) -> None:
        for button in self.compareView.teachButtons.values():
            button.setEnabled(False)
        self.compareView.maxLabel.setText(f"running the comparison “{kind}” in the background…")
        self.teachRunner.submit(self.teachRunner.next_generation(), _teaching_job, kind, config, text)

    def _teaching_done(self) -> None:
        toy = self._payload is not None and is_toy(self._payload)
        for button in self.compareView.teachButtons.values():
            button.setEnabled(toy)

    @Slot(int, object)
    def _on_teaching(self, _generation: int, comparison: TeachingComparison) -> None:
        self._teaching_done()
        self.compareView.show_teaching(comparison)
        self.teachingShown.emit(comparison)

    @Slot(int, str)
    def _on_teaching_failed(self, _generation: int, message: str) -> None:
        self._teaching_done()
        self.compareView.maxLabel.setText(f"<span style='color:#a33'>comparison failed: {message}</span>")
        self.sideFailed.emit(message)

    @Slot(int)
    def _on_teaching_cancelled(self, _generation: int) -> None:
        self._teaching_done()

    # -- implementation comparison ----------------------------------------------------------------
    def _run_implementation(self, config, text: str) -> None:
        self.implementationPanel.runButton.setEnabled(False)
        self.implementationPanel.notesLabel.setText(
            "timing attndesk, F.scaled_dot_product_attention and nn.MultiheadAttention in the background…")
        self.timingTabs.setCurrentWidget(self.implementationPanel)
        self.implRunner.submit(self.implRunner.next_generation(), _implementation_job, config, text)

    @Slot(int, object)
    def _on_implementation(self, _generation: int, comparison: ImplementationComparison) -> None:
        self.implementationPanel.runButton.setEnabled(self.implementationPanel._config is not None)
        self.implementationPanel.set_comparison(comparison)
        self.implementationShown.emit(comparison)

    @Slot(int, str)
    def _on_implementation_failed(self, _generation: int, message: str) -> None:
        self.implementationPanel.runButton.setEnabled(self.implementationPanel._config is not None)
        self.implementationPanel.notesLabel.setText(f"comparison failed: {message}")
        self.sideFailed.emit(message)

    @Slot(int)
    def _on_implementation_cancelled(self, _generation: int) -> None:
        self.implementationPanel.runButton.setEnabled(self.implementationPanel._config is not None)


__all__ = ["TeachingTabs", "indexable_weights", "is_toy", "pretrained_run"]
