"""File > Save bundle…: asks for a .zip path, writes the result on screen and its session in a
pool thread (``bundle_save.save_bundle``), and the status line says where it went or why not."""

from __future__ import annotations

import numpy as np
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)

from attndesk.app.window import main_window
from attndesk.runs.pipeline import run_attention
from attndesk.session.bundle import read_bundle
from tests.conftest import TIMEOUT_MS


def answer_save_dialog(monkeypatch, path) -> list[str]:
    asked = []

    def get_save_file_name(parent, title, name, filters):
        asked.append(filters)
        return (str(path) if path is not None else "", "")

    monkeypatch.setattr(main_window.QFileDialog, "getSaveFileName", staticmethod(get_save_file_name))
    return asked


def wait_status(qtbot, window, start: str) -> str:
    qtbot.waitUntil(lambda: window.status_text().startswith(start), timeout=TIMEOUT_MS)
    return window.status_text()


def test_save_bundle_writes_the_result_on_screen_and_its_session(qtbot, window, monkeypatch, tmp_path):
    assert window.saveBundleAction in window.menus.actions("file")
    asked = answer_save_dialog(monkeypatch, tmp_path / "run")  # no suffix given: .zip is added
    window.saveBundleAction.trigger()
    said = wait_status(qtbot, window, "saved bundle")
    path = tmp_path / "run.zip"
    assert asked == ["attndesk bundles (*.zip)"] and str(path) in said and not window.status.error
    bundle = read_bundle(path)
    expected = run_attention(window.state.config, window.state.text).weights
    np.testing.assert_array_equal(bundle.weights["weights/attention.npy"], expected)
    assert bundle.session["text"] == window.state.text and bundle.texts["text"] == window.state.text
    assert any(name.endswith(".png") for name in bundle.figures)


def test_save_bundle_says_why_not_and_writes_nothing(qtbot, window, monkeypatch, tmp_path):
    answer_save_dialog(monkeypatch, None)  # cancelled: nothing happens
    before = window.status_text()
    window.saveBundleAction.trigger()
    assert window.status_text() == before and list(tmp_path.iterdir()) == []
    answer_save_dialog(monkeypatch, tmp_path / "missing" / "run.zip")  # a folder that does not exist
    window.saveBundleAction.trigger()
    said = wait_status(qtbot, window, "bundle run.zip not saved")
    assert window.status.error and "\n" not in said and list(tmp_path.iterdir()) == []


def test_a_bundle_of_trained_weights_holds_the_probe_input_and_reproduces(qtbot, window, monkeypatch, tmp_path, capsys):
    from attndesk.app.modes.toy import preset_run
    from attndesk.cli import main
    from attndesk.train.stages import trained_result

    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS):
        window.state.set_config(weights_from="induction")
    answer_save_dialog(monkeypatch, tmp_path / "induction.zip")
    window.saveBundleAction.trigger()
    wait_status(qtbot, window, "saved bundle")
    assert not window.status.error
    bundle = read_bundle(tmp_path / "induction.zip")
    expected = trained_result(preset_run("induction"), "induction")
    np.testing.assert_array_equal(bundle.weights["weights/attention.npy"], expected.weights)
    assert bundle.texts == {"text": " ".join(expected.tokens)} and window.state.text not in bundle.texts.values()
    assert bundle.session["config"]["weights_from"] == "induction"
    assert main(["reproduce", str(tmp_path / "induction.zip")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines()[-1] == "largest difference from the bundled weights: 0"
