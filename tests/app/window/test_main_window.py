"""The main window end to end (offscreen): live recompute, inline errors, failures, closing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import QPointF, Qt

from attndesk.app import MainWindow
from attndesk.app.jobs.worker import running_threads
from attndesk.app.tabs.heatmaps.grid import ASPECT_LIMIT
from attndesk.attention.types import MEAN
from attndesk.core import run_attention
from attndesk.jobs.executor import Channel
from tests.conftest import TIMEOUT_MS
from tests.heartbeat import Heartbeat


def wait_result(qtbot, w, action):
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
        action()
    return blocker.args[0]


def core_weights(w) -> np.ndarray:
    """The core's weights for the window's current text and parameters, computed independently."""
    return run_attention(w.state.config, w.state.text, key_text=w.state.keys_text()).weights


def test_window_contract(window):
    names = [
        "tokenInput",
        "embedDimSpin",
        "hiddenDimSpin",
        "headsSpin",
        "maskCombo",
        "scaleCheck",
        "positionCombo",
        "kvHeadsCombo",
        "windowSpin",
        "softcapSpin",
        "dropoutSpin",
        "seedSpin",
        "deviceCombo",
        "dtypeCombo",
        "heatmapView",
        "timingPanel",
        "modeCombo",
        "viewTabs",
        "trainCheck",
        "crossCheck",
    ]
    from PySide6.QtWidgets import QWidget

    for name in names:
        assert window.findChild(QWidget, name) is not None, name
    assert window.exportAction.objectName() == "exportAction"
    assert window.exportAction.shortcut().toString() == "Ctrl+E"
    assert window.viewTabs.widget(0) is window.heatmapPanel
    assert window.displayed_result() is not None
    assert window.status_text().startswith("done in")


def test_the_window_module_imports_neither_pandas_nor_scikit_learn():
    """Tables are built where they are computed (pandas imported there) and the sample images are
    listed when the Image tab is first shown: a fresh interpreter importing the window loads neither."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "QT_QPA_PLATFORM": "offscreen"}
    code = "import sys, attndesk.app.window.main_window; print(sorted({'pandas', 'sklearn'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_heads_change_shows_that_many_heatmaps_equal_to_core(qtbot, window):
    shown = wait_result(qtbot, window, lambda: window.parametersPanel.headsSpin.setValue(8))
    assert shown is window.displayed_result()
    result = shown.toy.result
    arrays = window.heatmapPanel.displayed_arrays()
    assert len(arrays) == 8 == result.num_heads == shown.map.num_heads
    expected = core_weights(window)
    for h, array in enumerate(arrays):
        np.testing.assert_array_equal(array, expected[h])
    # and the mean view draws the mean over heads
    window.heatmapPanel.set_view_target(MEAN)
    (mean,) = window.heatmapPanel.displayed_arrays()
    np.testing.assert_allclose(mean, expected.mean(axis=0), rtol=1e-6, atol=1e-7)
    # the timing panel shows this run's stages
    stages = window.timingPanel.stage_milliseconds()
    assert "attention" in stages and stages["attention"] == pytest.approx(result.timings["attention"] * 1e3)


def test_causal_mask_zeroes_every_cell_above_the_diagonal(qtbot, window):
    result = wait_result(qtbot, window, lambda: window.parametersPanel.maskCombo.setCurrentText("causal")).toy.result
    assert result.config.mask == "causal"
    arrays = window.heatmapPanel.displayed_arrays()
    assert len(arrays) == result.num_heads
    for array in arrays:
        assert np.all(np.triu(array, k=1) == 0)
        assert np.all(np.diag(array) > 0)
        np.testing.assert_allclose(array.sum(axis=1), 1.0, rtol=1e-5)


def test_invalid_heads_show_inline_message_and_compute_nothing(qtbot, window):
    before = window.displayed_result()
    panel = window.parametersPanel
    with qtbot.assertNotEmitted(window.resultDisplayed, wait=500):
        panel.headsSpin.setValue(6)  # 64 dims: 6 does not divide
    assert panel.headsError.isVisibleTo(window)
    assert "1, 2, 4, 8, 16, 32, 64" in panel.headsError.text()
    assert not window.compute.is_busy()
    assert window.displayed_result() is before
    assert "fix the parameters" in window.status_text()
    assert window.state.config.num_heads == 6  # the state holds the choice; nothing ran
    # fixing it computes again and clears the message
    result = wait_result(qtbot, window, lambda: panel.headsSpin.setValue(16))
    assert result.map.num_heads == 16
    assert not panel.headsError.isVisibleTo(window)


def test_worker_error_is_reported_and_previous_result_kept(qtbot, window, monkeypatch):
    import attndesk.app.modes.toy as toy

    before = window.displayed_result()

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(toy, "run_attention", broken)
    with qtbot.waitSignal(window.compute.failed, timeout=TIMEOUT_MS):
        window.parametersPanel.seedSpin.setValue(5)
    assert "out of memory" in window.status_text()
    assert "previous result" in window.status_text()
    assert window.displayed_result() is before
    assert len(window.heatmapPanel.displayed_arrays()) == before.map.num_heads
    # the app keeps working once the failure goes away
    monkeypatch.undo()
    result = wait_result(qtbot, window, lambda: window.parametersPanel.seedSpin.setValue(6))
    assert result.toy.result.config.seed == 6


def test_hover_readout_and_highlight_in_every_head(qtbot, window):
    panel = window.heatmapPanel
    result = window.displayed_result().toy.result
    vb = panel.cell_views()[1][1]  # head 1
    q, k = 3, 2
    scene = vb.mapViewToScene(QPointF(k + 0.5, q + 0.5))
    panel._on_mouse_moved(scene)
    text = panel.readout.text()
    expected = f'H1 · query "{result.tokens[q]}" ({q}) → key "{result.keys[k]}" ({k}): {result.weights[1, q, k]:.4f}'
    assert text == expected
    assert re.fullmatch(r'H\d+ · query ".*" \(\d+\) → key ".*" \(\d+\): \d\.\d{4}', text)
    assert panel.highlighted_cells() == [(q, k)] * result.num_heads


def test_click_enlarges_a_head(qtbot, window):
    panel = window.heatmapPanel
    vb = panel.cell_views()[2][1]
    clicked = []
    panel.headClicked.connect(clicked.append)

    class Click:
        double_click = False

        def button(self):
            return Qt.MouseButton.LeftButton

        def double(self):
            return self.double_click

        def scenePos(self):
            return vb.mapViewToScene(QPointF(1.5, 1.5))

        def isAccepted(self):
            return False

    panel._on_mouse_clicked(Click())
    assert panel.view_target() == 2 and clicked == [2]
    assert panel.displayed_heads() == [2]
    np.testing.assert_array_equal(panel.displayed_arrays()[0], window.displayed_result().map.weights[2])
    back = Click()
    back.double_click = True
    panel._on_mouse_clicked(back)
    assert panel.view_target() == "all" and len(panel.displayed_heads()) == 4


def test_per_head_colour_scale_uses_each_heads_max(qtbot, window):
    panel = window.heatmapPanel
    weights = window.displayed_result().map.weights
    panel.set_shared_scale(False)
    for h, (lo, hi) in enumerate(panel.image_levels()):
        assert lo == 0 and hi == pytest.approx(float(weights[h].max()))
    panel.set_shared_scale(True)
    for lo, hi in panel.image_levels():
        assert lo == 0 and hi == pytest.approx(float(weights.max()))
    panel.set_colormap_name("CET-L1")
    assert panel.colormap_name() == "CET-L1"
    assert window.state.view.colormap == "CET-L1" and window.state.view.shared_scale
    window.state.view.shared_scale = False  # the state drives the panel too
    assert not panel.shared_scale()


def test_masked_cells_are_hatched_not_coloured(qtbot, window):
    wait_result(qtbot, window, lambda: window.parametersPanel.maskCombo.setCurrentText("causal"))
    from attndesk.render import colormaps

    panel = window.heatmapPanel
    vb = panel.cell_views()[0][1]
    L = window.displayed_result().map.weights.shape[1]
    image = panel.canvas.grab().toImage()

    def colours(q: int, k: int) -> set:
        """Every pixel colour inside cell (q, k) of head 0, as drawn on screen."""
        top_left = vb.mapViewToScene(QPointF(k + 0.15, q + 0.15))
        bottom_right = vb.mapViewToScene(QPointF(k + 0.85, q + 0.85))
        return {
            image.pixelColor(x, y).getRgb()[:3]
            for x in range(int(top_left.x()), int(bottom_right.x()))
            for y in range(int(top_left.y()), int(bottom_right.y()))
        }

    # above the diagonal: the mask colour, hatched in the hatch colour; on/below it: weights only
    hatched = {colormaps.mask_rgb("viridis"), colormaps.hatch_rgb("viridis")}
    assert colours(0, L - 1) == hatched
    assert not colours(L - 1, 0) & hatched


def test_cross_attention_uses_the_second_text_as_keys(qtbot, window):
    tokens = window.tokensPanel

    def switch_on():
        tokens.keyInput.setPlainText("a dog barked")
        tokens.crossCheck.setChecked(True)

    result = wait_result(qtbot, window, switch_on).toy.result
    assert result.key_tokens == ["a", "dog", "barked"]
    arrays = window.heatmapPanel.displayed_arrays()
    assert arrays[0].shape == (len(result.tokens), 3)
    np.testing.assert_array_equal(np.stack(arrays), core_weights(window))


def long_text(n: int) -> str:
    return " ".join(f"w{i % 500}" for i in range(n))


def set_large(w):
    """2,048 tokens x 16 heads, in one change of the state (so one run)."""
    w.state.update(
        {"config": w.state.config.replace(embed_dim=256, num_heads=16, mask="none"), "text": long_text(2048)}
    )


def largest_gap_ms(qtbot, window, change) -> tuple[float, object]:
    """Tick every 10 ms from ``change`` until its result is drawn: (the most GUI-thread CPU between two
    ticks in ms, the result)."""
    with Heartbeat(interval_ms=10, clock=time.thread_time) as beat:
        with qtbot.waitSignal(window.resultDisplayed, timeout=60000) as blocker:
            change()  # the change itself runs it: no debounce, no Run needed
        qtbot.wait(30)
    assert len(beat.gaps) > 20
    return beat.worst * 1e3, blocker.args[0]


@pytest.mark.perf
def test_event_loop_stays_responsive_during_a_large_run(qtbot, window):
    # another process (a parallel test run) can starve the GUI thread on the shared 2-core
    # machines: a try that stalls gets another with a new seed; a real stall fails them all
    worst = []
    for attempt in range(3):
        gap, result = largest_gap_ms(
            qtbot, window, lambda attempt=attempt: (set_large(window), window.state.set_config(seed=attempt))
        )
        assert result.map.weights.shape == (16, 2048, 2048) and result.toy.result.config.seed == attempt
        worst.append(gap)
        if gap < 100:
            break
    assert min(worst) < 100, f"event loop stalled for {worst} ms (tries)"


@pytest.mark.perf
def test_closing_during_a_long_run_exits_cleanly(qtbot, qtlog):
    w = MainWindow()
    w.show()
    with qtbot.waitSignal(w.compute.runner.started, timeout=TIMEOUT_MS):
        set_large(w)  # runs at once: the worker picks it up
    start = time.monotonic()
    w.close()
    assert time.monotonic() - start < 10
    assert running_threads() == []
    dispose(w)
    assert not any("Destroyed while thread" in rec.message for rec in qtlog.records)


def test_quit_hides_the_window_before_waiting_for_a_busy_job(qtbot, window):
    """A job's current step cannot be interrupted (one torch call): Quit makes the window
    disappear at once and joins the worker behind it."""
    import threading

    started, release, seen = threading.Event(), threading.Event(), []

    def step():  # one long uninterruptible step (it never asks whether it should stop)
        started.set()
        release.wait(10)

    window.compute.side.submit(Channel("busy"), step, done=lambda _r: None, scope=None)
    assert started.wait(10)
    watcher = threading.Timer(0.3, lambda: (seen.append(window.isVisible()), release.set()))
    watcher.start()
    window.close()  # returns once the step ended
    watcher.join()
    assert seen == [False], "the window stayed on screen while Quit waited for the worker"
    assert running_threads() == []


def test_cancel_keeps_the_previous_result(qtbot, window):
    before = window.displayed_result()
    with qtbot.waitSignal(window.compute.runner.started, timeout=TIMEOUT_MS):
        set_large(window)
    with qtbot.assertNotEmitted(window.resultDisplayed, wait=0):
        window.cancelAction.trigger()
    assert window.status_text().startswith("cancelled")
    assert window.displayed_result() is before
    qtbot.waitUntil(lambda: not window.compute.runner.is_busy(), timeout=TIMEOUT_MS)
    assert window.displayed_result() is before


def test_grid_reflows_with_the_window_shape(qtbot, window):
    wait_result(qtbot, window, lambda: window.parametersPanel.headsSpin.setValue(8))
    panel = window.heatmapPanel
    window.resize(2200, 700)
    qtbot.waitUntil(lambda: panel.grid_layout().cols >= 4 and not panel.is_building(), timeout=5000)
    wide = panel.grid_layout().cols
    window.resize(900, 1600)
    qtbot.waitUntil(lambda: panel.grid_layout().cols < wide and not panel.is_building(), timeout=5000)
    assert len(panel.displayed_arrays()) == 8
    layout = panel.grid_layout()
    assert (
        1 / ASPECT_LIMIT - 1e-6 <= layout.map_w / layout.map_h <= ASPECT_LIMIT + 1e-6
    )  # square matrix, near-square map


def test_unavailable_devices_are_greyed_with_the_reason(window):
    from attndesk.system.devices import device_availability

    combo = window.parametersPanel.deviceCombo
    model = combo.model()
    for name, reason in device_availability().items():
        item = model.item(combo.findData(name))
        assert item.isEnabled() == (reason is None)
        if reason is not None:
            assert reason in item.toolTip()


def test_rapid_edits_end_with_the_latest(qtbot, window):
    # no debounce: the first edit runs at once; the edits made while it runs are coalesced, so
    # the newest runs next and nothing older arrives after it
    shown = []
    window.resultDisplayed.connect(shown.append)
    spin = window.parametersPanel.headsSpin
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.map.num_heads == 32):
        for heads in (2, 8, 16, 32):
            spin.setValue(heads)
    qtbot.wait(400)  # nothing else arrives later
    assert [r.map.num_heads for r in shown] in ([32], [2, 32])
    assert not window.compute.is_busy()


def test_train_switch_turns_dropout_on(qtbot, window):
    panel = window.parametersPanel
    result = wait_result(qtbot, window, lambda: window.state.set_config(dropout=0.5, training=False)).toy.result
    assert panel.dropoutSpin.value() == 0.5
    np.testing.assert_allclose(result.weights.sum(axis=-1), 1.0, rtol=1e-5)  # eval: dropout off
    result = wait_result(qtbot, window, lambda: panel.trainCheck.setChecked(True)).toy.result
    assert result.config.training and (result.weights == 0).any()  # dropped weights
    np.testing.assert_array_equal(np.stack(window.heatmapPanel.displayed_arrays()), core_weights(window))


def test_a_longer_text_shows_every_row_and_column(qtbot, window):
    # same head count, new length: the cells must show the new L x L matrix, not the old corner of it
    old_len = window.displayed_result().length
    text = " ".join(f"w{i}" for i in range(old_len + 9))
    result = wait_result(qtbot, window, lambda: window.tokensPanel.tokenInput.setPlainText(text))
    assert window.state.text == text
    L = result.length
    assert old_len + 9 == L
    for _head, vb, image in window.heatmapPanel.cell_views():
        assert image.image.shape == (L, L)
        (x0, x1), (y0, y1) = vb.viewRange()
        assert (x0, x1) == pytest.approx((0, L)) and (y0, y1) == pytest.approx((0, L))


def test_a_size_that_cannot_fit_is_said_next_to_its_control(qtbot, window):
    before = window.displayed_result()
    panel = window.parametersPanel
    with qtbot.assertNotEmitted(window.resultDisplayed, wait=300):
        panel.embedDimSpin.setValue(100_000_000)
    label = panel.findChild(type(panel.headsError), "embed_dimError")
    assert label.isVisibleTo(window) and "embed" in label.text() and "\n" not in label.text()
    assert panel.embedDimSpin.styleSheet() and not panel.generalError.isVisibleTo(window)
    assert window.state.config.embed_dim == 100_000_000  # kept as typed, never clamped
    assert window.displayed_result() is before and "fix the parameters" in window.status_text()
    wait_result(qtbot, window, lambda: panel.embedDimSpin.setValue(64))
    assert not label.isVisibleTo(window) and not panel.embedDimSpin.styleSheet()


ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
    "allocate 80000000000 bytes. Error code 12 (Cannot allocate memory)"
)


@pytest.mark.parametrize("failure", [MemoryError(), RuntimeError(ALLOCATOR)], ids=["MemoryError", "torch allocator"])
def test_a_run_out_of_memory_is_one_line_and_the_result_stays(qtbot, window, monkeypatch, failure):
    import attndesk.app.modes.toy as toy

    before = window.displayed_result()

    def broken(*args, **kwargs):
        raise failure

    monkeypatch.setattr(toy, "run_attention", broken)
    with qtbot.waitSignal(window.compute.failed, timeout=TIMEOUT_MS):
        window.parametersPanel.seedSpin.setValue(9)
    status = window.status_text()
    assert status.startswith("error: out of memory") and "\n" not in status and "previous result" in status
    if isinstance(failure, RuntimeError):
        assert "74.5 GiB were asked for" in status
    assert window.displayed_result() is before and window.statusLabel.styleSheet()
    assert not window.compute.is_busy() and not window.progressBar.isVisible()


def test_a_side_job_out_of_memory_is_said_in_its_tab(qtbot, window, monkeypatch):
    import attndesk.app.tabs.headstats.presenter as headstats_tab

    def broken(*args):
        raise MemoryError()

    monkeypatch.setattr(headstats_tab, "statistics_job", broken)
    with qtbot.waitSignal(window.tab_presenter("head-stats").failed, timeout=TIMEOUT_MS):
        window.state.view.tab = "head-stats"
    assert window.tab_widget("head-stats").infoLabel.text().startswith("head statistics failed: out of memory")
    monkeypatch.undo()
    with qtbot.waitSignal(window.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):  # the next result works
        window.parametersPanel.seedSpin.setValue(3)


def test_achieved_rate_has_a_unit_that_fits(qtbot, window):
    """A run of a few kFLOP in milliseconds is MFLOP/s, not "0.00 GFLOP/s"."""
    shown = window.displayed_result()
    facts = shown.facts
    text = window.timingPanel.rateLabel.text()
    assert text.endswith("FLOP/s") and not text.startswith("0.00")
    value, unit = text.split()
    scale = {"GFLOP/s": 1e9, "MFLOP/s": 1e6, "kFLOP/s": 1e3, "FLOP/s": 1.0}[unit]
    assert abs(float(value) * scale - facts.gflops_per_second * 1e9) <= 0.01 * scale
