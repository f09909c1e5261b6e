"""Trained weights in the toy views (``config.weights_from``): the Train tab's Open in views and the
shipped presets in the parameters panel show every head of the trained model on its task's probe
input in the heatmaps, the step-through, compare (before vs after training) and the online-softmax
walk; Random goes back in one choice."""

from __future__ import annotations

import numpy as np
import torch
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtWidgets import QComboBox, QSpinBox

from attndesk.app.modes.toy import preset_run
from attndesk.app.tabs.online_softmax.presenter import ONLINE_SOFTMAX_TAB
from attndesk.app.tabs.train.presenter import TRAIN_TAB
from attndesk.train.model import build_model
from attndesk.train.tasks import Induction
from tests.conftest import TIMEOUT_MS


def stacked_attention(run) -> np.ndarray:
    """run.attention on the probe input, every layer's heads in layer order: [layers * H, L, L]."""
    weights = run.attention(run.task.probe().ids)[0].numpy()
    return weights.reshape(-1, *weights.shape[-2:])


def shown_after(qtbot, window, action):
    with qtbot.waitSignal(window.resultDisplayed, timeout=TIMEOUT_MS) as blocker:
        action()
    return blocker.args[0]


def test_the_train_tabs_model_is_offered_only_once_something_is_trained(qtbot, window):
    combo = window.parametersPanel.findChild(QComboBox, "weightsFromCombo")
    item = combo.model().item(combo.findData("trained"))
    assert not item.isEnabled() and "no trained model yet" in item.toolTip()  # nothing trained yet: greyed, says why
    assert combo.model().item(combo.findData("induction")).isEnabled()  # the shipped presets are there
    tab = window.tab_presenter(TRAIN_TAB)
    with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
        tab.open("my-run", lambda: preset_run("previous-token"))
    shown_after(qtbot, window, tab.view.viewsButton.click)
    assert item.isEnabled() and "unavailable" not in item.toolTip() and combo.currentData() == "trained"


def test_open_in_views_shows_the_trained_model_in_the_heatmaps_and_compare_before_vs_after(qtbot, window):
    run = preset_run("previous-token")  # opened as a folder would be: not by its preset name
    tab = window.tab_presenter(TRAIN_TAB)
    with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
        tab.open("my-run", lambda: run)
    assert tab.view.viewsButton.isEnabled()
    shown = shown_after(qtbot, window, tab.view.viewsButton.click)
    assert window.state.config.weights_from == "trained" and window.state.view.tab == "heatmaps"
    expected = stacked_attention(run)
    np.testing.assert_allclose(np.stack(window.heatmapPanel.displayed_arrays()), expected, atol=1e-6)
    np.testing.assert_allclose(shown.map.weights, expected, rtol=0, atol=1e-6)
    assert shown.map.head_labels == ["L0 H0", "L0 H1"]
    assert "my-run" in window.status.message and "Random" in window.status.message
    # compare: A = the same model at its random initial weights, B = trained, same probe input
    compare = window.tab_presenter("compare")
    with qtbot.waitSignal(compare.teachingShown, timeout=TIMEOUT_MS):
        window.state.view.tab = "compare"
    pair = compare.view.teaching()
    initial = run.__class__(run.cfg, run.task, build_model(run.cfg))
    np.testing.assert_allclose(pair.a.weights, stacked_attention(initial), atol=1e-6)
    np.testing.assert_allclose(pair.b.weights, expected, atol=1e-6)
    assert not np.allclose(pair.a.weights, pair.b.weights, atol=0.05)  # training changed them
    # head stats: the previous-token preset's heads put most of their weight one token back
    stats = window.tab_presenter("head-stats")
    with qtbot.waitSignal(stats.shownStats, timeout=TIMEOUT_MS):
        window.state.view.tab = "head-stats"
    shares = [s.previous_share for s in stats.view._stats]
    rows = np.arange(1, expected.shape[-1])
    np.testing.assert_allclose(shares, expected[:, rows, rows - 1].sum(-1) / expected.shape[-1], atol=1e-5)
    assert max(shares) > 0.5
    # back to random weights: one choice
    shown = shown_after(qtbot, window, lambda: window.state.set_config(weights_from="random"))
    assert shown.map.head_labels is None and shown.map.num_heads == window.state.config.num_heads


def test_the_online_softmax_walk_and_the_step_through_use_the_trained_layers(qtbot, window):
    run = preset_run("induction")  # 2 layers x 4 heads: stacked head 6 is layer 1's head 2
    shown = shown_after(qtbot, window, lambda: window.state.set_config(weights_from="induction"))
    window.state.view.target = 6
    presenter = window.tab_presenter(ONLINE_SOFTMAX_TAB)
    with qtbot.waitSignal(presenter.walkShown, timeout=TIMEOUT_MS) as blocker:
        window.state.view.tab = ONLINE_SOFTMAX_TAB
    walk = blocker.args[0]
    assert walk.head == 6 and walk.heads == 8
    weights = run.attention(run.task.probe().ids)[0, 1, 2].numpy()  # layer 1, head 2
    np.testing.assert_allclose(walk.walk.weights, weights, atol=1e-6)
    np.testing.assert_allclose(walk.walk.output, shown.toy.result.intermediates.context[6], atol=1e-5)
    stages = window.tab_presenter("step-through")
    with qtbot.waitSignal(stages.shownResult, timeout=TIMEOUT_MS):
        window.state.view.tab = "step-through"
    np.testing.assert_allclose(stages.view.result().intermediates.weights[6], weights, atol=1e-6)


def best_score(run, weights: np.ndarray) -> float:
    """The task's own pattern score (the induction score here) of the best head, on the probe input."""
    cfg = run.cfg
    stacked = torch.as_tensor(weights).reshape(1, cfg.layers, cfg.heads, *weights.shape[-2:])
    return float(np.max(run.task.pattern_scores(stacked, run.task.probe())))


def test_the_panel_offers_the_presets_and_the_induction_preset_shows_its_induction_head(qtbot, window):
    weights = "induction"
    combo = window.findChild(QComboBox, "weightsFromCombo")
    assert combo is not None and combo.isVisible()
    offered = [combo.itemData(i) for i in range(combo.count())]
    assert {"random", "induction", "reverse", "previous-token", "brackets"} <= set(offered)
    shown = shown_after(qtbot, window, lambda: combo.setCurrentIndex(combo.findData(weights)))
    run = preset_run(weights)
    np.testing.assert_allclose(np.stack(window.heatmapPanel.displayed_arrays()), stacked_attention(run), atol=1e-6)
    assert isinstance(run.task, Induction)
    trained = best_score(run, shown.map.weights)
    initial = run.__class__(run.cfg, run.task, build_model(run.cfg))
    random = best_score(run, stacked_attention(initial))
    assert trained > 0.5 > random, (trained, random)
    heads = window.findChild(QSpinBox, "headsSpin")
    assert not heads.isEnabled() and combo.isEnabled()  # the preset brings its own shape
    shown_after(qtbot, window, lambda: combo.setCurrentIndex(combo.findData("random")))
    assert heads.isEnabled()


def panel_reads(window) -> dict[str, object]:
    """What the parameters panel shows a person: the shape and variants of the model."""
    panel = window.parametersPanel
    return {
        "width": panel.embedDimSpin.value(),
        "heads": panel.headsSpin.value(),
        "mask": panel.maskCombo.currentText(),
        "position": panel.positionCombo.currentText(),
        "info": panel.modelInfo.text() if panel.modelInfo.isVisible() else "",
    }


def test_the_panel_shows_the_shape_and_variants_of_the_trained_weights_on_screen(qtbot, window):
    combo = window.findChild(QComboBox, "weightsFromCombo")
    randomly = panel_reads(window)
    assert randomly["info"] == "" and window.parametersPanel.headsSpin.isEnabled()
    expected = {
        "induction": (64, 4, "RoPE", "induction, 600 steps\n2 layers × 4 heads, d_k 16"),
        "previous-token": (
            32,
            2,
            "RoPE",
            "previous-token, 400 steps\n1 layer × 2 heads, d_k 16",
        ),
        "reverse": (64, 4, "learned", "reverse, 400 steps\n2 layers × 4 heads, d_k 16"),
    }
    for name, (width, heads, position, info) in expected.items():
        shown = shown_after(qtbot, window, lambda name=name: combo.setCurrentIndex(combo.findData(name)))
        cfg = preset_run(name).cfg
        assert (cfg.embed_dim, cfg.heads, shown.map.num_heads) == (width, heads, cfg.layers * heads)
        assert panel_reads(window) == {
            "width": width,
            "heads": heads,
            "mask": "causal",
            "position": position,
            "info": info,
        }
        assert not window.parametersPanel.headsSpin.isEnabled() and combo.isEnabled()
    shown_after(qtbot, window, lambda: combo.setCurrentIndex(combo.findData("random")))
    assert panel_reads(window) == randomly and window.parametersPanel.headsSpin.isEnabled()


def test_the_panel_follows_the_train_tabs_model_handed_over_again(qtbot, window):
    tab = window.tab_presenter(TRAIN_TAB)
    for run, heads in ((preset_run("previous-token"), 2), (preset_run("induction"), 4)):
        with qtbot.waitSignal(tab.opened, timeout=TIMEOUT_MS):
            tab.open("my-run", lambda run=run: run)
        shown_after(qtbot, window, tab.view.viewsButton.click)
        assert window.state.config.weights_from == "trained"
        reads = panel_reads(window)
        assert (reads["heads"], reads["width"], reads["position"]) == (heads, run.cfg.embed_dim, "RoPE")
        assert str(reads["info"]).startswith(f"my-run: {run.cfg.task}, {run.step:,} steps\n")
