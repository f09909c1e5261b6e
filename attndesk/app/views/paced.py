"""Pages of several plots that resize and show them one per event-loop turn.

A pyqtgraph plot is a QGraphicsView: resizing it re-lays out its items and regenerates its axes,
showing it paints all of that for the first time, ~10-30 ms a plot at the soak's window sizes.
A page of three or four plots (Positions, Compare) resized or chosen at once took 100-190 ms of
GUI-thread work in one turn (the limit is 100 ms). ``PacedHost`` puts a cheap plain widget in the layout in
the plot's place; the layout resizes the host, and one shared ``Pacer`` hands each host's size
to its plot (and shows it) one host per turn. Meanwhile a plot keeps its previous size for a
few milliseconds: clipped when the host shrank, on the host's background when it grew.

Show and hide the host, never the plot: the host hides its plot with itself and reveals it again
through the pacer.
"""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QObject, QSize, QTimer
from PySide6.QtWidgets import QApplication, QWidget


class Pacer(QObject):
    """One queue for the whole application: one host's job per event-loop turn, oldest first."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: list[PacedHost] = []
        self._timer = QTimer(self, singleShot=True, interval=1)  # 1 ms: a zero timer runs in the same pass
        self._timer.timeout.connect(self._next)

    def request(self, host: "PacedHost") -> None:
        if host not in self._queue:
            self._queue.append(host)
        if not self._timer.isActive():
            self._timer.start()

    def pending(self) -> int:
        return len(self._queue)

    def _next(self) -> None:
        while self._queue:
            host = self._queue.pop(0)
            if shiboken6.isValid(host) and host.apply():  # a host closed or hidden meanwhile costs nothing: the next
                break
        if self._queue:
            self._timer.start()


_pacer: Pacer | None = None


def pacer() -> Pacer:
    """The application's pacer (made on first use, owned by the QApplication)."""
    global _pacer
    if _pacer is None:
        _pacer = Pacer(QApplication.instance())
        _pacer.destroyed.connect(_forget)
    return _pacer


def _forget() -> None:
    global _pacer
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

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return self.plot.sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return self.plot.minimumSizeHint()

    def settled(self) -> bool:
        """The plot shows at the host's size (nothing waits in the pacer for it)."""
        return self.plot.isVisibleTo(self) and self.plot.size() == self.size()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if self.isVisible() and self.plot.size() != self.size():
            pacer().request(self)
        super().resizeEvent(event)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if not self.settled():
            pacer().request(self)
        super().showEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt's name
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
