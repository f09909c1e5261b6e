"""The Corpus tab never holds the GUI thread: a store of 6 layers x 12 heads whose texts include
250,000-character lines, shown in narrow lists, while heads are selected, metrics switched, the
window resized and the tab left and shown again.

An application event filter takes the GUI thread's own CPU time (``time.thread_time()``) at the
start of every event: an event's cost is the time until the next one starts, as the soak counts
it. Before, a listed text was laid out whole (several hundred ms a paint in a narrow list) and
the grid built a ``pg.TextItem`` per head (50 ms per metric chosen).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pyqtgraph as pg
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build
from PySide6.QtCore import QObject, QPointF
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from attndesk.app.tabs.corpus import CorpusView
from attndesk.app.tabs.corpus.plots import AtlasPlot
from attndesk.app.tabs.corpus.presenter import CORPUS_TAB
from attndesk.app.tabs.corpus.view import LIST_CHARS
from attndesk.app.window.main_window import MainWindow
from attndesk.corpus.metrics import METRICS
from tests.app.tabs.corpus.test_corpus import TEXTS, corpus_file, run_pass
from tests.conftest import TIMEOUT_MS

LIMIT_S = 0.050  # the window's aim per event; the soak's criterion is 100 ms
TRIES = 3  # a loaded machine can inflate one try; a real stall fails every try
# whole files can be texts (a folder of .txt files): ~250,000 characters each
LONG = [" ".join(f"word{i % 97} the cat sat" for i in range(12_000 + 500 * k)) for k in range(3)]


class EventCpu(QObject):
    """The GUI thread's CPU time from each event's start to the next one's, the worst kept."""

    def __init__(self) -> None:
        super().__init__()
        self.worst, self._last = (0.0, ""), None

    def eventFilter(self, obj, event) -> bool:
        now = time.thread_time()
        if self._last is not None and now - self._last[0] > self.worst[0]:
            self.worst = (now - self._last[0], self._last[1])
        self._last = (now, f"{event.type().name} -> {type(obj).__name__}({obj.objectName()})")
        return False


def worst_event(qtbot, action, settle_ms: int = 400) -> tuple[float, str]:
    spy = EventCpu()
    app = QApplication.instance()
    app.installEventFilter(spy)
    try:
        action()
        qtbot.wait(settle_ms)
    finally:
        app.removeEventFilter(spy)
    return spy.worst


def assert_light(qtbot, label: str, action) -> None:
    tries = []
    for _ in range(TRIES):
        tries.append(worst_event(qtbot, action))
        if tries[-1][0] < LIMIT_S:
            return
    pytest.fail(f"{label}: " + ", ".join(f"{cpu * 1e3:.0f} ms in {name}" for cpu, name in tries))


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus-responsive") / "bert"
    return build("bert", folder, num_hidden_layers=6, num_attention_heads=12, hidden_size=48)


@pytest.fixture
def window(qtbot, bert):
    w = MainWindow(restore=False)
    w.resize(1000, 700)
    w.show()
    assert w.pretrained.open_folder(bert)
    w.state.view.tab = CORPUS_TAB
    yield w
    qtbot.waitUntil(lambda: not w.compute.any_job_running(), timeout=TIMEOUT_MS)
    dispose(w)


def shown(view, part: str, layer: int, head: int, metric: str):
    return lambda: (
        view.headLabel.text().startswith(f"<b>{part} L{layer} H{head}</b>")
        and (f"· {metric} " in view.headLabel.text())
    )


def test_long_texts_heads_and_metrics_stay_light(qtbot, window, tmp_path):
    tab, view = run_pass(qtbot, window, corpus_file(tmp_path, LONG + TEXTS), tmp_path / "store")
    qtbot.waitUntil(lambda: tab.store is not None and view.topList.count() > 0, timeout=TIMEOUT_MS)
    view.findChild(QObject, "corpusSplit").setSizes([760, 240])  # narrow lists: long texts wrap the most
    texts = [view.topList.item(i).text() for i in range(view.topList.count())]
    texts += [view.bottomList.item(i).text() for i in range(view.bottomList.count())]
    assert max(map(len, texts)) <= LIST_CHARS + 8  # "0.123  " + the cut text + "…"
    assert any(t.endswith("…") for t in texts)  # the long lines are listed, cut
    assert not [i for i in view.grid.getPlotItem().items if isinstance(i, pg.TextItem)]  # badges: one item
    assert view.grid.badges.texts().shape == (6, 12)
    scene = view.grid.getViewBox().mapViewToScene(QPointF(11.5, 5.5))
    QTest.mouseMove(view.grid.plot.viewport(), view.grid.plot.mapFromScene(scene))  # the hover names the cell's role
    qtbot.waitUntil(lambda: view.grid.badges.toolTip() == f"L5 H11: {view.pivot('role')[5, 11]}")

    def select(layer: int, head: int, metric: str):
        def action():
            view.metricCombo.setCurrentText(metric)
            tab.select_head("self", layer, head)
            qtbot.waitUntil(shown(view, "self", layer, head, metric), timeout=TIMEOUT_MS)

        return action

    heads = iter([(5, 11, "entropy"), (3, 7, "previous"), (1, 2, "distance"), (4, 9, "self"), (2, 3, "first")] * 3)
    assert_light(qtbot, "a head and a metric", lambda: select(*next(heads))())
    sizes = iter([(1200, 800), (1000, 700)] * 3)
    assert_light(qtbot, "resizing the window", lambda: window.resize(*next(sizes)))

    def away_and_back():
        window.state.view.tab = "heatmaps"
        qtbot.wait(200)
        window.state.view.tab = CORPUS_TAB

    assert_light(qtbot, "showing the tab again", away_and_back)


@pytest.mark.perf
def test_a_large_models_table_fills_a_few_rows_per_turn(qtbot):
    """A 32 x 32 model's 1,024 heads (12,000 table items): 260 ms in one call before."""
    view = CorpusView()
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    rng = np.random.default_rng(0)
    heads = pd.DataFrame(
        [
            {"part": "self", "layer": layer, "head": head, "role": "broad", **{m: rng.random() for m in METRICS}}
            for layer in range(32)
            for head in range(32)
        ]
    )

    def action():
        start = time.thread_time()
        view.show_store(heads, "32 x 32")
        return time.thread_time() - start

    tries = []
    for _ in range(TRIES):
        spent = []
        worst = worst_event(qtbot, lambda spent=spent: spent.append(action()), settle_ms=50)
        qtbot.waitUntil(view.table_filled, timeout=TIMEOUT_MS)
        tries.append(max(spent[0], worst[0]))
        if tries[-1] < LIMIT_S:
            break
    assert tries[-1] < LIMIT_S, f"{', '.join(f'{t * 1e3:.0f}' for t in tries)} ms"
    assert view.table.rowCount() == 1024
    assert sorted(view.table_column("entropy")) == sorted(heads["entropy"])


def test_the_atlas_keeps_its_points_and_zoom_for_the_same_head(qtbot):
    """Another metric re-sends the same head's atlas: its points are not rebuilt, the zoom stays."""
    atlas = AtlasPlot()
    qtbot.addWidget(atlas)
    rng = np.random.default_rng(1)
    x, y, is_query = rng.standard_normal(500), rng.standard_normal(500), rng.random(500) < 0.5
    atlas.set_points(x, y, is_query, lambda i: "")
    drawn = atlas.queries.data
    atlas.getViewBox().setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
    atlas.set_points(x.copy(), y.copy(), is_query.copy(), lambda i: "other")
    assert atlas.queries.data is drawn and atlas.getViewBox().viewRange()[0] == [0, 1]
    assert atlas._describe(0) == "other"
    atlas.set_points(x + 1, y, is_query, lambda i: "")  # another head: drawn again, fitted again
    assert atlas.queries.data is not drawn and atlas.getViewBox().viewRange()[0][1] > 1
    np.testing.assert_array_equal(atlas.queries.data["x"], x[is_query] + 1)
