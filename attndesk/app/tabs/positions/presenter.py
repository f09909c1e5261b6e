"""The positions tab: the sinusoidal table and RoPE's relative scores for the result's length and
widths, computed as a side job (PE . PE^T of 2,048 positions, RoPE's [n, n] scores and their
display images take longer than one GUI-thread turn)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer

from attndesk.session.results import Shown
from attndesk.session.state import AppState

from ...jobs.channels import POSITIONS
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .view import LEARNED, POSITIONS_OFF, ROPE_OFF, PositionalView, tables

ROPE_AFTER_MS = 40  # a paint pass of the first two plots runs in between
ODD_WIDTH = "RoPE needs an even head width (it turns pairs of dimensions): d_k = {d} has none to show"


@dataclass(frozen=True)
class TableSize:
    """What the tab draws for a result: positions, embedding width, head width, and the notes."""

    length: int
    dim: int
    head_dim: int
    note: str
    rope_note: str


def table_size(shown: Shown) -> TableSize:
    if shown.toy is not None:
        config = shown.toy.result.config
        return TableSize(
            shown.length,
            int(config.embed_dim),
            int(config.head_dim),
            ""
            if config.positional
            else POSITIONS_OFF
            if config.position == "none"
            else f" (this run's positions: {config.position}; the sinusoidal table is shown, not added)",
            "" if config.position == "rope" else f"({ROPE_OFF}.)",
        )
    hidden = shown.layers.hidden_states if shown.layers is not None else None
    width = int(hidden.shape[-1]) if hidden is not None else 64
    heads = max(1, shown.map.num_heads)
    return TableSize(shown.length, width, width // heads, LEARNED, "(the toy model's RoPE at this model's head width.)")


class PositionsTab(TabPresenter):
    tab_id = "positions"

    def __init__(
        self, state: AppState, compute: ComputeController, view: PositionalView, parent: QObject | None = None
    ) -> None:
        super().__init__(state, compute, view, parent)

    def release(self) -> None:
        if self.view.table is not None and self.view.table.length > 512:  # PE . PE^T of thousands: MBs
            self.view.clear()

    def show(self, shown: Shown) -> None:
        size = table_size(shown)
        if size.length <= 0 or size.dim <= 0:
            self.view.show_message("type some text to see its positions")
            return
        pe, rope = self.view.table, self.view.rope
        if (
            pe is not None
            and (pe.length, pe.dim) == (size.length, size.dim)
            and (
                (rope is not None and (rope.head_dim, rope.length) == (size.head_dim, size.length)) or size.head_dim % 2
            )
        ):
            self._draw(size, (pe, rope))
            return
        self.view.show_message(f"computing the tables of {size.length:,} positions × {size.dim} dims…")
        self.compute.side.submit(
            POSITIONS,
            tables,
            size.length,
            size.dim,
            size.head_dim,
            done=lambda both: self._draw(size, both),
            scope="shown",
        )

    def _draw(self, size: TableSize, both) -> None:
        """The sinusoidal table, then RoPE's once the first one is painted: the first paint of all
        four plots in one pass stalled the window ~140 ms at 2,048 positions."""
        pe, rope = both
        self.view.show_table(pe, note=size.note)
        note = size.rope_note if rope is not None else ODD_WIDTH.format(d=size.head_dim)

        def show_rope() -> None:  # unless another table came first
            if self.view.table is pe:
                self.view.show_rope(rope, note=note)

        QTimer.singleShot(ROPE_AFTER_MS, self.view, show_rope)
