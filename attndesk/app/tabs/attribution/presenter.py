"""The Attribution tab (pretrained decoders and encoder-decoders): the input text's tokens coloured
by their attribution to a target token's logit after the last position, by integrated gradients
(pad-token baseline), gradient x input or attention x gradient (``attndesk.interp``).

While the tab is on screen it follows the window's input text, model and target: each change is
a new side job that supersedes the one in flight. An empty target means the model's own next
token (its top logit). A target that is several tokens or outside the vocabulary is refused next
to the field, and nothing runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from attndesk.errors import ConfigError
from attndesk.interp import (
    InputAttribution,
    StepAttribution,
    attention_x_gradient,
    gradient_x_input_report,
    integrated_gradients_report,
    step_attributions,
)
from attndesk.interp.anatomy import check_lm
from attndesk.interp.attribution import gradient_pass_bytes
from attndesk.interp.inputs import last_logits, prompt
from attndesk.jobs import JobContext
from attndesk.models import LoadedModel

from ...jobs.channels import ATTRIBUTION
from ..interp import InterpPresenter, parse_token, token_checker
from .view import METHODS

ATTRIBUTION_TAB = "attribution"
IG_BATCH = 32  # integrated-gradient steps per batch at most: Cancel and the progress bar act between batches


def predicted_token(model: LoadedModel, text: str) -> int:
    """The model's own next token after ``text`` (its largest logit)."""
    import torch

    check_lm(model, "an attribution of the next token")
    p = prompt(model, text)
    with model._lock, torch.inference_mode():
        return int(last_logits(model, p.ids, p.decoder_ids)[0].argmax())


STEP_METHOD = {"ig": "integrated_gradients", "gxi": "gradient_x_input"}  # attention x gradient has its heads plot
STEP_IG_NODES = 16  # the step-by-step heatmap's integrated gradients: a backward pass of this many rows per step


@dataclass(frozen=True, eq=False)
class AttributionAnswer:
    """A job's answer: the attribution after the last token and, for a decoder-only model by
    integrated gradients or gradient x input, every step of the text (``by_step``; else None)."""

    attribution: InputAttribution
    by_step: StepAttribution | None
    note: str = ""  # why there is no step-by-step heatmap, when the method and model allow one


def attribution_job(
    model: LoadedModel,
    text: str,
    target: str | int | None,
    method: str,
    steps: int,
    budget: int,
    *,
    ctx: JobContext,
) -> AttributionAnswer:
    """Worker: the attribution of ``target`` (None: the predicted token) by ``method``; integrated
    gradients in batches that fit ``budget`` bytes and hold at most ``IG_BATCH`` steps; then the
    step-by-step heatmap (integrated gradients with at most ``STEP_IG_NODES`` nodes)."""
    if target is None:
        target = predicted_token(model, text)
    first = ctx.scaled(0.0, 0.5, "") if method in STEP_METHOD and model.family == "decoder" else ctx
    if method == "ig":
        budget = min(budget, gradient_pass_bytes(model, IG_BATCH, prompt(model, text).length))
        attribution = integrated_gradients_report(model, text, target, steps, memory_budget=budget, ctx=first)
    elif method == "gxi":
        attribution = gradient_x_input_report(model, text, target)
    else:
        attribution = attention_x_gradient(model, text, target)
    if first is ctx:
        return AttributionAnswer(attribution, None)
    try:
        by_step = step_attributions(
            model,
            text,
            target,
            method=STEP_METHOD[method],
            steps=min(steps, STEP_IG_NODES),
            memory_budget=budget,
            ctx=ctx.scaled(0.5, 1.0, "step by step: "),
        )
    except ConfigError as exc:  # over the memory budget: the attribution above still stands
        return AttributionAnswer(attribution, None, f"no step-by-step heatmap: {exc}")
    return AttributionAnswer(attribution, by_step)


class AttributionTab(InterpPresenter):
    """Binds the ``AttributionView`` to the state and the compute controller (see the module doc)."""

    CHANNEL = ATTRIBUTION
    WHAT = "an attribution of a target token's logit"
    tab_id = ATTRIBUTION_TAB
    AUTO = True

    def availability_changed(self, reason: str | None) -> None:
        model = self.model() if reason is None else None
        self.view.target.set_checker(None if model is None else token_checker(model, "target"))

    def inputs_key(self):
        view = self.view
        return (
            self.state.mode,
            self.state.text,
            view.target.text(),
            view.method(),
            view.steps() if view.method() == "ig" else None,
            self.state.config.budget_bytes,
        )

    def request(self):
        view = self.view
        text = view.target.text()
        if text and not view.target.is_ok():
            view.bar.set_message("fix the target next to its field: nothing was computed", error=True)
            return None
        if not self.state.text.strip():
            view.bar.set_message("type an input text in the Input box", error=True)
            return None
        target = parse_token(text) if text else None
        args = (self.state.text, target, view.method(), view.steps(), self.state.config.budget_bytes)
        return attribution_job, args, dict(METHODS)[view.method()]

    def show_result(self, result: AttributionAnswer) -> None:
        self.view.set_attribution(result.attribution)
        self.view.set_steps(result.by_step, result.note)


__all__ = ["ATTRIBUTION_TAB", "AttributionAnswer", "AttributionTab", "attribution_job", "predicted_token"]
