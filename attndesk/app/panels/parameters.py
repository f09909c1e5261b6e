"""Model parameters: one control per ``AttentionConfig`` field, with inline validation."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from attndesk.core.config import MASK_KINDS, AttentionConfig, default_memory_budget, divisors
from attndesk.core.devices import DEVICE_NAMES, DTYPES, device_availability

TOY_MODE = "Toy model"
ERROR_STYLE = "color: #b00020;"

# The config fields this panel edits (the rest keep AttentionConfig's defaults).
FIELDS = ("embed_dim", "hidden_dim", "num_heads", "mask", "scaled", "position", "dropout",
          "training", "seed", "device", "dtype", "pad_to", "memory_budget")


def _error_label(name: str) -> QLabel:
    label = QLabel("", objectName=name)
    label.setStyleSheet(ERROR_STYLE)
    label.setWordWrap(True)
    label.hide()
    return label


class ParametersPanel(QWidget):
    """Emits ``changed`` whenever any value changes; ``values()`` gives them as a config dict."""

    changed = Signal()
    modeChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("parametersPanel")
        defaults = AttentionConfig()

        self.modeCombo = QComboBox(objectName="modeCombo")
        self.modeCombo.addItem(TOY_MODE, TOY_MODE)
        self.modeCombo.setToolTip("Which model computes the attention")

        self.embedDimSpin = QSpinBox(objectName="embedDimSpin", minimum=1, maximum=4096, value=defaults.embed_dim)
        self.embedDimSpin.setToolTip("Embedding size E of every token (split across the heads)")
        self.hiddenDimSpin = QSpinBox(objectName="hiddenDimSpin", minimum=1, maximum=4096, value=defaults.hidden_dim)
        self.hiddenDimSpin.setToolTip("Width d_k of the single head (used only when heads = 1)")
        self.headsSpin = QSpinBox(objectName="headsSpin", minimum=1, maximum=256, value=defaults.num_heads)
        self.headsSpin.setToolTip("Number of heads; must divide the embedding dim")
        self.headsError = _error_label("headsError")

        self.maskCombo = QComboBox(objectName="maskCombo")
        for kind in MASK_KINDS:
            self.maskCombo.addItem(kind, kind)
        self.maskCombo.setCurrentIndex(MASK_KINDS.index(defaults.mask))
        self.maskCombo.setToolTip("padding: ignore [PAD] keys; causal: each token sees only earlier ones")
        self.scaleCheck = QCheckBox("Scale scores by 1/√d_k", objectName="scaleCheck", checked=defaults.scaled)
        self.positionalCheck = QCheckBox("Positional encoding", objectName="positionalCheck",
                                         checked=defaults.positional)
        self.positionalCheck.setToolTip("Add the sinusoidal position encoding to the embeddings")
        self.dropoutSpin = QDoubleSpinBox(objectName="dropoutSpin", minimum=0.0, maximum=0.95, singleStep=0.05,
                                          decimals=2, value=defaults.dropout)
        self.dropoutSpin.setToolTip("Dropout on the attention weights (acts only in training mode)")
        self.trainCheck = QCheckBox("Training mode (dropout on)", objectName="trainCheck",
                                    checked=defaults.training)
        self.seedSpin = QSpinBox(objectName="seedSpin", minimum=0, maximum=2**31 - 1, value=defaults.seed)
        self.seedSpin.setToolTip("Seed of the random weights (same seed, same model)")
        self.padToSpin = QSpinBox(objectName="padToSpin", minimum=0, maximum=100000, value=0)
        self.padToSpin.setSpecialValueText("no padding")
        self.padToSpin.setToolTip("Pad the tokens with [PAD] up to this length (shows the padding mask at work)")
        # memory_budget in MiB; 0 = auto (the config's default, from this machine's RAM)
        auto_mib = default_memory_budget() // 2**20
        self.memoryBudgetSpin = QSpinBox(objectName="memoryBudgetSpin", minimum=0, maximum=2**20, value=0,
                                         singleStep=256, suffix=" MiB")
        self.memoryBudgetSpin.setSpecialValueText(f"auto ({auto_mib:,} MiB)")
        self.memoryBudgetSpin.setToolTip("Memory the attention weights may take. Runs whose weights do not fit "
                                         "keep a zoomable overview and recompute exact values on demand.")

        self.deviceCombo = QComboBox(objectName="deviceCombo")
        self.dtypeCombo = QComboBox(objectName="dtypeCombo")
        for name in DTYPES:
            self.dtypeCombo.addItem(name, name)
        self._fill_devices(defaults.device)
        self.generalError = _error_label("parametersError")

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Mode", self.modeCombo)
        form.addRow("Embedding dim", self.embedDimSpin)
        form.addRow("Heads", self.headsSpin)
        form.addRow("", self.headsError)
        form.addRow("Hidden dim", self.hiddenDimSpin)
        form.addRow("Mask", self.maskCombo)
        form.addRow("Pad to length", self.padToSpin)
        form.addRow("", self.scaleCheck)
        form.addRow("", self.positionalCheck)
        form.addRow("Dropout", self.dropoutSpin)
        form.addRow("", self.trainCheck)
        form.addRow("Seed", self.seedSpin)
        form.addRow("Device", self.deviceCombo)
        form.addRow("Dtype", self.dtypeCombo)
        form.addRow("Memory budget", self.memoryBudgetSpin)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.generalError)
        layout.addStretch(1)
        self._form = form

        for spin in (self.embedDimSpin, self.hiddenDimSpin, self.headsSpin, self.seedSpin, self.padToSpin,
                     self.memoryBudgetSpin):
            spin.valueChanged.connect(self._on_change)
        self.dropoutSpin.valueChanged.connect(self._on_change)
        for combo in (self.maskCombo, self.deviceCombo, self.dtypeCombo):
            combo.currentIndexChanged.connect(self._on_change)
        for check in (self.scaleCheck, self.positionalCheck, self.trainCheck):
            check.toggled.connect(self._on_change)
        self.modeCombo.currentIndexChanged.connect(lambda _i: self.modeChanged.emit(self.mode()))
        self._sync_enabled()

    def _fill_devices(self, current: str) -> None:
        """Every device name; unavailable ones are greyed out with the reason as tooltip."""
        reasons = device_availability()
        combo = self.deviceCombo
        combo.clear()
        model: QStandardItemModel = combo.model()
        for name in DEVICE_NAMES:
            combo.addItem(name, name)
            item = model.item(combo.count() - 1)
            reason = reasons.get(name)
            if reason is not None:
                item.setEnabled(False)
                item.setToolTip(f"unavailable: {reason}")
            elif name == "auto":
                item.setToolTip("the best available device")
        index = combo.findData(current)
        combo.setCurrentIndex(index if index >= 0 else combo.findData("cpu"))

    # -- values --------------------------------------------------------------------------------
    def mode(self) -> str:
        return self.modeCombo.currentData()

    def values(self) -> dict[str, Any]:
        """The panel's settings as AttentionConfig fields (not validated)."""
        return {
            "embed_dim": self.embedDimSpin.value(),
            "hidden_dim": self.hiddenDimSpin.value(),
            "num_heads": self.headsSpin.value(),
            "mask": self.maskCombo.currentData(),
            "scaled": self.scaleCheck.isChecked(),
            "position": "sinusoidal" if self.positionalCheck.isChecked() else "none",
            "dropout": round(float(self.dropoutSpin.value()), 4),
            "training": self.trainCheck.isChecked(),
            "seed": self.seedSpin.value(),
            "device": self.deviceCombo.currentData(),
            "dtype": self.dtypeCombo.currentData(),
            "pad_to": self.padToSpin.value() or None,
            "memory_budget": self.memoryBudgetSpin.value() * 2**20 or None,  # None = auto
        }

    def set_values(self, values: dict[str, Any]) -> None:
        """Set controls from config fields (unknown keys ignored); emits ``changed`` once."""
        widgets = [self.embedDimSpin, self.hiddenDimSpin, self.headsSpin, self.maskCombo, self.scaleCheck,
                   self.positionalCheck, self.dropoutSpin, self.trainCheck, self.seedSpin, self.deviceCombo,
                   self.dtypeCombo, self.padToSpin, self.memoryBudgetSpin]
        for w in widgets:
            w.blockSignals(True)
        try:
            v = values
            if "embed_dim" in v:
                self.embedDimSpin.setValue(int(v["embed_dim"]))
            if "hidden_dim" in v:
                self.hiddenDimSpin.setValue(int(v["hidden_dim"]))
            if "num_heads" in v:
                self.headsSpin.setValue(int(v["num_heads"]))
            if "mask" in v:
                self.maskCombo.setCurrentIndex(max(0, self.maskCombo.findData(v["mask"])))
            if "scaled" in v:
                self.scaleCheck.setChecked(bool(v["scaled"]))
            if "position" in v:  # the panel offers sinusoidal or none (the old "positional" flag)
                self.positionalCheck.setChecked(v["position"] == "sinusoidal")
            elif "positional" in v:
                self.positionalCheck.setChecked(bool(v["positional"]))
            if "dropout" in v:
                self.dropoutSpin.setValue(float(v["dropout"]))
            if "training" in v:
                self.trainCheck.setChecked(bool(v["training"]))
            if "seed" in v:
                self.seedSpin.setValue(int(v["seed"]))
            if "device" in v:
                index = self.deviceCombo.findData(v["device"])
                if index >= 0:
                    self.deviceCombo.setCurrentIndex(index)
            if "dtype" in v:
                self.dtypeCombo.setCurrentIndex(max(0, self.dtypeCombo.findData(v["dtype"])))
            if "pad_to" in v:
                self.padToSpin.setValue(int(v["pad_to"] or 0))
            if "memory_budget" in v:  # bytes (None = auto) shown in whole MiB
                budget = v["memory_budget"]
                self.memoryBudgetSpin.setValue(0 if not budget else max(1, -(-int(budget) // 2**20)))
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._on_change()

    # -- validation ----------------------------------------------------------------------------
    def head_problem(self) -> str | None:
        """The inline message for a head count that does not divide the embedding dim."""
        embed, heads = self.embedDimSpin.value(), self.headsSpin.value()
        if heads == 1 or embed % heads == 0:
            return None
        valid = ", ".join(str(d) for d in divisors(embed))
        return f"{heads} heads do not divide {embed} dims. Valid head counts: {valid}"

    def show_error(self, message: str | None) -> None:
        """Show a ConfigError inline: next to the heads control when it is about heads."""
        heads_msg = self.head_problem()
        self.headsError.setText(heads_msg or "")
        self.headsError.setVisible(bool(heads_msg))
        self._mark(self.headsSpin, bool(heads_msg))
        general = None if (message is None or heads_msg) else message
        self.generalError.setText(general or "")
        self.generalError.setVisible(bool(general))

    def inline_error(self) -> str:
        """The message currently shown next to the controls ("" when none)."""
        parts = [w.text() for w in (self.headsError, self.generalError) if w.isVisible() or w.text()]
        return "\n".join(p for p in parts if p)

    @staticmethod
    def _mark(widget: QWidget, bad: bool) -> None:
        widget.setStyleSheet("QSpinBox { border: 1px solid #b00020; }" if bad else "")

    def add_row(self, label: str, widget: QWidget) -> None:
        """A mode's own line in the form, just under Mode (e.g. a pretrained model's fixed numbers);
        hide it with ``set_row_visible``."""
        self._form.insertRow(1, label, widget)

    def set_row_visible(self, widget: QWidget, visible: bool) -> None:
        self._form.setRowVisible(widget, visible)

    def set_architecture_locked(self, values: dict[str, Any] | None) -> None:
        """Show a fixed architecture read-only (a pretrained model), or unlock it with None."""
        locked = values is not None
        if locked:
            self.set_values(values)
        for w in (self.embedDimSpin, self.hiddenDimSpin, self.headsSpin, self.seedSpin, self.padToSpin,
                  self.positionalCheck):
            w.setEnabled(not locked)

    @Slot()
    def _on_change(self, *_args) -> None:
        self._sync_enabled()
        self.changed.emit()

    def _sync_enabled(self) -> None:
        # hidden dim matters only for one head; dropout only while training
        self.hiddenDimSpin.setEnabled(self.headsSpin.value() == 1 and self.headsSpin.isEnabled())
