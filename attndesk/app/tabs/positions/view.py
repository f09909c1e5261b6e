"""The sinusoidal positional encoding, RoPE's rotation, and why both encode relative distance.

Top left: PE [positions x dims] (sin on even dims, cos on odd ones, wavelengths growing along the
dims). Top right: PE . PE^T [positions x positions]: for an even dim every diagonal is constant,
PE(p) . PE(p + k) = sum_i cos(k w_i) depends on the distance k only, not on p.
Bottom: RoPE. One query vector q and one key vector k (a fixed random pair of the run's head
width) rotated to every position: R(m) q . R(n) k [positions x positions] is constant along each
diagonal too, and the same score drawn against the offset m - n for queries sitting at three very
different positions gives one curve: the score depends on m - n only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
import torch
from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from attndesk.app.widgets.named import named
from attndesk.attention.positional import positional_similarity, sinusoidal_encoding
from attndesk.attention.rope import rope, rope_relative_scores

from ...widgets.heatmap import MatrixPlot, PreparedMatrix, prepare_matrix
from ...widgets.holdings import held_by
from ...widgets.lazy_plot import LazyPlot
from ...widgets.pacing import PacedHost
from ...widgets.plot_axes import without_si_prefix

# PE . PE^T is [L, L] float64: at a long document's 16k tokens that would be 2 GB. Past this many
# positions only the first ones are compared (the pattern, constant diagonals, is the same).
MAX_SIMILARITY = 2048


POSITIONS_OFF = " (positional encoding is OFF in this run: it is shown, not added)"
ROPE_OFF = "RoPE is not on in this run: shown for comparison, with the run's head width"
ROPE_ANCHORS = (0, 37, 1000)  # query positions of the three curves: far apart, one curve
ROPE_PAIR_SEED = 0
# the offset plot's -64..64, where the curve is readable (thousands of points in three thick pens
# slow every repaint of the tab), and the score matrix's first 512 positions
OFFSETS_SHOWN, ROPE_POSITIONS = 64, 512
LEARNED = " (the pretrained model learns its positions: this sinusoidal table is the toy model's, for comparison)"


@dataclass(frozen=True, eq=False)
class PositionTable:
    """PE [length, dim], PE . PE^T of the first positions, and both ready to draw."""

    length: int
    dim: int
    encoding: np.ndarray
    similarity: np.ndarray
    encoding_image: PreparedMatrix
    similarity_image: PreparedMatrix


def position_table(length: int, dim: int) -> PositionTable:
    """The sinusoidal table of ``length`` positions (thread-safe: numpy and torch only)."""
    pe = sinusoidal_encoding(length, dim, dtype=torch.float64)
    shown = min(length, MAX_SIMILARITY)
    encoding = pe.numpy()
    similarity = positional_similarity(pe[:shown]).numpy()
    return PositionTable(
        length,
        dim,
        encoding,
        similarity,
        prepare_matrix(encoding, diverging=True, levels=(-1.0, 1.0)),
        prepare_matrix(similarity, diverging=True),
    )


@dataclass(frozen=True, eq=False)
class RopeTable:
    """RoPE's score of one fixed (q, k) pair: ``scores`` [n, n] = R(m) q . R(n) k for the first
    n <= ROPE_POSITIONS positions, and ``by_offset`` [len(ROPE_ANCHORS), len(offsets)] over the near
    ``offsets`` -o..o (o = min(n - 1, OFFSETS_SHOWN))."""

    head_dim: int
    length: int  # the run's positions (the matrix holds the first ROPE_POSITIONS of them)
    q: np.ndarray
    k: np.ndarray
    scores: np.ndarray
    offsets: np.ndarray
    by_offset: np.ndarray
    scores_image: PreparedMatrix

    @property
    def anchor_spread(self) -> float:
        """The largest difference between the anchors' curves (rounding only: they coincide)."""
        return float(np.abs(self.by_offset - self.by_offset[0]).max())


def rope_pair(head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random (q, k) pair, float64 [d] each (the same for every run of this width)."""
    rng = np.random.default_rng(ROPE_PAIR_SEED)
    return rng.standard_normal(head_dim), rng.standard_normal(head_dim)


def rope_table(length: int, head_dim: int) -> RopeTable:
    """RoPE's table for ``length`` positions of width ``head_dim`` (even; thread-safe: numpy and torch).
    At most ROPE_POSITIONS positions: the pair is not the text's, its diagonals show as well at 512."""
    shown = min(length, ROPE_POSITIONS)
    q, k = rope_pair(head_dim)
    # every position's rotated copy of q and of k: [n, d]
    rotated_q = rope(torch.from_numpy(np.tile(q, (shown, 1))))
    rotated_k = rope(torch.from_numpy(np.tile(k, (shown, 1))))
    scores = (rotated_q @ rotated_k.T).numpy()
    near = min(shown - 1, OFFSETS_SHOWN)
    offsets = np.arange(-near, near + 1)
    by_offset = rope_relative_scores(q, k, offsets, anchors=ROPE_ANCHORS)
    return RopeTable(head_dim, length, q, k, scores, offsets, by_offset, prepare_matrix(scores, diverging=True))


def tables(length: int, dim: int, head_dim: int | None) -> tuple[PositionTable, RopeTable | None]:
    """Both tables of the tab (one side job); no RoPE table for an odd or unknown head width."""
    rope_part = rope_table(length, head_dim) if head_dim and head_dim % 2 == 0 else None
    return position_table(length, dim), rope_part


class PositionalView(QWidget):
    """API: ``set_result(result)`` (follows its token count and embed_dim), ``set_shape(length, dim)``;
    ``encoding`` [L, dim] and ``similarity`` [L, L] are the exact float64 matrices shown;
    ``show_rope(table)`` draws RoPE's row (``rope`` is the table shown, None when none)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("positionalView")
        self.encoding: np.ndarray | None = None
        self.similarity: np.ndarray | None = None
        self.shape: tuple[int, int] | None = None
        self.table: PositionTable | None = None
        self.encodingPlot = MatrixPlot("positional encoding")
        self.encodingPlot.setObjectName("peMatrixPlot")
        self.similarityPlot = MatrixPlot("PE · PEᵀ")
        self.similarityPlot.setObjectName("peSimilarityPlot")
        self.similarityPlot.cellHovered.connect(self.hover_similarity)
        self.encodingPlot.cellHovered.connect(self.hover_encoding)
        self.infoLabel = QLabel("")
        self.infoLabel.setObjectName("peInfoLabel")
        self.infoLabel.setWordWrap(True)
        self.readout = QLabel(" ")
        self.readout.setObjectName("peReadout")
        self._build_rope()
        # four plots resized or shown together stall the window: paced, one per turn
        plots = QGridLayout()
        plots.addWidget(PacedHost(self.encodingPlot), 0, 0)
        plots.addWidget(PacedHost(self.similarityPlot), 0, 1)
        plots.addWidget(self.ropeLabel, 1, 0, 1, 2)
        plots.addWidget(self.ropeHosts[0], 2, 0)
        plots.addWidget(self.ropeHosts[1], 2, 1)
        for row in (0, 2):
            plots.setRowStretch(row, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.infoLabel)
        layout.addLayout(plots, 1)
        layout.addWidget(self.readout)

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the encodings, their tables and their plots."""
        return held_by(
            self.encoding, self.similarity, self.table, self.rope, self.encodingPlot, self.similarityPlot, self.ropePlot
        )

    def _build_rope(self) -> None:
        self.rope: RopeTable | None = None
        self.ropeLabel = named(QLabel(""), "ropeInfoLabel")
        self.ropeLabel.setWordWrap(True)
        self.ropePlot = MatrixPlot("RoPE: R(m)q · R(n)k")
        self.ropePlot.setObjectName("ropeScoresPlot")
        self.ropePlot.cellHovered.connect(self.hover_rope)
        # built on first show; it draws the table on show (``rope``) then
        self.offsetHolder = named(LazyPlot(self._build_offsets, minimum=(0, 160)), "ropeOffsetPlotHolder")
        self.offsetHolder.when_built(self._draw_offsets)
        self.ropeHosts = (PacedHost(self.ropePlot), PacedHost(self.offsetHolder))
        for host in self.ropeHosts:
            host.hide()  # until a table is drawn

    def _build_offsets(self) -> pg.PlotWidget:
        plot = pg.PlotWidget()
        without_si_prefix(plot.getPlotItem())
        plot.setObjectName("ropeOffsetPlot")
        plot.setBackground("w")
        plot.setLabel("bottom", "offset m − n (query position − key position)")
        plot.setLabel("left", "R(m)q · R(n)k")
        # no grid and fixed ranges (set per table): grid lines and auto ranging over thousands of
        # offsets double the tab's repaint
        plot.disableAutoRange()
        plot.addLegend(offset=(-6, 6))
        # one curve per anchor; drawn thick-to-thin so the later ones visibly lie on the first
        styles = [
            (6, "#9ecae1", Qt.PenStyle.SolidLine),
            (3, "#3182bd", Qt.PenStyle.SolidLine),
            (1.2, "#b00020", Qt.PenStyle.SolidLine),
        ]  # a dashed pen over thousands of points paints slowly
        self._offsetCurves = [
            plot.plot([], [], pen=pg.mkPen(color, width=width, style=style), name=f"query at position m = {anchor}")
            for anchor, (width, color, style) in zip(ROPE_ANCHORS, styles)
        ]
        return plot

    @property
    def offsetPlot(self) -> pg.PlotWidget:
        """RoPE's score by offset (built on first use)."""
        return self.offsetHolder.plot

    @property
    def offsetCurves(self) -> list[pg.PlotDataItem]:
        """Its curves, one per anchor (the plot built on first use)."""
        self.offsetHolder.plot  # noqa: B018 - the property builds the plot
        return self._offsetCurves

    def _draw_offsets(self) -> None:
        """RoPE's score by offset of the table on show (``rope``), if the plot is built (else once it is)."""
        if not self.offsetHolder.built:
            return
        table = self.rope
        if table is None:
            for curve in self.offsetCurves:
                curve.setData([], [])
            return
        for curve, row in zip(self.offsetCurves, table.by_offset):
            curve.setData(table.offsets.astype(np.float64), row)
        self.offsetPlot.setRange(
            xRange=(int(table.offsets[0]), int(table.offsets[-1])),
            yRange=(float(table.by_offset.min()), float(table.by_offset.max())),
            padding=0.05,
        )

    def set_result(self, result) -> None:
        """Follow a toy result's token count and embed_dim (the window's presenter calls
        ``show_table`` with a table computed off the GUI thread instead)."""
        if result is None:
            return
        note = "" if result.config.positional else POSITIONS_OFF
        self.set_shape(len(result.tokens), int(result.config.embed_dim), note=note)

    @Slot(int, int)
    def set_shape(self, length: int, dim: int, *, note: str = "") -> None:
        length, dim = int(length), int(dim)
        if length <= 0 or dim <= 0:
            self.infoLabel.setText("type some text to see its positions")
            return
        table = self.table if self.table is not None and (length, dim) == self.shape else position_table(length, dim)
        self.show_table(table, note=note)

    def show_message(self, text: str) -> None:
        self.infoLabel.setText(text)

    def clear(self) -> None:
        """Drop the tables (their memory); the next result draws new ones."""
        self.table = self.encoding = self.similarity = self.shape = None
        self.encodingPlot.clear()
        self.similarityPlot.clear()
        self.show_rope(None)

    def show_rope(self, table: RopeTable | None, *, note: str = "") -> None:
        """Draw RoPE's scores by position and by offset (None: clear them, ``note`` says why)."""
        self.rope = table
        for host in self.ropeHosts:
            host.setVisible(table is not None)
        if table is None:
            self.ropePlot.clear()
            self._draw_offsets()
            self.ropeLabel.setText(note)
            return
        n = table.scores.shape[0]
        labels = [str(i) for i in range(n)]
        first = "" if n == table.length else f", first {n} of {table.length}"
        self.ropePlot.set_title(
            f"<b>RoPE: R(m)q · R(n)k</b> [{n} × {n}{first}], d<sub>k</sub> = {table.head_dim}<br>"
            "one q, k pair rotated to every position: constant along each diagonal"
        )
        self.ropePlot.show_prepared(table.scores_image, row_labels=labels, col_labels=labels)
        self._draw_offsets()
        self.ropeLabel.setText(
            f"RoPE rotates q and k by angles proportional to their positions, so their score depends only on "
            f"the offset m − n: the three curves (queries at m = {', '.join(map(str, ROPE_ANCHORS))}) coincide, "
            f"largest difference {table.anchor_spread:.1e} (rounding). A fixed random q, k pair of width "
            f"{table.head_dim}; unlike PE · PEᵀ it is not symmetric: q and k differ. {note}".strip()
        )

    def show_table(self, table: PositionTable, *, note: str = "") -> None:
        """Draw a ``position_table`` (both plots, the info line)."""
        self.table = table
        self.shape, self.encoding, self.similarity = (table.length, table.dim), table.encoding, table.similarity
        length, dim, shown = table.length, table.dim, table.similarity.shape[0]
        positions = [str(i) for i in range(length)]
        self.encodingPlot.set_title(
            f"<b>PE</b> [{length} × {dim}]<br>PE(p, 2i) = sin(p / 10000<sup>2i/{dim}</sup>), PE(p, 2i+1) = cos(same)"
        )
        self.encodingPlot.show_prepared(table.encoding_image, row_labels=positions)
        first = "" if shown == length else f", first {shown} of {length} positions"
        self.similarityPlot.set_title(
            f"<b>PE · PE<sup>T</sup></b> [{shown} × {shown}{first}]<br>"
            "constant along each diagonal: depends only on the distance |p − q|"
        )
        self.similarityPlot.show_prepared(
            table.similarity_image, row_labels=positions[:shown], col_labels=positions[:shown]
        )
        self.infoLabel.setText(
            f"{length} positions × {dim} dims: low dims oscillate fast, high dims slowly; "
            f"PE(p) · PE(p) = {self.similarity[0, 0]:.4g} for every p.{note}"
        )

    @Slot(int, int)
    def hover_similarity(self, p: int, q: int) -> str:
        assert self.similarity is not None, "hovered only once a table is shown"
        text = f"PE({p}) · PE({q}) = {self.similarity[p, q]:.5g}   (distance {abs(p - q)})"
        self.readout.setText(text)
        return text

    @Slot(int, int)
    def hover_rope(self, m: int, n: int) -> str:
        assert self.rope is not None, "hovered only once RoPE is shown"
        text = (
            f"R({m})q · R({n})k = {self.rope.scores[m, n]:.6g}   (offset m − n = {m - n}: the same on its "
            "whole diagonal)"
        )
        self.readout.setText(text)
        return text

    @Slot(int, int)
    def hover_encoding(self, p: int, i: int) -> str:
        fn = "sin" if i % 2 == 0 else "cos"
        assert self.shape is not None and self.encoding is not None, "hovered only once a table is shown"
        text = f"PE({p}, {i}) = {fn}({p} / 10000^({i - i % 2}/{self.shape[1]})) = {self.encoding[p, i]:.5g}"
        self.readout.setText(text)
        return text
