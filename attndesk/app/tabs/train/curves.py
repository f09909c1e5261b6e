"""The Train tab's curves: the loss, the accuracy and pattern score (one plot, its title in the
curves' colours is the legend), the phase change marked on both, and the pattern score per head."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout

from ...widgets.heatmap import MatrixPlot
from ...widgets.plot_axes import without_si_prefix

PHASE_COLOUR = QColor(220, 40, 40)
ACCURACY_COLOUR, PATTERN_COLOUR = "#59a14f", "#e15759"  # the metric curves, named in their plot's title
CURVES_HEIGHT = 260  # px: the loss, metric and score plots


def curve_plot(title: str, left: str) -> pg.PlotWidget:
    """A plot of curves over the training steps."""
    plot = pg.PlotWidget(title=title)
    plot.setBackground("w")
    without_si_prefix(plot.getPlotItem())
    plot.setLabel("bottom", "step")
    if left:
        plot.setLabel("left", left)
    plot.setMenuEnabled(False)
    plot.getPlotItem().setClipToView(True)
    plot.getPlotItem().setDownsampling(auto=True, mode="peak")
    plot.setMinimumSize(160, 120)
    return plot


class TrainCurves:
    """The three plots side by side in ``row``, each ``CURVES_HEIGHT`` high."""

    def __init__(self) -> None:
        self.lossPlot = curve_plot("loss", "cross-entropy")
        self.lossCurve = self.lossPlot.plot([], [], pen=pg.mkPen("#4e79a7", width=1.5))
        # the title, in the curves' colours, is the legend: a legend box inside the plot covered
        # the curves where they end, at 1.0
        self.metricPlot = curve_plot(
            f"<span style='color:{ACCURACY_COLOUR}'>accuracy</span> · "
            f"<span style='color:{PATTERN_COLOUR}'>pattern score</span>",
            "",
        )
        self.metricPlot.setYRange(0.0, 1.0, padding=0.02)
        self.accuracyCurve = self.metricPlot.plot(
            [], [], pen=pg.mkPen(ACCURACY_COLOUR, width=2), name="accuracy", symbol="o", symbolSize=4
        )
        self.patternCurve = self.metricPlot.plot(
            [], [], pen=pg.mkPen(PATTERN_COLOUR, width=2), name="pattern score", symbol="o", symbolSize=4
        )
        self.phaseLines = [
            pg.InfiniteLine(angle=90, pen=pg.mkPen(PHASE_COLOUR, width=1.5, style=Qt.PenStyle.DashLine))
            for _ in range(2)
        ]
        for plot, line in zip((self.lossPlot, self.metricPlot), self.phaseLines):
            plot.addItem(line, ignoreBounds=True)
            line.hide()
        self.scorePlot = MatrixPlot("pattern score per head (rows: layers)")
        self.scorePlot.setObjectName("trainScores")
        curves = self.row = QHBoxLayout()
        for widget, stretch in ((self.lossPlot, 3), (self.metricPlot, 3), (self.scorePlot, 2)):
            widget.setFixedHeight(CURVES_HEIGHT)  # the heads below take the rest of the (scrolling) page
            curves.addWidget(widget, stretch)

    def show_curves(
        self, steps: np.ndarray, loss: np.ndarray, eval_steps: np.ndarray, accuracy: np.ndarray, pattern: np.ndarray
    ) -> None:
        self.lossCurve.setData(steps, loss)
        self.accuracyCurve.setData(eval_steps, accuracy)
        self.patternCurve.setData(eval_steps, pattern)

    def show_phase(self, step: int | None) -> None:
        """Mark the phase change at ``step`` on the curves (None: no mark)."""
        for line in self.phaseLines:
            line.setVisible(step is not None)
            if step is not None:
                line.setValue(step)

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
            colormap="magma",
        )
