"""The timing dock's facts: the peak memory of a vision run is estimated as a text run's (never
"0 B"), and a run that reports no peak says "not measured"."""

from __future__ import annotations

import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)

from attndesk.app.docks.timing import NOT_MEASURED, TimingPanel
from attndesk.models import run_pretrained
from attndesk.session.results import RunFacts
from attndesk.system.free_memory import format_bytes
from tests.conftest import TIMEOUT_MS


def expected_peak(run, hidden: int) -> int:
    """The arrays the run holds plus one layer's float32 temporaries: three score-sized arrays
    (all heads' N x N, or a Swin layer's windows) and four N x hidden activations."""
    held = [run.weights, run.hidden_states, run.image, run.logits, run.pooled, *(run.window_weights or [])]
    kept = sum(int(a.size) * a.itemsize for a in held if a is not None)
    n = len(run.tokens)
    scores = max((w.size for w in run.window_weights), default=0) if run.window_weights else run.num_heads * n * n
    return kept + 4 * (3 * scores + 4 * n * hidden)


def test_a_vision_runs_peak_memory_is_in_the_timing_dock(qtbot, vision):
    w = shown_window(qtbot, timeout_ms=TIMEOUT_MS)
    try:
        model, _eager, folder = vision("vit")
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
            assert w.pretrained.open_folder(folder)
        run = w.displayed_result().layers
        assert run.family == "vision" and run.peak_bytes == expected_peak(run, model.spec.hidden_size)
        assert run.peak_bytes > run.weights.nbytes + run.hidden_states.nbytes
        assert w.timingPanel.memoryLabel.text() == format_bytes(run.peak_bytes) != "0 B"
    finally:
        dispose(w)


@pytest.mark.parametrize("name", ["swin", "dinov2_with_registers"])
def test_every_vision_family_estimates_its_peak(vision, image, name):
    model = vision(name)[0]
    run = run_pretrained(model, image)
    assert run.peak_bytes == expected_peak(run, model.spec.hidden_size) > 0


def test_a_run_without_a_peak_says_not_measured(qtbot):
    panel = TimingPanel()
    qtbot.addWidget(panel)
    panel.show_result(RunFacts({"total": 0.01}, 1000, 0, "cpu", "float32"))
    assert panel.memoryLabel.text() == NOT_MEASURED
    panel.show_result(RunFacts({"total": 0.01}, 1000, 3 << 20, "cpu", "float32"))
    assert panel.memoryLabel.text() == format_bytes(3 << 20) == "3.0 MiB"
