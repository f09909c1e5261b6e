"""The Train tab's widgets: the run's settings, Start / Pause / Resume / Stop, the loss and
accuracy curves, the pattern score per head, the attention on the task's probe input, and a
timeline of the kept checkpoints with the phase change marked.

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
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QRect, Qt, Signal, SignalInstance
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QSplitter,
    QStyle,
    QStyleOptionSlider,
    QVBoxLayout,
    QWidget,
)

from attndesk.core.fields import Param
from attndesk.core.types import head_name
from attndesk.train.config import TRAIN_FIELDS, TrainConfig

from ..panels.token_axis import label_font, label_room
from ..panels.variant_controls import spin_range
from .heatmap import MatrixPlot
from .pacing import PacedHost, pacer
from .plot_axes import without_si_prefix

PHASE_COLOUR = QColor(220, 40, 40)
ACCURACY_COLOUR, PATTERN_COLOUR = "#59a14f", "#e15759"  # the metric curves, named in their plot's title
ERROR_STYLE = "color: #b00020;"
CURVES_HEIGHT = 260  # px: the loss, metric and score plots
MAX_HEAD_PLOTS = 16  # heads of one layer drawn side by side; more would be too small to read
# The form: every field of TrainConfig's spec with a label, in the spec's order (the spec gives each
# control's kind, range, default and tooltip; a "zero" control's 0 stands for None).
FIELDS: tuple[Param, ...] = tuple(spec for spec in TRAIN_FIELDS if spec.label)
DEFAULTS = TrainConfig()  # the defaults with the default task's shape filled in


Control = QComboBox | QCheckBox | QDoubleSpinBox | QSpinBox


def _control(spec: Param) -> Control:
    """The control the field's declaration calls for, showing the default config's value."""
    default = getattr(DEFAULTS, spec.name)
    if spec.choices:
        choice = QComboBox()
        choice.addItems(list(spec.choices))
        choice.setCurrentText(default)
        return choice
    if spec.kind is bool:
        check = QCheckBox()
        check.setChecked(default)
        return check
    low, high = spin_range(spec)
    low = 0 if spec.control == "zero" else low
    number: QDoubleSpinBox | QSpinBox
    if spec.kind is float:
        number = QDoubleSpinBox(decimals=spec.decimals, singleStep=spec.step)
        number.setRange(low, high)  # after the decimals, which round the range
    else:
        number = QSpinBox(minimum=int(low), maximum=int(high))
    if spec.control == "zero":
        number.setSpecialValueText(spec.none)
    number.setValue(0 if default is None else default)
    return number


def _zero(widget: Control) -> bool:
    """A number control whose 0 stands for None."""
    return isinstance(widget, (QSpinBox, QDoubleSpinBox)) and bool(widget.specialValueText())


def _value(widget: Control) -> Any:
    if isinstance(widget, QComboBox):
        return widget.currentText()
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if _zero(widget) and widget.value() == widget.minimum():
        return None
    return widget.value()


def _set_value(widget: Control, value: Any) -> None:
    if isinstance(widget, QComboBox):
        widget.setCurrentText(str(value))
    elif isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    else:
        widget.setValue(0 if value is None else value)


def _edited(widget: Control) -> SignalInstance:
    """The signal ``widget`` sends when the user edits its value."""
    if isinstance(widget, QComboBox):
        return widget.currentTextChanged
    if isinstance(widget, QCheckBox):
        return widget.toggled
    return widget.valueChanged


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
        self.controls: dict[str, Control] = {}
        self.problems: dict[str, QLabel] = {}
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
        box = QGroupBox("Training run")
        grid = QGridLayout(box)
        for row, spec in enumerate(FIELDS):
            name = spec.name
            widget = _control(spec)
            widget.setObjectName(f"train_{name}")
            widget.setToolTip(spec.tip)
            problem = QLabel(objectName=f"train_{name}_problem", wordWrap=True)
            problem.setStyleSheet(ERROR_STYLE)
            problem.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            problem.hide()
            grid.addWidget(QLabel(spec.label), 2 * row, 0)
            grid.addWidget(widget, 2 * row, 1)
            grid.addWidget(problem, 2 * row + 1, 0, 1, 2)
            self.controls[name], self.problems[name] = widget, problem
            _edited(widget).connect(lambda *_a: self.settingsEdited.emit())
        buttons = QHBoxLayout()
        self.startButton = QPushButton("Start", objectName="trainStart")
        self.pauseButton = QPushButton("Pause", objectName="trainPause")
        self.resumeButton = QPushButton("Resume", objectName="trainResume")
        self.stopButton = QPushButton("Stop", objectName="trainStop")
        for button, signal in (
            (self.startButton, self.startRequested),
            (self.pauseButton, self.pauseRequested),
            (self.resumeButton, self.resumeRequested),
            (self.stopButton, self.stopRequested),
        ):
            button.clicked.connect(lambda _c=False, s=signal: s.emit())
            buttons.addWidget(button)
        opened = self._build_opened()
        self.message = QLabel(objectName="trainMessage", wordWrap=True)
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        rows = 2 * len(FIELDS)
        grid.addLayout(buttons, rows, 0, 1, 2)
        grid.addWidget(self.message, rows + 1, 0, 1, 2)
        grid.addWidget(QLabel("Trained models"), rows + 2, 0, 1, 2)
        grid.addWidget(self.presetCombo, rows + 3, 0, 1, 2)
        grid.addLayout(opened, rows + 4, 0, 1, 2)
        grid.addWidget(self.viewsButton, rows + 5, 0, 1, 2)
        grid.setRowStretch(rows + 6, 1)
        box.setMinimumWidth(230)
        box.setMaximumWidth(320)  # the plots take the rest
        return box

    def _build_opened(self) -> QHBoxLayout:
        """The shipped presets, Open… / Save… and Open in views."""
        opened = QHBoxLayout()
        self.presetCombo = QComboBox(objectName="trainPreset")
        self.presetCombo.setToolTip("small models this trainer trained, shipped with attndesk: their learned attention")
        self.presetCombo.activated.connect(self._preset_chosen)
        self.openButton = QPushButton("Open…", objectName="trainOpen")
        self.openButton.setToolTip("open a run saved by attndesk train (a folder)")
        self.openButton.clicked.connect(lambda _c=False: self.openRequested.emit())
        self.saveButton = QPushButton("Save…", objectName="trainSave")
        self.saveButton.setToolTip(
            "save the run on screen as a folder (weights, checkpoints, history), as attndesk train writes it"
        )
        self.saveButton.setEnabled(False)
        self.saveButton.clicked.connect(lambda _c=False: self.saveRequested.emit())
        self.viewsButton = QPushButton("Open in views", objectName="trainOpenInViews")
        self.viewsButton.setToolTip(
            "show this model in the toy views (heatmaps, step-through, head stats, compare before vs "
            "after training, online softmax): Weights > Random goes back"
        )
        self.viewsButton.setEnabled(False)
        self.viewsButton.clicked.connect(lambda _c=False: self.viewsRequested.emit())
        opened.addWidget(self.openButton)
        opened.addWidget(self.saveButton)
        return opened

    def _build_plots(self) -> QWidget:
        self.lossPlot = self._curve_plot("loss", "cross-entropy")
        self.lossCurve = self.lossPlot.plot([], [], pen=pg.mkPen("#4e79a7", width=1.5))
        # the title, in the curves' colours, is the legend: a legend box inside the plot covered
        # the curves where they end, at 1.0
        self.metricPlot = self._curve_plot(
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
        curves = QHBoxLayout()
        for widget, stretch in ((self.lossPlot, 3), (self.metricPlot, 3), (self.scorePlot, 2)):
            curves.addWidget(widget, stretch)
        self.layerCombo = QComboBox(objectName="trainLayer")
        self.layerCombo.setToolTip(
            "the layer whose heads are drawn (it follows the best-scoring layer until you pick one)"
        )
        self.layerCombo.currentIndexChanged.connect(lambda i: self.layerChanged.emit(max(i, 0)))
        self.layerCombo.activated.connect(lambda _i: setattr(self, "layer_chosen", True))
        self.layer_chosen = False  # the user picked a layer: stop following the best one
        self.probeCaption = QLabel(
            "the attention on the task's probe input appears here while it trains", objectName="trainProbeCaption"
        )
        head = QHBoxLayout()
        head.addWidget(QLabel("Layer"))
        head.addWidget(self.layerCombo)
        head.addWidget(self.probeCaption, 1)
        self.headGrid = QGridLayout()
        self.headGrid.setSpacing(2)
        self._columns = 0  # heads per row of the grid now (``_arrange``)
        self._side = 0  # the least width and height of a head's heatmap with every label readable
        self._plotsColumn = column = QWidget(objectName="trainPlots")
        column.installEventFilter(self)  # its width decides how many heads fit in a row
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.lossPlot, self.metricPlot, self.scorePlot):
            widget.setFixedHeight(CURVES_HEIGHT)  # the heads below take the rest of the (scrolling) page
        layout.addLayout(curves)
        layout.addLayout(self._build_timeline())  # above the heads: in view however tall their grid grows
        layout.addLayout(head)
        layout.addLayout(self.headGrid, 3)
        return column

    def _curve_plot(self, title: str, left: str) -> pg.PlotWidget:
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

    def _build_timeline(self) -> QHBoxLayout:
        self.timeline = TimelineSlider()
        self.timeline.setObjectName("trainTimeline")
        self.timeline.setToolTip(
            "the kept checkpoints: drag to see the attention at an earlier step (the red line marks the phase change)"
        )
        self.timeline.setEnabled(False)
        self.timeline.valueChanged.connect(self.timelineMoved)
        self.timelineLabel = QLabel("no checkpoints yet", objectName="trainTimelineLabel")
        self.liveButton = QPushButton("Latest", objectName="trainLive")
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
        self.presetCombo.clear()
        self.presetCombo.addItem("show a shipped preset…", "")
        for name, about in presets:
            self.presetCombo.addItem(name, name)
            self.presetCombo.setItemData(self.presetCombo.count() - 1, about, Qt.ItemDataRole.ToolTipRole)

    def _preset_chosen(self, index: int) -> None:
        name = self.presetCombo.itemData(index)
        if name:
            self.presetRequested.emit(name)

    # -- settings -------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """The values of every control, by ``TrainConfig`` field name."""
        return {name: _value(widget) for name, widget in self.controls.items()}

    def set_settings(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            widget = self.controls.get(name)
            if widget is not None and (value is not None or _zero(widget)):
                _set_value(widget, value)

    def show_problem(self, field: str | None, message: str) -> None:
        """``message`` next to the control of ``field`` (None: under the buttons); "" clears all."""
        for label in self.problems.values():
            label.hide()
        if not message:
            return
        problem = self.problems.get(field) if field is not None else None
        if problem is None:
            self.show_message(message, error=True)
        else:
            problem.setText(message)
            problem.show()

    def problem(self) -> str:
        """The message shown next to a control, or "" (for tests and the status line)."""
        return next((label.text() for label in self.problems.values() if not label.isHidden()), "")

    def show_message(self, text: str, *, error: bool = False) -> None:
        self.message.setText(text)
        self.message.setStyleSheet(ERROR_STYLE if error else "")

    def set_phase(self, phase: str) -> None:
        """ "idle", "running" or "paused": which buttons act, whether the settings can change."""
        running = phase in ("running", "paused")
        self.startButton.setEnabled(not running)
        self.pauseButton.setEnabled(phase == "running")
        self.resumeButton.setEnabled(phase == "paused")
        self.stopButton.setEnabled(running)
        for widget in (*self.controls.values(), self.presetCombo, self.openButton):
            widget.setEnabled(not running)
        if running:
            self.saveButton.setEnabled(False)
            self.viewsButton.setEnabled(False)

    # -- results --------------------------------------------------------------------------------
    def show_curves(
        self, steps: np.ndarray, loss: np.ndarray, eval_steps: np.ndarray, accuracy: np.ndarray, pattern: np.ndarray
    ) -> None:
        self.lossCurve.setData(steps, loss)
        self.accuracyCurve.setData(eval_steps, accuracy)
        self.patternCurve.setData(eval_steps, pattern)

    def show_phase(self, step: int | None, checkpoint_index: int | None) -> None:
        """Mark the phase change at ``step`` on the curves and ``checkpoint_index`` on the timeline."""
        for line in self.phaseLines:
            line.setVisible(step is not None)
            if step is not None:
                line.setValue(step)
        self.timeline.set_mark(checkpoint_index)

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
