"""The rollout tab: attention rollout across the layers of a real model, the attention flow beside
it, and "follow a token"."""

from __future__ import annotations

import itertools
from functools import partial

from PySide6.QtCore import QObject, Signal, Slot

from attndesk.jobs import JobContext
from attndesk.session.results import Shown
from attndesk.session.state import AppState

from ...jobs.channels import FLOW, ROLLOUT
from ...jobs.compute import ComputeController
from ...modes.pretrained.parts import NO_CROSS_ROLLOUT, part_weights
from ..presenter import TabPresenter
from .view import RolloutView, flow_trace, trace

TOY_MESSAGE = (
    "Attention rollout and “follow a token” trace attention through the layers of a model, "
    "and the toy model has a single attention layer: there is nothing to trace."
)


def flow_job(request: tuple, *, ctx: JobContext | None = None):
    """Side job: the attention flow of ``request`` (see ``view.flow_trace``)."""
    return flow_trace(request, ctx=ctx)


class RolloutTab(TabPresenter):
    tab_id = "rollout"
    _flowProgressed = Signal(int, float, str)  # (flow job, fraction, message), from the worker thread

    def __init__(
        self, state: AppState, compute: ComputeController, view: RolloutView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        view.set_tracer(self._trace)
        view.set_flow_tracer(self._flow)
        view.set_unavailable(TOY_MESSAGE)
        self._flow_jobs = itertools.count(1)
        self._flow_job = 0
        self._flowProgressed.connect(self._on_flow_progress)
        view.flowCheck.toggled.connect(self._on_flow_toggled)
        compute.cancelRequested.connect(self._on_escape)

    def key(self, shown: Shown):
        # every layer of a run's part: one rollout (an encoder-decoder's part is the state's choice)
        return shown.run_id, self.state.pretrained.part if shown.layers is not None else None

    def show(self, shown: Shown) -> None:
        if shown.layers is None:
            self.view.set_unavailable(TOY_MESSAGE)
            return
        part = part_weights(shown.layers, self.state.pretrained.part)
        if not part.square:
            self.view.set_unavailable(NO_CROSS_ROLLOUT)
        elif part.part == "self" and self.view.result() is not shown.layers:
            self.view.set_result(shown.layers)
        elif part.part != "self" and getattr(self.view.result(), "weights", None) is not part.weights:
            self.view.set_result(part)  # the decoder's self-attention over the target tokens

    def _trace(self, request: tuple) -> None:
        """Rollout and follow-a-token of a real model's run (layers x L x L products): a side job."""
        self.compute.side.submit(ROLLOUT, trace, request, done=self.view.show_trace, scope=None)

    def _flow(self, request: tuple) -> None:
        """The attention flow (L x L maximum-flow problems): a side job with progress; a newer
        request (another run, fewer layers) supersedes it."""
        job = self._flow_job = next(self._flow_jobs)

        def progress(fraction: float, message: str = "", job: int = job) -> None:
            self._flowProgressed.emit(job, float(fraction), str(message))

        self.compute.side.submit(
            FLOW,
            flow_job,
            request,
            progress=progress,
            scope=None,
            done=partial(self._flow_done, job),
            failed=partial(self._flow_failed, job),
            busy=self._flow_busy,
        )

    def _flow_busy(self, busy: bool) -> None:
        """The flow job is over however it ended: one still awaited here stopped with no answer."""
        if not busy and self._flow_job:
            self._flow_job = 0
            if self.view.flow_request() is not None:
                self.view.flow_stopped("attention flow stopped")

    def _on_flow_toggled(self, on: bool) -> None:
        if not on:
            self.cancel_flow("")

    def _on_escape(self) -> None:
        self.cancel_flow("attention flow cancelled")

    def cancel_flow(self, message: str) -> None:
        """Stop the flow in flight (Esc, or the switch turned off)."""
        if not self._flow_job:
            return
        self._flow_job = 0
        self.compute.side.cancel(FLOW)
        if self.view.flow_request() is not None:
            self.view.flow_stopped(message)

    def _flow_done(self, job: int, flow) -> None:
        if job == self._flow_job:
            self._flow_job = 0
            self.view.show_flow(flow)

    def _flow_failed(self, job: int, message: str) -> None:
        if job == self._flow_job:
            self._flow_job = 0
            self.view.flow_stopped(f"attention flow failed: {message}")

    @Slot(int, float, str)
    def _on_flow_progress(self, job: int, fraction: float, message: str) -> None:
        if job == self._flow_job:
            self.view.set_flow_progress(fraction, message)
