"""The Train tab's curves: the loss, the accuracy and pattern score (one plot, its title in the
curves' colours is the legend), the phase change marked on both, and the pattern score per head."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout

from ...widgets.heatmap import SCORES, MatrixPlot
from ...widgets.lazy_plot import LazyPlot
from ...widgets.named import named
from ...widgets.plot_axes import without_si_prefix

PHASE_COLOUR = QColor(220, 40, 40)
ACCURACY_COLOUR, PATTERN_COLOUR = "#59a14f", "#e15759"  # the metric curves, named in their plot's title
CURVES_HEIGHT = 260  # px: the loss, metric and score plots
CURVES_MINIMUM = (160, 120)  # px: the loss and metric plots


def curve_plot(title: str, left: str) -> pg.PlotWidget:
    """A plot of curves over the training steps."""
    plot = pg.PlotWidget(title=title, enableMenu=False)
    plot.setBackground("w")
    without_si_prefix(plot.getPlotItem())
    plot.setLabel("bottom", "step")
    if left:
        plot.setLabel("left", left)
    plot.getPlotItem().setClipToView(True)
    plot.getPlotItem().setDownsampling(auto=True, mode="peak")
    return plot


def _phase_line() -> pg.InfiniteLine:
    line = pg.InfiniteLine(angle=90, pen=pg.mkPen(PHASE_COLOUR, width=1.5, style=Qt.PenStyle.DashLine))
    line.hide()
    return line


class TrainCurves:
    """The three plots side by side in ``row``, each ``CURVES_HEIGHT`` high. The loss and metric
    plots are built on first show (``LazyPlot``); the curves and the phase change drawn before that
    are kept and drawn once they are."""

    def __init__(self) -> None:
        self._curves: tuple[np.ndarray, ...] | None = None  # steps, loss, eval steps, accuracy, pattern
        self._phase: int | None = None
        self.lossHolder = named(LazyPlot(self._build_loss, minimum=CURVES_MINIMUM), "trainLossHolder")
        self.metricHolder = named(LazyPlot(self._build_metric, minimum=CURVES_MINIMUM), "trainMetricHolder")
        for holder in (self.lossHolder, self.metricHolder):
            holder.when_built(self._draw)
        self.scorePlot = MatrixPlot("pattern score per head (rows: layers)")
        self.scorePlot.setObjectName("trainScores")
        curves = self.row = QHBoxLayout()
        for widget, stretch in ((self.lossHolder, 3), (self.metricHolder, 3), (self.scorePlot, 2)):
            widget.setFixedHeight(CURVES_HEIGHT)  # the heads below take the rest of the (scrolling) page
            curves.addWidget(widget, stretch)

    def _build_loss(self) -> pg.PlotWidget:
        plot = curve_plot("loss", "cross-entropy")
        self._lossCurve = plot.plot([], [], pen=pg.mkPen("#4e79a7", width=1.5))
        self._lossPhase = _phase_line()
        plot.addItem(self._lossPhase, ignoreBounds=True)
        return plot

    def _build_metric(self) -> pg.PlotWidget:
        # the title, in the curves' colours, is the legend: a legend box inside the plot covered
        # the curves where they end, at 1.0
        plot = curve_plot(
            f"<span style='color:{ACCURACY_COLOUR}'>accuracy</span> · "
            f"<span style='color:{PATTERN_COLOUR}'>pattern score</span>",
            "",
        )
        plot.setYRange(0.0, 1.0, padding=0.02)
        self._accuracyCurve = plot.plot(
            [], [], pen=pg.mkPen(ACCURACY_COLOUR, width=2), name="accuracy", symbol="o", symbolSize=4
        )
        self._patternCurve = plot.plot(
            [], [], pen=pg.mkPen(PATTERN_COLOUR, width=2), name="pattern score", symbol="o", symbolSize=4
        )
        self._metricPhase = _phase_line()
        plot.addItem(self._metricPhase, ignoreBounds=True)
        return plot

    # the plots and their items (each builds its plot on first use)
    @property
    def lossPlot(self) -> pg.PlotWidget:
        return self.lossHolder.plot

    @property
    def metricPlot(self) -> pg.PlotWidget:
        return self.metricHolder.plot

    @property
    def lossCurve(self) -> pg.PlotDataItem:
        self.lossHolder.plot  # noqa: B018 - the property builds the plot
        return self._lossCurve

    @property
    def accuracyCurve(self) -> pg.PlotDataItem:
        self.metricHolder.plot  # noqa: B018 - the property builds the plot
        return self._accuracyCurve

    @property
    def patternCurve(self) -> pg.PlotDataItem:
        self.metricHolder.plot  # noqa: B018 - the property builds the plot
        return self._patternCurve

    @property
    def phaseLines(self) -> list[pg.InfiniteLine]:
        self.lossHolder.plot  # noqa: B018 - the properties build the plots
        self.metricHolder.plot  # noqa: B018
        return [self._lossPhase, self._metricPhase]

    def _draw(self) -> None:
        """Draw the curves and the phase change kept into the plots built."""
        if self.lossHolder.built:
            if self._curves is not None:
                self._lossCurve.setData(*self._curves[:2])
            _mark(self._lossPhase, self._phase)
        if self.metricHolder.built:
            if self._curves is not None:
                self._accuracyCurve.setData(*self._curves[2:4])
                self._patternCurve.setData(self._curves[2], self._curves[4])
            _mark(self._metricPhase, self._phase)

    def show_curves(
        self, steps: np.ndarray, loss: np.ndarray, eval_steps: np.ndarray, accuracy: np.ndarray, pattern: np.ndarray
    ) -> None:
        self._curves = (steps, loss, eval_steps, accuracy, pattern)
        self._draw()

    def show_phase(self, step: int | None) -> None:
        """Mark the phase change at ``step`` on the curves (None: no mark)."""
        self._phase = step
        self._draw()

    def show_scores(self, scores: np.ndarray | None, pattern: str = "", step: int | None = None) -> None:
        """Pattern scores [layers, heads]; ``step``: those of the checkpoint at that step (the
        timeline moved back), else the newest weights'."""
        if scores is None:
            self.scorePlot.clear("no evaluation yet")
            return
        at = "" if step is None else f" at step {step:,}"
        self.scorePlot.set_title(f"{pattern or 'pattern'} score per head{at} (rows: layers)")
        if self.scorePlot.update_values(scores):
            return
        layers, heads = scores.shape
        self.scorePlot.set_matrix(
            scores,
            row_labels=[f"L{i}" for i in range(layers)],
            col_labels=[f"h{i}" for i in range(heads)],
            levels=(0.0, 1.0),
            colormap=SCORES,
        )


def _mark(line: pg.InfiniteLine, step: int | None) -> None:
    line.setVisible(step is not None)
    if step is not None:
        line.setValue(step)
