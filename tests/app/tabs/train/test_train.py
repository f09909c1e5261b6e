"""The Train tab (app/tabs/train/) with real widgets and a real trainer on a
tiny model: Start trains and draws, Pause / Resume / Stop act between steps, the timeline shows a
checkpoint's own weights, a shape the task cannot use is explained at its control, a divergent
run keeps its last good checkpoint and says so, and closing the window mid-run (paused, too)
leaves no thread running (conftest checks)."""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
import pytest
import torch
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtGui import QAction

import attndesk.train.trainer as trainer_module
from attndesk.app.jobs.channels import TRAIN
from attndesk.app.jobs.compute import ComputeController, Modes
from attndesk.app.modes.toy import ToyMode
from attndesk.app.tabs.train import TrainView
from attndesk.app.tabs.train.presenter import TRAIN_TAB, TrainTab, phase_change
from attndesk.attention.types import head_name
from attndesk.session.state import AppState
from attndesk.session.status import StatusModel
from attndesk.train.presets import load_preset
from attndesk.train.store import load_run
from tests.conftest import TIMEOUT_MS
from tests.heartbeat import Heartbeat

TINY = {
    "task": "previous-token",
    "layers": 1,
    "heads": 2,
    "embed_dim": 16,
    "seq_len": 12,
    "steps": 30,
    "batch_size": 8,
    "checkpoint_every": 10,
    "position": "learned",
}


@pytest.fixture
def tab(qtbot):
    state = AppState()
    compute = ComputeController(state, Modes([ToyMode()]), StatusModel())
    view = TrainView()
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    presenter = TrainTab(state, compute, view)
    view.set_settings(TINY)
    yield presenter
    presenter.shutdown()
    compute.shutdown()


def train(qtbot, tab, **settings):
    tab.view.set_settings(settings)
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start()
    return blocker.args[0]


def probe_attention(run):
    return run.attention(run.task.probe().ids)[0].numpy()


def test_start_trains_and_draws_the_curves_scores_and_probe_heatmaps(qtbot, tab):
    run = train(qtbot, tab)
    view = tab.view
    assert run.status == "finished" and run.step == 30 and tab.gathered.reports == 30
    steps, loss = view.curves.lossCurve.getData()
    np.testing.assert_array_equal(steps, np.arange(1, 31))
    np.testing.assert_array_equal(loss, [row["loss"] for row in run.history])
    eval_steps, pattern = view.curves.patternCurve.getData()
    np.testing.assert_array_equal(eval_steps, [25, 30])
    np.testing.assert_allclose(pattern, [row["pattern"] for row in run.history if "pattern" in row])
    final = run.evaluate(tab_eval_batch(run))["scores"]
    np.testing.assert_allclose(view.scorePlot.matrix, final, atol=1e-6)
    weights = probe_attention(run)  # the heatmaps show the final weights on the probe input
    np.testing.assert_array_equal(tab.shown_weights(), weights)
    qtbot.waitUntil(view.probe_drawn, timeout=TIMEOUT_MS)  # the heatmaps are built one per turn
    for h in range(2):
        np.testing.assert_array_equal(view.headPlots[h].matrix, weights[0, h])
    assert view.startButton.isEnabled() and not view.stopButton.isEnabled()
    assert view.message.text() == "trained 30 steps"


def tab_eval_batch(run):
    """The trainer's evaluation set (same seed stream as the trainer's)."""
    return run.task.sample(
        trainer_module.EVAL_SEQUENCES, torch.Generator().manual_seed(run.cfg.seed + trainer_module._EVAL_SEED_OFFSET)
    )


def test_pause_holds_the_run_resume_continues_and_stop_keeps_what_was_trained(qtbot, tab):
    tab.view.set_settings({"steps": 100_000})
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start()
        qtbot.waitUntil(lambda: len(tab.gathered.steps) >= 3, timeout=TIMEOUT_MS)
        tab.view.pauseButton.click()
        assert tab.view.resumeButton.isEnabled() and not tab.view.pauseButton.isEnabled()
        qtbot.wait(200)  # the step in flight ends
        held = tab.run.step
        qtbot.wait(400)
        assert tab.run.step == held
        tab.view.resumeButton.click()
        qtbot.waitUntil(lambda: tab.run.step > held + 2, timeout=TIMEOUT_MS)
        tab.view.stopButton.click()
    run = blocker.args[0]
    assert run.status == "stopped" and held < run.step < 100_000
    assert tab.view.message.text() == run.message and "stopped at step" in run.message
    assert tab.view.startButton.isEnabled()
    np.testing.assert_array_equal(tab.shown_weights(), probe_attention(run))  # the weights it stopped with


def test_the_timeline_scrubs_to_a_checkpoint_and_shows_its_own_weights(qtbot, tab):
    run = train(qtbot, tab)
    assert tab.checkpoint_steps() == [0, 10, 20, 30]
    assert tab.view.timeline.maximum() == 3 and tab.view.timeline.value() == 3
    with qtbot.waitSignal(tab.scrubbed, timeout=TIMEOUT_MS):
        tab.view.timeline.setValue(1)
    expected = probe_attention(run.at_checkpoint(10))
    np.testing.assert_array_equal(tab.shown_weights(), expected)
    np.testing.assert_array_equal(tab.view.headPlots[1].matrix, expected[0, 1])
    assert not np.allclose(expected, probe_attention(run))  # step 10 differs from the end
    assert "step 10" in tab.view.probeCaption.text()
    tab.view.liveButton.click()
    np.testing.assert_array_equal(tab.shown_weights(), probe_attention(run))


def test_the_checkpoint_line_and_the_scores_per_head_follow_the_timeline(qtbot, tab):
    run = train(qtbot, tab)
    view = tab.view
    assert view.timelineLabel.text() == "4 kept · showing the newest weights (step 30)"
    with qtbot.waitSignal(tab.scrubbed, timeout=TIMEOUT_MS):
        view.timeline.setValue(0)
    assert view.timelineLabel.text() == "4 kept · showing the checkpoint at step 0 of 30"
    then = run.at_checkpoint(0).evaluate(tab_eval_batch(run))["scores"]
    np.testing.assert_allclose(view.scorePlot.matrix, then, atol=1e-6)
    assert not np.allclose(then, run.evaluate(tab_eval_batch(run))["scores"])  # step 0 scores differ from the end
    assert "previous-token score per head at step 0" in view.scorePlot.title.text()
    view.liveButton.click()
    np.testing.assert_allclose(view.scorePlot.matrix, run.evaluate(tab_eval_batch(run))["scores"], atol=1e-6)
    assert "at step" not in view.scorePlot.title.text()
    assert view.timelineLabel.text() == "4 kept · showing the newest weights (step 30)"


def test_every_token_label_of_the_probe_heatmaps_is_drawn_and_no_legend_covers_a_curve(qtbot, tab):
    view = tab.view
    preset = load_preset("induction")  # 2 layers x 4 heads over a 32-token probe
    with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
        view.presetCombo.setCurrentIndex(view.presetCombo.findData("induction"))
        view.presetCombo.activated.emit(view.presetCombo.currentIndex())
    qtbot.waitUntil(lambda: view.probe_drawn() and all(h.settled() for h in view._hosts), timeout=TIMEOUT_MS)
    labels = preset.task.labels(preset.task.probe().ids[0])
    hosts = [host.geometry() for host in view._hosts]
    for i, (plot, host) in enumerate(zip(view.headPlots, hosts, strict=True)):
        assert plot.row_labels == labels
        assert plot.title.text() == head_name(view.layerCombo.currentIndex(), i)  # as every tab names a head
        rows = len(labels)
        shown = plot.left.visible_ticks(0, rows, plot.plot.vb.height())
        assert shown == list(range(rows)), f"head {i}: {len(shown)} of {rows} row labels drawn"
        assert plot.bottom.visible_ticks(0, rows, plot.plot.vb.width()) == list(range(rows))
        assert not any(host.intersects(other) for other in hosts[:i]), f"head {i}'s heatmap overlaps another"
    # the metric plot names its curves in its title, in their colours; nothing inside covers them
    title = view.curves.metricPlot.getPlotItem().titleLabel.text
    for name, curve in (("accuracy", view.curves.accuracyCurve), ("pattern score", view.curves.patternCurve)):
        assert f"color:{curve.opts['pen'].color().name()}'>{name}<" in title
    assert not [
        item for item in view.curves.metricPlot.getPlotItem().scene().items() if isinstance(item, pg.LegendItem)
    ]


def test_a_shape_the_task_cannot_use_is_explained_next_to_its_control(qtbot, tab):
    view = tab.view
    view.set_settings({"task": "reverse"})
    view.set_settings({"seq_len": 17})
    assert view.problems["seq_len"].isVisible() and "even seq_len" in view.problems["seq_len"].text()
    assert not tab.start() and not tab.side.is_busy(TRAIN) and tab.phase == "idle"
    view.set_settings({"heads": 3})  # 3 heads do not divide 16
    assert (
        view.problems["heads"].isVisible() and "do not divide the width (embed_dim) 16" in view.problems["heads"].text()
    )
    view.set_settings({"heads": 2, "seq_len": 18})
    assert view.problem() == ""


def test_a_divergent_run_stops_keeps_the_last_good_checkpoint_and_says_so(qtbot, tab, monkeypatch):
    real = trainer_module.F
    calls = []

    class Poisoned:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def cross_entropy(*args, **kwargs):
            calls.append(1)
            loss = real.cross_entropy(*args, **kwargs)
            return loss * float("nan") if len(calls) > 15 else loss

    monkeypatch.setattr(trainer_module, "F", Poisoned())
    run = train(qtbot, tab)
    assert run.status == "diverged" and run.step == 14  # the weights that gave the NaN are dropped too
    assert tab.checkpoint_steps() == [0, 10]
    message = tab.view.message.text()
    assert "the loss became nan at step 16" in message and "last good weights (step 14)" in message
    assert "up to step 10 are kept" in message and "b00020" in tab.view.message.styleSheet()
    np.testing.assert_array_equal(tab.shown_weights(), probe_attention(run))  # the restored weights


def test_a_shipped_preset_opens_with_its_history_scores_and_learned_attention(qtbot, tab):
    preset = load_preset("previous-token")
    with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
        tab.view.presetCombo.setCurrentIndex(tab.view.presetCombo.findData("previous-token"))
        tab.view.presetCombo.activated.emit(tab.view.presetCombo.currentIndex())
    weights = probe_attention(preset)
    np.testing.assert_array_equal(tab.shown_weights(), weights)
    qtbot.waitUntil(tab.view.probe_drawn, timeout=TIMEOUT_MS)  # the heatmaps are built one per turn
    np.testing.assert_array_equal(tab.view.headPlots[1].matrix, weights[0, 1])
    np.testing.assert_allclose(tab.view.scorePlot.matrix, preset.evaluate(tab_eval_batch(preset))["scores"], atol=1e-6)
    np.testing.assert_array_equal(tab.view.curves.lossCurve.getData()[1], [row["loss"] for row in preset.history])
    assert tab.view.settings()["heads"] == 2 and tab.view.settings()["task"] == "previous-token"
    assert "previous-token" in tab.view.message.text()


def test_a_trained_run_saves_and_opens_again_with_the_same_attention(qtbot, tab, tmp_path):
    run = train(qtbot, tab)
    assert tab.view.saveButton.isEnabled()
    tab.save(str(tmp_path / "run"))
    qtbot.waitUntil(lambda: tab.view.message.text().startswith("saved"), timeout=TIMEOUT_MS)
    with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
        tab.open("run", lambda: load_run(tmp_path / "run"))
    np.testing.assert_array_equal(tab.shown_weights(), probe_attention(run))
    assert tab.checkpoint_steps() == [0, 10, 20, 30]


def test_save_into_a_folder_holding_other_files_is_refused_and_touches_nothing(qtbot, tab, tmp_path):
    with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
        tab.open("previous-token", lambda: load_preset("previous-token"))
    folder = tmp_path / "earlier"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"an earlier run's weights")
    (folder / "notes.txt").write_text("mine")
    tab.save(str(folder))  # refused at once, as the command line refuses a non-empty --out
    message = tab.view.message.text()
    assert message.startswith("not saved:") and "holds other files" in message and "\n" not in message
    assert "choose an empty or new folder" in message and "b00020" in tab.view.message.styleSheet()
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors", "notes.txt"]
    assert (folder / "model.safetensors").read_bytes() == b"an earlier run's weights"


def test_a_folder_that_is_not_a_saved_run_is_refused_in_one_line(qtbot, tab, tmp_path):
    tab.open(str(tmp_path), lambda: load_run(tmp_path))
    qtbot.waitUntil(lambda: tab.view.message.text().startswith("not opened:"), timeout=TIMEOUT_MS)
    assert "\n" not in tab.view.message.text() and tab.run is None


def test_phase_change_is_the_largest_rise_of_the_pattern_score():
    assert phase_change([25, 50, 75, 100], [0.1, 0.15, 0.8, 0.9]) == 75
    assert phase_change([25, 50, 75], [0.1, 0.2, 0.25]) is None  # no rise of 0.2
    assert phase_change([25], [0.9]) is None


@pytest.mark.parametrize("paused", [False, True])
def test_closing_the_window_mid_training_leaves_no_thread(qtbot, paused):
    w = shown_window(qtbot, timeout_ms=TIMEOUT_MS)
    tab = w.tab_presenter(TRAIN_TAB)
    tab.view.set_settings(TINY | {"steps": 100_000})
    assert tab.start()
    qtbot.waitUntil(lambda: len(tab.gathered.steps) >= 2, timeout=TIMEOUT_MS)
    if paused:
        tab.pause()
        assert w.findChild(QAction, "openTrainedAction") in w.menus.actions("file")
    dispose(w)  # conftest: no thread left running


@pytest.mark.perf
def test_training_never_holds_the_window_and_redraws_the_heatmaps_twice_a_second(qtbot, tab):
    """A 5 ms heartbeat in the GUI thread over 2 s of training (after the first probe: the first
    run's imports are behind it): no gap of 100 ms, and the heatmaps redrawn at least twice a
    second. A tiny model takes hundreds of steps a second: every report crosses, the drawing
    does not follow each one. Three tries: a parallel test run can starve the GUI thread."""
    tab.view.set_settings({"steps": 1_000_000})
    shown = []
    tab.view.probeCaption.setText("")
    original = tab.view.show_probe
    tab.view.show_probe = lambda *a, **k: (shown.append(time.perf_counter()), original(*a, **k))
    assert tab.start()
    qtbot.waitUntil(lambda: bool(shown), timeout=TIMEOUT_MS)
    gaps = []
    for _try in range(3):
        shown[:] = []
        with Heartbeat(clock=time.thread_time) as beat:
            qtbot.wait(2000)
        gaps.append(beat.worst)
        if gaps[-1] < 0.100 and len(shown) >= 4:
            break
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS):
        tab.stop()
    assert gaps[-1] < 0.100, f"the window stalled {[round(g * 1e3) for g in gaps]} ms"
    assert len(shown) >= 4 and tab.gathered.reports > len(tab.draw_times)
