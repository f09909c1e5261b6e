"""The Corpus tab drives the corpus pass in the window: a pass over ten texts with a tiny random BERT,
its grid, table, top texts and atlas read back from the store, opening a text in the heatmaps,
cancel and resume, bad input, and reopening a store from the File menu."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QFileDialog

from attndesk.app.jobs.channels import CORPUS, CORPUS_QUERY
from attndesk.app.modes.pretrained.mode import folder_mode
from attndesk.app.tabs.corpus.presenter import CORPUS_TAB, TOY_NOTE
from attndesk.app.window.main_window import MainWindow
from attndesk.corpus import open_corpus
from attndesk.session.state import HEATMAPS_TAB, TOY
from tests.conftest import TIMEOUT_MS

TEXTS = [
    "The cat sat on the mat.",
    "A dog ran in the park and the dog ran home.",
    "Attention weights sum to one.",
    "Heads look back at earlier tokens.",
    "one two three one two three",
    "The sun rose over the hills.",
    "Red green blue red green blue.",
    "Models read text as tokens.",
    "Short.",
    "A last line of text.",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus-tab")
    return {name: build(name, root / name) for name in ("bert", "gpt2")}


@pytest.fixture
def window(qtbot, folders):
    w = MainWindow(restore=False)
    w.resize(1300, 850)
    w.show()
    assert w.pretrained.open_folder(folders["bert"])
    w.state.view.tab = CORPUS_TAB
    yield w
    qtbot.waitUntil(lambda: not w.compute.any_job_running(), timeout=TIMEOUT_MS)
    dispose(w)


def corpus_file(tmp_path, lines=TEXTS, name="texts.txt"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_pass(qtbot, window, data, out, tokens=16):
    tab, view = window.tab_presenter(CORPUS_TAB), window.tab_widget(CORPUS_TAB)
    view.sourceEdit.setText(str(data))
    view.storeEdit.setText(str(out))
    view.tokensSpin.setValue(tokens)
    qtbot.mouseClick(view.startButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_running(), timeout=TIMEOUT_MS)
    return tab, view


def wait_head(qtbot, tab, view, layer, head):
    qtbot.waitUntil(
        lambda: view.headLabel.text().startswith(f"<b>self L{layer} H{head}</b>") and not window_busy(tab),
        timeout=TIMEOUT_MS,
    )


def window_busy(tab) -> bool:
    return tab.compute.side.is_busy(CORPUS_QUERY)


def click_cell(qtbot, grid, layer: int, head: int) -> None:
    scene = grid.getViewBox().mapViewToScene(QPointF(head + 0.5, layer + 0.5))
    qtbot.mouseClick(grid.plot.viewport(), Qt.MouseButton.LeftButton, pos=grid.plot.mapFromScene(scene))


def test_a_pass_fills_the_grid_table_texts_and_atlas_and_opens_a_text(qtbot, window, tmp_path, folders):
    tab, view = run_pass(qtbot, window, corpus_file(tmp_path), tmp_path / "store")
    assert view.errorLabel.text() == ""
    qtbot.waitUntil(lambda: tab.store is not None, timeout=TIMEOUT_MS)
    wait_head(qtbot, tab, view, 0, 0)
    store = open_corpus(tmp_path / "store")
    heads = store.heads
    for metric in ("entropy", "previous"):  # the grid is the metric pivoted [layers, heads]
        view.metricCombo.setCurrentText(metric)
        expected = heads.pivot(index="layer", columns="head", values=metric).to_numpy()
        np.testing.assert_array_equal(view.grid.values(), expected)
    assert view.grid.image.image.shape == (2, 4) and view.grid.badges.texts().shape == (2, 4)
    qtbot.waitUntil(view.table_filled, timeout=TIMEOUT_MS)  # a few rows per event-loop turn
    view.table.sortItems(view.table_column_index("entropy"), Qt.SortOrder.DescendingOrder)
    shown = view.table_column("entropy")
    assert shown == sorted(heads["entropy"], reverse=True)
    assert sorted(zip(view.table_column("layer"), view.table_column("head"))) == sorted(
        zip(heads["layer"], heads["head"])
    )
    click_cell(qtbot, view.grid, 1, 2)  # a real click on the grid's cell
    wait_head(qtbot, tab, view, 1, 2)
    top = store.top_texts(1, 2, "previous", 8)
    assert [view.topList.item(i).data(Qt.ItemDataRole.UserRole) for i in range(view.topList.count())] == list(
        top["text_id"]
    )
    # ranked by the share's excess over a uniform row's, both shown
    first = view.topList.item(0).text()
    assert first.startswith(f"{top['previous'].iloc[0]:.3f} ({top['excess'].iloc[0]:+.3f})  "), first
    bottom = store.top_texts(1, 2, "previous", 8, lowest=True)
    assert view.bottomList.count() == len(bottom)
    atlas = store.atlas(1, 2)
    assert view.atlas.count() == len(atlas) > 0
    assert len(view.atlas.queries.data) == int((atlas["kind"] == "query").sum())
    assert len(view.atlas.keys.data) == int((atlas["kind"] == "key").sum())
    assert view.atlas.queries.opts["brush"].color() != view.atlas.keys.opts["brush"].color()
    item = view.topList.item(0)
    view.topList.itemActivated.emit(item)
    qtbot.waitUntil(lambda: window.state.view.tab == HEATMAPS_TAB, timeout=TIMEOUT_MS)
    text = store.sql("SELECT text FROM texts WHERE text_id = ?", [int(top["text_id"].iloc[0])])["text"].iloc[0]
    assert window.state.text == text and window.state.pretrained.layer == 1 and window.state.view.target == 2
    assert window.viewTabs.currentWidget() is window.heatmapPanel
    window.state.mode = TOY  # from the toy model, a text opens with the store's model
    assert view.modelLabel.text() == TOY_NOTE and tab.pass_model() is None
    view.atlas.pointClicked.emit(0)
    qtbot.waitUntil(lambda: window.state.mode == folder_mode(folders["bert"]), timeout=TIMEOUT_MS)
    assert (
        window.state.text
        == store.sql("SELECT text FROM texts WHERE text_id = ?", [int(atlas["text_id"].iloc[0])])["text"].iloc[0]
    )
    store.close()


def test_cancel_stops_the_job_and_start_resumes_the_store(qtbot, window, tmp_path):
    tab, view = window.tab_presenter(CORPUS_TAB), window.tab_widget(CORPUS_TAB)
    view.sourceEdit.setText(str(corpus_file(tmp_path)))
    view.storeEdit.setText(str(tmp_path / "store"))
    view.tokensSpin.setValue(16)
    qtbot.mouseClick(view.startButton, Qt.MouseButton.LeftButton)
    assert tab.is_running() and view.cancelButton.isEnabled()
    qtbot.mouseClick(view.cancelButton, Qt.MouseButton.LeftButton)  # before its first batch
    qtbot.waitUntil(lambda: not tab.is_running(), timeout=TIMEOUT_MS)
    # no shard finished: nothing to resume from, and the line does not promise it
    assert view.startButton.text() == "Start" and "before the first shard finished" in view.progressLabel.text()
    assert "Resume" not in view.progressLabel.text()
    assert tab.store is None and (tmp_path / "store" / "manifest.json").exists()
    assert not tab.compute.side.is_busy(CORPUS)  # the job ended (its channel's thread is joined with the window)
    qtbot.mouseClick(view.startButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_running(), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: tab.store is not None, timeout=TIMEOUT_MS)
    assert view.startButton.text() == "Start" and view.errorLabel.text() == ""
    with open_corpus(tmp_path / "store") as store:
        assert len(store.texts) == len(TEXTS)


def test_bad_input_shows_one_line_and_keeps_the_store_on_screen(qtbot, window, tmp_path, folders):
    tab, view = run_pass(qtbot, window, corpus_file(tmp_path), tmp_path / "store")
    qtbot.waitUntil(lambda: tab.store is not None and view.table.rowCount() == 8, timeout=TIMEOUT_MS)
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "notext.csv").write_text("title,body\na,b\n", encoding="utf-8")
    other = tmp_path / "other"
    other.mkdir()
    (other / "image.png").write_bytes(b"\x89PNG")
    cases = [
        (tmp_path / "empty.txt", tmp_path / "s1", "text"),
        (tmp_path / "binary.txt", tmp_path / "s2", "UTF-8"),
        (tmp_path / "notext.csv", tmp_path / "s3", "text"),
        (other, tmp_path / "s4", ".txt"),
        (tmp_path / "texts.txt", tmp_path / "store", "another model"),
    ]
    window.state.mode = folder_mode(folders["gpt2"])  # the last case: the store is the BERT's
    for data, out, says in cases:
        run_pass(qtbot, window, data, out)
        message = view.errorLabel.text()
        assert message and "\n" not in message and "Traceback" not in message
        assert says.lower() in message.lower(), message
        assert view.table.rowCount() == 8 and tab.store is not None  # nothing lost
        assert view.sourceEdit.text() == str(data)
    window.state.mode = TOY


def test_file_menu_reopens_a_store(qtbot, window, tmp_path, monkeypatch):
    run_pass(qtbot, window, corpus_file(tmp_path), tmp_path / "store")
    other = window.tab_presenter(CORPUS_TAB)
    qtbot.waitUntil(lambda: other.store is not None, timeout=TIMEOUT_MS)
    window.state.view.tab = HEATMAPS_TAB
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: str(tmp_path / "nowhere")))
    action = next(a for a in window.menus.actions("file") if a.objectName() == "openCorpusStoreAction")
    action.trigger()
    view = window.tab_widget(CORPUS_TAB)
    qtbot.waitUntil(lambda: view.errorLabel.text().startswith("store not opened"), timeout=TIMEOUT_MS)
    assert window.state.view.tab == CORPUS_TAB
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: str(tmp_path / "store")))
    path_before = other.store
    action.trigger()
    qtbot.waitUntil(lambda: other.store is not path_before and view.errorLabel.text() == "", timeout=TIMEOUT_MS)
    assert str(other.store.path) == str(tmp_path / "store") and view.table.rowCount() == 8
    assert window.statusLabel.text().startswith("opened corpus store")
    window.state.view.tab = HEATMAPS_TAB  # the line describes the Corpus tab: it leaves with it
    qtbot.waitUntil(lambda: "corpus store" not in window.statusLabel.text(), timeout=TIMEOUT_MS)


def test_the_atlas_hover_finds_the_nearest_point_in_screen_pixels(qtbot):
    from attndesk.app.tabs.corpus import CorpusView

    view = CorpusView()
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, 1000), rng.normal(0, 100, 1000)  # unequal scales: nearness is in pixels, not data units
    view.set_atlas(
        x,
        y,
        np.arange(1000) % 2 == 0,
        np.arange(1000),
        np.zeros(1000, int),
        ["t"] * 1000,
        {i: f"text {i}" for i in range(1000)},
    )
    plot, box = view.atlas, view.atlas.getViewBox()
    assert len(plot.queries.data) == len(plot.keys.data) == 500
    for index in (0, 17, 999):
        scene = box.mapViewToScene(QPointF(x[index], y[index]))
        px = np.array(
            [[box.mapViewToScene(QPointF(a, b)).x(), box.mapViewToScene(QPointF(a, b)).y()] for a, b in zip(x, y)]
        )
        expected = int(np.argmin(((px - [scene.x(), scene.y()]) ** 2).sum(axis=1)))
        assert plot.nearest(scene) == expected
        plot._hover(scene)
        assert plot.label.isVisible() and f"text {expected}" in plot.label.textItem.toHtml()
        with qtbot.waitSignal(view.textOpened) as opened:
            plot._clicked(type("Click", (), {"scenePos": lambda self, s=scene: s})())
        assert opened.args == [expected]
    assert plot.nearest(box.mapViewToScene(QPointF(1e6, 1e6))) is None


def test_an_empty_store_box_uses_the_apps_own_folder_made_on_first_use(qtbot, window, tmp_path, monkeypatch):
    from PySide6.QtCore import QStandardPaths

    appdata = tmp_path / "appdata"  # does not exist yet: the corpus folder is made with its parents
    monkeypatch.setattr(QStandardPaths, "writableLocation", staticmethod(lambda _where: str(appdata)))
    tab, view = window.tab_presenter(CORPUS_TAB), window.tab_widget(CORPUS_TAB)
    view.sourceEdit.setText(str(corpus_file(tmp_path)))
    view.storeEdit.setText("")
    view.tokensSpin.setValue(16)
    qtbot.mouseClick(view.startButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.store is not None, timeout=TIMEOUT_MS)
    assert view.errorLabel.text() == "" and view.storeEdit.text().startswith(str(appdata / "corpus"))
    assert (appdata / "corpus").is_dir() and tab.store.path.parent == appdata / "corpus"


def test_the_plots_axes_read_plain_counts_and_the_atlas_is_whole(qtbot, window, tmp_path):
    view = window.tab_widget(CORPUS_TAB)
    plots = (view.grid, view.histogram, view.atlas)

    def labels() -> list[str]:
        return [plot.getPlotItem().getAxis(side).labelString() for plot in plots for side in ("left", "bottom")]

    assert not [text for text in labels() if "(x" in text]  # the empty plots: no SI prefix on a count
    tab, view = run_pass(qtbot, window, corpus_file(tmp_path), tmp_path / "store")
    wait_head(qtbot, tab, view, 0, 0)
    assert not [text for text in labels() if "(x" in text]
    atlas = view.atlas
    bottom = atlas.mapTo(view, atlas.rect().bottomLeft()).y()
    assert atlas.isVisible() and bottom <= view.height(), f"the atlas ends at {bottom}, the tab at {view.height()}"


def test_a_text_the_corpus_repeats_is_listed_once_with_its_count(qtbot, window, tmp_path):
    tab, view = run_pass(qtbot, window, corpus_file(tmp_path, [*TEXTS, TEXTS[0]]), tmp_path / "store")
    wait_head(qtbot, tab, view, 0, 0)
    lines = []
    for widget in (view.topList, view.bottomList):
        shown = [widget.item(i).text() for i in range(widget.count())]
        lines += [text for text in shown if TEXTS[0] in text]
        assert len(set(shown)) == len(shown), shown
    assert any(text.endswith("  x2") for text in lines), lines  # both copies are in one list: said once


def test_the_corpus_page_never_scrolls_sideways_at_1280_and_its_histogram_stays_readable(qtbot):
    from attndesk.app.tabs.corpus.view import HISTOGRAM_MIN_PX

    w = MainWindow(restore=False)
    try:
        w.resize(1280, 800)
        w.show()
        w.state.view.tab = CORPUS_TAB
        view, page = w.tab_widget(CORPUS_TAB), w.tab_page(CORPUS_TAB)
        long_store = "/tmp/attndesk-screens-data-zhhwafx8/attndesk/corpus/corpus_sample-all-MiniLM-L6-v2-64"
        view.progressLabel.setText(f"done: {long_store}")  # what a finished pass says, a long path
        view.storeLabel.setText("corpus_sample-all-MiniLM-L6-v2-64: all-MiniLM-L6-v2, 324 texts")
        view.headLabel.setText("self L0 H0 · broad · entropy 2.763")
        qtbot.waitUntil(lambda: view.width() > 0 and page.viewport().width() > 0, timeout=TIMEOUT_MS)
        qtbot.wait(50)
        assert view.width() <= page.viewport().width() and not page.horizontalScrollBar().isVisible()
        assert view.histogram.height() >= HISTOGRAM_MIN_PX
        qtbot.waitUntil(lambda: not w.compute.is_busy(), timeout=TIMEOUT_MS)
    finally:
        dispose(w)


def test_a_vision_model_runs_the_image_pass_and_opens_an_image_in_the_image_tab(qtbot, window, vision, tmp_path):
    from PIL import Image

    from attndesk.corpus.image_metrics import IMAGE_METRICS
    from attndesk.session.state import IMAGE_TAB

    _model, _eager, folder = vision("dinov2_with_registers")
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(2)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(images / f"p{i}.png")
    assert window.pretrained.open_folder(folder)
    window.state.view.tab = CORPUS_TAB
    view = window.tab_widget(CORPUS_TAB)
    assert window.empty_state(CORPUS_TAB) is None and view.isVisible()
    assert view.sourceLabel.text() == "Images" and not view.tokensSpin.isVisible()
    assert not view.sourceFileButton.isVisible() and "images" in view.modelLabel.text()
    # a folder without a readable image: one line, nothing written
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "photo.png").write_text("not a picture", encoding="utf-8")
    tab, view = run_pass(qtbot, window, fake, tmp_path / "never")
    assert "holds no readable image" in view.errorLabel.text() and "\n" not in view.errorLabel.text()
    assert not (tmp_path / "never").exists()
    tab, view = run_pass(qtbot, window, images, tmp_path / "store")
    assert view.errorLabel.text() == ""
    qtbot.waitUntil(lambda: tab.store is not None, timeout=TIMEOUT_MS)
    wait_head(qtbot, tab, view, 0, 0)
    assert [view.metricCombo.itemText(i) for i in range(view.metricCombo.count())] == list(IMAGE_METRICS)
    assert not view.atlas.isVisible() and "register/sink" in view.badgeLabel.text()
    with open_corpus(tmp_path / "store") as store:
        heads = store.heads
    for metric in ("sink_share", "spatial_distance"):
        view.metricCombo.setCurrentText(metric)
        expected = heads.pivot(index="layer", columns="head", values=metric).to_numpy()
        np.testing.assert_array_equal(view.grid.values(), expected)
    assert view.grid.badges.texts().shape == (2, 4)
    qtbot.waitUntil(lambda: view.topList.count() == 3, timeout=TIMEOUT_MS)
    item = view.topList.item(0)
    assert item.text().split("  ")[-1] in {"p0.png", "p1.png", "p2.png"}
    view.topList.itemActivated.emit(item)
    qtbot.waitUntil(lambda: window.state.view.tab == IMAGE_TAB, timeout=TIMEOUT_MS)
    assert window.state.pretrained.image == str(images / item.text().split("  ")[-1])
