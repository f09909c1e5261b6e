"""What the interpretability tabs (Patching, Attribution, Logit lens) share: which model is on and
whether it can be asked for next-token logits, token checks against its tokenizer, and running a
core function as a side job of the compute controller with progress and cancel.

A job is ``fn(path, *args, ctx=...)``: it loads the model (cached for the session) in the worker
thread and calls the core (``attndesk.interp``) with the job's context. A new request on a tab's
channel supersedes the one in flight (the runner cancels it); Esc and the tab's Cancel button stop
it; the window never waits for one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from PySide6.QtCore import QObject, Signal, Slot

from attndesk.errors import ConfigError
from attndesk.interp.anatomy import check_lm
from attndesk.interp.inputs import token_id
from attndesk.jobs import JobContext
from attndesk.jobs.executor import Channel
from attndesk.models import LoadedModel, load_pretrained, loaded_model, packaged_model_dir, read_spec
from attndesk.models.token_text import id_texts
from attndesk.session.state import AppState, ModeId
from attndesk.session.status import StatusModel

from ..jobs.compute import ComputeController
from ..widgets.interp import Checker
from .presenter import TabPresenter

TOY_REASON = "{what} reads a real model's next-token logits: switch to a pretrained decoder or encoder-decoder"
NEXT_TOKEN_MODELS = "a decoder (GPT-2, LLaMA, …) or an encoder-decoder (T5, BART)"


def parse_token(text: str) -> str | int:
    """A token field's text: ``id:N`` is the token id N, anything else the token's text as typed."""
    stripped = text.strip()
    if stripped.lower().startswith("id:") and stripped[3:].strip().lstrip("-").isdigit():
        return int(stripped[3:].strip())
    return text


def token_checker(model: LoadedModel, what: str) -> Checker:
    """``text -> (ok, line)`` with the core's own check (``token_id``): one token of the vocabulary."""

    def check(text: str) -> tuple[bool, str]:
        try:
            tid = token_id(model, parse_token(text), what)
        except ConfigError as exc:
            return False, str(exc)
        return True, f"{id_texts(model.tokenizer, [tid])[0]} (id {tid})"

    return check


def model_name(mode: ModeId) -> str:
    return "all-MiniLM-L6-v2" if mode.path is None else Path(mode.path).name


_FAMILIES: dict[ModeId, str | None] = {}


def model_family(mode: ModeId) -> str | None:
    """The pretrained model's family ("encoder", "decoder", "encoder-decoder"), or None (toy mode, a
    folder that cannot be read); config.json and the weights' headers, read once per folder."""
    if mode.kind != "pretrained":
        return None
    if mode not in _FAMILIES:
        try:
            _FAMILIES[mode] = read_spec(packaged_model_dir() if mode.path is None else mode.path).family
        except ConfigError:
            _FAMILIES[mode] = None
    return _FAMILIES[mode]


def image_reason(mode: ModeId, what: str, needs: str = "a text model") -> str | None:
    """Why ``what`` (a feature that reads text) does not apply to a vision model, and what does
    apply instead; None for any other model."""
    if model_family(mode) != "vision":
        return None
    return (
        f"{model_name(mode)} is an image model and {what} reads text: open {needs} for it "
        "(this image's attention is in the Image tab)."
    )


def family_reason(mode: ModeId, what: str) -> str | None:
    """Why ``what`` (a next-token feature) is off for this model's kind, or None (checked before
    loading; a checkpoint without its LM head is found once it is loaded)."""
    family = model_family(mode)
    if family is None:
        return TOY_REASON.format(what=what)
    if family == "encoder":
        return (
            f"{model_name(mode)} is an encoder-only model: it predicts no next token, so {what} has nothing "
            f"to measure. It needs {NEXT_TOKEN_MODELS}."
        )
    return image_reason(mode, what, NEXT_TOKEN_MODELS)


def next_token_reason(mode: ModeId, what: str) -> str | None:
    """Why ``what`` (a next-token feature) does not apply to this model: an encoder-only family, or
    a loaded checkpoint without its LM head (found once a run has loaded it; never loads); or None."""
    reason = family_reason(mode, what)
    if reason is not None or mode.kind != "pretrained":
        return reason
    model = loaded_model(mode.path)
    if model is not None:
        try:
            check_lm(model, what)
        except ConfigError as exc:
            return str(exc)
    return None


class InterpPresenter(TabPresenter):
    """A presenter that computes on request (the interpretability tabs): subclasses set ``CHANNEL``
    and ``WHAT`` (the feature named in messages), give a view with ``bar`` (a ``RunBar``), and implement ``request()`` (None: nothing to run) and ``show_result(result)``."""

    CHANNEL: ClassVar[Channel]
    WHAT = ""
    AUTO = False  # with AUTO, the tab computes on its own while it is on screen (``tab_id``)
    _progressed = Signal(int, float, str)  # (job tag, fraction, message), from the worker thread

    def __init__(
        self, state: AppState, compute: ComputeController, status: StatusModel, view: Any, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)
        self.status = status
        self._tags = itertools.count(1)
        self._tag = 0  # the job in flight (0: none)
        self._asked: Any = None  # inputs_key() of the last job asked for (AUTO tabs)
        self._progressed.connect(self._on_progress)
        view.bar.runRequested.connect(self.run)
        view.bar.cancelRequested.connect(self.cancel)
        compute.cancelRequested.connect(self.cancel)
        # bound methods, not lambdas: Qt and psygnal drop them when the presenter goes (the base
        # connects the published result to ``_on_published``)
        state.events.mode.connect(self._on_mode)
        for event in (state.view.events.tab, state.events.text, state.events.target_text):
            event.connect(self._on_input)
        if self.AUTO:  # an AUTO tab follows its own inputs too, and shows at once whether it applies
            view.inputsEdited.connect(self.follow)
            self.update_availability()

    def inputs_key(self) -> Any:
        """What the result depends on (AUTO tabs recompute when it changes while they are shown)."""
        return None

    def follow(self) -> None:
        """An AUTO tab on screen computes when its inputs changed since the last job it asked for."""
        if self.AUTO and self.visible() and self.unavailable() is None and self.inputs_key() != self._asked:
            self.run()

    # -- the model ---------------------------------------------------------------------------------
    def model(self) -> LoadedModel | None:
        """The loaded model (never loads: None until a run or a job has loaded it)."""
        mode = self.state.mode
        return loaded_model(mode.path) if mode.kind == "pretrained" else None

    def unavailable(self) -> str | None:
        """Why this tab cannot compute for the current model, or None (the window shows it as the
        tab's empty state: ``tabs/registry.py``)."""
        return next_token_reason(self.state.mode, self.WHAT)

    def update_availability(self) -> None:
        reason = self.unavailable()
        self.view.bar.set_available(reason is None)
        self.availability_changed(reason)

    def availability_changed(self, reason: str | None) -> None:
        """Hook: the tab's controls follow (token checkers, a new run)."""

    def _on_published(self, _shown: Any) -> None:
        self.update_availability()  # the run may have loaded the model (its tokenizer, its LM head or none)
        self.follow()

    def _on_input(self, _value: Any) -> None:
        self.follow()

    def _on_mode(self, _mode: ModeId) -> None:
        self.cancel(quiet=True)
        self.update_availability()
        self.follow()

    # -- jobs --------------------------------------------------------------------------------------
    def request(self) -> tuple[Callable[..., Any], tuple, str] | None:
        """(job function, its arguments after the model's path, what the bar says), or None after
        saying why nothing runs."""
        raise NotImplementedError

    def show_result(self, result: Any) -> None:
        raise NotImplementedError

    @Slot()
    def run(self) -> None:
        """Compute what the controls ask (a job already in flight is superseded)."""
        if self.unavailable() is not None:
            self.update_availability()
            return
        asked = self.request()
        if asked is None:
            return
        fn, args, message = asked
        self._asked = self.inputs_key()
        tag = self._tag = next(self._tags)
        self.view.bar.set_message(f"{message}… (Esc cancels)")

        def progress(fraction: float, text: str = "", tag: int = tag) -> None:
            self._progressed.emit(tag, float(fraction), str(text))

        self.compute.side.submit(
            self.CHANNEL,
            _job,
            fn,
            self.state.mode.path,
            *args,
            progress=progress,
            done=partial(self._done, tag),
            failed=partial(self._failed, tag),
            scope=None,
            busy=self._show_busy,
        )

    def _show_busy(self, busy: bool) -> None:
        """The channel's job in flight or over (the side jobs call it, however the job ends)."""
        if not busy:
            self._tag = 0
        self.view.bar.set_busy(busy)

    @Slot()
    def cancel(self, quiet: bool = False) -> None:
        """Stop the job in flight, if any; what is on screen stays."""
        if not self._tag:
            return
        self.compute.side.cancel(self.CHANNEL)  # the bar goes idle (_show_busy)
        self.view.bar.set_message("" if quiet else "cancelled: the previous result (if any) is still shown")

    def is_running(self) -> bool:
        return bool(self._tag)

    def _done(self, tag: int, result: Any) -> None:
        if tag != self._tag:
            return
        self.view.bar.set_message("")
        self.update_availability()  # the job may have loaded the model: its tokenizer checks the fields now
        self.show_result(result)

    def _failed(self, tag: int, message: str) -> None:
        if tag != self._tag:
            return
        self.view.bar.set_message(message, error=True)
        self.status.fail(f"{self.WHAT}: {message}")
        self.update_availability()  # e.g. the load found no LM head

    @Slot(int, float, str)
    def _on_progress(self, tag: int, fraction: float, message: str) -> None:
        if tag == self._tag:
            self.view.bar.set_progress(fraction, message)


def _job(
    fn: Callable[..., Any],
    path: str | None,
    *args: Any,
    ctx: JobContext,
) -> Any:
    """In the worker: load the model (cached), then ``fn(model, *args, ctx=ctx)``."""
    model = load_pretrained(path, ctx=ctx.scaled(0.0, 0.0))
    ctx.check()
    return fn(model, *args, ctx=ctx)


__all__ = [
    "InterpPresenter",
    "family_reason",
    "image_reason",
    "model_family",
    "model_name",
    "parse_token",
    "token_checker",
]
