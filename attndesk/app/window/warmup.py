"""Tab pages warmed while the window is idle, so that the first switch to a tab costs the GUI
thread no more than later ones.

A page not shown yet holds plots that are built on first show (``widgets/lazy_plot.py``'s
``LazyPlot``, every ``MatrixPlot``'s plot among them) and has never been polished, laid out or
painted: on its first switch all of that happens at once. ``TabWarmup``
does it beforehand, one page per turn of the event loop, a while after the window's first result:
it builds the page's plots and renders the page once offscreen (``QWidget.grab``) at the size it
will be shown. Pages already shown are left alone; a tab the current mode does not offer is
warmed once a mode offers it. First it reads the views' colour maps (``COLORMAPS``), which
pyqtgraph loads from files on first use (15-30 ms in the turn that first draws one).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyqtgraph as pg
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QTabWidget, QWidget

from attndesk.app.widgets.heatmap import COLORMAPS
from attndesk.app.widgets.lazy_plot import LazyPlot

_DONE = object()


def warm_steps(page: QWidget, size) -> Iterator[None]:
    """Warm ``page`` a piece at a time (one plot built per step, then one render at ``size``, a QSize),
    without showing it: each ``next`` does one piece."""
    for holder in page.findChildren(LazyPlot):
        if not holder.built:
            holder.plot  # noqa: B018 - the property builds the plot
            yield
    if page.size() != size:
        page.resize(size)
    page.grab()


def colormap_steps() -> Iterator[None]:
    """Read each of ``COLORMAPS`` into pyqtgraph's cache, one per step."""
    for name in COLORMAPS:
        pg.colormap.get(name)
        yield


class TabWarmup(QObject):
    """Warms ``tabs``' pages not shown yet (see the module docstring); ``finished`` once every page
    was warmed or shown."""

    finished = Signal()

    def __init__(self, tabs: QTabWidget, delay_ms: int = 1500, pace_ms: int = 40) -> None:
        super().__init__(tabs)
        self._tabs, self._delay_ms, self._pace_ms = tabs, delay_ms, pace_ms
        self._pending: list[QWidget] | None = None  # None: not started
        self._unoffered: list[QWidget] = []  # pages whose tab the mode hid when their turn came
        self._page: QWidget | None = None  # the page being warmed now
        self._steps: Iterator[None] | None = None  # its warming, a piece per turn
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._step)
        self._seen = {id(tabs.currentWidget())}  # pages shown (warm already)
        tabs.currentChanged.connect(self._shown)

    @property
    def done(self) -> bool:
        """Every page was warmed or shown."""
        return self._pending == [] and self._steps is None

    def start(self) -> None:
        """Begin ``delay_ms`` from now (the first call only)."""
        if self._pending is not None:
            return
        tabs = self._tabs
        pages = (tabs.widget(i) for i in range(tabs.count()))
        self._pending = [page for page in pages if page is not None and id(page) not in self._seen]
        self._steps = colormap_steps()
        self._timer.start(self._delay_ms)

    def _shown(self, index: int) -> None:
        """A page on show needs no warming (nor does the rest of the one being warmed)."""
        page = self._tabs.widget(index)
        self._seen.add(id(page))
        if self._pending and page in self._pending:
            self._pending.remove(page)
        if page is self._page:
            self._page, self._steps = None, None
        if page in self._unoffered:
            self._unoffered.remove(page)
        offered = [p for p in self._unoffered if self._tabs.isTabVisible(self._tabs.indexOf(p))]
        if offered:  # a mode offers them now (a tab switch follows a mode's change): warm them after all
            self._unoffered = [p for p in self._unoffered if p not in offered]
            self._pending = [*(self._pending or []), *offered]
            if not self._timer.isActive():
                self._timer.start(self._pace_ms)

    def _step(self) -> None:
        """One piece of warming (a plot built, a page rendered); come back ``pace_ms`` later."""
        if self._steps is None:
            self._steps = self._next_page()
            if self._steps is None:
                self.finished.emit()
                return
        if next(self._steps, _DONE) is _DONE:
            self._page, self._steps = None, None
        self._timer.start(self._pace_ms)

    def _next_page(self) -> Iterator[None] | None:
        """The steps of the next page a tab offers now and not on show (None when none is left)."""
        tabs, pending = self._tabs, self._pending
        while pending:
            page = pending.pop(0)
            index = tabs.indexOf(page)
            if index >= 0 and not tabs.isTabVisible(index):
                self._unoffered.append(page)
            elif index >= 0 and not page.isVisible():
                current = tabs.currentWidget()
                self._page = page
                return warm_steps(page, current.size() if current is not None else tabs.size())
        return None
