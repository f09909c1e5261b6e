"""The last run's stage timings (bars), recent runs (line), and the run's totals."""

from __future__ import annotations

from collections import deque

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget

HISTORY = 50


def format_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def format_flops(n: float) -> str:
    for unit, size in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} FLOP"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _titled(title: str, widget: QWidget) -> QVBoxLayout:
    box = QVBoxLayout()
    box.setSpacing(0)
    label = QLabel(title)
    label.setStyleSheet("color: #333;")
    box.addWidget(label)
    box.addWidget(widget, 1)
    return box


class TimingPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("timingPanel")
        self._history: deque[float] = deque(maxlen=HISTORY)
        self._stages: list[str] = []

        small = QFont()
        small.setPixelSize(10)
        self.bars = pg.PlotWidget(background="w")
        self.bars.setMenuEnabled(False)
        self.bars.hideButtons()
        self.bars.setMouseEnabled(False, False)
        self.bars.getPlotItem().invertY(True)
        for name in ("left", "bottom"):
            self.bars.getAxis(name).setTickFont(small)
            self.bars.getAxis(name).setTextPen("#333")
        self._bar_item = pg.BarGraphItem(x0=[], y=[], height=0.6, width=[], brush="#4c72b0", pen=None)
        self.bars.addItem(self._bar_item)

        self.history = pg.PlotWidget(background="w")
        self.history.setMenuEnabled(False)
        self.history.hideButtons()
        self.history.setMouseEnabled(False, False)
        for name in ("left", "bottom"):
            self.history.getAxis(name).setTickFont(small)
            self.history.getAxis(name).setTextPen("#333")
        self._line = self.history.plot([], [], pen=pg.mkPen("#dd8452", width=2), symbol="o", symbolSize=4,
                                       symbolBrush="#dd8452", symbolPen=None)
        for w in (self.bars, self.history):
            w.setMinimumHeight(110)

        self.totalLabel = QLabel("–", objectName="timingTotal")
        self.flopsLabel = QLabel("–", objectName="timingFlops")
        self.rateLabel = QLabel("–", objectName="timingRate")
        self.memoryLabel = QLabel("–", objectName="timingMemory")
        self.deviceLabel = QLabel("–", objectName="timingDevice")
        facts = QFormLayout()
        facts.addRow("Total", self.totalLabel)
        facts.addRow("FLOPs", self.flopsLabel)
        facts.addRow("Achieved", self.rateLabel)
        facts.addRow("Peak memory", self.memoryLabel)
        facts.addRow("Device / dtype", self.deviceLabel)
        facts_box = QWidget()
        facts_box.setLayout(facts)
        facts_box.setMinimumWidth(190)

        row = QHBoxLayout(self)
        row.setContentsMargins(4, 2, 4, 2)
        row.addLayout(_titled("Last run: milliseconds per stage", self.bars), 3)
        row.addLayout(_titled(f"Total milliseconds of the last {HISTORY} runs", self.history), 2)
        col = QVBoxLayout()
        col.addWidget(facts_box)
        col.addStretch(1)
        row.addLayout(col)

    def stage_milliseconds(self) -> dict[str, float]:
        """What the bar chart shows: stage -> ms."""
        return dict(zip(self._stages, self._bar_item.opts.get("width", [])))

    def history_milliseconds(self) -> list[float]:
        return list(self._history)

    def show_result(self, result) -> None:
        stages = [(name, sec) for name, sec in result.timings.items() if name != "total"]
        self._stages = [name for name, _ in stages]
        ms = np.array([sec * 1e3 for _, sec in stages], dtype=float)
        y = np.arange(len(stages), dtype=float)
        self._bar_item.setOpts(x0=np.zeros_like(ms), y=y, width=ms, height=0.6)
        left = self.bars.getAxis("left")
        left.setTicks([[(i, name) for i, name in enumerate(self._stages)]])
        self.bars.setYRange(-0.6, max(len(stages) - 0.4, 0.6), padding=0)
        self.bars.setXRange(0, float(ms.max()) * 1.1 if ms.size and ms.max() > 0 else 1.0, padding=0)

        total = result.total_seconds
        self._history.append(total * 1e3)
        hist = np.array(self._history)
        self._line.setData(np.arange(len(hist)) + 1, hist)
        self.history.setXRange(0.5, max(len(hist), 5) + 0.5, padding=0)
        step = max(1, len(hist) // 5)
        self.history.getAxis("bottom").setTicks([[(i, str(i)) for i in range(1, max(len(hist), 5) + 1, step)]])
        self.history.setYRange(0, float(hist.max()) * 1.15 if hist.max() > 0 else 1.0, padding=0)

        self.totalLabel.setText(format_seconds(total))
        self.flopsLabel.setText(format_flops(result.flops))
        self.flopsLabel.setToolTip(f"{result.flops:,} floating-point operations (estimated)")
        self.rateLabel.setText(f"{result.gflops_per_second:.2f} GFLOP/s")
        self.memoryLabel.setText(format_bytes(result.peak_bytes))
        self.deviceLabel.setText(f"{result.device} / {result.config.dtype}")
