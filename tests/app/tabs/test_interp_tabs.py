"""The interpretability tabs in the real window (offscreen) on tiny random GPT-2 / BERT checkpoints:
Patching shows the core's patch_heads array and refuses a multi-token answer without computing,
Attribution's colours are the core's integrated gradients / gradient x input, the Logit lens grid
writes the core's top tokens, the attention flow sits beside the rollout, Cancel leaves no job
running, and an encoder-only model says why the tabs are off."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build, build_bare
from PySide6.QtCore import QPoint, QPointF, QRect, Qt
from PySide6.QtGui import QFont, QFontMetricsF
from PySide6.QtWidgets import QScrollArea

from attndesk.app.jobs import channels
from attndesk.app.tabs.attribution.presenter import ATTRIBUTION_TAB, AttributionTab
from attndesk.app.tabs.attribution.view import score_colors
from attndesk.app.tabs.logit_lens.presenter import LOGIT_LENS_TAB, LogitLensTab
from attndesk.app.tabs.logit_lens.view import cell_label, wrapped
from attndesk.app.tabs.patching.presenter import PATCHING_TAB, PatchingTab
from attndesk.interp import (
    activation_patching,
    attention_flow,
    gradient_x_input,
    integrated_gradients,
    logit_lens,
    patch_heads,
    step_attributions,
)
from attndesk.models import load_pretrained, run_pretrained
from tests.app.tabs.test_responsive import assert_smooth, worst_gap
from tests.conftest import TIMEOUT_MS

TEXT = "the cat sat on the mat"
CLEAN, CORRUPT = (
    "when mary and john went to the store john gave it to",
    "when mary and john went to the store mary gave it to",
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build("gpt2", tmp_path_factory.mktemp("interp") / "gpt2", seed=3)


@pytest.fixture(scope="module")
def model(folder):
    return load_pretrained(folder)


def open_window(qtbot, folder, tab: str):
    w = shown_window(qtbot, (1400, 900), TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.layers is not None):
        w.state.text = TEXT
        assert w.pretrained.open_folder(folder)
    w.state.view.tab = tab
    return w


@pytest.fixture
def gpt2_window(qtbot, folder, model):
    w = open_window(qtbot, folder, PATCHING_TAB)
    yield w
    dispose(w)


def presenter(w, tab_id: str, kind):
    found = w.tab_presenter(tab_id)
    assert isinstance(found, kind)
    return found


def test_patching_shows_patch_heads(qtbot, gpt2_window, model):
    w = gpt2_window
    tab = presenter(w, PATCHING_TAB, PatchingTab)
    view = tab.view
    view.set_inputs(CLEAN, CORRUPT, "mary", "john")
    assert view.answer.is_ok() and view.wrong.is_ok() and not view.promptProblem.isVisible()
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    assert tab.is_running()
    qtbot.waitUntil(lambda: not tab.is_running(), timeout=TIMEOUT_MS)
    expected = patch_heads(model, CLEAN, CORRUPT, "mary", "john")
    np.testing.assert_allclose(view.shown.heads, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(view.headsPlot.matrix, expected, rtol=1e-5, atol=1e-6)
    assert view.positionsPlot.matrix.shape == (model.layers["self"], len(view.shown.clean_tokens))
    assert view.partCombo.isHidden() and list(view.shown.parts) == ["self"]  # a decoder has one part
    view.open_head(0, 0)
    click_cell(qtbot, view.headsPlot, 1, 2)  # a head's attention on both prompts, side by side
    assert view.head == (1, 2) and view.headsPlot.highlighted()["cell"] == (1, 2)
    np.testing.assert_allclose(view.cleanAttention.matrix, run_pretrained(model, CLEAN).weights[1, 2], atol=1e-6)
    np.testing.assert_allclose(view.corruptAttention.matrix, run_pretrained(model, CORRUPT).weights[1, 2], atol=1e-6)
    # the raw effect m_patched - m_corrupt beside the normalised one, where a person hovers a head
    report = activation_patching(model, CLEAN, CORRUPT, "mary", "john", sites=("head",))
    view.headsPlot.cellHovered.emit(1, 2)
    raw = float(report.results["head"].raw_effects[1, 2])
    assert f"effect {report.effects('head')[1, 2]:+.4f} (raw {raw:+.4g}" in view.readout.text()
    assert view.shown.warning == report.warning and view.gapWarning.isVisible() == (report.warning is not None)


def test_a_clicked_heads_attention_is_brought_into_view_with_its_masked_cells_hatched(qtbot, gpt2_window, model):
    w = gpt2_window
    w.resize(1280, 800)  # the page scrolls: the attention plots start below the fold
    view = presenter(w, PATCHING_TAB, PatchingTab).view
    view.set_inputs(CLEAN, CORRUPT, "mary", "john")
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.shown is not None and not view.bar.is_busy(), timeout=TIMEOUT_MS)
    scroll = view.parentWidget()
    while not isinstance(scroll, QScrollArea):
        scroll = scroll.parentWidget()
    scroll.verticalScrollBar().setValue(0)
    qtbot.waitUntil(lambda: not visible_part(view.cleanAttention.graphics, scroll.viewport()).isValid())
    click_cell(qtbot, view.headsPlot, 1, 2)
    for plot in (view.cleanAttention, view.corruptAttention):
        seen = visible_part(plot.graphics, scroll.viewport())
        assert seen.height() >= 100 and seen.width() >= 100, (seen, plot.objectName())
        causal = np.triu(np.ones(plot.matrix.shape, dtype=bool), k=1)  # GPT-2: a query never sees a later key
        np.testing.assert_array_equal(plot.masked, causal)
        assert plot.overlay.isVisible() and "hatched = masked" in plot.title.text()
    weights = run_pretrained(model, CLEAN).weights[1, 2]
    np.testing.assert_allclose(view.cleanAttention.matrix, weights, atol=1e-6)


def visible_part(widget, viewport) -> QRect:
    """The part of ``widget`` a scroll area's ``viewport`` shows, in the viewport's coordinates."""
    return QRect(widget.mapTo(viewport, QPoint(0, 0)), widget.size()).intersected(viewport.rect())


def test_patching_offers_every_core_metric_and_kl_is_the_cores(qtbot, gpt2_window, model):
    from attndesk.interp.inputs import METRICS as CORE_METRICS

    view = presenter(gpt2_window, PATCHING_TAB, PatchingTab).view
    assert [view.metricCombo.itemData(i) for i in range(view.metricCombo.count())] == list(CORE_METRICS)
    view.set_inputs(CLEAN, CORRUPT, "mary", "john")
    view.metricCombo.setCurrentIndex(view.metricCombo.findData("kl"))
    assert not view.wrong.isEnabled()  # KL reads the whole next-token distribution, not a wrong token
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.shown is not None and view.shown.metric == "kl", timeout=TIMEOUT_MS)
    expected = patch_heads(model, CLEAN, CORRUPT, "mary", "john", metric="kl")
    np.testing.assert_allclose(view.shown.heads, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(view.headsPlot.matrix, expected, rtol=1e-5, atol=1e-6)
    assert view.shown.clean_metric == pytest.approx(0.0, abs=1e-6) and view.shown.corrupt_metric > 0
    assert "KL(clean ‖ run)" in view.summary.text()
    # the tiny random model's KL gap is a few 1e-5 nats: the tab says the normalised effects mean little
    report = activation_patching(model, CLEAN, CORRUPT, "mary", metric="kl", sites=("head",))
    gap = abs(report.clean_metric - report.corrupt_metric)
    assert report.warning is not None and view.shown.warning == report.warning
    assert view.gapWarning.isVisible() and f"{gap:.3g}" in view.gapWarning.text() and "raw" in view.gapWarning.text()
    view.set_shown(None)
    assert not view.gapWarning.isVisible()


def click_cell(qtbot, plot, row: int, col: int) -> None:
    """A real mouse click on cell (row, col) of a MatrixPlot."""
    scene = plot.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
    point = plot.graphics.mapFromScene(scene)
    qtbot.mouseClick(plot.graphics.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_an_encoder_decoders_patching_shows_its_three_parts(qtbot, tmp_path):
    folder = build("bart", tmp_path / "bart", seed=3)
    w = open_window(qtbot, folder, PATCHING_TAB)
    try:
        model = load_pretrained(folder)
        tab = presenter(w, PATCHING_TAB, PatchingTab)
        view = tab.view
        view.set_inputs(CLEAN, CORRUPT, "mary", "john")
        qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: view.shown is not None and not tab.is_running(), timeout=TIMEOUT_MS)
        assert view.partCombo.isVisibleTo(view) and view.partCombo.count() == 3
        runs = [run_pretrained(model, text) for text in (CLEAN, CORRUPT)]  # the decoder: its start token
        for part in ("self", "decoder", "cross"):
            view.partCombo.setCurrentIndex(view.partCombo.findData(part))
            report = activation_patching(model, CLEAN, CORRUPT, "mary", "john", part=part)
            assert view.part == part
            np.testing.assert_allclose(view.headsPlot.matrix, report.effects("head"), rtol=1e-5, atol=1e-6)
            click_cell(qtbot, view.headsPlot, 1, 3)
            assert view.head == (1, 3)
            for plot, run in zip((view.cleanAttention, view.corruptAttention), runs, strict=True):
                np.testing.assert_allclose(plot.matrix, run.part_weights(part)[1, 3], atol=1e-6)
            if part != "self":  # rows: the decoder's tokens; cross-attention's columns: the source's
                assert view.cleanAttention.row_labels == report.positions
        shape = (len(report.positions), len(report.clean_tokens))  # the last part drawn: cross, target x source
        assert view.cleanAttention.col_labels == report.clean_tokens and view.cleanAttention.matrix.shape == shape
        assert shape[0] != shape[1]
    finally:
        dispose(w)


def test_patching_refuses_bad_input_and_computes_nothing(qtbot, gpt2_window):
    w = gpt2_window
    tab = presenter(w, PATCHING_TAB, PatchingTab)
    view = tab.view
    view.set_inputs(CLEAN, CORRUPT, "xylophonists", "john")
    assert not view.answer.is_ok() and "tokens" in view.answer.check.text()
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    assert not tab.is_running() and not w.compute.side.is_busy(channels.PATCHING) and view.shown is None
    view.set_inputs(CLEAN, CORRUPT + " too", "mary", "id:99999")
    assert "outside the model's vocabulary" in view.wrong.check.text()
    assert view.promptProblem.isVisible() and "equal token length" in view.promptProblem.text()
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    assert not tab.is_running() and view.shown is None


def test_attribution_colours_are_the_cores_scores(qtbot, gpt2_window, model):
    w = gpt2_window
    w.state.view.tab = ATTRIBUTION_TAB
    tab = presenter(w, ATTRIBUTION_TAB, AttributionTab)
    view = tab.view
    view.stepsSpin.setValue(16)
    view.target.set_text("mat")
    qtbot.waitUntil(
        lambda: view.attribution is not None and view.attribution.steps == 16 and not tab.is_running(),
        timeout=TIMEOUT_MS,
    )
    expected = integrated_gradients(model, TEXT, "mat", steps=16)
    np.testing.assert_allclose(view.strip.scores, expected, rtol=1e-5, atol=1e-7)
    colours, bound = score_colors(expected)
    assert bound == pytest.approx(np.abs(expected).max())
    assert [c.name() for c in view.strip.colors] == [c.name() for c in colours]
    top = int(np.argmax(expected))  # the most positive token is the reddest chip
    assert view.strip.colors[top].red() > view.strip.colors[top].blue()
    view.set_method("gxi")
    qtbot.waitUntil(lambda: view.attribution.method == "gradient_x_input" and not tab.is_running(), timeout=TIMEOUT_MS)
    np.testing.assert_allclose(view.strip.scores, gradient_x_input(model, TEXT, "mat"), rtol=1e-5, atol=1e-7)
    view.target.set_text("xylophonists")  # several tokens: the field says so, nothing runs
    assert not view.target.is_ok() and "tokens" in view.target.check.text() and not tab.is_running()
    assert view.attribution.method == "gradient_x_input"


def test_attribution_draws_every_step_under_the_strip_as_the_core_computes_it(qtbot, gpt2_window, model):
    w = gpt2_window
    w.resize(1280, 800)
    w.state.view.tab = ATTRIBUTION_TAB
    tab = presenter(w, ATTRIBUTION_TAB, AttributionTab)
    view = tab.view
    view.set_method("gxi")
    view.target.set_text("mat")
    qtbot.waitUntil(
        lambda: view.by_step is not None and view.attribution.target == "mat" and not tab.is_running(),
        timeout=TIMEOUT_MS,
    )
    expected = step_attributions(model, TEXT, "mat")
    np.testing.assert_allclose(view.stepsPlot.matrix, expected.scores.T, rtol=1e-5, atol=1e-7)  # sources x steps
    assert view.stepsPlot.row_labels == view.strip.tokens  # each step's target with its probability (step score)
    assert view.stepsPlot.col_labels == [
        f"{t} {'<1' if p < 0.005 else round(100 * p)}%" for t, p in zip(expected.targets, expected.probabilities)
    ]
    assert expected.targets[-1] == "mat"
    # on screen below the strip, tall and wide enough that every source's and step's label is drawn
    qtbot.waitUntil(view.stepsPlot.isVisible, timeout=TIMEOUT_MS)
    steps = view.stepsPlot.geometry()
    assert view.readout.geometry().bottom() < steps.top() and steps.bottom() <= view.height()
    assert not view.headsPlot.isVisible()
    rows = len(expected.sources)
    vb = view.stepsPlot.plot.vb
    assert view.stepsPlot.left.visible_ticks(0, rows, vb.height()) == list(range(rows))
    assert view.stepsPlot.bottom.visible_ticks(0, rows, vb.width()) == list(range(rows))
    view._hover_step(1, 3)
    assert view.readout.text().startswith(f"1: {expected.sources[1]!r} → {expected.targets[3]!r}")
    view.set_method("attn")  # attention x gradient: its heads plot instead
    qtbot.waitUntil(
        lambda: view.attribution.method == "attention_x_gradient" and not tab.is_running(), timeout=TIMEOUT_MS
    )
    assert view.by_step is None and not view.stepsPlot.isVisible() and view.headsPlot.isVisible()


def test_logit_lens_grid_writes_the_cores_top_tokens(qtbot, gpt2_window, model):
    w = gpt2_window
    w.state.view.tab = LOGIT_LENS_TAB
    tab = presenter(w, LOGIT_LENS_TAB, LogitLensTab)
    qtbot.waitUntil(lambda: tab.view.lens is not None and not tab.is_running(), timeout=TIMEOUT_MS)
    lens = logit_lens(model, TEXT, k=5)
    np.testing.assert_allclose(tab.view.plot.matrix, lens.top_probs[:, :, 0], rtol=1e-5)
    rows, cols = lens.top_probs.shape[:2]
    assert [[tab.view.cell_text(r, c) for c in range(cols)] for r in range(rows)] == [
        [cell_label(level[c][0]) for c in range(cols)] for level in lens.top_tokens
    ]
    assert tab.view.plot.row_labels == lens.labels and tab.view.plot.col_labels == lens.tokens
    # every top token whole in its cell at 1280 x 800, on more lines where it is wider than the cell
    w.resize(1280, 800)
    qtbot.waitUntil(lambda: tab.view.labels.cell_size()[0] > 0, timeout=TIMEOUT_MS)
    qtbot.wait(50)
    width = tab.view.labels.cell_size()[0]
    metrics = QFontMetricsF(QFont())
    for r in range(rows):
        for c in range(cols):
            lines = tab.view.drawn_lines(r, c)
            assert "".join(lines) == lens.top_tokens[r][c][0], (r, c, lines)
            assert all(metrics.horizontalAdvance(line) <= width - 8 for line in lines)


def test_a_word_wider_than_its_cell_is_broken_not_cut(qapp):
    metrics = QFontMetricsF(QFont())
    word = "demonstrated"
    lines = wrapped(word, metrics, metrics.horizontalAdvance("demon"), 4)
    assert "".join(lines) == word and len(lines) >= 2
    assert all(metrics.horizontalAdvance(line) <= metrics.horizontalAdvance("demon") for line in lines)
    assert wrapped(word, metrics, 500, 1) == [word]
    short = wrapped(word, metrics, metrics.horizontalAdvance("demon"), 1)  # one line: elided, said so
    assert len(short) == 1 and short[0].endswith("…")


def test_cancel_stops_the_job_and_leaves_no_thread_running(qtbot, gpt2_window):
    w = gpt2_window
    w.state.view.tab = ATTRIBUTION_TAB
    tab = presenter(w, ATTRIBUTION_TAB, AttributionTab)
    qtbot.waitUntil(lambda: not tab.is_running(), timeout=TIMEOUT_MS)
    tab.view.stepsSpin.setValue(512)  # more than the 64 shown: a new job, still running at the click
    assert tab.is_running() and tab.view.bar.cancelButton.isEnabled()
    qtbot.mouseClick(tab.view.bar.cancelButton, Qt.MouseButton.LeftButton)
    assert not tab.is_running() and "cancelled" in tab.view.bar.message.text()
    qtbot.waitUntil(lambda: not w.compute.side.is_busy(channels.ATTRIBUTION), timeout=TIMEOUT_MS)
    assert not tab.view.bar.progress.isVisible() and tab.view.bar.runButton.isEnabled()


def test_an_encoder_says_why_the_tabs_are_off(qtbot, tmp_path):
    w = open_window(qtbot, build("bert", tmp_path / "bert"), PATCHING_TAB)
    try:
        for tab_id, kind in (
            (PATCHING_TAB, PatchingTab),
            (ATTRIBUTION_TAB, AttributionTab),
            (LOGIT_LENS_TAB, LogitLensTab),
        ):
            tab = presenter(w, tab_id, kind)
            w.state.view.tab = tab_id
            page = w.tab_page(tab_id)  # the window shows the empty state instead of the view
            off = w.empty_state(tab_id)
            assert page.currentWidget() is off and "encoder-only" in off.sentence()
            assert off.action() == "Open a model folder…" and off.button.isVisible()
            assert not tab.view.isVisible() and not tab.view.bar.runButton.isEnabled() and not tab.is_running()
            assert not w.compute.side.is_busy(tab.CHANNEL)
    finally:
        dispose(w)


def test_attention_flow_beside_the_rollout_in_the_window(qtbot, gpt2_window, model):
    w = gpt2_window
    view = w.tab_widget("rollout")
    with qtbot.waitSignal(view.queryChanged, timeout=TIMEOUT_MS):
        w.state.view.tab = "rollout"
    with qtbot.waitSignal(view.flowShown, timeout=TIMEOUT_MS):  # a side job of the compute controller
        view.flowCheck.setChecked(True)
    run = run_pretrained(model, TEXT)
    np.testing.assert_allclose(view.flow, attention_flow(run.weights).flow, atol=1e-6)
    assert view.flowPlot.isVisible() and view.rolloutPlot.isVisible()
    assert not w.compute.side.is_busy(channels.FLOW)


def test_a_model_without_its_lm_head_gets_the_empty_state(qtbot, tmp_path):
    w = open_window(qtbot, build_bare("gpt2", tmp_path / "bare"), ATTRIBUTION_TAB)  # the run loads it
    try:
        for tab_id, kind in (
            (PATCHING_TAB, PatchingTab),
            (ATTRIBUTION_TAB, AttributionTab),
            (LOGIT_LENS_TAB, LogitLensTab),
        ):
            tab = presenter(w, tab_id, kind)
            w.state.view.tab = tab_id
            off = w.empty_state(tab_id)  # a decoder whose run found no LM head: the same empty state
            assert w.tab_page(tab_id).currentWidget() is off and "no LM head" in off.sentence()
            assert off.label.isVisible() and off.action() == "Open a model folder…"
            assert not tab.view.bar.runButton.isEnabled() and not tab.is_running()
    finally:
        dispose(w)


@pytest.mark.perf
def test_the_window_never_stalls_while_they_compute(qtbot, gpt2_window):
    w = gpt2_window
    long_text = " ".join(["the cat sat on the mat"] * 10)  # 62 tokens: the checkpoint's 64 positions nearly full
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.new_run):
        w.state.text = long_text
    patching = presenter(w, PATCHING_TAB, PatchingTab)
    patching.view.set_inputs(long_text + " john", long_text + " mary", "mary", "john")
    lens, attribution = presenter(w, LOGIT_LENS_TAB, LogitLensTab), presenter(w, ATTRIBUTION_TAB, AttributionTab)

    def run_patching():
        w.state.view.tab = PATCHING_TAB
        qtbot.mouseClick(patching.view.bar.runButton, Qt.MouseButton.LeftButton)

    assert_smooth(qtbot, "patching", lambda i: timed(qtbot, run_patching, lambda: not patching.is_running()))
    assert patching.view.shown is not None
    assert_smooth(
        qtbot,
        "logit lens",
        lambda i: timed(
            qtbot,
            lambda: setattr(w.state.view, "tab", LOGIT_LENS_TAB),
            lambda: lens.view.lens is not None and not lens.is_running(),
        ),
    )
    assert_smooth(
        qtbot,
        "attribution",
        lambda i: timed(
            qtbot,
            lambda: setattr(w.state.view, "tab", ATTRIBUTION_TAB),
            lambda: attribution.view.attribution is not None and not attribution.is_running(),
        ),
    )


@pytest.mark.perf
def test_the_window_never_stalls_while_the_flow_computes(qtbot, gpt2_window):
    w = gpt2_window
    long_text = " ".join(["the cat sat on the mat"] * 10)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.new_run):
        w.state.text = long_text
    rollout = w.tab_widget("rollout")

    def flow():
        w.state.view.tab = "rollout"
        rollout.flowCheck.setChecked(False)
        rollout.flowCheck.setChecked(True)

    assert_smooth(qtbot, "attention flow", lambda i: timed(qtbot, flow, lambda: rollout.flow is not None))
    assert rollout.flow.shape == (62, 62)


def timed(qtbot, action, done) -> float:
    """The longest gap between 5 ms GUI-thread ticks from ``action`` until ``done()`` holds."""
    return worst_gap(qtbot, lambda: (action(), qtbot.waitUntil(done, timeout=TIMEOUT_MS)), settle_ms=100)


def chips_on_screen(view) -> list[int]:
    """The chips drawn wholly inside the part of the strip a person sees (clipped by its scroll
    area's viewport and every parent)."""
    strip = view.strip
    visible = strip.visibleRegion()
    return [i for i, rect in enumerate(strip.chip_rects()) if visible.contains(rect) and (visible & rect) == rect]


def test_attribution_shows_every_token_of_the_prompt_at_any_width(qtbot, gpt2_window):
    w = gpt2_window
    prompt = "whenever marianne and johnathan wandered towards the supermarket johnathan offered lemonade to"
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.text = prompt
    w.state.view.tab = ATTRIBUTION_TAB
    tab = presenter(w, ATTRIBUTION_TAB, AttributionTab)
    view = tab.view
    view.set_method("attn")
    qtbot.waitUntil(lambda: view.attribution is not None and not tab.is_running(), timeout=TIMEOUT_MS)
    tokens = view.attribution.tokens
    assert len(tokens) >= 14 and view.strip.tokens == tokens and view.headsPlot.isVisible()
    row = view.strip.chip_rects()[0].height()
    for size in ((1400, 900), (1000, 900), (1400, 900)):  # one row, wrapped, one row again
        w.resize(*size)
        qtbot.waitUntil(lambda: view.strip.width() == view.stripArea.viewport().width(), timeout=TIMEOUT_MS)
        qtbot.wait(50)
        rows = len({r.top() for r in view.strip.chip_rects()})
        assert chips_on_screen(view) == list(range(len(tokens))), (size, rows)
        assert (
            view.stripArea.height() == rows * row + (rows - 1) * 4
            and not view.stripArea.verticalScrollBar().isVisible()
        )
        assert view.stripArea.geometry().bottom() < view.readout.geometry().top()
        if size[0] == 1000:
            assert rows >= 2  # the narrower window wraps the chips
        view.strip.heightForWidth(120)  # a layout asking the height at another width moves no chip
        assert chips_on_screen(view) == list(range(len(tokens)))


def test_a_prompt_longer_than_the_strip_scrolls_to_every_token(qtbot):
    from attndesk.app.tabs.attribution.view import AttributionView, TokenStripArea
    from attndesk.interp import InputAttribution

    tokens = [f"token{i}" for i in range(300)]
    scores = np.linspace(-1.0, 1.0, len(tokens))
    view = AttributionView()
    qtbot.addWidget(view)
    view.resize(700, 700)
    view.show()
    view.set_attribution(InputAttribution("gradient_x_input", tokens, scores, "x", 1.0))
    qtbot.waitUntil(lambda: view.stripArea.verticalScrollBar().isVisible(), timeout=TIMEOUT_MS)
    rows = len({r.top() for r in view.strip.chip_rects()})
    row = view.strip.chip_rects()[0].height()
    assert rows > TokenStripArea.MAX_ROWS and view.stripArea.height() == TokenStripArea.MAX_ROWS * (row + 4) - 4
    last = view.strip.chip_rects()[-1]
    assert last.bottom() < view.strip.height() and view.strip.rect().contains(last)
    view.stripArea.ensureVisible(last.center().x(), last.center().y(), 0, row)
    qtbot.wait(20)
    assert len(tokens) - 1 in chips_on_screen(view)
