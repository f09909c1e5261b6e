"""The teaching tabs inside the real main window: step-through, head statistics, compare, the
teaching comparisons and the implementation comparison (side workers), rollout in toy mode."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings, open_tab  # noqa: F401  (fresh_settings: autouse fixture)

import attndesk.app.tabs.compare.presenter as compare_tab
import attndesk.app.tabs.headstats.presenter as headstats_tab
import attndesk.app.tabs.implementation.presenter as implementation_tab
from attndesk.app import MainWindow
from attndesk.app.jobs import channels
from attndesk.app.jobs.worker import running_threads
from attndesk.app.tabs.registry import TABS
from attndesk.app.tabs.stepthrough.view import STAGES
from attndesk.core import run_attention
from attndesk.teaching.compare import IMPLEMENTATIONS
from attndesk.teaching.statistics import head_statistics
from tests.conftest import TIMEOUT_MS


def wait_result(qtbot, w, action):
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
        action()
    return blocker.args[0]


def core_run(w, keep=True):
    """The core's run for the window's current text and parameters, computed independently."""
    return run_attention(w.state.config, w.state.text, keep, key_text=w.state.keys_text())


def _check_stages(w, head):
    view = w.tab_widget("step-through")
    shown = w.displayed_result().toy.result
    core = core_run(w)
    assert view.result() is shown and view.head() == head
    for name in STAGES:
        stage = getattr(core.intermediates, name)
        expected = stage[head] if name not in ("embeddings", "output") else stage
        np.testing.assert_array_equal(view.stage_matrix(name), expected, err_msg=name)
        np.testing.assert_array_equal(view.plots[name].matrix, expected, err_msg=name)
    # the weights stage is the displayed result's weights, and softmax(masked) reproduces them
    np.testing.assert_array_equal(view.plots["weights"].matrix, shown.weights[head])
    masked = view.stage_matrix("masked").astype(np.float64)
    soft = np.exp(masked - masked.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft / soft.sum(axis=1, keepdims=True), shown.weights[head], atol=1e-6)


def test_teaching_tabs_exist_and_implementation_sits_in_timing_dock(window):
    titles = [window.viewTabs.tabText(i) for i in range(window.viewTabs.count())]
    assert titles == [t.title for t in TABS]  # every tab of the registry, in its order
    # the Image tab (vision models only, hidden here) beside the heatmaps, then the teaching tabs
    assert titles[:7] == ["Heatmaps", "Image", "Step-through", "Positions", "Head stats", "Compare", "Rollout"]
    assert not window.viewTabs.isTabVisible(1)
    assert window.timingDock.widget() is window.timingTabs
    assert window.timingTabs.indexOf(window.timingPanel) >= 0
    assert window.timingTabs.indexOf(window.tab_widget("implementation")) >= 0


def test_step_through_shows_the_core_intermediates_of_the_displayed_result(qtbot, window):
    # on the heatmap tab a run keeps no intermediates and equals the core's plain run
    assert window.displayed_result().toy.result.intermediates is None
    np.testing.assert_array_equal(window.displayed_result().map.weights, core_run(window, keep=False).weights)
    # opening the step-through recomputes the input with every intermediate kept, and shows it
    with qtbot.waitSignal(window.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        window.viewTabs.setCurrentWidget(window.tab_page("step-through"))
    assert window.displayed_result().toy.result.intermediates is not None
    _check_stages(window, 0)
    with qtbot.waitSignal(
        window.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS
    ):  # drawn off the GUI thread
        window.tab_widget("step-through").headSpin.setValue(2)
    _check_stages(window, 2)
    # while it is visible, a new result (causal mask) keeps them and reaches the strip
    with qtbot.waitSignal(window.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        wait_result(qtbot, window, lambda: window.parametersPanel.maskCombo.setCurrentText("causal"))
    _check_stages(window, 2)
    assert np.isneginf(window.tab_widget("step-through").stage_matrix("masked")[0, 1])
    a = window.tab_widget("step-through").hover_weight(4, 2)
    assert a.weight == pytest.approx(float(window.displayed_result().map.weights[2, 4, 2]), rel=1e-5)
    assert window.tab_widget("step-through").plots["k"].highlighted()["row"] == (2,)
    # back on the heatmaps, runs drop them again (they cost ~4 x the weights' memory)
    window.viewTabs.setCurrentWidget(window.heatmapPanel)
    result = wait_result(qtbot, window, lambda: window.parametersPanel.seedSpin.setValue(4))
    assert result.toy.result.intermediates is None


def test_returning_to_the_step_through_shows_its_plots_one_per_event_loop_turn(qtbot, window):
    """Shown together, ten plots are resized and painted in one event (130-190 ms measured by the
    soak even for 7 tokens): coming back to the tab reveals them one per turn, each in its place."""
    from PySide6.QtWidgets import QApplication

    view = window.tab_widget("step-through")
    with qtbot.waitSignal(view.drawn, timeout=TIMEOUT_MS):
        open_tab(window, view)
    QApplication.processEvents()  # the strip's last relayout may still be posted when the last stage is drawn
    drawn = [p for p in view.plots.values() if p.isVisible()]
    places = {id(p): p.geometry() for p in drawn}
    assert len(drawn) >= 8
    window.viewTabs.setCurrentWidget(window.heatmapPanel)
    open_tab(window, view)
    QApplication.processEvents()
    assert sum(p.isVisible() for p in drawn) < len(drawn) // 2, "every plot came back in one event"
    qtbot.waitUntil(lambda: all(p.isVisible() for p in drawn), timeout=5000)
    assert {id(p): p.geometry() for p in drawn} == places


def test_step_through_plots_refit_one_per_turn_when_the_window_resizes(qtbot, window):
    """Ten plots resized in one event took 110-140 ms (a dock shown, the window resized): the
    plots keep a fixed size, re-fitted one per event-loop turn, and only when they no longer fit
    or the room grew by more than 8 %."""
    from PySide6.QtWidgets import QApplication

    view = window.tab_widget("step-through")
    with qtbot.waitSignal(view.drawn, timeout=TIMEOUT_MS):
        open_tab(window, view)
    shown = [p for p in view.plots.values() if p.isVisible()]

    def refit(width_change: int):
        before = shown[0].size()
        assert all(p.size() == before for p in shown)
        window.resize(window.width() + width_change, window.height())
        QApplication.processEvents()
        assert sum(p.size() == before for p in shown) > len(shown) // 2, "every plot was resized in one event"
        qtbot.waitUntil(lambda: all(p.size() == shown[0].size() != before for p in shown), timeout=5000)
        return before, shown[0].size()

    small, large = refit(+500)  # much more room: the plots grow, one per turn
    assert large.width() > small.width()
    window.resize(window.width() + 20, window.height())  # a little more: nothing moves
    QApplication.processEvents()
    qtbot.wait(50)
    assert all(p.size() == large for p in shown)
    _, smaller = refit(-250)  # less room: they no longer fit, so they shrink at once (one per turn)
    assert smaller.width() < large.width()
    strip = view.stripScroll.widget()
    right = max(p.mapTo(strip, p.rect().bottomRight()).x() for p in shown)
    assert right <= view.stripScroll.viewport().width()  # they fit again, without scrolling sideways


def test_head_stats_come_from_the_worker_and_a_row_opens_that_head(qtbot, window, monkeypatch):
    threads = []
    real = headstats_tab.statistics_job

    def spy(*args):
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(headstats_tab, "statistics_job", spy)
    with qtbot.waitSignal(window.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):
        window.viewTabs.setCurrentWidget(window.tab_page("head-stats"))
    assert threads and threads[0] != threading.get_ident()
    shown = window.displayed_result().map
    expected = head_statistics(shown.weights, special=list(shown.keys))
    assert window.tab_widget("head-stats").stats() == expected
    assert window.tab_widget("head-stats").table.rowCount() == shown.num_heads

    with qtbot.waitSignal(
        window.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS
    ):  # (a rerun keeping intermediates)
        window.tab_widget("head-stats").select_head(3)
    assert window.viewTabs.currentWidget() is window.tab_page("step-through")
    assert window.tab_page("step-through").currentWidget() is window.tab_widget("step-through")
    assert window.tab_widget("step-through").head() == 3
    assert window.heatmapPanel.view_target() == 3
    shown = window.displayed_result().map
    np.testing.assert_array_equal(window.tab_widget("step-through").plots["weights"].matrix, shown.weights[3])
    window.viewTabs.setCurrentWidget(window.tab_page("compare"))  # filled when shown, on the chosen head
    assert window.tab_widget("compare").headCombo.currentData() == 3
    np.testing.assert_array_equal(window.tab_widget("compare").displayed()[1], shown.weights[3])


def test_compare_pin_then_change_mask_shows_exact_difference(qtbot, window):
    view = window.tab_widget("compare")
    open_tab(window, view)
    a = window.displayed_result().toy.result
    view.pin()
    b = wait_result(qtbot, window, lambda: window.parametersPanel.maskCombo.setCurrentText("causal")).toy.result
    assert b is not a and view.pinned_result().weights is a.weights
    diff = view.diff()
    np.testing.assert_array_equal(diff.diff, b.weights.astype(np.float64) - a.weights.astype(np.float64))
    assert diff.max_abs == float(np.abs(b.weights.astype(np.float64) - a.weights).max()) > 0
    view.set_head(1)
    shown_a, shown_b, shown_diff = view.displayed()
    np.testing.assert_array_equal(shown_a, a.weights[1])
    np.testing.assert_array_equal(shown_b, b.weights[1])
    np.testing.assert_array_equal(shown_diff, b.weights[1].astype(np.float64) - a.weights[1])
    assert f"{diff.max_abs:.6g}" in view.maxLabel.text()


def test_tutorial_comparison_runs_in_the_side_worker_and_explains_itself(qtbot, window, monkeypatch):
    view = window.tab_widget("compare")
    open_tab(window, view)
    threads = []
    real = compare_tab.teaching_comparison

    def spy(*args):
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(compare_tab, "teaching_comparison", spy)
    with qtbot.waitSignal(window.tab_presenter("compare").teachingShown, timeout=TIMEOUT_MS) as blocker:
        view.teachButtons["tutorial"].click()
        assert not view.teachButtons["tutorial"].isEnabled()  # while it runs
    comparison = blocker.args[0]
    assert threads and threads[0] != threading.get_ident()
    assert view.teachButtons["tutorial"].isEnabled()
    assert view.teaching() is comparison and comparison.kind == "tutorial"
    text = view.explanationText.toPlainText()
    assert view.explanationText.isVisibleTo(window)
    assert "masks nothing" in text and "QUERY" in text and "measured here" in text
    # the variant's real effect: real queries still attend to the padded keys; the true mask gives 0
    ids = comparison.a.token_ids
    pad = ids == 0
    assert pad.any()
    real_rows = ~pad
    assert (comparison.b.weights[:, real_rows][:, :, pad].sum(axis=-1) > 0.01).all()
    assert np.all(comparison.a.weights[:, real_rows][:, :, pad] == 0)
    shown_a, _shown_b, shown_diff = view.displayed()
    np.testing.assert_array_equal(shown_a, comparison.a.weights.mean(axis=0))
    np.testing.assert_array_equal(
        shown_diff, (comparison.b.weights.astype(np.float64) - comparison.a.weights).mean(axis=0)
    )
    # the next live result replaces the teaching pair
    wait_result(qtbot, window, lambda: window.parametersPanel.seedSpin.setValue(9))
    assert view.teaching() is None and not view.explanationText.isVisibleTo(window)


def test_implementation_comparison_runs_in_the_worker_and_fills_the_timing_dock(qtbot, window, monkeypatch):
    panel = window.tab_widget("implementation")
    threads = []
    real = implementation_tab.implementation_job

    def spy(*args):
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(implementation_tab, "implementation_job", spy)
    assert panel.runButton.isEnabled()
    with qtbot.waitSignal(
        window.tab_presenter("implementation").shownComparison, timeout=3 * TIMEOUT_MS, raising=False
    ) as blocker:
        panel.runButton.click()
    assert blocker.signal_triggered, (
        panel.notesLabel.text(),
        threads,
        window.compute.side.is_busy(channels.IMPLEMENTATIONS),
    )
    assert threads and threads[0] != threading.get_ident()
    assert window.timingTabs.currentWidget() is panel
    table = panel.table
    assert table.rowCount() == 3
    names = [table.item(r, 0).text() for r in range(3)]
    assert names == list(IMPLEMENTATIONS)
    times = [float(table.item(r, 1).text()) for r in range(3)]
    assert all(t > 0 for t in times)
    for r in range(1, 3):
        assert float(table.item(r, 3).text()) < 1e-4  # max |d output| vs attndesk
    assert float(table.item(2, 4).text()) < 1e-5  # nn.MultiheadAttention's weights
    assert table.item(1, 4).text() == "no weights"
    assert "tokens on cpu" in panel.notesLabel.text()


def test_rollout_tab_explains_it_needs_the_pretrained_model(window):
    window.viewTabs.setCurrentWidget(window.tab_page("rollout"))
    off = window.empty_state("rollout")
    assert window.tab_page("rollout").currentWidget() is off and off.action() == "Open the packaged MiniLM"
    assert not window.tab_widget("rollout").isVisibleTo(window)


def test_every_view_exports_figures_numbers_and_csv(qtbot, window, tmp_path):
    with qtbot.waitSignal(window.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        window.viewTabs.setCurrentWidget(window.tab_page("step-through"))
    for view in (window.tab_widget("step-through"), window.tab_widget("positions"), window.tab_widget("compare")):
        open_tab(window, view)
        if view is window.tab_widget("positions"):  # its table is a side job
            qtbot.waitUntil(lambda: window.tab_widget("positions").encoding is not None, timeout=TIMEOUT_MS)
        plots = [
            p for p in view.findChildren(type(window.tab_widget("positions").encodingPlot)) if p.matrix is not None
        ]
        assert plots, view.objectName()
        # the plots are shown one per event-loop turn (widgets/pacing.py)
        qtbot.waitUntil(lambda plots=plots: all(p.exportButton.isVisibleTo(window) for p in plots), timeout=TIMEOUT_MS)
        plot = plots[0]
        png = plot.export(str(tmp_path / f"{view.objectName()}.png"))
        npy = plot.export(str(tmp_path / f"{view.objectName()}.npy"))
        assert (tmp_path / png).stat().st_size > 0
        np.testing.assert_array_equal(np.load(npy), plot.matrix)
    with qtbot.waitSignal(window.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):
        window.viewTabs.setCurrentWidget(window.tab_page("head-stats"))
    assert window.tab_widget("head-stats").exportButton.isVisibleTo(window)
    csv = tmp_path / "stats.csv"
    window.tab_widget("head-stats").export_csv(str(csv))
    lines = csv.read_text().splitlines()
    assert len(lines) == 1 + window.displayed_result().map.num_heads and lines[0].startswith("head,entropy")


def test_closing_during_side_jobs_leaves_no_thread(qtbot):
    w = MainWindow(restore=False)
    w.show()
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        pass
    w.viewTabs.setCurrentWidget(w.tab_page("compare"))
    w.tab_widget("compare").teachButtons["scaled"].click()
    w.tab_widget("implementation").runButton.click()
    dispose(w)
    assert not running_threads()  # closing joined the main and the side workers


def test_large_differences_are_computed_in_the_worker(qtbot, window, monkeypatch):
    import attndesk.app.tabs.compare.view as compare_view

    monkeypatch.setattr(compare_view, "ASYNC_DIFF_CELLS", 0)  # everything counts as large
    threads, requests = [], []
    real = compare_tab.compare_frame

    def spy(request):
        threads.append(threading.get_ident())
        requests.append(request)
        return real(request)

    monkeypatch.setattr(compare_tab, "compare_frame", spy)
    view = window.tab_widget("compare")
    open_tab(window, view)
    a = window.displayed_result().toy.result
    view.pin()
    qtbot.waitUntil(lambda: view.diff() is not None, timeout=TIMEOUT_MS)
    assert view.diff().max_abs == 0.0
    b = wait_result(qtbot, window, lambda: window.parametersPanel.maskCombo.setCurrentText("causal")).toy.result
    qtbot.waitUntil(lambda: view.diff() is not None and view.diff().b is b.weights, timeout=TIMEOUT_MS)
    assert threads and all(t != threading.get_ident() for t in threads)
    # B − A may take what the memory ledger has left beside the run, the pin and the pictures
    assert all(0 < request.budget < window.state.config.budget_bytes for request in requests if request.a is not None)
    expected = b.weights.astype(np.float64) - a.weights
    np.testing.assert_array_equal(view.diff().diff, expected)
    np.testing.assert_array_equal(view.displayed()[2], expected.mean(axis=0))  # the worker's mean
    # leaving for another tab's work and coming back asks again instead of waiting forever
    view.pin()
    assert view.is_computing()
    window.viewTabs.setCurrentWidget(window.tab_page("head-stats"))
    open_tab(window, view)
    qtbot.waitUntil(lambda: view.diff() is not None and not view.is_computing(), timeout=TIMEOUT_MS)
    assert view.diff().max_abs == 0.0


def test_lowering_the_budget_below_a_pinned_a_lets_it_go(qtbot, window):
    view = window.tab_widget("compare")
    open_tab(window, view)
    wait_result(qtbot, window, lambda: window.state.update({"text": " ".join(["w"] * 400)}))
    a = window.displayed_result().toy.result
    assert a.weights.nbytes > 2**20
    view.pin()
    window.parametersPanel.memoryBudgetSpin.setValue(1)  # MiB
    assert view.pinned_result() is a or view.pinned_result().weights is a.weights  # A is still the run on screen
    window.recomputeAction.trigger()  # the run under the lowered budget replaces B; the old run is let go
    qtbot.waitUntil(lambda: view.pinned_result() is None, timeout=TIMEOUT_MS)
    assert "A was unpinned" in view.plotA.message.text()
    qtbot.waitUntil(lambda: not window.compute.is_pending(), timeout=TIMEOUT_MS)


def test_memory_bounded_runs_say_what_the_tabs_cannot_show(qtbot, window):
    text = " ".join(f"w{i % 300}" for i in range(600))
    with qtbot.waitSignal(
        window.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.length == 600
    ) as blocker:
        window.state.update({"text": text, "config": window.state.config.replace(num_heads=4, memory_budget=2_000_000)})
        window.recomputeAction.trigger()
    assert not blocker.args[0].toy.result.exact_weights  # only an overview: not indexable by token position
    for view in (
        window.tab_widget("step-through"),
        window.tab_widget("head-stats"),
        window.tab_widget("compare"),
        window.tab_widget("positions"),
    ):
        open_tab(window, view)
    qtbot.waitUntil(lambda: "memory-bounded" in window.tab_widget("step-through").infoLabel.text(), timeout=TIMEOUT_MS)
    assert "memory-bounded" in window.tab_widget("head-stats").infoLabel.text()
    assert "memory-bounded" in window.tab_widget("compare").maxLabel.text()
    assert window.tab_widget("compare").displayed() == (None, None, None)
    qtbot.waitUntil(lambda: window.tab_widget("positions").encoding is not None, timeout=TIMEOUT_MS)
    assert window.tab_widget("positions").encoding.shape == (600, 64)
    assert not window.compute.side.is_busy(channels.STATISTICS)  # nothing was started for weights that do not exist
