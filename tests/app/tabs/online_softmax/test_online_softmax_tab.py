"""The "Online softmax" tab inside the real main window: one head of the run on screen walked block
by block; the widgets show the walk's numbers, and its final output equals torch's softmax and
``F.scaled_dot_product_attention`` on the run's own Q, K and V."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt

from attndesk.app.tabs.online_softmax.presenter import ONLINE_SOFTMAX_TAB
from attndesk.app.tabs.online_softmax.view import PRINT_DIGITS
from attndesk.core import run_attention
from attndesk.session.state import PACKAGED
from tests.conftest import TIMEOUT_MS

TAB = "online-softmax"


def open_walk(qtbot, w, action=None):
    """Do ``action`` (default: open the tab) and wait until the walk and its first picture are drawn."""
    view = w.tab_widget("online-softmax")
    with qtbot.waitSignals([w.tab_presenter("online-softmax").walkShown, view.stepDrawn], timeout=TIMEOUT_MS):
        (action or (lambda: setattr(w.state.view, "tab", TAB)))()
    return view


def reference(w, walk_shown):
    """For the head walked: torch's softmax of the scores the walk read, times V of an independent
    run that kept its stages (float64), and torch's SDPA from that run's Q, K, V (no bias or cap)."""
    run = run_attention(w.state.config, w.state.text, keep_intermediates=True, key_text=w.state.keys_text())
    inter, head = run.intermediates, walk_shown.head
    kv = head // (inter.q.shape[0] // inter.k.shape[0])
    q, k, v = (torch.from_numpy(x.astype(np.float64)) for x in (inter.q[head], inter.k[kv], inter.v[kv]))
    mask = torch.from_numpy(np.ascontiguousarray(run.mask)) if run.mask is not None else None
    sdpa = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0].numpy()
    read = np.concatenate([s.scores for s in walk_shown.walk.steps], axis=1)  # [Lq, Lk] block by block
    np.testing.assert_allclose(read, inter.masked[head], rtol=1e-6, atol=1e-6)  # the run's scores (float32)
    softmax = (torch.softmax(torch.from_numpy(read), -1) @ v).numpy()
    return run, sdpa, softmax


def test_walk_of_the_shown_head_equals_torch(qtbot, window):
    w = window
    w.state.set_config(num_heads=4, kv_heads=2, mask="causal")
    qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS).wait()
    view = open_walk(qtbot, w)
    assert w.viewTabs.tabText(w.viewTabs.currentIndex()) == "Online softmax"
    walk_shown = view.shown()
    run, sdpa, softmax = reference(w, walk_shown)
    n = len(run.tokens)
    assert walk_shown.head == 0 and walk_shown.kv_head == 0 and walk_shown.block == 4
    assert walk_shown.steps == -(-n // 4) and view.stepSlider.maximum() == walk_shown.steps - 1
    np.testing.assert_allclose(walk_shown.walk.output, softmax, rtol=0, atol=1e-14)
    np.testing.assert_allclose(walk_shown.walk.output, sdpa, rtol=0, atol=1e-5)  # from Q, K, V in float64
    np.testing.assert_allclose(walk_shown.walk.weights, run.weights[0], atol=1e-6)
    # the first step: the plot is the softmax over keys 0..3, the rest hatched; the table its numbers
    first = walk_shown.walk.steps[0]
    np.testing.assert_allclose(view.plot.matrix[:, :4].sum(axis=1)[np.isfinite(first.max_after)], 1.0, atol=1e-12)
    assert view.plot.masked[:, 4:].all() and view.stepLabel.text().startswith(f"step 1 / {walk_shown.steps}")
    assert view.model.cell(2, 3) == f"{first.max_after[2]:.6g}" and view.model.rowCount() == n
    # next, next …: the running values follow the core's steps, and the last picture is the full softmax
    for step in range(1, walk_shown.steps):
        with qtbot.waitSignal(view.stepDrawn, timeout=TIMEOUT_MS):
            qtbot.mouseClick(view.nextButton, Qt.MouseButton.LeftButton)
        s = walk_shown.walk.steps[step]
        assert (
            view.step() == step
            and view.model.cell(5, 4) == f"{s.rescale[5]:.6g}"
            and view.model.cell(5, 6) == f"{s.sum_after[5]:.6g}"
        )
        assert f"rescale exp(m_old - m_new) = {s.rescale[view.query()]:.6g}" in view.stepText.toPlainText()
    np.testing.assert_allclose(view.plot.matrix, run.weights[0], atol=1e-6)
    assert not view.nextButton.isEnabled() and view.plot.masked[np.triu_indices(n, 1)].all()
    # the end printed both ways, digit for digit, and the memory it never needed
    text = view.finalText.toPlainText()
    row = view.query()
    online = "[" + ", ".join(f"{x:.{PRINT_DIGITS}g}" for x in walk_shown.walk.output[row]) + "]"
    full = "[" + ", ".join(f"{x:.{PRINT_DIGITS}g}" for x in softmax[row]) + "]"
    assert f"online, block by block  {online}" in text and f"full softmax(S) V       {full}" in text
    assert online == full and "(the same digits)" in text and "less than half its last printed digit" in text
    assert f"one head's weights are {n} x {n} = {n * n:,} numbers" in text and "32,768 tokens" in text


def test_head_and_block_choices_walk_again(qtbot, window):
    w = window
    w.state.set_config(num_heads=4, position="alibi", softcap=3.0)
    qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS).wait()
    view = open_walk(qtbot, w)
    view = open_walk(qtbot, w, lambda: view.headCombo.setCurrentIndex(3))
    view = open_walk(qtbot, w, lambda: view.set_block(1))
    shown = view.shown()
    run, _sdpa, softmax = reference(w, shown)
    assert (shown.head, shown.block, shown.steps) == (3, 1, len(run.tokens))
    np.testing.assert_allclose(shown.walk.output, softmax, rtol=0, atol=1e-14)
    np.testing.assert_allclose(shown.context, run.intermediates.context[3], atol=1e-6)  # the run's own head
    # the heatmaps' head choice is followed
    view = open_walk(qtbot, w, lambda: setattr(w.state.view, "target", 1))
    assert view.shown().head == 1 and view.head() == 1
    # a new run while the tab is on screen walks it
    view = open_walk(qtbot, w, lambda: w.state.set_config(seed=w.state.config.seed + 1))
    _run, _sdpa, softmax = reference(w, view.shown())
    np.testing.assert_allclose(view.shown().walk.output, softmax, rtol=0, atol=1e-14)


def test_a_real_model_gets_a_reason_not_a_stale_walk(qtbot, window):
    w = window
    view = open_walk(qtbot, w)
    assert view.shown() is not None
    with qtbot.waitSignal(w.resultDisplayed, timeout=120000):
        w.state.mode = PACKAGED
    off = w.empty_state(ONLINE_SOFTMAX_TAB)  # the window's empty state, not a greyed form
    assert view.shown() is None and w.tab_page(ONLINE_SOFTMAX_TAB).currentWidget() is off
    assert "toy model" in off.sentence() and off.action() == "Switch to the toy model"


def test_rows_pick_the_query_and_another_head_keeps_the_step(qtbot, window):
    w = window
    w.state.set_config(num_heads=2)
    qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS).wait()
    view = open_walk(qtbot, w)
    with qtbot.waitSignal(view.stepDrawn, timeout=TIMEOUT_MS):
        view.stepSlider.setValue(2)
    view.table.setFocus()
    qtbot.mouseClick(
        view.table.viewport(), Qt.MouseButton.LeftButton, pos=view.table.visualRect(view.model.index(4, 1)).center()
    )
    qtbot.keyClick(view.table, Qt.Key.Key_Down)
    assert view.query() == 5 and view.plot.highlighted()["row"] == (5,)
    s = view.shown().walk.steps[2]
    assert f"query 5 {view.shown().queries[5]!r}:" in view.stepText.toPlainText()
    assert f"running sum l = rescale x {s.sum_before[5]:.6g}" in view.stepText.toPlainText()
    view = open_walk(qtbot, w, lambda: view.set_head(1))
    assert view.shown().head == 1 and view.step() == 2 and view.query() == 5
    assert view.table.selectionModel().isRowSelected(5)


def test_a_block_too_small_for_the_memory_budget_is_refused_with_what_fits(qtbot, window):
    w = window
    w.state.text = " ".join(["the cat sat on the mat"] * 40)  # 240 tokens
    w.state.set_config(num_heads=4, memory_budget=4 << 20)  # the run and an auto walk fit, 1-key blocks not
    qtbot.waitUntil(
        lambda: w.displayed_result() is not None and w.displayed_result().map.weights.shape[-1] == 240,
        timeout=TIMEOUT_MS,
    )
    view = open_walk(qtbot, w)
    assert view.shown().block >= 4 and view.shown().walk.weights.shape == (240, 240)
    with qtbot.waitSignal(w.tab_presenter("online-softmax").failed, timeout=TIMEOUT_MS) as failed:
        view.set_block(1)
    assert "blocks of 1 key(s) keeps" in failed.args[0] and "over the memory budget of 4.0 MiB" in failed.args[0]
    assert "keys fit" in failed.args[0]


def test_the_walk_of_a_head_with_a_sink_starts_from_the_sink(qtbot, window):
    w = window
    w.state.set_config(mask="causal", sink="learned", sink_logit=1.5)
    qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS).wait()
    walk_shown = open_walk(qtbot, w).shown()
    run = run_attention(w.state.config, w.state.text, keep_intermediates=True)
    inter, head = run.intermediates, walk_shown.head
    kv = head // (inter.q.shape[0] // inter.k.shape[0])
    read = torch.from_numpy(np.concatenate([s.scores for s in walk_shown.walk.steps], axis=1))
    column = torch.full((read.shape[0], 1), 1.5, dtype=read.dtype)  # the sink: one more column, no value
    weights = torch.softmax(torch.cat([read, column], -1), -1)[:, :-1]
    np.testing.assert_allclose(
        walk_shown.walk.output, (weights @ torch.from_numpy(inter.v[kv]).double()).numpy(), atol=1e-14
    )
    np.testing.assert_allclose(walk_shown.walk.weights, run.weights[head], atol=1e-6)
    assert (walk_shown.walk.steps[0].max_before == 1.5).all()
