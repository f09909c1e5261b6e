"""The window's plots are built when their tab is first shown (or warmed), never with the window:
a new window has built none of the plots of its tabs not on show, and what a view drew into a plot
not built yet is in it once built."""

from __future__ import annotations

import numpy as np
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse)
from PySide6.QtWidgets import QWidget

from attndesk.app.tabs.circuit.view import CircuitView
from attndesk.app.tabs.corpus.plots import AtlasPlot, HeadGrid, MetricHistogram
from attndesk.app.tabs.generate.view import TopTokenBars
from attndesk.app.tabs.headstats.view import HeadStatsView
from attndesk.app.tabs.positions.view import PositionalView, rope_table
from attndesk.app.widgets.heatmap import MatrixPlot
from attndesk.app.widgets.lazy_plot import LazyPlot
from attndesk.app.window.main_window import MainWindow
from attndesk.teaching.statistics import head_statistics

TIMEOUT_MS = 20000


def built(widget: QWidget) -> list[bool]:
    return [holder.built for holder in widget.findChildren(LazyPlot)]


def test_a_new_window_builds_only_the_plots_of_the_tab_it_shows(qtbot):
    w = MainWindow(restore=False)
    try:
        tabs = w.viewTabs
        pages = [tabs.widget(i) for i in range(tabs.count())]
        assert sum(len(built(page)) for page in pages) > 40  # the heatmaps' and the plain plots
        assert not any(flag for page in pages for flag in built(page))
        w.resize(1300, 850)
        w.show()
        qtbot.waitExposed(w)
        shown = tabs.currentWidget()
        assert all(built(shown))
        train = w.tab_widget("train")
        assert not any(built(w.tab_page("train"))) and not any(built(w.tab_page("kvcache")))
        # drawn while the tab is hidden: kept, and in the plots once the tab shows them
        steps, loss = np.arange(1.0, 41.0), np.linspace(3.0, 0.5, 40)
        evals, accuracy, pattern = np.array([10.0, 20.0, 40.0]), np.array([0.1, 0.5, 0.9]), np.array([0.0, 0.4, 0.8])
        train.show_curves(steps, loss, evals, accuracy, pattern)
        train.curves.show_phase(20)
        assert not train.curves.lossHolder.built and not train.curves.metricHolder.built
        w.state.view.tab = "train"
        assert train.curves.lossHolder.built and train.curves.metricHolder.built
        np.testing.assert_array_equal(train.curves.lossCurve.getData()[1], loss)
        np.testing.assert_array_equal(train.curves.accuracyCurve.getData()[0], evals)
        np.testing.assert_array_equal(train.curves.patternCurve.getData()[1], pattern)
        assert [line.value() for line in train.curves.phaseLines if line.isVisible()] == [20, 20]
        assert (
            train.curves.lossPlot.isVisible()
            and train.curves.metricPlot.getPlotItem().titleLabel.text.count("span") == 4
        )
    finally:
        qtbot.waitUntil(lambda: not w.compute.any_job_running(), timeout=TIMEOUT_MS)
        dispose(w)


def show(qtbot, view: QWidget) -> None:
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    qtbot.waitExposed(view)


def holders(view: QWidget) -> list[LazyPlot]:
    """The view's plain plots (a MatrixPlot builds its plot as soon as it is given a matrix)."""
    found = [view] if isinstance(view, LazyPlot) else view.findChildren(LazyPlot)
    return [holder for holder in found if not isinstance(holder.parent(), MatrixPlot)]


def test_what_a_view_draws_before_its_plot_is_built_is_drawn_once_it_is(qtbot):
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(6), size=(3, 6))  # [heads, queries, keys]
    stats = head_statistics(weights)
    heads = HeadStatsView()
    heads.set_statistics(stats, (6, 6))
    table = rope_table(12, 8)
    positions = PositionalView()
    positions.show_rope(table)
    circuit = CircuitView()
    circuit.set_head_map(weights[1], (list("abcdef"), list("abcdef")), 1, 2)
    bars = TopTokenBars()
    bars.set_bars(["a", "b"], np.array([0.7, 0.2]), 0)
    grid, histogram, atlas = HeadGrid(), MetricHistogram(), AtlasPlot()
    grid.set_values(rng.random((2, 3)), np.full((2, 3), "induction", dtype=object))
    histogram.set_values(rng.random(6), "entropy")
    atlas.set_points(np.arange(4.0), np.arange(4.0) * 10, np.array([True, False, True, False]), lambda i: "")
    views = (heads, positions, circuit, bars, grid, histogram, atlas)
    assert all(holders(view) for view in views)
    assert not any(holder.built for view in views for holder in holders(view))
    for view in views:
        show(qtbot, view)
    qtbot.waitUntil(lambda: positions.offsetHolder.built)  # its host reveals it a turn later
    assert all(holder.built for view in (heads, circuit, bars, grid, histogram, atlas) for holder in holders(view))

    np.testing.assert_allclose(heads.scatter_points(), [[s.mean_distance, s.entropy] for s in stats])
    assert heads.scatter.getPlotItem().titleLabel.text == "one point per head"
    for curve, row in zip(positions.offsetCurves, table.by_offset, strict=True):
        np.testing.assert_array_equal(curve.getData()[1], row)
    assert positions.offsetPlot.getViewBox().viewRange()[0][0] < table.offsets[0] + 1
    assert circuit.headMap.getAxis("left")._tickLevels[0][0] == (0.5, "0 a")
    assert circuit.headMap.getPlotItem().titleLabel.text == "L1.H2 on the clean input"
    assert circuit.headMapHolder.image in circuit.headMap.getPlotItem().items
    np.testing.assert_array_equal(circuit.headMapHolder.image.image, weights[1])
    assert bars._bars in bars.getPlotItem().items
    assert "'a'" in bars.getPlotItem().getAxis("left")._tickLevels[0][0][1]
    assert grid.image in grid.getPlotItem().items and grid.getViewBox().viewRange()[0][1] > 2.9
    assert grid.getPlotItem().getAxis("bottom")._tickLevels[0] == [(0.5, "0"), (1.5, "1"), (2.5, "2")]
    assert histogram.getPlotItem().getAxis("bottom").labelText == "entropy"
    assert histogram.bars in histogram.getPlotItem().items
    assert {atlas.queries, atlas.keys} <= set(atlas.getPlotItem().items)
    (x0, x1), (y0, y1) = atlas.getViewBox().viewRange()
    assert x0 <= 0 and x1 >= 3 and y0 <= 0 and y1 >= 30  # fitted to its points as it was built
