"""Export through the dialog's code path, and session save/load/restore."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PySide6.QtGui import QImage

from attndesk.app import MainWindow
from attndesk.app.session import Session, SessionError, load_session, parse_session
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)

TIMEOUT_MS = 15000


def new_window(qtbot, **kw) -> MainWindow:
    w = MainWindow(**kw)
    w.show()
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        pass
    return w


@pytest.fixture
def window(qtbot):
    w = new_window(qtbot)
    yield w
    dispose(w)


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
    dialog, written = export(window, "all", "png", tmp_path / "grid.png", size=(640, 480, 150))
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
    for token in window.displayed_result().tokens:
        assert token in texts


def test_export_pdf_and_mean(window, tmp_path):
    _, written = export(window, "mean", "pdf", tmp_path / "mean.pdf")
    assert written.read_bytes().startswith(b"%PDF")


def test_export_npy_round_trips_and_csv_has_labels(window, tmp_path):
    result = window.displayed_result()
    _, npy = export(window, 1, "npy", tmp_path / "h1.npy")
    np.testing.assert_array_equal(np.load(npy), result.weights[1])
    _, all_npy = export(window, "all", "npy", tmp_path / "all.npy")
    np.testing.assert_array_equal(np.load(all_npy), result.weights)
    _, written = export(window, "mean", "csv", tmp_path / "mean.csv")
    rows = list(csv.reader(written.open(encoding="utf-8")))
    assert rows[0][1:] == result.keys
    assert [r[0] for r in rows[1:]] == result.tokens
    np.testing.assert_allclose(np.array([[float(v) for v in r[1:]] for r in rows[1:]]),
                               result.weights.mean(axis=0), rtol=1e-6)


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
    w.parametersPanel.set_values({"num_heads": 8, "mask": "causal", "scaled": False, "seed": 7,
                                  "dropout": 0.1, "training": True, "embed_dim": 32, "pad_to": 9})
    w.heatmapPanel.set_colormap_name("magma")
    w.heatmapPanel.set_shared_scale(False)


def test_session_round_trip(qtbot, window, tmp_path):
    configure(window)
    saved = window.current_session()
    path = window.save_session_to(tmp_path / "s.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "attndesk-session" and data["config"]["num_heads"] == 8
    other = new_window(qtbot, restore=False)
    try:
        assert other.current_session() != saved
        with qtbot.waitSignal(other.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
            other.load_session_from(path)
        assert other.current_session() == saved
        result = blocker.args[0]
        assert result.config.num_heads == 8 and result.config.mask == "causal" and result.tokens[-1] == "[PAD]"
        assert other.heatmapPanel.colormap_name() == "magma" and not other.heatmapPanel.shared_scale()
    finally:
        dispose(other)


@pytest.mark.parametrize("content, reason", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe\x00binary", "not a text"),
    (b'{"format": "something-else"}', "not an attndesk session"),
    (b'{"format": "attndesk-session", "version": 99, "text": "x", "config": {}}', "version 99"),
    (b'{"format": "attndesk-session", "version": 1, "text": "x", "config": {"num_heads": 6}}', "6 heads"),
    (b'{"format": "attndesk-session", "version": 1, "text": "x", "config": {"nonsense": 1}}', "nonsense"),
    (b'{"format": "attndesk-session", "version": 1, "text": 3, "config": {}}', "'text' should be a str"),
])
def test_corrupt_session_is_rejected_and_changes_nothing(window, tmp_path, content, reason):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    before = window.current_session()
    with pytest.raises(SessionError, match=reason):
        window.load_session_from(path)
    assert window.current_session() == before


def test_last_session_and_layout_are_restored_on_launch(qtbot, tmp_path):
    first = new_window(qtbot)
    configure(first)
    first.timingDock.hide()
    saved = first.current_session()
    dispose(first)
    second = new_window(qtbot)
    try:
        assert second.current_session() == saved
        assert not second.timingDock.isVisible()
    finally:
        dispose(second)


def test_session_from_another_machine_falls_back_to_cpu():
    text = json.dumps({"format": "attndesk-session", "version": 1, "text": "hi",
                       "config": {"device": "mps"}})
    from attndesk.core.devices import device_availability

    if device_availability()["mps"] is None:
        pytest.skip("this machine has MPS")
    session = parse_session(text)
    assert session.config["device"] == "cpu" and "not available" in session.notices[0]


def test_session_file_round_trip_without_window(tmp_path):
    from attndesk.app.session import save_session
    from attndesk.core import AttentionConfig

    session = Session(text="x y", config=AttentionConfig(num_heads=2).to_dict(), view=1)
    save_session(session, tmp_path / "a.json")
    assert load_session(tmp_path / "a.json") == session
    with pytest.raises(SessionError, match="fix the parameters"):
        save_session(Session(text="x", config={"num_heads": 5}), tmp_path / "b.json")
    assert not (tmp_path / "b.json").exists()


def test_session_view_of_a_head_the_current_result_lacks(qtbot, window, tmp_path):
    from attndesk.app.session import save_session
    from attndesk.core import AttentionConfig

    assert window.displayed_result().num_heads == 4
    path = save_session(Session(text="one two three", config=AttentionConfig(num_heads=8).to_dict(), view=6),
                        tmp_path / "v.json")
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS):
        window.load_session_from(path)
    assert window.heatmapPanel.view_target() == 6
    assert window.heatmapPanel.displayed_heads() == [6]
    np.testing.assert_array_equal(window.heatmapPanel.displayed_arrays()[0], window.displayed_result().weights[6])
