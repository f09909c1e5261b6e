"""TabWarmup: the pages of a tab widget not shown yet get their plots (every ``LazyPlot``) built
and are rendered once at the shown page's size while the window idles, without being shown; pages
on show, or of tabs not offered, are left alone. In the real window the Train tab's page is warm before its first switch."""

from __future__ import annotations

import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse)
from PySide6.QtWidgets import QLabel, QTabWidget, QVBoxLayout, QWidget

from attndesk.app.widgets.heatmap import MatrixPlot
from attndesk.app.window.warmup import TabWarmup

TIMEOUT_MS = 20000


def page_of(plots: int) -> QWidget:
    page = QWidget()
    layout = QVBoxLayout(page)
    layout.addWidget(QLabel("a page"))
    for i in range(plots):
        layout.addWidget(MatrixPlot(f"plot {i}"))
    return page


def built(page: QWidget) -> list[bool]:
    return [plot._graphics is not None for plot in page.findChildren(MatrixPlot)]


@pytest.fixture
def tabs(qtbot):
    widget = QTabWidget()
    qtbot.addWidget(widget)
    for name, plots in (("shown", 0), ("two plots", 2), ("off", 1), ("one plot", 1)):
        widget.addTab(page_of(plots), name)
    widget.setTabVisible(2, False)  # a tab the mode does not offer
    widget.resize(700, 500)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_pages_not_shown_are_warmed_without_being_shown(qtbot, tabs):
    warmup = TabWarmup(tabs, delay_ms=0, pace_ms=0)
    assert built(tabs.widget(1)) == [False, False]
    with qtbot.waitSignal(warmup.finished, timeout=TIMEOUT_MS):
        warmup.start()
    assert warmup.done
    assert built(tabs.widget(1)) == [True, True] and built(tabs.widget(3)) == [True]
    assert built(tabs.widget(2)) == [False]  # the tab not offered
    for index in (1, 2, 3):
        assert not tabs.widget(index).isVisible()
    assert tabs.widget(1).size() == tabs.widget(0).size() == tabs.widget(3).size()


def test_a_page_shown_before_its_turn_is_not_warmed_again(qtbot, tabs):
    warmup = TabWarmup(tabs, delay_ms=0, pace_ms=0)
    warmed: list[QWidget] = []
    warmup._next_page_of = warmup._next_page  # the pages handed to warming, in order

    def recorded():
        steps = warmup._next_page_of()
        if steps is not None:
            warmed.append(warmup._page)
        return steps

    warmup._next_page = recorded
    with qtbot.waitSignal(warmup.finished, timeout=TIMEOUT_MS):
        warmup.start()
        tabs.setCurrentIndex(3)  # shown before its turn: its own show builds its plot
    assert warmed == [tabs.widget(1)]  # not the first page either: it was on show
    assert built(tabs.widget(1)) == [True, True]


def test_the_window_warms_the_train_tab_before_its_first_switch(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    try:
        view = w.tab_widget("train")
        assert view.scorePlot._graphics is None  # built on first need
        assert not view.curves.lossHolder.built and not view.curves.metricHolder.built
        qtbot.waitUntil(lambda: w.tabWarmup.done, timeout=TIMEOUT_MS)
        assert view.scorePlot._graphics is not None
        assert view.curves.lossHolder.built and view.curves.metricHolder.built  # the plain plots too
        assert not view.isVisible()
        w.state.view.tab = "train"
        assert view.isVisible()
    finally:
        dispose(w)


def test_a_tab_offered_later_is_warmed_then(qtbot, tabs):
    """A page whose tab the mode hid when its turn came is warmed once a mode offers it (the next
    tab switch finds it offered), without being shown."""
    warmup = TabWarmup(tabs, delay_ms=0, pace_ms=0)
    with qtbot.waitSignal(warmup.finished, timeout=TIMEOUT_MS):
        warmup.start()
    assert built(tabs.widget(2)) == [False]
    tabs.setTabVisible(2, True)  # the mode now offers it
    with qtbot.waitSignal(warmup.finished, timeout=TIMEOUT_MS):
        tabs.setCurrentIndex(1)
    assert built(tabs.widget(2)) == [True] and not tabs.widget(2).isVisible() and warmup.done


def test_the_views_colour_maps_are_read_before_any_page(qtbot, tabs, monkeypatch):
    """pyqtgraph reads a colour map from a file on its first use: the warm-up reads every map the
    views draw with (``COLORMAPS``) first, into pyqtgraph's cache."""
    import pyqtgraph as pg

    from attndesk.app.widgets.heatmap import COLORMAPS

    monkeypatch.setattr(pg.colormap, "_mapCache", {})
    warmup = TabWarmup(tabs, delay_ms=0, pace_ms=0)
    with qtbot.waitSignal(warmup.finished, timeout=TIMEOUT_MS):
        warmup.start()
    assert set(COLORMAPS) <= set(pg.colormap._mapCache)
