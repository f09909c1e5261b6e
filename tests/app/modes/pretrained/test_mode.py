"""Pretrained mode in the real window (offscreen): the heatmaps are run_pretrained's weights, layer and
special-token changes re-slice without a job, the grid opens and ablates heads, bad folders change
nothing, sessions and exports carry the pretrained state."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog

from attndesk.app import MainWindow
from attndesk.models import load_pretrained, packaged_model_dir, run_pretrained
from attndesk.session.file import SessionError
from attndesk.session.state import PACKAGED, TOY
from tests.conftest import TIMEOUT_MS
from tests.heartbeat import Heartbeat

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def model():
    return load_pretrained()  # cached for the process: the windows' workers reuse it


@pytest.fixture(scope="module")
def reference(model):
    return run_pretrained(model, TEXT)


def is_pretrained(shown) -> bool:
    return shown.layers is not None


def wait_pretrained(qtbot, w, action, check=lambda r: True):
    with qtbot.waitSignal(
        w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: is_pretrained(r) and check(r)
    ) as blocker:
        action()
    return blocker.args[0]


def select_mode(w, mode) -> None:
    w.parametersPanel.modeCombo.setCurrentIndex(w.parametersPanel.mode_index(mode))


@pytest.fixture
def pretrained_window(qtbot, window, model):
    def switch():
        window.state.update({"text": TEXT, "cross": False})
        select_mode(window, PACKAGED)

    wait_pretrained(qtbot, window, switch)
    qtbot.waitUntil(lambda: not window.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    return window


def shown(w) -> np.ndarray:
    return np.stack(w.heatmapPanel.displayed_arrays())


def test_pretrained_mode_shows_the_models_weights(pretrained_window, reference):
    w = pretrained_window
    run = w.pretrained.run()
    assert run.tokens == reference.tokens and run.tokens[0] == "[CLS]" and run.tokens[-1] == "[SEP]"
    assert w.heatmapPanel.displayed_heads() == list(range(12))
    np.testing.assert_allclose(shown(w), reference.weights[0], atol=1e-6)
    np.testing.assert_allclose(w.displayed_result().map.weights, reference.weights[0], atol=1e-6)
    p = w.parametersPanel
    assert (p.embedDimSpin.value(), p.headsSpin.value(), p.hiddenDimSpin.value()) == (384, 12, 32)
    assert not p.embedDimSpin.isEnabled() and not p.headsSpin.isEnabled() and not p.seedSpin.isEnabled()
    assert p.scaleCheck.isEnabled() and p.maskCombo.isEnabled()
    info = p.modelInfo.text()
    assert "6 layers" in info and "12 heads" in info and "512 tokens" in info and "d_k 32" in info
    assert w.pretrained.controls.isVisible() and w.pretrained.controls.layer_spin.maximum() == 5
    stages = w.timingPanel.stage_milliseconds()
    assert [f"layer {n}" for n in range(6)] == [s for s in stages if s.startswith("layer")]
    assert "all-MiniLM-L6-v2 layer 0 of 6" in w.status_text()
    # back to the toy model: the toy settings return, unlocked, and the pretrained controls go away
    assert w.state.config.embed_dim == 64  # the state keeps the toy settings; the panel shows the model's
    select_mode(w, TOY)
    assert p.embedDimSpin.isEnabled() and p.embedDimSpin.value() == 64 and p.headsSpin.value() == 4
    assert not w.pretrained.controls.isVisible()
    assert not w.viewTabs.isTabVisible(w.viewTabs.indexOf(w.pretrained.gridTab))


def test_layer_change_reslices_without_a_job(pretrained_window, reference, qtbot):
    w = pretrained_window
    started = []
    w.compute.runner.started.connect(started.append)
    run_id = w.compute.current_ids()[0]
    history = len(w.timingPanel.history_milliseconds())
    result = wait_pretrained(qtbot, w, lambda: w.pretrained.controls.layer_spin.setValue(4), lambda r: r.layer == 4)
    assert w.state.pretrained.layer == 4 and not result.new_run
    np.testing.assert_allclose(result.map.weights, reference.weights[4], atol=1e-6)
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    np.testing.assert_allclose(shown(w), reference.weights[4], atol=1e-6)
    assert w.heatmapPanel.source().head_title(3) == "L4 H3"
    qtbot.wait(300)  # longer than the debounce: a recompute would have started by now
    assert started == [] and w.compute.current_ids()[0] == run_id and not w.compute.runner.is_busy()
    assert len(w.timingPanel.history_milliseconds()) == history  # a re-slice is not a new run


def test_hide_special_drops_rows_without_renormalising(pretrained_window, reference, qtbot):
    w = pretrained_window
    result = wait_pretrained(
        qtbot, w, lambda: w.pretrained.controls.hide_special_check.setChecked(True), lambda r: r.present_key[1]
    )
    expected = reference.weights[0][:, 1:-1, 1:-1]  # [CLS] first, [SEP] last
    assert "[CLS]" not in result.map.queries and "[SEP]" not in result.map.queries
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    np.testing.assert_allclose(shown(w), expected, atol=1e-6)
    sums = shown(w).sum(-1)
    # rows lack exactly the hidden tokens' share (not spread over the rest)
    hidden = reference.weights[0][:, 1:-1][..., [0, -1]].sum(-1)  # [H, L']
    np.testing.assert_allclose(sums, 1.0 - hidden, atol=1e-5)
    assert sums.mean() < 0.9
    assert "NOT re-normalised" in w.heatmapPanel.note.text()
    assert result.length == len(reference.tokens) - 2
    qtbot.waitUntil(
        lambda: (
            w.pretrained.grid.painting() is not None
            and "rows not re-normalised" in w.pretrained.grid.painting().caption
        ),
        timeout=TIMEOUT_MS,
    )


def test_grid_opens_a_head_and_ablation_recomputes(pretrained_window, reference, model, qtbot):
    w = pretrained_window
    w.pretrained.controls.all_layers_check.setChecked(True)
    assert w.viewTabs.currentWidget() is w.pretrained.gridTab
    grid = w.pretrained.grid
    qtbot.waitUntil(lambda: grid.isVisible() and grid.width() > 300 and grid.painting() is not None, timeout=TIMEOUT_MS)
    painting = grid.painting()
    assert (painting.num_layers, painting.num_heads) == (6, 12)
    centre = grid.cell_rect(2, 5).center().toPoint()
    result = wait_pretrained(
        qtbot, w, lambda: qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=centre), lambda r: r.layer == 2
    )
    assert w.viewTabs.currentWidget() is w.heatmapPanel and not w.pretrained.controls.all_layers()
    assert w.pretrained.controls.layer() == 2 and w.heatmapPanel.view_target() == 5
    qtbot.waitUntil(lambda: w.heatmapPanel.displayed_heads() == [5], timeout=5000)
    np.testing.assert_allclose(shown(w)[0], reference.weights[2, 5], atol=1e-6)
    np.testing.assert_allclose(result.map.weights, reference.weights[2], atol=1e-6)

    # Ctrl+click ablates layer 1 head 3: a new run, later layers change, the cosine is shown
    w.pretrained.show_grid(True)
    centre = grid.cell_rect(1, 3).center().toPoint()
    wait_pretrained(
        qtbot,
        w,
        lambda: qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, pos=centre),
        lambda r: r.map.file_tag.endswith("_abl1"),
    )
    run = w.pretrained.run()
    assert run.ablate == ((1, 3),)
    expected = run_pretrained(model, TEXT, ablate=[(1, 3)])
    np.testing.assert_allclose(run.weights, expected.weights, atol=1e-6)
    np.testing.assert_allclose(run.weights[:2], reference.weights[:2], atol=1e-6)  # before and at the ablated layer
    assert not np.allclose(run.weights[2], reference.weights[2], atol=1e-4)  # later layers see the change
    assert 0 < run.cosine_to_normal < 0.99999
    assert f"cosine to the normal embedding {run.cosine_to_normal:.4f}" in w.pretrained.summary.text()
    assert f"cosine to the normal embedding {run.cosine_to_normal:.4f}" in w.status_text()
    assert (1, 3) in grid.painting().ablated and w.pretrained.controls.clear_button.isEnabled()
    wait_pretrained(qtbot, w, w.pretrained.controls.clear_button.click, lambda r: "_abl" not in r.map.file_tag)
    assert w.pretrained.run().cosine_to_normal is None and not grid.painting().ablated


def test_scale_and_causal_toggles_still_act(pretrained_window, model, qtbot):
    w = pretrained_window
    wait_pretrained(
        qtbot,
        w,
        lambda: w.parametersPanel.maskCombo.setCurrentIndex(w.parametersPanel.maskCombo.findData("causal")),
        lambda r: "_causal" in r.map.file_tag,
    )
    run = w.pretrained.run()
    np.testing.assert_allclose(run.weights, run_pretrained(model, TEXT, causal=True).weights, atol=1e-6)
    assert np.all(np.triu(run.weights, k=1) == 0) and run.cosine_to_normal < 1
    wait_pretrained(
        qtbot, w, lambda: w.parametersPanel.scaleCheck.setChecked(False), lambda r: "_unscaled" in r.map.file_tag
    )
    expected = run_pretrained(model, TEXT, causal=True, scaled=False)
    np.testing.assert_allclose(w.pretrained.run().weights, expected.weights, atol=1e-6)


def test_bad_folders_show_a_message_and_change_nothing(pretrained_window, tmp_path):
    w = pretrained_window
    combo = w.parametersPanel.modeCombo
    count, mode, result = combo.count(), w.state.mode, w.displayed_result()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not w.pretrained.open_folder(empty)
    assert "config.json" in w.status_text() and "missing" in w.status_text()
    assert w.statusLabel.styleSheet()  # shown as an error
    falcon = tmp_path / "falcon"  # computes its attention outside transformers' interface: refused
    falcon.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (falcon / name).write_bytes(b"{}")
    (falcon / "config.json").write_text(json.dumps({"model_type": "falcon", "architectures": ["FalconForCausalLM"]}))
    assert not w.pretrained.open_folder(falcon)
    assert "unsupported architecture" in w.status_text()
    assert not w.pretrained.open_folder(tmp_path / "nowhere")
    assert combo.count() == count and w.state.mode == mode and w.displayed_result() is result
    assert not w.compute.is_busy()


def test_an_opened_folder_becomes_a_mode(pretrained_window, tmp_path, qtbot, reference):
    w = pretrained_window
    folder = tmp_path / "my-minilm"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        os.symlink(packaged_model_dir() / name, folder / name)
    result = wait_pretrained(
        qtbot, w, lambda: w.pretrained.open_folder(folder), lambda r: r.layers.model_name == "my-minilm"
    )
    mode = w.state.mode
    assert mode.kind == "pretrained" and mode.path == str(folder.resolve())
    assert w.parametersPanel.modeCombo.currentText() == "Pretrained: my-minilm"
    np.testing.assert_allclose(result.map.weights, reference.weights[0], atol=1e-6)
    assert w.pretrained.add_folder(packaged_model_dir()) == PACKAGED  # the packaged folder is not listed twice


def test_session_round_trip_of_the_pretrained_state(pretrained_window, qtbot, tmp_path):
    w = pretrained_window
    w.pretrained.controls.layer_spin.setValue(3)
    w.pretrained.controls.hide_special_check.setChecked(True)
    wait_pretrained(
        qtbot, w, lambda: w.pretrained.set_ablation([(0, 1), (4, 11)]), lambda r: r.map.file_tag.endswith("_abl2")
    )
    path = w.save_session_to(tmp_path / "pre.json")
    data = json.loads(path.read_text())
    assert data["mode"] == {"kind": "pretrained", "path": None}
    assert data["pretrained"] == {
        "layer": 3,
        "hide_special": True,
        "ablate": [[0, 1], [4, 11]],
        "grid_scale": "per-head",
        "part": "self",
        "image": "",
    }
    assert data["config"]["embed_dim"] == 64 and data["config"]["num_heads"] == 4  # the toy settings survive

    other = MainWindow(restore=False)
    try:
        result = wait_pretrained(
            qtbot,
            other,
            lambda: other.load_session_from(path),
            lambda r: r.layer == 3 and r.map.file_tag.endswith("_abl2"),
        )
        assert other.state.mode == PACKAGED
        assert other.pretrained.controls.hide_special() and result.present_key == (3, True, "self")
        assert other.pretrained.ablation() == [(0, 1), (4, 11)]
        assert other.parametersPanel.embedDimSpin.value() == 384
        np.testing.assert_allclose(result.map.weights, w.displayed_result().map.weights, atol=1e-6)
        select_mode(other, TOY)
        assert other.parametersPanel.embedDimSpin.value() == 64
    finally:
        dispose(other)

    # an old (toy, no "pretrained" field) session still loads, and switches the window back
    old = tmp_path / "old.json"
    old.write_text(
        json.dumps(
            {"format": "attndesk-session", "version": 1, "text": "a b c", "config": {"embed_dim": 32, "num_heads": 2}}
        )
    )
    w.load_session_from(old)
    assert w.state.mode == TOY and w.parametersPanel.embedDimSpin.value() == 32
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "mode": {"kind": "pretrained", "path": str(tmp_path / "gone")}}))
    with pytest.raises(SessionError, match="model folder"):
        w.load_session_from(bad)
    assert w.state.mode == TOY and w.parametersPanel.embedDimSpin.value() == 32


def test_export_of_a_pretrained_head_grid_and_all_layers(pretrained_window, reference, tmp_path):
    from PySide6.QtGui import QImage

    from attndesk.app.window.export_dialog import perform_export
    from attndesk.render.export import default_filename

    w = pretrained_window
    result = w.heatmapPanel.displayed_map()
    name = default_filename(result, 3, "svg")
    assert name == "attn_head3_all-MiniLM-L6-v2_layer0.svg"
    svg = perform_export(result, 3, "svg", tmp_path / name).read_text()
    assert "all-MiniLM-L6-v2" in svg and "layer 0 of 6" in svg and "seed" not in svg
    assert ">cat<" in svg
    npy = perform_export(result, 3, "npy", tmp_path / "h3.npy")
    np.testing.assert_allclose(np.load(npy), reference.weights[0, 3], atol=1e-6)
    dialog = w.open_export_dialog(3)
    assert dialog.pathEdit.text().endswith("attn_head3_all-MiniLM-L6-v2_layer0.png")
    dialog.close()
    grid = w.pretrained.export_grid(tmp_path / "grid.png", size=(900, 480))
    image = QImage(str(grid))
    assert (image.width(), image.height()) == (900, 480)
    everything = w.pretrained.export_all(tmp_path / "all.npy")
    np.testing.assert_allclose(np.load(everything), reference.weights, atol=1e-6)
    assert w.pretrained.default_name("npy") == "attn_all-MiniLM-L6-v2_all-layers.npy"


def test_long_text_truncation_notice(pretrained_window, qtbot):
    w = pretrained_window
    text = " ".join(["word"] * 600)
    wait_pretrained(qtbot, w, lambda: setattr(w.state, "text", text), lambda r: r.length == 512)
    assert "so 90 were dropped" in w.status_text()
    assert "so 90 were dropped" in w.pretrained.summary.text()


@pytest.mark.perf
def test_first_load_runs_in_the_worker_with_progress(window, qtbot):
    """After forgetting the cached model, switching to it loads in the worker: the event loop keeps
    ticking (loading + the warm-up pass take > 1 s on this machine; in the GUI thread that would
    be one long gap) and the status bar reports the loading."""
    import time

    from attndesk.models import clear_cache, is_loaded

    w = window
    clear_cache()
    assert not is_loaded()
    messages = []
    w.compute.progressed.connect(lambda _f, message: messages.append(message))
    with Heartbeat(clock=time.thread_time) as beat:
        start = time.perf_counter()
        wait_pretrained(qtbot, w, lambda: (setattr(w.state, "text", TEXT), select_mode(w, PACKAGED)))
        elapsed = time.perf_counter() - start
    assert is_loaded() and any(m.startswith("loading model") for m in messages)
    assert len(beat.beats) > 20 and beat.worst < min(0.6, 0.5 * elapsed), (beat.worst, elapsed)


def test_a_model_folder_deleted_during_the_session(pretrained_window, tmp_path, qtbot, reference):
    import shutil

    from attndesk.models import clear_cache

    w = pretrained_window
    folder = tmp_path / "gone-soon"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(packaged_model_dir() / name, folder / name)
    wait_pretrained(qtbot, w, lambda: w.pretrained.open_folder(folder), lambda r: r.layers.model_name == "gone-soon")
    before = w.displayed_result()
    clear_cache(folder)  # as after a restart of the worker's cache: the next run must read the folder again
    shutil.rmtree(folder)
    with qtbot.waitSignal(w.compute.failed, timeout=TIMEOUT_MS):
        w.state.text = "The dog sat on the mat."
    status = w.status_text()
    assert status.startswith("error:") and "\n" not in status and "previous result" in status
    assert w.displayed_result() is before
    wait_pretrained(qtbot, w, lambda: select_mode(w, PACKAGED), lambda r: r.layers.model_name == "all-MiniLM-L6-v2")


def test_pretrained_file_menu_exports_are_written_off_the_gui_thread(qtbot, tmp_path, monkeypatch):
    """Soak: File > Export… > All layers' weights of the pretrained mode wrote 72 heads on the GUI
    thread (0.4-0.7 s, 676 ms once); now the menu's exports are written in a pool thread."""
    from attndesk.app.modes.pretrained import exports as exports_module
    from attndesk.session.state import PACKAGED

    w = MainWindow(restore=False)
    w.resize(1300, 850)
    w.show()
    try:
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.layers is not None):
            w.state.mode = PACKAGED
        threads = []
        real = exports_module.export_all_weights

        def recording(*args, **kwargs):
            threads.append(threading.current_thread() is threading.main_thread())
            return real(*args, **kwargs)

        monkeypatch.setattr(exports_module, "export_all_weights", recording)
        target = tmp_path / "all.npy"
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(target), "")))
        w.pretrained.exports.export_all_dialog()
        qtbot.waitUntil(lambda: not w.pretrained.exporting(), timeout=TIMEOUT_MS)
        assert threads == [False], "the weights were written on the GUI thread"
        np.testing.assert_array_equal(np.load(target), w.pretrained.run().weights)
        assert f"exported {target}" in w.status_text()
        grid = tmp_path / "grid.png"
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(grid), "")))
        w.pretrained.exports.export_grid_dialog()
        qtbot.waitUntil(lambda: not w.pretrained.exporting(), timeout=TIMEOUT_MS)
        assert not QImage(str(grid)).isNull()
    finally:
        dispose(w)


def test_the_page_of_a_pretrained_head_grid_names_the_model(pretrained_window, tmp_path):
    from attndesk.models import packaged_model_dir
    from attndesk.render.page import read_page_data

    dialog = pretrained_window.open_export_dialog("all")
    try:
        dialog.set_format("html")
        dialog.set_path(tmp_path / "layer.html")
        written = dialog.export()
    finally:
        dialog.close()
    settings = read_page_data(written)["settings"]
    assert (settings["model"], settings["layers"], settings["heads"]) == ("all-MiniLM-L6-v2", 6, 12)
    assert settings["folder"] == str(packaged_model_dir().resolve()) and settings["forced causal mask"] is False
