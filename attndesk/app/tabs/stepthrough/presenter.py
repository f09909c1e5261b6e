"""The step-through tab: every stage of one head of the run on screen (the toy layer, or the real
model's layer and part shown: a side job runs it again keeping that layer's stages).

Intermediates cost about four times the weights' memory, so a run keeps them only while this tab
is on screen: the toy mode asks for them when ``view.tab`` is the step-through, and the compute
controller reruns the input once. The step-through always shows the very result on screen.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from attndesk.session.results import Shown
from attndesk.session.state import STEP_THROUGH_TAB, AppState

from ...jobs.channels import PRETRAINED_STAGES, STAGES
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .steps import stage_run
from .view import StepThroughView, stage_images

TOY_ONLY = "The step-through follows the toy model's single attention layer: switch the mode to Toy model."
BOUNDED = (
    "This run is memory-bounded (too long to hold every score matrix at once), so the step-through "
    "cannot show its stages: shorten the text or use fewer heads."
)


def heads_of(result) -> int:
    inter = result.intermediates
    weights = inter["weights"] if isinstance(inter, dict) else inter.weights
    return int(weights.shape[0])


def has_stages(result) -> bool:
    inter = getattr(result, "intermediates", None)
    if inter is None:
        return False
    weights = inter.get("weights") if isinstance(inter, dict) else getattr(inter, "weights", None)
    return weights is not None


class StepThroughTab(TabPresenter):
    tab_id = STEP_THROUGH_TAB
    shownResult = Signal()  # the strip shows the result on screen, with its intermediates

    def __init__(
        self, state: AppState, compute: ComputeController, view: StepThroughView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        view.set_preparer(self._prepare)
        view.drawn.connect(self.shownResult)
        state.view.events.target.connect(self._follow_head)

    def show(self, shown: Shown) -> None:
        if shown.layers is not None:
            self._show_pretrained(shown)
            return
        if shown.toy is None:
            self.view.show_message(TOY_ONLY)
            return
        result = shown.toy.result
        if has_stages(result):
            self.view.note("drawing every stage…")
            self._prepare(result, min(self.view.head(), heads_of(result) - 1))
            return
        plan = getattr(result, "plan", None)
        if "intermediates" in shown.asked or (plan is not None and plan.blocked):
            self.view.show_message(BOUNDED)
        elif self.compute.is_pending():
            self.view.show_message("recomputing this input with every intermediate kept…")
            self._shown_key = None  # the rerun's result is what this tab waits for
        else:  # the current parameters or text cannot run
            self._shown_key = None
            self.view.show_message(f"the step-through needs a new run with its intermediates: {self.state_problem()}")

    def _show_pretrained(self, shown: Shown) -> None:
        """A real model's layer: its stages come from one more forward pass keeping them (a side job)."""
        run, state = shown.layers, self.state
        assert run is not None, "a pretrained run's layers"
        if run.family == "vision":  # no text to run again; the window shows the tab's empty state
            self.view.show_message(f"{run.model_name} reads an image: the step-through works on text tokens")
            return
        part = shown.present_key[2] if isinstance(shown.present_key, tuple) and len(shown.present_key) > 2 else "self"
        target = state.target_text if run.family == "encoder-decoder" and state.target_text.strip() else None
        self.view.show_message(f"running {run.model_name} again, keeping layer {shown.layer}'s stages…")
        self.compute.side.submit(
            PRETRAINED_STAGES,
            stage_run,
            shown.mode.path,
            state.text,
            target,
            shown.layer,
            part,
            scaled=run.scaled,
            causal=run.causal,
            ablate=run.ablate,
            scope="shown",
            done=lambda staged: self._prepare(staged, min(self.view.head(), heads_of(staged) - 1)),
            failed=lambda message: self.view.show_message(f"the stages could not be computed: {message}"),
        )

    def release(self) -> None:
        self.compute.side.cancel(PRETRAINED_STAGES)
        self.compute.side.cancel(STAGES)
        self.view.show_message("")  # every stage of the old run (about four times its weights) is dropped

    def _prepare(self, result, head: int) -> None:
        """The stage images of one head, made by a side job (ten matrices of up to L x L)."""
        self.compute.side.submit(
            STAGES,
            stage_images,
            result,
            head,
            scope="shown",
            done=lambda images: self._draw(result, head, images),
            failed=lambda message: self.view.note(f"the stages could not be drawn: {message}"),
        )

    def _draw(self, result, head: int, images) -> None:
        if self.view.result() is result:
            self.view.show_stages(result, head, images)
        else:
            self.view.set_result(result, images)

    def state_problem(self) -> str:
        return self.compute.status.message

    def _follow_head(self, target) -> None:
        if isinstance(target, int):
            self.view.set_head(target)
