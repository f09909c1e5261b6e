"""The sinusoidal positional encoding and why it encodes relative distance.

Left: PE [positions x dims] (sin on even dims, cos on odd ones, wavelengths growing along the
dims). Right: PE . PE^T [positions x positions]: for an even dim every diagonal is constant,
PE(p) . PE(p + k) = sum_i cos(k w_i) depends on the distance k only, not on p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PySide6.QtCore import Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from attndesk.core.positional import positional_similarity, sinusoidal_encoding

from .heatmap import MatrixPlot, PreparedMatrix, prepare_matrix

# PE . PE^T is [L, L] float64: at a long document's 16k tokens that would be 2 GB. Past this many
# positions only the first ones are compared (the pattern, constant diagonals, is the same).
MAX_SIMILARITY = 2048


POSITIONS_OFF = " (positional encoding is OFF in this run: it is shown, not added)"
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
    return PositionTable(length, dim, encoding, similarity,
                         prepare_matrix(encoding, diverging=True, levels=(-1.0, 1.0)),
                         prepare_matrix(similarity, diverging=True))


class PositionalView(QWidget):
    """API: ``set_result(result)`` (follows its token count and embed_dim), ``set_shape(length, dim)``;
    ``encoding`` [L, dim] and ``similarity`` [L, L] are the exact float64 matrices shown."""

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
        plots = QHBoxLayout()
        plots.addWidget(self.encodingPlot, 1)
        plots.addWidget(self.similarityPlot, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.infoLabel)
        layout.addLayout(plots, 1)
        layout.addWidget(self.readout)

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
        table = self.table if (length, dim) == self.shape else position_table(length, dim)
        self.show_table(table, note=note)

    def show_message(self, text: str) -> None:
        self.infoLabel.setText(text)

    def clear(self) -> None:
        """Drop the table (its memory); the next result draws a new one."""
        self.table = self.encoding = self.similarity = self.shape = None
        self.encodingPlot.clear()
        self.similarityPlot.clear()

    def show_table(self, table: "PositionTable", *, note: str = "") -> None:
        """Draw a ``position_table`` (both plots, the info line)."""
        self.table = table
        self.shape, self.encoding, self.similarity = (table.length, table.dim), table.encoding, table.similarity
        length, dim, shown = table.length, table.dim, table.similarity.shape[0]
        positions = [str(i) for i in range(length)]
        self.encodingPlot.set_title(
            f"<b>PE</b> [{length} × {dim}]<br>PE(p, 2i) = sin(p / 10000<sup>2i/{dim}</sup>), PE(p, 2i+1) = cos(same)")
        self.encodingPlot.show_prepared(table.encoding_image, row_labels=positions)
        first = "" if shown == length else f", first {shown} of {length} positions"
        self.similarityPlot.set_title(
            f"<b>PE · PE<sup>T</sup></b> [{shown} × {shown}{first}]<br>"
            "constant along each diagonal: depends only on the distance |p − q|")
        self.similarityPlot.show_prepared(table.similarity_image, row_labels=positions[:shown],
                                          col_labels=positions[:shown])
        self.infoLabel.setText(
            f"{length} positions × {dim} dims: low dims oscillate fast, high dims slowly; "
            f"PE(p) · PE(p) = {self.similarity[0, 0]:.4g} for every p.{note}")

    @Slot(int, int)
    def hover_similarity(self, p: int, q: int) -> str:
        text = f"PE({p}) · PE({q}) = {self.similarity[p, q]:.5g}   (distance {abs(p - q)})"
        self.readout.setText(text)
        return text

    @Slot(int, int)
    def hover_encoding(self, p: int, i: int) -> str:
        fn = "sin" if i % 2 == 0 else "cos"
        text = f"PE({p}, {i}) = {fn}({p} / 10000^({i - i % 2}/{self.shape[1]})) = {self.encoding[p, i]:.5g}"
        self.readout.setText(text)
        return text
