"""After a large input the window gives its memory back: once the input is small again, the
resident set returns to within a fixed allowance of what it was before.

A 2,048-token x 16-head run with its intermediates (the step-through), B − A, positions and
statistics takes about 1.3 GB; the views let go of an older run when the next one is drawn, and
the compute controller returns the C heap's free pages once a much smaller result replaced it.
"""

from __future__ import annotations

import gc

import psutil
import pytest
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)

from tests.conftest import TIMEOUT_MS

pytestmark = pytest.mark.perf  # the resident set: make test-perf runs it

ALLOWANCE_MIB = 256  # torch's kernel caches for the larger shapes, Qt's and Python's own heaps


@pytest.fixture
def window_size() -> tuple[int, int]:
    return (1400, 900)  # the conftest window, larger: every tab at these sizes


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def visit_every_tab(qtbot, w) -> None:
    with qtbot.waitSignal(w.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        w.state.view.tab = "step-through"  # reruns keeping every intermediate
    for tab in ("positions", "compare"):
        w.state.view.tab = tab
        qtbot.wait(1500)
    with qtbot.waitSignal(w.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):
        w.state.view.tab = "head-stats"
    w.state.view.tab = "heatmaps"


def test_memory_returns_after_a_large_input(qtbot, window):
    w = window
    small_text, small_config = w.state.text, w.state.config
    qtbot.wait(1000)
    baseline = rss_mib()
    large = " ".join(f"w{i % 500}" for i in range(2048))
    after = []
    for _ in range(2):
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.length == 2048):
            w.state.update({"config": small_config.replace(embed_dim=256, num_heads=16, mask="none"), "text": large})
        visit_every_tab(qtbot, w)
        peak = rss_mib()
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.length < 20):
            w.state.update({"config": small_config, "text": small_text})
        qtbot.wait(2500)  # the heap is trimmed a moment after the small result is drawn
        after.append(rss_mib())
        assert peak - baseline > 500, "the large input should have taken memory (is the test still large?)"
    assert after[0] - baseline < ALLOWANCE_MIB, (baseline, after)
    assert after[1] - after[0] < ALLOWANCE_MIB / 4, f"memory grows with every large input: {after}"
