"""Every view declares what it keeps (``app/widgets/holdings.py``: ``holdings()``), and its tab's
presenter holds exactly that in the window's memory ledger. The reference here is an independent
walk of the view's attributes, deeper than any declaration: a large array it finds that the view
does not declare fails the test."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import (  # noqa: F401  (fresh_settings: autouse)
    dispose,
    fresh_settings,
    open_tab,
    shown_window,
)
from PySide6.QtWidgets import QVBoxLayout, QWidget

from attndesk.app.widgets.heatmap import MatrixPlot
from attndesk.app.widgets.holdings import Holds, held_by
from attndesk.session.ledger import MemoryLedger, arrays_of
from tests.conftest import TIMEOUT_MS

LARGE = 64 * 1024  # bytes: an array this size or larger must be declared
WALK_DEPTH = 6  # view -> plot -> its items -> image item -> array, and a record's fields below
TEXT = " ".join(f"w{i % 97}" for i in range(240))  # 4 heads x 240^2 float32: 0.9 MiB of weights


def undeclared(view: Holds) -> list[tuple[int, tuple[int, ...]]]:
    """(bytes, shape) of each large array the walk finds in ``view`` that ``view.holdings()`` does
    not cover (counted by the ledger's own rule: each block of memory once)."""
    declared = view.holdings()
    ledger = MemoryLedger()
    base = ledger.hold("test", "declared", declared).nbytes
    missing = []
    for array in arrays_of(view, WALK_DEPTH):
        size = int(getattr(array, "nbytes", 0))
        if size >= LARGE and MemoryLedger().hold("test", "with", [*declared, array]).nbytes > base:
            missing.append((size, tuple(array.shape)))
    return missing


class _View(QWidget):
    """A view with a plot and an array of its own; ``declare`` says which of them it declares."""

    def __init__(self, declare_own: bool) -> None:
        super().__init__()
        self.plot = MatrixPlot("a matrix")
        QVBoxLayout(self).addWidget(self.plot)
        self.plot.set_matrix(np.random.default_rng(0).random((200, 200)))
        self.cache = np.zeros(20_000)  # 160,000 bytes of its own
        self.declare_own = declare_own

    def holdings(self) -> list:
        return held_by(self.plot, self.cache if self.declare_own else None)


@pytest.mark.parametrize("declare_own", [True, False])
def test_an_undeclared_large_array_is_found(qtbot, declare_own):
    view = _View(declare_own)
    qtbot.addWidget(view)
    view.show()
    assert view.plot.matrix is not None and any(a is view.plot.matrix for a in view.plot.holdings())
    assert isinstance(view, Holds)
    assert undeclared(view) == ([] if declare_own else [(view.cache.nbytes, view.cache.shape)])


def test_a_plot_declares_its_matrix_and_the_images_it_draws(qtbot):
    plot = MatrixPlot("a matrix")
    qtbot.addWidget(plot)
    plot.show()
    plot.set_matrix(np.where(np.eye(300, dtype=bool), np.nan, 1.0))  # hatched cells
    held = plot.holdings()
    drawn = [plot.matrix, plot.masked, plot.image_data, plot.image.image, plot.overlay.image]
    assert all(any(a is array for a in held) for array in drawn if array is not None)
    assert undeclared(plot) == []
    plot.clear()
    assert not any(a is plot.matrix for a in plot.holdings()) and plot.matrix is None


@pytest.fixture
def window(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.update({"text": TEXT, "config": w.state.config.replace(num_heads=4)})
    yield w
    dispose(w)


@pytest.mark.parametrize("tab", ["step-through", "positions", "online-softmax"])
def test_each_tab_holds_what_its_view_declares(qtbot, window, tab):
    w, ledger = window, window.compute.ledger
    view, presenter = w.tab_widget(tab), w.tab_presenter(tab)
    label = f"the {tab.replace('-', ' ')} tab's copies"
    open_tab(w, view)
    qtbot.waitUntil(lambda: any(h.label == label for h in ledger.holdings()), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: not w.compute.side.any_busy(), timeout=TIMEOUT_MS)
    held = next(h for h in ledger.holdings() if h.label == label)
    assert held.protected and held.nbytes > LARGE
    assert undeclared(view) == []
    presenter.hold_copies()  # asked again now: the holding is the declaration, counted once per block
    held = next(h for h in ledger.holdings() if h.label == label)
    assert held.nbytes == MemoryLedger().hold("test", "declared", view.holdings()).nbytes


def test_a_real_models_tabs_hold_what_their_views_declare(qtbot):
    """Rollout and head statistics on the packaged MiniLM (its whole run, every layer)."""
    from attndesk.session.state import PACKAGED

    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    try:
        ledger = w.compute.ledger
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda r: r.layers is not None):
            w.state.update({"text": " ".join(["the cat sat on the mat."] * 30), "cross": False})
            w.parametersPanel.modeCombo.setCurrentIndex(w.parametersPanel.mode_index(PACKAGED))
        rollout = w.tab_widget("rollout")
        open_tab(w, rollout)
        qtbot.waitUntil(
            lambda: any(h.label == "the rollout tab's copies" for h in ledger.holdings()), timeout=TIMEOUT_MS
        )
        qtbot.waitUntil(lambda: not w.compute.side.any_busy(), timeout=TIMEOUT_MS)
        assert undeclared(rollout) == [] and any(a.nbytes >= LARGE for a in rollout.holdings())
        w.tab_presenter("rollout").hold_copies()
        held = next(h for h in ledger.holdings() if h.label == "the rollout tab's copies")
        assert held.nbytes == MemoryLedger().hold("test", "declared", rollout.holdings()).nbytes
        stats = w.tab_widget("head-stats")  # statistics of every head: numbers, no large array
        with qtbot.waitSignal(w.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):
            open_tab(w, stats)
        assert undeclared(stats) == []
    finally:
        dispose(w)
