"""Pretrained mode: attention rollout across layers, and "follow a token" through the layers.

Rollout (Abnar & Zuidema, 2020; attndesk.core.rollout): heads averaged, identity added for the
residual stream, rows re-normalised, multiplied through the layers. Follow a token: one query
token's attention over the keys at every layer, a layers x keys heatmap.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from attndesk.core.rollout import attention_rollout
from attndesk.core.types import MEAN

from .heatmap import MatrixPlot


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
        self.rollout: np.ndarray | None = None
        self.follow: np.ndarray | None = None
        self.layersSpin = QSpinBox()
        self.layersSpin.setObjectName("rolloutLayersSpin")
        self.layersSpin.setPrefix("through layer ")
        self.layersSpin.setRange(1, 1)
        self.layersSpin.valueChanged.connect(self._update_rollout)
        self.queryCombo = QComboBox()
        self.queryCombo.setObjectName("followQueryCombo")
        self.queryCombo.currentIndexChanged.connect(self._update_follow)
        self.headCombo = QComboBox()
        self.headCombo.setObjectName("followHeadCombo")
        self.headCombo.currentIndexChanged.connect(self._update_follow)
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
        self._update_rollout()
        self._update_follow()

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

    @Slot()
    def _update_rollout(self) -> None:
        if self._result is None:
            return
        n = self.layersSpin.value()
        self.rollout = attention_rollout(self._result.weights, upto=n)
        tokens = list(self._result.tokens)
        self.rolloutPlot.set_title(f"<b>attention rollout</b> through layers 0–{n - 1} [{len(tokens)} × {len(tokens)}]")
        self.rolloutPlot.set_matrix(self.rollout, row_labels=tokens, col_labels=tokens)

    @Slot()
    def _update_follow(self) -> None:
        if self._result is None or self.queryCombo.currentIndex() < 0:
            return
        q = self.queryCombo.currentIndex()
        head = self.headCombo.currentData()
        rows = np.asarray(self._result.weights)[:, :, q, :]  # [layers, H, L]
        self.follow = rows.mean(axis=1, dtype=np.float64) if head in (None, MEAN) else rows[:, int(head), :]
        tokens = list(self._result.tokens)
        who = "mean over heads" if head in (None, MEAN) else f"head {head}"
        self.followPlot.set_title(
            f'<b>follow "{tokens[q]}"</b> ({who}) [{self.follow.shape[0]} layers × {len(tokens)} keys]'
        )
        self.followPlot.set_matrix(self.follow, row_labels=[f"layer {i}" for i in range(self.follow.shape[0])],
                                   col_labels=tokens)
        self.queryChanged.emit(q)

    @Slot(int, int)
    def _hover_rollout(self, r: int, c: int) -> None:
        t = self._result.tokens
        self.readout.setText(f'rollout: "{t[r]}" ({r}) ← input "{t[c]}" ({c}): {self.rollout[r, c]:.4f}')

    @Slot(int, int)
    def _hover_follow(self, layer: int, k: int) -> None:
        t = self._result.tokens
        q = self.queryCombo.currentIndex()
        self.readout.setText(f'layer {layer}: "{t[q]}" ({q}) → "{t[k]}" ({k}): {self.follow[layer, k]:.4f}')
