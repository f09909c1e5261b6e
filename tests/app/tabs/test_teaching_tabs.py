"""The teaching tabs in pretrained mode: statistics per layer and head (side worker), rollout and
follow-a-token on the run's weights, compare on the shown layer, toy-only tools disabled."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from app_helpers import fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import QCoreApplication, QEvent

from attndesk.models import load_pretrained
from attndesk.session.state import PACKAGED
from attndesk.teaching.rollout import attention_rollout
from attndesk.teaching.statistics import layer_statistics
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
    run = w.pretrained.run()
    layers, heads = run.weights.shape[:2]

    # head statistics: every layer x head, from the side worker
    with qtbot.waitSignal(w.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):
        w.viewTabs.setCurrentWidget(w.tab_page("head-stats"))
    assert w.tab_widget("head-stats").stats() == layer_statistics(run.weights, special=list(run.tokens))
    assert w.tab_widget("head-stats").table.rowCount() == layers * heads
    # a row opens that layer's head large in the heatmaps
    w.tab_widget("head-stats").select_head(5, layer=2)
    qtbot.waitUntil(lambda: w.displayed_result().layer == 2, timeout=TIMEOUT_MS)
    assert w.viewTabs.currentWidget() is w.heatmapPanel
    assert w.heatmapPanel.view_target() == 5

    # rollout and follow-a-token work on the whole run
    with qtbot.waitSignal(w.tab_widget("rollout").queryChanged, timeout=TIMEOUT_MS):  # traced by a side job
        w.viewTabs.setCurrentWidget(w.tab_page("rollout"))  # its view in the stack beside its empty state
    assert w.tab_widget("rollout").body.isVisibleTo(w)
    np.testing.assert_allclose(w.tab_widget("rollout").rollout, attention_rollout(run.weights), rtol=1e-6, atol=1e-9)
    with qtbot.waitSignal(w.tab_widget("rollout").queryChanged, timeout=TIMEOUT_MS, check_params_cb=lambda q: q == 3):
        w.tab_widget("rollout").set_query(3)
    np.testing.assert_allclose(w.tab_widget("rollout").follow, run.weights[:, :, 3, :].mean(axis=1), rtol=1e-6)

    # compare shows the displayed layer; teaching pairs and the PyTorch comparison are toy-only
    w.viewTabs.setCurrentWidget(w.tab_page("compare"))
    np.testing.assert_array_equal(w.tab_widget("compare").displayed()[1], run.weights[2, 5])  # head 5 chosen above
    assert not any(b.isEnabled() for b in w.tab_widget("compare").teachButtons.values())
    assert not w.tab_widget("implementation").runButton.isEnabled()
    with qtbot.waitSignal(w.tab_presenter("step-through").shownResult, timeout=60000):  # the real layer's stages
        w.viewTabs.setCurrentWidget(w.tab_page("step-through"))
    np.testing.assert_allclose(w.tab_widget("step-through").stage_matrix("weights"), run.weights[2, 5], atol=1e-6)


def test_pretrained_statistics_caption_counts_the_tokens_they_cover(qtbot, window):
    # statistics are over every token of the run ([CLS]/[SEP] included) even when the heatmaps hide them
    from attndesk.session.state import PACKAGED

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
    with qtbot.waitSignal(w.tab_presenter("head-stats").shownStats, timeout=60000):
        w.viewTabs.setCurrentWidget(w.tab_page("head-stats"))
    assert f"{n} queries × {n} keys" in w.tab_widget("head-stats").infoLabel.text()
