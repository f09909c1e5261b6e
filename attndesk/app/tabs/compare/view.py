"""Compare two results: pinned A, current B and B - A (diverging colormap centred at 0), plus the
one-click teaching comparisons (the 2017 layer's and the modern variants': MHA vs GQA, sinusoidal
vs RoPE, full vs a sliding window, soft-cap) with the K/V-cache table of the current shape. The
attndesk-vs-PyTorch implementation table is ``implementation.ImplementationPanel``.

The heavy work (running the model twice, the implementation timings) lives in
``attndesk.teaching.compare`` and is Qt-free: the window should run it in its worker and hand the
result to ``show_teaching``. Without a runner set, the
view runs it inline (fine for the toy sizes the tests use).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import MEAN, AttentionMap, Head, head_name
from attndesk.errors import ConfigError
from attndesk.runs.config import AttentionConfig
from attndesk.runs.result import AttentionResult
from attndesk.session.ledger import Holding, LedgerError, MemoryLedger, arrays_of
from attndesk.session.results import text_of
from attndesk.teaching.compare import (
    TEACHING_KINDS,
    ComparisonError,
    ResultDiff,
    TeachingComparison,
    diff_results,
    teaching_comparison,
)
from attndesk.teaching.diff import diff_bytes
from attndesk.teaching.variant_compare import VARIANT_KINDS, comparison_window

from ...widgets.heatmap import MatrixPlot, PreparedMatrix, prepare_matrix
from ...widgets.pacing import PacedHost
from .kvcache_table import KVCacheTable

# Pairs of more cells than this are drawn by the frame runner when one is set: a mean over 16 heads
# of 2048^2 and its display image take longer than a GUI-thread turn (B - A alone is half a
# gigabyte of float64 there)
ASYNC_DIFF_CELLS = 200_000
WHATS = (("weights", "attention weights"), ("output", "output [L × E]"))
VARIANT_TIPS = {
    "gqa": "A: one K/V head per query head. B: A's K/V heads mean-pooled into groups (as MHA checkpoints are "
    "converted to GQA); same queries",
    "rope": "A: sinusoidal positions added to the embeddings. B: RoPE rotates Q and K instead (base 10000)",
    "window": "A: every key. B: query i sees key j only when |i − j| < W (the config's window, else a quarter of the text)",
    "softcap": "A: no cap. B: scores s become C·tanh(s/C) before the mask (the config's cap, else half the largest score)",
}


@dataclass(frozen=True, eq=False)
class Operand:
    """One side of a comparison: weights [H, Lq, Lk] over ``tokens`` x ``keys`` (``mask`` [Lq, Lk],
    True = may attend) and the layer's output [Lq, E] when known; ``where`` names it ("layer 2").
    ``intermediates`` is always None (``diff_results`` compares weights and outputs only)."""

    weights: np.ndarray
    tokens: list[str]
    keys: list[str]
    mask: np.ndarray | None = None
    output: np.ndarray | None = None
    where: str = ""
    intermediates: None = None

    @classmethod
    def of_map(cls, amap: AttentionMap, output: np.ndarray | None = None, where: str = "") -> Operand:
        return cls(np.asarray(amap.weights), list(amap.queries), list(amap.keys), amap.mask, output, where)

    @classmethod
    def of_result(cls, result: AttentionResult) -> Operand:
        return cls(result.weights, list(result.tokens), list(result.keys), result.mask, result.output)


def _shape(operand: Operand | None, what: str) -> tuple[int, ...]:
    """The shape of ``operand``'s field ``what``; () where there is none."""
    value = getattr(operand, what, None)
    return () if value is None else np.shape(value)


def as_operand(value: Operand | AttentionResult | None) -> Operand | None:
    if value is None or isinstance(value, Operand):
        return value
    return Operand.of_result(value)


@dataclass(frozen=True, eq=False)
class FramePanel:
    """One plot of a frame: the matrix ready to draw (or why there is none), its title and labels."""

    prepared: PreparedMatrix | None
    title: str
    message: str = ""
    rows: list[str] | None = None
    cols: list[str] | None = None


@dataclass(frozen=True, eq=False)
class FrameRequest:
    """What to draw: A and B (either may be None), their labels, ``what`` ("weights" or
    "output"), the head (an index or MEAN), the memory ``budget`` B − A must fit (bytes; None:
    only the free memory is checked) and what the A panel says while nothing is pinned."""

    a: Operand | None
    b: Operand | None
    labels: tuple[str, str]
    what: str
    head: Head | None
    budget: int | None = None
    no_a: str = "pin a result as A"


@dataclass(frozen=True, eq=False)
class CompareFrame:
    """What the compare view draws for one request: A, B, B − A."""

    request: FrameRequest
    panels: tuple[FramePanel, FramePanel, FramePanel]
    diff: ResultDiff | None
    summary: str


def _select(array: np.ndarray, what: str, head) -> np.ndarray | None:
    """The 2-D slice shown: one head, the mean over heads, or the output matrix; None when
    ``array`` lacks the head (A pinned with fewer heads than B has)."""
    if what != "weights":
        return array
    if head is None or head == MEAN:
        return array.mean(axis=0)  # float64 in -> float64 out; a mean of B - A = B mean - A mean
    return array[int(head)] if int(head) < array.shape[0] else None


def _levels(matrices: list[np.ndarray], what: str) -> tuple[float, float] | None:
    """One colour scale for A and B, so equal colours mean equal values side by side."""
    shown = []
    for m in matrices:
        finite = m[np.isfinite(m)]
        if finite.size:
            shown.append((float(finite.min()), float(finite.max())))
    if not shown:
        return None
    lo, hi = min(s[0] for s in shown), max(s[1] for s in shown)
    if what != "weights":  # signed: symmetric around 0
        bound = max(abs(lo), abs(hi)) or 1.0
        return (-bound, bound)
    lo = min(0.0, lo)
    return (lo, hi if hi > lo else lo + 1.0)


def _panel(result, label: str, matrix, what: str, head, levels, empty: str = "") -> FramePanel:
    if result is None:
        return FramePanel(None, f"<b>{label}</b>", empty)
    if getattr(result, what) is None:
        return FramePanel(None, f"<b>{label}</b>", f"{label.split(' ')[0]} has no {what} to compare")
    if matrix is None:
        heads = getattr(result, what).shape[0]
        return FramePanel(
            None, f"<b>{label}</b>", f"{label.split(' ')[0]} has no {head_name(None, int(head))}: it has {heads} heads"
        )
    cols = list(result.keys) if what == "weights" else [str(i) for i in range(matrix.shape[1])]
    masked = None if (what != "weights" or result.mask is None) else ~result.mask
    shape = " × ".join(map(str, matrix.shape))
    where = f" · {result.where}" if result.where else ""
    prepared = prepare_matrix(matrix, diverging=what != "weights", masked=masked, levels=levels)
    return FramePanel(
        prepared, f"<b>{label}</b>{where} <span style='color:#555'>[{shape}]</span>", "", list(result.tokens), cols
    )


def _describe_cell(d: ResultDiff, b) -> str:
    if not d.argmax or d.max_abs == 0:
        return ""
    if d.what == "weights" and len(d.argmax) == 3:
        h, q, k = d.argmax
        return f' at {head_name(None, int(h))}, query "{b.tokens[q]}" ({q}) → key "{b.keys[k]}" ({k})'
    return f" at {d.argmax}"


def _diff_panel(d: ResultDiff, b, what: str, head) -> tuple[FramePanel, str]:
    shown = _select(d.diff, what, head)
    assert shown is not None, "B - A has every head B has"
    finite = np.isfinite(shown)
    bound = float(np.abs(shown[finite]).max()) if finite.any() else 0.0
    cols = list(b.keys) if what == "weights" else [str(i) for i in range(shown.shape[1])]
    shape = " × ".join(map(str, shown.shape))
    prepared = prepare_matrix(shown, diverging=True, levels=(-bound, bound) if bound > 0 else (-1.0, 1.0))
    notes = "".join(f"<br><i>{n}</i>" for n in d.notes)
    summary = (
        f"<b>max |B − A| = {d.max_abs:.6g}</b> over all {'heads' if d.what == 'weights' else 'cells'}"
        f"{_describe_cell(d, b)}; shown here: {bound:.6g}{notes}"
    )
    panel = FramePanel(
        prepared, f"<b>B − A</b> <span style='color:#555'>[{shape}], 0 = white</span>", "", list(b.tokens), cols
    )
    return panel, summary


def compare_frame(request: FrameRequest) -> CompareFrame:
    """Everything the compare view draws for a request, computed anywhere (numpy only); the frame
    carries the request object it answers. A B − A over the request's budget is not made: its
    panel says what fits (A and B are still drawn)."""
    a, b, labels, what, head = request.a, request.b, request.labels, request.what, request.head
    ma = None if a is None else _select(getattr(a, what), what, head)
    mb = None if b is None else _select(getattr(b, what), what, head)
    levels = _levels([m for m in (ma, mb) if m is not None], what)
    panels = (_panel(a, labels[0], ma, what, head, levels, request.no_a), _panel(b, labels[1], mb, what, head, levels))
    if a is None or b is None:
        idle = FramePanel(None, "<b>B − A</b>", "pin a result as A, then change anything" if b is not None else "")
        hint = "Pin a result as A, then change anything (mask, scale, heads, seed, text, layer, mode)."
        return CompareFrame(request, (*panels, idle), None, hint if a is None else "")
    try:
        if getattr(a, what) is None or getattr(b, what) is None:
            raise ComparisonError(f"cannot compare {what}: only one of A and B has it")
        diff = diff_results(a, b, what, request.budget)  # type: ignore[arg-type]  # Operands: the fields it reads
    except ComparisonError as exc:
        failed = FramePanel(None, "<b>B − A</b>", str(exc))
        return CompareFrame(request, (*panels, failed), None, f"<span style='color:#a33'>{exc}</span>")
    panel, summary = _diff_panel(diff, b, what, head)
    return CompareFrame(request, (*panels, panel), diff, summary)


class CompareWidgets:
    """The compare view's widgets, laid out on ``view``: the bar (pin, what, head), the teaching
    buttons, the A, B and B − A plots, the read-out, the explanation and the K/V cache table.
    The view connects them."""

    def __init__(self, view: QWidget) -> None:
        self._build_controls()
        self._build_plots()
        self._lay_out(view)

    def _build_controls(self) -> None:
        self.pinButton = QPushButton("Pin current as A")
        self.pinButton.setObjectName("pinButton")
        self.headCombo = QComboBox()
        self.headCombo.setObjectName("compareHeadCombo")
        self.whatCombo = QComboBox()
        self.whatCombo.setObjectName("compareWhatCombo")
        for key, label in WHATS:
            self.whatCombo.addItem(label, key)
        self.teachButtons: dict[str, QPushButton] = {}
        self._teach_row = self._teach_buttons("One click:", TEACHING_KINDS)
        # the modern variants' pairs: A is the current settings without the variant, B with it
        self._variant_row = self._teach_buttons("Modern variants:", VARIANT_KINDS)

    def _teach_buttons(self, title: str, kinds: dict[str, str]) -> QHBoxLayout:
        row = QHBoxLayout()
        row.addWidget(QLabel(title))
        for kind, label in kinds.items():
            button = QPushButton(label)
            button.setObjectName(f"teach_{kind}")
            self.teachButtons[kind] = button
            row.addWidget(button)
        row.addStretch(1)
        return row

    def _build_plots(self) -> None:
        self.plotA = MatrixPlot("A")
        self.plotB = MatrixPlot("B")
        self.plotDiff = MatrixPlot("B − A")
        for name, plot in (("compareA", self.plotA), ("compareB", self.plotB), ("compareDiff", self.plotDiff)):
            plot.setObjectName(name)
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
        self.kvCache = KVCacheTable()

    def _lay_out(self, view: QWidget) -> None:
        teach = self._teach_row
        bar = QHBoxLayout()
        bar.addWidget(self.pinButton)
        bar.addWidget(QLabel("show"))
        bar.addWidget(self.whatCombo)
        bar.addWidget(self.headCombo)
        bar.addStretch(1)
        plots_box = QWidget()
        plots = QHBoxLayout(plots_box)
        plots.setContentsMargins(0, 0, 0, 0)
        for plot in (self.plotA, self.plotB, self.plotDiff):  # paced: three at once stall the window
            plots.addWidget(PacedHost(plot), 1)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(plots_box, 1)
        top_layout.addWidget(self.readout)
        # the explanation is the point of a teaching pair: a splitter lets it take the room it needs
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("compareSplitter")
        self.splitter.addWidget(top)
        bottom = named(QSplitter(Qt.Orientation.Horizontal), "compareBottomSplitter")
        bottom.addWidget(self.explanationText)
        bottom.addWidget(self.kvCache)
        bottom.setStretchFactor(0, 3)
        bottom.setStretchFactor(1, 2)
        self.splitter.addWidget(bottom)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(view)
        layout.addLayout(bar)
        layout.addLayout(teach)
        layout.addLayout(self._variant_row)
        layout.addWidget(self.maxLabel)
        layout.addWidget(self.splitter, 1)

    def set_teach_buttons(self, toy: bool, busy: bool, single: bool) -> None:
        """The teaching buttons act for a toy run that is not busy (GQA needs 2 or more heads)."""
        for kind, button in self.teachButtons.items():
            unusable = kind == "gqa" and single
            button.setEnabled(toy and not busy and not unusable)
            if not toy:
                button.setToolTip("toy model only: switch the mode to Toy model")
            elif unusable:
                button.setToolTip("one head has nothing to share: choose 2 or more heads to compare MHA with GQA")
            else:
                button.setToolTip(VARIANT_TIPS.get(kind, ""))

    def show_variants(self, config, length: int) -> None:
        """The window pair's W in its label, and the K/V cache of this shape (None: not a toy run)."""
        window = comparison_window(config, length) if config is not None else None
        label = f"full vs window {window}" if window is not None else VARIANT_KINDS["window"]
        self.teachButtons["window"].setText(label)
        self.kvCache.set_config(config, window)

    def show_explanation(self, text: str) -> None:
        """A teaching pair's explanation, with room to read it; the weights shown (no signal)."""
        self.explanationText.setPlainText(text)
        self.explanationText.show()
        total = max(1, sum(self.splitter.sizes()))
        self.splitter.setSizes([total * 11 // 20, total * 9 // 20])  # room to read it
        index = self.whatCombo.findData("weights")
        self.whatCombo.blockSignals(True)
        self.whatCombo.setCurrentIndex(index)
        self.whatCombo.blockSignals(False)

    def fill_heads(self, heads: int, current: Head | None, weights: bool) -> None:
        """The head choices (the mean, then each of ``heads``), ``current`` kept where it exists."""
        self.headCombo.blockSignals(True)
        self.headCombo.clear()
        self.headCombo.addItem("mean over heads", MEAN)
        for h in range(heads):
            self.headCombo.addItem(head_name(None, h), h)
        # (A may have fewer heads: its plot says so rather than failing)
        index = self.headCombo.findData(current)
        self.headCombo.setCurrentIndex(max(0, index))
        self.headCombo.blockSignals(False)
        self.headCombo.setEnabled(weights)

    def hover(self, r: int, c: int) -> str:
        parts = []
        for name, plot in (("A", self.plotA), ("B", self.plotB), ("B − A", self.plotDiff)):
            plot.highlight_cell(r, c)
            if plot.matrix is not None and r < plot.matrix.shape[0] and c < plot.matrix.shape[1]:
                parts.append(f"{name} = {plot.matrix[r, c]:.6g}")
        text = f"({r}, {c}): " + "   ".join(parts)
        self.readout.setText(text)
        return text


class CompareHoldings:
    """What the compare view keeps, held in the window's memory ledger (``ledger()``) in three
    slots: "pin" (the pinned A), "teaching" (a teaching pair) and "frame" (B − A and the pictures)."""

    def __init__(self, ledger: Callable[[], MemoryLedger]) -> None:
        self._ledger = ledger
        self.slots: dict[str, Holding | None] = {"pin": None, "teaching": None, "frame": None}

    def hold(self, slot: str, label: str, parts: list, on_release: Callable[[str], None], **options) -> None:
        """Hold ``parts`` in the ledger as ``slot`` (replacing what was held there); when the ledger
        lets it go, ``on_release(why)`` runs, unless the slot holds something newer by then.
        LedgerError when it cannot fit (the slot is then empty)."""
        self.let_go(slot)
        cell: list[Holding] = []

        def release(why: str) -> None:
            if cell and self.slots[slot] is cell[0]:
                self.slots[slot] = None
                on_release(why)

        cell.append(self._ledger().hold("compare", label, parts, release, **options))
        self.slots[slot] = cell[0]

    def let_go(self, slot: str) -> None:
        held = self.slots[slot]
        if held is not None:
            self.slots[slot] = None
            held.release()

    def diff_budget(self, a: Operand | None, b: Operand | None, what: str, memory_budget: int | None) -> int | None:
        """Bytes B − A may take: what the ledger can give it, after letting go of what must go
        (without a ledger budget: ``memory_budget``)."""
        ledger = self._ledger()
        shape = None if a is None or b is None else _shape(b, what)
        if ledger.budget is None or not shape or _shape(a, what) != shape:
            return memory_budget
        try:
            ledger.reserve(diff_bytes(shape), "B − A")
        except LedgerError:
            pass  # compare_frame says it does not fit, and what does
        return ledger.free()


class CompareView(QWidget):
    """API: ``set_result(result, text=None)`` (the current run = B: a toy ``AttentionResult`` or an
    ``Operand``), ``pin()`` (A := B), ``unpin()``, ``show_teaching(TeachingComparison)``,
    ``run_teaching(kind)``, ``set_head(h)``; ``diff()`` the ResultDiff shown, ``displayed()`` the matrices drawn.
    Signals: ``teachingRequested(str kind)`` (always emitted on a teaching button; connect
    ``set_teaching_runner`` to run it elsewhere), ``pinned()``.
    """

    teachingRequested = Signal(str)
    pinned = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareView")
        self._a: Operand | None = None  # what the A plot shows: the pinned result, or a teaching pair's A
        self._pinned: Operand | None = None
        self._b: Operand | None = None
        # B's toy config: what the teaching pairs rerun (None: not a toy run)
        self._config: AttentionConfig | None = None
        self._text: str | None = None
        self._diff: ResultDiff | None = None
        self._teaching: TeachingComparison | None = None
        self._runner: Callable[[str, object, str], None] | None = None
        self._a_label, self._b_label = "A (pinned)", "B (current)"
        self._head_wanted: Head | None = None  # set_head before a result had that head
        self._frame_runner: Callable[[FrameRequest], None] | None = None
        self._pending: FrameRequest | None = None  # the request handed to the frame runner
        self._no_a = FrameRequest.no_a  # what the A panel says while nothing is pinned
        # bytes B − A may take (the window's memory budget, read when a frame is asked for)
        self.memory_budget: Callable[[], int | None] = lambda: None
        # what the view keeps (a pinned A, a teaching pair, B − A and its pictures) is held in the
        # window's ledger (set by the compare tab); this one, without a budget, lets nothing go
        self.ledger = MemoryLedger()
        self._held = CompareHoldings(lambda: self.ledger)
        self._live: Operand | None = None  # B, the run on screen, while a teaching pair takes its place
        self._notice = ""  # why something was let go, said once above the next frame
        self._toy = True  # the teaching pairs apply to B
        self._build()

    def _build(self) -> None:
        w = self.widgets = CompareWidgets(self)
        self.pinButton, self.headCombo, self.whatCombo = w.pinButton, w.headCombo, w.whatCombo
        self.teachButtons, self.plotA, self.plotB, self.plotDiff = w.teachButtons, w.plotA, w.plotB, w.plotDiff
        self.maxLabel, self.readout, self.explanationText = w.maxLabel, w.readout, w.explanationText
        self.kvCache, self.splitter = w.kvCache, w.splitter
        self.pinButton.clicked.connect(self.pin)
        self.headCombo.currentIndexChanged.connect(self._recompute)
        self.whatCombo.currentIndexChanged.connect(self._recompute)
        for kind, button in self.teachButtons.items():
            button.clicked.connect(lambda _=False, k=kind: self._on_teach(k))
        for plot in (self.plotA, self.plotB, self.plotDiff):
            plot.cellHovered.connect(self.hover)

    # -- API -------------------------------------------------------------------------------------
    def set_teaching_runner(self, runner: Callable[[str, object, str], None] | None) -> None:
        """``runner(kind, config, text)`` starts a teaching comparison elsewhere (e.g. the worker)
        and later calls ``show_teaching``; None = run inline in the GUI thread."""
        self._runner = runner

    def set_frame_runner(self, runner: Callable[[FrameRequest], None] | None) -> None:
        """``runner(request)`` computes ``compare_frame(request)`` elsewhere (the worker) for large
        results and later calls ``show_frame(frame)``; None = always here."""
        self._frame_runner = runner

    def show_frame(self, frame: CompareFrame) -> bool:
        """Draw a frame; ignored (False) when it answers a request the view no longer waits for."""
        if self._pending is not None and frame.request is not self._pending:
            return False
        self._pending = None
        self._diff = frame.diff
        for plot, panel in zip((self.plotA, self.plotB, self.plotDiff), frame.panels):
            if panel.prepared is None:
                plot.clear(panel.message)
            else:
                plot.show_prepared(panel.prepared, row_labels=panel.rows, col_labels=panel.cols)
            plot.set_title(panel.title)
        notice, self._notice = self._notice, ""
        self.maxLabel.setText(f"{notice}<br>{frame.summary}" if notice else frame.summary)
        # B − A and the pictures are the view's own copies (A and B are held as the pin and the run)
        own = [frame.diff.diff] if frame.diff is not None else []
        self._held.hold(
            "frame",
            "B − A and the compare pictures",
            own + arrays_of(frame.panels, 3),
            self._frame_let_go,
            protected=True,
            strict=False,
        )
        return True

    def is_computing(self) -> bool:
        return self._pending is not None

    def refresh(self) -> None:
        """Compute and draw A, B and B - A again."""
        self._recompute()

    def set_result(
        self, result: AttentionResult | Operand | None, text: str | None = None, *, teaching: bool | None = None
    ) -> None:
        """The current run becomes B (a shown teaching comparison gives way to the live A/B).
        ``teaching``: whether the one-click teaching pairs (toy-model experiments) apply to it
        (default: for a toy ``AttentionResult``, not for an ``Operand`` such as a real model's layer)."""
        toy = result if isinstance(result, AttentionResult) else None
        self._b = as_operand(result)
        self._config = toy.config if toy is not None else None
        self._text = (text or text_of(toy)) if toy is not None else None
        self._toy = (result is None or toy is not None) if teaching is None else bool(teaching) and toy is not None
        self.widgets.show_variants(toy.config if toy is not None else None, len(toy.tokens) if toy is not None else 0)
        self.set_teaching_busy(False)
        self._live = None
        if self._teaching is not None:
            self._end_teaching()
        self._recompute()

    def set_teaching_busy(self, busy: bool) -> None:
        """While a teaching pair computes its buttons wait; they act only for the toy model (and a
        variant pair only where it can differ: GQA needs 2 or more heads)."""
        single = self._config is not None and self._config.num_heads == 1
        self.widgets.set_teach_buttons(self._toy, busy, single)

    def show_message(self, html: str) -> None:
        """A line above the plots (what runs in the background, what failed)."""
        self.maxLabel.setText(html)

    def release(self) -> None:
        """Drop B, the difference and the plots (an older run's memory); A stays pinned."""
        self._b, self._diff, self._pending, self._live = None, None, None, None
        if self._teaching is not None:
            self._end_teaching()
        self._held.let_go("frame")
        for plot in (self.plotA, self.plotB, self.plotDiff):
            plot.clear()

    def _end_teaching(self) -> None:
        """Back from a teaching pair to the pinned A and the run on screen."""
        self._teaching = None
        self._held.let_go("teaching")
        self._a_label, self._b_label = "A (pinned)", "B (current)"
        self.explanationText.hide()
        self._a = self._pinned

    # -- holdings in the window's memory ledger (``CompareHoldings``) -----------------------------
    def ledger_holdings(self) -> dict[str, Holding | None]:
        """What the view holds in the ledger now: "pin", "teaching", "frame"."""
        return dict(self._held.slots)

    def show_unavailable(self, message: str) -> None:
        """Nothing to compare for this result (no stale B left on screen)."""
        self.set_result(None)
        self.maxLabel.setText(message)

    @Slot()
    def pin(self) -> None:
        if self._b is None:
            self.maxLabel.setText("nothing to pin yet: run once first")
            return
        try:  # A shares its arrays with the run on screen: it costs more only once that run is replaced
            self._held.hold("pin", "pinned A", arrays_of(self._b), self._pin_let_go)
        except LedgerError as exc:
            self.maxLabel.setText(f"<span style='color:#a33'>not pinned: {exc}</span>")
            return
        self._a = self._pinned = self._b
        self._no_a = FrameRequest.no_a
        self._recompute()
        self.pinned.emit()

    def unpin(self) -> None:
        self._held.let_go("pin")
        self._a = self._pinned = None
        self._no_a = FrameRequest.no_a
        self._recompute()

    def _pin_let_go(self, why: str) -> None:
        """The ledger let go of A (a newer holding needed the room, or the budget was lowered)."""
        if self._a is self._pinned:
            self._a = None
        self._pinned = None
        self._no_a = f"A was unpinned: {why}; pin again, or raise the memory budget"
        self._recompute()

    def _teaching_let_go(self, why: str) -> None:
        if self._teaching is None:
            return
        self._end_teaching()
        if self._live is not None:
            self._b, self._live = self._live, None
        self._notice = f"the teaching pair was let go: {why}"
        self._recompute()

    def _frame_let_go(self, why: str) -> None:
        """B − A and the three pictures were let go: nothing drawn stays without its memory."""
        self._diff = None
        for plot in (self.plotA, self.plotB, self.plotDiff):
            plot.clear(f"let go: {why}")
        self.maxLabel.setText(f"B − A and its pictures were let go ({why}); change anything to draw them again")

    def pinned_result(self):
        return self._a

    def diff(self) -> ResultDiff | None:
        return self._diff

    def displayed(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        return self.plotA.matrix, self.plotB.matrix, self.plotDiff.matrix

    def teaching(self) -> TeachingComparison | None:
        return self._teaching

    def show_teaching(self, comparison: TeachingComparison) -> None:
        """Show a teaching pair: its A and B, B - A and its explanation (with measured numbers);
        held in the memory ledger (one that cannot fit is not shown, saying why)."""
        try:
            self._held.hold(
                "teaching",
                f"the teaching pair “{comparison.title}”",
                arrays_of(comparison, 4),
                self._teaching_let_go,
            )
        except LedgerError as exc:
            self.maxLabel.setText(f"<span style='color:#a33'>comparison not shown: {exc}</span>")
            return
        if self._teaching is None:
            self._live = self._b
        self._teaching = comparison
        self._a, self._b = as_operand(comparison.a), as_operand(comparison.b)
        self._a_label, self._b_label = comparison.a_label, comparison.b_label
        self.widgets.show_explanation(f"{comparison.title}\n\n{comparison.explanation}")
        self._recompute()

    def run_teaching(self, kind: str) -> TeachingComparison | None:
        """Run a teaching comparison for the current B's config and text, here and now."""
        if self._config is None:
            self.maxLabel.setText("run the toy model once first: the comparison uses the current settings and text")
            return None
        try:
            comparison = teaching_comparison(kind, self._config, self._text or "")
        except ConfigError as exc:
            self.maxLabel.setText(str(exc))
            return None
        self.show_teaching(comparison)
        return comparison

    def set_head(self, head: Head) -> None:
        """Show head ``head`` (or ``MEAN``); before a result with that head exists, it is
        remembered and applied when one arrives."""
        head = head if head == MEAN else int(head)
        index = self.headCombo.findData(head)
        if index >= 0:
            self._head_wanted = None
            self.headCombo.setCurrentIndex(index)
        else:
            self._head_wanted = head

    # -- drawing ---------------------------------------------------------------------------------
    def _on_teach(self, kind: str) -> None:
        self.teachingRequested.emit(kind)
        if self._runner is not None and self._config is not None:
            self._runner(kind, self._config, self._text or "")
        else:
            self.run_teaching(kind)

    def _what(self) -> str:
        return self.whatCombo.currentData() or "weights"

    def _fill_heads(self) -> None:
        heads = int(self._b.weights.shape[0]) if self._b is not None else 0
        current = self.headCombo.currentData()
        if self._head_wanted is not None and (self._head_wanted == MEAN or self._head_wanted < heads):
            current, self._head_wanted = self._head_wanted, None
        self.widgets.fill_heads(heads, current, self._what() == "weights")

    @Slot()
    def _recompute(self) -> None:
        self._fill_heads()
        self._diff = None
        request = FrameRequest(
            self._a,
            self._b,
            (self._a_label, self._b_label),
            self._what(),
            self.headCombo.currentData(),
            self._held.diff_budget(self._a, self._b, self._what(), self.memory_budget()),
            self._no_a,
        )
        drawn = getattr(self._b, self._what(), None)
        big = drawn is not None and np.size(drawn) > ASYNC_DIFF_CELLS
        if self._frame_runner is not None and big:
            self._pending = request
            self.maxLabel.setText("computing B − A in the background…" if self._a is not None else "drawing B…")
            self._frame_runner(request)
            return
        self._pending = None
        self.show_frame(compare_frame(request))

    @Slot(int, int)
    def hover(self, r: int, c: int) -> str:
        """Cell (r, c) highlighted in A, B and B − A, their values read out (the line returned)."""
        return self.widgets.hover(r, c)
