"""The Patching tab (pretrained decoders and encoder-decoders): activation patching of every head
and of the residual stream at every layer and position, from the clean prompt into the corrupted
one, as a side job with progress and cancel (``attndesk.core.interp.activation_patching``).

Bad input is refused next to its control before anything runs, with the core's own checks
(``prompt_pair``, ``token_id``) once the model is loaded: prompts of different token lengths,
an answer or wrong token that is several tokens or outside the vocabulary. Before the model is
loaded, the job runs the same checks and its one line goes to the same place.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject

from attndesk.core.errors import ConfigError
from attndesk.core.interp import activation_patching
from attndesk.core.interp.inputs import prompt
from attndesk.core.pretrained import LoadedModel, run_pretrained

from ..jobs.compute import ComputeController
from ..state import AppState
from ..status import StatusModel
from ..views.patching import PatchingShown, PatchingView
from .interp import CancelFlag, InterpPresenter, parse_token, token_checker

PATCHING_TAB = "patching"
CHANNEL = "patching"
SITES = ("head", "resid")
EXAMPLE = (
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
    " Mary",
    " John",
)


def patching_job(
    model: LoadedModel,
    clean: str,
    corrupt: str,
    answer: str | int,
    wrong: str | int | None,
    metric: str,
    budget: int,
    *,
    progress,
    cancel: CancelFlag,
) -> PatchingShown:
    """Worker: every head and every (layer, position) of the residual stream patched (batches sized
    to ``budget`` bytes), and each layer's attention on both prompts (for the head the user clicks)."""
    report = activation_patching(
        model,
        clean,
        corrupt,
        answer,
        wrong,
        sites=SITES,
        metric=metric,
        memory_budget=budget,
        progress=progress,
        cancel=cancel,
    )
    heads, resid = report.results["head"], report.results["resid"]
    progress(1.0, "the attention of both prompts")
    clean_attention: np.ndarray | None = None
    corrupt_attention: np.ndarray | None = None
    try:  # each prompt's weights within the budget on their own: the effects are kept either way
        clean_attention, corrupt_attention = (
            np.asarray(run_pretrained(model, text, memory_budget=budget // 2).weights) for text in (clean, corrupt)
        )
        note = ""
    except ConfigError as exc:
        clean_attention = corrupt_attention = None  # one prompt over the budget: neither is shown
        note = f"the heads' attention is not shown: {exc}"
    return PatchingShown(
        heads.effects,
        resid.effects,
        heads.values,
        resid.values,
        report.clean_tokens,
        report.corrupt_tokens,
        clean_attention,
        corrupt_attention,
        report.metric,
        report.clean_metric,
        report.corrupt_metric,
        report.answer,
        report.wrong,
        report.forward_passes,
        note,
    )


class PatchingTab(InterpPresenter):
    """Binds the ``PatchingView`` to the compute controller (see the module docstring)."""

    CHANNEL = CHANNEL
    WHAT = "activation patching (a logit metric)"

    def __init__(
        self,
        state: AppState,
        compute: ComputeController,
        status: StatusModel,
        view: PatchingView,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(state, compute, status, view, parent)
        view.set_inputs(*EXAMPLE)
        view.inputsEdited.connect(self.check_inputs)
        self.update_availability()

    def availability_changed(self, reason: str | None) -> None:
        model = self.model() if reason is None else None
        self.view.answer.set_checker(None if model is None else token_checker(model, "answer"))
        self.view.wrong.set_checker(None if model is None else token_checker(model, "wrong token"))
        self.check_inputs()

    def check_inputs(self) -> bool:
        """Show the prompts' token counts and whether they match (the tokens are checked by their
        fields); True when nothing is wrong as far as the loaded model tells."""
        model, view = self.model(), self.view
        if model is None or self.unavailable() is not None:
            view.set_counts(None, None)
            view.set_prompt_problem("")
            return True
        try:
            lengths = [prompt(model, text).length for text in (view.clean(), view.corrupt())]
        except ConfigError as exc:
            view.set_prompt_problem(str(exc))
            return False
        view.set_counts(*lengths)
        problem = ""
        if not view.clean().strip() or not view.corrupt().strip():
            problem = "type both prompts: the clean one and the corrupted one"
        elif lengths[0] != lengths[1]:
            problem = (
                f"the clean prompt is {lengths[0]} tokens and the corrupted one {lengths[1]}: patching needs "
                "prompts of equal token length (position i of one is patched into position i of the other)"
            )
        view.set_prompt_problem(problem)
        return not problem

    def request(self):
        view = self.view
        fields = [view.answer] + ([view.wrong] if view.metric_name() == "logit_diff" else [])
        if not self.check_inputs() or not all(f.is_ok() for f in fields):
            view.bar.set_message("fix the line next to its control: nothing was computed", error=True)
            return None
        wrong = parse_token(view.wrong.text()) if view.metric_name() == "logit_diff" else None
        args = (
            view.clean(),
            view.corrupt(),
            parse_token(view.answer.text()),
            wrong,
            view.metric_name(),
            self.state.config.budget_bytes,
        )
        return patching_job, args, "patching every head and the residual stream"

    def show_result(self, result: PatchingShown) -> None:
        self.view.set_shown(result)

    def _failed(self, tag: int, message: str) -> None:
        """A check the job made (the model was not loaded before): the line goes next to its control."""
        super()._failed(tag, message)
        if message.startswith("the clean prompt is"):
            self.view.set_prompt_problem(message)
        self.check_inputs()


__all__ = ["PATCHING_TAB", "PatchingTab", "patching_job"]
