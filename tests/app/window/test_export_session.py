"""Export through the dialog's code path, and session save/load/restore."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtGui import QImage

from attndesk.app import MainWindow
from attndesk.session.file import SessionError, load_session, parse_session
from attndesk.session.state import AppState
from tests.conftest import TIMEOUT_MS


def new_window(qtbot, **kw) -> MainWindow:
    w = MainWindow(**kw)
    w.show()
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        pass
    return w


# -- export -------------------------------------------------------------------------------------
def export(window, target, fmt, path, size=None):
    dialog = window.open_export_dialog(target)
    try:
        dialog.set_format(fmt)
        dialog.set_path(path)
        if size:
            dialog.set_size(*size)
        return dialog, dialog.export()
    finally:
        dialog.close()


def test_export_png_has_the_asked_size(window, tmp_path):
    _dialog, written = export(window, "all", "png", tmp_path / "grid.png", size=(640, 480, 150))
    assert written == tmp_path / "grid.png"
    image = QImage(str(written))
    assert (image.width(), image.height()) == (640, 480)
    assert abs(image.dotsPerMeterX() - 150 / 0.0254) < 2
    assert window.status_text().startswith("exported")


def test_export_svg_keeps_token_labels_as_text(window, tmp_path):
    import xml.etree.ElementTree as ET

    _, written = export(window, 2, "svg", tmp_path / "head2.svg")
    root = ET.parse(written).getroot()
    texts = {"".join(el.itertext()).strip() for el in root.iter() if el.tag.endswith("text")}
    for token in window.displayed_result().map.queries:
        assert token in texts


def test_export_pdf_and_mean(window, tmp_path):
    _, written = export(window, "mean", "pdf", tmp_path / "mean.pdf")
    assert written.read_bytes().startswith(b"%PDF")


def test_export_npy_round_trips_and_csv_has_labels(window, tmp_path):
    result = window.displayed_result().map
    _, npy = export(window, 1, "npy", tmp_path / "h1.npy")
    np.testing.assert_array_equal(np.load(npy), result.weights[1])
    _, all_npy = export(window, "all", "npy", tmp_path / "all.npy")
    np.testing.assert_array_equal(np.load(all_npy), result.weights)
    _, written = export(window, "mean", "csv", tmp_path / "mean.csv")
    rows = list(csv.reader(written.open(encoding="utf-8")))
    assert rows[0][1:] == result.keys
    assert [r[0] for r in rows[1:]] == result.queries
    np.testing.assert_allclose(
        np.array([[float(v) for v in r[1:]] for r in rows[1:]]), result.weights.mean(axis=0), rtol=1e-6
    )


def test_default_file_name_carries_head_and_settings(window, tmp_path):
    dialog = window.open_export_dialog(3)
    try:
        dialog.set_format("png")
        name = dialog.pathEdit.text()
        assert name.endswith(".png") and "head3" in name and "h4" in name and "e64" in name
    finally:
        dialog.close()


def test_failed_export_says_why_and_leaves_no_file(window, tmp_path):
    target = tmp_path / "missing" / "x.png"
    dialog, written = export(window, "all", "png", target)
    assert written is None
    assert "does not exist" in dialog.errorLabel.text()
    assert not target.exists() and not target.parent.exists()
    assert "export failed" in window.status_text()
    # a CSV of all heads is refused before anything is written
    dialog, written = export(window, "all", "csv", tmp_path / "all.csv")
    assert written is None and "one matrix" in dialog.errorLabel.text()
    assert list(tmp_path.iterdir()) == []


# -- sessions -----------------------------------------------------------------------------------
def configure(w):
    w.tokensPanel.tokenInput.setPlainText("a b c d e")
    w.state.set_config(
        num_heads=8, mask="causal", scaled=False, seed=7, dropout=0.1, training=True, embed_dim=32, pad_to=9
    )
    w.heatmapPanel.set_colormap_name("magma")
    w.heatmapPanel.set_shared_scale(False)


def test_session_round_trip(qtbot, window, tmp_path):
    configure(window)
    saved = window.session()
    path = window.save_session_to(tmp_path / "s.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "attndesk-session" and data["config"]["num_heads"] == 8
    assert data["view"]["colormap"] == "magma" and data["mode"] == {"kind": "toy", "path": None}
    other = new_window(qtbot, restore=False)
    try:
        assert other.session() != saved
        with qtbot.waitSignal(other.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
            other.load_session_from(path)
        assert other.session() == saved
        assert (
            other.parametersPanel.headsSpin.value() == 8 and other.tokensPanel.tokenInput.toPlainText() == "a b c d e"
        )
        result = blocker.args[0].toy.result
        assert result.config.num_heads == 8 and result.config.mask == "causal" and result.tokens[-1] == "[PAD]"
        assert other.heatmapPanel.colormap_name() == "magma" and not other.heatmapPanel.shared_scale()
    finally:
        dispose(other)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00binary", "not a text"),
        (b'{"format": "something-else"}', "not an attndesk session"),
        (b'{"format": "attndesk-session", "version": 99, "text": "x", "config": {}}', "version 99"),
        (b'{"format": "attndesk-session", "version": 1, "text": "x", "config": {"num_heads": 6}}', "6 heads"),
        (b'{"format": "attndesk-session", "version": 1, "text": "x", "config": {"nonsense": 1}}', "nonsense"),
        (b'{"format": "attndesk-session", "version": 1, "text": 3, "config": {}}', "session field 'text'"),
        (b'{"format": "attndesk-session", "version": 2, "config": {"num_heads": 1000000000}}', "heads"),
        (b'{"format": "attndesk-session", "version": 2, "config": {"seed": 4294967296}}', "seed"),
        (b'{"format": "attndesk-session", "version": 2, "view": {"target": -2}}', "view.target"),
        (b'{"format": "attndesk-session", "version": 2, "pretrained": {"layer": 1e9}}', "pretrained.layer"),
        (b"[" * 50000 + b"]" * 50000, "nested too deeply"),
        (b'{"format": "attndesk-session", "version": 2, "config": {"seed": ' + b"7" * 5000 + b"}}", "digits"),
    ],
)
def test_corrupt_session_is_rejected_and_changes_nothing(window, tmp_path, content, reason):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    before = window.session()
    with pytest.raises(SessionError, match=reason) as caught:
        window.load_session_from(path)
    assert "\n" not in str(caught.value)  # one line
    assert window.session() == before


def test_last_session_and_layout_are_restored_on_launch(qtbot, tmp_path):
    first = new_window(qtbot)
    configure(first)
    first.timingDock.hide()
    saved = first.session()
    dispose(first)
    second = new_window(qtbot)
    try:
        assert second.session() == saved
        assert not second.timingDock.isVisible()
    finally:
        dispose(second)


def test_session_from_another_machine_falls_back_to_cpu():
    text = json.dumps({"format": "attndesk-session", "version": 1, "text": "hi", "config": {"device": "mps"}})
    from attndesk.system.devices import device_availability

    if device_availability()["mps"] is None:
        pytest.skip("this machine has MPS")
    session = parse_session(text)
    assert session.state.config.device == "cpu" and "not available" in session.notices[0]


def test_session_file_round_trip_without_window(tmp_path):
    from attndesk.core import AttentionConfig
    from attndesk.session.file import save_session

    state = AppState(text="x y", config=AttentionConfig(num_heads=2))
    state.view.target = 1
    save_session(state, tmp_path / "a.json")
    assert load_session(tmp_path / "a.json").state == state
    with pytest.raises(SessionError, match="fix the parameters"):
        save_session(AppState(text="x", config=AttentionConfig(num_heads=5)), tmp_path / "b.json")
    assert not (tmp_path / "b.json").exists()


def test_session_view_of_a_head_the_current_result_lacks(qtbot, window, tmp_path):
    from attndesk.core import AttentionConfig
    from attndesk.session.file import save_session

    assert window.displayed_result().map.num_heads == 4
    state = AppState(text="one two three", config=AttentionConfig(num_heads=8))
    state.view.target = 6
    path = save_session(state, tmp_path / "v.json")
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS):
        window.load_session_from(path)
    assert window.heatmapPanel.view_target() == 6
    assert window.heatmapPanel.displayed_heads() == [6]
    np.testing.assert_array_equal(window.heatmapPanel.displayed_arrays()[0], window.displayed_result().map.weights[6])


def test_keys_missing_from_a_session_take_the_defaults_not_the_windows(qtbot, window, tmp_path):
    configure(window)
    path = tmp_path / "short.json"
    path.write_text(json.dumps({"format": "attndesk-session", "version": 2, "text": "one two"}), encoding="utf-8")
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
        window.load_session_from(path)
    defaults = AppState(text="one two")
    assert window.session() == defaults
    assert blocker.args[0].toy.result.config.num_heads == defaults.config.num_heads == 4
    assert window.heatmapPanel.colormap_name() == "viridis" and window.parametersPanel.seedSpin.value() == 0


def test_version_1_sessions_still_load(window, tmp_path):
    # the mode as its display string, view settings at the top, positional as a bool
    old = {
        "format": "attndesk-session",
        "version": 1,
        "text": "a b c",
        "key_text": "x y",
        "cross": True,
        "mode": "Toy model",
        "colormap": "magma",
        "shared_scale": False,
        "view": "mean",
        "config": {"embed_dim": 32, "num_heads": 2, "positional": False, "mask": "none"},
    }
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    window.load_session_from(path)
    state = window.state
    assert (state.text, state.key_text, state.cross) == ("a b c", "x y", True)
    assert state.view.colormap == "magma" and not state.view.shared_scale and state.view.target == "mean"
    assert state.config.embed_dim == 32 and window.parametersPanel.positionCombo.currentData() == "none"
    assert window.tokensPanel.keyInput.toPlainText() == "x y" and window.tokensPanel.crossCheck.isChecked()


def test_a_failing_save_keeps_the_old_file_and_the_window(window, tmp_path, monkeypatch):
    import os

    path = tmp_path / "keep.json"
    window.save_session_to(path)
    before = path.read_bytes()
    window.state.set_config(seed=11)

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(SessionError, match="No space left") as caught:
        window.save_session_to(path)
    assert "\n" not in str(caught.value)
    assert path.read_bytes() == before  # the old session is intact
    assert [p.name for p in tmp_path.iterdir()] == ["keep.json"]  # no temporary file left


def test_the_windows_page_fills_model_and_settings_as_the_cli_page_does(window, tmp_path, capsys):
    from attndesk.cli import main
    from attndesk.render.page import read_page_data

    _, written = export(window, "all", "html", tmp_path / "window.html")
    settings = read_page_data(written)["settings"]
    config = window.state.config
    assert settings == config.to_dict() and settings["num_heads"] == config.num_heads
    flags = ["--heads", str(config.num_heads), "--embed-dim", str(config.embed_dim), "--mask", config.mask]
    assert (
        main(["render", "--text", window.state.text, *flags, "--format", "html", "--out", str(tmp_path / "cli")]) == 0
    )
    capsys.readouterr()
    (page,) = (tmp_path / "cli").glob("*.html")
    assert read_page_data(page)["settings"] == settings
