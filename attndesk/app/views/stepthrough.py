"""The whole computation of one head as a left-to-right strip of heatmaps.

embeddings (+PE) -> Q, K, V -> scores Q K^T -> / sqrt(d_k) -> masked (-inf, hatched) -> softmax
weights -> weighted sum (context) -> merged output. Each stage shows its shape and formula.
Hovering a weight highlights the query row of Q and the key row of K that produced it and
spells out the arithmetic: q . k, / sqrt(d_k), exp, / row sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QGridLayout, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QSpinBox, QVBoxLayout, QWidget,
)

from attndesk.core.types import Intermediates

from .heatmap import MatrixPlot, PreparedMatrix, prepare_matrix

# (intermediate key, title, formula); formulas depend on the config, filled in _formula()
STAGES = ("embeddings", "q", "k", "v", "scores", "scaled", "masked", "weights", "context", "output")
# Q and K before a rotary embedding (a real model's RoPE layers): a third row, shown when the run kept them
ROTARY = ("q_raw", "k_raw")
PER_HEAD = {"q", "k", "v", "scores", "scaled", "masked", "weights", "context", "q_raw", "k_raw"}
PER_ROW = 5  # stages per row of the strip
SEQUENTIAL = {"weights"}  # drawn 0..max with viridis; the rest are signed (diverging, centred at 0)


@dataclass(frozen=True)
class CellArithmetic:
    """How weight[head, q, k] came about, recomputed in float64 from the stored Q and K."""

    head: int
    query: int
    key: int
    dot: float  # q . k
    scale: float  # 1/sqrt(d_k), or 1.0 unscaled
    scaled: float  # dot * scale
    masked: bool
    row_max: float  # softmax subtracts it (it cancels)
    exp: float  # exp(scaled - row_max), 0 when masked
    row_sum: float  # sum over the row's unmasked keys of exp(scaled_j - row_max)
    weight: float  # exp / row_sum
    stored: float  # the core's weight for comparison


def _stage(inter: Intermediates, name: str) -> np.ndarray:
    return getattr(inter, name)


def kv_head_of(inter: Intermediates, head: int) -> int:
    """The K/V head query head ``head`` reads (grouped-query heads share them: h // (H / KV))."""
    return head // (inter.weights.shape[0] // inter.k.shape[0])


def stage_matrix_of(result, name: str, head: int) -> np.ndarray:
    """The exact 2-D matrix stage ``name`` shows for ``head``."""
    inter = result.intermediates
    data = _stage(inter, name)
    if name in ("k", "v", "k_raw"):
        return data[kv_head_of(inter, head)]
    return data[head] if name in PER_HEAD else data


def shown_stages(result) -> tuple[str, ...]:
    """The stages drawn: all of STAGES, then Q and K before the rotary embedding when kept."""
    return STAGES + tuple(n for n in ROTARY if _stage(result.intermediates, n) is not None)


def stage_images(result, head: int) -> dict[str, PreparedMatrix]:
    """Every stage of ``head`` ready to draw (thread-safe: numpy only); masked weights are 0 but
    drawn hatched like the -inf they came from, never as a small weight."""
    hidden = ~np.isfinite(_stage(result.intermediates, "masked")[head])
    return {name: prepare_matrix(stage_matrix_of(result, name, head), diverging=name not in SEQUENTIAL,
                                 masked=hidden if name == "weights" else None)
            for name in shown_stages(result)}


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
        self._result = None
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
        self.arithmeticLabel = QLabel("Hover a cell of the weights to see how it is computed.")
        self.arithmeticLabel.setObjectName("stepArithmeticLabel")
        self.arithmeticLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.arithmeticLabel.setStyleSheet("font-family: monospace")
        self.arithmeticLabel.setMinimumHeight(80)
        self.arithmeticLabel.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)

        strip = self._build_strip()
        self.scroll = QScrollArea()
        self.scroll.setWidget(strip)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)

        top = QHBoxLayout()
        top.addWidget(self.headSpin)
        top.addWidget(self.infoLabel, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.arithmeticLabel)

    def _build_strip(self) -> QWidget:
        """The stages, five to a row, each a MatrixPlot with its title and hover read-out."""
        self.plots: dict[str, MatrixPlot] = {}
        strip = QWidget()
        # the strip wraps after PER_ROW stages (a 10-wide row would hide the weights off screen):
        # row 1 builds Q, K, V and the scores, row 2 turns them into weights and the output
        grid = QGridLayout(strip)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(2)
        for i, name in enumerate(STAGES + ROTARY):
            plot = MatrixPlot(name)
            plot.setObjectName(f"stage_{name}")
            plot.setMinimumSize(160, 190)
            # no word wrap: a wrapping title makes the scroll area size the strip by height-for-width,
            # which stacks the plots' full size hints and pushes the second row off screen
            plot.title.setWordWrap(False)
            plot.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            self.plots[name] = plot
            row, col = divmod(i, PER_ROW)
            grid.addWidget(plot, row, 2 * col)
            grid.setColumnStretch(2 * col, 1)
            if name in ROTARY:
                plot.hide()  # only a run with a rotary embedding has them
            if name not in (STAGES[-1], *ROTARY):
                arrow = QLabel("→" if col < PER_ROW - 1 else "↩")
                arrow.setToolTip("the next stage" if col < PER_ROW - 1 else "continues on the next row")
                arrow.setStyleSheet("font-size: 18px; color: #666")
                grid.addWidget(arrow, row, 2 * col + 1)
        self.plots["weights"].cellHovered.connect(self.hover_weight)
        self.plots["weights"].hoverLeft.connect(self.clear_hover)
        for name, plot in self.plots.items():
            if name != "weights":  # the other stages read out the value under the mouse
                plot.cellHovered.connect(partial(self.hover_stage, name))
        return strip

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
        self.scroll.setVisible(bool(inter))
        self.arithmeticLabel.setVisible(bool(inter))
        self.headSpin.setEnabled(bool(inter))
        if not inter:
            self._queue = []
            for plot in self.plots.values():
                plot.clear()
            self.infoLabel.setText("Run once to see every step." if result is None else
                                   "This result kept no intermediates: the step-through needs a run with "
                                   "keep_intermediates=True.")
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
        explicit = getattr(self._result, "attention_scale", None)  # a real model's own (T5: 1, Gemma: its scalar)
        if explicit is not None:
            return float(explicit)
        cfg = self._result.config
        return 1.0 / math.sqrt(self._d_k()) if cfg.scaled else 1.0

    # -- drawing ---------------------------------------------------------------------------------
    def _d_k(self) -> int:
        return int(_stage(self._result.intermediates, "q").shape[-1])

    def _formula(self, name: str) -> str:
        custom = getattr(self._result, "formulas", None) or {}  # a real model's layer says what it computes
        if name in custom:
            return custom[name]
        cfg = self._result.config
        d_k = self._d_k()
        single = int(_stage(self._result.intermediates, "weights").shape[0]) == 1
        rope = cfg.position == "rope"  # Q and K rotated by position; the embeddings carry none
        masked = ("+ ALiBi bias, " if cfg.position == "alibi" else "") + ("soft-capped, " if cfg.softcap else "")
        masked += "−∞ where masked" if cfg.mask != "none" or cfg.window else "no mask"
        return {
            "embeddings": "X = embed(tokens) + PE" if cfg.position == "sinusoidal" else
                          f"X = embed(tokens)  (positions: {cfg.position})",
            "q": "Q = RoPE(X W<sub>Q</sub> + b)" if rope else "Q = X W<sub>Q</sub> + b",
            "k": "K = RoPE(X W<sub>K</sub> + b)" if rope else "K = X W<sub>K</sub> + b", "v": "V = X W<sub>V</sub> + b",
            "scores": "S = Q K<sup>T</sup>",
            "scaled": f"S / √d<sub>k</sub> = S / √{d_k}" if cfg.scaled else "S (unscaled: × 1)",
            "masked": masked if masked != "no mask" else "no mask: = scaled",
            "weights": "A = softmax<sub>row</sub>(masked)" + (" then dropout" if cfg.training and cfg.dropout else ""),
            "context": "C = A V",
            "output": "C (single head: no W<sub>O</sub>)" if single else "concat<sub>h</sub>(C) W<sub>O</sub> + b",
            "q_raw": "Q before RoPE = X W<sub>Q</sub>", "k_raw": "K before RoPE = X W<sub>K</sub>",
        }[name]

    def _update(self, images: dict[str, PreparedMatrix] | None = None) -> None:
        """Draw the current head: the images given, else ask the preparer, else make them here."""
        result, h = self._result, self._head
        if images is None and self._preparer is not None:
            self.infoLabel.setText(f"drawing head {h}…")
            self._preparer(result, h)
            return
        images = images if images is not None else stage_images(result, h)
        tokens, keys = list(result.tokens), list(result.keys)
        heads = int(_stage(result.intermediates, "weights").shape[0])
        self.infoLabel.setText(
            f"head {h} of {heads} · d_k = {self._d_k()} · {len(tokens)} tokens · mask {result.config.mask}"
            + (" · scaled" if result.config.scaled else " · unscaled")
            + (" · hatched cells = masked (−∞)" if result.config.mask != "none" else "")
        )
        stages = shown_stages(result)
        for name in ROTARY:
            self.plots[name].setVisible(name in stages)
        steps = [(name, images[name], tokens, keys) for name in stages if name in images]
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
        square = name in ("scores", "scaled", "masked", "weights")
        col_labels = keys if square else [str(i) for i in range(prepared.matrix.shape[1])]
        row_labels = keys if name in ("k", "v", "k_raw") else tokens  # K and V rows are the keys (cross-attention)
        shape = " × ".join(map(str, prepared.matrix.shape))
        where = f" of head {self._head}" if name in PER_HEAD else ""  # the info line names the head too
        plot.set_title(f"<b>{name}</b> <span style='color:#555'>[{shape}]</span><br>{self._formula(name)}")
        plot.title.setToolTip(f"{name}{where} [{shape}]: {self._formula(name)}")
        plot.show_prepared(prepared, row_labels=row_labels, col_labels=col_labels)

    # -- hover -----------------------------------------------------------------------------------
    def arithmetic(self, q: int, k: int) -> CellArithmetic:
        inter = self._result.intermediates
        h = self._head
        qv = _stage(inter, "q")[h, q].astype(np.float64)
        kv = _stage(inter, "k")[kv_head_of(inter, h), k].astype(np.float64)
        dot = float(qv @ kv)
        scale = self.scale()
        scaled = dot * scale
        row = _stage(inter, "masked")[h, q].astype(np.float64)  # -inf where masked
        finite = np.isfinite(row)
        masked = not bool(finite[k])
        if finite.any():
            row_max = float(row[finite].max())
            row_sum = float(np.exp(row[finite] - row_max).sum())
        else:  # every key masked: the core gives this query all-zero weights
            row_max, row_sum = float("-inf"), 0.0
        # the softmax input: the scaled score, soft-capped and biased where the layer does so
        e = 0.0 if masked else math.exp(float(row[k]) - row_max)
        weight = e / row_sum if row_sum > 0 else 0.0
        return CellArithmetic(h, q, k, dot, scale, scaled, masked, row_max, e, row_sum, weight,
                              float(_stage(inter, "weights")[h, q, k]))

    @Slot(int, int)
    def hover_weight(self, q: int, k: int) -> CellArithmetic | None:
        """Highlight query row q of Q, key row k of K, the cell in every square stage; explain it."""
        if self._result is None or not self._result.intermediates:
            return None
        a = self.arithmetic(q, k)
        for name in ("q", "embeddings"):
            self.plots[name].highlight_row(q)
        self.plots["k"].highlight_row(k)
        self.plots["v"].highlight_row(k)
        for name in ("scores", "scaled", "masked", "weights"):
            self.plots[name].highlight_cell(q, k)
        tokens, keys = self._result.tokens, self._result.keys
        d_k = self._d_k()
        lines = [f'head {a.head} · query "{tokens[q]}" ({q}) → key "{keys[k]}" ({k})']
        lines.append(f"q·k = Σ of {d_k} products = {a.dot:.6g}")
        if getattr(self._result, "attention_scale", None) is not None:
            lines.append(f"× the layer's scale {a.scale:.6g}  → {a.scaled:.6g}")
        elif self._result.config.scaled:
            lines.append(f"÷ √d_k = ÷ {math.sqrt(d_k):.4g}  → {a.scaled:.6g}")
        else:
            lines.append(f"unscaled → {a.scaled:.6g}")
        softmax_in = float(_stage(self._result.intermediates, "masked")[a.head, q, k])
        if not a.masked and abs(softmax_in - a.scaled) > 1e-6 * max(1.0, abs(a.scaled)):
            lines.append(f"soft-cap / position bias → softmax input {softmax_in:.6g}")
        if a.masked:
            lines.append("masked → −∞ → exp(−∞) = 0 → weight 0")
        else:
            lines.append(f"exp({softmax_in:.6g} − row max {a.row_max:.6g}) = {a.exp:.6g}   (the row max cancels)")
            lines.append(f"÷ row sum {a.row_sum:.6g} → {a.weight:.6g}   (core's weight: {a.stored:.6g})")
        if self._result.config.training and self._result.config.dropout:
            lines.append("dropout acted after the softmax, so the stored weight may be 0 or scaled by 1/(1-p)")
        self.arithmeticLabel.setText("\n".join(lines))
        return a

    def hover_stage(self, name: str, r: int, c: int) -> str | None:
        """The exact value of stage ``name`` at (r, c), in the arithmetic line."""
        if self._result is None or not self._result.intermediates:
            return None
        m = self.stage_matrix(name)
        rows = self._result.keys if name in ("k", "v", "k_raw") else self._result.tokens
        col = f'key "{self._result.keys[c]}" ({c})' if m.shape[1] == len(self._result.keys) and name in (
            "scores", "scaled", "masked") else f"dim {c}"
        text = f'{name} · row "{rows[r]}" ({r}), {col}: {float(m[r, c]):.6g}'
        if name in ("scores", "scaled", "masked"):
            text += "\nhover the weights for the whole arithmetic of a cell"
        self.arithmeticLabel.setText(text)
        return text

    @Slot()
    def clear_hover(self) -> None:
        for plot in self.plots.values():
            plot.clear_marks()
