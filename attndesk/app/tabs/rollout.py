"""The rollout tab: attention rollout across the layers of a real model and "follow a token"."""

from __future__ import annotations

from PySide6.QtCore import QObject

from ..jobs.compute import ComputeController
from ..pretrained.parts import NO_CROSS_ROLLOUT, part_weights
from ..results import Shown
from ..state import AppState
from ..views.rollout import RolloutView, trace
from .base import TabPresenter

TOY_MESSAGE = ("Attention rollout and “follow a token” trace attention through the layers of a model, "
               "and the toy model has a single attention layer: there is nothing to trace. "
               "Switch the mode to the pretrained model (Model parameters → Mode) to use this tab.")


class RolloutTab(TabPresenter):
    tab_id = "rollout"

    def __init__(self, state: AppState, compute: ComputeController, view: RolloutView,
                 parent: QObject | None = None) -> None:
        super().__init__(state, compute, parent)
        self.view = view
        view.set_tracer(self._trace)
        view.set_unavailable(TOY_MESSAGE)

    def key(self, shown: Shown):
        # every layer of a run's part: one rollout (an encoder-decoder's part is the state's choice)
        return shown.run_id, self.state.pretrained.part if shown.layers is not None else None

    def show(self, shown: Shown) -> None:  # noqa: A003
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
        self.compute.side.submit("rollout", trace, request, done=self.view.show_trace, scope=None)
