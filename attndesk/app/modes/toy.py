"""The toy model: random weights over a word tokenizer, every knob of ``AttentionConfig`` live.

Its job runs in the worker: plan the run (tokenizing a 1 MB text takes ~60 ms, too long for the
GUI thread; the run reuses the tokens and the plan's memory check), report the plan, hold a long run that only typing asked for, else run the core and
build the heatmap source (the O(H L Lk) mean, maxima and overview) before handing the result over.
"""

from __future__ import annotations

from attndesk.core.config import AttentionConfig
from attndesk.core.errors import Cancelled, ConfigError
from attndesk.core.pipeline import prepare_text, run_attention
from attndesk.core.result import AttentionResult

from ..plans import needs_explicit_run, reports_progress
from ..results import Held, InputProblem, Job, Request, RunFacts, Shown, TokenRows, ToyRun, notices_of
from ..sources.long_source import source_for_map
from ..state import STEP_THROUGH_TAB, TOY, AppState
from .base import ModeBase, ModeChoice

INTERMEDIATES = "intermediates"


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
    progress=None,
    should_cancel=None,
) -> Shown | Held:
    """The worker's job: plan, tell the GUI the plan, then run (or hold a long run typing asked for).
    The texts are tokenized and the memory checked once, here: the run takes them from the plan."""
    prepared = prepare_text(config, text, key_text, keep_intermediates=keep_intermediates)
    if announce is not None:
        announce(prepared.plan)
    if not explicit and needs_explicit_run(prepared.plan):
        return Held(prepared.plan)
    progress = progress if reports_progress(prepared.plan) else None
    result = run_attention(
        config,
        text,
        keep_intermediates,
        key_text=key_text,
        progress=progress,
        should_cancel=should_cancel,
        prepared=prepared,
    )
    if should_cancel is not None and should_cancel():
        raise Cancelled("superseded by a newer request")
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


class ToyMode(ModeBase):
    kind = "toy"

    def choices(self) -> list[ModeChoice]:
        return [ModeChoice(TOY, "Toy model", "random weights of the chosen shape: every parameter is live")]

    def request(self, state: AppState) -> Request:
        config = state.config.validate()
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
