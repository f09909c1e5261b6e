"""The heatmap panel's widgets and their layout: the toolbar (the view, colormap and scale choices,
the display options menu, the badge that says what is special about the picture, the export
button), the canvas, the placeholder and the footer (the read-out and the note).

It builds them and keeps the toolbar and the note in step with the source drawn
(``fill_view_combo``, ``update_badges``, ``note_text``); the panel connects them to what they change."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.attention.types import MEAN, Head
from attndesk.runs import select

from ...sources.heatmap_source import HeatmapSource
from .grid import HeatmapCanvas

COLORMAPS = (("viridis", "viridis"), ("magma", "magma"), ("CET-L1", "grey (CET-L1)"))
SCALE_MODES = (("shared", "shared"), ("per-head", "per head"))


class FootLabel(QLabel):
    """A one-line footer label that never widens the window and never runs into its neighbour:
    it paints its text elided to its own width (the whole text is its tooltip). ``share`` caps its
    preferred width at that fraction of the panel, so the read-out always keeps room."""

    def __init__(self, text: str = "", *, share: float = 1.0, **kw) -> None:
        super().__init__(text, **kw)
        self._share = share
        self.setMinimumWidth(40)
        self.setTextFormat(Qt.TextFormat.PlainText)  # tokens may contain "<"

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text.strip())
        self.updateGeometry()

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        parent = self.parentWidget()
        cap = int(parent.width() * self._share) if parent is not None else hint.width()
        return QSize(min(hint.width(), max(40, cap)), hint.height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self.minimumWidth(), super().minimumSizeHint().height())

    def shown_text(self) -> str:
        """The text as painted (elided to the label's width)."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(
            self.contentsRect(), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), self.shown_text()
        )
        painter.end()


def note_text(source: HeatmapSource) -> str:
    """The footer note: what the hatching and the red line mean, and any downsampling."""
    notes = [source.downsample_note()]
    if source.display_mask() is not None:
        notes.insert(0, "hatched = masked (the query may not attend there)")
    if source.map.window and source.value_name == "weight":
        notes.append(f"red line = the window's edge (|i − j| < {source.map.window})")
    return " · ".join(n for n in notes if n)


class HeatmapParts:
    """The panel's widgets, laid out on ``panel``: toolbar, canvas (``export_clicked(head)`` from
    its titles), placeholder and footer; ``extra`` takes a mode's own toolbar controls."""

    def __init__(self, panel: QWidget, export_clicked: Callable[[Head], None]) -> None:
        self._build_toolbar()
        self.canvas = HeatmapCanvas(export_clicked)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.readout = FootLabel(" ", objectName="heatmapReadout")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = FootLabel("", share=0.45, objectName="heatmapNote")
        self.note.setStyleSheet("color: #666;")
        self.placeholder = QLabel("Type some text to see its attention.", alignment=Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setStyleSheet("color: #777; font-size: 14px;")
        self._lay_out_panel(panel)
        self.canvas.hide()

    def _lay_out_panel(self, panel: QWidget) -> None:
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(self.bar)
        layout.addWidget(self.placeholder, 1)
        layout.addWidget(self.canvas, 1)
        foot = QHBoxLayout()
        foot.setContentsMargins(6, 0, 6, 2)
        foot.setSpacing(12)
        foot.addWidget(self.readout, 1)
        foot.addWidget(self.note)
        layout.addLayout(foot)

    def _build_toolbar(self) -> None:
        self.viewCombo = named(QComboBox(), "heatmapViewCombo")
        self.viewCombo.setToolTip(
            "Show every head, the mean over heads, or one head enlarged (click a heatmap to enlarge it)"
        )
        self.colormapCombo = named(QComboBox(), "colormapCombo")
        for name, label in COLORMAPS:
            self.colormapCombo.addItem(label, name)
        self.scaleModeCombo = named(QComboBox(), "scaleModeCombo")
        for name, label in SCALE_MODES:
            self.scaleModeCombo.addItem(label, name)
        self.scaleModeCombo.setToolTip(
            "Shared: one colour scale for all heads (compare heads). Per head: each head from 0 to its own maximum."
        )
        self._build_display_menu()
        # what is special about this picture: local/global layer, window, hidden first token, log colours
        self.layerBadge = FootLabel("", share=0.5, objectName="heatmapLayerBadge")
        self.layerBadge.setStyleSheet("color: #9a4b00; font-weight: bold;")
        self.layerBadge.setMinimumWidth(0)
        self.layerBadge.hide()
        self.exportButton = named(QPushButton("Export…"), "heatmapExportButton")
        self.exportButton.setToolTip("Export the heatmaps on screen (Ctrl+E)")
        self.bar = QHBoxLayout()
        self.extra = QHBoxLayout()  # modes add controls here (e.g. a layer selector)
        self._lay_out_toolbar()

    def _build_display_menu(self) -> None:
        self.displayButton = named(QToolButton(), "heatmapDisplayButton", text="Display")
        self.displayButton.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.displayButton.setToolTip("Colour and content options for decoders and ALiBi models")
        menu = QMenu(self.displayButton)
        self.logAction = menu.addAction("Log colour scale (sink-aware)")
        self.logAction.setToolTip(
            "Colour log10 of the weights: small weights stay visible next to a "
            "decoder's first token, which takes most of each row"
        )
        self.hideFirstAction = menu.addAction("Hide the first token (rows renormalised)")
        self.hideFirstAction.setToolTip(
            "Leave out key 0 (a decoder's attention sink) and renormalise each row "
            "over the other keys: the weights shown are NOT the model's"
        )
        self.alibiAction = menu.addAction("Show ALiBi's bias instead of the weights")
        self.alibiAction.setToolTip("The bias -m·|i − j| ALiBi adds to each head's scores")
        for action in (self.logAction, self.hideFirstAction, self.alibiAction):
            action.setCheckable(True)
        self.alibiAction.setVisible(False)
        self.displayButton.setMenu(menu)

    def _lay_out_toolbar(self) -> None:
        bar = self.bar
        bar.setContentsMargins(4, 2, 4, 2)
        for label, widget in (
            ("Show", self.viewCombo),
            ("Colormap", self.colormapCombo),
            ("Scale", self.scaleModeCombo),
        ):
            bar.addWidget(QLabel(label))
            bar.addWidget(widget)
            bar.addSpacing(2)
        bar.addWidget(self.displayButton)
        bar.addLayout(self.extra)
        bar.addWidget(self.layerBadge)  # elided to the room left, never widening the window
        bar.addStretch(1)
        bar.addWidget(self.exportButton)

    def fill_view_combo(self, source: HeatmapSource | None, target: select.Which) -> None:
        """The view choices: all heads, the mean and each head of ``source``; ``target`` selected."""
        combo = self.viewCombo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("all heads", select.ALL)
        combo.addItem("mean over heads", MEAN)
        if source is not None:
            for h in range(source.num_heads):
                combo.addItem(f"{source.map.label(h)} (enlarged)", h)
        combo.setCurrentIndex(max(0, combo.findData(target)))
        combo.blockSignals(False)

    def update_badges(self, source: HeatmapSource, log: bool) -> None:
        """The line that says what is special about this picture, and the options it allows."""
        base = source.base_map
        parts = []
        if base.layer_kind:
            parts.append(f"{base.layer_kind} layer")
        if base.window:
            parts.append(f"window {base.window}")
        if source.key_offset:
            parts.append(f"{base.keys[0]!r} hidden, renormalised")
        if source.value_name == "bias":
            parts.append("ALiBi bias, not weights")
        elif log:
            parts.append("log colours")
        self.layerBadge.setText(" · ".join(parts))
        self.layerBadge.setVisible(bool(parts))
        self.alibiAction.setVisible(base.alibi_slopes is not None)
        self.hideFirstAction.setEnabled(base.pyramid is None)
