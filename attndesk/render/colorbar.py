"""The figure's colour bar: gradient, ticks (powers of ten on a log scale), its label, the
"beyond this end" triangles of a fixed range, and the "masked" key."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QPainter, QPainterPath, QPen

from . import colormaps
from .cells import FRAME_RGB, MUTED_RGB, TEXT_RGB, CellStyle, draw_hatch, qcolor, rgb_image
from .figure import HeatmapFigure, finite_range
from .layout import nice_ticks, tick_format


class ColorBar:
    """Measures and draws one figure's colour bar (``units``: the painter's points and fonts)."""

    def __init__(
        self,
        painter: QPainter,
        units,
        figure: HeatmapFigure,
        fonts,
        relative: bool,
        full_range: tuple[float, float],
        any_hidden: bool,
        vector: bool,
    ) -> None:
        self.p, self.u, self.fig, self.fonts, self.vector = painter, units, figure, fonts, vector
        self.relative, self.any_hidden = relative, any_hidden
        self.lo, self.hi = (0.0, 1.0) if relative else full_range
        self.cmap = figure.colormap_name

    def ticks(self) -> list[tuple[float, str]]:
        """(value in colour space, its text): round values, or powers of ten on a log scale."""
        if self.fig.log_scale:
            first, last = math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9)
            return [(float(e), f"{10.0**e:g}") for e in range(first, last + 1)] or [(self.lo, f"{10**self.lo:.2g}")]
        values = nice_ticks(self.lo, self.hi)
        fmt = tick_format(values)
        return [(v, fmt.format(v)) for v in values]

    def width(self) -> float:
        """Room the bar takes right of the maps: gap, bar, ticks, their texts, the rotated label."""
        u = self.u
        fm = u.metrics(self.fonts.tick)
        tick_w = max(fm.horizontalAdvance(text) for _, text in self.ticks())
        width = u.pt(12) + u.pt(4) + tick_w + u.pt(6) + u.metrics(self.fonts.axis).height()
        if self.any_hidden:
            width = max(width, u.pt(14) + u.pt(4) + fm.horizontalAdvance("masked"))
        return u.pt(14) + width

    def draw(self, bar: QRectF) -> QRectF | None:
        fm = self.u.metrics(self.fonts.tick)
        if self.any_hidden:  # room under the bar for the "masked" key
            bar.setBottom(bar.bottom() - self.u.pt(14) - fm.height())
        if bar.height() <= 0:
            return None
        lut = colormaps.lookup_table(self.cmap)
        self.p.drawImage(bar, rgb_image(lut[::-1][:, None, :]))  # [256, 1, 3], top = high values
        self.p.setBrush(Qt.BrushStyle.NoBrush)
        self.p.setPen(self._frame())
        self.p.drawRect(bar)
        if not self.relative and not self.fig.log_scale:
            self._draw_extends(bar, lut)
        widest = self._draw_ticks(bar)
        self._draw_label(bar, widest)
        if self.any_hidden:
            self._draw_mask_key(bar)
        return bar

    def _frame(self) -> QPen:
        return QPen(qcolor(FRAME_RGB), max(0.5, self.u.pt(0.5)))

    def _draw_extends(self, bar: QRectF, lut: np.ndarray) -> None:
        """A fixed vmin/vmax that cuts the data: triangles say "beyond this end" (matplotlib's extend)."""
        data_lo, data_hi = finite_range(self.fig.matrices)
        tip = bar.width() * 0.9
        for beyond, y_base, y_tip, rgb in (
            (data_hi > self.hi + 1e-12 * abs(self.hi), bar.top(), bar.top() - tip, lut[-1]),
            (data_lo < self.lo - 1e-12 * abs(self.lo), bar.bottom(), bar.bottom() + tip, lut[0]),
        ):
            if beyond:
                triangle = QPainterPath()
                triangle.moveTo(bar.left(), y_base)
                triangle.lineTo(bar.right(), y_base)
                triangle.lineTo(bar.center().x(), y_tip)
                triangle.closeSubpath()
                self.p.fillPath(triangle, qcolor(rgb))
                self.p.drawPath(triangle)

    def _draw_ticks(self, bar: QRectF) -> float:
        """Tick marks and texts right of the bar; returns the widest text."""
        p, fm = self.p, self.u.metrics(self.fonts.tick)
        p.setFont(self.fonts.tick)
        tick_len = self.u.pt(3)
        widest = 0.0
        for value, text in self.ticks():
            y = bar.bottom() - (value - self.lo) / (self.hi - self.lo) * bar.height()
            p.setPen(self._frame())
            p.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + tick_len, y))
            p.setPen(qcolor(TEXT_RGB))
            width = fm.horizontalAdvance(text)
            widest = max(widest, width)
            p.drawText(
                QRectF(bar.right() + tick_len + self.u.pt(1.5), y - fm.height() / 2, width + 2, fm.height()),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                text,
            )
        return widest

    def _draw_label(self, bar: QRectF, widest: float) -> None:
        label = self.fig.value_label
        if self.relative:
            label = f"{label}, fraction of each head's range" if self.fig.vmin is None else f"{label} (per-head range)"
        fm = self.u.metrics(self.fonts.axis)
        self.p.setFont(self.fonts.axis)
        self.p.setPen(qcolor(MUTED_RGB))
        self.p.save()
        self.p.translate(bar.right() + self.u.pt(3) + self.u.pt(6) + widest, bar.bottom())
        self.p.rotate(-90)
        self.p.drawText(
            QRectF(0, 0, bar.height(), fm.height()),
            int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
            fm.elidedText(label, Qt.TextElideMode.ElideRight, bar.height()),
        )
        self.p.restore()

    def _draw_mask_key(self, bar: QRectF) -> None:
        p, fm = self.p, self.u.metrics(self.fonts.tick)
        swatch = QRectF(bar.left(), bar.bottom() + self.u.pt(10), self.u.pt(12), self.u.pt(12))
        p.fillRect(swatch, qcolor(colormaps.mask_rgb(self.cmap)))
        draw_hatch(p, swatch, np.ones((1, 1), dtype=bool), CellStyle(self.cmap, 0.0, 1.0, self.vector, self.u.pt(1)))
        p.setPen(self._frame())
        p.drawRect(swatch)
        p.setFont(self.fonts.tick)
        p.setPen(qcolor(TEXT_RGB))
        p.drawText(
            QRectF(
                swatch.right() + self.u.pt(4),
                swatch.center().y() - fm.height() / 2,
                fm.horizontalAdvance("masked") + 4,
                fm.height(),
            ),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            "masked",
        )
