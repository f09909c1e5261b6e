"""The Image tab in the real window (offscreen) with a tiny random ViT and a DINOv2 with registers
(tests/pretrained_models.py): the image input replaces the text, the overlays are the run's
weights blended over the image, a click on a patch makes it the query, the maps across layers come
from a side job, and a bad image is one line that changes nothing."""

from __future__ import annotations

import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PIL import Image
from pretrained_models import build_vision
from PySide6.QtCore import Qt

from attndesk.app.jobs.channels import IMAGE_MAP
from attndesk.app.tabs.image import presenter as image_tab
from attndesk.interp import image_maps
from attndesk.models import VisionResult, clear_cache
from attndesk.models.images import SAMPLE, image_choice
from attndesk.models.loader import transformers_offline
from attndesk.render.overlays import blend
from attndesk.session.state import HEATMAPS_TAB, IMAGE_TAB, TOY
from tests.conftest import TIMEOUT_MS


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    transformers_offline()
    root = tmp_path_factory.mktemp("vision-window")
    built = {name: build_vision(name, root / name) for name in ("vit", "dinov2_with_registers")}
    yield built
    for folder in built.values():
        clear_cache(folder)


@pytest.fixture
def image_window(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    yield w
    dispose(w)


def open_vision(qtbot, w, folder) -> VisionResult:
    """Open a vision folder, wait for its run, bring the Image tab up and wait for its overlays and
    its sample list."""
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        assert w.pretrained.open_folder(folder)
    tab = w.tab_presenter(IMAGE_TAB)
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        w.state.view.tab = IMAGE_TAB
    qtbot.waitUntil(lambda: tab.listed, timeout=TIMEOUT_MS)
    run = w.displayed_result().layers
    assert isinstance(run, VisionResult)
    return run


def expected_overlay(
    run: VisionResult, layer: int, query: int, head: int | None, opacity: float = 0.6, top: float | None = None
):
    """The overlay from the weights themselves: the query's row over the patches, per head; one
    colour scale from 0 to the largest of the layer's heads (or ``top``)."""
    rows = run.weights[layer, :, query, run.specials :].reshape(-1, *run.grid).astype(np.float64)
    shown = rows.mean(axis=0) if head is None else rows[head]
    top = float(rows.max()) if top is None else top
    return blend(run.image, shown, colormap="viridis", vmin=0.0, vmax=top, opacity=opacity)


def test_a_vision_folder_reads_an_image_and_its_overlays_are_the_weights(qtbot, image_window, folders):
    w = image_window
    run = open_vision(qtbot, w, folders["vit"])
    assert (IMAGE_TAB, "Image") in w.shown_tabs()
    assert w.tokensPanel.textInputBox.isHidden() and not w.tokensPanel.imageNote.isHidden()
    name, _pixels = image_choice("")
    assert w.state.pretrained.image == "" and name == "shapes"
    assert (
        run.tokens[0] == "[CLS]"
        and run.tokens[1] == "(0,0)"
        and run.tokens[-1] == f"({run.grid[0] - 1},{run.grid[1] - 1})"
    )
    view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
    assert view.sampleCombo.currentText() == "shapes" and view.queryCombo.currentText() == "[CLS]"
    assert np.array_equal(view.canvas.pixels(), expected_overlay(run, 0, 0, None))
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        view.headCombo.setCurrentIndex(3)  # L0 H2
        view.headCombo.activated.emit(3)
    assert view.headCombo.currentText() == "L0 H2"
    assert np.array_equal(view.canvas.pixels(), expected_overlay(run, 0, 0, 2))
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        w.state.pretrained.layer = 1
    assert np.array_equal(view.canvas.pixels(), expected_overlay(run, 1, 0, 2))
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        view.opacitySlider.setValue(30)
    assert np.array_equal(view.canvas.pixels(), expected_overlay(run, 1, 0, 2, opacity=0.3))


def test_clicking_a_patch_makes_it_the_query(qtbot, image_window, folders):
    w = image_window
    run = open_vision(qtbot, w, folders["vit"])
    view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
    rows, cols = run.grid
    assert (rows, cols) == (4, 4)
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        qtbot.mouseClick(view.canvas, Qt.MouseButton.LeftButton, pos=view.canvas.patch_center(1, 2).toPoint())
    query = run.specials + 1 * cols + 2
    assert tab.query() == query and run.tokens[query] == "(1,2)"
    assert view.queryCombo.currentText() == "patch (1,2)"
    assert np.array_equal(view.canvas.pixels(), expected_overlay(run, 0, query, None))
    assert not np.array_equal(view.canvas.pixels(), expected_overlay(run, 0, 0, None))


def test_registers_are_named_and_chosen_as_queries(qtbot, image_window, folders):
    w = image_window
    run = open_vision(qtbot, w, folders["dinov2_with_registers"])
    assert run.tokens[:4] == ["[CLS]", "[REG0]", "[REG1]", "(0,0)"]
    view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
    labels = [view.queryCombo.itemText(i) for i in range(view.queryCombo.count())]
    assert labels == ["[CLS]", "[REG0]", "[REG1]", "mean of the patches"]
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        view.queryCombo.setCurrentIndex(2)
        view.queryCombo.activated.emit(2)
    assert tab.query() == 2
    assert np.array_equal(view.canvas.pixels(), expected_overlay(run, 0, 2, None))
    # the heatmaps label the same tokens
    assert list(w.displayed_result().queries.tokens[:4]) == ["[CLS]", "[REG0]", "[REG1]", "(0,0)"]


def test_a_sample_and_a_file_are_the_input_and_a_bad_image_changes_nothing(qtbot, image_window, folders, tmp_path):
    w = image_window
    open_vision(qtbot, w, folders["vit"])
    view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
    index = view.sampleCombo.findText("digit 3 (#3)")
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        view.sampleCombo.setCurrentIndex(index)
        view.sampleCombo.activated.emit(index)
    assert w.state.pretrained.image == SAMPLE + "digit 3 (#3)"
    picture = tmp_path / "noise.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 52, 3), dtype=np.uint8)).save(picture)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        tab.open_image(str(picture))
    assert w.state.pretrained.image == str(picture) and view.nameLabel.text().startswith("noise.png")
    before = w.displayed_result()
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a picture at all")
    wide = tmp_path / "wide.png"
    Image.new("RGB", (20000, 1)).save(wide)
    for path, said in ((broken, "broken.png cannot be read as an image"), (wide, "20,000 x 1 pixels")):
        tab.open_image(str(path))
        qtbot.waitUntil(lambda said=said: said in view.messageLabel.text(), timeout=TIMEOUT_MS)
        assert view.messageLabel.text().count("\n") == 0 and said in w.status_text()
        assert w.state.pretrained.image == str(picture) and w.displayed_result() is before


def test_a_text_model_given_an_image_says_so(qtbot, image_window, tmp_path):
    w = image_window
    assert w.state.mode == TOY
    picture = tmp_path / "cat.png"
    Image.new("RGB", (16, 16)).save(picture)
    text = w.state.text
    assert not w.longMode.open_text_file(picture)  # File > Open text, or a drop on the window
    said = "not opened: cat.png is an image, and the model on screen is a text model: it reads text"
    assert w.status_text() == said and w.status.error and w.tab_widget(IMAGE_TAB).messageLabel.text() == said
    assert w.state.text == text and w.state.pretrained.image == ""
    assert w.tokensPanel.imageNote.isHidden()


def test_maps_across_layers_come_from_a_side_job(qtbot, image_window, folders):
    w = image_window
    run = open_vision(qtbot, w, folders["vit"])
    view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
    view.mapCombo.setCurrentIndex(view.mapCombo.findData("rollout"))
    with qtbot.waitSignal(tab.mapDrawn, timeout=TIMEOUT_MS):
        view.computeButton.click()
    values = image_maps.rollout_map(run, query=0).astype(np.float64)
    low, high = values.min(), values.max()
    assert np.array_equal(view.mapCanvas.pixels(), blend(run.image, values, vmin=low, vmax=high, opacity=0.6))
    assert view.mapStatus.text().startswith("rollout")
    view.mapCombo.setCurrentIndex(view.mapCombo.findData("ig"))
    assert view.stepsSpin.isEnabled()
    view.stepsSpin.setValue(4)
    with qtbot.waitSignal(tab.mapDrawn, timeout=TIMEOUT_MS):
        view.computeButton.click()
        assert view.cancelButton.isEnabled() and not view.computeButton.isEnabled()
    assert "integrated gradients" in view.mapStatus.text() and "4 steps" in view.mapStatus.text()
    assert view.computeButton.isEnabled() and not view.cancelButton.isEnabled()


def test_a_new_run_while_a_map_computes_gives_the_map_controls_back(qtbot, monkeypatch, image_window, folders):
    """The map is for the run on screen: a new input drops it, and its Compute button comes back."""

    def endless_map(*_args, ctx):  # computes until it is cancelled (bounded: never outlives the test)
        for _ in range(TIMEOUT_MS // 10):
            ctx.progress(0.5, "mapping")
            ctx.check()
            time.sleep(0.01)

    monkeypatch.setattr(image_tab, "image_map", endless_map)
    w = image_window
    open_vision(qtbot, w, folders["vit"])
    view = w.tab_widget(IMAGE_TAB)
    view.computeButton.click()
    qtbot.waitUntil(lambda: view.mapProgress.value() > 0, timeout=TIMEOUT_MS)
    assert view.cancelButton.isEnabled() and not view.computeButton.isEnabled()
    index = view.sampleCombo.findText("digit 3 (#3)")
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        view.sampleCombo.setCurrentIndex(index)
        view.sampleCombo.activated.emit(index)
    qtbot.waitUntil(lambda: not w.compute.side.is_busy(IMAGE_MAP), timeout=TIMEOUT_MS)
    assert view.computeButton.isEnabled() and not view.cancelButton.isEnabled()
    assert view.mapProgress.value() == 0 and view.mapCanvas.pixels() is None


def test_a_vision_runs_bundle_and_page_hold_the_image_and_overlays(qtbot, image_window, folders, tmp_path, capsys):
    import io

    from attndesk.cli import main
    from attndesk.models.images import shipped_image
    from attndesk.render.page import read_page_data
    from attndesk.session.bundle import read_bundle

    w = image_window
    run = open_vision(qtbot, w, folders["vit"])
    path = tmp_path / "run.zip"
    assert w.save_bundle_to(path)
    qtbot.waitUntil(lambda: w.status_text().startswith("saved bundle"), timeout=TIMEOUT_MS)
    bundle = read_bundle(path)
    decoded = np.asarray(Image.open(io.BytesIO(bundle.inputs["image.png"])).convert("RGB"))
    assert np.array_equal(decoded, shipped_image("shapes").pixels) and bundle.manifest["run"]["image"] == "image.png"
    for layer in range(run.num_layers):
        np.testing.assert_array_equal(bundle.weights[f"weights/self_layer{layer}.npy"], run.weights[layer])
    names = {Path(name).name for name in bundle.figures}
    assert {"heads_layer0.png", "heads_layer1.png", "all_heads.png"} <= names
    page = next(name for name in bundle.figures if name.endswith(".html"))
    with zipfile.ZipFile(path) as archive:
        (tmp_path / "page.html").write_bytes(archive.read(page))
    assert read_page_data(tmp_path / "page.html")["image"]["grid"] == [4, 4]
    assert main(["reproduce", str(path)]) == 0, capsys.readouterr().err
    dialog = w.open_export_dialog("all")  # the window's html export: the image and the layer's overlays
    dialog.set_format("html")
    dialog.set_path(tmp_path / "layer.html")
    assert dialog.export() == tmp_path / "layer.html"
    doc = read_page_data(tmp_path / "layer.html")
    titles = [f["title"] for f in doc["image"]["figures"]]
    assert doc["image"]["grid"] == [4, 4] and titles[0].startswith("layer 0: each head from [CLS]")
    dialog.close()


def test_every_layer_and_a_cancelled_map(qtbot, image_window, folders):
    w = image_window
    run = open_vision(qtbot, w, folders["vit"])
    view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
    one_layer = view.heads_picture().height()
    with qtbot.waitSignal(tab.drawn, timeout=TIMEOUT_MS):
        view.allLayersCheck.setChecked(True)
    expected = run.weights[:, :, 0, run.specials :].reshape(run.num_layers, -1, *run.grid)
    np.testing.assert_array_equal(tab.pictures().maps, expected)
    assert view.heads_picture().height() > one_layer
    every = expected_overlay(run, 0, 0, None, top=float(expected.max()))  # one scale over every layer
    assert np.array_equal(view.canvas.pixels(), every)
    view.mapCombo.setCurrentIndex(view.mapCombo.findData("ig"))
    view.stepsSpin.setValue(1024)
    view.computeButton.click()
    qtbot.waitUntil(lambda: view.mapProgress.value() > 0, timeout=TIMEOUT_MS)
    view.cancelButton.click()
    assert view.mapStatus.text() == "cancelled" and view.computeButton.isEnabled()
    qtbot.waitUntil(lambda: not w.compute.side.is_busy(IMAGE_MAP), timeout=TIMEOUT_MS)
    assert view.mapCanvas.pixels() is None


@pytest.mark.parametrize("name", ["swin", "siglip_vision_model"])
def test_models_without_a_class_token_draw_the_mean_patch_and_swins_windows(qapp, vision, image, name):
    from attndesk.app.tabs.image.presenter import overlay_pictures
    from attndesk.models import run_pretrained

    model, _eager, _folder = vision(name)
    run = run_pretrained(model, image)
    assert image_maps.default_query(run) is None and run.specials == 0
    pictures = overlay_pictures(run, 1, None, None, 0.5, "magma", False)
    layer = run.layer_weights(1)  # [H, N, N]: Swin's windows scattered on the first stage's grid
    mean_patch = layer.mean(axis=1).reshape(-1, *run.grid).astype(np.float64)  # each head, the mean query
    regions = run.window_map(1) if name == "swin" else None
    expected = blend(
        run.image, mean_patch.mean(axis=0), colormap="magma", vmax=float(mean_patch.max()), opacity=0.5, regions=regions
    )
    assert np.array_equal(pictures.large, expected)
    if name == "swin":  # the partition's lines are white
        assert (pictures.large == 255).all(axis=-1).any()
    assert pictures.grid.width() > 0 and pictures.value_range == (0.0, float(mean_patch.max()))


@pytest.mark.perf  # GUI-thread CPU per heartbeat gap: make test-perf runs it
def test_the_image_tab_never_stalls_the_event_loop_at_vit_b_size(qtbot, image_window, tmp_path):
    """12 layers x 12 heads over 14 x 14 patches (ViT-B/16's grid): switching to the tab, a click on
    a patch and every head of every layer keep the GUI thread under 100 ms at a time."""
    from tests.app.tabs.test_responsive import LIMIT_S, worst_gap

    w = image_window
    folder = build_vision(
        "vit",
        tmp_path / "vit-b-grid",
        side=224,
        image_size=224,
        patch_size=16,
        hidden_size=48,
        num_hidden_layers=12,
        num_attention_heads=12,
    )
    try:
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
            assert w.pretrained.open_folder(folder)
        view, tab = w.tab_widget(IMAGE_TAB), w.tab_presenter(IMAGE_TAB)
        assert w.displayed_result().layers.weights.shape == (12, 12, 197, 197)
        gaps = {"switching to the tab": worst_gap(qtbot, lambda: setattr(w.state.view, "tab", IMAGE_TAB), tab.drawn)}
        at = view.canvas.patch_center(7, 7).toPoint()
        gaps["a click on a patch"] = worst_gap(
            qtbot, lambda: qtbot.mouseClick(view.canvas, Qt.MouseButton.LeftButton, pos=at), tab.drawn
        )
        gaps["every layer"] = worst_gap(qtbot, lambda: view.allLayersCheck.setChecked(True), tab.drawn)
        assert tab.pictures().maps.shape == (12, 12, 14, 14)
        assert max(gaps.values()) < LIMIT_S, gaps
    finally:
        clear_cache(folder)


def test_the_file_dialog_and_a_drop_open_an_image(qtbot, image_window, folders, tmp_path, monkeypatch):
    from PySide6.QtCore import QMimeData, QPoint, QPointF, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication

    from attndesk.app.tabs.image import presenter as image_tab

    w = image_window
    open_vision(qtbot, w, folders["vit"])
    view = w.tab_widget(IMAGE_TAB)
    first, second = tmp_path / "first.png", tmp_path / "second.jpg"
    Image.new("RGB", (30, 20), (200, 30, 30)).save(first)
    Image.new("RGB", (20, 30), (30, 30, 200)).save(second)
    monkeypatch.setattr(
        image_tab.QFileDialog, "getOpenFileName", staticmethod(lambda *_a: (str(first), image_tab.IMAGE_FILTER))
    )
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        view.openButton.click()
    assert w.state.pretrained.image == str(first)
    assert view.sampleCombo.currentText() == "(a file)" and view.nameLabel.text().startswith("first.png")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(second))])
    drop = QDropEvent(
        QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    enter = QDragEnterEvent(
        QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    assert QApplication.sendEvent(view, enter) and enter.isAccepted()  # the tab takes a file
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        QApplication.sendEvent(view, drop)
    assert w.state.pretrained.image == str(second)
    run = w.displayed_result().layers
    assert run.image.shape == (32, 32, 3) and (run.image[..., 2] > run.image[..., 0]).all()  # the blue one


def test_the_samples_are_listed_when_the_tab_is_first_shown_and_once(qtbot, folders, monkeypatch):
    """A window that never shows the Image tab never lists the samples (scikit-learn's digits); the
    first show lists them in a side job, not in the GUI thread (scikit-learn's import takes a
    second there)."""
    from attndesk.app.tabs.image import presenter as image_tab

    calls, threads = [], []
    real = image_tab.sample_images
    gui = threading.get_ident()

    def counting(**kwargs):
        calls.append(kwargs)
        threads.append(threading.get_ident() != gui)  # a side job's thread, not the GUI thread
        return real(**kwargs)

    monkeypatch.setattr(image_tab, "sample_images", counting)
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    try:
        assert calls == []
        open_vision(qtbot, w, folders["vit"])
        assert calls == [{}] and threads == [True]
        view = w.tab_widget(IMAGE_TAB)
        assert len(calls) == 1 and view.sampleCombo.findText("digit 3 (#3)") > 0
        w.state.view.tab = HEATMAPS_TAB
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
            w.state.pretrained.image = SAMPLE + "digit 3 (#3)"
        assert view.sampleCombo.currentText() == "shapes"  # hidden: the list waits for the tab
        w.state.view.tab = IMAGE_TAB
        assert len(calls) == 1 and view.sampleCombo.currentText() == "digit 3 (#3)"
    finally:
        dispose(w)
