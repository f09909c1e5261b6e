"""Compare two results: pinned A, current B and B - A (diverging colormap centred at 0), plus the
one-click teaching comparisons and the attndesk-vs-PyTorch implementation table.

The heavy work (running the model twice, the implementation timings) lives in
``attndesk.core.compare`` and is Qt-free: the window should run it in its worker and hand the
result to ``show_teaching`` / ``ImplementationPanel.set_comparison``. Without a runner set, the
view runs it inline (fine for the toy sizes the tests use).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QHBoxLayout, QHeaderView, QLabel, QPlainTextEdit, QPushButton, QSplitter,
    QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from attndesk.core.compare import (
    ComparisonError, ImplementationComparison, ResultDiff, TeachingComparison, TEACHING_KINDS,
    compare_implementations, diff_results, teaching_comparison,
)
from attndesk.core.errors import ConfigError
from attndesk.core.tokenizer import PAD_ID

from .heatmap import MatrixPlot

MEAN = -1  # headCombo data for "mean over heads"
# B - A of more cells than this goes to the diff runner when one is set (at 16 heads x 2048^2 the
# float64 difference alone is half a gigabyte: seconds of work the GUI thread must not do)
ASYNC_DIFF_CELLS = 2_000_000
WHATS = (("weights", "attention weights"), ("output", "output [L × E]"))


def is_pretrained(result) -> bool:
    """A pretrained layer's AttentionResult (PretrainedResult.layer_result) rather than a toy run."""
    return bool(getattr(result, "extra", None) and result.extra.get("pretrained"))


def text_of(result) -> str:
    """The input text back from a toy result: its tokens without padding, joined by spaces
    (the word tokenizer splits that into the same tokens; padding comes back from pad_to)."""
    return " ".join(t for t, i in zip(result.tokens, result.token_ids) if int(i) != PAD_ID)


class CompareView(QWidget):
    """API: ``set_result(result, text=None)`` (the current run = B), ``pin()`` (A := B),
    ``unpin()``, ``show_teaching(TeachingComparison)``, ``run_teaching(kind)``, ``set_head(h)``;
    ``diff()`` the ResultDiff shown (None when none), ``displayed()`` the three matrices drawn.
    Signals: ``teachingRequested(str kind)`` (always emitted on a teaching button; connect
    ``set_teaching_runner`` to run it elsewhere), ``pinned()``.
    """

    teachingRequested = Signal(str)
    pinned = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareView")
        self._a = None  # what the A plot shows: the pinned result, or a teaching pair's A
        self._pinned = None
        self._b = None
        self._text: str | None = None
        self._diff: ResultDiff | None = None
        self._teaching: TeachingComparison | None = None
        self._runner: Callable[[str, object, str], None] | None = None
        self._a_label, self._b_label = "A (pinned)", "B (current)"
        self._head_wanted: int | None = None  # set_head before a result had that head
        self._diff_runner: Callable[[object, object, str], None] | None = None
        self._pending_diff: tuple | None = None  # (a, b, what) handed to the diff runner
        self._means: dict[int, np.ndarray] = {}  # id(array) -> its mean over heads (cached per A/B pair)

        self.pinButton = QPushButton("Pin current as A")
        self.pinButton.setObjectName("pinButton")
        self.pinButton.clicked.connect(self.pin)
        self.headCombo = QComboBox()
        self.headCombo.setObjectName("compareHeadCombo")
        self.headCombo.currentIndexChanged.connect(self._redraw)
        self.whatCombo = QComboBox()
        self.whatCombo.setObjectName("compareWhatCombo")
        for key, label in WHATS:
            self.whatCombo.addItem(label, key)
        self.whatCombo.currentIndexChanged.connect(self._recompute)
        self.teachButtons: dict[str, QPushButton] = {}
        teach = QHBoxLayout()
        teach.addWidget(QLabel("One click:"))
        for kind, label in TEACHING_KINDS.items():
            button = QPushButton(label)
            button.setObjectName(f"teach_{kind}")
            button.clicked.connect(lambda _=False, k=kind: self._on_teach(k))
            self.teachButtons[kind] = button
            teach.addWidget(button)
        teach.addStretch(1)

        self.plotA = MatrixPlot("A")
        self.plotB = MatrixPlot("B")
        self.plotDiff = MatrixPlot("B − A")
        for name, plot in (("compareA", self.plotA), ("compareB", self.plotB), ("compareDiff", self.plotDiff)):
            plot.setObjectName(name)
            plot.cellHovered.connect(self.hover)
        self.maxLabel = QLabel("Pin a result as A, then change anything.")
        self.maxLabel.setObjectName("maxDiffLabel")
        self.maxLabel.setWordWrap(True)
        self.maxLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.readout = QLabel(" ")
        self.readout.setObjectName("compareReadout")
        self.explanationText = QPlainTextEdit()
        self.explanationText.setObjectName("explanationText")
        self.explanationText.setReadOnly(True)
        self.explanationText.setMinimumHeight(60)
        self.explanationText.setStyleSheet("font-family: monospace")
        self.explanationText.hide()

        bar = QHBoxLayout()
        bar.addWidget(self.pinButton)
        bar.addWidget(QLabel("show"))
        bar.addWidget(self.whatCombo)
        bar.addWidget(self.headCombo)
        bar.addStretch(1)
        plots_box = QWidget()
        plots = QHBoxLayout(plots_box)
        plots.setContentsMargins(0, 0, 0, 0)
        for plot in (self.plotA, self.plotB, self.plotDiff):
            plots.addWidget(plot, 1)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(plots_box, 1)
        top_layout.addWidget(self.readout)
        # the explanation is the point of a teaching pair: a splitter lets it take the room it needs
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("compareSplitter")
        self.splitter.addWidget(top)
        self.splitter.addWidget(self.explanationText)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addLayout(teach)
        layout.addWidget(self.maxLabel)
        layout.addWidget(self.splitter, 1)

    # -- API -------------------------------------------------------------------------------------
    def set_teaching_runner(self, runner: Callable[[str, object, str], None] | None) -> None:
        """``runner(kind, config, text)`` starts a teaching comparison elsewhere (e.g. the worker)
        and later calls ``show_teaching``; None = run inline in the GUI thread."""
        self._runner = runner

    def set_diff_runner(self, runner: Callable[[object, object, str], None] | None) -> None:
        """``runner(a, b, what)`` computes ``diff_results(a, b, what)`` elsewhere (the worker) for
        large results and later calls ``show_diff(a, b, what, diff)``; None = always inline."""
        self._diff_runner = runner

    def show_diff(self, a, b, what: str, diff: ResultDiff, mean: np.ndarray | None = None) -> bool:
        """A difference computed by the diff runner; ignored (False) unless it is still the one
        waited for. ``mean`` is its mean over heads when the runner computed that too."""
        pending = self._pending_diff
        if pending is None or pending[0] is not a or pending[1] is not b or pending[2] != what:
            return False
        self._pending_diff = None
        self._diff = diff
        if mean is not None:
            self._means[id(diff.diff)] = mean
        self._redraw()
        return True

    def is_computing(self) -> bool:
        return self._pending_diff is not None

    def refresh(self) -> None:
        """Compute and draw A, B and B - A again (e.g. after a diff job was dropped)."""
        self._recompute()

    def set_result(self, result, text: str | None = None) -> None:
        """The current run becomes B (a shown teaching comparison gives way to the live A/B).
        Pretrained mode: pass ``pretrained_result.layer_result(layer)``; the teaching pairs are
        toy-model experiments and are disabled for it."""
        self._b = result
        self._text = text
        toy = result is None or not is_pretrained(result)
        for button in self.teachButtons.values():
            button.setEnabled(toy)
            button.setToolTip("" if toy else "toy model only: switch the mode to Toy model")
        if self._teaching is not None:
            self._teaching = None
            self._a_label, self._b_label = "A (pinned)", "B (current)"
            self.explanationText.hide()
            self._a = self._pinned
        self._recompute()

    @Slot()
    def pin(self) -> None:
        if self._b is None:
            self.maxLabel.setText("nothing to pin yet: run once first")
            return
        self._a = self._pinned = self._b
        self._recompute()
        self.pinned.emit()

    def unpin(self) -> None:
        self._a = self._pinned = None
        self._recompute()

    def pinned_result(self):
        return self._a

    def diff(self) -> ResultDiff | None:
        return self._diff

    def displayed(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        return self.plotA.matrix, self.plotB.matrix, self.plotDiff.matrix

    def teaching(self) -> TeachingComparison | None:
        return self._teaching

    def show_teaching(self, comparison: TeachingComparison) -> None:
        """Show a teaching pair: its A and B, B - A and its explanation (with measured numbers)."""
        self._teaching = comparison
        self._a, self._b = comparison.a, comparison.b
        self._a_label, self._b_label = comparison.a_label, comparison.b_label
        self.explanationText.setPlainText(f"{comparison.title}\n\n{comparison.explanation}")
        self.explanationText.show()
        total = max(1, sum(self.splitter.sizes()))
        self.splitter.setSizes([total * 11 // 20, total * 9 // 20])  # room to read it
        index = self.whatCombo.findData("weights")
        self.whatCombo.blockSignals(True)
        self.whatCombo.setCurrentIndex(index)
        self.whatCombo.blockSignals(False)
        self._recompute()

    def run_teaching(self, kind: str) -> TeachingComparison | None:
        """Run a teaching comparison for the current B's config and text, here and now."""
        if self._b is None:
            self.maxLabel.setText("run once first: the comparison uses the current settings and text")
            return None
        try:
            comparison = teaching_comparison(kind, self._b.config, self._text or text_of(self._b))
        except ConfigError as exc:
            self.maxLabel.setText(str(exc))
            return None
        self.show_teaching(comparison)
        return comparison

    @Slot(int)
    def set_head(self, head: int) -> None:
        """Show head ``head`` (MEAN = -1: the mean); before a result with that head exists, it is
        remembered and applied when one arrives."""
        index = self.headCombo.findData(int(head))
        if index >= 0:
            self._head_wanted = None
            self.headCombo.setCurrentIndex(index)
        else:
            self._head_wanted = int(head)

    # -- drawing ---------------------------------------------------------------------------------
    def _on_teach(self, kind: str) -> None:
        self.teachingRequested.emit(kind)
        if self._runner is not None and self._b is not None:
            self._runner(kind, self._b.config, self._text or text_of(self._b))
        else:
            self.run_teaching(kind)

    def _what(self) -> str:
        return self.whatCombo.currentData() or "weights"

    def _fill_heads(self) -> None:
        heads = int(self._b.weights.shape[0]) if self._b is not None else 0
        current = self.headCombo.currentData()
        if self._head_wanted is not None and self._head_wanted < heads:
            current, self._head_wanted = self._head_wanted, None
        self.headCombo.blockSignals(True)
        self.headCombo.clear()
        self.headCombo.addItem("mean over heads", MEAN)
        for h in range(heads):
            self.headCombo.addItem(f"head {h}", h)
        index = self.headCombo.findData(current)
        self.headCombo.setCurrentIndex(max(0, index))
        self.headCombo.blockSignals(False)
        self.headCombo.setEnabled(self._what() == "weights")

    @Slot()
    def _recompute(self) -> None:
        self._fill_heads()
        self._diff = None
        self._pending_diff = None
        self._means = {}
        if self._a is not None and self._b is not None:
            what = self._what()
            a_arr, b_arr = getattr(self._a, what, None), getattr(self._b, what, None)
            if (self._diff_runner is not None and a_arr is not None and b_arr is not None
                    and np.shape(a_arr) == np.shape(b_arr) and np.size(b_arr) > ASYNC_DIFF_CELLS):
                self._pending_diff = (self._a, self._b, what)
                self._draw_one(self.plotA, self._a, self._a_label)
                self._draw_one(self.plotB, self._b, self._b_label)
                self.plotDiff.clear("computing B − A in the background…")
                self.plotDiff.set_title("<b>B − A</b>")
                self.maxLabel.setText("computing B − A in the background…")
                self._diff_runner(self._a, self._b, what)
                return
            try:
                self._diff = diff_results(self._a, self._b, self._what())
            except ComparisonError as exc:
                self._draw_one(self.plotA, self._a, self._a_label)
                self._draw_one(self.plotB, self._b, self._b_label)
                self.plotDiff.clear(str(exc))
                self.maxLabel.setText(f"<span style='color:#a33'>{exc}</span>")
                return
        self._redraw()

    def _select(self, array: np.ndarray) -> np.ndarray:
        """The 2-D slice shown: one head, the mean over heads, or the output matrix."""
        if self._what() != "weights":
            return array
        head = self.headCombo.currentData()
        if head is None or head == MEAN:
            key = id(array)
            if key not in self._means:  # float64 in -> float64 out; a mean of B - A = B mean - A mean
                self._means[key] = array.mean(axis=0)
            return self._means[key]
        return array[int(head)]

    def _lacks_head(self, result) -> bool:
        """A (pinned with fewer heads than B) has no head for the head picked from B's list."""
        head = self.headCombo.currentData()
        return (self._what() == "weights" and head is not None and head != MEAN
                and int(head) >= np.shape(result.weights)[0])

    def _shared_levels(self) -> tuple[float, float] | None:
        """One colour scale for A and B, so equal colours mean equal values side by side."""
        shown = []
        for result in (self._a, self._b):
            if result is not None and not self._lacks_head(result):
                m = self._select(getattr(result, self._what()))
                finite = m[np.isfinite(m)]
                if finite.size:
                    shown.append((float(finite.min()), float(finite.max())))
        if not shown:
            return None
        lo, hi = min(s[0] for s in shown), max(s[1] for s in shown)
        if self._what() != "weights":  # signed: symmetric around 0
            bound = max(abs(lo), abs(hi)) or 1.0
            return (-bound, bound)
        lo = min(0.0, lo)
        return (lo, hi if hi > lo else lo + 1.0)

    def _draw_one(self, plot: MatrixPlot, result, label: str, levels=None) -> None:
        if result is None:
            plot.clear("pin a result as A" if plot is self.plotA else "")
            plot.set_title(f"<b>{label}</b>")
            return
        if self._lacks_head(result):
            heads = np.shape(result.weights)[0]
            plot.clear(f"{label} has {heads} head{'s' if heads != 1 else ''}: no head {self.headCombo.currentData()}")
            plot.set_title(f"<b>{label}</b>")
            return
        data = getattr(result, self._what())
        matrix = self._select(data)
        cols = result.keys if self._what() == "weights" else [str(i) for i in range(matrix.shape[1])]
        masked = None if (self._what() != "weights" or result.mask is None) else ~result.mask
        shape = " × ".join(map(str, matrix.shape))
        layer = (getattr(result, "extra", None) or {}).get("layer")
        where = f" · layer {layer}" if is_pretrained(result) and layer is not None else ""
        plot.set_title(f"<b>{label}</b>{where} <span style='color:#555'>[{shape}]</span>")
        plot.set_matrix(matrix, row_labels=result.tokens, col_labels=cols,
                        diverging=self._what() != "weights", masked=masked, levels=levels)

    @Slot()
    def _redraw(self) -> None:
        levels = self._shared_levels()
        self._draw_one(self.plotA, self._a, self._a_label, levels)
        self._draw_one(self.plotB, self._b, self._b_label, levels)
        d = self._diff
        if d is None:
            self.plotDiff.clear("pin a result as A, then change anything" if self._b is not None else "")
            self.plotDiff.set_title("<b>B − A</b>")
            if self._a is None:
                self.maxLabel.setText("Pin a result as A, then change anything (mask, scale, heads, seed, text, layer, mode).")
            return
        shown = self._select(d.diff)
        bound = float(np.abs(shown[np.isfinite(shown)]).max()) if np.isfinite(shown).any() else 0.0
        rows = self._b.tokens
        cols = self._b.keys if self._what() == "weights" else [str(i) for i in range(shown.shape[1])]
        shape = " × ".join(map(str, shown.shape))
        self.plotDiff.set_title(f"<b>B − A</b> <span style='color:#555'>[{shape}], 0 = white</span>")
        self.plotDiff.set_matrix(shown, row_labels=rows, col_labels=cols, diverging=True,
                                 levels=(-bound, bound) if bound > 0 else (-1.0, 1.0))
        where = self._describe_cell(d)
        notes = "".join(f"<br><i>{n}</i>" for n in d.notes)
        self.maxLabel.setText(
            f"<b>max |B − A| = {d.max_abs:.6g}</b> over all {'heads' if d.what == 'weights' else 'cells'}{where}; "
            f"shown here: {bound:.6g}{notes}"
        )

    def _describe_cell(self, d: ResultDiff) -> str:
        if not d.argmax or d.max_abs == 0:
            return ""
        if d.what == "weights" and len(d.argmax) == 3:
            h, q, k = d.argmax
            return f' at head {h}, query "{self._b.tokens[q]}" ({q}) → key "{self._b.keys[k]}" ({k})'
        return f" at {d.argmax}"

    @Slot(int, int)
    def hover(self, r: int, c: int) -> str:
        parts = []
        for name, plot in (("A", self.plotA), ("B", self.plotB), ("B − A", self.plotDiff)):
            plot.highlight_cell(r, c)
            if plot.matrix is not None and r < plot.matrix.shape[0] and c < plot.matrix.shape[1]:
                parts.append(f"{name} = {plot.matrix[r, c]:.6g}")
        text = f"({r}, {c}): " + "   ".join(parts)
        self.readout.setText(text)
        return text


class ImplementationPanel(QWidget):
    """The implementation comparison, for the timing panel: three timings side by side and the max
    |difference| from attndesk of the outputs (and weights where the implementation has them).

    API: ``set_comparison(ImplementationComparison)``, ``set_input(config, text)``, ``run_now()``;
    signal ``runRequested()`` when the button is pressed (connect ``set_runner`` to run elsewhere).
    """

    runRequested = Signal()
    HEADERS = ("implementation", "time (ms)", "× attndesk", "max |Δ output|", "max |Δ weights|")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("implementationPanel")
        self._config = None
        self._text: str | None = None
        self._runner: Callable[[object, str], None] | None = None
        self.comparison: ImplementationComparison | None = None
        self.runButton = QPushButton("Compare with PyTorch")
        self.runButton.setObjectName("compareImplementationsButton")
        self.runButton.clicked.connect(self._on_run)
        self.table = QTableWidget(0, len(self.HEADERS))
        self.table.setObjectName("implementationTable")
        self.table.setHorizontalHeaderLabels(self.HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.notesLabel = QLabel(
            "Runs the current settings through attndesk's attention layer, "
            "torch.nn.functional.scaled_dot_product_attention and torch.nn.MultiheadAttention with the same "
            "projection weights: time of each (best of 3) and how far their outputs are from attndesk's."
        )
        self.notesLabel.setObjectName("implementationNotes")
        self.notesLabel.setWordWrap(True)
        self.notesLabel.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.notesLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        side = QVBoxLayout()
        side.addWidget(self.runButton)
        side.addWidget(self.notesLabel, 1)
        side_box = QWidget()
        side_box.setLayout(side)
        side_box.setFixedWidth(330)
        # side by side: the dock is short, the three rows of the table must stay visible
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addWidget(side_box)
        layout.addWidget(self.table, 1)

    def set_runner(self, runner: Callable[[object, str], None] | None) -> None:
        self._runner = runner

    def set_input(self, config, text: str) -> None:
        self._config, self._text = config, text

    def set_result(self, result, text: str | None = None) -> None:
        """Take the input (config and text) from the current result."""
        toy = result is not None and not is_pretrained(result)
        self.runButton.setEnabled(toy)
        self.runButton.setToolTip("" if toy else "compares the toy model's attention layer: switch to Toy model")
        if toy:
            self.set_input(result.config, text or text_of(result))
        else:
            self._config = None

    def run_now(self, repeats: int = 3) -> ImplementationComparison | None:
        if self._config is None:
            self.notesLabel.setText("run once first")
            return None
        try:
            comparison = compare_implementations(self._config, self._text or "", repeats=repeats)
        except ConfigError as exc:
            self.notesLabel.setText(str(exc))
            return None
        self.set_comparison(comparison)
        return comparison

    @Slot()
    def _on_run(self) -> None:
        self.runRequested.emit()
        if self._runner is not None and self._config is not None:
            self._runner(self._config, self._text or "")
        else:
            self.run_now()

    def set_comparison(self, comparison: ImplementationComparison) -> None:
        self.comparison = comparison
        rows = comparison.rows()
        base = comparison.timings.get(rows[0][0]) if rows else None
        self.table.setRowCount(len(rows))

        def fmt(v, spec):
            return "—" if v is None else format(v, spec)

        for r, (name, seconds, d_out, d_w) in enumerate(rows):
            ratio = seconds / base if base and seconds is not None else None
            values = (name, fmt(None if seconds is None else seconds * 1e3, ".3f"), fmt(ratio, ".2f"),
                      fmt(d_out, ".3g"), "no weights" if d_w is None else fmt(d_w, ".3g"))
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        head = f"{comparison.length} tokens on {comparison.device}, {comparison.dtype}; best of the repeats."
        self.notesLabel.setText(" ".join([head, *comparison.notes]))
