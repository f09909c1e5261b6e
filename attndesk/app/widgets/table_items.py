"""Table items the views share: a number shown rounded and sorted by its exact value."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidgetItem

ROLE_SORT = Qt.ItemDataRole.UserRole


class NumberItem(QTableWidgetItem):
    """Shows a rounded number, sorts by the exact one (NaN last); read-only."""

    def __init__(self, value, text: str):
        super().__init__(text)
        self.setData(ROLE_SORT, float("nan") if value is None else float(value))
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.setFlags(self.flags() & ~Qt.ItemFlag.ItemIsEditable)

    def __lt__(self, other):  # numeric sort, NaN last
        a, b = self.data(ROLE_SORT), other.data(ROLE_SORT)
        if math.isnan(a):
            return False
        if math.isnan(b):
            return True
        return a < b


__all__ = ["ROLE_SORT", "NumberItem"]
