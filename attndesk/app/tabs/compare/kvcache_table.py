"""The compare view's K/V-cache table: what each K/V head count (MHA, GQA, MQA), and a sliding
window, would keep for a decoder at 4k / 32k / 128k tokens for the current shape — the reason
grouped-query attention exists. Pure arithmetic (``teaching.kv_cost``): cheap enough for the GUI thread."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.runs.config import AttentionConfig
from attndesk.system.free_memory import format_bytes
from attndesk.teaching.kv_cost import CACHE_LENGTHS, KVCacheRow, kv_cache_bytes, kv_cache_table, window_cache_row

WHY_GQA = (
    "Why GQA exists: a decoder keeps K and V of every past token and reads all of them for each new "
    "token, so at long contexts this cache, not the weights, fills the accelerator and bounds the batch. "
    "Query heads sharing K/V heads cut it by H / KV and keep every query head (MQA: one K/V head)."
)


def cache_rows(config: AttentionConfig, window: int | None = None) -> list[KVCacheRow]:
    """Every K/V head count of the config's shape, then (``window``) its own heads under that window."""
    rows = kv_cache_table(config)
    if window is not None:
        rows.append(window_cache_row(config, window))
    return rows


def model_scale_line() -> str:
    """The same arithmetic at a real model's size (32 layers, 32 query heads of 128 dims, float16)."""
    mha = kv_cache_bytes(32, 128, 32768, layers=32, itemsize=2)
    gqa = kv_cache_bytes(8, 128, 32768, layers=32, itemsize=2)
    return (
        f"At a real model's size (32 layers, 32 heads of 128 dims, float16) 32k tokens take "
        f"{format_bytes(mha)} with MHA and {format_bytes(gqa)} with 8 K/V heads (LLaMA-3-8B's choice)."
    )


class KVCacheTable(QWidget):
    """API: ``set_config(config, window=None)`` (None config: nothing to show), ``rows()`` the
    ``KVCacheRow``s in the table; ``cell_text(r, c)``."""

    HEADERS = ("K/V heads", "per token", *(f"{n // 1024}k tokens" for n in CACHE_LENGTHS))

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("kvCacheTable")
        self._rows: list[KVCacheRow] = []
        self.title = QLabel("<b>K/V cache per layer</b>")
        self.table = named(QTableWidget(0, len(self.HEADERS)), "kvCacheGrid")
        self.table.setHorizontalHeaderLabels(self.HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.whyLabel = named(QLabel(WHY_GQA + "\n" + model_scale_line()), "kvCacheWhy")
        self.whyLabel.setWordWrap(True)
        self.whyLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.whyLabel)

    def rows(self) -> list[KVCacheRow]:
        return list(self._rows)

    def cell_text(self, r: int, c: int) -> str:
        item = self.table.item(r, c)
        return item.text() if item is not None else ""

    def set_config(self, config: AttentionConfig | None, window: int | None = None) -> None:
        if config is None:
            self._rows = []
            self.table.setRowCount(0)
            self.title.setText("<b>K/V cache per layer</b>: run the toy model to see its shape's cache")
            return
        self._rows = cache_rows(config, window)
        self.title.setText(
            f"<b>K/V cache per layer</b> for this shape: {config.num_heads} query heads, "
            f"d_k {config.head_dim}, {config.dtype}, batch 1 (the decoder's cost; bold = this config)"
        )
        self.table.setRowCount(len(self._rows))
        for r, row in enumerate(self._rows):
            values = (
                row.label,
                format_bytes(row.bytes_per_token),
                *(format_bytes(row.bytes[n]) for n in CACHE_LENGTHS),
            )
            for c, text in enumerate(values):
                self._set(r, c, text, row.current)

    def _set(self, r: int, c: int, text: str, bold: bool) -> None:
        item = QTableWidgetItem(text)
        if c:
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if bold:
            font = QFont(item.font())
            font.setBold(True)
            item.setFont(font)
        self.table.setItem(r, c, item)


__all__ = ["WHY_GQA", "KVCacheTable", "cache_rows", "model_scale_line"]
