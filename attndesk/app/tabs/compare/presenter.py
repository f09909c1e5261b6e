"""The compare tab: pin a result as A, change anything, see B − A; the one-click teaching pairs.

B is the result on screen (a real model: the layer shown). Large pairs (A, B and B − A drawn
from up to 16 x 2,048^2 weights) and the teaching pairs (two or three runs of the model) are
side jobs; a new result cancels a teaching pair made for the old settings. A pinned A, a teaching
pair and B − A are held in the window's memory ledger (app/jobs/holdings.py) beside the run on screen.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal

from attndesk.session.ledger import LedgerError
from attndesk.session.results import Shown
from attndesk.session.state import AppState
from attndesk.teaching.compare import TeachingComparison, teaching_comparison

from ...jobs.channels import COMPARE, TEACHING
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .view import CompareView, FrameRequest, Operand, compare_frame

# bytes per weight cell a teaching pair keeps: A and B whole (float32), B − A and |B − A| (float64)
TEACHING_BYTES_PER_CELL = 4 + 4 + 8 + 4
TOO_LONG = "this run is too long to keep every weight (memory-bounded): shorten the text to compare"


class CompareTab(TabPresenter):
    tab_id = "compare"
    teachingShown = Signal(object)  # a TeachingComparison is on screen
    failed = Signal(str)

    def __init__(
        self, state: AppState, compute: ComputeController, view: CompareView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        view.set_teaching_runner(self._run_teaching)
        view.set_frame_runner(self._run_frame)
        state.view.events.target.connect(self._follow_head)
        view.memory_budget = lambda: state.config.budget_bytes
        view.ledger = compute.ledger  # A, a teaching pair and B − A are held with everything else

    def show(self, shown: Shown) -> None:
        if not shown.indexable:
            self.view.show_unavailable(TOO_LONG)
        elif shown.toy is not None and shown.toy.before_after is not None:  # trained weights: before vs after
            self.view.set_result(shown.toy.result, shown.toy.text, teaching=False)
            self.view.show_teaching(shown.toy.before_after)
            self.teachingShown.emit(shown.toy.before_after)
        elif shown.toy is not None:
            self.view.set_result(shown.toy.result, shown.toy.text)
        else:  # a real model's layer: its map and output, no toy experiments
            where = f"layer {shown.layer}" if shown.layer is not None else ""
            self.view.set_result(Operand.of_map(shown.map, shown.output, where))

    def copies(self) -> list:
        """None as a whole: the view holds A, a teaching pair and B − A in the ledger one by one."""
        return []

    def release(self) -> None:
        self.compute.side.cancel(COMPARE)
        self.view.release()

    def _on_published(self, shown: Shown) -> None:
        if shown.new_run:
            self.compute.side.cancel(TEACHING)  # a pair for the old settings would confuse
        super()._on_published(shown)

    def _follow_head(self, target) -> None:
        if isinstance(target, int):
            self.view.set_head(target)

    # -- side jobs ------------------------------------------------------------------------------
    def _run_frame(self, request: FrameRequest) -> None:
        """A, B and B − A of a large pair (a mean over heads, the difference, three images); B − A
        is held to the memory budget as it is now (A and B may come from runs under a larger one)."""
        self.compute.side.submit(
            COMPARE, compare_frame, request, done=self.view.show_frame, failed=self._frame_failed, scope=None
        )

    def _frame_failed(self, message: str) -> None:
        self.view.show_message(f"<span style='color:#a33'>B − A failed: {message}</span>")
        self.failed.emit(message)

    def _run_teaching(self, kind: str, config, text: str) -> None:
        shown = self.compute.shown()
        cells = int(np.size(shown.map.weights)) if shown is not None else 0
        try:  # room first: the pair is made in a worker, beside everything the window keeps
            self.compute.ledger.reserve(TEACHING_BYTES_PER_CELL * cells, f"the teaching pair “{kind}”")
        except LedgerError as exc:
            self._teaching_failed(str(exc))
            return
        self.view.show_message(f"running the comparison “{kind}” in the background…")
        self.compute.side.submit(
            TEACHING,
            teaching_comparison,
            kind,
            config,
            text,
            done=self._teaching_done,
            failed=self._teaching_failed,
            scope="run",
            busy=self.view.set_teaching_busy,
        )

    def _teaching_done(self, comparison: TeachingComparison) -> None:
        self.view.show_teaching(comparison)
        self.teachingShown.emit(comparison)

    def _teaching_failed(self, message: str) -> None:
        self.view.show_message(f"<span style='color:#a33'>comparison failed: {message}</span>")
        self.failed.emit(message)
