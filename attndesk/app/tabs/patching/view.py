"""The activation patching view: a clean and a corrupted prompt, an answer and a wrong token (each
checked to be one token of the model's tokenizer), and what patching found: a layers x heads
heatmap of each head's normalised effect (an encoder-decoder's encoder, decoder or cross-attention
heads, picked), a layers x positions one of the residual stream, and a clicked head's attention on
both prompts side by side. The metric choice is every metric of the core (``inputs.METRICS``).

The view draws plain numpy (``PatchingShown``) and reports intents; the presenter
(``presenter``) runs the core's ``activation_patching`` off the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name
from attndesk.interp.inputs import METRICS as CORE_METRICS

from ...widgets.heatmap import MatrixPlot
from ...widgets.interp import RunBar, TokenField, problem_label, say

METRIC_LABELS = {
    "logit_diff": "logit difference (answer − wrong)",
    "prob": "probability of the answer",
    "kl": "KL(clean ‖ patched) of the next token",
}
METRICS = tuple((name, METRIC_LABELS[name]) for name in CORE_METRICS)  # every metric the core has, in its order
METRIC_FORMULAS = {"logit_diff": "logit(answer) − logit(wrong)", "prob": "p(answer)", "kl": "KL(clean ‖ run)"}
EFFECT_TIP = (
    "normalised effect (m_patched − m_corrupt) / (m_clean − m_corrupt): 1 = the clean run's metric "
    "restored, 0 = no change; beyond [0, 1] is real (overshoot, or working against the answer)"
)


PART_LABELS = {"self": "self-attention", "decoder": "decoder self-attention", "cross": "cross-attention"}


@dataclass(frozen=True, eq=False)
class PartHeads:
    """One attention part's heads: ``effects`` / ``values`` [layers, heads] (normalised / raw metric),
    each prompt's weights [layers, H, Lq, Lk] (None: over the memory budget), their (query, key)
    token labels, and each prompt's masked cells [layers, Lq, Lk] bool (True = the query may not
    attend there; None: nothing masked), drawn hatched."""

    effects: np.ndarray
    values: np.ndarray
    clean_attention: np.ndarray | None
    corrupt_attention: np.ndarray | None
    clean_labels: tuple[list[str], list[str]]
    corrupt_labels: tuple[list[str], list[str]]
    clean_masked: np.ndarray | None = None
    corrupt_masked: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class PatchingShown:
    """What one patching run shows: every attention part's heads (``parts``: "self", and an
    encoder-decoder's "decoder" and "cross"), ``positions`` [layers, L] normalised effects of the
    residual stream (the first part's) with their raw values, and the tokens."""

    parts: dict[str, PartHeads]
    positions: np.ndarray
    position_values: np.ndarray
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    metric: str
    clean_metric: float
    corrupt_metric: float
    answer: str
    wrong: str | None
    passes: int
    note: str = ""
    encoder_decoder: bool = False
    warning: str | None = None  # the core's line when the clean-corrupt gap is too small to normalise by

    @property
    def heads(self) -> np.ndarray:
        """[layers, heads] normalised effects of the self-attention heads (an encoder-decoder's encoder)."""
        return self.parts["self"].effects


class PatchingView(QWidget):
    """API: ``clean()``, ``corrupt()``, ``answer``/``wrong`` (``TokenField``), ``metric_name()``,
    ``set_shown(PatchingShown | None)``, ``set_part(part)`` (an encoder-decoder's encoder "self",
    "decoder" or "cross" heads; ``part_heads()`` is what is drawn), ``open_head(layer, head)``,
    ``set_prompt_problem(line)``. Signals ``inputsEdited()``, ``headClicked(layer, head)``."""

    inputsEdited = Signal()
    headClicked = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("patchingView")
        self.shown: PatchingShown | None = None
        self.head: tuple[int, int] | None = None
        self.part = "self"  # the attention part whose heads are drawn
        self._build_controls()
        self._build_plots()
        layout = QVBoxLayout(self)
        layout.addWidget(self.controls)
        layout.addWidget(self.bar)
        layout.addWidget(self.summary)
        layout.addWidget(self.gapWarning)
        layout.addWidget(self.splitter, 1)
        layout.addWidget(self.readout)

    def _build_controls(self) -> None:
        self.cleanEdit = named(QLineEdit(), "patchingCleanEdit")
        self.cleanEdit.setPlaceholderText("e.g. When Mary and John went to the store, John gave a drink to")
        self.corruptEdit = named(QLineEdit(), "patchingCorruptEdit")
        self.corruptEdit.setPlaceholderText("the same prompt with the fact changed (same number of tokens)")
        self.cleanCount, self.corruptCount = QLabel(""), QLabel("")
        self.promptProblem = problem_label("patchingPromptProblem")
        self.answer = TokenField("answer", "patchingAnswer", " Mary")
        self.wrong = TokenField("wrong", "patchingWrong", " John")
        self.metricCombo = named(QComboBox(), "patchingMetricCombo")
        for key, text in METRICS:
            self.metricCombo.addItem(text, key)
        self.partCombo = named(QComboBox(), "patchingPartCombo")
        self.partCombo.setToolTip(
            "an encoder-decoder's heads: the encoder's, the decoder's own, or its cross-attention"
        )
        self.partCombo.currentIndexChanged.connect(self._on_part)
        self.partCombo.hide()
        self.controls = QWidget()
        form = QFormLayout(self.controls)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("clean", self._with(self.cleanEdit, self.cleanCount))
        form.addRow("corrupted", self._with(self.corruptEdit, self.corruptCount))
        form.addRow("", self.promptProblem)
        tokens = QHBoxLayout()
        tokens.addWidget(self.answer, 1)
        tokens.addWidget(self.wrong, 1)
        tokens.addWidget(QLabel("metric"))
        tokens.addWidget(self.metricCombo)
        form.addRow(tokens)
        self.bar = RunBar("patching", "Patch every head")
        self.bar.runButton.setToolTip(
            "patch each head (and the residual stream at each layer and position) from "
            "the clean run into the corrupted one"
        )
        for edit in (self.cleanEdit, self.corruptEdit):
            edit.textChanged.connect(lambda _t: self.inputsEdited.emit())
            edit.returnPressed.connect(self.bar.runRequested)
        for field in (self.answer, self.wrong):
            field.edited.connect(lambda _t: self.inputsEdited.emit())
            field.edit.returnPressed.connect(self.bar.runRequested)
        self.wrong.setVisible(True)
        self.metricCombo.currentIndexChanged.connect(self._on_metric)

    @staticmethod
    def _with(edit: QWidget, note: QLabel) -> QWidget:
        box = QWidget()
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(edit, 1)
        row.addWidget(note)
        return box

    def _build_plots(self) -> None:
        self.summary = named(QLabel(""), "patchingSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.gapWarning = problem_label("patchingGapWarning")
        self.headsPlot = MatrixPlot("<b>heads</b>: patch each head's output (every position)")
        self.headsPlot.setObjectName("patchingHeadsPlot")
        self.headsPlot.setToolTip(EFFECT_TIP + "; click a head to see its attention on both prompts")
        self.positionsPlot = MatrixPlot("<b>residual stream</b>: patch one layer's input at one position")
        self.positionsPlot.setObjectName("patchingPositionsPlot")
        self.positionsPlot.setToolTip(EFFECT_TIP)
        self.cleanAttention = MatrixPlot("clean prompt")
        self.cleanAttention.setObjectName("patchingCleanAttention")
        self.corruptAttention = MatrixPlot("corrupted prompt")
        self.corruptAttention.setObjectName("patchingCorruptAttention")
        self.readout = named(QLabel(" "), "patchingReadout")
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.positionsPlot)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.cleanAttention)
        bottom.addWidget(self.corruptAttention)
        heads = QWidget()
        column = QVBoxLayout(heads)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.partCombo)
        column.addWidget(self.headsPlot, 1)
        top.insertWidget(0, heads)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(top)
        self.splitter.addWidget(bottom)
        self.headsPlot.cellHovered.connect(self._hover_head)
        self.positionsPlot.cellHovered.connect(self._hover_position)
        self.headsPlot.when_built(
            lambda: self.headsPlot.graphics.scene().sigMouseClicked.connect(self._on_heads_clicked)
        )
        self.clear_plots()

    # -- inputs ------------------------------------------------------------------------------------
    def clean(self) -> str:
        return self.cleanEdit.text()

    def corrupt(self) -> str:
        return self.corruptEdit.text()

    def metric_name(self) -> str:  # not metric(): that is QPaintDevice.metric(), which Qt calls with an argument
        return self.metricCombo.currentData()

    def set_inputs(self, clean: str, corrupt: str, answer: str, wrong: str) -> None:
        self.cleanEdit.setText(clean)
        self.corruptEdit.setText(corrupt)
        self.answer.set_text(answer)
        self.wrong.set_text(wrong)

    def set_counts(self, clean: int | None, corrupt: int | None) -> None:
        """The prompts' token counts beside them (None: not known yet)."""
        self.cleanCount.setText("" if clean is None else f"{clean} tokens")
        self.corruptCount.setText("" if corrupt is None else f"{corrupt} tokens")

    def set_prompt_problem(self, line: str) -> None:
        say(self.promptProblem, line)

    @Slot(int)
    def _on_metric(self, _index: int) -> None:
        self.wrong.setEnabled(self.metric_name() == "logit_diff")
        self.inputsEdited.emit()

    # -- results -----------------------------------------------------------------------------------
    def clear_plots(self) -> None:
        self.headsPlot.clear()
        self.positionsPlot.clear()
        self.cleanAttention.clear()
        self.corruptAttention.clear()

    def set_shown(self, shown: PatchingShown | None) -> None:
        self.shown, self.head = shown, None
        say(self.gapWarning, "" if shown is None or shown.warning is None else "warning: " + shown.warning)
        if shown is None:
            self.summary.setText("")
            self.clear_plots()
            self._fill_parts([])
            return
        self._fill_parts(list(shown.parts) if shown.encoder_decoder else [])
        rows = [f"L{n}" for n in range(shown.positions.shape[0])]  # each plot's colours span its own ±max|effect|
        self.positionsPlot.set_matrix(shown.positions, row_labels=rows, col_labels=shown.clean_tokens, diverging=True)
        wrong = f" vs {shown.wrong!r}" if shown.wrong is not None else ""
        self.summary.setText(
            f"answer {shown.answer!r}{wrong}: {METRIC_FORMULAS[shown.metric]} = {shown.clean_metric:.4g} clean, "
            f"{shown.corrupt_metric:.4g} corrupted · colours: normalised effect, blue < 0 < red, each plot to its own "
            f"±max (1 restores the clean run) · {shown.passes} batched forward passes · click a head"
        )
        self.set_part(self.part if self.part in shown.parts else "self")

    def _fill_parts(self, parts: list[str]) -> None:
        """The part picker: an encoder-decoder's parts (hidden for a model with one)."""
        current = self.part
        self.partCombo.blockSignals(True)
        self.partCombo.clear()
        for part in parts:
            self.partCombo.addItem("encoder self-attention" if part == "self" else PART_LABELS[part], part)
        self.partCombo.setCurrentIndex(max(0, self.partCombo.findData(current)))
        self.partCombo.blockSignals(False)
        self.partCombo.setVisible(len(parts) > 1)

    def part_heads(self) -> PartHeads | None:
        """The drawn part's heads (None before a run)."""
        return None if self.shown is None else self.shown.parts[self.part]

    def set_part(self, part: str) -> None:
        """Draw the heads of ``part`` ("self", or an encoder-decoder's "decoder" / "cross") and open its
        strongest head."""
        shown = self.shown
        self.part = part if shown is None or part in shown.parts else "self"
        if self.partCombo.currentData() != self.part and self.partCombo.findData(self.part) >= 0:
            self.partCombo.setCurrentIndex(self.partCombo.findData(self.part))  # calls back here
            return
        heads = self.part_heads()
        if heads is None:
            return
        layers, count = heads.effects.shape
        self.headsPlot.set_title(f"<b>{self._part_name()} heads</b>: patch each head's output (every position)")
        self.headsPlot.set_matrix(
            heads.effects,
            row_labels=[f"L{n}" for n in range(layers)],
            col_labels=[f"H{h}" for h in range(count)],
            diverging=True,
        )
        best = np.unravel_index(int(np.argmax(heads.effects)), heads.effects.shape)
        self.open_head(int(best[0]), int(best[1]))

    def _part_name(self) -> str:
        if self.shown is None or not self.shown.encoder_decoder:
            return "attention"
        return "encoder self-attention" if self.part == "self" else PART_LABELS[self.part]

    @Slot(int)
    def _on_part(self, _index: int) -> None:
        part = self.partCombo.currentData()
        if part is not None:
            self.set_part(part)

    def open_head(self, layer: int, head: int) -> None:
        """Show head ``head`` of layer ``layer`` (of the drawn part) on both prompts side by side."""
        shown, heads = self.shown, self.part_heads()
        if shown is None or heads is None:
            return
        self.head = (int(layer), int(head))
        self.headsPlot.highlight_cell(layer, head)
        if heads.clean_attention is None or heads.corrupt_attention is None:
            self.cleanAttention.clear(shown.note)
            self.corruptAttention.clear("")
            return
        for plot, weights, masked, (queries, keys), name in (
            (self.cleanAttention, heads.clean_attention, heads.clean_masked, heads.clean_labels, "clean"),
            (self.corruptAttention, heads.corrupt_attention, heads.corrupt_masked, heads.corrupt_labels, "corrupted"),
        ):
            hatched = " · hatched = masked" if masked is not None and masked[layer].any() else ""
            plot.set_title(
                f"<b>{head_name(layer, head)}</b> on the {name} prompt (rows: queries, columns: keys){hatched}"
            )
            plot.set_matrix(  # 0 to its largest weight
                weights[layer, head],
                row_labels=queries,
                col_labels=keys,
                masked=None if masked is None else masked[layer],
            )

    def reveal_attention(self) -> None:
        """Scroll the page holding this view (if it scrolls) so the opened head's attention is in view."""
        parent = self.parentWidget()
        while parent is not None and not isinstance(parent, QScrollArea):
            parent = parent.parentWidget()
        if parent is not None:
            parent.ensureWidgetVisible(self.cleanAttention, 0, 0)

    def _on_heads_clicked(self, event) -> None:
        hit = self.headsPlot.cell_at(event.scenePos())
        if hit is not None:
            self.open_head(*hit)
            self.reveal_attention()  # a click asks to see that head: below the plots it may be out of view
            self.headClicked.emit(*hit)

    @Slot(int, int)
    def _hover_head(self, layer: int, head: int) -> None:
        heads = self.part_heads()
        if heads is not None:
            self.readout.setText(
                f"{self._part_name()} {head_name(layer, head)}: effect {heads.effects[layer, head]:+.4f} "
                f"{self._raw(heads.values[layer, head])}"
            )

    @Slot(int, int)
    def _hover_position(self, layer: int, pos: int) -> None:
        s = self.shown
        if s is not None:
            self.readout.setText(
                f"residual stream entering L{layer} at {pos} ({s.clean_tokens[pos]!r} clean, "
                f"{s.corrupt_tokens[pos]!r} corrupted): effect {s.positions[layer, pos]:+.4f} "
                f"{self._raw(s.position_values[layer, pos])}"
            )

    def _raw(self, value: float) -> str:
        """The raw effect m_patched - m_corrupt beside a normalised one, and the patched metric."""
        assert self.shown is not None
        return f"(raw {value - self.shown.corrupt_metric:+.4g}: metric {value:.4g} patched)"


__all__ = ["METRICS", "PART_LABELS", "PartHeads", "PatchingShown", "PatchingView"]
