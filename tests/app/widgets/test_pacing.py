"""PacedHost / Pacer: a page's plots are resized and shown one per event-loop turn, never together."""

from __future__ import annotations

import numpy as np
import pytest
import shiboken6
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication, QHBoxLayout, QTabWidget, QWidget

from attndesk.app.widgets.heatmap import MatrixPlot
from attndesk.app.widgets.pacing import PacedHost, pacer


def _settle_layout() -> None:
    """Deliver the layout's posted requests (hosts resized) without running the pacer's timer."""
    QApplication.sendPostedEvents()


@pytest.fixture
def page(qtbot):
    """A tab page of three paced plots, a second tab to switch to; shown and settled."""
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    plots_page = QWidget()
    row = QHBoxLayout(plots_page)
    plots = [MatrixPlot(f"plot {i}") for i in range(3)]
    hosts = [PacedHost(plot) for plot in plots]
    for plot, host in zip(plots, hosts):
        plot.set_matrix(np.arange(64.0).reshape(8, 8))
        row.addWidget(host)
    tabs.addTab(plots_page, "plots")
    tabs.addTab(QWidget(), "other")
    tabs.resize(900, 500)
    tabs.show()
    qtbot.waitUntil(lambda: all(h.settled() for h in hosts) and pacer().pending() == 0)
    return tabs, hosts


def test_a_resize_reaches_one_plot_per_turn(qtbot, page):
    tabs, hosts = page
    tabs.resize(1200, 600)
    _settle_layout()
    assert all(h.plot.size() != h.size() for h in hosts)  # the layout resized only the hosts
    assert pacer().pending() == 3
    for done in (1, 2, 3):
        pacer()._next()
        assert sum(h.settled() for h in hosts) == done
    assert pacer().pending() == 0


def test_a_page_shown_again_reveals_its_plots_one_per_turn(qtbot, page):
    tabs, hosts = page
    tabs.setCurrentIndex(1)
    assert all(h.plot.isHidden() for h in hosts)  # hidden with the page, not just invisible
    tabs.setCurrentIndex(0)
    _settle_layout()
    assert all(not h.plot.isVisible() for h in hosts)
    pacer()._next()
    assert [h.plot.isVisible() for h in hosts] == [True, False, False]
    qtbot.waitUntil(lambda: all(h.settled() for h in hosts))


def test_a_host_hidden_on_purpose_keeps_its_plot_hidden(qtbot, page):
    tabs, hosts = page
    hosts[1].hide()
    tabs.setCurrentIndex(1)
    tabs.setCurrentIndex(0)
    qtbot.waitUntil(lambda: hosts[0].settled() and hosts[2].settled() and pacer().pending() == 0)
    assert not hosts[1].plot.isVisible()
    hosts[1].show()
    qtbot.waitUntil(hosts[1].settled)


def test_a_host_deleted_while_waiting_is_skipped(qtbot, page):
    tabs, hosts = page
    tabs.resize(1100, 650)
    _settle_layout()
    assert pacer().pending() == 3
    hosts[0].setParent(None)
    hosts[0].deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
    assert not shiboken6.isValid(hosts[0])  # the C++ host is gone, its wrapper still queued
    qtbot.waitUntil(lambda: pacer().pending() == 0)
    assert hosts[1].settled() and hosts[2].settled()


def test_the_host_stands_in_for_its_plot_in_a_layout(qtbot):
    plot = MatrixPlot("x")
    plot.setObjectName("somePlot")
    plot.setMinimumSize(150, 140)
    host = PacedHost(plot)
    qtbot.addWidget(host)
    assert host.objectName() == "somePlotHost" and plot.parent() is host
    assert host.minimumSize() == plot.minimumSize()
    assert host.sizeHint() == plot.sizeHint() and host.sizePolicy() == plot.sizePolicy()
