"""The window's memory ledger, driven through the real window: a pinned A, a teaching pair and
B − A are held beside the run on screen; lowering the budget lets go of them (least recently used
first, saying so on the status line) and of nothing still drawn."""

from __future__ import annotations

import gc
import weakref

import pytest
from app_helpers import dispose, fresh_settings, open_tab, shown_window  # noqa: F401  (fresh_settings: autouse)

from attndesk.app.jobs import channels

TIMEOUT_MS = 20000
MiB = 2**20
TEXT = " ".join(f"w{i % 97}" for i in range(240))  # 4 heads x 240^2 float32: 0.9 MiB of weights


@pytest.fixture
def window(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.update({"text": TEXT, "config": w.state.config.replace(num_heads=4)})
    yield w
    dispose(w)


def labels(ledger) -> list[str]:
    return [h.label for h in ledger.holdings()]


def kept(ledger) -> int:
    """Bytes of what is never let go: the run on screen and the model it came from."""
    return sum(h.nbytes for h in ledger.holdings() if h.release_fn is None)


def test_lowering_the_budget_lets_go_of_a_and_the_teaching_pair_not_of_what_is_drawn(qtbot, window):
    w, ledger = window, window.compute.ledger
    view = w.tab_widget("compare")
    open_tab(w, view)
    messages: list[str] = []
    w.status.events.message.connect(messages.append)
    a = w.displayed_result().toy.result
    view.pin()
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.set_config(seed=a.config.seed + 1)  # B: another model; A now costs its own bytes
    qtbot.waitUntil(lambda: view.diff() is not None, timeout=TIMEOUT_MS)
    view.teachButtons["scaled"].click()
    qtbot.waitUntil(lambda: view.teaching() is not None, timeout=TIMEOUT_MS)
    held = labels(ledger)
    assert any(x.startswith("the run on screen") for x in held) and "pinned A" in held
    assert any("teaching pair" in x for x in held) and "B − A and the compare pictures" in held
    assert any(x.startswith("the toy model") and "(in use)" in x for x in held)  # the model cache is held too
    run = next(h for h in ledger.holdings() if h.label.startswith("the run on screen"))
    assert run.nbytes >= a.weights.nbytes and ledger.total() <= ledger.budget

    # room for the run on screen and its model, and not for all the rest
    budget = kept(ledger) + MiB
    assert ledger.total() > budget
    watched = weakref.ref(a.weights)
    del a
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.set_config(memory_budget=budget)  # the budget is the config's: B runs again under it
    qtbot.waitUntil(lambda: view.pinned_result() is None and view.teaching() is None, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: not w.compute.is_pending() and not w.compute.side.any_busy(), timeout=TIMEOUT_MS)
    qtbot.wait(50)  # posted releases and lines
    assert ledger.budget == budget and ledger.total() <= budget
    said = [m for m in messages if "let go of" in m]
    assert any("pinned A" in m for m in said) and any("teaching pair" in m for m in said)
    assert "A was unpinned" in view.plotA.message.text()
    # nothing drawn was freed under it: what is held is what is drawn
    run = next(h for h in ledger.holdings() if h.label.startswith("the run on screen"))
    source = w.heatmaps().source()
    assert source is not None and run.alive and w.displayed_result().map.weights is source.base_map.weights
    assert view.displayed()[0] is None and view.displayed()[1] is not None  # A cleared, B still drawn
    gc.collect()
    assert watched() is None  # A's weights were really let go, not only struck off the books


def test_a_holding_that_cannot_fit_is_refused_saying_what_fits(qtbot, window):
    w, ledger = window, window.compute.ledger
    ledger.set_budget(kept(ledger) + 1024)
    view = w.tab_widget("compare")
    open_tab(w, view)
    failed = []
    w.tab_presenter("compare").failed.connect(failed.append)
    view.teachButtons["masked"].click()  # two runs of the model: more than 1 KiB
    assert failed and not w.compute.side.is_busy(channels.TEACHING)  # refused before anything was computed
    assert view.teaching() is None and "comparison failed" in view.maxLabel.text()
    assert "fits in the" in view.maxLabel.text() and "the run on screen" in view.maxLabel.text()
    assert ledger.total() <= ledger.budget or all(h.release_fn is None or h.protected for h in ledger.holdings())


def test_hidden_tabs_copies_are_held_and_let_go_first(qtbot, window):
    w, ledger = window, window.compute.ledger
    w.viewTabs.setCurrentWidget(w.tab_page("step-through"))
    qtbot.waitUntil(lambda: any("step through" in x for x in labels(ledger)), timeout=TIMEOUT_MS)
    held = next(h for h in ledger.holdings() if "step through" in h.label)
    assert held.protected and held.nbytes > 0
    w.viewTabs.setCurrentWidget(w.tab_page("head-stats"))  # left: no longer protected
    hidden = next(h for h in ledger.holdings() if "step through" in h.label)
    assert not hidden.protected
    protected = [h for h in ledger.holdings() if h.protected]
    for _ in range(10):  # a byte more than is free each time: the least recently used unprotected one goes
        if not hidden.alive:
            break
        ledger.reserve(ledger.free() + 1, "a test's array")
    qtbot.wait(50)
    assert not hidden.alive and all(h.alive for h in protected)
    assert not any("step through" in x for x in labels(ledger))
    assert w.tab_widget("step-through").infoLabel.text() == ""  # the tab let go of its stages
    w.viewTabs.setCurrentWidget(w.tab_page("step-through"))  # shown again: drawn again, and held again
    qtbot.waitUntil(lambda: any("step through" in x for x in labels(ledger)), timeout=TIMEOUT_MS)


def test_the_pretrained_grid_and_model_are_held_and_the_model_in_use_never_goes(qtbot):
    from attndesk.session.state import PACKAGED

    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    try:
        ledger = w.compute.ledger
        with qtbot.waitSignal(
            w.resultDisplayed, timeout=4 * TIMEOUT_MS, check_params_cb=lambda r: r.layers is not None
        ):
            w.state.update({"text": "The cat sat on the mat.", "cross": False})
            w.parametersPanel.modeCombo.setCurrentIndex(w.parametersPanel.mode_index(PACKAGED))
        w.pretrained.controls.all_layers_check.setChecked(True)
        grid = w.pretrained.grid
        qtbot.waitUntil(lambda: any("layer grid" in x for x in labels(ledger)), timeout=TIMEOUT_MS)
        held = {h.label: h for h in ledger.holdings()}
        model = next(h for x, h in held.items() if "all-MiniLM-L6-v2 (in use)" in x)
        assert model.protected and model.release_fn is None and model.nbytes > 80 * MiB  # its parameters
        thumbnails = held["the layer grid's thumbnails"]
        assert thumbnails.protected and grid.painting() is not None
        ledger.set_budget(kept(ledger))  # only what cannot go fits: the thumbnails go, the model stays
        qtbot.waitUntil(lambda: grid.painting() is None, timeout=TIMEOUT_MS)
        assert not thumbnails.alive and model.alive and ledger.total() <= ledger.budget
        assert "let go of" in w.status.message and "the layer grid's thumbnails" in w.status.message
    finally:
        dispose(w)


def test_a_run_makes_room_for_its_working_memory_before_it_computes(qtbot, window):
    """The run being computed counts against the budget: the copies hidden tabs keep go first
    (saying so), what is on screen stays."""
    w, ledger = window, window.compute.ledger
    w.viewTabs.setCurrentWidget(w.tab_page("step-through"))
    qtbot.waitUntil(lambda: any("step through" in x for x in labels(ledger)), timeout=TIMEOUT_MS)
    w.viewTabs.setCurrentWidget(w.tab_page("head-stats"))
    hidden = next(h for h in ledger.holdings() if "step through" in h.label)
    assert not hidden.protected
    ledger.set_budget(ledger.total() + MiB)  # the next run's weights alone (0.9 MiB x its copies) do not fit beside it
    messages: list[str] = []
    w.status.events.message.connect(messages.append)
    plans = []
    w.compute.planned.connect(plans.append)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.text = TEXT + " and a few more words"
    assert plans and plans[-1].peak_bytes > MiB
    assert not hidden.alive
    # the ledger says what it let go of in a posted call: on a loaded machine the result can be drawn first
    qtbot.waitUntil(
        lambda: any("let go of" in m and "the run being computed" in m for m in messages), timeout=TIMEOUT_MS
    )
