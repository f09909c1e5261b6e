"""The head statistics tab: entropy, distance and shares of every head (of every layer for a real
model), computed as a side job; a row opens that head."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal

from attndesk.session.results import Shown
from attndesk.session.state import HEATMAPS_TAB, STEP_THROUGH_TAB, AppState
from attndesk.teaching.statistics import head_statistics, layer_statistics

from ...jobs.channels import STATISTICS
from ...jobs.compute import ComputeController
from ...modes.pretrained.parts import CROSS_STATS_NOTE, part_weights
from ..presenter import TabPresenter
from .view import HeadStatsView

TOO_LONG = "this run is too long to keep every weight (memory-bounded): shorten the text for head statistics"


def statistics_job(weights: np.ndarray, special: list[str], layered: bool):
    """Worker: per-head (or per layer and head) statistics of ``weights``."""
    return layer_statistics(weights, special=special) if layered else head_statistics(weights, special=special)


class HeadStatsTab(TabPresenter):
    tab_id = "head-stats"
    shownStats = Signal()  # the table shows the statistics of the run on screen
    failed = Signal(str)

    def __init__(
        self, state: AppState, compute: ComputeController, view: HeadStatsView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        view.layerHeadSelected.connect(self.open_head)

    def key(self, shown: Shown):
        # every layer of a run (of the part shown, for an encoder-decoder): one table
        return shown.run_id, self.state.pretrained.part if shown.layers is not None else None

    def show(self, shown: Shown) -> None:
        note = ""
        if shown.layers is not None:  # the statistics cover the whole run, special tokens included
            part = part_weights(shown.layers, self.state.pretrained.part)
            weights, special, layered, shape = part.weights, part.tokens, True, tuple(part.weights.shape[-2:])
            message = f"computing the statistics of every layer and head ({part.name})…"
            note = CROSS_STATS_NOTE if part.part == "cross" else ""
        elif shown.indexable:
            weights, special, layered, shape = shown.map.weights, list(shown.map.keys), False, shown.map.shape
            message = "computing head statistics…"
        else:
            self.view.show_message(TOO_LONG, clear=True)
            return
        self.view.show_message(message)
        self.compute.side.submit(
            STATISTICS,
            statistics_job,
            weights,
            special,
            layered,
            done=lambda stats: self._done(stats, shape, note),
            failed=self._failed,
            scope="run",
        )

    def _done(self, stats, shape, note: str = "") -> None:
        self.view.set_statistics(stats, shape)
        if note:
            self.view.show_message(f"{self.view.infoLabel.text()} · {note}")
        self.shownStats.emit()

    def _failed(self, message: str) -> None:
        self.view.show_message(f"head statistics failed: {message}")
        self._shown_key = None
        self.failed.emit(message)

    def open_head(self, layer: int, head: int) -> None:
        """A row of the table: that head (and layer) in the step-through (toy) or the heatmaps."""
        shown = self.compute.shown()
        if shown is None:
            return
        view = self.state.view
        if shown.layers is not None and layer >= 0:
            self.state.pretrained.layer = int(layer)
            view.target = int(head)
            view.tab = HEATMAPS_TAB
            return
        if head < shown.map.num_heads:
            view.target = int(head)
        view.tab = STEP_THROUGH_TAB if shown.toy is not None else HEATMAPS_TAB
