"""The teaching tabs in pretrained mode: statistics per layer and head (side worker), rollout and
follow-a-token on the run's weights, compare on the shown layer, toy-only tools disabled."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from app_helpers import fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import QCoreApplication, QEvent

from attndesk.app.state import PACKAGED
from attndesk.core.pretrained import load_pretrained
from attndesk.core.rollout import attention_rollout
from attndesk.core.statistics import layer_statistics
from tests.conftest import TIMEOUT_MS

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def model():
    return load_pretrained()  # cached for the process: the window's worker reuses it


@pytest.fixture
def pretrained_window(qtbot, model):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)

    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.layers is not None):
        w.state.text = TEXT
        w.parametersPanel.modeCombo.setCurrentIndex(w.parametersPanel.mode_index(PACKAGED))
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    yield w
    w.close()
    w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()


def test_pretrained_tabs(qtbot, pretrained_window):
    w = pretrained_window
    tabs = w.teaching
    run = w.pretrained.run()
    layers, heads = run.weights.shape[:2]

    # head statistics: every layer x head, from the side worker
    with qtbot.waitSignal(tabs.headStats.shownStats, timeout=TIMEOUT_MS):
        w.viewTabs.setCurrentWidget(tabs.headStatsView)
    assert tabs.headStatsView.stats() == layer_statistics(run.weights, special=list(run.tokens))
    assert tabs.headStatsView.table.rowCount() == layers * heads
    # a row opens that layer's head large in the heatmaps
    tabs.headStatsView.select_head(5, layer=2)
    qtbot.waitUntil(lambda: w.displayed_result().layer == 2, timeout=TIMEOUT_MS)
    assert w.viewTabs.currentWidget() is w.heatmapPanel
    assert w.heatmapPanel.view_target() == 5

    # rollout and follow-a-token work on the whole run
    with qtbot.waitSignal(tabs.rolloutView.queryChanged, timeout=TIMEOUT_MS):  # traced by a side job
        w.viewTabs.setCurrentWidget(tabs.rolloutView)
    assert tabs.rolloutView.body.isVisibleTo(w)
    np.testing.assert_allclose(tabs.rolloutView.rollout, attention_rollout(run.weights), rtol=1e-6, atol=1e-9)
    with qtbot.waitSignal(tabs.rolloutView.queryChanged, timeout=TIMEOUT_MS, check_params_cb=lambda q: q == 3):
        tabs.rolloutView.set_query(3)
    np.testing.assert_allclose(tabs.rolloutView.follow, run.weights[:, :, 3, :].mean(axis=1), rtol=1e-6)

    # compare shows the displayed layer; teaching pairs and the PyTorch comparison are toy-only
    w.viewTabs.setCurrentWidget(tabs.compareView)
    np.testing.assert_array_equal(tabs.compareView.displayed()[1], run.weights[2, 5])  # head 5 chosen above
    assert not any(b.isEnabled() for b in tabs.compareView.teachButtons.values())
    assert not tabs.implementationPanel.runButton.isEnabled()
    with qtbot.waitSignal(tabs.stepThrough.shownResult, timeout=60000):  # the real layer's stages
        w.viewTabs.setCurrentWidget(tabs.stepThroughView)
    np.testing.assert_allclose(tabs.stepThroughView.stage_matrix("weights"), run.weights[2, 5], atol=1e-6)


def test_pretrained_statistics_caption_counts_the_tokens_they_cover(qtbot, window):
    # statistics are over every token of the run ([CLS]/[SEP] included) even when the heatmaps hide them
    from attndesk.app.state import PACKAGED

    w = window
    with qtbot.waitSignal(w.resultDisplayed, timeout=60000, check_params_cb=lambda r: r.layers is not None):
        w.state.update({"text": "The cat sat on the mat.", "cross": False})
        w.parametersPanel.modeCombo.setCurrentIndex(w.parametersPanel.mode_index(PACKAGED))
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.pretrained.controls.hide_special_check.setChecked(True)
    run = w.pretrained.run()
    n = len(run.tokens)
    assert w.displayed_result().length == n - 2  # [CLS] and [SEP] hidden
    tabs = w.teaching
    with qtbot.waitSignal(tabs.headStats.shownStats, timeout=60000):
        w.viewTabs.setCurrentWidget(tabs.headStatsView)
    assert f"{n} queries × {n} keys" in tabs.headStatsView.infoLabel.text()
