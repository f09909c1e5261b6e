"""Long documents in the window (offscreen): open/drop a file, plan, hold, pyramid runs, zoom, cancel, export.

Small sizes with a small memory budget force the memory-bounded (pyramid) path quickly.
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import QCoreApplication, QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent

from attndesk.app import MainWindow
from attndesk.app.modes import long as long_mode
from attndesk.app.modes.toy import toy_run
from attndesk.app.tabs.heatmaps.view import format_weight
from attndesk.app.window.export_dialog import perform_export
from attndesk.core import AttentionConfig, run_attention
from attndesk.render.colormaps import hatch_rgba
from attndesk.render.export import ExportError
from attndesk.runs.pipeline import plan_text
from attndesk.session.plans import describe_plan, needs_explicit_run
from attndesk.session.results import Held
from tests.conftest import TIMEOUT_MS
from tests.words import WORDS

MiB = 2**20


def document(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def config_of(w) -> AttentionConfig:
    return w.state.config


def long_result(qtbot, w, n_words: int, budget_mib: int = 16):
    """Set a small budget and a long text, wait for the (memory-bounded) result on screen."""
    with qtbot.waitSignal(
        w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.length == n_words
    ) as blocker:
        w.state.update({"config": w.state.config.replace(memory_budget=budget_mib * MiB), "text": document(n_words)})
    return blocker.args[0]


def drop_file(target, path) -> QDropEvent:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    pos = QPointF(10, 10)
    enter = QDragEnterEvent(
        pos.toPoint(), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    )
    QCoreApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    drop = QDropEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QCoreApplication.sendEvent(target, drop)
    return drop


# -- opening files --------------------------------------------------------------------------
@pytest.mark.perf
def test_open_a_1mb_text_file_sets_the_text_and_holds_the_long_run(qtbot, window, tmp_path):
    text = document(400_000)[: 2**20 - 100]
    path = tmp_path / "book.txt"
    path.write_text(text, encoding="utf-8")
    previous = window.displayed_result()
    start = time.perf_counter()
    assert window.longMode.open_text_file(path)
    # the whole text runs; the box shows a read-only preview (Qt would lay out 1 MiB on the GUI thread)
    panel = window.tokensPanel
    assert (
        window.state.text == text and panel.tokenInput.isReadOnly() and text.startswith(panel.tokenInput.toPlainText())
    )
    assert panel.tokenPreviewNote.isVisible() and f"{len(text):,} characters" in panel.tokenPreviewNote.label.text()
    # the worker plans it; ~200k tokens is far too long to start unasked
    qtbot.waitUntil(lambda: window.longMode.held_plan() is not None, timeout=TIMEOUT_MS)
    elapsed = time.perf_counter() - start
    plan = window.longMode.held_plan()
    assert plan.lq > 100_000 and plan.kind == "pyramid"
    assert "press Run (F5)" in window.status_text()
    assert describe_plan(plan) in window.status_text()
    assert window.longMode.runButton.isVisible()
    assert window.longMode.planLabel.isVisible() and f"{plan.lq:,} tokens" in window.longMode.planLabel.text()
    assert window.displayed_result() is previous  # nothing computed
    # the planning job's result reaches the GUI a moment before its thread marks it ended
    qtbot.waitUntil(lambda: not window.compute.runner.is_busy(), timeout=2000)
    assert window.displayed_result() is previous
    assert elapsed < 10, f"opening and planning took {elapsed:.1f} s"
    # Run starts it; Cancel stops it within a block and the previous result stays
    with qtbot.waitSignal(window.compute.progressed, timeout=TIMEOUT_MS, check_params_cb=lambda f, m: "block" in m):
        window.longMode.runButton.click()
    assert not window.longMode.runButton.isVisible()
    start = time.perf_counter()
    window.compute.cancel()
    qtbot.waitUntil(lambda: not window.compute.runner.is_busy(), timeout=TIMEOUT_MS)
    assert time.perf_counter() - start < 1.0
    assert window.displayed_result() is previous


def test_binary_or_undecodable_file_is_refused_and_nothing_changes(qtbot, window, tmp_path):
    before = window.state.text
    binary = tmp_path / "data.bin"  # (an image's suffix goes to the Image tab: tests/app/tabs/test_image.py)
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert not window.longMode.open_text_file(binary)
    assert "binary" in window.status_text() and window.status_text().startswith("not opened")
    assert window.statusLabel.styleSheet()  # shown as an error
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café crème".encode("latin-1"))
    assert not window.longMode.open_text_file(latin)
    assert "not UTF-8" in window.status_text()
    assert window.state.text == before
    qtbot.wait(50)
    assert not window.compute.is_busy()  # nothing to recompute


def test_dropping_a_file_on_the_window_sets_the_text(qtbot, window, tmp_path):
    path = tmp_path / "note.txt"
    path.write_text("a dropped document about a cat", encoding="utf-8")
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
        drop = drop_file(window, path)
    assert drop.isAccepted()
    assert window.state.text == "a dropped document about a cat"
    assert blocker.args[0].map.queries[:3] == ["a", "dropped", "document"]
    # on the text box itself the file is opened too, never its URL pasted as text
    other = tmp_path / "other.txt"
    other.write_text("second file", encoding="utf-8")
    drop_file(window.tokensPanel.tokenInput.viewport(), other)
    assert window.state.text == "second file"
    # with cross-attention on, a file dropped on the key text box becomes the keys/values
    window.tokensPanel.crossCheck.setChecked(True)
    keys = tmp_path / "keys.txt"
    keys.write_text("le chat dort", encoding="utf-8")
    drop_file(window.tokensPanel.keyInput.viewport(), keys)
    assert window.state.keys_text() == "le chat dort" and window.state.text == "second file"
    assert window.tokensPanel.keyInput.toPlainText() == "le chat dort"


# -- planning -------------------------------------------------------------------------------
def test_planned_job_holds_only_unasked_long_runs():
    config = AttentionConfig(memory_budget=16 * MiB)
    long_text = document(60_000)
    plan = plan_text(config, long_text)
    assert needs_explicit_run(plan)
    seen = []
    held = toy_run(config, long_text, explicit=False, announce=seen.append)
    assert isinstance(held, Held) and held.plan == plan and seen == [plan]
    short = toy_run(config, "the cat sat", explicit=False)
    assert not isinstance(short, Held) and short.toy.result.plan.kind == "full"


# -- pyramid runs in the window ---------------------------------------------------------------
def test_over_budget_run_shows_overview_plan_and_exact_hover(qtbot, window):
    result = long_result(qtbot, window, 2000).toy.result
    assert result.plan.kind == "pyramid" and result.pyramid is not None
    L = len(result.tokens)
    assert L == 2000
    assert "exceed the 16.0 MiB budget" in window.status_text()
    assert window.longMode.planLabel.isVisible() and "overview" in window.longMode.planLabel.text()
    arrays = window.heatmapPanel.displayed_arrays()
    assert len(arrays) == 4 and max(arrays[0].shape) < L  # an overview, not the matrix
    full = run_attention(config_of(window).replace(memory_budget=None), window.state.text).weights
    assert full.shape == (4, L, L)
    # each overview pixel is the max of its tile, so the global max survives
    assert np.isclose(arrays[1].max(), full[1].max(), rtol=1e-5)
    source = window.heatmapPanel.source()
    for q, k in ((0, 0), (1234, 567), (L - 1, L - 1), (999, 1998)):
        for h in range(4):
            assert source.value_at(h, q, k) == pytest.approx(float(full[h, q, k]), rel=1e-5, abs=1e-9)
        text = window.heatmapPanel.hover_cell(q, k)  # three significant digits for weights ~1/L
        assert text.endswith(f": {format_weight(float(full[0, q, k]))}")
        assert float(text.rsplit(": ", 1)[1]) == pytest.approx(float(full[0, q, k]), rel=5e-3)


def test_zoom_draws_exact_cells_equal_to_the_full_weights(qtbot, window):
    result = long_result(qtbot, window, 2000).toy.result
    assert result.plan.kind == "pyramid"
    full = run_attention(config_of(window).replace(memory_budget=None), window.state.text).weights
    with qtbot.waitSignal(window.longMode.zoomShown, timeout=TIMEOUT_MS) as blocker:
        window.heatmapPanel.set_view_target(1)  # the enlarged head: finer than the grid's overview
    tile = blocker.args[0]
    assert tile.head == 1 and tile.factor < window.heatmapPanel.source().factor
    assert window.longMode.export_region() is None  # the whole matrix is in view
    vb = window.heatmapPanel.cell_views()[0][1]
    with qtbot.waitSignal(
        window.longMode.zoomShown, timeout=TIMEOUT_MS, check_params_cb=lambda t: t.factor == 1
    ) as blocker:
        vb.setRange(xRange=(700, 760), yRange=(1500, 1550), padding=0)
    tile = blocker.args[0]
    q0, k0 = tile.q0, tile.k0
    rows, cols = tile.array.shape
    assert q0 <= 1500 and k0 <= 700 and q0 + rows >= 1550 and k0 + cols >= 760
    np.testing.assert_allclose(tile.array, full[1, q0 : q0 + rows, k0 : k0 + cols], rtol=1e-5, atol=1e-8)
    np.testing.assert_array_equal(window.longMode.zoom_image(), tile.array)
    assert "exact cells" in window.heatmapPanel.note.text()
    (eq0, eq1), (ek0, ek1) = window.longMode.export_region()
    assert eq0 <= 1500 < 1550 <= eq1 and ek0 <= 700 < 760 <= ek1
    # a middle zoom draws a finer stored level (tile maxima), never coarser than the overview
    with qtbot.waitSignal(
        window.longMode.zoomShown, timeout=TIMEOUT_MS, check_params_cb=lambda t: t.factor > 1
    ) as blocker:
        window.longMode.zoom_fit()
    tile = blocker.args[0]
    assert "max of a" in window.heatmapPanel.note.text()
    window.heatmapPanel.set_view_target("all")  # back to the grid: the overview and its own note
    assert window.longMode.zoom_tile() is None and "overview" in window.heatmapPanel.note.text()
    f = tile.factor
    block = full[1, tile.q0 : tile.q0 + f, tile.k0 : tile.k0 + f]
    assert tile.array[0, 0] == pytest.approx(float(block.max()), rel=1e-5)
    # the mean over heads zooms the same way (exact cells of the mean)
    window.heatmapPanel.set_view_target("mean")
    vb = window.heatmapPanel.cell_views()[0][1]
    with qtbot.waitSignal(
        window.longMode.zoomShown, timeout=TIMEOUT_MS, check_params_cb=lambda t: t.factor == 1 and t.head == "mean"
    ) as blocker:
        vb.setRange(xRange=(10, 50), yRange=(20, 45), padding=0)
    tile = blocker.args[0]
    rows, cols = tile.array.shape
    mean = full.mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(
        tile.array, mean[tile.q0 : tile.q0 + rows, tile.k0 : tile.k0 + cols], rtol=1e-4, atol=1e-8
    )


@pytest.mark.perf
def test_cancel_mid_run_keeps_the_previous_result(qtbot, window):
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS):
        window.state.set_config(memory_budget=16 * MiB)
    previous = window.displayed_result()
    with qtbot.waitSignal(window.compute.progressed, timeout=TIMEOUT_MS, check_params_cb=lambda f, m: "block" in m):
        window.state.text = document(3000)  # over the budget even as an overview: it waits for F5
        window.recomputeAction.trigger()
    assert window.longMode.current_plan().kind == "pyramid"
    start = time.perf_counter()
    with qtbot.waitSignal(window.compute.cancelled, timeout=TIMEOUT_MS):
        window.cancelAction.trigger()
    qtbot.waitUntil(lambda: not window.compute.runner.is_busy(), timeout=TIMEOUT_MS)
    stopped = time.perf_counter() - start
    assert stopped < 1.0, f"the worker took {stopped:.2f} s to stop"
    qtbot.wait(50)
    assert window.displayed_result() is previous
    assert window.status_text().startswith("cancelled") and "previous result" in window.status_text()
    assert not window.cancelButton.isVisible()


# -- export -----------------------------------------------------------------------------------
def test_export_of_a_pyramid_result_refuses_the_overview_as_weights(qtbot, window, tmp_path):
    shown = long_result(qtbot, window, 1500)
    result = shown.toy.result
    assert result.plan.kind == "pyramid"
    with pytest.raises(ExportError, match="only an overview"):
        perform_export(window.heatmapPanel.displayed_map(), 0, "npy", tmp_path / "w.npy")
    assert not (tmp_path / "w.npy").exists()
    dialog = window.open_export_dialog(0)
    dialog.set_format("csv")
    assert not dialog.exportButton.isEnabled() and "overview" in dialog.errorLabel.text()
    assert "overview" in dialog.areaCombo.currentText()
    dialog.set_format("png")  # an image of the overview is fine (and says it is one)
    assert dialog.exportButton.isEnabled()
    dialog.close()

    # zoomed in: the dialog offers the exact region, and writes exactly those cells
    full = run_attention(config_of(window).replace(memory_budget=None), window.state.text).weights
    window.heatmapPanel.set_view_target(0)
    vb = window.heatmapPanel.cell_views()[0][1]
    vb.setRange(xRange=(100, 140), yRange=(300, 330), padding=0)
    (q0, q1), (k0, k1) = region = window.longMode.export_region()
    dialog = window.open_export_dialog(0)
    assert dialog.region() == region
    dialog.set_format("npy")
    assert dialog.exportButton.isEnabled()
    dialog.set_path(tmp_path / "region.npy")
    written = dialog.export()
    assert written is not None
    np.testing.assert_allclose(np.load(written), full[0, q0:q1, k0:k1], rtol=1e-5, atol=1e-8)
    dialog.set_format("csv")
    dialog.set_path(tmp_path / "region.csv")
    lines = dialog.export().read_text(encoding="utf-8").splitlines()
    assert len(lines) == (q1 - q0) + 1
    dialog.set_format("png")
    dialog.set_path(tmp_path / "region.png")
    assert dialog.export().stat().st_size > 1000
    dialog.close()


# -- the budget setting -------------------------------------------------------------------------
def test_memory_budget_setting_reaches_the_config_and_the_session(qtbot, window):
    panel = window.parametersPanel
    assert window.state.config.memory_budget is None  # auto by default
    assert panel.memoryBudgetSpin.specialValueText().startswith("auto (")
    panel.memoryBudgetSpin.setValue(48)
    assert window.state.config.memory_budget == 48 * MiB
    saved = window.session()
    assert saved.config.memory_budget == 48 * MiB
    panel.memoryBudgetSpin.setValue(0)
    assert window.state.config.memory_budget is None
    window.state.assign(saved)
    assert panel.memoryBudgetSpin.value() == 48
    window.state.set_config(memory_budget=3 * MiB + 1)  # whole MiB, rounded up
    assert panel.memoryBudgetSpin.value() == 4
    assert window.state.config.memory_budget == 3 * MiB + 1  # shown rounded, never changed by the spin box


def test_f5_starts_a_held_long_run(qtbot, window):
    # QAction.triggered carries checked=False: it must not reach compute_now as explicit=False
    rng = random.Random(0)
    window.state.set_config(memory_budget=16 * MiB)
    window.tokensPanel.tokenInput.setPlainText(" ".join(rng.choice(WORDS) for _ in range(200_000)))
    qtbot.waitUntil(lambda: window.longMode.held_plan() is not None, timeout=TIMEOUT_MS)
    assert not window.compute.is_busy()
    with qtbot.waitSignal(window.compute.progressed, timeout=TIMEOUT_MS, check_params_cb=lambda f, m: "block" in m):
        window.recomputeAction.trigger()
    assert window.longMode.held_plan() is None
    window.compute.cancel()
    qtbot.waitUntil(lambda: not window.compute.runner.is_busy(), timeout=TIMEOUT_MS)


def test_a_long_runs_zoom_hatch_is_made_off_the_gui_thread(qtbot, monkeypatch):
    """Soak (seed 101, action 411): a zoomed tile's masked-cell hatch of a long causal run was made
    on the GUI thread when the tile arrived (240 ms). It comes with the tile from the side job."""
    made_in: list[bool] = []

    def traced(*args, **kwargs):
        made_in.append(threading.current_thread() is threading.main_thread())
        return hatch_rgba(*args, **kwargs)

    monkeypatch.setattr(long_mode, "hatch_rgba", traced)
    window = MainWindow(restore=False)
    window.resize(1300, 850)
    window.show()
    try:
        with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS):
            window.state.set_config(mask="causal")
        long_result(qtbot, window, 2000)
        with qtbot.waitSignal(window.longMode.zoomShown, timeout=TIMEOUT_MS) as blocker:
            window.heatmapPanel.set_view_target(1)
        tile = blocker.args[0]
        assert tile.masked is not None and tile.masked.any()
        assert made_in and not any(made_in), "the hatch was made on the GUI thread"
    finally:
        dispose(window)
