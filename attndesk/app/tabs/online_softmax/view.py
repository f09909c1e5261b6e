"""The online softmax, step by step: one head's weights computed block by block as FlashAttention's
inner loop does (running max m, running sum l, partial output O rescaled by exp(m_old − m_new)),
and the proof that O / l after the last block is softmax(S) V to the last printed digit.

The walk itself (``teaching.online_softmax``) is computed by the presenter's side job; this view draws
a ``WalkShown``. A step's picture ([Lq, Lk], the softmax over the keys read so far) is made by
``step_frame``: here for small walks, by the step runner (a side job) for large ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QRectF, Qt, Signal, Slot
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGraphicsRectItem,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSlider,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import head_name
from attndesk.system.free_memory import format_bytes
from attndesk.teaching.online_softmax import EXPLANATION, OnlineSoftmaxWalk, OnlineStep

from ...widgets.heatmap import MatrixPlot, PreparedMatrix, prepare_matrix
from ...widgets.holdings import held_by

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_BLOCK = 4
AUTO = 0  # the block combo's "auto": DEFAULT_BLOCK, doubled until the walk has at most MAX_AUTO_STEPS steps
MAX_AUTO_STEPS = 64
PRINT_DIGITS = 8  # significant digits the outputs are printed with (the run itself is float32)
ASYNC_STEP_CELLS = 65_536  # a step picture of more cells is made by the step runner (a side job)
LONG_CONTEXT = 32_768  # the length the memory line also quotes
_BLOCK_PEN = QColor(230, 40, 40)
HINT = (
    "Step through the keys with Next / Previous or the slider; click a row (or use the arrow keys) "
    "to follow one query. The block read at this step is outlined in red."
)


@dataclass(frozen=True, eq=False)
class WalkShown:
    """One head's walk and what the view says about it (computed off the GUI thread)."""

    walk: OnlineSoftmaxWalk
    head: int
    kv_head: int
    heads: int
    block: int
    queries: list[str]
    keys: list[str]
    context: np.ndarray  # [Lq, dv]: the run's own output of this head (its dtype)
    dtype: str
    below_last_digit: bool  # every |online - full| is under half a unit of its PRINT_DIGITS-th digit

    @property
    def steps(self) -> int:
        return len(self.walk.steps)

    @property
    def run_diff(self) -> float:
        return float(np.abs(self.walk.output - self.context).max()) if self.context.size else 0.0


@dataclass(frozen=True, eq=False)
class StepFrame:
    """What the plot draws for (walk, step): the softmax over the keys read so far."""

    shown: WalkShown
    step: int
    prepared: PreparedMatrix


def below_last_digit(a: np.ndarray, b: np.ndarray, digits: int = PRINT_DIGITS) -> bool:
    """Whether every |a - b| is under half a unit of b's ``digits``-th significant digit, so both
    print alike with that many digits (vectorised: formatting every number would hold the GIL)."""
    magnitude = np.abs(b)
    exponent = np.floor(np.log10(magnitude, out=np.zeros_like(magnitude), where=magnitude > 0))
    return bool((np.abs(a - b) < 0.5 * 10.0 ** (exponent - (digits - 1))).all())


def auto_block(keys: int) -> int:
    """The block size "auto" picks: at most 64 steps (4 keys a block for short texts)."""
    block = DEFAULT_BLOCK
    while -(-keys // block) > MAX_AUTO_STEPS and block < BLOCK_SIZES[-1]:
        block *= 2
    return block


def step_matrix(walk: OnlineSoftmaxWalk, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(weights, hidden) [Lq, Lk] after ``step``: exp(s − m) / l over the keys read so far, i.e. the
    softmax the kernel would have if the row ended here; hidden = not read yet, or masked."""
    done = walk.steps[: step + 1]
    k1 = done[-1].keys[1]
    lq, lk = walk.weights.shape
    scores = np.concatenate([s.scores for s in done], axis=1)  # [Lq, k1]
    last = done[-1]
    m = np.where(np.isfinite(last.max_after), last.max_after, 0.0)[:, None]
    l_sum = last.sum_after[:, None]
    seen = np.divide(np.exp(scores - m), l_sum, out=np.zeros_like(scores), where=l_sum > 0)
    weights = np.zeros((lq, lk))
    weights[:, :k1] = seen
    hidden = np.ones((lq, lk), dtype=bool)
    hidden[:, :k1] = np.isneginf(scores)
    return weights, hidden


def step_frame(shown: WalkShown, step: int) -> StepFrame:
    """The picture of one step, ready to draw (numpy only: safe in a side job)."""
    weights, hidden = step_matrix(shown.walk, step)
    return StepFrame(shown, step, prepare_matrix(weights, masked=hidden, levels=(0.0, 1.0)))


def _vector(x: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:.{PRINT_DIGITS}g}" for v in x) + "]"


def _num(x: float) -> str:
    return f"{x:.6g}" if np.isfinite(x) else ("-inf" if x < 0 else "inf")


def step_text(shown: WalkShown, step: int, query: int) -> str:
    """The arithmetic of ``step`` for one query, in words and numbers."""
    s: OnlineStep = shown.walk.steps[step]
    k0, k1 = s.keys
    keys = ", ".join(f"{shown.keys[k]!r}" for k in range(k0, min(k1, k0 + 8))) + (" …" if k1 - k0 > 8 else "")
    o_l = s.output[query] / s.sum_after[query] if s.sum_after[query] > 0 else s.output[query] * 0
    return "\n".join(
        [
            f"step {step + 1} of {shown.steps}: read keys {k0}..{k1 - 1} ({keys}) of {head_name(None, shown.head)}"
            f" (K/V head {shown.kv_head})",
            f"query {query} {shown.queries[query]!r}:",
            f"  scores of this block s    = {_vector(s.scores[query])}",
            f"  block max                 = {_num(s.block_max[query])}"
            + (
                "   (every key of this block is masked for this query: nothing changes)"
                if np.isneginf(s.block_max[query])
                else ""
            ),
            f"  running max m             : {_num(s.max_before[query])} -> {_num(s.max_after[query])}",
            f"  rescale exp(m_old - m_new) = {_num(s.rescale[query])}"
            + ("   (the max did not move)" if s.rescale[query] == 1 else "   (what was summed so far shrinks)"),
            f"  running sum l = rescale x {_num(s.sum_before[query])} + sum exp(s - m) ({_num(s.probs[query].sum())})"
            f" = {_num(s.sum_after[query])}",
            f"  O = rescale x O_old + exp(s - m) V_block (unnormalised) = {_vector(s.output[query])}",
            f"  O / l = the output over keys 0..{k1 - 1} so far = {_vector(o_l)}",
        ]
    )


def final_text(shown: WalkShown, query: int) -> str:
    """The walk's end: O / l against the full softmax(S) V, printed, and their largest difference."""
    walk = shown.walk
    lq, dv = walk.output.shape
    online, full = _vector(walk.output[query]), _vector(walk.reference[query])
    same = "the same digits" if online == full else "a tie in the last digit's rounding"
    agree = (
        f"every one of the {lq} x {dv} outputs differs by less than half its last printed digit"
        if shown.below_last_digit
        else f"some of the {lq} x {dv} outputs differ in their last printed digit"
    )
    return "\n".join(
        [
            f"After the last block the output is O / l (query {query} {shown.queries[query]!r}, block {shown.block}):",
            f"  online, block by block  {online}",
            f"  full softmax(S) V       {full}",
            f"  ({same}); max |online - full| over all queries and dims = {walk.max_abs_diff:.3g} (both float64):",
            f"  {agree}.",
            f"  the run's own output of this head ({shown.dtype}, one softmax over each whole row) differs by at most "
            f"{shown.run_diff:.3g}: its rounding, not the method.",
        ]
    )


def memory_text(shown: WalkShown) -> str:
    """Why fast kernels store no weights, with the numbers of the current run and of a long context."""
    walk = shown.walk
    lq, lk = walk.weights.shape
    dv = walk.output.shape[1]
    ratio = walk.weights_bytes / max(1, walk.kept_bytes)
    long_w, long_k = 4 * LONG_CONTEXT * LONG_CONTEXT, 4 * LONG_CONTEXT * (dv + 2)
    return EXPLANATION + "\n".join(
        [
            f"For this run (float32 numbers, d = {dv}): one head's weights are {lq} x {lk} = {lq * lk:,} numbers, "
            f"{format_bytes(walk.weights_bytes)}; all {shown.heads} heads {format_bytes(shown.heads * walk.weights_bytes)}.",
            f"The online softmax keeps m, l and O per query: {lq} x ({dv} + 2) = {lq * (dv + 2):,} numbers, "
            f"{format_bytes(walk.kept_bytes)} per head ({ratio:.1f}x less); both read Q, K and V anyway.",
            f"At {LONG_CONTEXT:,} tokens one head's weights would take {format_bytes(long_w)}; m, l and O "
            f"{format_bytes(long_k)}. Memory O(L^2) against O(L d): that is why such kernels never store them.",
        ]
    )


class StepTableModel(QAbstractTableModel):
    """Every query's running values at one step (rows drawn on demand: thousands of queries)."""

    HEADERS = (
        "query",
        "block max",
        "m before",
        "m after",
        "rescale exp(m_old − m_new)",
        "l before",
        "l after",
        "O / l so far (first dims)",
    )

    def __init__(self) -> None:
        super().__init__()
        self._shown: WalkShown | None = None
        self._step = 0

    def set_step(self, shown: WalkShown | None, step: int) -> None:
        self.beginResetModel()
        self._shown, self._step = shown, step
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if self._shown is None or parent.isValid() else len(self._shown.queries)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.HEADERS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if role != Qt.ItemDataRole.DisplayRole or self._shown is None:
            return None
        return self.cell(index.row(), index.column())

    def cell(self, r: int, c: int) -> str:
        assert self._shown is not None, "asked only while a walk is shown"
        s = self._shown.walk.steps[self._step]
        if c == 0:
            return f"{r} {self._shown.queries[r]}"
        if c == 7:
            total = s.sum_after[r]
            return _vector(s.output[r][:3] / total) if total > 0 else "(no key yet)"
        values = (s.block_max, s.max_before, s.max_after, s.rescale, s.sum_before, s.sum_after)
        return _num(float(values[c - 1][r]))


class OnlineSoftmaxView(QWidget):
    """API: ``show_walk(WalkShown)``, ``show_message(text)``, ``set_heads(n)``, ``set_head(h)`` / ``head()``,
    ``block()``, ``set_step(i)`` / ``step()``, ``set_query(q)`` / ``query()``, ``set_step_runner(runner)``;
    ``shown()`` the walk on screen. Signals: ``walkRequested(head, block)`` when the head or block
    size changes, ``stepDrawn(int)`` once a step's picture is on screen."""

    walkRequested = Signal(int, int)
    stepDrawn = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("onlineSoftmaxView")
        self._shown: WalkShown | None = None
        self._step = 0
        self._query = 0
        self._pending: tuple | None = None  # (shown, step) handed to the step runner
        self._runner: Callable[[WalkShown, int], None] | None = None
        self._build_controls()
        self._build_body()
        self._lay_out()

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the walk it shows and its plot."""
        return held_by(self._shown, self._pending, self.plot)

    def _build_controls(self) -> None:
        self.headCombo = named(QComboBox(), "onlineHeadCombo")
        self.headCombo.setToolTip("the query head whose weights are walked (its K/V head in brackets)")
        self.blockCombo = named(QComboBox(), "onlineBlockCombo")
        self.blockCombo.setToolTip("keys per block: FlashAttention reads K and V in tiles of 64 or 128 keys")
        self.blockCombo.addItem(f"auto (≤ {MAX_AUTO_STEPS} steps)", AUTO)
        for b in BLOCK_SIZES:
            self.blockCombo.addItem(f"{b} key{'s' if b > 1 else ''}", b)
        self.headCombo.currentIndexChanged.connect(self._on_walk_choice)
        self.blockCombo.currentIndexChanged.connect(self._on_walk_choice)
        self.prevButton = named(QPushButton("◀ Previous block"), "onlinePrev")
        self.nextButton = named(QPushButton("Next block ▶"), "onlineNext")
        self.prevButton.clicked.connect(lambda: self.set_step(self._step - 1))
        self.nextButton.clicked.connect(lambda: self.set_step(self._step + 1))
        self.stepSlider = named(QSlider(Qt.Orientation.Horizontal), "onlineStepSlider")
        self.stepSlider.setRange(0, 0)
        self.stepSlider.valueChanged.connect(self.set_step)
        # fixed sizes: what a walk says must not move the controls (a replayed click lands alike)
        self.stepLabel = named(QLabel(""), "onlineStepLabel")
        self.stepLabel.setFixedWidth(
            self.stepLabel.fontMetrics().horizontalAdvance("step 2048 / 2048 · keys 2047–2047 (256 a block)")
        )
        self.messageLabel = named(QLabel(HINT), "onlineMessage")
        self.messageLabel.setWordWrap(True)
        self.messageLabel.setFixedHeight(2 * self.messageLabel.fontMetrics().lineSpacing() + 4)

    def _build_body(self) -> None:
        self.plot = MatrixPlot("softmax over the keys read so far")
        self.plot.setObjectName("onlinePlot")
        self.plot.title.setFixedHeight(2 * self.plot.title.fontMetrics().lineSpacing() + 4)  # a title of 1 or 2 lines
        self._block_rect = QGraphicsRectItem(0, 0, 1, 1)
        pen = QPen(_BLOCK_PEN)
        pen.setWidth(3)
        pen.setCosmetic(True)
        self._block_rect.setPen(pen)
        self._block_rect.setZValue(12)
        self._block_rect.hide()
        self.plot.when_built(lambda: self.plot.plot.vb.addItem(self._block_rect, ignoreBounds=True))
        self.model = StepTableModel()
        self.table = named(QTableView(), "onlineStepTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setResizeContentsPrecision(32)  # measure the first rows only: thousands of queries
        header.setStretchLastSection(True)
        self.table.selectionModel().currentRowChanged.connect(lambda current, _previous: self.set_query(current.row()))
        self.stepText = self._text_box("onlineStepText")
        self.finalText = self._text_box("onlineFinalText")

    @staticmethod
    def _text_box(name: str) -> QPlainTextEdit:
        box = named(QPlainTextEdit(), name)
        box.setReadOnly(True)
        box.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        box.setStyleSheet("font-family: monospace")
        return box

    def _lay_out(self) -> None:
        # two rows: in one the controls and the step line made the tab 854 px wide, more than the
        # window's central area at 1000 px (the other tabs need at most 660)
        choices = QHBoxLayout()
        for widget in (QLabel("Head"), self.headCombo, QLabel("block"), self.blockCombo):
            choices.addWidget(widget)
        choices.addStretch(1)
        choices.addWidget(self.stepLabel)
        steps = QHBoxLayout()
        steps.addWidget(self.prevButton)
        steps.addWidget(self.stepSlider, 1)
        steps.addWidget(self.nextButton)
        top = named(QSplitter(Qt.Orientation.Horizontal), "onlineTopSplitter")
        top.addWidget(self.plot)
        top.addWidget(self.table)
        top.setStretchFactor(0, 2)
        top.setStretchFactor(1, 3)
        texts = QSplitter(Qt.Orientation.Horizontal)
        texts.addWidget(self.stepText)
        texts.addWidget(self.finalText)
        body = named(QSplitter(Qt.Orientation.Vertical), "onlineSplitter")
        body.addWidget(top)
        body.addWidget(texts)
        body.setStretchFactor(0, 1)
        body.setStretchFactor(1, 1)
        body.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(choices)
        layout.addLayout(steps)
        layout.addWidget(self.messageLabel)
        layout.addWidget(body, 1)

    # -- API -------------------------------------------------------------------------------------
    def set_step_runner(self, runner: Callable[[WalkShown, int], None] | None) -> None:
        """``runner(shown, step)`` makes ``step_frame(shown, step)`` elsewhere and later calls
        ``show_step_frame``; None = always here."""
        self._runner = runner

    def shown(self) -> WalkShown | None:
        return self._shown

    def head(self) -> int:
        return int(self.headCombo.currentData() or 0)

    def block(self) -> int:
        """The chosen keys per block, or AUTO (0): the presenter sizes it for the run."""
        return int(self.blockCombo.currentData() or AUTO)

    def step(self) -> int:
        return self._step

    def query(self) -> int:
        return self._query

    def set_heads(self, heads: int, kv_heads: int) -> None:
        """Offer heads 0..heads-1 (keeping the chosen one when it exists), without asking for a walk."""
        current = self.head()
        self.headCombo.blockSignals(True)
        self.headCombo.clear()
        for h in range(heads):
            self.headCombo.addItem(f"{h} (K/V {h // (heads // kv_heads)})" if kv_heads != heads else str(h), h)
        self.headCombo.setCurrentIndex(min(current, heads - 1))
        self.headCombo.blockSignals(False)

    def set_head(self, head: int) -> None:
        index = self.headCombo.findData(int(head))
        if index >= 0:
            self.headCombo.setCurrentIndex(index)

    def set_block(self, block: int) -> None:
        index = self.blockCombo.findData(int(block))
        if index >= 0:
            self.blockCombo.setCurrentIndex(index)

    def show_message(self, text: str) -> None:
        """Nothing to walk (or a walk on its way): say why ("": the hint); ``clear`` drops a walk."""
        self.messageLabel.setText(text or HINT)

    def clear(self, message: str = "") -> None:
        self._shown, self._pending = None, None
        self.model.set_step(None, 0)
        self.plot.clear()
        self._block_rect.hide()
        self.stepText.clear()
        self.finalText.clear()
        self.show_message(message)

    def show_walk(self, shown: WalkShown) -> None:
        """Draw a walk: from its first block, or at the same step when only the head changed."""
        previous = self._shown
        same_steps = (
            previous is not None
            and previous.walk.weights.shape == shown.walk.weights.shape
            and previous.block == shown.block
        )
        step = self._step if same_steps else 0
        self._shown = shown
        self._query = min(self._query, len(shown.queries) - 1)
        self.stepSlider.blockSignals(True)
        self.stepSlider.setRange(0, shown.steps - 1)
        self.stepSlider.blockSignals(False)
        self.finalText.setPlainText(final_text(shown, self._query) + "\n\n" + memory_text(shown))
        self.show_message("")
        self._step = -1
        self.set_step(step)

    @Slot(int)
    def set_step(self, step: int) -> None:
        if self._shown is None:
            return
        step = max(0, min(int(step), self._shown.steps - 1))
        if step == self._step:
            return
        self._step = step
        self.stepSlider.blockSignals(True)
        self.stepSlider.setValue(step)
        self.stepSlider.blockSignals(False)
        k0, k1 = self._shown.walk.steps[step].keys
        self.stepLabel.setText(
            f"step {step + 1} / {self._shown.steps} · keys {k0}–{k1 - 1} ({self._shown.block} a block)"
        )
        self.prevButton.setEnabled(step > 0)
        self.nextButton.setEnabled(step < self._shown.steps - 1)
        self.model.set_step(self._shown, step)
        self._select_row(self._query)  # a model reset drops the selection
        self.stepText.setPlainText(step_text(self._shown, step, self._query))
        self._request_frame(step)

    def set_query(self, query: int) -> None:
        if self._shown is None or not 0 <= query < len(self._shown.queries):
            return
        self._query = int(query)
        self.stepText.setPlainText(step_text(self._shown, self._step, self._query))
        self.finalText.setPlainText(final_text(self._shown, self._query) + "\n\n" + memory_text(self._shown))
        self.plot.highlight_row(self._query)
        self._select_row(self._query)

    def _select_row(self, row: int) -> None:
        selection = self.table.selectionModel()
        selection.blockSignals(True)
        self.table.selectRow(row)
        selection.blockSignals(False)
        self.table.viewport().update()

    def show_step_frame(self, frame: StepFrame) -> bool:
        """Draw a step's picture; ignored (False) when it answers a request no longer wanted."""
        if frame.shown is not self._shown or frame.step != self._step:
            return False
        self._pending = None
        s = frame.shown
        self.plot.show_prepared(frame.prepared, row_labels=s.queries, col_labels=s.keys)
        k0, k1 = s.walk.steps[frame.step].keys
        self.plot.set_title(
            f"<b>{head_name(None, s.head)}</b>: the softmax over keys 0–{k1 - 1} read so far "
            f"(this block outlined; unread and masked keys hatched)"
        )
        self._block_rect.setRect(QRectF(k0, 0, k1 - k0, len(s.queries)))
        self._block_rect.show()
        self.plot.highlight_row(self._query)
        self.stepDrawn.emit(frame.step)
        return True

    def _request_frame(self, step: int) -> None:
        shown = self._shown
        assert shown is not None, "stepped only while a walk is shown"
        if self._runner is not None and shown.walk.weights.size > ASYNC_STEP_CELLS:
            self._pending = (shown, step)
            self._runner(shown, step)
        else:
            self.show_step_frame(step_frame(shown, step))

    def _on_walk_choice(self) -> None:
        if self.headCombo.count():
            self.walkRequested.emit(self.head(), self.block())


__all__ = [
    "AUTO",
    "BLOCK_SIZES",
    "OnlineSoftmaxView",
    "StepFrame",
    "WalkShown",
    "auto_block",
    "below_last_digit",
    "final_text",
    "memory_text",
    "step_frame",
    "step_matrix",
    "step_text",
]
