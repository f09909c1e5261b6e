"""The attndesk-vs-PyTorch implementation table (the timing dock): attndesk's attention layer,
``torch.nn.functional.scaled_dot_product_attention`` and ``torch.nn.MultiheadAttention`` with the
same projection weights, timed side by side, with how far their outputs are from attndesk's.

The work (``attndesk.teaching.compare.compare_implementations``) is Qt-free: the window runs it in its
worker and hands the result to ``ImplementationPanel.set_comparison``. Without a runner set, the
panel runs it inline (fine for the toy sizes the tests use).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from attndesk.errors import ConfigError
from attndesk.runs.result import AttentionResult
from attndesk.session.results import text_of
from attndesk.teaching.compare import ImplementationComparison, compare_implementations


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

    def set_result(self, result: object, text: str | None = None, *, toy: bool | None = None) -> None:
        """Take the input (config and text) from the current toy result (None, or ``toy`` False: a
        real model's layer, which the comparison of the toy layer's implementations does not cover)."""
        is_toy = isinstance(result, AttentionResult)
        toy = is_toy if toy is None else (toy and is_toy)
        self.runButton.setEnabled(toy)
        self.runButton.setToolTip(
            "" if toy else "compares the toy model's random attention layer: switch to Toy model, Random weights"
        )
        if toy and isinstance(result, AttentionResult):
            self.set_input(result.config, text or text_of(result))
        else:
            self._config = None

    def set_busy(self, busy: bool, message: str = "") -> None:
        """While the comparison runs elsewhere: the button waits, the note says what happens."""
        self.runButton.setEnabled(not busy and self._config is not None)
        if message:
            self.notesLabel.setText(message)

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
            values = (
                name,
                fmt(None if seconds is None else seconds * 1e3, ".3f"),
                fmt(ratio, ".2f"),
                fmt(d_out, ".3g"),
                "no weights" if d_w is None else fmt(d_w, ".3g"),
            )
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        head = f"{comparison.length} tokens on {comparison.device}, {comparison.dtype}; best of the repeats."
        self.notesLabel.setText(" ".join([head, *comparison.notes]))
