"""The positions tab: the sinusoidal table for the result's length and width, computed as a side
job (PE . PE^T of 2,048 positions and its display image take longer than one GUI-thread turn)."""

from __future__ import annotations

from PySide6.QtCore import QObject

from ..compute import ComputeController
from ..results import Shown
from ..state import AppState
from ..views.positional import LEARNED, POSITIONS_OFF, PositionalView, position_table
from .base import TabPresenter


def table_size(shown: Shown) -> tuple[int, int, str]:
    """(positions, dims, note) the tab shows for a result."""
    if shown.toy is not None:
        config = shown.toy.result.config
        return shown.length, int(config.embed_dim), "" if config.positional else POSITIONS_OFF
    width = int(shown.layers.hidden_states.shape[-1]) if shown.layers is not None else 64
    return shown.length, width, LEARNED


class PositionsTab(TabPresenter):
    tab_id = "positions"

    def __init__(self, state: AppState, compute: ComputeController, view: PositionalView,
                 parent: QObject | None = None) -> None:
        super().__init__(state, compute, parent)
        self.view = view

    def release(self) -> None:
        if self.view.table is not None and self.view.table.length > 512:  # PE . PE^T of thousands: MBs
            self.view.clear()

    def show(self, shown: Shown) -> None:  # noqa: A003
        length, dim, note = table_size(shown)
        if length <= 0 or dim <= 0:
            self.view.show_message("type some text to see its positions")
            return
        if self.view.table is not None and (self.view.table.length, self.view.table.dim) == (length, dim):
            self.view.show_table(self.view.table, note=note)
            return
        self.view.show_message(f"computing the table of {length:,} positions × {dim} dims…")
        self.compute.side.submit("positions", position_table, length, dim,
                                 done=lambda table: self.view.show_table(table, note=note), scope="shown")
