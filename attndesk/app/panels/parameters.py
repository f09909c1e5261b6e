"""Model parameters: one control per ``AttentionConfig`` field, bound to ``state.config``.

The panel holds no values of its own: an edit writes the one field into the state, and the state's
``config`` / ``mode`` events redraw every control (signals blocked, so a redraw never writes back).
The active mode's ``PanelView`` says what it shows fixed (a pretrained architecture, disabled)
and which mask choices act. ``show_problem`` puts the controller's ConfigError next to the
controls (next to the heads when it is about heads, with the valid head counts).
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QLabel, QSpinBox, QVBoxLayout, QWidget,
)

from attndesk.core.config import MASK_KINDS, AttentionConfig, default_memory_budget, divisors
from attndesk.core.devices import DEVICE_NAMES, DTYPES, device_availability

from ..results import ConfigProblem
from ..state import WINDOW_MAX, AppState, ModeChoice, PanelView
from ..styles import restyle
from .variant_controls import VARIANT_FIELDS, VariantControls

ERROR_STYLE = "color: #b00020;"
MIB = 2**20
_MASK_TIP = "padding: ignore [PAD] keys; causal: each token sees only earlier ones"


def _error_label(name: str) -> QLabel:
    label = QLabel("", objectName=name)
    label.setStyleSheet(ERROR_STYLE)
    label.setWordWrap(True)
    label.hide()
    return label


def _spin(name: str, minimum: int, maximum: int, tip: str, **kw) -> QSpinBox:
    spin = QSpinBox(objectName=name, minimum=minimum, maximum=maximum, **kw)
    spin.setToolTip(tip)
    return spin


def mask_with_causal(mask: str, causal: bool) -> str:
    """``mask`` with its causal part set (its padding part kept)."""
    padding = "padding" in mask
    return {(False, False): "none", (True, False): "padding", (False, True): "causal",
            (True, True): "padding+causal"}[(padding, causal)]


class ParametersPanel(QWidget):
    """Writes edits into ``state.config`` / ``state.mode``; ``modeChosen`` is emitted on a user
    choice of mode (the state is already set)."""

    modeChosen = Signal(object)

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("parametersPanel")
        self.state = state
        self._view = PanelView()
        self._choices: list[ModeChoice] = []
        self._build()
        self._layout_form()
        self._connect()
        state.events.config.connect(lambda _c: self.refresh())
        state.events.mode.connect(lambda _m: self.refresh())
        self.refresh()

    # -- construction ---------------------------------------------------------------------------
    def _build(self) -> None:
        self.modeCombo = QComboBox(objectName="modeCombo")
        self.modeCombo.setToolTip("Which model computes the attention")
        self.modelInfo = QLabel("", objectName="pretrainedModelInfo")  # two short lines: a wrapped label squeezes
        self.modelInfo.setToolTip("a pretrained model's architecture is fixed by its checkpoint; "
                                  "scale and the causal mask still act, heads can be ablated in the All layers tab")
        big = WINDOW_MAX["embed_dim"]
        self.embedDimSpin = _spin("embedDimSpin", 1, big, "Embedding size E of every token (split across the heads)")
        self.hiddenDimSpin = _spin("hiddenDimSpin", 1, big, "Width d_k of the single head (used only when heads = 1)")
        self.headsSpin = _spin("headsSpin", 1, WINDOW_MAX["num_heads"], "Number of heads; must divide the embedding dim")
        self.headsError = _error_label("headsError")
        self.maskCombo = QComboBox(objectName="maskCombo")
        self.scaleCheck = QCheckBox("Scale scores by 1/√d_k", objectName="scaleCheck")
        self.variants = VariantControls()  # position, K/V heads, window, soft-cap
        self.positionCombo, self.kvHeadsCombo = self.variants.positionCombo, self.variants.kvHeadsCombo
        self.dropoutSpin = QDoubleSpinBox(objectName="dropoutSpin", minimum=0.0, maximum=0.95, singleStep=0.05,
                                          decimals=2)
        self.dropoutSpin.setToolTip("Dropout on the attention weights (acts only in training mode)")
        self.trainCheck = QCheckBox("Training mode (dropout on)", objectName="trainCheck")
        self.seedSpin = _spin("seedSpin", 0, WINDOW_MAX["seed"], "Seed of the random weights (same seed, same model)")
        self.padToSpin = _spin("padToSpin", 0, WINDOW_MAX["pad_to"],
                               "Pad the tokens with [PAD] up to this length (shows the padding mask at work)")
        self.padToSpin.setSpecialValueText("no padding")
        self.memoryBudgetSpin = _spin("memoryBudgetSpin", 0, WINDOW_MAX["memory_budget"] // MIB,
                                      "Memory the attention weights may take. Runs whose weights do not fit keep a "
                                      "zoomable overview and recompute exact values on demand.",
                                      singleStep=256, suffix=" MiB")
        self.memoryBudgetSpin.setSpecialValueText(f"auto ({default_memory_budget() // MIB:,} MiB)")
        self.deviceCombo = QComboBox(objectName="deviceCombo")
        self.dtypeCombo = QComboBox(objectName="dtypeCombo")
        for name in DTYPES:
            self.dtypeCombo.addItem(name, name)
        self._fill_devices()
        self.generalError = _error_label("parametersError")

    def _layout_form(self) -> None:
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        rows = (("Mode", self.modeCombo), ("Model", self.modelInfo), ("Embedding dim", self.embedDimSpin),
                ("Heads", self.headsSpin), ("", self.headsError), ("Hidden dim", self.hiddenDimSpin),
                ("Mask", self.maskCombo), ("Pad to length", self.padToSpin), ("", self.scaleCheck),
                *[(label, row) for label, row, _name in self.variants.rows()],
                ("Dropout", self.dropoutSpin), ("", self.trainCheck), ("Seed", self.seedSpin),
                ("Device", self.deviceCombo), ("Dtype", self.dtypeCombo), ("Memory budget", self.memoryBudgetSpin))
        self._field_errors: dict[str, QLabel] = {}
        fields = {w: name for name, w in self._field_widgets().items() if name != "num_heads"}
        fields.update({row: name for _label, row, name in self.variants.rows()})
        for label, widget in rows:
            form.addRow(label, widget)
            if widget in fields:  # a size or type refused for this field is said right under it
                self._field_errors[fields[widget]] = _error_label(f"{fields[widget]}Error")
                form.addRow("", self._field_errors[fields[widget]])
        form.setRowVisible(self.modelInfo, False)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.generalError)
        layout.addStretch(1)
        self._form = form

    def _fill_devices(self) -> None:
        """Every device name; unavailable ones are greyed out with the reason as tooltip."""
        reasons = device_availability()
        model: QStandardItemModel = self.deviceCombo.model()
        for name in DEVICE_NAMES:
            self.deviceCombo.addItem(name, name)
            item = model.item(self.deviceCombo.count() - 1)
            if reasons.get(name) is not None:
                item.setEnabled(False)
                item.setToolTip(f"unavailable: {reasons[name]}")
            elif name == "auto":
                item.setToolTip("the best available device")

    def _edits(self) -> list[tuple[Any, Callable[[], dict[str, Any]]]]:
        """(signal, the config fields the edit sets) for every control."""
        return [
            (self.embedDimSpin.valueChanged, lambda: {"embed_dim": self.embedDimSpin.value()}),
            (self.hiddenDimSpin.valueChanged, lambda: {"hidden_dim": self.hiddenDimSpin.value()}),
            (self.headsSpin.valueChanged, lambda: {"num_heads": self.headsSpin.value()}),
            (self.maskCombo.currentIndexChanged, self._mask_edit),
            (self.scaleCheck.toggled, lambda: {"scaled": self.scaleCheck.isChecked()}),
            *self.variants.edits(),
            (self.dropoutSpin.valueChanged, lambda: {"dropout": round(float(self.dropoutSpin.value()), 4)}),
            (self.trainCheck.toggled, lambda: {"training": self.trainCheck.isChecked()}),
            (self.seedSpin.valueChanged, lambda: {"seed": self.seedSpin.value()}),
            (self.deviceCombo.currentIndexChanged, lambda: {"device": self.deviceCombo.currentData()}),
            (self.dtypeCombo.currentIndexChanged, lambda: {"dtype": self.dtypeCombo.currentData()}),
            (self.padToSpin.valueChanged, lambda: {"pad_to": self.padToSpin.value() or None}),
            (self.memoryBudgetSpin.valueChanged, lambda: {"memory_budget": self.memoryBudgetSpin.value() * MIB or None}),
        ]

    def _connect(self) -> None:
        for signal, fields in self._edits():
            signal.connect(lambda *_a, fields=fields: self.state.set_config(**fields()))
        self.modeCombo.currentIndexChanged.connect(self._on_mode_index)

    def _controls(self) -> list[QWidget]:
        return [self.embedDimSpin, self.hiddenDimSpin, self.headsSpin, self.maskCombo, self.scaleCheck,
                self.dropoutSpin, self.trainCheck, self.seedSpin, self.deviceCombo, self.dtypeCombo, self.padToSpin,
                self.memoryBudgetSpin, self.modeCombo, *self.variants.widgets()]

    # -- state -> controls ----------------------------------------------------------------------
    def set_choices(self, choices: list[ModeChoice]) -> None:
        """The Mode combo's entries (the modes' choices), the state's mode selected."""
        self._choices = list(choices)
        self.modeCombo.blockSignals(True)
        self.modeCombo.clear()
        for choice in self._choices:
            self.modeCombo.addItem(choice.label)
            self.modeCombo.setItemData(self.modeCombo.count() - 1, choice.tooltip or None, 3)  # ToolTipRole
        self.modeCombo.blockSignals(False)
        self.refresh()

    def set_panel_view(self, view: PanelView) -> None:
        """How the active mode wants the config shown (fixed values, mask choices, info line)."""
        self._view = view
        self.refresh()

    def refresh(self) -> None:
        """Draw every control from the state (and the mode's fixed values)."""
        values = {**self.state.config.to_dict(), **self._view.fixed}
        for w in self._controls():
            w.blockSignals(True)
        try:
            self._show_values(values)
            self._show_mode()
        finally:
            for w in self._controls():
                w.blockSignals(False)
        fixed = set(self._view.fixed)
        for name, widget in self._field_widgets().items():
            if name not in VARIANT_FIELDS:
                widget.setEnabled(name not in fixed)
        # hidden dim matters only for one head
        self.hiddenDimSpin.setEnabled("hidden_dim" not in fixed and values["num_heads"] == 1)
        self.modelInfo.setText(self._view.info)
        self._form.setRowVisible(self.modelInfo, bool(self._view.info))
        self.maskCombo.setToolTip(self._view.mask_tip or _MASK_TIP)

    def _field_widgets(self) -> dict[str, QWidget]:
        return {"embed_dim": self.embedDimSpin, "hidden_dim": self.hiddenDimSpin, "num_heads": self.headsSpin,
                "dropout": self.dropoutSpin, "training": self.trainCheck, "seed": self.seedSpin,
                "device": self.deviceCombo, "dtype": self.dtypeCombo, "pad_to": self.padToSpin,
                "memory_budget": self.memoryBudgetSpin, **self.variants.framed()}

    def _show_values(self, v: dict[str, Any]) -> None:
        self.embedDimSpin.setValue(int(v["embed_dim"]))
        self.hiddenDimSpin.setValue(int(v["hidden_dim"]))
        self.headsSpin.setValue(int(v["num_heads"]))
        self._show_mask(str(v["mask"]))
        self.scaleCheck.setChecked(bool(v["scaled"]))
        pretrained = bool(self._view.fixed)  # a real model's architecture: its values, or "unknown"
        self.variants.show(v, set(VARIANT_FIELDS) - set(self._view.fixed) if pretrained else set(), pretrained)
        self.dropoutSpin.setValue(float(v["dropout"]))
        self.trainCheck.setChecked(bool(v["training"]))
        self.seedSpin.setValue(int(v["seed"]))
        self.deviceCombo.setCurrentIndex(max(0, self.deviceCombo.findData(v["device"])))
        self.dtypeCombo.setCurrentIndex(max(0, self.dtypeCombo.findData(v["dtype"])))
        self.padToSpin.setValue(int(v["pad_to"] or 0))
        budget = v["memory_budget"]  # bytes (None = auto) shown in whole MiB, rounded up
        self.memoryBudgetSpin.setValue(0 if not budget else max(1, -(-int(budget) // MIB)))

    def _show_mask(self, mask: str) -> None:
        kinds = ("none", "causal") if self._view.causal_only else MASK_KINDS
        if [self.maskCombo.itemData(i) for i in range(self.maskCombo.count())] != list(kinds):
            self.maskCombo.clear()
            for kind in kinds:
                self.maskCombo.addItem(kind, kind)
        shown = ("causal" if "causal" in mask else "none") if self._view.causal_only else mask
        self.maskCombo.setCurrentIndex(max(0, self.maskCombo.findData(shown)))

    def _show_mode(self) -> None:
        index = next((i for i, c in enumerate(self._choices) if c.id == self.state.mode), -1)
        self.modeCombo.setCurrentIndex(index)

    # -- controls -> state ----------------------------------------------------------------------
    def _mask_edit(self) -> dict[str, Any]:
        chosen = self.maskCombo.currentData() or "none"
        if self._view.causal_only:
            return {"mask": mask_with_causal(self.state.config.mask, "causal" in chosen)}
        return {"mask": chosen}

    def _on_mode_index(self, index: int) -> None:
        if 0 <= index < len(self._choices):
            self.state.mode = self._choices[index].id
            self.modeChosen.emit(self._choices[index].id)

    def mode_index(self, mode) -> int:
        """The combo index of a ``ModeId`` (-1 when it is not listed)."""
        return next((i for i, c in enumerate(self._choices) if c.id == mode), -1)

    # -- problems -------------------------------------------------------------------------------
    def head_problem(self) -> str | None:
        """The inline message for a head count that does not divide the embedding dim."""
        config: AttentionConfig = self.state.config
        embed, heads = config.embed_dim, config.num_heads
        if self._view.fixed or heads == 1 or not isinstance(embed, int) or not isinstance(heads, int) or embed % heads == 0:
            return None
        valid = divisors(embed)
        listed = ", ".join(map(str, valid)) if len(valid) <= 16 else ", ".join(map(str, valid[:14])) + ", ..."
        return f"{heads} heads do not divide {embed} dims. Valid head counts: {listed}"

    def show_problem(self, problem: ConfigProblem | None) -> None:
        """Show a refused config next to the control at fault: the heads (with the valid counts),
        another field's control (red frame, the message under it), or under the form."""
        message = problem.message if problem is not None else None
        heads_msg = self.head_problem() if message else None
        self.headsError.setText(heads_msg or "")
        self.headsError.setVisible(bool(heads_msg))
        field = None if problem is None or heads_msg else problem.field
        for name, widget in self._field_widgets().items():
            bad = bool(heads_msg) if name == "num_heads" else name == field
            restyle(widget, f"{type(widget).__name__} {{ border: 1px solid #b00020; }}" if bad else "")
        for name, label in self._field_errors.items():
            label.setText(message if name == field else "")
            label.setVisible(name == field)
        general = None if (message is None or heads_msg or field in self._field_errors) else message
        self.generalError.setText(general or "")
        self.generalError.setVisible(bool(general))

    def inline_error(self) -> str:
        """The message currently shown next to the controls ("" when none)."""
        labels = [self.headsError, *self._field_errors.values(), self.generalError]
        return "\n".join(w.text() for w in labels if w.text())
