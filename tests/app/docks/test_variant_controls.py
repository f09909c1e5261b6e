"""The modern-attention variants in the window, driven through the real
widgets: the parameters panel's position / K/V heads / window / soft-cap controls, the heatmaps
they shape, the step-through's variant stages and the Positions tab's RoPE row.

Every picture is compared with the core's own arrays for the same config (run independently),
every refusal with the core's message, and a refused config must start no job.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)

from attndesk.app.docks.parameters import ParametersPanel
from attndesk.app.docks.variant_controls import UNKNOWN, kv_label
from attndesk.app.tabs.heatmaps import grid as heatmap_grid
from attndesk.app.tabs.positions.view import ROPE_ANCHORS, rope_pair
from attndesk.app.widgets.stages import wrapped
from attndesk.attention.alibi import alibi_bias, alibi_slopes
from attndesk.attention.rope import rope_frequencies
from attndesk.core import run_attention
from attndesk.render.layout import band_edges, band_outline
from attndesk.runs.config import divisors
from attndesk.session.file import session_from_json
from attndesk.session.state import AppState, PanelView
from tests.app.window.test_main_window import wait_result
from tests.conftest import TIMEOUT_MS


def core_run(w, keep=False):
    return run_attention(w.state.config, w.state.text, keep, key_text=w.state.keys_text())


def assert_heatmaps_equal_core(w):
    expected = core_run(w).weights
    arrays = w.heatmapPanel.displayed_arrays()
    assert len(arrays) == expected.shape[0]
    for h, array in enumerate(arrays):
        np.testing.assert_array_equal(array, expected[h])


def pick(combo, data):
    index = combo.findData(data)
    assert index >= 0, (data, [combo.itemText(i) for i in range(combo.count())])
    combo.setCurrentIndex(index)


def assert_refused(qtbot, w, action, field: str, words: str):
    """``action`` leaves a config the core refuses: its message under the control, no job."""
    before, ids = w.displayed_result(), w.compute.current_ids()
    with qtbot.assertNotEmitted(w.resultDisplayed, wait=400):
        action()
    panel = w.parametersPanel
    label = panel._field_errors[field]
    assert label.isVisibleTo(w) and words in label.text(), label.text()
    assert w.compute.problem() is not None and w.compute.problem().field == field
    assert not w.compute.is_busy() and w.compute.current_ids() == ids and w.displayed_result() is before
    assert "fix the parameters" in w.status_text()


# -- the parameters panel ---------------------------------------------------------------------------
def test_position_combo_replaces_the_checkbox_and_sets_the_run(qtbot, window):
    w, panel = window, window.parametersPanel
    assert w.findChild(type(panel.positionCombo), "positionCombo") is panel.positionCombo
    assert [panel.positionCombo.itemText(i) for i in range(4)] == ["sinusoidal", "RoPE", "ALiBi", "none"]
    assert all(panel.positionCombo.itemData(i, 3) for i in range(4))  # each entry explains itself on hover
    for position in ("rope", "alibi", "none", "sinusoidal"):
        shown = wait_result(qtbot, w, lambda p=position: pick(panel.positionCombo, p))
        assert w.state.config.position == position == shown.toy.result.config.position
        assert_heatmaps_equal_core(w)
    for widget in (panel.positionCombo, panel.kvHeadsCombo, panel.variants.windowSpin, panel.variants.softcapSpin):
        assert widget.toolTip(), widget.objectName()


def test_kv_heads_offer_the_divisors_and_group_the_heatmaps(qtbot, window):
    w, panel = window, window.parametersPanel
    wait_result(qtbot, w, lambda: panel.headsSpin.setValue(8))
    combo = panel.kvHeadsCombo
    assert [combo.itemData(i) for i in range(combo.count())] == divisors(8) == [1, 2, 4, 8]
    assert combo.itemText(0) == "1 (multi-query)" and combo.itemText(3) == "8 (= heads: plain MHA)"
    assert combo.currentData() == 8 and w.state.config.kv_heads is None  # plain multi-head
    shown = wait_result(qtbot, w, lambda: pick(combo, 2))
    assert w.state.config.kv_heads == 2 and shown.map.kv_heads == 2
    assert_heatmaps_equal_core(w)
    assert w.heatmapPanel.canvas.group_headers() == ["kv 0: q 0–3", "kv 1: q 4–7"]
    wait_result(qtbot, w, lambda: pick(combo, 8))
    assert w.state.config.kv_heads is None and w.heatmapPanel.canvas.group_headers() == []


def test_kv_heads_that_stop_dividing_the_heads_are_explained_and_run_nothing(qtbot, window):
    w, panel = window, window.parametersPanel
    wait_result(qtbot, w, lambda: panel.headsSpin.setValue(8))
    wait_result(qtbot, w, lambda: pick(panel.kvHeadsCombo, 4))
    assert_refused(
        qtbot,
        w,
        lambda: panel.headsSpin.setValue(2),
        "kv_heads",
        "4 K/V heads cannot be shared evenly by 2 query heads; valid K/V head counts: 1, 2",
    )
    assert panel.kvHeadsCombo.currentText() == "4 (does not divide 2 heads)"  # shown, not silently changed
    assert w.state.config.kv_heads == 4
    wait_result(qtbot, w, lambda: pick(panel.kvHeadsCombo, 1))
    assert not panel._field_errors["kv_heads"].isVisibleTo(w)
    assert w.state.config.kv_heads == 1 and panel.kvHeadsCombo.count() == 2
    assert_heatmaps_equal_core(w)


def test_window_box_and_spin_set_the_band(qtbot, window, monkeypatch):
    w, panel = window, window.parametersPanel
    v = panel.variants
    assert not v.windowSpin.isEnabled()
    shown = wait_result(qtbot, w, lambda: v.windowCheck.setChecked(True))
    assert w.state.config.window == v.windowSpin.value() == 3 and shown.map.window == 3
    built = []
    monkeypatch.setattr(heatmap_grid, "band_edges", lambda *a, **k: built.append(a) or band_edges(*a, **k))
    shown = wait_result(qtbot, w, lambda: v.windowSpin.setValue(2))
    assert w.state.config.window == 2
    n = shown.map.weights.shape[-1]
    assert built == [(n, n, 2)]  # one outline for all the heads (a path per cell stalled 120 ms at 7k tokens)
    paths = [cell.band.path() for cell in w.heatmapPanel.canvas.active()]
    assert len(paths) == 4 and all(p == paths[0] for p in paths)
    # the path is the band's two staircases: each starts with a move, then lines through its points
    drawn = [
        (paths[0].elementAt(i).isMoveTo(), paths[0].elementAt(i).x, paths[0].elementAt(i).y)
        for i in range(paths[0].elementCount())
    ]
    assert drawn == [(j == 0, x, y) for line in band_outline(n, n, 2, causal=False) for j, (x, y) in enumerate(line)]
    assert_heatmaps_equal_core(w)
    weights = w.heatmapPanel.displayed_arrays()[0]
    i, j = np.indices(weights.shape)
    assert (weights[np.abs(i - j) >= 2] == 0).all() and (weights[np.abs(i - j) < 2] > 0).all()
    assert all(cell.band.isVisible() for cell in w.heatmapPanel.canvas.active())
    assert "window 2" in w.heatmapPanel.layerBadge.text()
    wait_result(qtbot, w, lambda: v.windowCheck.setChecked(False))
    assert w.state.config.window is None and not any(c.band.isVisible() for c in w.heatmapPanel.canvas.active())


def test_a_window_below_one_from_a_session_is_shown_and_explained(qtbot, window):
    w, v = window, window.parametersPanel.variants
    assert_refused(
        qtbot, w, lambda: w.state.set_config(window=0), "window", "window must be a whole number of tokens >= 1"
    )
    assert v.windowCheck.isChecked() and v.windowSpin.value() == 0  # the value as it is, not clamped to 1
    wait_result(qtbot, w, lambda: v.windowSpin.setValue(4))
    assert w.state.config.window == 4 and v.windowSpin.minimum() == 1


def test_softcap_box_sets_the_cap_and_a_bad_cap_is_explained(qtbot, window):
    w, v = window, window.parametersPanel.variants
    shown = wait_result(qtbot, w, lambda: v.softcapCheck.setChecked(True))
    assert w.state.config.softcap == 1.0 == shown.toy.result.config.softcap
    assert_heatmaps_equal_core(w)
    assert_refused(qtbot, w, lambda: w.state.set_config(softcap=-2.0), "softcap", "softcap must be a positive")
    assert v.softcapSpin.value() == -2.0
    wait_result(qtbot, w, lambda: v.softcapCheck.setChecked(False))
    assert w.state.config.softcap is None


def test_rope_with_an_odd_head_width_is_explained_under_the_position(qtbot, window):
    w, panel = window, window.parametersPanel
    wait_result(qtbot, w, lambda: w.state.set_config(embed_dim=48, num_heads=16))  # d_k = 3
    assert_refused(
        qtbot,
        w,
        lambda: pick(panel.positionCombo, "rope"),
        "position",
        "RoPE rotates pairs of dimensions, so the head dimension must be even, got d_k = 3",
    )
    wait_result(qtbot, w, lambda: panel.headsSpin.setValue(8))  # d_k = 6
    assert not panel._field_errors["position"].isVisibleTo(w)
    assert_heatmaps_equal_core(w)


def test_an_old_session_with_positional_false_loads_as_none(qtbot, window):
    w = window
    session = session_from_json(
        {
            "format": "attndesk-session",
            "version": 2,
            "text": "a b c d",
            "config": {"embed_dim": 32, "num_heads": 2, "positional": False, "kv_heads": 1, "window": 2},
        }
    )
    wait_result(qtbot, w, lambda: w.apply_session(session))
    panel = w.parametersPanel
    assert panel.positionCombo.currentData() == "none" and panel.kvHeadsCombo.currentText() == "1 (multi-query)"
    assert panel.variants.windowCheck.isChecked() and panel.variants.windowSpin.value() == 2
    assert_heatmaps_equal_core(w)


def test_a_pretrained_architecture_shows_its_values_fixed(qtbot):
    state = AppState()
    panel = ParametersPanel(state)
    qtbot.addWidget(panel)
    fixed = {
        "embed_dim": 4096,
        "num_heads": 32,
        "hidden_dim": 128,
        "kv_heads": 8,
        "position": "rope",
        "window": 4096,
        "softcap": 50.0,
    }
    panel.set_panel_view(PanelView(fixed=fixed))
    v = panel.variants
    assert panel.positionCombo.currentData() == "rope" and panel.kvHeadsCombo.currentText() == kv_label(8, 32)
    assert v.windowCheck.isChecked() and v.windowSpin.value() == 4096
    assert v.softcapCheck.isChecked() and v.softcapSpin.value() == 50.0
    assert not any(w.isEnabled() for w in v.widgets())
    assert state.config.kv_heads is None and state.config.position == "sinusoidal"  # the toy config is untouched
    # a model that does not say (and an absolute position kind the toy model lacks)
    panel.set_panel_view(PanelView(fixed={"num_heads": 12, "embed_dim": 384, "position": "learned"}))
    assert panel.positionCombo.currentText() == "learned" and panel.kvHeadsCombo.currentText() == UNKNOWN
    assert v.windowSpin.text() == "unknown" and not v.windowCheck.isChecked()
    panel.set_panel_view(PanelView())
    assert panel.positionCombo.count() == 4 and panel.positionCombo.isEnabled()
    assert v.windowSpin.value() == 3 and v.softcapSpin.value() == 1.0 and not v.windowSpin.isEnabled()


# -- heatmaps --------------------------------------------------------------------------------------
def test_alibi_bias_toggle_draws_each_heads_bias(qtbot, window):
    w, panel = window, window.heatmapPanel
    shown = wait_result(qtbot, w, lambda: pick(w.parametersPanel.positionCombo, "alibi"))
    np.testing.assert_allclose(shown.map.alibi_slopes, alibi_slopes(4), rtol=1e-7)
    assert panel.alibiAction.isVisible()
    panel.alibiAction.trigger()  # Display ▸ Show ALiBi's bias
    qtbot.waitUntil(lambda: panel.source().value_name == "bias", timeout=TIMEOUT_MS)
    assert w.state.view.alibi_bias is True
    n = shown.length
    expected = alibi_bias(4, n, dtype=torch.float64).numpy()
    for h, array in enumerate(panel.displayed_arrays()):
        np.testing.assert_allclose(array, expected[h], rtol=1e-6, atol=1e-7)
    assert "ALiBi bias" in panel.layerBadge.text()
    w.state.view.alibi_bias = False  # the state drives the panel back to the weights
    qtbot.waitUntil(lambda: panel.source().value_name == "weight", timeout=TIMEOUT_MS)
    assert not panel.alibiAction.isChecked()
    assert_heatmaps_equal_core(w)


# -- step-through ----------------------------------------------------------------------------------
def open_step_through(qtbot, w):
    with qtbot.waitSignal(w.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        w.state.view.tab = "step-through"
    return w.tab_widget("step-through")


def test_step_through_shows_rope_and_softcap_stages_equal_to_the_intermediates(qtbot, window):
    w = window
    wait_result(qtbot, w, lambda: w.state.set_config(position="rope", kv_heads=2, softcap=1.0))
    view = open_step_through(qtbot, w)
    assert view.stages() == (
        "embeddings",
        "q_raw",
        "k_raw",
        "angles",
        "q",
        "k",
        "v",
        "scores",
        "scaled",
        "capped",
        "masked",
        "weights",
        "context",
        "output",
    )
    inter = core_run(w, keep=True).intermediates
    with qtbot.waitSignal(view.drawn, timeout=TIMEOUT_MS):
        view.set_head(3)  # its stage images come from a side job
    expected = {
        "q_raw": inter.q_raw[3],
        "k_raw": inter.k_raw[1],
        "q": inter.q[3],
        "k": inter.k[1],
        "capped": inter.capped[3],
        "scaled": inter.scaled[3],
        "weights": inter.weights[3],
    }
    for name, array in expected.items():
        np.testing.assert_array_equal(view.stage_matrix(name), array, err_msg=name)
        np.testing.assert_array_equal(view.plots[name].matrix, array, err_msg=name)
    # the angles: position m times the pair's frequency, independently, wrapped to [-pi, pi)
    lq, d = inter.q.shape[1:]
    angles = np.arange(lq)[:, None] * rope_frequencies(d).numpy()[None, :]
    np.testing.assert_allclose(view.plots["angles"].matrix, wrapped(angles), atol=1e-12)
    # Q after = Q before rotated pair by pair: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
    half = d // 2
    x1, x2 = inter.q_raw[3][:, :half].astype(np.float64), inter.q_raw[3][:, half:].astype(np.float64)
    rotated = np.concatenate([x1 * np.cos(angles) - x2 * np.sin(angles), x2 * np.cos(angles) + x1 * np.sin(angles)], 1)
    np.testing.assert_allclose(view.stage_matrix("q"), rotated, atol=1e-5)
    np.testing.assert_allclose(view.stage_matrix("capped"), np.tanh(inter.scaled[3].astype(np.float64)), atol=1e-6)
    a = view.hover_weight(5, 2)
    assert a.capped == pytest.approx(np.tanh(a.scaled)) and a.weight == pytest.approx(a.stored, rel=1e-5)
    assert "soft-cap 1·tanh" in view.arithmeticLabel.text()
    assert "θ = 7 · 10000^(−2/16)" in view.hover_stage("angles", 7, 1)
    assert "(mod 2π)" in view.plots["angles"].title.text() and "C = 1" in view.plots["capped"].title.text()


def test_step_through_shows_alibi_bias_stage(qtbot, window):
    w = window
    wait_result(qtbot, w, lambda: w.state.set_config(position="alibi", mask="causal"))
    view = open_step_through(qtbot, w)
    assert "bias" in view.stages() and "q_raw" not in view.stages() and "angles" not in view.stages()
    inter = core_run(w, keep=True).intermediates
    h = view.head()
    n = inter.weights.shape[1]
    np.testing.assert_array_equal(view.plots["bias"].matrix, inter.bias[h])
    np.testing.assert_allclose(view.plots["bias"].matrix, alibi_bias(4, n, dtype=torch.float64).numpy()[h], atol=1e-6)
    a = view.hover_weight(6, 1)
    assert a.bias == pytest.approx(-alibi_slopes(4)[h] * 5) and a.weight == pytest.approx(a.stored, rel=1e-5)
    assert "+ ALiBi bias" in view.arithmeticLabel.text()
    # back to plain attention: the variant stages leave the strip
    wait_result(qtbot, w, lambda: w.state.set_config(position="sinusoidal"))
    qtbot.waitUntil(
        lambda: view.stages()[:4] == ("embeddings", "q", "k", "v") and "bias" not in view.stages(), timeout=TIMEOUT_MS
    )
    assert not view.plots["bias"].isVisible()


# -- positions -------------------------------------------------------------------------------------
def test_positions_tab_shows_ropes_score_depends_only_on_the_offset(qtbot, window):
    w = window
    wait_result(qtbot, w, lambda: w.state.set_config(position="rope"))
    view = w.tab_widget("positions")
    w.state.view.tab = "positions"
    qtbot.waitUntil(lambda: view.rope is not None and view.table is not None, timeout=TIMEOUT_MS)
    table = view.rope
    n = w.displayed_result().length
    assert table.head_dim == 16 and table.scores.shape == (n, n)
    # independently: a pair (x_i, x_{i+d/2}) is the complex number x_i + i x_{i+d/2}, turned by e^{i m w_i}
    q, k = rope_pair(16)
    w_i = rope_frequencies(16).numpy()
    zq, zk = q[:8] + 1j * q[8:], k[:8] + 1j * k[8:]
    m = np.arange(n)[:, None]
    expected = np.real((zq * np.exp(1j * m * w_i)) @ np.conj(zk * np.exp(1j * m * w_i)).T)
    np.testing.assert_allclose(table.scores, expected, atol=1e-10)
    for offset in range(-(n - 1), n):  # constant along every diagonal
        diagonal = np.diagonal(table.scores, offset=-offset)
        assert np.ptp(diagonal) < 1e-10
    assert table.anchor_spread < 1e-9 and table.by_offset.shape == (len(ROPE_ANCHORS), 2 * n - 1)
    xs, ys = view.offsetCurves[2].getData()
    np.testing.assert_array_equal(xs, np.arange(-(n - 1), n))
    np.testing.assert_allclose(
        ys, [expected[o, 0] if o >= 0 else expected[0, -o] for o in range(-(n - 1), n)], atol=1e-9
    )
    assert "coincide" in view.ropeLabel.text() and "not on in this run" not in view.ropeLabel.text()
    assert "offset m − n = 3" in view.hover_rope(5, 2)
    wait_result(qtbot, w, lambda: w.state.set_config(position="sinusoidal"))
    qtbot.waitUntil(lambda: "not on in this run" in view.ropeLabel.text(), timeout=TIMEOUT_MS)


# -- responsiveness ------------------------------------------------------------------------------
@pytest.mark.perf
def test_variant_stages_and_rope_tables_never_stall_the_window(qtbot, window):
    """RoPE + soft-cap + GQA at 2,048 tokens x 8 heads: the step-through's 14 stages (angles made
    from scratch) and the Positions tab's [2048, 2048] RoPE scores come from side jobs."""
    from tests.app.tabs.test_responsive import assert_smooth, worst_gap

    w = window
    text = " ".join(f"w{i % 500}" for i in range(2048))
    with qtbot.waitSignal(w.resultDisplayed, timeout=120000, check_params_cb=lambda r: r.length == 2048):
        w.state.update(
            {
                "config": w.state.config.replace(
                    embed_dim=128, num_heads=8, kv_heads=2, position="rope", softcap=1.0, mask="none"
                ),
                "text": text,
            }
        )
    steps = w.tab_presenter("step-through").shownResult

    def switch(i, tab, drawn):
        if i:
            w.state.view.tab = "heatmaps"
            qtbot.wait(300)
        return worst_gap(qtbot, lambda: setattr(w.state.view, "tab", tab), None if i else drawn, settle_ms=800)

    assert_smooth(qtbot, "switching to the step-through", lambda i: switch(i, "step-through", steps))
    assert len(w.tab_widget("step-through").stages()) == 14
    view = w.tab_widget("positions")

    def to_positions(_i):
        w.state.view.tab = "heatmaps"
        qtbot.wait(300)
        # the tick timer runs while waitUntil spins the event loop: the drawing of both tables is measured
        return worst_gap(
            qtbot,
            lambda: (
                setattr(w.state.view, "tab", "positions"),
                qtbot.waitUntil(lambda: view.rope is not None and view.rope.length == 2048, timeout=120000),
            ),
            settle_ms=800,
        )

    assert_smooth(qtbot, "switching to positions", to_positions)
    assert view.rope.scores.shape == (512, 512) and view.rope.offsets[0] == -64  # the first positions, near offsets
    assert "first 512 of 2048" in view.ropePlot.title.text()


def test_variant_choices_survive_a_session_round_trip_and_cross_attention_refuses_a_window(qtbot, window):
    from attndesk.session.file import session_json

    w, panel = window, window.parametersPanel
    wait_result(qtbot, w, lambda: w.state.set_config(position="alibi", kv_heads=1, softcap=2.5))
    saved = session_json(w.state)
    assert {k: saved["config"][k] for k in ("position", "kv_heads", "window", "softcap")} == {
        "position": "alibi",
        "kv_heads": 1,
        "window": None,
        "softcap": 2.5,
    }
    wait_result(qtbot, w, lambda: w.state.set_config(position="none", kv_heads=None, softcap=None))
    wait_result(qtbot, w, lambda: w.apply_session(session_from_json(saved)))
    assert panel.positionCombo.currentData() == "alibi" and panel.kvHeadsCombo.currentData() == 1
    assert panel.variants.softcapSpin.value() == 2.5 and panel.variants.softcapCheck.isChecked()
    # keys from a second text have no distance to the queries: ALiBi is refused under the position
    assert_refused(qtbot, w, lambda: w.state.update({"cross": True}), "position", "ALiBi penalises the distance")


def test_the_packaged_model_shows_its_kv_heads_fixed(qtbot, window):
    from attndesk.session.state import PACKAGED

    w, panel = window, window.parametersPanel
    wait_result(qtbot, w, lambda: setattr(w.state, "mode", PACKAGED))
    assert panel.kvHeadsCombo.currentText() == kv_label(12, 12) and not panel.kvHeadsCombo.isEnabled()
    assert not panel.variants.windowCheck.isEnabled() and panel.variants.windowSpin.text() == "unknown"
    assert w.state.config.kv_heads is None  # the toy settings are kept for the toy mode


def test_sink_controls_set_the_sink_and_the_step_through_shows_its_share(qtbot, window):
    w, v = window, window.parametersPanel.variants
    assert not v.sinkLogitCheck.isEnabled()  # the logit acts only for a learned sink
    wait_result(qtbot, w, lambda: pick(v.sinkCombo, "learned"))
    assert w.state.config.sink == "learned" and v.sinkLogitCheck.isEnabled()
    assert_heatmaps_equal_core(w)
    shown = wait_result(qtbot, w, lambda: v.sinkLogitCheck.setChecked(True))
    assert w.state.config.sink_logit == 0.0 == shown.toy.result.config.sink_logit
    assert_heatmaps_equal_core(w)
    assert any("the sink took" in n for n in shown.toy.result.notices)
    view = open_step_through(qtbot, w)
    assert view.stages()[-4:] == ("weights", "sink", "context", "output")
    inter = core_run(w, keep=True).intermediates
    h = view.head()
    np.testing.assert_array_equal(view.plots["sink"].matrix, inter.sink[h])
    np.testing.assert_allclose(view.plots["sink"].matrix[:, 0] + inter.weights[h].sum(-1), 1.0, atol=1e-6)
    assert "s = 0" in view.plots["weights"].title.text()
    a = view.hover_weight(3, 1)
    assert a.sink == 0.0 and a.weight == pytest.approx(a.stored, rel=1e-5)
    assert "the sink's exp(0" in view.arithmeticLabel.text()
    assert f"{float(inter.sink[h][3, 0]):.6g}" in view.hover_stage("sink", 3, 0) and "the sink" in view.hover_stage(
        "sink", 3, 0
    )
    wait_result(qtbot, w, lambda: pick(v.sinkCombo, "off-by-one"))
    assert w.state.config.sink == "off-by-one" and not v.sinkLogitCheck.isEnabled()
    assert_heatmaps_equal_core(w)
    wait_result(qtbot, w, lambda: pick(v.sinkCombo, "none"))
    qtbot.waitUntil(lambda: "sink" not in view.stages(), timeout=TIMEOUT_MS)
