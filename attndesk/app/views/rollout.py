"""Pretrained mode: attention rollout across layers, and "follow a token" through the layers.

Rollout (Abnar & Zuidema, 2020; attndesk.core.rollout): heads averaged, identity added for the
residual stream, rows re-normalised, multiplied through the layers. Follow a token: one query
token's attention over the keys at every layer, a layers x keys heatmap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from attndesk.core.rollout import attention_rollout
from attndesk.core.types import MEAN

from .heatmap import MatrixPlot, PreparedMatrix, prepare_matrix


@dataclass(frozen=True, eq=False)
class Trace:
    """The rollout through the first ``layers`` layers and one query token's path, ready to draw."""

    request: tuple
    tokens: list[str]
    rollout: np.ndarray
    follow: np.ndarray
    rollout_image: PreparedMatrix
    follow_image: PreparedMatrix
    rollout_title: str
    follow_title: str


def trace(request: tuple) -> Trace:
    """``request`` = (result with weights [layers, H, L, L], layers, query index, head or MEAN);
    thread-safe (numpy only)."""
    result, layers, q, head = request
    tokens = list(result.tokens)
    rollout = attention_rollout(result.weights, upto=layers)
    rows = np.asarray(result.weights)[:, :, q, :]  # [layers, H, L]
    mean = head in (None, MEAN)
    follow = rows.mean(axis=1, dtype=np.float64) if mean else rows[:, int(head), :]
    who = "mean over heads" if mean else f"head {head}"
    return Trace(request, tokens, rollout, follow, prepare_matrix(rollout), prepare_matrix(follow),
                 f"<b>attention rollout</b> through layers 0–{layers - 1} [{len(tokens)} × {len(tokens)}]",
                 f'<b>follow "{tokens[q]}"</b> ({who}) [{follow.shape[0]} layers × {len(tokens)} keys]')


class RolloutView(QWidget):
    """API: ``set_result(result)`` with ``result.weights`` [layers, H, L, L] and ``result.tokens``
    (a PretrainedResult; anything else shows a note), ``set_layers(n)`` (rollout through the first
    n layers), ``set_query(i)``, ``set_head(h)`` (h or ``MEAN``). ``rollout`` [L, L] and ``follow``
    [layers, L] are the exact matrices shown. Signal ``queryChanged(int)``."""

    queryChanged = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rolloutView")
        self._result = None
        self._tracer = None
        self._pending: tuple | None = None  # (result, layers, query, head) asked of the tracer
        self.rollout: np.ndarray | None = None
        self._traced: Trace | None = None
        self.follow: np.ndarray | None = None
        self.layersSpin = QSpinBox()
        self.layersSpin.setObjectName("rolloutLayersSpin")
        self.layersSpin.setPrefix("through layer ")
        self.layersSpin.setRange(1, 1)
        self.layersSpin.valueChanged.connect(self._update)
        self.queryCombo = QComboBox()
        self.queryCombo.setObjectName("followQueryCombo")
        self.queryCombo.currentIndexChanged.connect(self._update)
        self.headCombo = QComboBox()
        self.headCombo.setObjectName("followHeadCombo")
        self.headCombo.currentIndexChanged.connect(self._update)
        self.infoLabel = QLabel("Attention rollout needs a model with several layers: switch to pretrained mode.")
        self.infoLabel.setObjectName("rolloutInfo")
        self.infoLabel.setWordWrap(True)
        self.rolloutPlot = MatrixPlot("attention rollout")
        self.rolloutPlot.setObjectName("rolloutPlot")
        self.followPlot = MatrixPlot("follow a token")
        self.followPlot.setObjectName("followPlot")
        self.followPlot.cellHovered.connect(self._hover_follow)
        self.rolloutPlot.cellHovered.connect(self._hover_rollout)
        self.readout = QLabel(" ")
        bar = QHBoxLayout()
        bar.addWidget(self.layersSpin)
        bar.addSpacing(20)
        bar.addWidget(QLabel("follow token"))
        bar.addWidget(self.queryCombo)
        bar.addWidget(self.headCombo)
        bar.addStretch(1)
        plots = QHBoxLayout()
        plots.addWidget(self.rolloutPlot, 1)
        plots.addWidget(self.followPlot, 1)
        # controls and plots together, hidden while there is nothing to trace (toy mode)
        self.body = QWidget()
        self.body.setObjectName("rolloutBody")
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        body.addLayout(bar)
        body.addLayout(plots, 1)
        body.addWidget(self.readout)
        layout = QVBoxLayout(self)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.body, 1)
        layout.addStretch(0)

    def set_result(self, result) -> None:
        weights = None if result is None else np.asarray(getattr(result, "weights", None))
        if weights is None or weights.ndim != 4:
            self._result = None
            self.rolloutPlot.clear("rollout needs [layers, heads, L, L] weights (pretrained mode)")
            self.followPlot.clear("")
            return
        self._result = result
        self.body.show()
        layers, heads = weights.shape[:2]
        tokens = list(result.tokens)
        for widget in (self.layersSpin, self.queryCombo, self.headCombo):
            widget.blockSignals(True)
        self.layersSpin.setRange(1, layers)
        self.layersSpin.setValue(layers)
        query = max(0, self.queryCombo.currentIndex())
        self.queryCombo.clear()
        self.queryCombo.addItems([f"{i}: {t}" for i, t in enumerate(tokens)])
        self.queryCombo.setCurrentIndex(min(query, len(tokens) - 1))
        head = self.headCombo.currentData()
        self.headCombo.clear()
        self.headCombo.addItem("mean over heads", MEAN)
        for h in range(heads):
            self.headCombo.addItem(f"head {h}", h)
        self.headCombo.setCurrentIndex(max(0, self.headCombo.findData(head)))
        for widget in (self.layersSpin, self.queryCombo, self.headCombo):
            widget.blockSignals(False)
        self.infoLabel.setText(
            f"{layers} layers × {heads} heads, {len(tokens)} tokens. Rollout: rows = tokens after the last "
            "layer shown, columns = input tokens; rownorm(mean over heads + I), multiplied through the layers."
        )
        self._update()

    def set_unavailable(self, message: str) -> None:
        """Nothing to trace (e.g. the toy model's single layer): say why, hide the empty plots."""
        self.set_result(None)
        self.infoLabel.setText(message)
        self.body.hide()

    def set_layers(self, n: int) -> None:
        self.layersSpin.setValue(int(n))

    def set_query(self, index: int) -> None:
        self.queryCombo.setCurrentIndex(int(index))

    def set_head(self, head) -> None:
        """One head (an int) or ``MEAN``."""
        self.headCombo.setCurrentIndex(max(0, self.headCombo.findData(head if head == MEAN else int(head))))

    def result(self):
        """The run shown (weights [layers, heads, L, L]), or None."""
        return self._result

    def set_tracer(self, tracer) -> None:
        """``tracer(request)`` computes ``trace(request)`` elsewhere (a worker: the rollout multiplies
        layers x L x L matrices) and later calls ``show_trace``; None = here."""
        self._tracer = tracer

    def show_trace(self, traced: "Trace") -> bool:
        """Draw a trace; ignored (False) unless it answers the request the view waits for."""
        if traced.request is not self._pending:
            return False
        self._pending = None
        self.rollout, self.follow = traced.rollout, traced.follow
        self._traced = traced  # the hover reads the drawn trace's tokens: a newer result may be pending
        self.rolloutPlot.set_title(traced.rollout_title)
        self.rolloutPlot.show_prepared(traced.rollout_image, row_labels=traced.tokens, col_labels=traced.tokens)
        self.followPlot.set_title(traced.follow_title)
        self.followPlot.show_prepared(traced.follow_image, col_labels=traced.tokens,
                                      row_labels=[f"layer {i}" for i in range(traced.follow.shape[0])])
        self.queryChanged.emit(traced.request[2])
        return True

    @Slot()
    def _update(self) -> None:
        if self._result is None or self.queryCombo.currentIndex() < 0:
            return
        self._pending = (self._result, self.layersSpin.value(), self.queryCombo.currentIndex(),
                         self.headCombo.currentData())
        if self._tracer is not None:
            self._tracer(self._pending)
        else:
            self.show_trace(trace(self._pending))

    @Slot(int, int)
    def _hover_rollout(self, r: int, c: int) -> None:
        if self._traced is None:
            return
        t = self._traced.tokens
        self.readout.setText(f'rollout: "{t[r]}" ({r}) ← input "{t[c]}" ({c}): {self.rollout[r, c]:.4f}')

    @Slot(int, int)
    def _hover_follow(self, layer: int, k: int) -> None:
        if self._traced is None:
            return
        t = self._traced.tokens
        q = self._traced.request[2]  # the query the drawn trace follows
        self.readout.setText(f'layer {layer}: "{t[q]}" ({q}) → "{t[k]}" ({k}): {self.follow[layer, k]:.4f}')
