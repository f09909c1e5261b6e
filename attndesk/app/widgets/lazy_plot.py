"""A pyqtgraph plot built on first need: ``LazyPlot`` keeps the plot's place in a layout and builds
it when it is first shown or first used.

A PlotWidget costs about 14 ms of GUI-thread work to build (its PlotItem's settings panel, its
view box's menu, four axes), and most of a window's plots sit on tabs not shown yet. A view puts
a ``LazyPlot`` in its layout where the plot goes, with a function that builds the plot (and the
view's items in it). The plot is built on the holder's first show, on the first access to
``plot``, or by ``warm_steps`` (``window/warmup.py``) while the window is idle. What a view draws
into a plot not built yet it keeps, and draws from ``when_built``.

Until the plot is built the holder reports a new plot's size hint and the plot's minimum size, so
building it moves nothing around it. Once built, the size hint is the plot's own by default, as a
PlotWidget in the layout gave it: its hint follows the size it last had, and a layout reads it again
when the plot is shown or hidden (or its minimum size changes), not at each resize. A page that
scrolls by its height for its width (Corpus) settles on the same sizes that way.
``steady_hint`` keeps a new plot's hint instead (``MatrixPlot``: a page of heatmaps scrolled
while its plots are built would otherwise take their sizes of that moment).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize
from PySide6.QtWidgets import QSizePolicy, QWidget


@cache
def _fresh_hints() -> tuple[QSize, QSize]:
    """A new PlotWidget's size hint and minimum size hint (the hint follows the scene's rectangle,
    so no constant)."""
    plot = pg.PlotWidget(enableMenu=False)
    hints = (plot.sizeHint(), plot.minimumSizeHint())
    plot.deleteLater()
    return hints


class LazyPlot(QWidget):
    """Where a plot goes: empty until ``build()`` made it (first show, or first ``plot``), then
    filled by it. ``minimum`` is the plot's minimum size (given to the plot once built);
    ``steady_hint``: see the module docstring."""

    def __init__(
        self,
        build: Callable[[], pg.PlotWidget],
        *,
        minimum: tuple[int, int] = (0, 0),
        steady_hint: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._build = build
        self._minimum = QSize(*minimum)
        self._steady_hint = steady_hint
        self._plot: pg.PlotWidget | None = None
        self._when_built: list[Callable[[], object]] = []
        self._reported_minimum = self.minimumSizeHint()
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    @property
    def built(self) -> bool:
        return self._plot is not None

    @property
    def plot(self) -> pg.PlotWidget:
        """The plot, built on first need."""
        if self._plot is None:
            plot = self._build()
            plot.setMinimumSize(plot.minimumSize().expandedTo(self._minimum))
            plot.setParent(self)
            plot.setGeometry(self.rect())
            self._plot = plot
            if self.isVisible():
                plot.show()
            actions, self._when_built = self._when_built, []
            for action in actions:
                action()
        return self._plot

    def getPlotItem(self) -> pg.PlotItem:
        """The plot's PlotItem (the plot built on first use)."""
        return self.plot.getPlotItem()

    def getViewBox(self) -> pg.ViewBox:
        """The plot's ViewBox (the plot built on first use)."""
        return self.plot.getViewBox()

    def when_built(self, action: Callable[[], object]) -> None:
        """Run ``action`` (draw what the view keeps, connect a signal of the plot's scene) once the
        plot exists: now if it does, else right after it is built."""
        if self._plot is None:
            self._when_built.append(action)
        else:
            action()

    def sizeHint(self) -> QSize:
        if self._plot is None or self._steady_hint:
            return _fresh_hints()[0]
        return self._plot.sizeHint()

    def minimumSizeHint(self) -> QSize:
        if self._plot is None:
            return self._minimum.expandedTo(_fresh_hints()[1])
        return self._plot.minimumSize().expandedTo(self._plot.minimumSizeHint())

    def showEvent(self, event) -> None:
        self.plot  # noqa: B018 - the property builds the plot
        super().showEvent(event)

    def resizeEvent(self, event) -> None:
        if self._plot is not None:
            self._plot.setGeometry(self.rect())
        super().resizeEvent(event)

    def event(self, event) -> bool:
        # the plot's minimum size changed: so did ours. Nothing else: a layout reads a plot's size
        # hint again when it is shown or hidden, not at each resize (see the module docstring)
        if event.type() == QEvent.Type.LayoutRequest and self.minimumSizeHint() != self._reported_minimum:
            self._reported_minimum = self.minimumSizeHint()
            self.updateGeometry()
        return super().event(event)


__all__ = ["LazyPlot"]
