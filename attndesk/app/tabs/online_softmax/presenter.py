"""The online-softmax tab: one head of the toy run on screen, walked block by block as FlashAttention
does. Everything heavy is a side job: Q, K and V of the run (``project_text``: O(L d), not the
[H, L, L] stages a run with intermediates would keep), the head's scores through ``attend``, the
walk, and a large step's picture. A new run cancels a walk made for the old one."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Hashable
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from attndesk.attention.types import head_name
from attndesk.runs.config import AttentionConfig
from attndesk.runs.pipeline import ProjectedText, project_text
from attndesk.session.results import Shown, ToyRun
from attndesk.session.state import AppState
from attndesk.teaching.online_softmax import fitting_block, head_attention, online_softmax

from ...jobs.channels import ONLINE, ONLINE_STEP
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .view import (
    AUTO,
    OnlineSoftmaxView,
    StepFrame,
    WalkShown,
    auto_block,
    below_last_digit,
    step_frame,
)

ONLINE_SOFTMAX_TAB = "online-softmax"
TOY_ONLY = (
    "The online-softmax walk follows the toy model's attention layer, block by block; "
    "a real model's kernels never form its weights, so there is no walk to show here."
)
# the walk keeps every step of one head (scores, exponentials, the full softmax to compare: a few
# float64 [Lq, Lk] matrices), so it stops at 2,048 x 2,048 (about 130 MB)
MAX_WALK_CELLS = 2048 * 2048
BACKGROUND_NICE = 10


def yield_cpu() -> None:
    """Lower this side-job thread's priority so the GUI thread wins the CPU: on 2 busy cores a walk
    at 2,048 tokens held the event loop 110-150 ms by CPU contention alone (its GUI-thread work is
    < 15 ms). Linux nices one thread by its id; elsewhere nothing changes."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        except OSError:  # not allowed here: the job still runs, at the usual priority
            pass


@dataclass(frozen=True, eq=False)
class WalkAnswer:
    """A walk job's answer: the run's projections (reused for other heads and blocks) and the walk."""

    projected: ProjectedText
    shown: WalkShown


def walk_job(
    config: AttentionConfig, toy: ToyRun, projected: ProjectedText | None, head: int, block: int
) -> WalkAnswer:
    """Q, K, V of the run (once per run), ``head``'s scores through ``attend``, the walk (side job);
    ``block`` AUTO picks one for the run's length."""
    yield_cpu()
    inter = toy.result.intermediates
    if projected is None and inter is not None and inter.q is not None and config.weights_from != "random":
        projected = ProjectedText(inter, toy.result.mask, config.head_dim**-0.5)  # trained weights: the run's own Q K V
    if projected is None:
        projected = project_text(config, toy.text, toy.key_text)
    one = head_attention(config, projected.intermediates, projected.mask, head)
    (lq, lk), dv, budget = one.scores.shape, one.values.shape[1], config.budget_bytes
    if block == AUTO:  # auto: the usual block, or the smallest larger one that fits the budget
        block = fitting_block(lq, lk, dv, budget, auto_block(lk)) or auto_block(lk)
    walk = online_softmax(one.scores, one.values, block, budget=budget, sink=one.sink)
    result = toy.result
    shown = WalkShown(
        walk,
        head,
        one.kv_head,
        config.num_heads,
        block,
        list(result.tokens),
        list(result.keys),
        one.context,
        config.dtype,
        below_last_digit(walk.output, walk.reference),
    )
    return WalkAnswer(projected, shown)


def step_job(shown: WalkShown, step: int) -> StepFrame:
    """A large step's picture (side job, at background priority)."""
    yield_cpu()
    return step_frame(shown, step)


class OnlineSoftmaxTab(TabPresenter):
    tab_id = ONLINE_SOFTMAX_TAB
    walkShown = Signal(object)  # a WalkShown is on screen (its first step's picture follows)
    failed = Signal(str)

    def __init__(
        self, state: AppState, compute: ComputeController, view: OnlineSoftmaxView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        self._toy: ToyRun | None = None
        self._projected: tuple[int, ProjectedText] | None = None  # (run_id, Q K V of that run)
        view.walkRequested.connect(self._walk)
        view.set_step_runner(self._run_step)
        state.view.events.target.connect(self._follow_head)

    def key(self, shown: Shown) -> Hashable:
        return shown.run_id  # the walk depends on the run, not on how it is presented

    def show(self, shown: Shown) -> None:
        if shown.toy is None:
            self._toy = None
            self.view.clear(TOY_ONLY)
            return
        result = shown.toy.result
        lq, lk = result.shape
        if lq * lk > MAX_WALK_CELLS:
            self._toy = None
            self.view.clear(
                f"The walk shows every step of one head ({lq:,} x {lk:,} scores, kept here on purpose); "
                "it runs up to 2,048 x 2,048: shorten the text."
            )
            return
        self._toy = shown.toy
        if self._projected is not None and self._projected[0] != shown.run_id:
            self._projected = None
        config = result.config
        self.view.set_heads(config.num_heads, config.num_kv_heads)
        target = self.state.view.target
        if isinstance(target, int) and target < config.num_heads:
            self.view.set_head(target)
        self._walk(self.view.head(), self.view.block())

    def release(self) -> None:
        for channel in (ONLINE, ONLINE_STEP):
            self.compute.side.cancel(channel)
        self._toy, self._projected = None, None
        self.view.clear()

    def _walk(self, head: int, block: int) -> None:
        if self._toy is None or not self.visible():
            self._shown_key = None  # walk the chosen head when the tab is shown next
            return
        run_id = self.compute.current_ids()[0]
        projected = self._projected[1] if self._projected is not None and self._projected[0] == run_id else None
        size = "blocks sized for this run" if block == AUTO else f"blocks of {block} key(s)"
        self.view.show_message(f"walking {head_name(None, head)} in {size} in the background…")
        self.compute.side.submit(
            ONLINE,
            walk_job,
            self._toy.result.config,
            self._toy,
            projected,
            head,
            block,
            done=lambda answer: self._done(run_id, answer),
            failed=self._failed,
            scope="run",
        )

    def _done(self, run_id: int, answer: WalkAnswer) -> None:
        self._projected = (run_id, answer.projected)
        block = self.view.block()
        if answer.shown.head != self.view.head() or block not in (AUTO, answer.shown.block):
            return  # the choice moved on while it ran: its own job is on the way
        self.view.show_walk(answer.shown)
        self.walkShown.emit(answer.shown)

    def _failed(self, message: str) -> None:
        self.view.clear(f"the walk failed: {message}")
        self.failed.emit(message)

    def _run_step(self, shown: WalkShown, step: int) -> None:
        self.compute.side.submit(ONLINE_STEP, step_job, shown, step, done=self.view.show_step_frame, scope="run")

    def _follow_head(self, target) -> None:
        if isinstance(target, int):
            self.view.set_head(target)
