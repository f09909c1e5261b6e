"""The toy model: random weights over a word tokenizer, every knob of ``AttentionConfig`` live;
or (``config.weights_from`` not "random") a small trained model: a shipped preset, or the model the
Train tab hands over (``ToyMode.set_trained``), every head of every layer on its task's probe input.

Its job runs in the worker: plan the run (tokenizing a 1 MB text takes ~60 ms, too long for the
GUI thread; the run reuses the tokens and the plan's memory check), report the plan, hold a long run that only typing asked for, else run the core and
build the heatmap source (the O(H L Lk) mean, maxima and overview) before handing the result over.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import TYPE_CHECKING

from attndesk.errors import Cancelled, ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.runs.config import AttentionConfig
from attndesk.runs.pipeline import prefetch_neighbours, prepare_text, run_attention
from attndesk.runs.result import AttentionResult
from attndesk.session.plans import needs_explicit_run, reports_progress
from attndesk.session.results import Held, InputProblem, Job, Request, RunFacts, Shown, TokenRows, ToyRun, notices_of
from attndesk.session.state import STEP_THROUGH_TAB, TOY, AppState, PanelView
from attndesk.system.threads import choose_threads, torch_threads
from attndesk.teaching.diff import TeachingComparison, diff_results
from attndesk.train.presets import load_preset
from attndesk.train.stages import head_labels, initial_run, trained_result

from ..sources.long_source import source_for_map
from .base import ModeBase, ModeChoice

if TYPE_CHECKING:
    from attndesk.train.run import TrainRun

INTERMEDIATES = "intermediates"
NOTHING_TRAINED = "no trained model yet: train one in the Train tab (or open one) and press Open in views"
_presets_lock = threading.Lock()


def toy_shown(result: AttentionResult, text: str, key_text: str | None) -> Shown:
    """A toy result as the window presents it (builds the heatmap source: call it in the worker)."""
    keys = None
    if result.key_tokens is not None and result.key_token_ids is not None:  # a cross-attention run has both
        keys = TokenRows(list(result.key_tokens), result.key_token_ids, result.key_unknown)
    facts = RunFacts(
        dict(result.timings), int(result.flops), int(result.peak_bytes), result.device, result.config.dtype
    )
    amap = result.attention_map()
    return Shown(
        mode=TOY,
        map=amap,
        source=source_for_map(amap),
        facts=facts,
        queries=TokenRows(list(result.tokens), result.token_ids, result.unknown),
        keys=keys,
        notices=notices_of(result.notices),
        toy=ToyRun(result, text, key_text),
        output=result.output,
    )


def toy_run(
    config: AttentionConfig,
    text: str,
    key_text: str | None = None,
    *,
    keep_intermediates: bool = False,
    explicit: bool = True,
    announce=None,
    ctx: JobContext | None = None,
) -> Shown | Held:
    """The worker's job: plan, tell the GUI the plan, then run (or hold a long run typing asked for).
    The texts are tokenized and the memory checked once, here: the run takes them from the plan."""
    prepared = prepare_text(config, text, key_text, keep_intermediates=keep_intermediates)
    if announce is not None:
        announce(prepared.plan)
    if not explicit and needs_explicit_run(prepared.plan):
        return Held(prepared.plan)
    ctx = job_context(ctx)
    run_ctx = ctx if reports_progress(prepared.plan) else ctx.quiet()
    with torch_threads(choose_threads(prepared.plan.block_flops)):  # this job's thread only
        result = run_attention(
            config,
            text,
            keep_intermediates,
            key_text=key_text,
            prepared=prepared,
            ctx=run_ctx,
        )
    if ctx.cancelled:
        raise Cancelled("superseded by a newer request")
    prefetch_neighbours(config)  # a seed stepped by one finds its weights drawn
    return toy_shown(result, text, key_text)


def check_input(state: AppState, config: AttentionConfig) -> str | None:
    """The key text, after checking that the texts can run with ``config``."""
    key_text = state.keys_text()
    if key_text is not None and "causal" in config.mask:
        raise ConfigError("a causal mask needs self-attention: switch cross-attention off or pick another mask")
    if key_text is not None:
        config.check_cross_attention()  # a window or ALiBi needs one text
    if not state.text.strip():
        raise InputProblem("type some text to attend over: the input is empty")
    if key_text is not None and not key_text.strip():
        raise InputProblem("type some text for the keys/values, or switch cross-attention off")
    return key_text


@functools.cache
def _preset(name: str) -> TrainRun:
    return load_preset(name)


def preset_run(name: str) -> TrainRun:
    """A shipped trained preset, read once (the worker and the window's tests share it)."""
    with _presets_lock:
        return _preset(name)


def before_after(before: AttentionResult, after: AttentionResult, step: int) -> TeachingComparison:
    """The compare tab's pair for trained weights: the initial random weights (A) and the trained ones (B)."""
    diff = diff_results(before, after)
    explanation = (
        "The same input through the same model twice: A with the random weights its seed gives before "
        f"the first step, B after {step:,} steps of training. B - A is what training changed; random "
        "heads spread their weight, trained ones concentrate it where the task needs it.\n"
        f"largest weight: before {float(before.weights.max()):.3f}, after {float(after.weights.max()):.3f}; "
        f"largest change {diff.max_abs:.3f}."
    )
    return TeachingComparison(
        "training",
        "before vs after training",
        before,
        after,
        "A: random initial weights (step 0)",
        f"B: trained ({step:,} steps)",
        diff,
        explanation,
    )


def trained_toy_run(weights: str, run: TrainRun | None, name: str) -> Shown:
    """The worker's job for trained weights: every head of ``run`` (None: the preset ``weights``)
    on its task's probe input, every stage kept, and the same input at the initial weights."""
    run = preset_run(weights) if run is None else run
    result = trained_result(run, weights)
    comparison = before_after(trained_result(initial_run(run), weights), result, run.step)
    text = " ".join(result.tokens)
    shown = toy_shown(result, text, None)
    cfg = run.cfg
    amap = dataclasses.replace(
        shown.map,
        head_labels=head_labels(run),
        title=f"trained {cfg.task}: every layer's heads",
        summary=f"{name}: {cfg.layers} layer(s) x {cfg.heads} heads after {run.step:,} steps, on the "
        f"{cfg.task} task's probe input",
        file_tag=f"trained_{cfg.task}_step{run.step}",
    )
    notice = f"weights: {name} ({cfg.task}, {run.step:,} steps) on its probe input; Weights > Random goes back"
    return dataclasses.replace(
        shown,
        map=amap,
        source=source_for_map(amap),
        notices=(notice, *shown.notices),
        toy=ToyRun(result, text, None, comparison),
    )


def trained_panel(run: TrainRun, name: str = "") -> PanelView:
    """The parameters panel for trained weights: the shape and variants of ``run``'s model (its
    per-layer heads and width, as a real model's panel shows them), greyed; ``name`` says which
    model (a preset is named by the Weights choice itself)."""
    cfg = run.cfg
    fixed = {
        "embed_dim": cfg.embed_dim,
        "num_heads": cfg.heads,
        "hidden_dim": cfg.head_dim,
        "mask": "causal",
        "pad_to": None,
        "scaled": True,
        "position": cfg.position,
        "kv_heads": cfg.kv_heads,
        "window": cfg.window,
        "softcap": cfg.softcap,
        "sink": cfg.sink,
        "dropout": 0.0,
        "training": False,
        "seed": cfg.seed,
        "vocab_size": max(3, cfg.vocab),
    }
    layers = "1 layer" if cfg.layers == 1 else f"{cfg.layers} layers"
    trained = f"{name}: " if name else ""
    info = f"{trained}{cfg.task}, {run.step:,} steps\n{layers} × {cfg.heads} heads, d_k {cfg.head_dim}"
    return PanelView(fixed=fixed, info=info, toy_acts=True)


class ToyMode(ModeBase):
    kind = "toy"

    def __init__(self) -> None:
        super().__init__()
        self.trained: tuple[str, TrainRun] | None = None  # the Train tab's model: (its name, the run)
        self._serial = 0  # which hand-over: a run's id() can be reused once it is freed

    def set_trained(self, name: str, run: TrainRun) -> None:
        """The model ``config.weights_from == "trained"`` shows (the Train tab's "Open in views")."""
        self.trained = (name, run)
        self._serial += 1

    def trained_run(self, weights: str) -> TrainRun | None:
        """The model ``config.weights_from == weights`` shows: a preset, the Train tab's model, or None."""
        if weights == "random":
            return None
        if weights == "trained":
            return None if self.trained is None else self.trained[1]
        return preset_run(weights)

    def panel(self, state: AppState) -> PanelView:
        weights = state.config.weights_from
        off = {} if self.trained is not None else {"weights_from": {"trained": NOTHING_TRAINED}}
        try:
            run = self.trained_run(weights)
        except ConfigError:  # a preset not shipped: the run says so
            run = None
        if run is None:
            return PanelView(off_choices=off)
        view = trained_panel(run, self.trained[0] if weights == "trained" and self.trained else "")
        return dataclasses.replace(view, off_choices=off)

    def choices(self) -> list[ModeChoice]:
        return [ModeChoice(TOY, "Toy model", "random weights of the chosen shape: every parameter is live")]

    def request(self, state: AppState) -> Request:
        config = state.config.validate()
        if config.weights_from != "random":
            return self._trained_request(config)
        key_text = check_input(state, config)
        keep = state.view.tab == STEP_THROUGH_TAB  # the step-through shows every stage of the run on screen
        heads = "1 head" if config.num_heads == 1 else f"{config.num_heads} heads"
        job = Job(
            toy_run,
            (config, state.text, key_text),
            {"keep_intermediates": keep, "explicit": False},
            f"computing {heads}, {config.mask} mask",
            announce=True,
        )
        return Request(
            key=(TOY, config, state.text, key_text), job=job, needs=frozenset({INTERMEDIATES}) if keep else frozenset()
        )

    def _trained_request(self, config: AttentionConfig) -> Request:
        """Trained weights: the text and the shape in the panel do not act (the model reads its task's tokens)."""
        run: TrainRun | None = None
        name = f"the {config.weights_from} preset"
        if config.weights_from == "trained":
            if self.trained is None:
                raise ConfigError(
                    NOTHING_TRAINED + ", or choose Random weights",
                    field="weights_from",
                )
            name, run = self.trained
        identity = (config.weights_from,) if run is None else (config.weights_from, self._serial, run.step)
        job = Job(trained_toy_run, (config.weights_from, run, name), {}, f"computing {name}'s heads on its probe input")
        return Request(key=(TOY, "trained", *identity), job=job, needs=frozenset({INTERMEDIATES}))
