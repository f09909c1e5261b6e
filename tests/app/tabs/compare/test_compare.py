"""The compare view shows A, B and exactly B - A; teaching pairs; the implementation table."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from views_helpers import cell_pixel, close_rgb

from attndesk.app.tabs.compare.view import CompareView, Operand
from attndesk.app.tabs.implementation.view import ImplementationPanel
from attndesk.attention.types import MEAN
from attndesk.core import AttentionConfig, run_attention
from attndesk.render import colormaps
from attndesk.session.results import text_of
from attndesk.teaching.tutorial import create_padding_mark, float32_relative_bound, tutorial_masked_softmax

TEXT = "the cat sat on the mat"
CFG = AttentionConfig(num_heads=2, embed_dim=8, mask="causal")


@pytest.fixture
def view(qtbot):
    v = CompareView()
    qtbot.addWidget(v)
    v.resize(1200, 600)
    v.show()
    return v


def test_text_of_round_trips_through_the_tokenizer():
    result = run_attention(CFG.replace(pad_to=9), "The cat, sat!")
    assert run_attention(CFG.replace(pad_to=9), text_of(result)).tokens == result.tokens


def test_diff_view_is_exactly_b_minus_a(view):
    a = run_attention(CFG, TEXT)
    b = run_attention(CFG.replace(seed=5), TEXT)
    view.set_result(a)
    view.pin()
    view.set_result(b)
    exact = b.weights.astype(np.float64) - a.weights.astype(np.float64)
    assert np.array_equal(view.diff().diff, exact)
    view.set_head(1)
    shown_a, shown_b, shown_diff = view.displayed()
    assert np.array_equal(shown_a, a.weights[1]) and np.array_equal(shown_b, b.weights[1])
    assert np.array_equal(shown_diff, exact[1])
    lo, hi = view.plotDiff.levels
    assert lo == -hi == -np.abs(exact[1]).max()  # centred at 0
    assert view.plotDiff.colormap_name == "CET-D1"
    assert f"{np.abs(exact).max():.6g}" in view.maxLabel.text()
    view.set_head(MEAN)  # mean over heads
    np.testing.assert_array_equal(view.displayed()[2], exact.mean(axis=0))


def test_zero_difference_is_drawn_as_the_centre_colour(view):
    a = run_attention(CFG.replace(mask="none"), TEXT)
    view.set_result(a)
    view.pin()
    view.set_result(run_attention(CFG.replace(mask="none"), TEXT))
    assert view.diff().max_abs == 0.0
    centre = colormaps.map_values(np.array([0.0]), "CET-D1", -1.0, 1.0)[0]
    assert close_rgb(cell_pixel(view.plotDiff, 2, 3), centre)


def test_positive_and_negative_differences_get_opposite_ends(view):
    view.set_result(run_attention(CFG, TEXT))
    view.pin()
    view.set_result(run_attention(CFG.replace(mask="none"), TEXT))  # weight moves onto the upper triangle
    view.set_head(0)
    diff = view.displayed()[2]
    assert diff[0, 5] > 0 and diff[0, 0] < 0
    lo, hi = view.plotDiff.levels
    top = colormaps.map_values(np.array([diff[0, 5]]), "CET-D1", lo, hi)[0]
    bottom = colormaps.map_values(np.array([diff[0, 0]]), "CET-D1", lo, hi)[0]
    assert close_rgb(cell_pixel(view.plotDiff, 0, 5), top)
    assert close_rgb(cell_pixel(view.plotDiff, 0, 0), bottom)
    assert top[0] > top[2] and bottom[2] > bottom[0]  # red for B > A, blue for B < A


def test_shape_mismatch_is_a_message_not_a_crash(view):
    view.set_result(run_attention(CFG, TEXT))
    view.pin()
    view.set_result(run_attention(CFG.replace(num_heads=4), TEXT))
    assert view.diff() is None
    assert "heads back to 2" in view.maxLabel.text()
    assert "heads back to 2" in view.plotDiff.message.text()
    assert view.plotDiff.matrix is None and view.plotB.matrix is not None


def test_a_head_that_a_lacks_is_a_message_not_an_index_error(view):
    """A pinned with 2 heads, B with 4: picking head 3 (found by the soak: IndexError in _redraw)."""
    a = run_attention(CFG, TEXT)
    b = run_attention(CFG.replace(num_heads=4), TEXT)
    view.set_result(a)
    view.pin()
    view.set_result(b)
    view.set_head(3)  # a slot raising here fails the test (pytest-qt captures it)
    shown_a, shown_b, shown_diff = view.displayed()
    assert shown_a is None and "no H3" in view.plotA.message.text()
    assert np.array_equal(shown_b, b.weights[3]) and shown_diff is None
    assert "heads back to 2" in view.maxLabel.text()  # the comparison's own message stays
    view.set_head(1)  # a head both have: A is drawn again
    assert np.array_equal(view.displayed()[0], a.weights[1])


def test_a_difference_over_the_memory_budget_is_refused_a_and_b_still_drawn(view):
    """B − A is float64 of every head: held to the memory budget as it is now (seed 778's soak:
    A and B from a run under 2 GiB kept, the budget lowered to 96 MiB, B − A of all heads made)."""
    config = CFG.replace(num_heads=4)
    a, b = run_attention(config, TEXT * 8), run_attention(config.replace(seed=5), TEXT * 8)
    need = 8 * b.weights.size  # float64 of every head, beside one head's |B - A|
    budget = {"bytes": need}
    view.memory_budget = lambda: budget["bytes"]
    view.set_result(a)
    view.pin()
    view.set_result(b)
    assert view.diff() is None and view.plotDiff.matrix is None
    assert "memory budget" in view.plotDiff.message.text() and "raise the budget" in view.maxLabel.text()
    view.set_head(2)
    assert np.array_equal(view.displayed()[0], a.weights[2]) and np.array_equal(view.displayed()[1], b.weights[2])
    budget["bytes"] = None  # no budget: the exact difference
    view.refresh()
    assert np.array_equal(view.diff().diff, b.weights.astype(np.float64) - a.weights)


def test_a_pinned_result_over_a_lowered_budget_is_let_go_saying_so(qtbot, view):
    from attndesk.session.ledger import MemoryLedger, arrays_of

    view.ledger = ledger = MemoryLedger(None, post=lambda fn: fn())
    a = run_attention(CFG, TEXT)
    run = ledger.hold("window", "the run on screen", arrays_of(a), None, protected=True)
    view.set_result(a)
    view.pin()
    ledger.set_budget(1)  # A is B, the run on screen: letting it go would free nothing
    assert view.pinned_result() is not None
    b = run_attention(CFG.replace(seed=5), TEXT)
    run.release()
    ledger.set_budget(None)
    ledger.hold("window", "the run on screen", arrays_of(b), None, protected=True)
    view.set_result(b)
    ledger.set_budget(ledger.total())
    assert view.pinned_result() is not None
    ledger.set_budget(ledger.total() - 1)  # A goes first (least recently used, not protected)
    assert view.pinned_result() is None and view.ledger_holdings()["pin"] is None
    assert "A was unpinned" in view.plotA.message.text() and "let go of pinned A" in view.plotA.message.text()
    assert view.plotA.matrix is None  # nothing drawn from A is left
    view.pin()  # pinning again: the note goes
    assert view.pinned_result() is not None and view.plotA.matrix is not None


def test_output_difference(view):
    a = run_attention(CFG, TEXT)
    b = run_attention(CFG.replace(scaled=False), TEXT)
    view.set_result(a)
    view.pin()
    view.set_result(b)
    view.whatCombo.setCurrentIndex(view.whatCombo.findData("output"))
    assert np.array_equal(view.displayed()[2], b.output.astype(np.float64) - a.output.astype(np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tutorial_button_shows_the_variants_real_effect(view, qtbot, dtype):
    view.set_result(run_attention(CFG.replace(dtype=dtype), TEXT), TEXT)
    with qtbot.waitSignal(view.teachingRequested) as blocker:
        view.teachButtons["tutorial"].click()
    assert blocker.args == ["tutorial"]
    t = view.teaching()
    assert t is not None and t.kind == "tutorial"
    a = t.a
    pad = a.token_ids == 0
    assert pad.any()
    view.set_head(0)
    shown_a, shown_b, shown_diff = view.displayed()
    scores = torch.as_tensor(a.intermediates.scaled).to(getattr(torch, dtype))[None]
    variant = tutorial_masked_softmax(scores, create_padding_mark(torch.as_tensor(a.token_ids)[None]))[0]
    assert np.array_equal(shown_b, variant[0].float().numpy())
    assert np.all(shown_a[:, pad] == 0)  # the correct mask: no weight on padding
    assert np.all(shown_b[~pad][:, pad] > 0)  # the variant: real queries still attend to padding
    plain = torch.softmax(scores, dim=-1)[0, 0].numpy().astype(np.float64)
    gap = np.abs(shown_b.astype(np.float64) - plain).max()
    if dtype == "float64":
        assert gap < 1e-7 and t.effect.max_vs_unmasked < 1e-10
    else:
        assert 1e-5 < t.effect.max_vs_unmasked <= float32_relative_bound()
    assert np.array_equal(shown_diff, shown_b.astype(np.float64) - shown_a.astype(np.float64))
    assert view.explanationText.isVisible()
    text = view.explanationText.toPlainText()
    assert "masks nothing" in text and "QUERY" in text and "measured here" in text
    assert "BUG" in view.plotB.title.text()
    assert view.plotB.masked is not None and not view.plotB.masked.any()  # nothing hatched in B
    # a new live result takes over again
    view.set_result(run_attention(CFG, TEXT))
    assert view.teaching() is None and not view.explanationText.isVisible()


def test_scaled_and_masked_buttons(view):
    view.set_result(run_attention(CFG, TEXT))
    view.teachButtons["scaled"].click()
    assert view.teaching().kind == "scaled"
    assert np.array_equal(view.diff().diff, view.teaching().diff.diff)
    view.teachButtons["masked"].click()
    t = view.teaching()
    assert t.a.config.mask == "causal" and t.b.config.mask == "none"


def test_teaching_runner_is_used_when_set(view):
    calls = []
    view.set_teaching_runner(lambda kind, config, text: calls.append((kind, config.num_heads, text)))
    view.set_result(run_attention(CFG, TEXT))
    view.teachButtons["scaled"].click()
    assert calls == [("scaled", 2, TEXT)] and view.teaching() is None


def test_implementation_panel(qtbot):
    panel = ImplementationPanel()
    qtbot.addWidget(panel)
    panel.set_result(run_attention(AttentionConfig(num_heads=4, embed_dim=16, mask="padding", pad_to=8), TEXT))
    comparison = panel.run_now(repeats=1)
    assert panel.table.rowCount() == 3
    names = [panel.table.item(r, 0).text() for r in range(3)]
    assert names == ["attndesk MultiHeadAttention", "F.scaled_dot_product_attention", "nn.MultiheadAttention"]
    assert panel.table.item(1, 4).text() == "no weights"
    for r, (_name, seconds, d_out, _d_w) in enumerate(comparison.rows()):
        assert panel.table.item(r, 1).text() == f"{seconds * 1e3:.3f}"
        assert float(panel.table.item(r, 3).text()) == pytest.approx(d_out, rel=1e-2, abs=1e-12)
        assert d_out < 1e-5
    assert "8 tokens" in panel.notesLabel.text()


def test_pretrained_layer_results_disable_the_toy_experiments(view, qtbot):
    result = run_attention(CFG, TEXT)
    layer = Operand.of_map(result.attention_map(), result.output, where="layer 2")  # as a real model's layer
    view.set_result(layer)
    assert not any(b.isEnabled() for b in view.teachButtons.values())
    view.set_result(result)
    assert all(b.isEnabled() for b in view.teachButtons.values())
    panel = ImplementationPanel()
    qtbot.addWidget(panel)
    panel.set_result(layer)
    assert not panel.runButton.isEnabled() and panel.run_now() is None


def test_a_and_b_share_one_colour_scale(qtbot):
    from attndesk.core import AttentionConfig, run_attention

    view = CompareView()
    qtbot.addWidget(view)
    cfg = AttentionConfig(num_heads=2, embed_dim=8)
    a = run_attention(cfg, "the cat sat on the mat")
    b = run_attention(cfg.replace(mask="causal"), "the cat sat on the mat")
    view.set_result(a)
    view.pin()
    view.set_result(b)
    top = max(float(a.weights.mean(axis=0).max()), float(b.weights.mean(axis=0).max()))
    assert view.plotA.levels == view.plotB.levels == (0.0, pytest.approx(top))
