"""A page of many plots that never resizes or paints them all in one event-loop turn.

Each plot is a QGraphicsView whose resize re-lays out its items and regenerates its axes: ten
of them resized together (a dock shown, the window resized) or shown together (the tab chosen)
took 110-190 ms of GUI-thread work in the soak (the limit is 100 ms). ``Staggered`` therefore

- gives the plots a fixed size that fills the scroll area (room kept for its scroll bars, so
  they never appear just because the plots were fitted), and re-fits them one per turn: at
  once when they no longer fit, and when the area grew by more than ``TOLERANCE`` (a dock a few
  pixels narrower moves nothing);
- hides the drawn plots with the page and shows them again one per turn (each keeps its place
  meanwhile: the plots retain their size when hidden).
"""

from __future__ import annotations

import math
from typing import Callable

from PySide6.QtCore import QEvent, QObject, QSize, QTimer
from PySide6.QtWidgets import QGridLayout, QScrollArea, QStyle, QWidget

TOLERANCE = 0.08  # relative growth of the fitted size that is worth a re-fit


class Staggered(QObject):
    """Fit and reveal ``plots()`` (the page's current plots, in grid order, ``per_row`` to a row,
    ``gap`` px after each but a last one) inside ``scroll``; ``page`` is the widget a tab shows
    and hides."""

    def __init__(self, page: QWidget, scroll: QScrollArea, grid: QGridLayout, plots: Callable[[], list[QWidget]],
                 *, per_row: int, gap: int, minimum: QSize) -> None:
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

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
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
