"""Pacing: pages of plots that never resize or paint them all in one event-loop turn.

A pyqtgraph plot is a QGraphicsView: resizing it re-lays out its items and regenerates its axes,
showing it paints all of that for the first time, ~10-30 ms a plot at the soak's window sizes. A
page of three or four plots (Positions, Compare) or of ten (the step-through) resized or chosen at
once took 100-190 ms of GUI-thread work in one turn in the soak. Both helpers here therefore do one
plot per event-loop turn, on a 1 ms single-shot timer (a zero timer runs in the same pass):

- ``PacedHost`` (a few plots in a layout): a cheap plain widget stands in the layout in the plot's
  place; the layout resizes the host, and one shared ``Pacer`` hands each host's size to its plot
  (and shows it) one host per turn. Meanwhile a plot keeps its previous size for a few
  milliseconds: clipped when the host shrank, on the host's background when it grew. Show and
  hide the host, never the plot: the host hides its plot with itself and reveals it again
  through the pacer.
- ``Staggered`` (a scrolled grid of many plots) gives the plots a fixed size that fills the scroll
  area (room kept for its scroll bars, so they never appear just because the plots were fitted),
  and re-fits them one per turn: at once when they no longer fit, and when the area grew by more
  than ``TOLERANCE`` (a dock a few pixels narrower moves nothing). It hides the drawn plots with
  the page and shows them again one per turn (each keeps its place meanwhile: the plots retain
  their size when hidden).
- ``Pacer.call`` (widgets built one at a time): a plot takes ~14 ms to build and as much again to
  lay out and paint for the first time, so a page that needs eight new ones builds them one per
  turn through the same queue (the Train tab's heatmaps of a model with many heads).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QEvent, QObject, QSize, QTimer
from PySide6.QtWidgets import QApplication, QGridLayout, QScrollArea, QStyle, QWidget

TOLERANCE = 0.08  # Staggered: relative growth of the fitted size that is worth a re-fit


class _Call:
    """A job queued with ``Pacer.call``: ``fn()`` while ``owner`` lives."""

    def __init__(self, owner: QObject, fn: Callable[[], None]) -> None:
        self.owner, self.fn = owner, fn

    def apply(self) -> bool:
        self.fn()
        return True


class Pacer(QObject):
    """One queue for the whole application: one host's (or call's) job per event-loop turn, oldest first."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: list[PacedHost | _Call] = []
        self._timer = QTimer(self, singleShot=True, interval=1)  # 1 ms: a zero timer runs in the same pass
        self._timer.timeout.connect(self._next)

    def request(self, host: PacedHost) -> None:
        if host not in self._queue:
            self._queue.append(host)
        if not self._timer.isActive():
            self._timer.start()

    def call(self, owner: QObject, fn: Callable[[], None]) -> None:
        """Run ``fn()`` in a turn of its own (skipped when ``owner`` is deleted meanwhile)."""
        self._queue.append(_Call(owner, fn))
        if not self._timer.isActive():
            self._timer.start()

    def pending(self) -> int:
        return len(self._queue)

    def _next(self) -> None:
        while self._queue:
            item = self._queue.pop(0)
            alive = shiboken6.isValid(item.owner if isinstance(item, _Call) else item)
            if alive and item.apply():  # a host closed or hidden meanwhile costs nothing: the next
                break
        if self._queue:
            self._timer.start()


_pacer: Pacer | None = None


def pacer() -> Pacer:
    """The application's pacer (made on first use, owned by the QApplication)."""
    global _pacer  # noqa: PLW0603 - one pacer per application, made lazily
    if _pacer is None:
        _pacer = Pacer(QApplication.instance())
        _pacer.destroyed.connect(_forget)
    return _pacer


def _forget() -> None:
    global _pacer  # noqa: PLW0603 - the application's pacer is gone
    _pacer = None


class PacedHost(QWidget):
    """Holds ``plot`` (made its child, at 0, 0) and stands in for it in a layout: the same size
    hints, policy and minimum; its size and visibility reach the plot through the pacer."""

    def __init__(self, plot: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = plot
        self.setObjectName(f"{plot.objectName() or 'plot'}Host")
        self.setSizePolicy(plot.sizePolicy())
        self.setMinimumSize(plot.minimumSize())
        plot.setParent(self)
        plot.move(0, 0)
        plot.hide()  # revealed by the pacer once the host is shown

    def sizeHint(self) -> QSize:
        return self.plot.sizeHint()

    def minimumSizeHint(self) -> QSize:
        return self.plot.minimumSizeHint()

    def settled(self) -> bool:
        """The plot shows at the host's size (nothing waits in the pacer for it)."""
        return self.plot.isVisibleTo(self) and self.plot.size() == self.size()

    def resizeEvent(self, event) -> None:
        if self.isVisible() and self.plot.size() != self.size():
            pacer().request(self)
        super().resizeEvent(event)

    def showEvent(self, event) -> None:
        if not self.settled():
            pacer().request(self)
        super().showEvent(event)

    def hideEvent(self, event) -> None:
        if not event.spontaneous():  # the page or the host itself hidden (a minimised window keeps it)
            self.plot.hide()
        super().hideEvent(event)

    def apply(self) -> bool:
        """Give the plot the host's size and show it; False when the host is not visible (nothing done)."""
        if not self.isVisible():
            return False
        if self.plot.size() != self.size():
            self.plot.setGeometry(self.rect())
        if self.plot.isHidden():
            self.plot.show()
        return True


class Staggered(QObject):
    """Fit and reveal ``plots()`` (the page's current plots, in grid order, ``per_row`` to a row,
    ``gap`` px after each but a last one) inside ``scroll``; ``page`` is the widget a tab shows
    and hides."""

    def __init__(
        self,
        page: QWidget,
        scroll: QScrollArea,
        grid: QGridLayout,
        plots: Callable[[], list[QWidget]],
        *,
        per_row: int,
        gap: int,
        minimum: QSize,
    ) -> None:
        super().__init__(page)
        self._page, self._scroll, self._grid, self._plots = page, scroll, grid, plots
        self._per_row, self._gap, self._minimum = per_row, gap, minimum
        self.size = QSize(minimum)  # every plot's size now
        self._pending: list[QWidget] = []  # plots still to re-fit, one per turn
        self._veiled: list[QWidget] = []  # drawn plots hidden with the page, shown again one per turn
        self._timer = QTimer(self, singleShot=True, interval=1)  # 1 ms: a zero timer runs in the same pass
        self._timer.timeout.connect(self._next)
        page.installEventFilter(self)
        scroll.installEventFilter(self)

    @staticmethod
    def keep_place(plot: QWidget) -> None:
        """A plot hidden for a while keeps its place in the grid: showing it again moves nothing."""
        policy = plot.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        plot.setSizePolicy(policy)

    def fitted(self) -> QSize:
        """The plot size that fills the viewport with the current plots (never below the minimum)."""
        count = max(1, len(self._plots()))
        cols, rows = min(self._per_row, count), math.ceil(count / self._per_row)
        area, bar = self._scroll.contentsRect(), self._scroll.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        gaps = cols if rows > 1 else cols - 1  # a row that continues below ends in a gap too (its arrow)
        width = (area.width() - bar - gaps * self._gap) // cols
        height = (area.height() - bar - (rows - 1) * self._grid.verticalSpacing()) // rows
        return QSize(max(self._minimum.width(), width), max(self._minimum.height(), height))

    def fit_now(self) -> None:
        """Size every plot at once (the arrangement changed: the plots are being redrawn anyway)."""
        self.size = self.fitted()
        self._pending = []
        for plot in self._plots():
            plot.setFixedSize(self.size)

    def eventFilter(self, watched, event) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Resize and watched is self._scroll:
            self._refit()
        elif kind == QEvent.Type.Hide and watched is self._page and not event.spontaneous():
            self._veil()
        elif kind == QEvent.Type.Show and watched is self._page and self._veiled:
            self._timer.start()
        return False

    def _refit(self) -> None:
        target, now = self.fitted(), self.size
        overflows = target.width() < now.width() or target.height() < now.height()
        growth = max(target.width() / now.width(), target.height() / now.height()) - 1
        if not overflows and growth <= TOLERANCE:
            return
        self.size = target
        self._pending = [p for p in self._plots() if p.size() != target]
        self._timer.start()

    def _veil(self) -> None:
        self._veiled += [p for p in self._plots() if not p.isHidden() and p not in self._veiled]
        for plot in self._veiled:
            plot.hide()

    def _next(self) -> None:
        """One plot per turn: a pending re-fit first, then (while the page shows) a veiled plot."""
        if self._pending:
            plot = self._pending.pop(0)
            plot.setFixedSize(self.size)
        elif self._veiled and self._page.isVisible():
            plot = self._veiled.pop(0)
            if plot in self._plots():
                plot.show()
        if self._pending or (self._veiled and self._page.isVisible()):
            self._timer.start()
