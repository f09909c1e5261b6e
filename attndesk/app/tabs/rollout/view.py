"""Pretrained mode: attention rollout across layers, the attention flow beside it, and "follow a
token" through the layers.

Rollout (Abnar & Zuidema, 2020; attndesk.teaching.rollout): heads averaged, identity added for the
residual stream, rows re-normalised, multiplied through the layers. Attention flow (the same
paper; attndesk.interp.attention_flow): the maximum flow through the same layered graph,
bounded by each path's narrowest edge instead of the product; it costs L x L maximum-flow
problems, so it is computed on request (the "attention flow" switch), elsewhere, with progress.
Follow a token: one query token's attention over the keys at every layer, a layers x keys heatmap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QProgressBar, QSpinBox, QVBoxLayout, QWidget

from attndesk.attention.types import MEAN, head_name
from attndesk.interp import attention_flow
from attndesk.jobs import JobContext
from attndesk.teaching.rollout import attention_rollout

if TYPE_CHECKING:
    from attndesk.models import PretrainedResult

from attndesk.app.widgets.named import named

from ...widgets.heatmap import MatrixPlot, PreparedMatrix, prepare_matrix
from ...widgets.holdings import held_by


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
    who = "mean over heads" if mean else f"{head_name(None, int(head))} of each layer"
    return Trace(
        request,
        tokens,
        rollout,
        follow,
        prepare_matrix(rollout),
        prepare_matrix(follow),
        f"<b>attention rollout</b> through layers 0–{layers - 1} [{len(tokens)} × {len(tokens)}]",
        f'<b>follow "{tokens[q]}"</b> ({who}) [{follow.shape[0]} layers × {len(tokens)} keys]',
    )


@dataclass(frozen=True, eq=False)
class Flow:
    """The attention flow through the first ``layers`` layers, ready to draw."""

    request: tuple
    tokens: list[str]
    flow: np.ndarray
    image: PreparedMatrix
    title: str


def flow_trace(request: tuple, *, ctx: JobContext | None = None) -> Flow:
    """``request`` = (result with weights [layers, H, L, L], layers): every output token's maximum
    flow from every input token (numpy and scipy only, thread-safe; cancelling ``ctx`` stops it)."""
    result, layers = request
    tokens = list(result.tokens)
    flow = attention_flow(np.asarray(result.weights)[:layers], tokens=tokens, ctx=ctx).flow
    return Flow(
        request,
        tokens,
        flow,
        prepare_matrix(flow, levels=(0.0, 1.0)),
        f"<b>attention flow</b> through layers 0–{layers - 1} [{len(tokens)} × {len(tokens)}]",
    )


class RolloutView(QWidget):
    """API: ``set_result(result)`` with ``result.weights`` [layers, H, L, L] and ``result.tokens``
    (a PretrainedResult; anything else shows a note), ``set_layers(n)`` (rollout through the first
    n layers), ``set_query(i)``, ``set_head(h)`` (h or ``MEAN``), ``set_flow_shown(on)`` (the
    attention flow beside the rollout). ``rollout`` [L, L], ``flow`` [L, L] and ``follow``
    [layers, L] are the exact matrices shown. Signals ``queryChanged(int)``, ``flowShown()``."""

    queryChanged = Signal(int)
    flowShown = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rolloutView")
        self._result: PretrainedResult | None = None
        self._tracer = None
        self._pending: tuple | None = None  # (result, layers, query, head) asked of the tracer
        self._flow_tracer = None
        self._flow_pending: tuple | None = None  # (result, layers) asked of the flow tracer
        self._flow_asked: tuple | None = None  # the last flow request made (the flow needs no new one per query)
        self.flow: np.ndarray | None = None
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
        self._build_flow()
        self._lay_out()

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the run it reads, its rollout, flow and trace, and their plots."""
        return held_by(
            self._result,
            self.rollout,
            self.flow,
            self.follow,
            self._traced,
            self._pending,
            self._flow_pending,
            self.rolloutPlot,
            self.followPlot,
            self.flowPlot,
        )

    def _lay_out(self) -> None:
        """The controls' bar above the plots, all in ``body`` (hidden while there is nothing to trace)."""
        bar = QHBoxLayout()
        bar.addWidget(self.layersSpin)
        bar.addSpacing(20)
        bar.addWidget(QLabel("follow token"))
        bar.addWidget(self.queryCombo)
        bar.addWidget(self.headCombo)
        bar.addSpacing(20)
        for widget in (self.flowCheck, self.flowProgress, self.flowStatus):
            bar.addWidget(widget)
        bar.addStretch(1)
        plots = QHBoxLayout()
        plots.addWidget(self.rolloutPlot, 1)
        plots.addWidget(self.flowPlot, 1)
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

    def _build_flow(self) -> None:
        self.flowCheck = named(QCheckBox("attention flow beside it"), "rolloutFlowCheck")
        self.flowCheck.setToolTip(
            "the maximum flow through the same graph the rollout multiplies (Abnar & Zuidema "
            "2020): L × L maximum-flow problems, computed in the background (Esc stops)"
        )
        self.flowCheck.toggled.connect(self.set_flow_shown)
        self.flowProgress = named(QProgressBar(), "rolloutFlowProgress")
        self.flowProgress.setRange(0, 1000)
        self.flowProgress.setMaximumWidth(160)
        self.flowProgress.hide()
        self.flowStatus = named(QLabel(""), "rolloutFlowStatus")
        self.flowPlot = MatrixPlot("attention flow")
        self.flowPlot.setObjectName("flowPlot")
        self.flowPlot.cellHovered.connect(self._hover_flow)
        self.flowPlot.hide()

    def set_result(self, result) -> None:
        weights = None if result is None else np.asarray(getattr(result, "weights", None))
        if weights is None or weights.ndim != 4:
            self._result = None
            self._forget_flow()
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
            self.headCombo.addItem(head_name(None, h), h)
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

    def show_trace(self, traced: Trace) -> bool:
        """Draw a trace; ignored (False) unless it answers the request the view waits for."""
        if traced.request is not self._pending:
            return False
        self._pending = None
        self.rollout, self.follow = traced.rollout, traced.follow
        self._traced = traced  # the hover reads the drawn trace's tokens: a newer result may be pending
        self.rolloutPlot.set_title(traced.rollout_title)
        self.rolloutPlot.show_prepared(traced.rollout_image, row_labels=traced.tokens, col_labels=traced.tokens)
        self.followPlot.set_title(traced.follow_title)
        self.followPlot.show_prepared(
            traced.follow_image,
            col_labels=traced.tokens,
            row_labels=[f"layer {i}" for i in range(traced.follow.shape[0])],
        )
        self.queryChanged.emit(traced.request[2])
        return True

    @Slot(bool)
    def set_flow_shown(self, on: bool) -> None:
        """Show the attention flow beside the rollout (computed now), or hide it (and stop computing it)."""
        if self.flowCheck.isChecked() != bool(on):
            self.flowCheck.setChecked(bool(on))  # calls back here
            return
        self.flowPlot.setVisible(bool(on))
        if not on:
            self._forget_flow()
        self._update()

    def set_flow_tracer(self, tracer) -> None:
        """``tracer(request)`` computes ``flow_trace(request)`` elsewhere and later calls ``show_flow``;
        None = here."""
        self._flow_tracer = tracer

    def flow_request(self) -> tuple | None:
        """The flow computation the view waits for, or None."""
        return self._flow_pending

    def set_flow_progress(self, fraction: float, message: str = "") -> None:
        if self._flow_pending is not None:
            self.flowProgress.setValue(int(1000 * max(0.0, min(1.0, fraction))))
            self.flowStatus.setText(message)

    def flow_stopped(self, message: str) -> None:
        """The flow computation ended without a result (cancelled, failed): say so; the switch stays."""
        self._flow_pending, self._flow_asked = None, None
        self.flowProgress.hide()
        self.flowStatus.setText(message)

    def show_flow(self, traced: Flow) -> bool:
        """Draw a flow; ignored (False) unless it answers the request the view waits for."""
        if traced.request is not self._flow_pending:
            return False
        self._flow_pending = None
        self.flowProgress.hide()
        self.flowStatus.setText("")
        self.flow = traced.flow
        self.flowPlot.set_title(traced.title)
        self.flowPlot.show_prepared(traced.image, row_labels=traced.tokens, col_labels=traced.tokens)
        self.flowShown.emit()
        return True

    def _forget_flow(self) -> None:
        self._flow_pending = self._flow_asked = None
        self.flow = None
        self.flowProgress.hide()
        self.flowStatus.setText("")
        self.flowPlot.clear()

    def _request_flow(self) -> None:
        asked = (self._result, self.layersSpin.value())
        if not self.flowCheck.isChecked() or (
            self._flow_asked is not None and self._flow_asked[0] is asked[0] and self._flow_asked[1] == asked[1]
        ):
            return
        self._flow_pending = self._flow_asked = asked
        self.flowProgress.setValue(0)
        self.flowProgress.show()
        self.flowStatus.setText("computing the attention flow…")
        if self._flow_tracer is not None:
            self._flow_tracer(asked)
        else:
            self.show_flow(flow_trace(asked))

    @Slot()
    def _update(self) -> None:
        if self._result is None or self.queryCombo.currentIndex() < 0:
            return
        self._request_flow()
        self._pending = (
            self._result,
            self.layersSpin.value(),
            self.queryCombo.currentIndex(),
            self.headCombo.currentData(),
        )
        if self._tracer is not None:
            self._tracer(self._pending)
        else:
            self.show_trace(trace(self._pending))

    @Slot(int, int)
    def _hover_rollout(self, r: int, c: int) -> None:
        if self._traced is None:
            return
        t, rollout = self._traced.tokens, self._traced.rollout  # the drawn trace's (= self.rollout)
        self.readout.setText(f'rollout: "{t[r]}" ({r}) ← input "{t[c]}" ({c}): {rollout[r, c]:.4f}')

    @Slot(int, int)
    def _hover_flow(self, r: int, c: int) -> None:
        assert self._result is not None and self.flow is not None, "hovered only once a flow is shown"
        t = self._result.tokens
        self.readout.setText(
            f'flow: "{t[r]}" ({r}) ← input "{t[c]}" ({c}): {self.flow[r, c]:.4f} (rollout {self.rollout[r, c]:.4f})'
            if self.rollout is not None and self.rollout.shape == self.flow.shape
            else f"flow: {self.flow[r, c]:.4f}"
        )

    @Slot(int, int)
    def _hover_follow(self, layer: int, k: int) -> None:
        if self._traced is None:
            return
        t, follow = self._traced.tokens, self._traced.follow  # the drawn trace's (= self.follow)
        q = self._traced.request[2]  # the query the drawn trace follows
        self.readout.setText(f'layer {layer}: "{t[q]}" ({q}) → "{t[k]}" ({k}): {follow[layer, k]:.4f}')
