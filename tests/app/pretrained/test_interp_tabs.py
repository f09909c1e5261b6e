"""The interpretability tabs in the real window (offscreen) on tiny random GPT-2 / BERT checkpoints:
Patching shows the core's patch_heads array and refuses a multi-token answer without computing,
Attribution's colours are the core's integrated gradients / gradient x input, the Logit lens grid
writes the core's top tokens, the attention flow sits beside the rollout, Cancel leaves no job
running, and an encoder-only model says why the tabs are off."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build
from PySide6.QtCore import Qt

from attndesk.app.pretrained.patching import PATCHING_TAB, PatchingTab
from attndesk.core.interp import patch_heads
from attndesk.core.pretrained import load_pretrained
from tests.conftest import TIMEOUT_MS

TEXT = "the cat sat on the mat"
CLEAN, CORRUPT = "when mary and john went to the store john gave it to", "when mary and john went to the store mary gave it to"


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
    return w.tab_widget(tab_id).findChild(kind)


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
    view.open_head(1, 2)  # a head's attention on both prompts, side by side
    assert view.cleanAttention.matrix.shape == view.corruptAttention.matrix.shape
    assert not np.allclose(view.cleanAttention.matrix, view.corruptAttention.matrix)


def test_patching_refuses_bad_input_and_computes_nothing(qtbot, gpt2_window):
    w = gpt2_window
    tab = presenter(w, PATCHING_TAB, PatchingTab)
    view = tab.view
    view.set_inputs(CLEAN, CORRUPT, "xylophonists", "john")
    assert not view.answer.is_ok() and "tokens" in view.answer.check.text()
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    assert not tab.is_running() and not w.compute.side.is_busy("patching") and view.shown is None
    view.set_inputs(CLEAN, CORRUPT + " too", "mary", "id:99999")
    assert "outside the model's vocabulary" in view.wrong.check.text()
    assert view.promptProblem.isVisible() and "equal token length" in view.promptProblem.text()
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    assert not tab.is_running() and view.shown is None
