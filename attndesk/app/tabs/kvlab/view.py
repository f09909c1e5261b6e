"""The KV cache tab's view: pick a model, a policy (its options built from its declarations), a
budget and how many of the input's last tokens are decode steps; see, for one layer, each K/V
head's kept keys over the decode steps (coloured by the full run's weight) and evicted keys
hatched, the compressed run's weights of one head with its evicted keys hatched, the KL and
accuracy against the budget with the oracle's curve, and the head's sink and retrieval scores.

No presenter imports: the tab's presenter (``app/tabs/kvlab.py``) fills it and runs its jobs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.kvcache import POLICIES
from attndesk.kvcache.sweep import curves
from attndesk.runs.fields import Param

from ...widgets.heatmap import MatrixPlot
from ...widgets.holdings import held_by
from ...widgets.interp import RunBar
from ...widgets.lazy_plot import LazyPlot
from ...widgets.plot_axes import without_si_prefix

ORACLE = "oracle"
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def option_control(spec: Param) -> QWidget:
    """A control for one policy option, from its declaration (kind, choices, range, default, tip)."""
    default = spec.default
    if spec.kind is bool:
        box = QCheckBox()
        box.setChecked(bool(default))
        control: QWidget = box
    elif spec.choices:
        combo = QComboBox()
        combo.addItems([str(c) for c in spec.choices])
        combo.setCurrentText(str(default))
        control = combo
    elif spec.kind is int:
        spin = QSpinBox()
        low = int(spec.low if spec.low is not None else 0) - spec.optional  # one below: None, by its name
        spin.setRange(low, int(spec.high if spec.high is not None else 10**6))
        spin.setValue(low if default is None else int(default))
        control = spin
    else:
        dspin = QDoubleSpinBox(decimals=3, singleStep=0.05)
        low_f = float(spec.low if spec.low is not None else 0.0) - 0.001 * spec.optional
        dspin.setRange(low_f, float(spec.high if spec.high is not None else 1e6))
        dspin.setValue(low_f if default is None else float(default))
        control = dspin
    if spec.optional and isinstance(control, (QSpinBox, QDoubleSpinBox)):
        control.setSpecialValueText(spec.none)  # the lowest value reads as what None means
    control.setObjectName(f"kvlabOption_{spec.name}")
    control.setToolTip(spec.tip)
    return control


def control_value(control: QWidget) -> Any:
    if isinstance(control, QCheckBox):
        return control.isChecked()
    if isinstance(control, QComboBox):
        return control.currentText()
    if isinstance(control, (QSpinBox, QDoubleSpinBox)):
        at_none = bool(control.specialValueText()) and control.value() == control.minimum()
        return None if at_none else control.value()
    raise TypeError(type(control).__name__)


class KVLabView(QWidget):
    sweepRequested = Signal()
    storeRequested = Signal(str)  # a sweep store's folder, to draw its curves over the corpus
    shownChanged = Signal()  # the layer or head picked for the pictures

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._build_controls()
        self._build_pictures()
        layout = QVBoxLayout(self)
        layout.addLayout(self._picks_layout())
        layout.addWidget(self.bar)
        layout.addWidget(self.summaryLabel)
        layout.addWidget(self.scoresLabel)
        layout.addLayout(self._pictures_layout(), 1)
        self.curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # policy: budgets, KL, accuracy
        # a corpus sweep's bands over its texts: policy: budgets, (KL low, high), (accuracy low, high)
        self.bands: dict[str, tuple[np.ndarray, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]] = {}
        self.result: Any = None
        self.policyCombo.currentIndexChanged.connect(self._build_options)
        self.layerSpin.valueChanged.connect(self._redraw)
        self.headSpin.valueChanged.connect(self._redraw)
        self.sweepButton.clicked.connect(self.sweepRequested)
        self.storeButton.clicked.connect(self._ask_store)
        self._build_options()

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the lab's run, its curves and its plots."""
        return held_by(self.result, self.curves, self.bands, self.heatmap, *self.rasterPlots)

    def _build_controls(self) -> None:
        self.modelCombo = named(QComboBox(), "kvlabModel")
        self.modelCombo.setToolTip("a shipped toy preset, or the pretrained decoder open in the window")
        self.policyCombo = named(QComboBox(), "kvlabPolicy")
        for name, policy in POLICIES.items():
            self.policyCombo.addItem(policy.title, name)
            self.policyCombo.setItemData(self.policyCombo.count() - 1, policy.about, 3)  # the item's tooltip
        self.budgetSpin = named(QSpinBox(), "kvlabBudget", minimum=1, maximum=1_000_000, value=8)
        self.budgetSpin.setToolTip("keys each K/V head keeps (on average for PyramidKV, AdaKV and DuoAttention)")
        self.decodeSpin = named(QSpinBox(), "kvlabDecode", minimum=1, maximum=4096, value=4)
        self.decodeSpin.setToolTip("the input's last tokens read as decode steps; the rest is the prompt")
        self.textEdit = named(QLineEdit(), "kvlabText")
        self.textEdit.setPlaceholderText("a toy preset reads its probe input when empty; a decoder reads text")
        self.layerSpin = named(QSpinBox(), "kvlabLayer", minimum=1, maximum=1)
        self.headSpin = named(QSpinBox(), "kvlabHead", minimum=1, maximum=1)
        self.optionsBox = named(QWidget(), "kvlabOptions")
        self.optionsForm = QFormLayout(self.optionsBox)
        self.optionsForm.setContentsMargins(0, 0, 0, 0)
        self.options: dict[str, QWidget] = {}
        self.bar = RunBar("kvlab", "Run")
        self.sweepButton = named(QPushButton("Sweep budgets"), "kvlabSweepButton")
        self.sweepButton.setToolTip(
            "this policy and the oracle at 10 budgets: mean KL(full ‖ compressed) and accuracy against the budget"
        )
        self.storeButton = named(QPushButton("Open corpus sweep…"), "kvlabStoreButton")
        self.storeButton.setToolTip(
            "the curves of a sweep over a corpus (attndesk kvcache --corpus): each policy's mean over the texts, "
            "with a band from their first to their third quartile"
        )
        bar_row = self.bar.layout()
        assert isinstance(bar_row, QHBoxLayout)
        bar_row.insertWidget(1, self.sweepButton)
        bar_row.insertWidget(2, self.storeButton)

    def _picks_layout(self) -> QHBoxLayout:
        picks = QFormLayout()
        picks.addRow("Model", self.modelCombo)
        picks.addRow("Input", self.textEdit)
        picks.addRow("Policy", self.policyCombo)
        picks.addRow("Budget", self.budgetSpin)
        picks.addRow("Decode steps", self.decodeSpin)
        shown = QHBoxLayout()
        shown.addWidget(QLabel("Layer"))
        shown.addWidget(self.layerSpin)
        shown.addWidget(QLabel("Head"))
        shown.addWidget(self.headSpin)
        shown.addStretch(1)
        picks.addRow("Shown", shown)
        top = QHBoxLayout()
        top.addLayout(picks, 2)
        top.addWidget(self.optionsBox, 1)
        return top

    def _build_pictures(self) -> None:
        self.rasterBox = named(QWidget(), "kvlabRasters")
        self.rasters = QGridLayout(self.rasterBox)
        self.rasters.setContentsMargins(0, 0, 0, 0)
        self.rasterKey = named(
            QLabel(
                "Rows: decode steps; columns: keys. A kept key is coloured by the full run's weight on it; "
                "evicted keys (and keys not read yet) are hatched."
            ),
            "kvlabRasterKey",
        )
        self.rasterKey.setWordWrap(True)
        self.rasters.addWidget(self.rasterKey, 0, 0, 1, 4)
        self.rasterPlots: list[MatrixPlot] = []
        self.heatmap = MatrixPlot("the compressed run's weights")
        self.heatmap.setObjectName("kvlabHeatmap")
        # the curves' plots, built on first show: what is drawn before is kept (``curves``, ``bands``)
        self.klHolder = named(
            LazyPlot(lambda: self._curve_plot("kvlabKL", "mean KL, nats"), minimum=(0, 220)), "kvlabKLHolder"
        )
        self.accuracyHolder = named(
            LazyPlot(lambda: self._curve_plot("kvlabAccuracy", "accuracy"), minimum=(0, 220)), "kvlabAccuracyHolder"
        )
        self.klHolder.when_built(lambda: _draw_curve(self.klHolder.plot, 1, self.curves, self.bands))
        self.accuracyHolder.when_built(lambda: _draw_curve(self.accuracyHolder.plot, 2, self.curves, self.bands))
        self.scoresLabel = named(
            QLabel("Run: one policy at one budget. Sweep budgets: its curves beside the oracle's."), "kvlabScores"
        )
        self.scoresLabel.setWordWrap(True)
        self.summaryLabel = named(QLabel(""), "kvlabSummary")
        self.summaryLabel.setWordWrap(True)

    def _pictures_layout(self) -> QGridLayout:
        pictures = QGridLayout()
        pictures.addWidget(self.rasterBox, 0, 0)
        pictures.addWidget(self.heatmap, 0, 1)
        pictures.addWidget(self.klHolder, 1, 0)
        pictures.addWidget(self.accuracyHolder, 1, 1)
        pictures.setRowStretch(0, 3)
        pictures.setRowStretch(1, 2)
        pictures.setColumnStretch(0, 3)
        pictures.setColumnStretch(1, 2)
        return pictures

    @staticmethod
    def _curve_plot(name: str, label: str) -> pg.PlotWidget:
        plot = pg.PlotWidget(objectName=name)
        without_si_prefix(plot.getPlotItem())
        plot.setLogMode(x=True, y=False)
        plot.setLabel("bottom", "budget (keys per K/V head)")
        plot.setLabel("left", label)
        plot.addLegend(offset=(-10, 10))
        plot.setBackground("w")
        return plot

    # -- the pickers -------------------------------------------------------------------------------
    def set_models(self, models: list[tuple[str, tuple[str, str]]]) -> None:
        """(label, source) pairs; the current choice stays when it is still offered."""
        current = self.modelCombo.currentData()
        self.modelCombo.blockSignals(True)
        self.modelCombo.clear()
        for label, source in models:
            self.modelCombo.addItem(label, source)
        index = self.modelCombo.findData(current) if current is not None else -1
        self.modelCombo.setCurrentIndex(max(0, index))
        self.modelCombo.blockSignals(False)

    def source(self) -> tuple[str, str]:
        return self.modelCombo.currentData()

    def policy(self) -> str:
        return str(self.policyCombo.currentData())

    def _build_options(self) -> None:
        while self.optionsForm.rowCount():
            self.optionsForm.removeRow(0)
        self.options = {}
        fields = POLICIES[self.policy()].option_fields()
        for spec in fields:
            control = option_control(spec)
            self.options[spec.name] = control
            self.optionsForm.addRow(spec.label or spec.name, control)
        if not fields:
            self.optionsForm.addRow(QLabel(f"{POLICIES[self.policy()].title} takes no options"))

    def option_values(self) -> dict[str, Any]:
        return {name: control_value(control) for name, control in self.options.items()}

    # -- the pictures ------------------------------------------------------------------------------
    def show_run(self, lab) -> None:
        """A ``kvcache.lab.LabRun``: the rasters, the heatmap and the scores of the picked layer and head."""
        self.result = lab
        layers, heads = lab.weights.shape[:2]
        self.layerSpin.setMaximum(layers)
        self.headSpin.setMaximum(heads)
        run = lab.run
        rows = np.arange(run.prompt, run.rows)
        said = run.logits.argmax(-1)
        answered = ""
        if lab.answers:
            right = np.mean([said[r] == t for r, t in lab.answers.items()])
            answered = f", answers right {100 * right:.0f}%"
        self.summaryLabel.setText(
            f"{run.policy}, budget {run.budget}: {run.prompt} prompt tokens, {len(rows)} decode steps; "
            f"mean KL {run.kl[rows].mean():.4g} nats, agrees with the full run on "
            f"{100 * run.agree[rows].mean():.0f}% of the steps{answered}"
        )
        self._redraw()

    def _redraw(self) -> None:
        lab = self.result
        if lab is None:
            return
        layer, head = self.layerSpin.value() - 1, self.headSpin.value() - 1
        run = lab.run
        kv_heads = run.keep.shape[1]
        steps = np.arange(run.prompt, run.rows)
        while len(self.rasterPlots) < kv_heads:
            plot = MatrixPlot("")
            plot.setObjectName(f"kvlabRaster{len(self.rasterPlots)}")
            self.rasters.addWidget(plot, 1 + len(self.rasterPlots) // 4, len(self.rasterPlots) % 4)
            self.rasterPlots.append(plot)
        for kv, plot in enumerate(self.rasterPlots):
            plot.setVisible(kv < kv_heads)
            if kv >= kv_heads:
                continue
            group = slice(kv * lab.groups, (kv + 1) * lab.groups)
            score = lab.full_weights[layer, group][:, steps].mean(0)  # the full run's weight, the group's mean
            plot.set_matrix(
                score,
                masked=~run.keep[layer, kv][steps],
                row_labels=[f"step {r - run.prompt + 1} ({run.tokens[r]})" for r in steps],
                col_labels=run.tokens,
            )
            plot.set_title(f"<b>L{layer + 1} K/V {kv + 1}</b>: kept keys by step")
        keep = run.keep[layer, head // lab.groups]
        self.heatmap.set_matrix(lab.weights[layer, head], masked=~keep, row_labels=run.tokens, col_labels=run.tokens)
        self.heatmap.set_title(f"<b>L{layer + 1} H{head + 1}</b>: the compressed run's weights, evicted keys hatched")
        sinks = lab.sinks
        words = [
            f"<b>L{layer + 1} H{head + 1}</b>: first-token weight {sinks.first_token[layer, head]:.3f}"
            + (" (a sink head)" if sinks.is_sink[layer, head] else ""),
            "secondary sinks "
            + ", ".join(
                f"{run.tokens[k]}@{k} ({w:.2f})"
                for k, w in zip(sinks.secondary_keys[layer, head], sinks.secondary_weights[layer, head], strict=True)
            ),
            f"sink heads in this layer {100 * sinks.sink_share_by_layer[layer]:.0f}%",
        ]
        if sinks.softmax_sink is not None:
            words.append(f"softmax sink share {sinks.softmax_sink[layer, head]:.3f}")
        if lab.retrieval is not None:
            words.append(f"retrieval score {lab.retrieval[layer, head]:.3f} (needle task)")
        if lab.ablation:
            words.append(
                "needle accuracy lost with the top-k retrieval heads vs k random others ablated: "
                + ", ".join(f"k={c.k} {c.top_drop:.0f} vs {c.random_drop:.0f} points" for c in lab.ablation)
            )
        self.scoresLabel.setText(" · ".join(words))
        self.shownChanged.emit()

    def _ask_store(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a KV-cache sweep over a corpus")
        if folder:
            self.storeRequested.emit(folder)

    def show_corpus(self, found) -> None:
        """A ``kvcache.lab.CorpusCurves``: every policy's mean over the texts and its band (the
        texts' quartiles), in place of the curves on screen."""
        self.curves, self.bands = {}, {}
        for name, kl in found.kl.items():
            accuracy = found.accuracy[name]
            self.curves[name] = (kl.budgets, kl.mean, accuracy.mean)
            self.bands[name] = (kl.budgets, (kl.low, kl.high), (accuracy.low, accuracy.high))
        what = "task answer accuracy" if found.metric == "accuracy" else "agreement with the full run"
        self.summaryLabel.setText(
            f"sweep over {found.texts} texts with {found.model}: mean KL and {what} by policy; each band spans "
            "the texts' first to third quartile"
        )
        self._draw_curves()

    def show_sweep(self, table: list[dict]) -> None:
        """Rows of ``kvcache.sweep``: each policy's curve replaces its earlier one (its accuracy, or
        its agreement with the full run where the input has no answers); a corpus's curves on
        screen are cleared first."""
        if self.bands:
            self.curves, self.bands = {}, {}
        kl, accuracy, agree = (curves(table, metric) for metric in ("kl_mean", "accuracy", "agree"))
        for name, (budgets, kl_mean) in kl.items():
            correct = accuracy[name][1]
            self.curves[name] = (
                budgets.astype(float),
                kl_mean,
                np.where(np.isfinite(correct), correct, agree[name][1]),
            )
        self._draw_curves()

    def clear_curves(self) -> None:
        self.curves, self.bands = {}, {}
        self._draw_curves()

    def _draw_curves(self) -> None:
        """Draw ``curves`` (and ``bands``) into the plots built (the others draw them once built)."""
        for holder, column in ((self.klHolder, 1), (self.accuracyHolder, 2)):
            if holder.built:
                _draw_curve(holder.plot, column, self.curves, self.bands)


def _draw_curve(plot: pg.PlotWidget, column: int, curves: dict, bands: dict) -> None:
    """Column 1 (KL) or 2 (accuracy) of ``curves`` (name -> budgets, KL, accuracy) and its ``bands``,
    in place of ``plot``'s."""
    plot.clear()
    plot.getPlotItem().legend.clear()
    for i, (name, values) in enumerate(curves.items()):
        oracle = name == ORACLE
        pen = pg.mkPen("k" if oracle else _COLOURS[i % len(_COLOURS)], width=2.5 if oracle else 1.5)
        if oracle:
            pen.setStyle(pg.QtCore.Qt.PenStyle.DashLine)
        plot.plot(values[0], values[column], pen=pen, symbol="o", symbolSize=5, name=name)
        if name in bands:
            budgets, *spans = bands[name]
            low, high = spans[column - 1]
            colour = pg.mkColor("k" if oracle else _COLOURS[i % len(_COLOURS)])
            colour.setAlpha(45)
            edges = [pg.PlotDataItem(budgets, edge, pen=None) for edge in (low, high)]
            plot.addItem(pg.FillBetweenItem(*edges, brush=colour))


__all__ = ["KVLabView", "control_value", "option_control"]
