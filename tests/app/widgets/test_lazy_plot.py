"""LazyPlot: a plot built on its holder's first show or on first use, never before; the holder's
size hints the same before and after; what waits for the plot runs once it is built."""

from __future__ import annotations

import pyqtgraph as pg
from app_helpers import fresh_settings  # noqa: F401  (autouse)
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QVBoxLayout, QWidget

from attndesk.app.widgets.lazy_plot import LazyPlot


def page(qtbot, *holders: QWidget) -> QWidget:
    top = QWidget()
    qtbot.addWidget(top)
    layout = QVBoxLayout(top)
    for holder in holders:
        layout.addWidget(holder)
    top.resize(500, 600)
    return top


def test_the_plot_is_built_on_first_show_in_the_holders_place(qtbot):
    made: list[pg.PlotWidget] = []

    def build() -> pg.PlotWidget:
        made.append(pg.PlotWidget())
        made[-1].plot([1.0, 2.0, 3.0], [3.0, 1.0, 2.0])
        return made[-1]

    holder = LazyPlot(build, minimum=(0, 200))
    drawn: list[int] = []
    holder.when_built(lambda: drawn.append(len(holder.plot.getPlotItem().listDataItems())))
    top = page(qtbot, holder)
    fresh = pg.PlotWidget()
    hint, minimum = holder.sizeHint(), holder.minimumSizeHint()
    assert not holder.built and made == [] and drawn == []
    assert hint == fresh.sizeHint() and minimum == QSize(fresh.minimumSizeHint().width(), 200)
    fresh.deleteLater()
    top.show()
    qtbot.waitExposed(top)
    assert holder.built and len(made) == 1 and drawn == [1]  # built once, the waiting action run once
    plot = holder.plot
    assert plot.parent() is holder and plot.isVisible()
    qtbot.waitUntil(lambda: plot.geometry() == holder.rect())
    assert holder.minimumSizeHint() == minimum and plot.minimumHeight() == 200
    holder.when_built(lambda: drawn.append(-1))  # built: at once
    assert drawn == [1, -1] and holder.getViewBox() is plot.getViewBox()


def test_the_plot_is_built_on_first_use_and_shown_with_its_page(qtbot):
    holder = LazyPlot(pg.PlotWidget)
    top = page(qtbot, holder)
    curve = holder.getPlotItem().plot([0.0, 1.0], [1.0, 0.0])  # first use, the page hidden: built
    assert holder.built and not holder.plot.isVisible()
    top.show()
    qtbot.waitExposed(top)
    assert holder.plot.isVisible() and curve.getData()[1].tolist() == [1.0, 0.0]
    qtbot.waitUntil(lambda: holder.plot.size() == holder.size())
    assert holder.sizeHint() == holder.plot.sizeHint()  # a plain plot's hint follows its size, as before


def test_a_steady_holder_keeps_a_new_plots_size_hint(qtbot):
    holder = LazyPlot(pg.PlotWidget, steady_hint=True)
    top = page(qtbot, holder)
    before = holder.sizeHint()
    top.show()
    qtbot.waitExposed(top)
    qtbot.waitUntil(lambda: holder.plot.size() == holder.size())
    assert holder.plot.sizeHint() != before and holder.sizeHint() == before
