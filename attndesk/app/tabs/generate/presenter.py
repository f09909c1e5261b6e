"""The generation stepper tab (pretrained mode, decoders and encoder-decoders): Step / Run N / Esc,
each step a side job of the compute controller (never the GUI thread), and the generated text
pinned in Compare through the state (it becomes the input text; its run is Compare's B, or A).

The generator (``models.Generator``) keeps the model's KV cache between steps; it
belongs to the prompt it started from: a new model, input text or seed starts over at the next
step, while greedy/sample, temperature and top-k apply from the next step on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

from PySide6.QtCore import QObject, Signal

from attndesk.errors import NO_LM_HEAD, ConfigError, NoLMHead
from attndesk.jobs import JobContext
from attndesk.models import (
    GenerationStep,
    Generator,
    encode,
    load_pretrained,
    loaded_model,
    packaged_model_dir,
    read_spec,
)
from attndesk.session.results import Shown
from attndesk.session.state import AppState, ModeId
from attndesk.session.status import StatusModel

from ...jobs.channels import GENERATE
from ...jobs.compute import ComputeController
from ..interp import image_reason, model_family, model_name
from ..presenter import TabPresenter
from .view import GenerateView, GenerationSettings, PreparedRow, prepare_row, probability_text

GENERATE_TAB = "generate"
COMPARE_TAB = "compare"
TOP_TOKENS = 10  # bars in the next-token chart
MAX_NEW_TOKENS = 512  # each step keeps its rows (layers x heads x tokens): a bound on the memory they take


@dataclass(frozen=True)
class Origin:
    """What a generator started from: a new one starts when any of these changes."""

    mode: ModeId
    text: str
    target: str | None
    seed: int


def advance(
    generator: Generator | None,
    origin: Origin,
    settings: GenerationSettings,
    row: tuple[int, str],
    *,
    ctx: JobContext | None = None,
) -> tuple[Generator, GenerationStep, PreparedRow]:
    """The side job: (a new generator when ``generator`` is None, loaded model cached) one step,
    and its row prepared for drawing as ``row`` = (layer, part) asks. The sampling settings apply
    from this step on."""
    if generator is None:
        model = load_pretrained(origin.mode.path)
        generator = Generator(
            model,
            origin.text,
            target=origin.target,
            sampling=settings.sampling,
            temperature=settings.temperature,
            top_k=settings.top_k,
            seed=origin.seed,
            top=TOP_TOKENS,
            max_new_tokens=MAX_NEW_TOKENS,
        )
    generator.sampling, generator.temperature, generator.top_k = settings.sampling, settings.temperature, settings.top_k
    step = generator.step(ctx=ctx)
    return generator, step, prepare_row(step, *row)


def full_text(generator: Generator) -> str:
    """The prompt and the generated tokens as one text (a decoder's input for the pinned run)."""
    return cast(str, generator.model.tokenizer.decode(generator.ids, skip_special_tokens=True))  # one sequence


class _Pins(Protocol):
    """The Compare tab's view, as far as this tab uses it."""

    def pin(self) -> None: ...


def generation_off(mode: ModeId) -> str | None:
    """Why the Generate tab does not apply to this model (an encoder-only or an image model) and what
    makes it apply, or None; the window shows this sentence in place of the tab's form."""
    generators = "a decoder (GPT-2, LLaMA, Qwen, …) or an encoder-decoder (T5, BART, Marian)"
    if model_family(mode) != "encoder":
        return image_reason(mode, "generation", generators)
    return f"{model_name(mode)} is an encoder-only model: it does not generate text. Generation needs {generators}."


class GenerationTab(TabPresenter):
    """Binds the ``GenerateView`` to the state and runs its steps (see the module docstring)."""

    tab_id = GENERATE_TAB
    stepShown = Signal(object)  # a GenerationStep is on screen
    stopped = Signal()
    pinned = Signal(str)  # "A" or "B": the generated text's run is in Compare

    def __init__(
        self,
        state: AppState,
        compute: ComputeController,
        status: StatusModel,
        view: GenerateView,
        compare: Callable[[], _Pins],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(state, compute, view, parent)
        self.status = status
        self._compare = compare  # the Compare tab's view (public API: pin())
        self._generator: Generator | None = None
        self._origin: Origin | None = None
        self._remaining = 0
        self._running = False
        self._pin: tuple[str, list[int] | None] | None = None  # (which, the token ids of the text to pin)
        self._families: dict[ModeId, str] = {}
        view.stepRequested.connect(lambda: self.run(1))
        view.runRequested.connect(self.run)
        view.stopRequested.connect(self.stop)
        view.restartRequested.connect(self.restart)
        view.pinRequested.connect(self.pin)
        compute.cancelRequested.connect(self.stop)
        state.events.mode.connect(lambda _m: self._on_mode())
        state.events.text.connect(lambda _t: self._on_input())
        self._on_input()

    # -- what the tab offers ----------------------------------------------------------------------
    def family(self) -> str | None:
        """The current pretrained model's family, or None (toy mode, or a folder that cannot be read)."""
        mode = self.state.mode
        if mode.kind != "pretrained":
            return None
        if mode not in self._families:  # config.json and the weights' headers: once per folder, not per keystroke
            try:
                self._families[mode] = read_spec(packaged_model_dir() if mode.path is None else mode.path).family
            except ConfigError:
                return None
        return self._families[mode]

    def _on_mode(self) -> None:
        if self._running and self._origin is not None and self._origin.mode != self.state.mode:
            self.stop()  # another model: this one's continuation is no longer what the window shows
        self._on_input()

    def _on_input(self) -> None:
        family = self.family()
        if family is None:
            self.view.set_available(False, "the generation stepper needs a pretrained decoder or encoder-decoder")
        elif family == "encoder":
            self.view.set_available(False, generation_off(self.state.mode) or "")
        elif (no_head := self._no_head()) is not None:
            self.view.set_available(False, no_head)
        else:
            changed = self._generator is not None and self._origin != self._current_origin()
            note = " The input changed: the next step starts over from it." if changed else ""
            self.view.set_available(
                True, "Step generates one token from the input text; Run N generates N, Esc stops." + note
            )
        self.view.set_pin_allowed(family in ("decoder", "encoder-decoder"), "")

    def _no_head(self) -> str | None:
        """Why the loaded model cannot generate (saved without its LM head), or None (known once loaded)."""
        mode = self.state.mode
        model = loaded_model(mode.path) if mode.kind == "pretrained" else None
        return str(NoLMHead(model.name, "generation")) if model is not None and model.headless else None

    def _target(self) -> str | None:
        return self.state.target_text or None

    def _current_origin(self) -> Origin:
        return Origin(self.state.mode, self.state.text, self._target(), self.view.settings().seed)

    # -- intents ----------------------------------------------------------------------------------
    def run(self, count: int = 1) -> None:
        """Generate ``count`` tokens, one side job per step (Stop / Esc ends it between or inside steps)."""
        if self._running or self.family() not in ("decoder", "encoder-decoder"):
            return
        origin = self._current_origin()
        if self._generator is not None and (origin != self._origin or self._generator.finished):
            self.restart()
        self._origin = origin
        self._remaining = int(count)
        self._running = True
        self.view.set_busy(True, f"generating {count} token{'s' if count != 1 else ''}… (Esc stops)")
        self._submit()

    def _submit(self) -> None:
        self.compute.side.submit(
            GENERATE,
            advance,
            self._generator,
            self._origin,
            self.view.settings(),
            self.view.row_choice(),
            done=self._stepped,
            failed=self._failed,
            scope=None,
            busy=self._step_busy,
        )

    def _step_busy(self, busy: bool) -> None:
        """A step's job is over however it ended (a running generation's next step resubmits
        first): one that left the generation running stopped with no answer."""
        if not busy and self._running:
            self._finish(f"stopped: {self._generated()}")

    def stop(self) -> None:
        """Stop a running generation (Esc): the step in flight is cancelled inside its forward pass
        and leaves the generator as it was."""
        if not self._running:
            return
        self._running, self._remaining = False, 0
        self.compute.side.cancel(GENERATE)
        self.view.set_busy(False, f"stopped: {self._generated()}")
        self.status.say("generation stopped")
        self.stopped.emit()

    def restart(self) -> None:
        """Forget the generated tokens (a stopped step may still be finishing: its answer is dropped)."""
        if self._running:
            self.stop()
        self._generator, self._origin = None, None
        self.view.set_sequence([], [])

    def generator(self) -> Generator | None:
        return self._generator

    def is_running(self) -> bool:
        return self._running

    # -- answers ----------------------------------------------------------------------------------
    def _stepped(self, answer: tuple[Generator, GenerationStep, PreparedRow]) -> None:
        generator, step, prepared = answer
        if not self._running:
            return
        if generator is not self._generator:
            self._generator = generator
        self.view.set_sequence(self._prompt_tokens(generator), generator.steps, prepared, generator.source.tokens)
        self._remaining -= 1
        self.stepShown.emit(step)
        if generator.finished:
            count = len(generator.steps)
            self._finish(
                f"finished after {count} token{'s' if count != 1 else ''} (end of sequence, position limit "
                f"or {MAX_NEW_TOKENS} new tokens): Start over to generate again"
            )
        elif self._remaining > 0:
            self.view.set_busy(
                True, f"token {len(generator.steps)}: {step.token!r}; {self._remaining} to go… (Esc stops)"
            )
            self._submit()
        else:
            count = len(generator.steps)
            self._finish(
                f"{count} token{'s' if count != 1 else ''} generated · last {step.token!r} "
                f"p={probability_text(step.probability)}"
            )

    def _finish(self, message: str) -> None:
        self._running, self._remaining = False, 0
        self.view.set_busy(False, message)
        self.status.say(f"generation: {message}", tab=GENERATE_TAB)

    def _failed(self, message: str) -> None:
        if NO_LM_HEAD in message:  # found at load: the tab says why it is off, nothing failed
            self._running, self._remaining = False, 0
            self.view.set_busy(False)
            self.view.set_available(False, message)
            return
        self._finish(f"generation failed: {message}")
        self.status.fail(f"generation failed: {message}", tab=GENERATE_TAB)

    def _generated(self) -> str:
        count = len(self._generator.steps) if self._generator is not None else 0
        return f"{count} token{'s' if count != 1 else ''} generated"

    @staticmethod
    def _prompt_tokens(generator: Generator) -> list[str]:
        return generator.tokens[: generator.prompt_length]

    # -- Compare ----------------------------------------------------------------------------------
    def pin(self, which: str) -> None:
        """The prompt and generated text become the input text; once its run is on screen, Compare
        shows it as B, or pins it as A."""
        generator = self._generator
        if generator is None or not generator.steps or self._running:
            return
        if generator.model.family != "decoder":
            # an encoder-decoder writes its target: the decoder's input after its start token: the target it started from and what it wrote
            self.state.target_text = cast(
                str, generator.model.tokenizer.decode(generator.ids[1:], skip_special_tokens=True)
            )
            text, ids = self.state.text, None
        else:
            text = full_text(generator)
            ids = list(encode(generator.model, text).ids)
        self._pin = (which, ids)
        shown = self.compute.shown()
        if self.state.text == text and shown is not None and self._answers(shown) and not self.compute.is_pending():
            self._finish_pin()
            return
        self.status.say(
            f"running the generated text, then Compare {'pins it as A' if which == 'A' else 'shows it as B'}…"
        )
        self.state.text = text

    def _answers(self, shown: Shown) -> bool:
        if self._pin is None or shown.layers is None or shown.mode != self.state.mode:
            return False
        ids = self._pin[1]
        return ids is None or [int(i) for i in shown.layers.token_ids] == ids

    def _on_published(self, shown: Shown) -> None:
        if not self._running and self._no_head() is not None:  # the run loaded a model without its LM head
            self._on_input()
        if self._pin is not None and shown.new_run and self._answers(shown):
            self._finish_pin()

    def _finish_pin(self) -> None:
        assert self._pin is not None, "a pin was asked for"
        which, _ids = self._pin
        self._pin = None
        self.state.view.tab = COMPARE_TAB  # the Compare presenter shows the run on screen as B
        if which == "A":
            self._compare().pin()
        self.status.say(f"the generated text is Compare's {which}")
        self.pinned.emit(which)


__all__ = ["GENERATE_TAB", "GenerationTab", "Origin", "advance", "full_text"]
