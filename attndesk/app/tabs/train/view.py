"""The Train tab's view: the form (``form``: the run's settings, Start / Pause / Resume / Stop,
the trained models), the curves (``curves``: loss, accuracy, pattern score, the score per head),
the attention on the task's probe input, and a timeline of the kept checkpoints with the phase
change marked.

Widgets only: the presenter (``app/tabs/train.py``) reads ``settings()``, listens to the
buttons' signals and draws through ``show_curves``, ``show_scores``, ``show_probe`` and
``show_timeline``. A setting the task cannot use is explained next to its control
(``show_problem``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import QEvent, QRect, Qt, Signal
from PySide6.QtGui import QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QStyle,
    QStyleOptionSlider,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name

from ...widgets.heatmap import MatrixPlot
from ...widgets.pacing import PacedHost, pacer
from ...widgets.token_axis import label_font, label_room
from .curves import PHASE_COLOUR, TrainCurves
from .form import TrainForm

MAX_HEAD_PLOTS = 16  # heads of one layer drawn side by side; more would be too small to read


class TimelineSlider(QSlider):
    """A horizontal slider over the kept checkpoints with one marked position (the phase change)."""

    def __init__(self) -> None:
        super().__init__(Qt.Orientation.Horizontal)
        self._mark: int | None = None
        self.setTickPosition(QSlider.TickPosition.TicksBelow)

    def set_mark(self, index: int | None) -> None:
        if index != self._mark:
            self._mark = index
            self.update()

    def mark(self) -> int | None:
        return self._mark

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        if self._mark is None or self.maximum() <= self.minimum():
            return
        option = QStyleOptionSlider()
        self.initStyleOption(option)
        groove: QRect = self.style().subControlRect(
            QStyle.ComplexControl.CC_Slider, option, QStyle.SubControl.SC_SliderGroove, self
        )
        handle = self.style().subControlRect(
            QStyle.ComplexControl.CC_Slider, option, QStyle.SubControl.SC_SliderHandle, self
        )
        span = groove.width() - handle.width()
        x = (
            groove.left()
            + handle.width() // 2
            + QStyle.sliderPositionFromValue(self.minimum(), self.maximum(), self._mark, span)
        )
        painter = QPainter(self)
        painter.setPen(QPen(PHASE_COLOUR, 3))
        painter.drawLine(x, 0, x, self.height())
        painter.end()


class TrainView(QWidget):
    """See the module docstring. Signals: ``startRequested``, ``pauseRequested``,
    ``resumeRequested``, ``stopRequested``, ``settingsEdited``, ``timelineMoved(index)``,
    ``liveRequested``, ``layerChanged(layer)``."""

    startRequested = Signal()
    pauseRequested = Signal()
    resumeRequested = Signal()
    stopRequested = Signal()
    settingsEdited = Signal()
    timelineMoved = Signal(int)
    liveRequested = Signal()
    layerChanged = Signal(int)
    presetRequested = Signal(str)  # a shipped preset's name
    openRequested = Signal()  # "Open trained model…"
    saveRequested = Signal()  # "Save…" the run on screen
    viewsRequested = Signal()  # "Open in views": the run on screen becomes the toy mode's weights
    probeDrawn = Signal()  # every head of the probe on screen has its heatmap

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("trainView")
        self.headPlots: list[MatrixPlot] = []  # built one per turn (see ``_grow``), each in a host
        self._hosts: list[PacedHost] = []
        self._wanted, self._growing = 0, False
        self._probe: tuple[np.ndarray, list[str]] | None = None  # the last probe's [heads, L, L] and labels
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._build_settings())
        splitter.addWidget(self._build_plots())
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 1000])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(splitter, 1)
        self.set_phase("idle")

    # -- construction ---------------------------------------------------------------------------
    def _build_settings(self) -> QWidget:
        form = self.form = TrainForm()
        self.controls, self.problems, self.message = form.controls, form.problems, form.message
        self.startButton, self.pauseButton = form.startButton, form.pauseButton
        self.resumeButton, self.stopButton = form.resumeButton, form.stopButton
        self.presetCombo, self.openButton = form.presetCombo, form.openButton
        self.saveButton, self.viewsButton = form.saveButton, form.viewsButton
        for mine, theirs in (
            (self.startRequested, form.startRequested),
            (self.pauseRequested, form.pauseRequested),
            (self.resumeRequested, form.resumeRequested),
            (self.stopRequested, form.stopRequested),
            (self.settingsEdited, form.settingsEdited),
            (self.presetRequested, form.presetRequested),
            (self.openRequested, form.openRequested),
            (self.saveRequested, form.saveRequested),
            (self.viewsRequested, form.viewsRequested),
        ):
            theirs.connect(mine)
        return form

    def _build_plots(self) -> QWidget:
        curves = self.curves = TrainCurves()
        self.scorePlot = curves.scorePlot
        self.layerCombo = named(QComboBox(), "trainLayer")
        self.layerCombo.setToolTip(
            "the layer whose heads are drawn (it follows the best-scoring layer until you pick one)"
        )
        self.layerCombo.currentIndexChanged.connect(lambda i: self.layerChanged.emit(max(i, 0)))
        self.layerCombo.activated.connect(lambda _i: setattr(self, "layer_chosen", True))
        self.layer_chosen = False  # the user picked a layer: stop following the best one
        self.probeCaption = named(
            QLabel("the attention on the task's probe input appears here while it trains"), "trainProbeCaption"
        )
        head = QHBoxLayout()
        head.addWidget(QLabel("Layer"))
        head.addWidget(self.layerCombo)
        head.addWidget(self.probeCaption, 1)
        self.headGrid = QGridLayout()
        self.headGrid.setSpacing(2)
        self._columns = 0  # heads per row of the grid now (``_arrange``)
        self._side = 0  # the least width and height of a head's heatmap with every label readable
        self._plotsColumn = column = named(QWidget(), "trainPlots")
        column.installEventFilter(self)  # its width decides how many heads fit in a row
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(curves.row)
        layout.addLayout(self._build_timeline())  # above the heads: in view however tall their grid grows
        layout.addLayout(head)
        layout.addLayout(self.headGrid, 3)
        return column

    def _build_timeline(self) -> QHBoxLayout:
        self.timeline = TimelineSlider()
        self.timeline.setObjectName("trainTimeline")
        self.timeline.setToolTip(
            "the kept checkpoints: drag to see the attention at an earlier step (the red line marks the phase change)"
        )
        self.timeline.setEnabled(False)
        self.timeline.valueChanged.connect(self.timelineMoved)
        self.timelineLabel = named(QLabel("no checkpoints yet"), "trainTimelineLabel")
        self.liveButton = named(QPushButton("Latest"), "trainLive")
        self.liveButton.setToolTip("follow the newest weights again")
        self.liveButton.clicked.connect(lambda _c=False: self.liveRequested.emit())
        row = QHBoxLayout()
        row.addWidget(QLabel("Checkpoints"))
        row.addWidget(self.timeline, 1)
        row.addWidget(self.timelineLabel)
        row.addWidget(self.liveButton)
        return row

    def set_presets(self, presets: Sequence[tuple[str, str]]) -> None:
        """The shipped presets: (name, one line about it)."""
        self.form.set_presets(presets)

    # -- settings (``form``) -----------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """The values of every control, by ``TrainConfig`` field name."""
        return self.form.settings()

    def set_settings(self, values: dict[str, Any]) -> None:
        self.form.set_settings(values)

    def show_problem(self, field: str | None, message: str) -> None:
        """``message`` next to the control of ``field`` (None: under the buttons); "" clears all."""
        self.form.show_problem(field, message)

    def problem(self) -> str:
        """The message shown next to a control, or "" (for tests and the status line)."""
        return self.form.problem()

    def show_message(self, text: str, *, error: bool = False) -> None:
        self.form.show_message(text, error=error)

    def set_phase(self, phase: str) -> None:
        """ "idle", "running" or "paused": which buttons act, whether the settings can change."""
        self.form.set_phase(phase)

    # -- results --------------------------------------------------------------------------------
    def show_curves(
        self, steps: np.ndarray, loss: np.ndarray, eval_steps: np.ndarray, accuracy: np.ndarray, pattern: np.ndarray
    ) -> None:
        self.curves.show_curves(steps, loss, eval_steps, accuracy, pattern)

    def show_phase(self, step: int | None, checkpoint_index: int | None) -> None:
        """Mark the phase change at ``step`` on the curves and ``checkpoint_index`` on the timeline."""
        self.curves.show_phase(step)
        self.timeline.set_mark(checkpoint_index)

    def show_scores(self, scores: np.ndarray | None, pattern: str = "", step: int | None = None) -> None:
        """Pattern scores [layers, heads]; ``step``: those of the checkpoint at that step (the
        timeline moved back), else the newest weights'."""
        self.curves.show_scores(scores, pattern, step)

    def set_layer(self, layer: int) -> None:
        """Show ``layer`` (the presenter following the best layer), unless the user picked one."""
        if not self.layer_chosen and layer != self.layerCombo.currentIndex():
            self.layerCombo.setCurrentIndex(layer)

    def set_layers(self, layers: int) -> None:
        self.layer_chosen = False
        if self.layerCombo.count() != layers:
            self.layerCombo.blockSignals(True)
            self.layerCombo.clear()
            self.layerCombo.addItems([f"layer {i}" for i in range(layers)])
            self.layerCombo.blockSignals(False)

    def layer(self) -> int:
        return max(self.layerCombo.currentIndex(), 0)

    def prepare_heads(self, heads: int) -> None:
        """Build the heatmaps of ``heads`` heads ahead of the first probe."""
        self._wanted = min(heads, MAX_HEAD_PLOTS)
        self._grow()

    def _grow(self) -> None:
        """Build the next missing heatmap in a turn of its own (``pacing.Pacer.call``): a plot takes
        ~14 ms to build and as much to lay out and paint, so eight at once held the window
        ~180 ms. Each sits in a ``PacedHost``: the grid resizes the cheap hosts, the pacer the plots."""
        if len(self.headPlots) < self._wanted and not self._growing:
            self._growing = True
            pacer().call(self, self._grow_one)

    def _grow_one(self) -> None:
        self._growing = False
        if len(self.headPlots) >= self._wanted:
            return
        plot = MatrixPlot(square=True)
        plot.setObjectName(f"trainHead{len(self.headPlots)}")
        plot.clear("waiting for the first probe…")
        self.headPlots.append(plot)
        self._hosts.append(PacedHost(plot))
        if self._side:
            self._fit_head(plot, self._hosts[-1])
        self._arrange()
        if self._probe is not None and len(self.headPlots) <= self._probe[0].shape[0]:
            self._draw_head(len(self.headPlots) - 1, force=True)
        self._grow()
        if self.probe_drawn():
            self.probeDrawn.emit()

    def _arrange(self) -> None:
        """The hosts of the wanted heads in rows of at most four (as many as fit the width at a
        size where every token label is drawn; the page scrolls), the others hidden."""
        spacing = self.headGrid.spacing()
        fit = (self._plotsColumn.width() + spacing) // (self._side + spacing) if self._side else 4
        columns = max(1, min(self._wanted, 4, fit))
        if columns != self._columns:
            self._columns = columns
            for host in self._hosts:
                self.headGrid.removeWidget(host)
        for i, host in enumerate(self._hosts):
            if i < self._wanted and self.headGrid.indexOf(host) < 0:
                self.headGrid.addWidget(host, i // columns, i % columns)
            host.setVisible(i < self._wanted)

    def eventFilter(self, watched, event) -> bool:
        if watched is self._plotsColumn and event.type() == QEvent.Type.Resize and self._hosts:
            self._arrange()
        return super().eventFilter(watched, event)

    def _fit_heads(self, labels: Sequence[str]) -> None:
        """Make each head's heatmap large enough to draw every one of ``labels`` on both axes
        (a text line per cell, as ``TokenAxis`` spaces them), its label band included."""
        metrics = QFontMetricsF(label_font())
        widest = max((metrics.horizontalAdvance(t) for t in labels), default=0.0)
        side = math.ceil(len(labels) * (metrics.height() + 1) + label_room(widest)) + 4
        if side == self._side:
            return
        self._side = side
        for plot, host in zip(self.headPlots, self._hosts, strict=True):
            self._fit_head(plot, host)
        self._arrange()

    def _fit_head(self, plot: MatrixPlot, host: PacedHost) -> None:
        side = max(self._side, 120)
        plot.graphics.setMinimumSize(side, side)
        # the host stands in for the plot in the grid: the plot's margins and title line on top
        host.setMinimumSize(side + 4, side + plot.title.sizeHint().height() + 8)

    def _draw_head(self, h: int, *, force: bool = False) -> None:
        assert self._probe is not None, "a probe to draw"
        weights, labels = self._probe
        plot = self.headPlots[h]
        if not force and plot.update_values(weights[h]):
            return  # the next snapshot of the same probe: only the image changes
        length = weights.shape[-1]
        plot.set_title(head_name(self.layerCombo.currentIndex(), h))
        future = np.triu(np.ones((length, length), dtype=bool), 1)
        plot.set_matrix(weights[h], row_labels=labels, col_labels=labels, levels=(0.0, 1.0), masked=future)

    def probe_drawn(self) -> bool:
        """Every head of the last probe has its heatmap, drawn (the plots are built one per turn)."""
        return self._probe is not None and len(self.headPlots) >= min(self._probe[0].shape[0], MAX_HEAD_PLOTS)

    def show_probe(self, weights: np.ndarray, labels: Sequence[str], caption: str) -> None:
        """One layer's attention on the probe input: ``weights`` [heads, L, L] (causal: the keys
        after each query are hatched). Heads without a heatmap yet are drawn as theirs are built
        (``probeDrawn`` once all are)."""
        same_labels = self._probe is not None and list(labels) == self._probe[1]
        self._probe = (weights, list(labels))
        if not same_labels:
            self._fit_heads(labels)
        self._wanted = min(weights.shape[0], MAX_HEAD_PLOTS)
        self._arrange()
        for h in range(min(self._wanted, len(self.headPlots))):
            self._draw_head(h, force=not same_labels)
        self.probeCaption.setText(caption)
        self._grow()
        if self.probe_drawn():
            self.probeDrawn.emit()

    def show_timeline(self, steps: Sequence[int], index: int) -> None:
        """The kept checkpoints' steps, the slider at ``index`` (no ``timelineMoved`` for it)."""
        self.timeline.blockSignals(True)
        self.timeline.setRange(0, max(len(steps) - 1, 0))
        self.timeline.setValue(index)
        self.timeline.blockSignals(False)
        self.timeline.setEnabled(len(steps) > 1)

    def set_timeline_text(self, text: str) -> None:
        self.timelineLabel.setText(text)
