"""The modern-attention controls of the parameters panel: position, K/V heads, window, soft-cap.

Each control shows the state's value even when the core refuses it (a session's window of 0, a
K/V head count that no longer divides the heads after the heads changed): the panel puts the
core's message under it and the controller computes nothing until it is fixed. A control never
clamps a value silently. A pretrained model's architecture fixes them (``PanelView.fixed``);
a field the model does not report shows "unknown" rather than the toy model's value.
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QHBoxLayout, QSpinBox, QWidget

from attndesk.core.config import POSITIONS, divisors

VARIANT_FIELDS = ("position", "kv_heads", "window", "softcap")
UNKNOWN = "unknown for this model"
INT_MIN, INT_MAX = -(2**31) + 1, 2**31 - 1
# What a first tick of the box sets: the toy sentence has ~11 tokens, so a window of 3 shows a
# clear band; random toy weights give scaled scores of a few units, so a cap of 1 visibly bends them
# (Gemma 2 uses 50 on scores of a trained model)
WINDOW_SUGGESTED, SOFTCAP_SUGGESTED = 3, 1.0
SOFTCAP_MIN = 0.01

POSITION_LABELS = {"sinusoidal": "sinusoidal", "rope": "RoPE", "alibi": "ALiBi", "none": "none"}
POSITION_TIPS = {
    "sinusoidal": "sin/cos waves added to the token embeddings (the 2017 Transformer)",
    "rope": "rotary: Q and K of each head rotated by an angle proportional to the position (LLaMA, Mistral)",
    "alibi": "no embedding: each head subtracts slope·|i − j| from its scores (BLOOM, MPT)",
    "none": "no position information: the attention sees a bag of tokens",
}
TIPS = {
    "position": "Where token order enters the attention (hover an entry for what it does)",
    "kv_heads": "Key/value heads shared by groups of query heads: fewer K/V heads, a smaller K/V cache",
    "window": "Sliding window: query i sees key j only when |i − j| < W (Mistral, Gemma 2)",
    "softcap": "Soft-cap: scaled scores s become C·tanh(s / C), bounded by ±C, before the mask (Gemma 2)",
}


def kv_label(kv: int, heads: int) -> str:
    """How a K/V head count reads in the combo."""
    if kv == heads:
        return f"{kv} (= heads: plain MHA)"
    if kv == 1:
        return "1 (multi-query)"
    return f"{kv} (grouped, {heads // kv} q each)"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class VariantControls:
    """The widgets (``positionCombo``, ``kvHeadsCombo``, ``windowCheck``/``windowSpin`` in
    ``windowRow``, ``softcapCheck``/``softcapSpin`` in ``softcapRow``); ``show`` draws a config,
    ``edits`` lists (signal, fields) pairs the panel connects to the state."""

    def __init__(self) -> None:
        self.positionCombo = QComboBox(objectName="positionCombo")
        for i, name in enumerate(POSITIONS):
            self.positionCombo.addItem(POSITION_LABELS[name], name)
            self.positionCombo.setItemData(i, POSITION_TIPS[name], 3)  # ToolTipRole
        self.kvHeadsCombo = QComboBox(objectName="kvHeadsCombo")
        self.windowCheck = QCheckBox("sliding", objectName="windowCheck")
        self.windowSpin = QSpinBox(objectName="windowSpin", minimum=1, maximum=INT_MAX, suffix=" tokens")
        self.windowSpin.setValue(WINDOW_SUGGESTED)
        self.softcapCheck = QCheckBox("cap", objectName="softcapCheck")
        self.softcapSpin = QDoubleSpinBox(objectName="softcapSpin", minimum=SOFTCAP_MIN, maximum=1e6, decimals=2,
                                          singleStep=0.5)
        self.softcapSpin.setValue(SOFTCAP_SUGGESTED)
        # the panel's dock is ~340 px wide: a combo as wide as its longest label and a spin
        # box sized for "2147483647 tokens" pushed every row's right edge under the dock's border
        self.kvHeadsCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.kvHeadsCombo.setMinimumContentsLength(12)
        for spin in (self.windowSpin, self.softcapSpin):
            spin.setMinimumWidth(80)
        self.windowRow = _row("windowRow", self.windowCheck, self.windowSpin)
        self.softcapRow = _row("softcapRow", self.softcapCheck, self.softcapSpin)
        for name, widgets in self.by_field().items():
            for widget in widgets:
                widget.setToolTip(TIPS[name])
        self._heads: int | None = None

    # -- layout helpers for the panel ------------------------------------------------------------
    def rows(self) -> list[tuple[str, QWidget, str]]:
        """(form label, row widget, field) in the order the form shows them."""
        return [("Position", self.positionCombo, "position"), ("K/V heads", self.kvHeadsCombo, "kv_heads"),
                ("Window", self.windowRow, "window"), ("Soft-cap", self.softcapRow, "softcap")]

    def by_field(self) -> dict[str, tuple[QWidget, ...]]:
        return {"position": (self.positionCombo,), "kv_heads": (self.kvHeadsCombo,),
                "window": (self.windowCheck, self.windowSpin), "softcap": (self.softcapCheck, self.softcapSpin)}

    def framed(self) -> dict[str, QWidget]:
        """The widget that gets the red frame when its field is refused."""
        return {"position": self.positionCombo, "kv_heads": self.kvHeadsCombo, "window": self.windowSpin,
                "softcap": self.softcapSpin}

    def widgets(self) -> list[QWidget]:
        return [w for group in self.by_field().values() for w in group]

    # -- controls -> state -----------------------------------------------------------------------
    def edits(self) -> list[tuple[Any, Any]]:
        return [
            (self.positionCombo.currentIndexChanged, lambda: {"position": self.positionCombo.currentData()}),
            (self.kvHeadsCombo.currentIndexChanged, self._kv_edit),
            (self.windowCheck.toggled, self._window_edit),
            (self.windowSpin.valueChanged, self._window_edit),
            (self.softcapCheck.toggled, self._softcap_edit),
            (self.softcapSpin.valueChanged, self._softcap_edit),
        ]

    def _kv_edit(self) -> dict[str, Any]:
        kv = self.kvHeadsCombo.currentData()
        return {"kv_heads": None if kv == self._heads else kv}  # "= heads" follows the head count

    def _window_edit(self) -> dict[str, Any]:
        return {"window": self.windowSpin.value() if self.windowCheck.isChecked() else None}

    def _softcap_edit(self) -> dict[str, Any]:
        return {"softcap": round(float(self.softcapSpin.value()), 4) if self.softcapCheck.isChecked() else None}

    # -- state -> controls -----------------------------------------------------------------------
    def show(self, values: dict[str, Any], unknown: set[str], locked: bool) -> None:
        """Draw ``values`` (the config merged with a mode's fixed values); ``unknown`` fields show
        "unknown"; ``locked`` (a pretrained architecture) disables every control."""
        self._show_position(values["position"], "position" in unknown)
        self._show_kv(values["kv_heads"], values["num_heads"], "kv_heads" in unknown)
        self._show_window(values["window"], "window" in unknown)
        self._show_softcap(values["softcap"], "softcap" in unknown)
        for name, group in self.by_field().items():
            for widget in group:
                widget.setEnabled(not locked)
        if not locked:
            self.windowSpin.setEnabled(self.windowCheck.isChecked())
            self.softcapSpin.setEnabled(self.softcapCheck.isChecked())

    def _show_position(self, position: Any, unknown: bool) -> None:
        combo = self.positionCombo
        while combo.count() > len(POSITIONS):  # an earlier model's own kind ("learned", ...)
            combo.removeItem(combo.count() - 1)
        index = -1 if unknown else combo.findData(position)
        if index < 0:
            combo.addItem(UNKNOWN if unknown else str(position), None if unknown else position)
            index = combo.count() - 1
        combo.setCurrentIndex(index)

    def _show_kv(self, kv: Any, heads: Any, unknown: bool) -> None:
        self._heads = heads if _is_count(heads) else None
        shown = heads if kv is None else kv
        entries = [(kv_label(d, heads), d) for d in divisors(heads)] if self._heads else []
        if unknown:
            entries.append((UNKNOWN, None))
        elif shown not in [d for _label, d in entries]:  # a count the core refuses: shown, explained below
            why = f"does not divide {heads} heads" if _is_count(shown) and self._heads else "invalid"
            entries.append((f"{shown} ({why})", shown))
        combo = self.kvHeadsCombo
        if [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())] != entries:
            combo.clear()
            for label, data in entries:
                combo.addItem(label, data)
        combo.setCurrentIndex(len(entries) - 1 if unknown else next(
            i for i, (_label, d) in enumerate(entries) if d == shown))

    def _show_window(self, window: Any, unknown: bool) -> None:
        whole = isinstance(window, int) and not isinstance(window, bool)
        _show_optional(self.windowCheck, self.windowSpin, window, unknown,
                       max(INT_MIN, min(window, INT_MAX)) if whole else None, 1, WINDOW_SUGGESTED)

    def _show_softcap(self, cap: Any, unknown: bool) -> None:
        number = isinstance(cap, (int, float)) and not isinstance(cap, bool) and math.isfinite(cap)
        _show_optional(self.softcapCheck, self.softcapSpin, cap, unknown, float(cap) if number else None,
                       SOFTCAP_MIN, SOFTCAP_SUGGESTED)


def _show_optional(check: QCheckBox, spin, value: Any, unknown: bool, shown, least, suggested) -> None:
    """An "off or a value" pair: ticked with the value, unticked when None, "unknown" when a model
    does not say. A value the core refuses (below ``least``) is shown as it is, never clamped."""
    check.setChecked(value is not None and not unknown)
    spin.setSpecialValueText("unknown" if unknown else "")
    if unknown:
        spin.setMinimum(0)
        spin.setValue(0)
        return
    if shown is None and spin.value() < least:  # after an "unknown": the first tick suggests a value again
        spin.setMinimum(least)
        spin.setValue(suggested)
        return
    spin.setMinimum(min(least, shown) if shown is not None and value is not None else least)
    if shown is not None:
        spin.setValue(shown)


def _row(name: str, check: QCheckBox, spin: QWidget) -> QWidget:
    row = QWidget(objectName=name)
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(check)
    layout.addWidget(spin, 1)
    return row


__all__ = ["POSITION_LABELS", "POSITION_TIPS", "TIPS", "UNKNOWN", "VARIANT_FIELDS", "VariantControls", "kv_label"]
