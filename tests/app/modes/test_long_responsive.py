"""The window's event loop never stalls over 100 ms during a long (memory-bounded) run.

A timer ticking every 5 ms in the GUI thread records the most GUI-thread CPU time
(``time.thread_time``, so a loaded machine's descheduling is not counted) between two ticks from the
moment the run is submitted until ``resultDisplayed`` (every heatmap drawn): the worker computes,
the result crosses to the GUI thread, and the heatmaps, tokens, timing and tabs are filled in.
"""

from __future__ import annotations

import random
import time

import pytest
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)

from attndesk.app.sources.long_source import PyramidHeatmapSource
from tests.conftest import TIMEOUT_MS
from tests.heartbeat import Heartbeat
from tests.words import WORDS

pytestmark = pytest.mark.perf  # GUI-thread CPU per heartbeat gap: make test-perf runs it

MiB = 2**20
MAX_GAP_S = 0.100  # the target
# Another process (a parallel test run) can starve the GUI thread on these shared 2-core machines:
# a try that stalls gets another with a new text; a real stall (say a 150 ms build) fails them all.
TRIES = 3


def document(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def gaps_during_run(qtbot, w, action) -> tuple[list[float], float]:
    """Do ``action`` (a change that runs) and tick every 5 ms until it is on screen: (the GUI thread's CPU
    seconds between ticks, its CPU seconds in all)."""
    beat = Heartbeat(clock=time.thread_time)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        beat.start()
        action()
    beat.stop()  # resultDisplayed: the last interval counts too
    return beat.gaps, beat.elapsed


def test_the_event_loop_never_stalls_over_100_ms_during_a_pyramid_run(qtbot, window):
    w = window
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.set_config(num_heads=8, memory_budget=16 * MiB)  # forces the pyramid
    worst = []
    for attempt in range(TRIES):
        text = document(4096, seed=attempt)

        def run(text=text):
            w.state.text = text
            w.recomputeAction.trigger()  # over the budget even as an overview: it would wait for F5

        gaps, elapsed = gaps_during_run(qtbot, w, run)
        result = w.displayed_result().toy.result
        assert len(result.tokens) == 4096 and result.num_heads == 8
        assert getattr(result, "pyramid", None) is not None  # the memory-bounded path, not full weights
        assert isinstance(w.heatmapPanel.source(), PyramidHeatmapSource)
        assert w.heatmapPanel.displayed_heads() == list(range(8))
        # a long status line or overview note must not widen the window (that also rebuilt every heatmap)
        assert w.width() == 1300
        assert len(gaps) >= 20, f"only {len(gaps)} ticks in {elapsed:.2f} s of GUI-thread CPU: the timer hardly ran"
        worst.append(max(gaps))
        if worst[-1] < MAX_GAP_S:
            break
    assert min(worst) < MAX_GAP_S, (
        f"the event loop stalled {', '.join(f'{g * 1e3:.0f}' for g in worst)} ms of GUI-thread CPU (tries) "
        f"during a run that took {elapsed:.1f} s of it; the target is under {MAX_GAP_S * 1e3:.0f} ms"
    )
