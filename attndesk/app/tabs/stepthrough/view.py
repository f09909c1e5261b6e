"""The whole computation of one head as a left-to-right strip of heatmaps.

embeddings (+PE) -> Q, K, V -> scores Q K^T -> / sqrt(d_k) -> masked (-inf, hatched) -> softmax
weights -> weighted sum (context) -> merged output, plus the stages a variant adds (RoPE's Q and K
before the rotation and its angles, the soft-capped scores, ALiBi's bias; see ``stages``). Each
stage shows its shape and formula. Hovering a weight highlights the query row of Q and the key row
of K that produced it and spells out the arithmetic: q . k, / sqrt(d_k), cap, + bias, exp, / row sum.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from PySide6.QtCore import QSize, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from attndesk.attention.types import head_name

from ...widgets.heatmap import MatrixPlot, PreparedMatrix
from ...widgets.holdings import held_by
from ...widgets.pacing import Staggered
from ...widgets.stages import (
    ALL_STAGES,
    EXPLAINED,
    PER_HEAD,
    SQUARE,
    STAGES,
    CellArithmetic,
    angle_readout,
    arithmetic_lines,
    cell_arithmetic,
    formula,
    kv_head_of,
    layer_scale,
    stage_images,
    stage_matrix_of,
    stages_of,
    variant_words,
)

PER_ROW = 5  # stages per row of the strip
ARROW_WIDTH, SPACING = 20, 2  # px of the arrow between two stages, and of the grid's spacing


def _stage(inter, name: str) -> np.ndarray:
    return getattr(inter, name)


def _head_label(result, head: int) -> str:
    """``L2 H3`` for a real model's layer, ``H3`` for the toy model's single layer."""
    layer = getattr(result, "layer", None)
    return head_name(layer if isinstance(layer, int) else None, head)


def _stage_plot(name: str) -> MatrixPlot:
    """The plot of one stage, hidden until a result has it."""
    plot = MatrixPlot(name)
    plot.setObjectName(f"stage_{name}")
    plot.setMinimumSize(160, 190)
    # no word wrap: a wrapping title makes the scroll area size the strip by height-for-width,
    # which stacks the plots' full size hints and pushes the second row off screen
    plot.title.setWordWrap(False)
    plot.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    plot.hide()
    Staggered.keep_place(plot)
    return plot


def _arithmetic_label() -> QLabel:
    """The line under the strip that spells out a hovered weight's arithmetic."""
    label = QLabel("Hover a cell of the weights to see how it is computed.")
    label.setObjectName("stepArithmeticLabel")
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setStyleSheet("font-family: monospace")
    # every line of a weight's arithmetic (up to 8 with a soft-cap, a bias and dropout) stays readable
    label.setMinimumHeight(8 * label.fontMetrics().lineSpacing() + 4)
    label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
    return label


class StepThroughView(QWidget):
    """Per-head step-through of ``result.intermediates`` (run with keep_intermediates=True).

    API: ``set_result(result)``, ``set_head(h)`` / ``head()``, ``stage_matrix(name)`` (the exact
    matrix a stage shows), ``hover_weight(q, k)`` (what hovering does; returns CellArithmetic).
    Signal ``headChanged(int)``.
    """

    headChanged = Signal(int)
    drawn = Signal()  # every stage of the current head is drawn

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("stepThroughView")
        self._result: Any = None  # an AttentionResult, or a real model's staged layer (the same fields)
        self._head = 0
        self._preparer = None
        self._queue: list[tuple] = []  # stages still to draw, one per event-loop turn

        self.headSpin = QSpinBox()
        self.headSpin.setObjectName("stepHeadSpin")
        self.headSpin.setPrefix("head ")
        self.headSpin.setRange(0, 0)
        self.headSpin.valueChanged.connect(self.set_head)
        self.infoLabel = QLabel("Run once to see every step.")
        self.infoLabel.setObjectName("stepInfoLabel")
        self.infoLabel.setWordWrap(True)
        self.arithmeticLabel = _arithmetic_label()

        self.stripScroll = QScrollArea()
        self.stripScroll.setWidget(self._build_strip())
        self.stripScroll.setWidgetResizable(True)
        self.stripScroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.stripScroll.setFrameShape(QScrollArea.Shape.NoFrame)

        top = QHBoxLayout()
        top.addWidget(self.headSpin)
        top.addWidget(self.infoLabel, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.stripScroll, 1)
        layout.addWidget(self.arithmeticLabel)

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the result it steps through, the stages still to draw and their plots."""
        return held_by(self._result, self._queue, *self.plots.values())

    def _build_strip(self) -> QWidget:
        """A MatrixPlot with its title and hover read-out for every stage any run can show; a result
        shows the ones it has (``_arrange``), five to a row."""
        self.plots: dict[str, MatrixPlot] = {}
        strip = QWidget()
        # the strip wraps after PER_ROW stages (a 10-wide row would hide the weights off screen):
        # row 1 builds Q, K, V and the scores, the next rows turn them into weights and the output
        self._grid = QGridLayout(strip)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(SPACING)
        for name in ALL_STAGES:
            self.plots[name] = _stage_plot(name)
        self._arrows: list[QLabel] = []
        self._arranged: tuple[str, ...] = ()
        self._staggered = Staggered(
            self,
            self.stripScroll,
            self._grid,
            lambda: [self.plots[n] for n in self._arranged],
            per_row=PER_ROW,
            gap=ARROW_WIDTH + 2 * SPACING,
            minimum=QSize(160, 190),
        )
        self._arrange(STAGES)
        self.plots["weights"].cellHovered.connect(self.hover_weight)
        self.plots["weights"].hoverLeft.connect(self.clear_hover)
        for name, plot in self.plots.items():
            if name != "weights":  # the other stages read out the value under the mouse
                plot.cellHovered.connect(partial(self.hover_stage, name))
        return strip

    def _arrange(self, names: tuple[str, ...]) -> None:
        """Place the stages ``names`` in the grid, PER_ROW to a row, an arrow between two."""
        if names == self._arranged:
            return
        for name, plot in self.plots.items():
            self._grid.removeWidget(plot)
            if name not in names or name not in self._arranged:
                plot.hide()
        for arrow in self._arrows:
            self._grid.removeWidget(arrow)
            arrow.deleteLater()
        self._arrows = []
        for i, name in enumerate(names):
            row, col = divmod(i, PER_ROW)
            self._grid.addWidget(self.plots[name], row, 2 * col)
            # a stage new to the strip stays hidden until it is drawn (_draw_stage): showing four
            # plots at once would paint them all in one event-loop turn
            self._grid.setColumnStretch(2 * col, 1)
            if i < len(names) - 1:
                arrow = QLabel("→" if col < PER_ROW - 1 else "↩")
                arrow.setToolTip("the next stage" if col < PER_ROW - 1 else "continues on the next row")
                arrow.setStyleSheet("font-size: 18px; color: #666")
                arrow.setFixedWidth(ARROW_WIDTH)
                self._grid.addWidget(arrow, row, 2 * col + 1)
                self._arrows.append(arrow)
        self._arranged = names
        self._staggered.fit_now()

    def stages(self) -> tuple[str, ...]:
        """The stages the strip shows now, in order."""
        return self._arranged

    # -- API -------------------------------------------------------------------------------------
    def result(self):
        return self._result

    def head(self) -> int:
        return self._head

    def set_preparer(self, preparer) -> None:
        """``preparer(result, head)`` makes the stage images elsewhere (a worker) and later calls
        ``show_stages``; without one they are made here, in the GUI thread (fine for small runs)."""
        self._preparer = preparer

    def set_result(self, result, images: dict[str, PreparedMatrix] | None = None) -> None:
        """Show ``result`` (an AttentionResult). Without intermediates the strip says how to get them.
        ``images``: the stages of the current head made by ``stage_images`` already."""
        self._result = result
        inter = getattr(result, "intermediates", None) if result is not None else None
        # without intermediates the strip would show empty axes under the last result's shapes and formulas
        self.stripScroll.setVisible(bool(inter))
        self.arithmeticLabel.setVisible(bool(inter))
        self.headSpin.setEnabled(bool(inter))
        if not inter:
            self._queue = []
            for plot in self.plots.values():
                plot.clear()
            self.infoLabel.setText(
                "Run once to see every step."
                if result is None
                else "This result kept no intermediates: the step-through needs a run with keep_intermediates=True."
            )
            return
        heads = int(_stage(inter, "weights").shape[0])
        self.headSpin.blockSignals(True)
        self.headSpin.setRange(0, heads - 1)
        self._head = min(self._head, heads - 1)
        self.headSpin.setValue(self._head)
        self.headSpin.blockSignals(False)
        self._update(images)

    def show_stages(self, result, head: int, images: dict[str, PreparedMatrix]) -> bool:
        """Stage images a preparer made; ignored (False) unless they are for the result and head shown."""
        if result is not self._result or head != self._head:
            return False
        self._update(images)
        return True

    def note(self, text: str) -> None:
        """A line above the strip (e.g. while the next result is drawn); the strip stays."""
        self.infoLabel.setText(text)

    def show_message(self, text: str) -> None:
        """No strip to show: say why (and what to do)."""
        self.set_result(None)
        self.infoLabel.setText(text)

    @Slot(int)
    def set_head(self, head: int) -> None:
        """Show head ``head`` (clamped to the result's heads); also what headSelected connects to."""
        head = int(head)
        if self._result is not None and self._result.intermediates:
            head = max(0, min(head, int(_stage(self._result.intermediates, "weights").shape[0]) - 1))
        changed = head != self._head
        self._head = head
        if self.headSpin.value() != head:
            self.headSpin.blockSignals(True)
            self.headSpin.setValue(head)
            self.headSpin.blockSignals(False)
        if self._result is not None and self._result.intermediates:
            self._update()
        if changed:
            self.headChanged.emit(head)

    def stage_matrix(self, name: str) -> np.ndarray:
        """The exact 2-D matrix stage ``name`` shows for the current head."""
        return stage_matrix_of(self._result, name, self._head)

    def scale(self) -> float:
        return layer_scale(self._result)

    # -- drawing ---------------------------------------------------------------------------------
    def _d_k(self) -> int:
        return int(_stage(self._result.intermediates, "q").shape[-1])

    def _formula(self, name: str) -> str:
        return formula(self._result, name, self._head)

    def _update(self, images: dict[str, PreparedMatrix] | None = None) -> None:
        """Draw the current head: the images given, else ask the preparer, else make them here."""
        result, h = self._result, self._head
        if images is None and self._preparer is not None:
            self.infoLabel.setText(f"drawing {_head_label(self._result, h)}…")
            self._preparer(result, h)
            return
        images = images if images is not None else stage_images(result, h)
        tokens, keys = list(result.tokens), list(result.keys)
        heads = int(_stage(result.intermediates, "weights").shape[0])
        self.infoLabel.setText(
            f"{_head_label(result, h)} of {heads} heads · d_k = {self._d_k()} · {len(tokens)} tokens · mask {result.config.mask}"
            + (" · scaled" if result.config.scaled else " · unscaled")
            + variant_words(result, h)
            + (" · hatched cells = masked (−∞)" if result.config.mask != "none" or result.config.window else "")
        )
        names = stages_of(result)
        self._arrange(names)
        steps = [(name, images[name], tokens, keys) for name in names]
        if self._preparer is None:  # no worker: all at once, as the caller expects
            for step in steps:
                self._draw_stage(*step)
            self.drawn.emit()
            return
        idle = not self._queue
        self._queue = steps  # a newer head or result replaces what is left of the older one
        if idle:
            QTimer.singleShot(1, self, self._draw_next)  # 1 ms: a zero timer runs in the same pass

    def _draw_next(self) -> None:
        """One stage per event-loop turn: ten plots of thousands of labels at once stalled ~250 ms."""
        if not self._queue:
            return
        self._draw_stage(*self._queue.pop(0))
        if self._queue:
            QTimer.singleShot(1, self, self._draw_next)  # 1 ms: a zero timer runs in the same pass
        else:
            self.drawn.emit()

    def _draw_stage(self, name: str, prepared: PreparedMatrix, tokens: list[str], keys: list[str]) -> None:
        plot = self.plots[name]
        col_labels = keys if name in SQUARE else [str(i) for i in range(prepared.matrix.shape[1])]
        row_labels = keys if name in ("k_raw", "k", "v") else tokens  # K and V rows are the keys (cross-attention)
        shape = " × ".join(map(str, prepared.matrix.shape))
        where = f" of {_head_label(self._result, self._head)}" if name in PER_HEAD else ""  # named as on the info line
        plot.set_title(f"<b>{name}</b> <span style='color:#555'>[{shape}]</span><br>{self._formula(name)}")
        why = f" — {EXPLAINED[name]}" if name in EXPLAINED else ""
        plot.title.setToolTip(f"{name}{where} [{shape}]: {self._formula(name)}{why}")
        plot.show_prepared(prepared, row_labels=row_labels, col_labels=col_labels)
        plot.show()

    # -- hover -----------------------------------------------------------------------------------
    def arithmetic(self, q: int, k: int) -> CellArithmetic:
        return cell_arithmetic(self._result, self._head, q, k)

    @Slot(int, int)
    def hover_weight(self, q: int, k: int) -> CellArithmetic | None:
        """Highlight query row q of Q, key row k of K, the cell in every square stage; explain it."""
        if self._result is None or not self._result.intermediates:
            return None
        a = self.arithmetic(q, k)
        for name in ("q_raw", "q", "embeddings", "angles"):  # the query's position is its row of the angles
            self.plots[name].highlight_row(q)
        for name in ("k_raw", "k", "v"):
            self.plots[name].highlight_row(k)
        for name in SQUARE:
            self.plots[name].highlight_cell(q, k)
        lines = arithmetic_lines(self._result, a)
        if self._result.config.training and self._result.config.dropout:
            lines.append("dropout acted after the softmax, so the stored weight may be 0 or scaled by 1/(1-p)")
        self.arithmeticLabel.setText("\n".join(lines))
        return a

    def hover_stage(self, name: str, r: int, c: int) -> str | None:
        """The exact value of stage ``name`` at (r, c), in the arithmetic line."""
        if self._result is None or not self._result.intermediates:
            return None
        if name == "angles":
            text = angle_readout(self._result, r, c)
            self.arithmeticLabel.setText(text)
            return text
        m = self.stage_matrix(name)
        rows = self._result.keys if name in ("k_raw", "k", "v") else self._result.tokens
        col = f'key "{self._result.keys[c]}" ({c})' if name in SQUARE else "the sink" if name == "sink" else f"dim {c}"
        text = f'{name} · row "{rows[r]}" ({r}), {col}: {float(m[r, c]):.6g}'
        if name in SQUARE:
            text += "\nhover the weights for the whole arithmetic of a cell"
        self.arithmeticLabel.setText(text)
        return text

    @Slot()
    def clear_hover(self) -> None:
        for plot in self.plots.values():
            plot.clear_marks()


__all__ = ["STAGES", "CellArithmetic", "StepThroughView", "kv_head_of", "stage_images", "stage_matrix_of"]
