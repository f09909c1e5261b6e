"""The export dialog and perform_export take an AttentionMap: what the panel shows is what is written."""

from __future__ import annotations

import time

import numpy as np
import pytest
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QImage
from PySide6.QtTest import QTest

from attndesk.app.window.export_dialog import ExportDialog, perform_export, weights_for
from attndesk.attention.types import MEAN, AttentionMap
from attndesk.render.export import ExportError
from attndesk.runs import select


@pytest.fixture
def amap() -> AttentionMap:
    rng = np.random.default_rng(2)
    w = rng.random((4, 6, 6)).astype(np.float32)
    w /= w.sum(-1, keepdims=True)
    tokens = ["a", "b<", "c,", 'd"', "e", "f"]
    return AttentionMap(
        queries=tokens,
        keys=tokens,
        weights=w,
        title="Layer 1",
        summary="hand-made",
        file_tag="handmade_layer1",
        kv_heads=2,
    )


def test_numbers_of_every_target_and_region(amap, tmp_path):
    np.testing.assert_array_equal(np.load(perform_export(amap, "all", "npy", tmp_path / "all.npy")), amap.weights)
    mean = np.load(perform_export(amap, "mean", "npy", tmp_path / "mean.npy"))
    np.testing.assert_allclose(mean, amap.weights.mean(axis=0), rtol=1e-6)
    region = ((1, 4), (2, 6))
    np.testing.assert_array_equal(weights_for(amap, 3, region), amap.weights[3, 1:4, 2:6])
    csv = perform_export(amap, 1, "csv", tmp_path / "h1.csv", region=region).read_text().splitlines()
    assert csv[0] == 'query \\ key,"c,","d""",e,f' and csv[1].startswith("b<,")
    with pytest.raises(ExportError, match="one matrix"):
        perform_export(amap, "all", "csv", tmp_path / "all.csv")
    with pytest.raises(ExportError, match="does not end in"):
        perform_export(amap, 0, "npy", tmp_path / "x.csv")


def test_images_carry_groups_and_log_scale(amap, tmp_path):
    svg = perform_export(amap, "all", "svg", tmp_path / "all.svg", size=(1000, 700)).read_text()
    assert "kv 0: q 0\u20131" in svg and "kv 1: q 2\u20133" in svg and "hand-made" in svg
    png = perform_export(amap, MEAN, "png", tmp_path / "mean.png", size=(500, 400), log_scale=True)
    assert (QImage(str(png)).width(), QImage(str(png)).height()) == (500, 400)


def test_the_dialog_names_files_from_the_map_and_remembers_the_folder(qtbot, amap, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    dialog = ExportDialog(amap, target=2, settings=settings, log_scale=True)
    qtbot.addWidget(dialog)
    assert dialog.pathEdit.text().endswith("attn_head2_handmade_layer1.png")
    dialog.set_format("npy")
    dialog.set_path(tmp_path / "h2.npy")
    written = dialog.export()
    np.testing.assert_array_equal(np.load(written), amap.weights[2])
    assert settings.value("export/folder") == str(tmp_path)
    dialog.set_target("all")
    dialog.set_format("csv")
    assert not dialog.exportButton.isEnabled() and "one matrix" in dialog.errorLabel.text()


def test_an_overview_only_map_refuses_numbers_but_not_regions():
    from attndesk.core import AttentionConfig, run_attention

    text = " ".join(["the cat sat on the mat"] * 60)
    bounded = run_attention(AttentionConfig(embed_dim=16, num_heads=2, memory_budget=40_000), text).attention_map()
    assert bounded.pyramid is not None
    with pytest.raises(ExportError, match="only an overview"):
        weights_for(bounded, 0)
    full = run_attention(AttentionConfig(embed_dim=16, num_heads=2), text).weights
    np.testing.assert_allclose(weights_for(bounded, 1, ((10, 30), (0, 20))), full[1, 10:30, 0:20], atol=2e-6)
    assert select.heads_of(bounded, "all") == [0, 1]


def _cpu_of(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


@pytest.fixture
def big_map() -> AttentionMap:
    tokens = [f"t{i}" for i in range(48)]
    return AttentionMap(
        queries=tokens, keys=tokens, weights=_softmax_rows((4, 48, 48), 1), title="big", summary="", file_tag="big"
    )


def _softmax_rows(shape, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random(shape).astype(np.float32)
    return w / w.sum(-1, keepdims=True)


@pytest.mark.perf
def test_the_export_dialog_writes_in_the_background(qtbot, big_map, tmp_path):
    """Soak: Export in the dialog drew and encoded the image on the GUI thread (1.6 s for a tall
    PNG). Now the click returns at once, the dialog says it is exporting, and closes when written."""
    dialog = ExportDialog(big_map)
    qtbot.addWidget(dialog)
    dialog.set_format("png")
    dialog.set_size(3000, 3000)
    target = tmp_path / "all.png"
    dialog.set_path(target)
    dialog.show()
    with qtbot.waitSignal(dialog.exported, timeout=60_000) as written:
        cpu = _cpu_of(lambda: QTest.mouseClick(dialog.exportButton, Qt.MouseButton.LeftButton))
        assert not target.exists() and not dialog.exportButton.isEnabled()
        assert "exporting" in dialog.windowTitle()
    assert cpu < 0.1, f"the click held the GUI thread {cpu * 1e3:.0f} ms"
    assert written.args == [str(target)] and QImage(str(target)).width() == 3000
    assert not dialog.isVisible() and dialog.result() == dialog.DialogCode.Accepted


def test_a_failed_background_export_keeps_the_dialog_open(qtbot, big_map, tmp_path):
    dialog = ExportDialog(big_map)
    qtbot.addWidget(dialog)
    dialog.set_format("png")
    dialog.set_path(tmp_path / "no" / "such" / "folder" / "x.png")
    dialog.show()
    with qtbot.waitSignal(dialog.failedExport, timeout=60_000) as failed:
        QTest.mouseClick(dialog.exportButton, Qt.MouseButton.LeftButton)
    assert "folder" in failed.args[0] or "No such" in failed.args[0]
    assert dialog.isVisible() and dialog.exportButton.isEnabled() and dialog.errorLabel.text() == failed.args[0]


@pytest.mark.parametrize("target", ["all", "mean", 1])
def test_opening_the_dialog_reads_no_weight(qtbot, amap, monkeypatch, target):
    """The image size is suggested from the number of panels: opening the dialog on a long run
    must not stack (copy) every weight in the GUI thread."""
    from attndesk.render.figure import figure_from_map, suggested_size

    expected = suggested_size(figure_from_map(amap, target))
    read = []
    monkeypatch.setattr(select, "stack", lambda *a, **k: read.append("stack"))
    monkeypatch.setattr(select, "weights", lambda *a, **k: read.append("weights"))
    dialog = ExportDialog(amap, target=target)
    qtbot.addWidget(dialog)
    dialog.set_format("png")
    assert read == []
    assert (dialog.widthSpin.value(), dialog.heightSpin.value()) == expected
