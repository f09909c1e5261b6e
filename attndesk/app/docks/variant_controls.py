"""The parameters panel's controls, one per field of the spec (``runs.config.FIELDS``).

``control_for(spec)`` picks the control from the field's declaration: a tick box for a bool, a
combo for choices, a spin box for a number (its range the spec's, up to what the window can show),
a tick box with a spin box for an "off or a value" field (``control="switch"``: window, soft-cap),
a spin box whose 0 means None (``control="zero"``: pad to, memory budget) and a combo of divisors
(``control="divisors"``: K/V heads). Each widget's objectName is the field's stem and its kind
(``embedDimSpin``, ``windowCheck``/``windowSpin`` in ``windowRow``, ``positionCombo``).

Each control shows the state's value even when the core refuses it (a session's window of 0, a
K/V head count that no longer divides the heads after the heads changed): the panel puts the
core's message under it and the controller computes nothing until it is fixed. A control never
clamps a value silently. A pretrained model's architecture fixes some fields (``PanelView.fixed``);
a field the model does not report shows "unknown" rather than the toy model's value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QHBoxLayout, QSpinBox, QWidget

from attndesk.app.widgets.named import named
from attndesk.runs.config import divisors
from attndesk.runs.fields import Param

UNKNOWN = "unknown for this model"
INT_MIN, INT_MAX = -(2**31) + 1, 2**31 - 1
MIB = 2**20


def kv_label(kv: int, heads: int) -> str:
    """How a K/V head count reads in the combo."""
    if kv == heads:
        return f"{kv} (= heads: plain MHA)"
    if kv == 1:
        return "1 (multi-query)"
    return f"{kv} (grouped, {heads // kv} q each)"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _scale(spec: Param) -> int:
    return MIB if spec.unit == "bytes" else 1


def _suffix(spec: Param) -> str:
    return {"bytes": " MiB", "tokens": " tokens"}.get(spec.unit, "")


def spin_range(spec: Param) -> tuple[float, float]:
    """The values a number's spin box offers, in the field's unit (bytes in MiB): the spec's range,
    up to what the window can show (an open end one step of the last decimal inside)."""
    tick = 10.0**-spec.decimals if spec.kind is float else 1
    low = spec.low if spec.low is not None else INT_MIN
    high = min(v for v in (spec.high, spec.window_max, INT_MAX * _scale(spec)) if v is not None) / _scale(spec)
    low, high = low + tick * spec.low_open, high - tick * spec.high_open
    return (float(low), float(high)) if spec.kind is float else (int(low), int(high))


class FieldControl:
    """One field's widgets: ``row`` goes into the form, ``framed`` gets the red frame when the field
    is refused, ``signals`` fire on a user edit, ``value()`` is the field's value as shown."""

    def __init__(self, spec: Param) -> None:
        self.spec = spec
        self.widgets: tuple[QWidget, ...] = ()
        self.signals: list[Any] = []

    @property
    def row(self) -> QWidget:
        return self.widgets[0]

    @property
    def framed(self) -> QWidget:
        return self.widgets[-1]

    def _tip(self) -> None:
        for widget in self.widgets:
            widget.setToolTip(self.spec.tip)

    def value(self) -> Any:
        raise NotImplementedError

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        raise NotImplementedError

    def set_enabled(self, on: bool) -> None:
        for widget in self.widgets:
            widget.setEnabled(on)


class CheckControl(FieldControl):
    def __init__(self, spec: Param) -> None:
        super().__init__(spec)
        self.check = named(QCheckBox(spec.label), f"{spec.stem}Check")
        self.widgets, self.signals = (self.check,), [self.check.toggled]
        self._tip()

    def value(self) -> bool:
        return self.check.isChecked()

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        self.check.setChecked(bool(value))


class SpinControl(FieldControl):
    """A whole number (or, with ``control="zero"``, None shown as 0 with the spec's ``none`` text)."""

    def __init__(self, spec: Param) -> None:
        super().__init__(spec)
        low, high = spin_range(spec)
        zero = spec.control == "zero"
        self.spin = named(
            QSpinBox(),
            f"{spec.stem}Spin",
            minimum=0 if zero else int(low),
            maximum=int(high),
            singleStep=int(spec.step),
            suffix=_suffix(spec),
        )
        if zero:
            auto = f" ({spec.auto() // _scale(spec):,}{_suffix(spec)})" if spec.auto is not None else ""
            self.spin.setSpecialValueText(spec.none + auto)
        self.widgets, self.signals = (self.spin,), [self.spin.valueChanged]
        self._tip()

    def value(self) -> int | None:
        shown = self.spin.value()
        return None if shown == 0 and self.spec.control == "zero" else shown * _scale(self.spec)

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        if value is None:
            self.spin.setValue(0)
        elif _scale(self.spec) > 1:  # bytes shown in whole MiB, rounded up
            self.spin.setValue(max(1, -(-int(value) // _scale(self.spec))))
        else:
            self.spin.setValue(int(value))


class FloatControl(FieldControl):
    def __init__(self, spec: Param) -> None:
        super().__init__(spec)
        low, high = spin_range(spec)
        self.spin = named(
            QDoubleSpinBox(),
            f"{spec.stem}Spin",
            minimum=low,
            maximum=high,
            singleStep=spec.step,
            decimals=spec.decimals,
        )
        self.widgets, self.signals = (self.spin,), [self.spin.valueChanged]
        self._tip()

    def value(self) -> float:
        return round(float(self.spin.value()), 4)

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        self.spin.setValue(float(value))


class ComboControl(FieldControl):
    """The spec's choices (with their labels and tips; one unavailable here is greyed out with the
    reason). A value outside them (a real model's own kind, "learned") is shown as an extra entry."""

    def __init__(self, spec: Param) -> None:
        super().__init__(spec)
        self.combo = named(QComboBox(), f"{spec.stem}Combo")
        self.widgets, self.signals = (self.combo,), [self.combo.currentIndexChanged]
        self._tip()
        self._choices: tuple[str, ...] = ()
        self._off: dict[str, str] | None = None  # the greyed choices and their reasons, as drawn
        self.set_choices(spec.choices)

    def set_choices(self, choices: tuple[str, ...]) -> None:
        """Offer ``choices`` (the mask's none/causal for a pretrained model); kept when unchanged."""
        if [self.combo.itemData(i) for i in range(self.combo.count())] == list(choices):
            return
        self.combo.clear()
        self._choices = tuple(choices)
        for name in choices:
            self.combo.addItem(self.spec.choice_labels.get(name, name), name)
        self._off = None
        self.set_off({})

    def set_off(self, off: Mapping[str, str]) -> None:
        """Grey out the choices this machine lacks (the spec's ``unavailable``) and those in ``off``
        (choice -> reason: what the mode cannot take now), each with its reason as its tooltip."""
        lacks = self.spec.unavailable() if self.spec.unavailable is not None else {}
        reasons = {name: why for name, why in {**lacks, **off}.items() if why is not None}
        if reasons == self._off:
            return
        self._off = reasons
        model = cast(QStandardItemModel, self.combo.model())  # a QComboBox's own model
        for i, name in enumerate(self._choices):
            reason = reasons.get(name)
            model.item(i).setEnabled(reason is None)
            tip = self.spec.choice_tips.get(name) if reason is None else f"unavailable: {reason}"
            model.item(i).setToolTip(tip or "")

    def value(self) -> Any:
        return self.combo.currentData()

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        combo = self.combo
        while combo.count() > len(self._choices):  # an earlier model's own kind ("learned", ...)
            combo.removeItem(combo.count() - 1)
        index = -1 if unknown else combo.findData(value)
        if index < 0:
            combo.addItem(UNKNOWN if unknown else str(value), None if unknown else value)
            index = combo.count() - 1
        combo.setCurrentIndex(index)


class DivisorsControl(FieldControl):
    """The divisors of the field ``spec.of`` (K/V heads of the heads); None = as many as that field."""

    def __init__(self, spec: Param) -> None:
        super().__init__(spec)
        self.combo = named(QComboBox(), f"{spec.stem}Combo")
        # the panel's dock is ~340 px wide: a combo as wide as its longest label pushed the rows out
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(12)
        self.widgets, self.signals = (self.combo,), [self.combo.currentIndexChanged]
        self._tip()
        self._whole: int | None = None

    def value(self) -> int | None:
        chosen = self.combo.currentData()
        return None if chosen == self._whole else chosen  # "= heads" follows the head count

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        whole = values[self.spec.of]
        self._whole = whole if _is_count(whole) else None
        shown = whole if value is None else value
        entries: list[tuple[str, Any]] = [(kv_label(d, whole), d) for d in divisors(whole)] if self._whole else []
        if unknown:
            entries.append((UNKNOWN, None))
        elif shown not in [d for _label, d in entries]:  # a count the core refuses: shown, explained below
            why = f"does not divide {whole} heads" if _is_count(shown) and self._whole else "invalid"
            entries.append((f"{shown} ({why})", shown))
        combo = self.combo
        if [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())] != entries:
            combo.clear()
            for label, data in entries:
                combo.addItem(label, data)
        combo.setCurrentIndex(
            len(entries) - 1 if unknown else next(i for i, (_label, d) in enumerate(entries) if d == shown)
        )


class SwitchControl(FieldControl):
    """An "off or a value" field: ticked with the value, unticked for None, "unknown" when a model
    does not say. The first tick sets the spec's ``suggested`` value."""

    def __init__(self, spec: Param) -> None:
        super().__init__(spec)
        self.check = named(QCheckBox("on"), f"{spec.stem}Check")
        low, high = spin_range(spec)
        if spec.kind is float:
            self.spin: QDoubleSpinBox | QSpinBox = named(
                QDoubleSpinBox(),
                f"{spec.stem}Spin",
                minimum=low,
                maximum=high,
                decimals=spec.decimals,
                singleStep=spec.step,
            )
        else:
            self.spin = named(QSpinBox(), f"{spec.stem}Spin", minimum=int(low), maximum=int(high), suffix=_suffix(spec))
        self.spin.setValue(spec.suggested)
        self.spin.setMinimumWidth(80)  # sized for "2147483647 tokens" it pushed the row under the dock's border
        self._least = low
        box = named(QWidget(), f"{spec.stem}Row")
        layout = QHBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.check)
        layout.addWidget(self.spin, 1)
        self.widgets = (box, self.check, self.spin)
        self.signals = [self.check.toggled, self.spin.valueChanged]
        self._tip()

    def value(self) -> Any:
        if not self.check.isChecked():
            return None
        return round(float(self.spin.value()), 4) if self.spec.kind is float else self.spin.value()

    def set_enabled(self, on: bool) -> None:
        self.check.setEnabled(on)
        self.spin.setEnabled(on and self.check.isChecked())

    def show(self, value: Any, values: Mapping[str, Any], unknown: bool) -> None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        shown: float | None
        if self.spec.kind is int:
            shown = max(INT_MIN, min(value, INT_MAX)) if number and isinstance(value, int) else None
        else:
            shown = float(value) if number and math.isfinite(value) else None
        check, spin = self.check, self.spin
        check.setChecked(value is not None and not unknown)
        spin.setSpecialValueText("unknown" if unknown else "")
        if unknown:
            spin.setMinimum(0)
            spin.setValue(0)
            return
        if shown is None and spin.value() < self._least:  # after an "unknown": the first tick suggests again
            self._set_spin(self._least, self.spec.suggested)
            return
        # a value the core refuses (below the least) is shown as it is, never clamped
        self._set_spin(min(self._least, shown) if shown is not None and value is not None else self._least, shown)

    def _set_spin(self, minimum: float, value: float | None) -> None:
        """The spin box's minimum, then its value (when given)."""
        spin = self.spin
        if isinstance(spin, QSpinBox):  # an int field: its numbers are ints
            spin.setMinimum(int(minimum))
            if value is not None:
                spin.setValue(int(value))
        else:
            spin.setMinimum(minimum)
            if value is not None:
                spin.setValue(value)


def control_for(spec: Param) -> FieldControl:
    """The control the spec declares (``control``), else the one its type calls for."""
    if spec.control == "divisors":
        return DivisorsControl(spec)
    if spec.control == "switch":
        return SwitchControl(spec)
    if spec.kind is bool:
        return CheckControl(spec)
    if spec.choices:
        return ComboControl(spec)
    return FloatControl(spec) if spec.kind is float else SpinControl(spec)


class ControlGroup:
    """Some fields' controls; each widget is an attribute named by its objectName (``windowSpin``)."""

    def __init__(self, controls: list[FieldControl]) -> None:
        self.controls = controls
        self._by_name = {w.objectName(): w for c in controls for w in c.widgets}

    def __getattr__(self, name: str) -> QWidget:
        try:
            return self.__dict__["_by_name"][name]
        except KeyError:
            raise AttributeError(name) from None

    def widgets(self) -> list[QWidget]:
        """Every widget the user edits (not the rows holding them)."""
        return [w for c in self.controls for w in (c.widgets[1:] if isinstance(c, SwitchControl) else c.widgets)]


__all__ = ["UNKNOWN", "ControlGroup", "FieldControl", "control_for", "kv_label", "spin_range"]
