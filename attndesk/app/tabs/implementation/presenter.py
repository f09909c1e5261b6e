"""The timing dock's "attndesk vs PyTorch" tab: the toy layer through attndesk,
``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention`` (timed runs: a side job)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from attndesk.session.results import Shown
from attndesk.session.state import AppState
from attndesk.teaching.compare import ImplementationComparison, compare_implementations

from ...jobs.channels import IMPLEMENTATIONS
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .view import ImplementationPanel


def implementation_job(config, text: str) -> ImplementationComparison:
    return compare_implementations(config, text, repeats=3)


class ImplementationTab(TabPresenter):
    tab_id = "implementation"
    shownComparison = Signal(object)  # an ImplementationComparison is in the table
    failed = Signal(str)
    started = Signal()  # the comparison was asked for (the dock shows its tab)

    def __init__(
        self, state: AppState, compute: ComputeController, panel: ImplementationPanel, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, panel, parent)
        self.panel = panel
        panel.set_runner(self._run)

    def _on_published(self, shown: Shown) -> None:
        toy = shown.toy
        trained = toy is not None and toy.before_after is not None  # the comparison times the random toy layer
        self.panel.set_result(
            toy.result if toy is not None else None, toy.text if toy is not None else None, toy=not trained
        )
        if self.compute.side.is_busy(IMPLEMENTATIONS):
            self.panel.set_busy(True)

    def _run(self, config, text: str) -> None:
        self.panel.set_busy(
            True, "timing attndesk, F.scaled_dot_product_attention and nn.MultiheadAttention in the background…"
        )
        self.started.emit()
        self.compute.side.submit(
            IMPLEMENTATIONS,
            implementation_job,
            config,
            text,
            done=self._done,
            failed=self._failed,
            scope=None,
            busy=self.panel.set_busy,
        )

    def _done(self, comparison: ImplementationComparison) -> None:
        self.panel.set_comparison(comparison)
        self.shownComparison.emit(comparison)

    def _failed(self, message: str) -> None:
        self.panel.set_busy(False, f"comparison failed: {message}")
        self.failed.emit(message)
