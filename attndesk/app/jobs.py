"""Jobs the window hands to the worker thread, and what they hand back.

A job runs entirely in the worker thread: it computes and also prepares everything the view
needs (the heatmap source's means, maxima and overview), so the GUI thread only swaps arrays in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from attndesk.core import run_attention
from attndesk.core.config import AttentionConfig
from attndesk.core.errors import Cancelled

from .long_source import source_for_result
from .panels.heatmap_source import HeatmapSource


@dataclass
class ViewPayload:
    """One finished computation, ready to show."""

    result: Any  # an AttentionResult (or a mode's own result with tokens/timings)
    source: HeatmapSource
    notices: list[str] = field(default_factory=list)
    run: Any = None  # the mode's whole result when ``result`` is one view of it (a PretrainedResult)
    text: str | None = None  # the input the toy result was computed from (results do not keep it)
    key_text: str | None = None


@dataclass
class Job:
    """What ``MainWindow._make_job`` returns: the callable, its arguments, and a status line."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    description: str = "computing"


def toy_job(config: AttentionConfig, text: str, key_text: str | None = None, *, keep_intermediates: bool = False,
            plan=None, progress=None, should_cancel=None) -> ViewPayload:
    """Run the toy model and build its heatmap source (both off the GUI thread): exact weights
    when the run kept them, the long-run pyramid when it kept only an overview. The step-through
    tab asks for ``keep_intermediates``; the input texts ride along in the payload for the teaching tabs."""
    result = run_attention(config, text, keep_intermediates, key_text=key_text, progress=progress,
                           should_cancel=should_cancel, plan=plan)  # plan: made already (long_mode), not twice
    if should_cancel is not None and should_cancel():
        raise Cancelled("superseded by a newer request")
    return ViewPayload(result, source_for_result(result), list(result.notices), text=text, key_text=key_text)
