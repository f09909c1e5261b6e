"""The Circuit tab in the real window (toy mode, the shipped induction preset): its edge table
and faithfulness curve are the core's, a slider move reads the cached curve (no job), a clicked
edge shows its exact effect, a clicked head decomposes a score as the core's score_terms does,
the graph exports as PNG and SVG, and Cancel leaves no job running."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QScrollArea

from attndesk.app.jobs.channels import CIRCUIT, KVLAB
from attndesk.app.tabs.circuit import presenter as circuit_tab
from attndesk.app.tabs.circuit.presenter import CIRCUIT_TAB, CircuitTab
from attndesk.app.tabs.circuit.view import GraphLayout
from attndesk.interp import composition_scores, edge_scores, faithfulness_curve, ov_copying_scores, score_terms
from attndesk.models import load_pretrained
from attndesk.train.presets import load_preset
from tests.conftest import TIMEOUT_MS

CLEAN, CORRUPT = [3, 7, 2, 9, 5, 3, 7, 2, 9], [3, 7, 2, 9, 6, 3, 7, 2, 9]


@pytest.fixture
def circuit_window(qtbot, monkeypatch):
    monkeypatch.setattr(circuit_tab, "LIVE_SIZES", 0)  # the curve's geometric sizes: a short job
    w = shown_window(qtbot, (1400, 900), TIMEOUT_MS)
    w.state.view.tab = CIRCUIT_TAB
    yield w
    dispose(w)


def _scored(qtbot, w, method: str = "exact", preset: str | None = "induction") -> CircuitTab:
    tab = w.tab_presenter(CIRCUIT_TAB)
    assert isinstance(tab, CircuitTab)
    view = tab.view
    assert view.preset.currentText() == (preset or "") and view.preset.isVisible() == bool(preset)
    view.methodBox.setCurrentText(method)
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.shown is not None and not tab.is_running(), timeout=TIMEOUT_MS)
    return tab


def test_the_tab_shows_the_cores_edges_and_curve_and_the_slider_reads_the_cache(qtbot, circuit_window):
    tab = _scored(qtbot, circuit_window)
    view, run = tab.view, load_preset("induction")
    table = edge_scores(run, CLEAN, CORRUPT, 5, 6, method="exact")
    np.testing.assert_allclose(view.shown.table["score"], table["score"], rtol=1e-9, atol=1e-9)
    sizes = view.shown.curve["size"].tolist()
    curve = faithfulness_curve(run, table, CLEAN, CORRUPT, 5, 6, sizes=sizes)
    np.testing.assert_allclose(view.shown.curve["faithfulness"], curve["faithfulness"], atol=1e-9)
    for step in (0, len(sizes) - 1, 2):
        view.slider.setValue(step)
        assert not circuit_window.compute.side.is_busy(CIRCUIT)  # a move computes nothing
        assert view.graph.keep == sizes[step]
        assert f"top {sizes[step]} of {len(table)} edges" in view.sizeLabel.text()
        assert f"{curve['faithfulness'].iat[step]:.3f}" in view.sizeLabel.text()


def test_the_job_prepares_its_question_once(monkeypatch):
    """The estimate, the exact table and the curve share one prepared question (one engine), and
    the numbers are those of the core's calls that prepare their own."""
    from attndesk.interp.graph import Engine
    from attndesk.jobs import JobContext

    built = []
    real = Engine.__init__
    monkeypatch.setattr(Engine, "__init__", lambda self, model: built.append(model) or real(self, model))
    monkeypatch.setattr(circuit_tab, "LIVE_SIZES", 0)  # the curve's geometric sizes: a short job
    args = (" ".join(map(str, CLEAN)), " ".join(map(str, CORRUPT)), "5", "6", "logit_diff", "eap", 1 << 30)
    shown = circuit_tab.circuit_job(("preset", "induction"), *args, ctx=JobContext())
    assert len(built) == 1
    run = load_preset("induction")
    for got, method in ((shown.table, "eap"), (shown.exact, "exact")):
        want = edge_scores(run, CLEAN, CORRUPT, 5, 6, method=method, memory_budget=1 << 30)
        np.testing.assert_array_equal(got["score"].to_numpy(), want["score"].to_numpy())


def test_a_clicked_edge_shows_its_exact_effect_beside_the_estimate(qtbot, circuit_window):
    tab = _scored(qtbot, circuit_window, "eap")
    view = tab.view
    view.slider.setValue(view.slider.maximum())
    layout = GraphLayout.of(view.shown.table, view.graph.keep, QRectF(view.graph.rect()))
    src, dst, kind, _ = layout.edges[0]
    start, end = layout.ends(src, dst, kind)
    middle = (start + end) / 2
    qtbot.mouseClick(view.graph, Qt.MouseButton.LeftButton, pos=QPoint(round(middle.x()), round(middle.y())))
    exact = view.shown.exact
    row = exact[(exact["src"] == src) & (exact["dst"] == dst) & (exact["kind"] == kind)]
    assert view.edgeLabel.text().startswith(f"{src} → {dst} ({kind}): exact effect {row['score'].iat[0]:+.4g}")
    assert "eap estimate" in view.edgeLabel.text()


def test_a_clicked_cell_of_a_clicked_head_decomposes_its_score_as_the_core_does(qtbot, circuit_window):
    tab = _scored(qtbot, circuit_window)
    view = tab.view
    layout = GraphLayout.of(view.shown.table, view.graph.keep, QRectF(view.graph.rect()))
    point = layout.points["L1.H2"]
    qtbot.mouseClick(view.graph, Qt.MouseButton.LeftButton, pos=QPoint(round(point.x()), round(point.y())))
    assert (view.layerSpin.value(), view.headSpin.value()) == (1, 2) and view.openHeat.isEnabled()
    qtbot.waitUntil(lambda: view.headMapHolder.shape is not None and not tab.side_busy(), timeout=TIMEOUT_MS)
    run = load_preset("induction")
    expected = run.attention(torch.tensor([CLEAN]))[0, 1, 2].numpy()
    np.testing.assert_allclose(view.headMapHolder.image.image, expected, atol=1e-6)
    k_comp = composition_scores(run, "K")[0, :, 1, 2]  # from each layer-0 head into L1.H2
    strongest = int(np.argmax(k_comp))
    assert f"K-composition strongest from L0.H{strongest} ({k_comp[strongest]:.2f})" in view.weightLabel.text()
    assert f"OV copying {ov_copying_scores(run)[1, 2]:+.2f}" in view.weightLabel.text()
    # a real click on cell (query 8, key 5) of the head's map
    circuit_window.tab_page(CIRCUIT_TAB).findChild(QScrollArea).ensureWidgetVisible(view.headMap)
    qtbot.wait(50)
    centre = view.headMap.getViewBox().mapViewToScene(QPointF(5.5, 8.5))
    pos = view.headMap.mapFromScene(centre)
    qtbot.mouseClick(view.headMap.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert (view.querySpin.value(), view.keySpin.value()) == (8, 5)
    qtbot.waitUntil(lambda: view.termsTable.rowCount() > 0 and not tab.side_busy(), timeout=TIMEOUT_MS)
    core = score_terms(run, CLEAN, 1, 2, 8, 5)
    assert f"score {core.score:+.6g}" in view.termsLabel.text()
    biggest = core.terms.loc[core.terms["term"].abs().idxmax()]
    assert view.termsTable.item(0, 0).text() == biggest["query_component"]
    assert view.termsTable.item(0, 3).text() == f"{biggest['term']:+.5g}"


def test_the_graph_exports_as_png_and_svg(qtbot, circuit_window, tmp_path):
    tab = _scored(qtbot, circuit_window)
    png = tab.export_to(str(tmp_path / "circuit.png"))
    image = QImage(str(png))
    assert not image.isNull() and image.width() >= 640
    svg = tab.export_to(str(tmp_path / "circuit.svg")).read_text()
    assert "<svg" in svg and "L1.H2" in svg


def test_cancel_leaves_no_job_running(qtbot, circuit_window):
    tab = circuit_window.tab_presenter(CIRCUIT_TAB)
    qtbot.mouseClick(tab.view.bar.runButton, Qt.MouseButton.LeftButton)
    assert tab.is_running()
    qtbot.mouseClick(tab.view.bar.cancelButton, Qt.MouseButton.LeftButton)
    assert not tab.is_running()
    qtbot.waitUntil(lambda: not circuit_window.compute.side.is_busy(CIRCUIT), timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    return build("gpt2", tmp_path_factory.mktemp("circuit") / "gpt2", seed=3)


def test_a_pretrained_decoders_head_opens_in_heatmaps(qtbot, monkeypatch, gpt2_folder):
    monkeypatch.setattr(circuit_tab, "LIVE_SIZES", 0)
    w = shown_window(qtbot, (1400, 900), TIMEOUT_MS)
    try:
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.layers is not None):
            assert w.pretrained.open_folder(gpt2_folder)
        w.state.view.tab = CIRCUIT_TAB
        tab = _scored(qtbot, w, preset=None)
        view = tab.view
        assert set(view.shown.table["dst"]) >= {"L1.H3", "logits"}
        layout = GraphLayout.of(view.shown.table, view.graph.keep, QRectF(view.graph.rect()))
        point = layout.points["L1.H3"]
        qtbot.mouseClick(view.graph, Qt.MouseButton.LeftButton, pos=QPoint(round(point.x()), round(point.y())))
        qtbot.waitUntil(lambda: view.headMapHolder.shape is not None and not tab.side_busy(), timeout=TIMEOUT_MS)
        k_comp = composition_scores(load_pretrained(gpt2_folder), "K")[0, :, 1, 3]
        strongest = int(np.argmax(k_comp))
        assert f"K-composition strongest from L0.H{strongest} ({k_comp[strongest]:.2f})" in view.weightLabel.text()
        qtbot.mouseClick(view.openHeat, Qt.MouseButton.LeftButton)
        assert w.state.view.tab == "heatmaps"
        assert (w.state.pretrained.layer, w.state.view.target) == (1, 3)
    finally:
        qtbot.waitUntil(lambda: not w.compute.is_busy(), timeout=TIMEOUT_MS)
        dispose(w)


def test_scoring_then_a_kv_run_then_another_model_leaves_nothing_busy(qtbot, monkeypatch, gpt2_folder):
    """Score edges, the KV cache tab's Run while it computes, then another model: every bar goes
    idle and every side job ends (the circuit's is cancelled by the switch, the KV run answers)."""
    monkeypatch.setattr(circuit_tab, "LIVE_SIZES", 0)
    w = shown_window(qtbot, (1400, 900), TIMEOUT_MS)
    try:
        w.state.view.tab = CIRCUIT_TAB
        circuit = w.tab_presenter(CIRCUIT_TAB)
        qtbot.mouseClick(circuit.view.bar.runButton, Qt.MouseButton.LeftButton)
        assert circuit.view.bar.is_busy()
        w.state.view.tab = "kvcache"
        kv = w.tab_widget("kvcache")
        kv.decodeSpin.setValue(2)
        qtbot.mouseClick(kv.bar.runButton, Qt.MouseButton.LeftButton)
        assert kv.bar.is_busy() and w.compute.side.is_busy(KVLAB)
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
            assert w.pretrained.open_folder(gpt2_folder)
        qtbot.waitUntil(lambda: not w.compute.side.any_busy() and not w.compute.is_busy(), timeout=TIMEOUT_MS)
        assert not circuit.view.bar.is_busy() and not circuit.is_running()
        assert not kv.bar.is_busy() and kv.sweepButton.isEnabled() and kv.result is not None
    finally:
        qtbot.waitUntil(lambda: not w.compute.any_job_running(), timeout=TIMEOUT_MS)
        dispose(w)


@pytest.mark.perf
def test_a_slider_move_takes_well_under_a_second(qtbot, circuit_window):
    import time

    tab = _scored(qtbot, circuit_window)
    view = tab.view
    worst = 0.0
    for step in range(view.slider.maximum() + 1):
        start = time.perf_counter()
        view.slider.setValue(step)
        view.graph.repaint()  # the move's whole cost: the cached row, the label and the graph drawn
        worst = max(worst, time.perf_counter() - start)
    assert worst < 0.2


def test_an_encoder_decoders_cross_attention_head_decomposes_with_its_part(qtbot, monkeypatch, tmp_path):
    monkeypatch.setattr(circuit_tab, "LIVE_SIZES", 0)
    folder = build("t5", tmp_path / "t5", seed=3)
    w = shown_window(qtbot, (1400, 900), TIMEOUT_MS)
    try:
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.layers is not None):
            assert w.pretrained.open_folder(folder)
        w.state.view.tab = CIRCUIT_TAB
        tab = _scored(qtbot, w, preset=None)
        view = tab.view
        layout = GraphLayout.of(view.shown.table, view.graph.keep, QRectF(view.graph.rect()))
        point = layout.points["cross.L1.H2"]
        qtbot.mouseClick(view.graph, Qt.MouseButton.LeftButton, pos=QPoint(round(point.x()), round(point.y())))
        assert view.part == "cross"
        qtbot.waitUntil(lambda: view.headMapHolder.shape is not None and not tab.side_busy(), timeout=TIMEOUT_MS)
        assert view.headMapHolder.shape[0] == 1  # the decoder's start token asks every source token
        assert "no weight-only views" in view.weightLabel.text()
        view.pick_cell(0, 3)
        qtbot.waitUntil(lambda: view.termsTable.rowCount() > 0 and not tab.side_busy(), timeout=TIMEOUT_MS)
        model = load_pretrained(folder)
        core = score_terms(model, view.cleanEdit.text(), 1, 2, 0, 3, part="cross")
        assert f"score {core.score:+.6g}" in view.termsLabel.text()
    finally:
        qtbot.waitUntil(lambda: not w.compute.is_busy(), timeout=TIMEOUT_MS)
        dispose(w)
