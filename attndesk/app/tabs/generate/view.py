"""The generation stepper's view: a decoder writes token by token, and each step shows the token it
chose, the top-k next-token probabilities it chose from, and the attention row of the position
that chose it — every layer and head, or one layer's heads.

The view only draws ``GenerationStep``s (plain numpy) and reports intents; the presenter
(``presenter``) runs the steps off the GUI thread.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from einops import rearrange
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name
from attndesk.models import GenerationStep

from ...widgets.heatmap import MatrixPlot, PreparedMatrix, prepare_matrix
from ...widgets.lazy_plot import LazyPlot
from ...widgets.plot_axes import without_si_prefix

ALL_LAYERS = -1  # the layer combo's "every layer × head" entry
PARTS = (("self", "decoder self-attention"), ("cross", "cross-attention (source tokens)"))
_GENERATED_STYLE = "background: #dde8ff; font-weight: bold;"
_SELECTED_STYLE = "background: #ffb54d; font-weight: bold;"
PROMPT_TAIL = 40  # prompt tokens the sequence line shows before the generated ones
GENERATED_TAIL = 200  # generated tokens it shows (the step list holds them all)
_PIN_TIP = "the prompt and the generated tokens become the input text; once its run is on screen, Compare shows it"


@dataclass(frozen=True)
class GenerationSettings:
    """How the next tokens are chosen: "greedy" or "sample" (temperature, top-k None = all, seed)."""

    sampling: str = "greedy"
    temperature: float = 1.0
    top_k: int | None = None
    seed: int = 0
    count: int = 10  # tokens one "Run N" generates


def probability_text(p: float) -> str:
    """0.312 -> '31.2%'; a random model's 3.3e-05 stays readable rather than '0.0%'."""
    return f"{p:.1%}" if p >= 0.001 else f"{p:.2g}"


def row_matrix(step: GenerationStep, layer: int = ALL_LAYERS, part: str = "self") -> tuple[np.ndarray, list[str]]:
    """The deciding position's attention row as a matrix to draw, with its row labels:
    every layer x head ([layers * H, K]) or one layer's heads ([H, K])."""
    rows = step.cross_attention if part == "cross" else step.attention  # [N, H, K]
    if rows is None:
        raise ValueError("this step has no cross-attention (a decoder-only model)")
    layers, heads = rows.shape[:2]
    if layer == ALL_LAYERS:
        labels = [head_name(n, h) for n in range(layers) for h in range(heads)]
        return rearrange(rows, "n h k -> (n h) k"), labels
    return rows[int(layer)], [head_name(int(layer), h) for h in range(heads)]


def bars_of(step: GenerationStep) -> tuple[list[str], np.ndarray, int]:
    """(tokens, probabilities, the chosen one's index): the top-k, and a sampled token from outside
    the top-k added last, so the chosen bar is always there."""
    dist = step.distribution
    tokens, probs = list(dist.tokens), np.asarray(dist.probs, np.float32)
    chosen = next((i for i, t in enumerate(dist.ids) if int(t) == step.token_id), None)
    if chosen is None:
        tokens, probs, chosen = tokens + [step.token], np.append(probs, np.float32(step.probability)), len(tokens)
    return tokens, probs, chosen


@dataclass(frozen=True, eq=False)
class PreparedRow:
    """A step's row as drawn for one (layer, part) choice, made by ``prepare_row`` (thread-safe)."""

    key: tuple  # (step index, layer, part)
    labels: list[str]
    prepared: PreparedMatrix


def prepare_row(step: GenerationStep, layer: int = ALL_LAYERS, part: str = "self") -> PreparedRow:
    """The numpy half of drawing a step's row (levels, display image): the stepper's side job does
    it with the step, so the GUI thread only hands the small image to Qt."""
    matrix, labels = row_matrix(step, layer, part)
    prepared = prepare_matrix(matrix, levels=(0.0, max(float(matrix.max(initial=0.0)), 1e-6)))
    return PreparedRow((step.index, layer, part), labels, prepared)


class TopTokenBars(LazyPlot):
    """Horizontal bars of the top-k next-token probabilities, most probable on top; the chosen
    token's bar is orange. Its plot is built on first show; the bars drawn before wait for it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(self._build_bars_plot, parent=parent)
        self.setObjectName("topTokenBarsHolder")
        self.tokens: list[str] = []
        self.probs = np.zeros(0, np.float32)
        self._bars: pg.BarGraphItem | None = None
        self._ticks: list[tuple[int, str]] = []
        self.when_built(self._frame)

    def _build_bars_plot(self) -> pg.PlotWidget:
        plot = pg.PlotWidget(objectName="topTokenBars", enableMenu=False)
        plot.setBackground("w")
        item = plot.getPlotItem()
        item.hideButtons()
        item.invertY(True)
        item.setMouseEnabled(False, False)
        item.setLabel("bottom", "probability")
        without_si_prefix(item)
        return plot

    @property
    def item(self) -> pg.PlotItem:
        """The plot's PlotItem (the plot built on first use)."""
        return self.plot.getPlotItem()

    def set_bars(self, tokens: list[str], probs: np.ndarray, chosen: int | None) -> None:
        self.tokens, self.probs = list(tokens), np.asarray(probs, np.float32)
        if self._bars is not None and self.built:
            self.item.removeItem(self._bars)
        brushes = [pg.mkBrush("#f28e2b" if i == chosen else "#4e79a7") for i in range(len(tokens))]
        self._bars = pg.BarGraphItem(x0=0.0, y=np.arange(len(tokens)), height=0.7, width=self.probs, brushes=brushes)
        # isolated left-to-right: a right-to-left token cannot reorder its own label
        self._ticks = [
            (i, f"\u2066{t!r}\u2069 {probability_text(float(p))}") for i, (t, p) in enumerate(zip(tokens, self.probs))
        ]
        if self.built:
            self._frame()

    def _frame(self) -> None:
        """The bars, their labels and the ranges, into the built plot (none before the first bars)."""
        if self._bars is None:
            return
        item = self.item
        item.addItem(self._bars)
        item.getAxis("left").setTicks([self._ticks])
        item.setYRange(-0.5, max(len(self.tokens), 1) - 0.5, padding=0.02)
        # the longest bar near the right edge: a flat distribution's bars are still told apart
        item.setXRange(0.0, float(self.probs.max(initial=0.0)) * 1.1 or 1.0, padding=0.0)

    def clear_bars(self) -> None:
        self.set_bars([], np.zeros(0), None)


def _fix_lines(label: QLabel, lines: int) -> None:
    """Keep ``label`` ``lines`` lines high, its text at the top left."""
    label.setFixedHeight(label.fontMetrics().lineSpacing() * lines + 4)
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)


def _sequence_html(prompt: list[str], steps: list[GenerationStep], selected: GenerationStep | None) -> str:
    """The end of the prompt and the last generated tokens (``selected`` marked), as rich text."""
    cut = max(0, len(prompt) - PROMPT_TAIL)
    parts = [f"<span style='color: gray;'>… {cut} tokens …</span>"] if cut else []
    parts += [html.escape(t) for t in prompt[cut:]]
    for step in steps[-GENERATED_TAIL:]:
        style = _SELECTED_STYLE if step is selected else _GENERATED_STYLE
        parts.append(f"<span style='{style}'>{html.escape(step.token)}</span>")
    return " ".join(parts)


def _row_title(step: GenerationStep, query: str, part: str, shape: tuple[int, ...]) -> str:
    who = "cross-attention over the source" if part == "cross" else "attention over the tokens so far"
    return (
        f"<b>step {step.index + 1}</b>: position {step.query_position} "
        f"({html.escape(repr(query))}) chose "
        f"<b>{html.escape(repr(step.token))}</b> · {who} [{shape[0]} × {shape[1]}]"
    )


def _bars_title(step: GenerationStep) -> str:
    return (
        f"<b>next-token probabilities</b> (top {len(step.distribution.tokens)}) · chose "
        f"{html.escape(repr(step.token))} p={probability_text(step.probability)} · {step.seconds * 1000:.0f} ms"
    )


def _grid(*rows: tuple[QWidget, ...]) -> QGridLayout:
    """``rows`` of widgets, one grid row each."""
    grid = QGridLayout()
    for row, widgets in enumerate(rows):
        for column, widget in enumerate(widgets):
            grid.addWidget(widget, row, column)
    return grid


def _column(top: QHBoxLayout | QWidget, main: QWidget, under: QWidget | None = None) -> QWidget:
    """A pane: ``top`` (a line of controls or a title), ``main`` (stretched), then ``under``, no margins."""
    pane = QWidget()
    column = QVBoxLayout(pane)
    column.setContentsMargins(0, 0, 0, 0)
    if isinstance(top, QHBoxLayout):
        column.addLayout(top)
    else:
        column.addWidget(top)
    column.addWidget(main, 1)
    if under is not None:
        column.addWidget(under)
    return pane


class GenerateView(QWidget):
    """API: ``settings()``, ``set_available(ok, message)``, ``set_busy(busy, message)``,
    ``set_pin_allowed(ok, reason)``, ``set_sequence(prompt_tokens, steps)`` (selects the newest step), ``select_step(i)``,
    ``shown_row()`` (the exact matrix drawn), ``shown_bars()`` ((tokens, probabilities)).
    Intents: ``stepRequested()``, ``runRequested(n)``, ``stopRequested()``, ``restartRequested()``,
    ``pinRequested("A" | "B")``."""

    stepRequested = Signal()
    runRequested = Signal(int)
    stopRequested = Signal()
    restartRequested = Signal()
    pinRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("generateView")
        self._prompt: list[str] = []
        self._steps: list[GenerationStep] = []
        self._selected: int | None = None
        self._busy = False
        self._available = False
        self._pin_ok = False
        self._ready: PreparedRow | None = None
        self._source: list[str] = []
        self._build_controls()
        self._build_results()
        self._lay_out()
        self._update_enabled()

    # -- construction ----------------------------------------------------------------------------
    def _build_controls(self) -> None:
        self.samplingCombo = named(QComboBox(), "samplingCombo")
        self.samplingCombo.addItem("greedy", "greedy")
        self.samplingCombo.addItem("sample", "sample")
        self.samplingCombo.setToolTip(
            "greedy: the most probable token; sample: drawn from softmax(logits / "
            "temperature), from the top-k only when top-k is set, seeded"
        )
        self.temperatureSpin = named(
            QDoubleSpinBox(),
            "temperatureSpin",
            decimals=2,
            minimum=0.05,
            maximum=10.0,
            singleStep=0.1,
            value=1.0,
            prefix="temperature ",
        )
        self.topKSpin = named(QSpinBox(), "topKSpin", minimum=0, maximum=100_000, value=50, prefix="top-k ")
        self.topKSpin.setSpecialValueText("top-k all")
        self.seedSpin = named(QSpinBox(), "generationSeedSpin", minimum=0, maximum=2**31 - 1, value=0, prefix="seed ")
        self.countSpin = named(QSpinBox(), "generationCountSpin", minimum=1, maximum=1000, value=10, prefix="N = ")
        self.stepButton = named(QPushButton("Step"), "generateStepButton")
        self.stepButton.setToolTip("generate one token (computed in the background)")
        self.runButton = named(QPushButton("Run N"), "generateRunButton")
        self.runButton.setToolTip("generate N tokens, one step at a time; Esc stops")
        self.stopButton = named(QPushButton("Stop (Esc)"), "generateStopButton")
        self.restartButton = named(QPushButton("Start over"), "generateRestartButton")
        self.restartButton.setToolTip("forget the generated tokens; the next step starts from the input text")
        self.pinAButton = named(QPushButton("Compare: pin as A"), "generatePinAButton")
        self.pinBButton = named(QPushButton("Compare: show as B"), "generatePinBButton")
        for button in (self.pinAButton, self.pinBButton):
            button.setToolTip(_PIN_TIP)
        self.samplingCombo.currentIndexChanged.connect(lambda _i: self._update_enabled())
        self.stepButton.clicked.connect(lambda: self.stepRequested.emit())
        self.runButton.clicked.connect(lambda: self.runRequested.emit(self.countSpin.value()))
        self.stopButton.clicked.connect(lambda: self.stopRequested.emit())
        self.restartButton.clicked.connect(lambda: self.restartRequested.emit())
        self.pinAButton.clicked.connect(lambda: self.pinRequested.emit("A"))
        self.pinBButton.clicked.connect(lambda: self.pinRequested.emit("B"))

    def _build_results(self) -> None:
        self.message = named(QLabel(""), "generateMessage")
        self.message.setWordWrap(True)
        self.sequenceLabel = named(QLabel(""), "generateSequence")
        self.sequenceLabel.setWordWrap(True)
        self.sequenceLabel.setTextFormat(Qt.TextFormat.RichText)
        self.sequenceLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stepList = named(QListWidget(), "generateStepList")
        self.stepList.setMaximumWidth(220)
        self.stepList.currentRowChanged.connect(self._on_row)
        self.layerCombo = named(QComboBox(), "generateLayerCombo")
        self.layerCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.layerCombo.currentIndexChanged.connect(lambda _i: self._draw())
        self.partCombo = named(QComboBox(), "generatePartCombo")
        for key, label in PARTS:
            self.partCombo.addItem(label, key)
        self.partCombo.currentIndexChanged.connect(lambda _i: self._draw())
        self.rowPlot = MatrixPlot("attention row of the deciding position")
        self.rowPlot.setObjectName("generateRowPlot")
        self.rowPlot.cellHovered.connect(self._hover)
        self.readout = named(QLabel(" "), "generateReadout")
        self.bars = TopTokenBars()
        self.barsTitle = named(QLabel("<b>next-token probabilities</b>"), "generateBarsTitle")
        self.barsTitle.setWordWrap(True)
        # text that changes every step keeps its height: a label growing by a line would relayout
        # the splitter and both plots at every step
        for fixed, lines in ((self.message, 2), (self.sequenceLabel, 3), (self.readout, 1), (self.barsTitle, 2)):
            _fix_lines(fixed, lines)
        _fix_lines(self.rowPlot.title, 2)

    def _lay_out(self) -> None:
        controls = _grid(  # two rows of four: the window stays as narrow as its other tabs let it
            (self.samplingCombo, self.temperatureSpin, self.topKSpin, self.seedSpin),
            (self.stepButton, self.countSpin, self.runButton, self.stopButton),
            (self.restartButton, self.pinAButton, self.pinBButton),
        )
        choose = QHBoxLayout()
        choose.addWidget(QLabel("show"))
        choose.addWidget(self.layerCombo)
        choose.addWidget(self.partCombo)
        choose.addStretch(1)
        picture = _column(choose, self.rowPlot, self.readout)
        bars = _column(self.barsTitle, self.bars)
        split = named(QSplitter(Qt.Orientation.Horizontal), "generateSplitter")
        split.addWidget(self.stepList)
        split.addWidget(picture)
        split.addWidget(bars)
        split.setStretchFactor(1, 3)
        split.setStretchFactor(2, 2)
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.message)
        layout.addWidget(self.sequenceLabel)
        layout.addWidget(split, 1)

    # -- API -------------------------------------------------------------------------------------
    def settings(self) -> GenerationSettings:
        top_k = self.topKSpin.value()
        return GenerationSettings(
            sampling=self.samplingCombo.currentData(),
            temperature=self.temperatureSpin.value(),
            top_k=top_k or None,
            seed=self.seedSpin.value(),
            count=self.countSpin.value(),
        )

    def set_available(self, ok: bool, message: str = "") -> None:
        """Whether the current model generates (a decoder or an encoder-decoder); else why not."""
        self._available = bool(ok)
        self.message.setText(message)
        self._update_enabled()

    def set_busy(self, busy: bool, message: str | None = None) -> None:
        self._busy = bool(busy)
        if message is not None:
            self.message.setText(message)
        self._update_enabled()

    def set_pin_allowed(self, ok: bool, reason: str = "") -> None:
        """Whether the generated text can go to Compare for this model (else ``reason`` says why)."""
        self._pin_ok = bool(ok)
        for button in (self.pinAButton, self.pinBButton):
            button.setToolTip(reason or _PIN_TIP)
        self._update_enabled()

    def row_choice(self) -> tuple[int, str]:
        """(layer or ``ALL_LAYERS``, part) the row picture shows."""
        layer = self.layerCombo.currentData() if self.layerCombo.count() else ALL_LAYERS
        part = self.partCombo.currentData() if not self.partCombo.isHidden() else "self"
        return layer, part

    def set_sequence(
        self,
        prompt: list[str],
        steps: list[GenerationStep],
        prepared: PreparedRow | None = None,
        source: list[str] | None = None,
    ) -> None:
        """The prompt tokens and every step so far; the newest step is selected and drawn (from
        ``prepared`` when it was made for it and the current choice). ``source``: an
        encoder-decoder's source tokens (the cross-attention's keys)."""
        self._ready, self._source = prepared, list(source or [])
        grown = len(steps) > len(self._steps) and self._prompt == list(prompt)
        self._prompt, self._steps = list(prompt), list(steps)
        self._fill_layers()
        self.stepList.blockSignals(True)
        if not grown:
            self.stepList.clear()
        for step in steps[self.stepList.count() :]:
            QListWidgetItem(f"{step.index + 1}. {step.token!r}  p={probability_text(step.probability)}", self.stepList)
        self.stepList.blockSignals(False)
        self.select_step(len(steps) - 1 if steps else None)
        self._update_enabled()

    def select_step(self, index: int | None) -> None:
        self._selected = index
        if index is not None and self.stepList.currentRow() != index:
            self.stepList.blockSignals(True)
            self.stepList.setCurrentRow(index)
            self.stepList.blockSignals(False)
        self._draw()

    def selected_step(self) -> GenerationStep | None:
        return self._steps[self._selected] if self._selected is not None and self._selected < len(self._steps) else None

    def steps(self) -> list[GenerationStep]:
        return list(self._steps)

    def set_layer(self, layer: int) -> None:
        """Show one layer's heads (``ALL_LAYERS``: every layer x head)."""
        self.layerCombo.setCurrentIndex(max(0, self.layerCombo.findData(int(layer))))

    def set_part(self, part: str) -> None:
        self.partCombo.setCurrentIndex(max(0, self.partCombo.findData(part)))

    def shown_row(self) -> np.ndarray | None:
        return self.rowPlot.matrix

    def shown_bars(self) -> tuple[list[str], np.ndarray]:
        return list(self.bars.tokens), self.bars.probs.copy()

    # -- drawing ---------------------------------------------------------------------------------
    def _fill_layers(self) -> None:
        layers = self._steps[0].attention.shape[0] if self._steps else 0
        if self.layerCombo.count() == layers + 1:
            return
        current = self.layerCombo.currentData()
        self.layerCombo.blockSignals(True)
        self.layerCombo.clear()
        self.layerCombo.addItem("every layer × head", ALL_LAYERS)
        for n in range(layers):
            self.layerCombo.addItem(f"layer {n}: heads", n)
        self.layerCombo.setCurrentIndex(max(0, self.layerCombo.findData(current)))
        self.layerCombo.blockSignals(False)
        cross = bool(self._steps) and self._steps[0].cross_attention is not None
        self.partCombo.setVisible(cross)
        if not cross:
            self.partCombo.setCurrentIndex(0)

    def _draw(self) -> None:
        step = self.selected_step()
        self._show_sequence(step)
        if step is None:
            self.rowPlot.clear("no step yet: press Step or Run N")
            self.bars.clear_bars()
            return
        layer, part = self.row_choice()
        ready, self._ready = self._ready, None
        if ready is None or ready.key != (step.index, layer, part):
            ready = prepare_row(step, layer, part)  # another step or layer: one layer's rows, or a few hundred
        matrix, keys = ready.prepared.matrix, self._keys(step, part)
        self.rowPlot.show_prepared(ready.prepared, row_labels=ready.labels, col_labels=keys)
        query = self._keys(step, "self")[-1]  # the token at the deciding position
        self.rowPlot.set_title(_row_title(step, query, part, matrix.shape))
        self.bars.set_bars(*bars_of(step))
        self.barsTitle.setText(_bars_title(step))

    def _keys(self, step: GenerationStep, part: str) -> list[str]:
        """Key labels: the sequence up to the deciding position (self), or the source (cross)."""
        if part == "cross":
            assert step.cross_attention is not None, "an encoder-decoder's step"
            count = step.cross_attention.shape[-1]
            return self._source if len(self._source) == count else [f"src {i}" for i in range(count)]
        sequence = self._prompt + [s.token for s in self._steps]
        return sequence[: step.query_position + 1]

    def _show_sequence(self, selected: GenerationStep | None) -> None:
        """The end of the prompt and every generated token (laying out hundreds of rich-text spans
        takes longer than a GUI-thread turn: the whole prompt is in the input box anyway)."""
        self.sequenceLabel.setText(_sequence_html(self._prompt, self._steps, selected))

    @Slot(int)
    def _on_row(self, row: int) -> None:
        if 0 <= row < len(self._steps):
            self.select_step(row)

    @Slot(int, int)
    def _hover(self, r: int, c: int) -> None:
        plot = self.rowPlot
        if plot.matrix is None:
            return
        self.readout.setText(f"{plot.row_labels[r]} → {plot.col_labels[c]!r} ({c}): {float(plot.matrix[r, c]):.4f}")

    def _update_enabled(self) -> None:
        idle = self._available and not self._busy
        for widget in (
            self.stepButton,
            self.runButton,
            self.restartButton,
            self.countSpin,
            self.samplingCombo,
            self.seedSpin,
        ):
            widget.setEnabled(idle)
        sampling = self.samplingCombo.currentData() == "sample"
        self.temperatureSpin.setEnabled(idle and sampling)
        self.topKSpin.setEnabled(idle and sampling)
        self.stopButton.setEnabled(self._busy)
        for button in (self.pinAButton, self.pinBButton):
            button.setEnabled(idle and self._pin_ok and bool(self._steps))


__all__ = [
    "ALL_LAYERS",
    "GenerateView",
    "GenerationSettings",
    "PreparedRow",
    "TopTokenBars",
    "bars_of",
    "prepare_row",
    "probability_text",
    "row_matrix",
]
