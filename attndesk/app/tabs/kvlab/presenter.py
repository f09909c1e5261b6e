"""The KV cache tab: a policy's compressed run and a sweep of budgets, computed as side jobs
(``attndesk.kvcache.lab``) with progress and cancel; the models are the shipped toy presets and,
in pretrained mode, the decoder open in the window. A sweep store over a corpus (``attndesk
kvcache --corpus``) opens its curves over the texts, read in a side job."""

from __future__ import annotations

from PySide6.QtCore import QObject

from attndesk.kvcache.lab import corpus_curves, lab_run, lab_sweep
from attndesk.session.results import Shown
from attndesk.session.state import AppState
from attndesk.train.presets import list_presets

from ...jobs.channels import KVLAB
from ...jobs.compute import ComputeController
from ..interp import model_family, model_name
from ..presenter import TabPresenter
from .view import ORACLE, KVLabView

KVLAB_TAB = "kvcache"
LAB_PRESETS = ("needle", "needle-deep", "needle-sink", "needle-off-by-one", "induction")  # first: the lab's default


class KVLabTab(TabPresenter):
    tab_id = KVLAB_TAB

    def __init__(self, state: AppState, compute: ComputeController, view: KVLabView, parent: QObject | None = None):
        super().__init__(state, compute, view, parent)
        view.bar.runRequested.connect(self.run)
        view.sweepRequested.connect(self.sweep)
        view.storeRequested.connect(self.open_store)
        view.bar.cancelRequested.connect(self.cancel)
        compute.cancelRequested.connect(self._on_escape)
        view.modelCombo.currentIndexChanged.connect(lambda _i: view.clear_curves())
        self._offer_models()

    def key(self, shown: Shown):
        return self.state.mode.kind, self.state.mode.path

    def show(self, shown: Shown) -> None:
        self._offer_models()

    def _offer_models(self) -> None:
        shipped = {p["name"] for p in list_presets() if p["shipped"]}
        models = [(f"Trained toy: {name}", ("preset", name)) for name in LAB_PRESETS if name in shipped]
        mode = self.state.mode
        if mode.path is not None and model_family(mode) == "decoder":
            models.insert(0, (f"Pretrained: {model_name(mode)}", ("pretrained", str(mode.path))))
        self.view.set_models(models)

    def _show_busy(self, busy: bool) -> None:
        """A run or sweep in flight or over (the side jobs call it, however the job ends)."""
        self.view.bar.set_busy(busy)
        self.view.sweepButton.setEnabled(not busy)
        self.view.storeButton.setEnabled(not busy)

    def run(self) -> None:
        view = self.view
        view.bar.set_message(f"running {view.policy()} at budget {view.budgetSpin.value()}…")
        self.compute.side.submit(
            KVLAB,
            lab_run,
            view.source(),
            view.textEdit.text(),
            view.policy(),
            view.budgetSpin.value(),
            decode=view.decodeSpin.value(),
            options=view.option_values(),
            done=self._ran,
            failed=self._failed,
            progress=view.bar.set_progress,
            scope=None,
            busy=self._show_busy,
        )

    def sweep(self) -> None:
        view = self.view
        policies = list(dict.fromkeys([view.policy(), ORACLE]))
        view.bar.set_message(f"sweeping {' and '.join(policies)} over 10 budgets…")
        self.compute.side.submit(
            KVLAB,
            lab_sweep,
            view.source(),
            view.textEdit.text(),
            policies,
            decode=view.decodeSpin.value(),
            options={view.policy(): view.option_values()},
            done=self._swept,
            failed=self._failed,
            progress=view.bar.set_progress,
            scope=None,
            busy=self._show_busy,
        )

    def open_store(self, path: str) -> None:
        """The curves of the sweep store ``path`` (a folder) over its texts."""
        self.view.bar.set_message(f"reading {path}…")
        self.compute.side.submit(
            KVLAB,
            corpus_curves,
            path,
            done=self._opened,
            failed=self._failed,
            scope=None,
            busy=self._show_busy,
        )

    def cancel(self) -> None:
        self.compute.side.cancel(KVLAB)  # the bar goes idle (_show_busy)
        self.view.bar.set_message("cancelled")

    def _on_escape(self) -> None:
        if self.view.bar.is_busy():
            self.cancel()

    def _ran(self, lab) -> None:
        self.view.bar.set_message("")
        self.view.show_run(lab)

    def _swept(self, table) -> None:
        self.view.bar.set_message(f"swept {len(table)} runs")
        self.view.show_sweep(table)

    def _opened(self, found) -> None:
        self.view.bar.set_message(f"{len(found.kl)} policies over {found.texts} texts")
        self.view.show_corpus(found)

    def _failed(self, message: str) -> None:
        self.view.bar.set_message(message, error=True)


__all__ = ["KVLAB_TAB", "KVLabTab"]
