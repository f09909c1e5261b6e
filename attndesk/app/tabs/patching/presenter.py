"""The Patching tab (pretrained decoders and encoder-decoders): activation patching of every head
(an encoder-decoder's encoder, decoder and cross-attention heads) and of the residual stream at
every layer and position, from the clean prompt into the corrupted one, as a side job with
progress and cancel (``attndesk.interp.activation_patching``).

Bad input is refused next to its control before anything runs, with the core's own checks
(``prompt_pair``, ``token_id``) once the model is loaded: prompts of different token lengths,
an answer or wrong token that is several tokens or outside the vocabulary. Before the model is
loaded, the job runs the same checks and its one line goes to the same place.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject

from attndesk.errors import ConfigError
from attndesk.interp import activation_patching
from attndesk.interp.inputs import prompt
from attndesk.interp.patching import PatchingReport
from attndesk.jobs import JobContext
from attndesk.models import LoadedModel, run_pretrained
from attndesk.session.state import AppState
from attndesk.session.status import StatusModel

from ...jobs.channels import PATCHING
from ...jobs.compute import ComputeController
from ..interp import InterpPresenter, parse_token, token_checker
from .view import PART_LABELS, PartHeads, PatchingShown, PatchingView

PATCHING_TAB = "patching"
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
    ctx: JobContext,
) -> PatchingShown:
    """Worker: every head and every (layer, position) of the residual stream patched (batches sized
    to ``budget`` bytes); an encoder-decoder's decoder self-attention and cross-attention heads too
    (its decoder reads its start token alone, in the patched runs and in the attention shown: the
    metric is its first output token's); and each part's attention on both prompts (for the head
    the user clicks)."""
    encoder_decoder = model.family == "encoder-decoder"
    parts = ("self", "decoder", "cross") if encoder_decoder else ("self",)
    reports = {}
    for n, part in enumerate(parts):
        where = "" if len(parts) == 1 else f"{PART_LABELS[part] if part != 'self' else 'encoder'}: "
        reports[part] = activation_patching(
            model,
            clean,
            corrupt,
            answer,
            wrong,
            sites=SITES if part == "self" else ("head",),  # the residual stream: the first part's
            metric=metric,
            part=part,
            memory_budget=budget,
            ctx=ctx.scaled(n / len(parts), (n + 1) / len(parts), where),
        )
    ctx.progress(1.0, "the attention of both prompts")
    runs, note = _attention(model, (clean, corrupt), budget)
    report = reports["self"]
    resid = report.results["resid"]
    return PatchingShown(
        {part: _part_heads(reports[part], part, runs) for part in parts},
        resid.effects,
        resid.values,
        report.clean_tokens,
        report.corrupt_tokens,
        report.metric,
        report.clean_metric,
        report.corrupt_metric,
        report.answer,
        report.wrong,
        sum(r.forward_passes for r in reports.values()),
        note,
        encoder_decoder,
        report.warning,
    )


def _attention(model: LoadedModel, texts: tuple[str, str], budget: int) -> tuple[list, str]:
    """Each prompt's run (every part's weights) within the budget on their own, or ([], why not):
    the effects are kept either way."""
    try:
        return [run_pretrained(model, text, memory_budget=budget // 2) for text in texts], ""
    except ConfigError as exc:  # one prompt over the budget: neither is shown
        return [], f"the heads' attention is not shown: {exc}"


def _part_heads(report: PatchingReport, part: str, runs: list) -> PartHeads:
    """One part's heads, with each prompt's weights of that part and their (query, key) labels."""
    heads = report.results["head"]
    clean_run, corrupt_run = runs if runs else (None, None)
    decoder = list(report.positions)  # the decoder's tokens for the decoder and cross parts

    def labels(tokens: list[str]) -> tuple[list[str], list[str]]:  # (queries, keys); cross: target over source
        return {"self": (tokens, tokens), "decoder": (decoder, decoder), "cross": (decoder, tokens)}[part]

    return PartHeads(
        heads.effects,
        heads.values,
        None if clean_run is None else np.asarray(clean_run.part_weights(part)),
        None if corrupt_run is None else np.asarray(corrupt_run.part_weights(part)),
        labels(report.clean_tokens),
        labels(report.corrupt_tokens),
        _masked(clean_run, part),
        _masked(corrupt_run, part),
    )


def _masked(run, part: str) -> np.ndarray | None:
    """[layers, Lq, Lk] bool: the cells each layer of ``part`` could not attend to (None: none masked)."""
    if run is None:
        return None
    weights = run.part_weights(part)
    masks = [run.layer_mask(layer, part) for layer in range(weights.shape[0])]
    if all(mask is None for mask in masks):
        return None
    free = np.ones(weights.shape[-2:], dtype=bool)
    return np.stack([~np.asarray(free if mask is None else mask, dtype=bool) for mask in masks])


class PatchingTab(InterpPresenter):
    """Binds the ``PatchingView`` to the compute controller (see the module docstring)."""

    tab_id = PATCHING_TAB
    CHANNEL = PATCHING
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
