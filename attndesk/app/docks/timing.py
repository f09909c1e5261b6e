"""The last run's stage timings (bars), recent runs (line), and the run's totals.

The two charts are painted with QPainter (a few hundred microseconds): pyqtgraph plots re-laid
their axes two or three times per new run, about 50 ms on a busy machine, in the same repaint as
a new result's heatmaps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from attndesk.app.widgets.named import named
from attndesk.session.results import RunFacts, format_seconds
from attndesk.system.free_memory import format_bytes

HISTORY = 50
NOT_MEASURED = "not measured"  # the peak memory of a run that reports none
_BAR = QColor("#4c72b0")
_LINE = QColor("#dd8452")
_TEXT = QColor("#333333")
_GRID = QColor("#dddddd")


def format_flops(n: float) -> str:
    for unit, size in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} FLOP"


def _titled(title: str, widget: QWidget) -> QVBoxLayout:
    box = QVBoxLayout()
    box.setSpacing(0)
    label = QLabel(title)
    label.setStyleSheet("color: #333;")
    box.addWidget(label)
    box.addWidget(widget, 1)
    return box


def _small_font() -> QFont:
    font = QFont()
    font.setPixelSize(10)
    return font


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


CHART_MIN_PX = 96  # eight stages (a six-layer model's) at one small-font line each


class _Chart(QWidget):
    """A white chart area with a small font; subclasses paint their data."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(CHART_MIN_PX)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setFont(_small_font())

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        try:
            painter.fillRect(self.rect(), Qt.GlobalColor.white)
            painter.setFont(self.font())
            self.draw(painter, QRectF(self.rect()).adjusted(2, 2, -4, -2))
        finally:
            painter.end()

    def draw(self, painter: QPainter, rect: QRectF) -> None:
        raise NotImplementedError


class StageBars(_Chart):
    """Horizontal bars, one per stage, labelled with its name and milliseconds."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.names: list[str] = []
        self.values: list[float] = []

    def set_bars(self, names: Sequence[str], values: Sequence[float]) -> None:
        self.names, self.values = list(names), [float(v) for v in values]
        self.update()

    def draw(self, painter: QPainter, rect: QRectF) -> None:
        if not self.names:
            return
        metrics = QFontMetricsF(self.font())
        label_w = max(metrics.horizontalAdvance(n) for n in self.names) + 6
        value_w = metrics.horizontalAdvance("0000.0") + 4
        top = max(self.values) or 1.0
        row = rect.height() / len(self.names)
        bar_w = max(1.0, rect.width() - label_w - value_w)
        for i, (name, value) in enumerate(zip(self.names, self.values)):
            y = rect.top() + i * row
            painter.setPen(_TEXT)
            painter.drawText(
                QRectF(rect.left(), y, label_w - 4, row),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                name,
            )
            length = bar_w * value / top
            painter.fillRect(QRectF(rect.left() + label_w, y + row * 0.2, length, row * 0.6), _BAR)
            painter.drawText(
                QRectF(rect.left() + label_w + length + 3, y, value_w, row),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                _ms(value),
            )


class HistoryLine(_Chart):
    """The total milliseconds of recent runs, oldest left, with the range on the left."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[float] = []

    def set_values(self, values: Sequence[float]) -> None:
        self.values = [float(v) for v in values]
        self.update()

    def draw(self, painter: QPainter, rect: QRectF) -> None:
        if not self.values:
            return
        metrics = QFontMetricsF(self.font())
        top = max(self.values) * 1.15 or 1.0
        left = metrics.horizontalAdvance(_ms(top)) + 6
        area = QRectF(rect.left() + left, rect.top() + 4, rect.width() - left, rect.height() - 8)
        painter.setPen(_TEXT)
        painter.drawText(QRectF(rect.left(), area.top() - 6, left - 4, 12), int(Qt.AlignmentFlag.AlignRight), _ms(top))
        painter.drawText(QRectF(rect.left(), area.bottom() - 6, left - 4, 12), int(Qt.AlignmentFlag.AlignRight), "0")
        painter.setPen(QPen(_GRID, 1))
        painter.drawLine(area.bottomLeft(), area.bottomRight())
        slots = max(len(self.values), 5)
        points = [
            QPointF(area.left() + area.width() * (i + 0.5) / slots, area.bottom() - area.height() * v / top)
            for i, v in enumerate(self.values)
        ]
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(_LINE, 2))
        painter.drawPolyline(points)
        painter.setBrush(_LINE)
        for point in points:
            painter.drawEllipse(point, 2.0, 2.0)


class TimingPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("timingPanel")
        self._history: deque[float] = deque(maxlen=HISTORY)
        self.bars = StageBars()
        self.bars.setObjectName("timingBars")
        self.history = HistoryLine()
        self.history.setObjectName("timingHistory")
        self.totalLabel = named(QLabel("–"), "timingTotal")
        self.flopsLabel = named(QLabel("–"), "timingFlops")
        self.rateLabel = named(QLabel("–"), "timingRate")
        self.memoryLabel = named(QLabel("–"), "timingMemory")
        self.deviceLabel = named(QLabel("–"), "timingDevice")
        facts = QFormLayout()
        facts.setContentsMargins(0, 0, 0, 0)
        facts.setVerticalSpacing(2)
        for label, widget in (
            ("Total", self.totalLabel),
            ("FLOPs", self.flopsLabel),
            ("Achieved", self.rateLabel),
            ("Peak memory", self.memoryLabel),
            ("Device / dtype", self.deviceLabel),
        ):
            facts.addRow(label, widget)
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
        return dict(zip(self.bars.names, self.bars.values))

    def history_milliseconds(self) -> list[float]:
        return list(self._history)

    def show_result(self, facts: RunFacts) -> None:
        """A new run's stages (whatever stages it carries, in order), its total in the history, its facts."""
        stages = [(name, sec * 1e3) for name, sec in facts.timings.items() if name != "total"]
        self.bars.set_bars([n for n, _ in stages], [ms for _, ms in stages])
        total = facts.total_seconds
        self._history.append(total * 1e3)
        self.history.set_values(list(self._history))
        self.totalLabel.setText(format_seconds(total))
        self.flopsLabel.setText(format_flops(facts.flops))
        self.flopsLabel.setToolTip(f"{facts.flops:,} floating-point operations (estimated)")
        self.rateLabel.setText(
            f"{format_flops(facts.gflops_per_second * 1e9)}/s"
        )  # a tiny run is MFLOP/s, not "0.00 GFLOP/s"
        # a run that could not measure its peak says so rather than "0 B"
        self.memoryLabel.setText(format_bytes(facts.peak_bytes) if facts.peak_bytes > 0 else NOT_MEASURED)
        self.deviceLabel.setText(f"{facts.device} / {facts.dtype}")
