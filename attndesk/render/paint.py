"""A publication-style grid of attention heatmaps, painted with QPainter onto any paint device.

The same ``paint_figure`` draws into a QImage (PNG export, the window), a QSvgGenerator and a
QPdfWriter, so exported files look like the app. Text (titles, token labels, colour-bar ticks)
is always drawn as text, so SVG/PDF keep it selectable. Cells are vector rectangles on vector
devices while the figure stays small (``VECTOR_CELL_LIMIT``); beyond that, and always on raster
devices, each heatmap is one image, block-averaged down to the pixels it occupies, so a
2048 x 2048 matrix never becomes millions of drawing operations.

Where things go is decided by ``layout.choose_figure_layout`` (pure geometry); this module
measures text for it and paints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontInfo, QFontMetricsF, QPaintEngine, QPainter, QPen

from . import cells
from .cells import FRAME_RGB, MUTED_RGB, TEXT_RGB, CellStyle, qcolor
from .colorbar import ColorBar
from .figure import HeatmapFigure
from .layout import FigureLayout, FigureText, Rect, choose_figure_layout, label_texts

# Vector output draws at most this many cells in total as rectangles (about 256 x 256); larger
# figures embed one raster image per heatmap while labels and the colour bar stay text.
VECTOR_CELL_LIMIT = 256 * 256
_VECTOR_ENGINES = {QPaintEngine.Type.SVG, QPaintEngine.Type.Pdf, QPaintEngine.Type.Picture}
_LEFT_MID = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
_RIGHT_MID = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_CENTRE = Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter
_TOP_CENTRE = Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop


@dataclass
class FigureGeometry:
    """Where paint_figure put things (device coordinates): one rect per heatmap, the colour bar.

    Cell (r, c) of heatmap i spans ``maps[i]`` divided into L rows and Lk columns; useful for
    hit-testing a preview and for tests that read pixels back. ``layout`` has every title,
    label band and group header (``layout.grid``).
    """

    maps: list[QRectF]
    colorbar: QRectF | None
    label_steps: tuple[int, int]  # (query, key): every k-th label is shown
    layout: FigureLayout | None = None


def qrect(r: Rect) -> QRectF:
    return QRectF(r.x, r.y, r.w, r.h)


@dataclass
class Fonts:
    tick: QFont
    title: QFont
    suptitle: QFont
    caption: QFont
    axis: QFont
    cell: QFont


class _Units:
    """Lengths and fonts on one device: points scale with its DPI, text with the figure's zoom."""

    def __init__(self, painter: QPainter, rect: QRectF) -> None:
        self.device = painter.device()
        self.dpi = float(self.device.logicalDpiY()) if self.device is not None else 96.0
        self.family = QFontInfo(QFont()).family()
        side_inch = min(rect.width(), rect.height()) / self.dpi
        self.zoom = float(np.clip(side_inch / 9.0, 0.75, 1.6))  # small exports stay balanced
        self.cap_side = 0.2 * min(rect.width(), rect.height())

    def pt(self, points: float) -> float:
        """Device pixels of a length given in points (1/72 inch) on this device."""
        return points * self.dpi / 72.0

    def font(self, points: float, bold: bool = False) -> QFont:
        font = QFont(self.family)
        font.setPixelSize(max(1, round(self.pt(points * self.zoom))))
        font.setBold(bold)
        return font

    def metrics(self, font: QFont) -> QFontMetricsF:
        return QFontMetricsF(font, self.device)

    def label_cap(self, font: QFont) -> float:
        """About 14 average characters, and never more than a fifth of the figure."""
        return min(self.metrics(font).averageCharWidth() * 14, self.cap_side)

    # the layout's TextMeasure ---------------------------------------------------------------
    def line(self, tick_pt: float) -> float:
        return self.metrics(self.font(tick_pt)).height()

    def widest(self, texts: Sequence[str], tick_pt: float) -> float:
        font = self.font(tick_pt)
        fm = self.metrics(font)
        return min(max((fm.horizontalAdvance(t) for t in texts), default=0.0), self.label_cap(font))


class _Painter:
    """One painting pass: measures, lays out and draws a HeatmapFigure in a rectangle."""

    def __init__(self, painter: QPainter, rect: QRectF, figure: HeatmapFigure, vector: bool | None):
        self.p, self.rect, self.fig = painter, QRectF(rect), figure
        self.u = _Units(painter, self.rect)
        if vector is None:
            engine = painter.paintEngine()
            vector = engine is not None and engine.type() in _VECTOR_ENGINES
        self.vector = bool(vector)
        self.n, self.L, self.Lk = figure.matrices.shape  # cells (tiles when tokens_per_cell > 1)
        self.f = figure.tokens_per_cell
        self.cmap = figure.colormap_name
        # computed once: each is a pass over every cell, and a figure may hold 8 x 2048 x 2048
        self.hidden = [figure.masked(i) for i in range(self.n)]
        self.any_hidden = any(h.any() for h in self.hidden)
        self.full_range = figure.value_range()
        self.ranges = (
            [self.full_range] * self.n if figure.shared_scale else [figure.value_range(i) for i in range(self.n)]
        )
        self.relative = figure.relative_colorbar and len(set(self.ranges)) > 1
        self.margin = self.u.pt(10) * self.u.zoom
        self.fonts = Fonts(
            tick=self.u.font(9),
            title=self.u.font(10.5, bold=True),
            suptitle=self.u.font(13, bold=True),
            caption=self.u.font(9),
            axis=self.u.font(9),
            cell=self.u.font(7.5),
        )

    def paint(self) -> FigureGeometry:
        p = self.p
        p.save()
        try:
            p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
            p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            p.fillRect(self.rect, QColor(255, 255, 255))
            header_h = self.draw_header()
            bar = ColorBar(
                self.p, self.u, self.fig, self.fonts, self.relative, self.full_range, self.any_hidden, self.vector
            )
            area = Rect(
                self.rect.left() + self.margin,
                self.rect.top() + self.margin + header_h,
                self.rect.width() - 2 * self.margin - bar.width(),
                self.rect.height() - 2 * self.margin - header_h,
            )
            lay = choose_figure_layout(self.figure_text(), self.u, area, (self.n, self.L, self.Lk))
            self.fonts.tick = self.u.font(lay.tick_pt)
            for i in range(self.n):
                self.draw_panel(i, lay)
            self.draw_groups(lay)
            self.draw_axis_titles(lay)
            maps = [qrect(lay.grid.map_rect(i)) for i in range(self.n)]
            bar_x = min(area.right, max(m.right() for m in maps) + self.u.pt(6)) + self.u.pt(14)
            top, bottom = maps[0].top(), max(m.bottom() for m in maps)
            drawn = bar.draw(QRectF(bar_x, top, self.u.pt(12), bottom - top))
            return FigureGeometry(maps, drawn, (lay.y_step, lay.x_step), lay)
        finally:
            p.restore()

    def figure_text(self) -> FigureText:
        fig = self.fig
        group_h = self.u.metrics(self.fonts.axis).height() * 1.4 if fig.group > 1 else 0.0
        return FigureText(
            fig.query_labels,
            fig.key_labels,
            fig.first_query,
            fig.first_key,
            self.f,
            # no band above the maps when no map has a title (a single map named by the suptitle)
            title_h=self.u.metrics(self.fonts.title).height() * 1.35 if any(fig.titles) or self.relative else 0.0,
            axis_h=self.u.metrics(self.fonts.axis).height(),
            group_h=group_h,
            group=fig.group,
        )

    # header ------------------------------------------------------------------------------------
    def draw_header(self) -> float:
        """The suptitle and the wrapped caption; returns the height they take."""
        p, u = self.p, self.u
        x, y0 = self.rect.left() + self.margin, self.rect.top() + self.margin
        y = y0
        width = self.rect.width() - 2 * self.margin
        if self.fig.suptitle:
            fm = u.metrics(self.fonts.suptitle)
            p.setFont(self.fonts.suptitle)
            p.setPen(qcolor(TEXT_RGB))
            p.drawText(
                QRectF(x, y, width, fm.height()),
                int(_LEFT_MID),
                fm.elidedText(self.fig.suptitle, Qt.TextElideMode.ElideRight, width),
            )
            y += fm.height() * 1.25
        if self.fig.caption:
            fm = u.metrics(self.fonts.caption)
            flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap)
            box = fm.boundingRect(QRectF(0, 0, width, 1e6), flags, self.fig.caption)
            p.setFont(self.fonts.caption)
            p.setPen(qcolor(MUTED_RGB))
            p.drawText(QRectF(x, y, width, box.height() + 2), flags, self.fig.caption)
            y += box.height() + fm.height() * 0.3
        return (y - y0) + (u.pt(6) if y > y0 else 0.0)

    # one heatmap -------------------------------------------------------------------------------
    def draw_panel(self, index: int, lay: FigureLayout) -> None:
        p = self.p
        target = qrect(lay.grid.map_rect(index))
        self.draw_title(index, lay)
        values = self.fig.colour_values(index)  # no float64 copy: a head may hold 2048 x 2048 cells
        hidden = self.hidden[index]
        style = CellStyle(self.cmap, *self.ranges[index], self.vector, self.u.pt(1))
        if self.vector and self.L * self.Lk * self.n <= VECTOR_CELL_LIMIT:
            cells.draw_cells_vector(p, target, values, hidden, style)
            grid, block_hidden = target, hidden
        else:
            grid, block_hidden = cells.draw_cells_image(p, target, values, hidden, style)
        if block_hidden.any():
            cells.draw_hatch(p, grid, block_hidden, style, bounds=target)
        if self.fig.window:
            cells.draw_window_band(
                p,
                target,
                len(self.fig.query_labels),
                len(self.fig.key_labels),
                self.fig.window,
                self.fig.causal,
                max(1.0, self.u.pt(1.2)),
            )
        if self.annotate_cells(target):
            cells.draw_values(p, target, self.fig.matrices[index], hidden, style, self.value_font(target))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.setPen(QPen(qcolor(FRAME_RGB), max(0.5, self.u.pt(0.5))))
        p.drawRect(target)
        if lay.grid.y_labelled(index):
            self.draw_y_labels(target, lay)
        if lay.grid.x_labelled(index):
            self.draw_x_labels(target, lay)

    def draw_title(self, index: int, lay: FigureLayout) -> None:
        """The title, centred over the map (it may use the gap beside a narrow map)."""
        title = self.fig.titles[index]
        if self.relative:
            lo, hi = self.ranges[index]
            title = f"{title}  (max {hi:.3g})" if lo == 0 else f"{title}  ({lo:.3g} to {hi:.3g})"
        box = lay.grid.title_rect(index)
        width = box.w + lay.grid.spec.gap_x * 0.9
        fm = self.u.metrics(self.fonts.title)
        self.p.setFont(self.fonts.title)
        self.p.setPen(qcolor(TEXT_RGB))
        self.p.drawText(
            QRectF(box.center_x - width / 2, box.y, width, box.h),
            int(_CENTRE),
            fm.elidedText(title, Qt.TextElideMode.ElideRight, width),
        )

    def annotate_cells(self, target: QRectF) -> bool:
        if self.f > 1:  # tiles are not single weights
            return False
        if self.fig.annotate is not None:
            return self.fig.annotate
        fm = self.u.metrics(self.fonts.cell)
        cw, ch = target.width() / self.Lk, target.height() / self.L
        return cw >= fm.horizontalAdvance("0.00") * 1.3 and ch >= fm.height() * 1.6

    def value_font(self, target: QRectF) -> QFont:
        """The numbers grow with the cells (within 7.5-11 pt) so big cells do not hold tiny text."""
        cw, ch = target.width() / self.Lk, target.height() / self.L
        font = QFont(self.fonts.cell)
        low, high = self.fonts.cell.pixelSize(), self.u.pt(11 * self.u.zoom)
        font.setPixelSize(max(1, round(min(high, max(low, min(ch * 0.3, cw * 0.24))))))
        return font

    # labels ------------------------------------------------------------------------------------
    def _tick_pen(self) -> QPen:
        return QPen(qcolor(FRAME_RGB), max(0.5, self.u.pt(0.5)))

    def draw_y_labels(self, target: QRectF, lay: FigureLayout) -> None:
        p, fm = self.p, self.u.metrics(self.fonts.tick)
        cap = self.u.label_cap(self.fonts.tick)
        ch = target.height() / self.L / self.f  # one token's height
        pad, tick = self.u.pt(3), self.u.pt(2.5)
        p.setFont(self.fonts.tick)
        for i, text in label_texts(self.fig.query_labels, lay.y_step, self.fig.first_query):
            y = target.top() + (i + 0.5) * ch
            if lay.y_step > 1:
                p.setPen(self._tick_pen())
                p.drawLine(QPointF(target.left() - tick, y), QPointF(target.left(), y))
            p.setPen(qcolor(TEXT_RGB))
            p.drawText(
                QRectF(target.left() - pad - cap - tick, y - fm.height() / 2, cap, fm.height()),
                int(_RIGHT_MID),
                fm.elidedText(text, Qt.TextElideMode.ElideRight, cap),
            )

    def draw_x_labels(self, target: QRectF, lay: FigureLayout) -> None:
        p, fm = self.p, self.u.metrics(self.fonts.tick)
        cap = self.u.label_cap(self.fonts.tick)
        cw = target.width() / self.Lk / self.f  # one token's width
        pad, tick = self.u.pt(3), self.u.pt(2.5)
        p.setFont(self.fonts.tick)
        for i, text in label_texts(self.fig.key_labels, lay.x_step, self.fig.first_key):
            x = target.left() + (i + 0.5) * cw
            if lay.x_step > 1:
                p.setPen(self._tick_pen())
                p.drawLine(QPointF(x, target.bottom()), QPointF(x, target.bottom() + tick))
            p.setPen(qcolor(TEXT_RGB))
            if not lay.rotated:
                p.drawText(QRectF(x - cw / 2, target.bottom() + pad, cw, fm.height()), int(_TOP_CENTRE), text)
                continue
            p.save()
            p.translate(x, target.bottom() + pad + tick)
            p.rotate(-90)  # reads bottom to top, ending at the axis
            p.drawText(
                QRectF(-cap, -fm.height() / 2, cap, fm.height()),
                int(_RIGHT_MID),
                fm.elidedText(text, Qt.TextElideMode.ElideRight, cap),
            )
            p.restore()

    def draw_axis_titles(self, lay: FigureLayout) -> None:
        """ "key tokens" under the bottom row's maps, "query tokens" left of the first column."""
        p, grid = self.p, lay.grid
        fm = self.u.metrics(self.fonts.axis)
        p.setFont(self.fonts.axis)
        p.setPen(qcolor(MUTED_RGB))
        pad = self.u.pt(3)
        x_note = f", every {_ordinal(lay.x_step)} labelled" if lay.x_step > 1 else ""
        y_note = f", every {_ordinal(lay.y_step)} labelled" if lay.y_step > 1 else ""
        last_row = [grid.map_rect(i) for i in range((grid.rows - 1) * grid.cols, self.n)]
        left, right = last_row[0].x, max(grid.map_rect(i).right for i in range(min(self.n, grid.cols)))
        if grid.rows > 1 and self.n % grid.cols:
            right = last_row[-1].right  # an incomplete last row: centre under its own maps
        y = last_row[0].bottom + lay.label_offset + lay.x_extent + pad
        p.drawText(
            QRectF(left, y, right - left, fm.height()),
            int(_TOP_CENTRE),
            fm.elidedText(self.fig.x_title + x_note, Qt.TextElideMode.ElideRight, right - left),
        )
        top, bottom = grid.map_rect(0).y, grid.map_rect((grid.rows - 1) * grid.cols).bottom
        p.save()
        p.translate(grid.origin_x - lay.label_offset - lay.y_extent - pad - fm.height(), bottom)
        p.rotate(-90)
        p.drawText(
            QRectF(0, 0, bottom - top, fm.height()),
            int(_TOP_CENTRE),
            fm.elidedText(self.fig.y_title + y_note, Qt.TextElideMode.ElideRight, bottom - top),
        )
        p.restore()

    def draw_groups(self, lay: FigureLayout) -> None:
        """Each K/V group's header ("kv 0: q 0-3") over its maps, with a bracket line."""
        p = self.p
        fm = self.u.metrics(self.fonts.axis)
        for group, _members, box in lay.grid.groups():
            p.setFont(self.fonts.axis)
            p.setPen(qcolor(MUTED_RGB))
            text_box = QRectF(box.x, box.y, box.w, box.h * 0.75)
            p.drawText(
                text_box, int(_CENTRE), fm.elidedText(self.fig.group_labels[group], Qt.TextElideMode.ElideRight, box.w)
            )
            p.setPen(QPen(qcolor(MUTED_RGB), max(0.5, self.u.pt(0.6))))
            y = box.y + box.h * 0.85
            p.drawLine(QPointF(box.x, y), QPointF(box.right, y))


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def paint_figure(
    painter: QPainter, rect: QRectF, figure: HeatmapFigure, *, vector: bool | None = None
) -> FigureGeometry:
    """Draw ``figure`` into ``rect`` with an active ``painter``.

    ``vector`` None picks vector cells for SVG/PDF/QPicture devices (within VECTOR_CELL_LIMIT)
    and one image per heatmap elsewhere. Lengths are in device pixels; text sizes follow the
    device's DPI, so the same figure at a higher DPI prints the same physical size.
    Returns where the heatmaps and the colour bar went.
    """
    return _Painter(painter, rect, figure, vector).paint()
