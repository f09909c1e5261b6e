"""Model parameters: one control per field of the spec (``runs.config.FIELDS``), bound to ``state.config``.

The controls, their order, labels, ranges and tooltips come from the field spec
(``variant_controls.control_for``); nothing here lists the fields.

The panel holds no values of its own: an edit writes the one field into the state, and the state's
``config`` / ``mode`` events redraw every control (signals blocked, so a redraw never writes back).
The active mode's ``PanelView`` says what it shows fixed (a pretrained architecture, disabled; the
shape of trained toy weights)
and which mask choices act. ``show_problem`` puts the controller's ConfigError next to the
controls (next to the heads when it is about heads, with the valid head counts).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QVBoxLayout, QWidget

from attndesk.app.widgets.interp import problem_label
from attndesk.app.widgets.named import named
from attndesk.runs.config import FIELDS, AttentionConfig, divisors
from attndesk.runs.fields import Param
from attndesk.session.results import ConfigProblem
from attndesk.session.state import AppState, ModeChoice, PanelView

from ..widgets.styles import ERROR_COLOR, restyle
from .variant_controls import ComboControl, ControlGroup, FieldControl, control_for


def mask_with_causal(mask: str, causal: bool) -> str:
    """``mask`` with its causal part set (its padding part kept)."""
    padding = "padding" in mask
    return {(False, False): "none", (True, False): "padding", (False, True): "causal", (True, True): "padding+causal"}[
        (padding, causal)
    ]


class ParametersPanel(QWidget):
    """Writes edits into ``state.config`` / ``state.mode``; ``modeChosen`` is emitted on a user
    choice of mode (the state is already set). ``fields`` is the spec the controls are built from
    (the core's ``FIELDS``; a test may pass another)."""

    modeChosen = Signal(object)
    maskCombo: QComboBox  # each control's widgets become attributes by object name in _build

    def __init__(self, state: AppState, parent: QWidget | None = None, *, fields: tuple[Param, ...] = FIELDS) -> None:
        super().__init__(parent)
        self.setObjectName("parametersPanel")
        self.state = state
        self._view = PanelView()
        self._choices: list[ModeChoice] = []
        self.refreshes = 0  # how many times the controls were drawn (one per state change)
        self._build(fields)
        self._layout_form()
        self._connect()
        state.events.config.connect(lambda _c: self.refresh())
        state.events.mode.connect(lambda _m: self.refresh())
        self.refresh()

    # -- construction ---------------------------------------------------------------------------
    def _build(self, fields: tuple[Param, ...]) -> None:
        self.modeCombo = named(QComboBox(), "modeCombo")
        self.modeCombo.setToolTip("Which model computes the attention")
        self.modelInfo = named(QLabel(""), "pretrainedModelInfo")  # two short lines: a wrapped label squeezes
        self.modelInfo.setToolTip(
            "a pretrained model's architecture is fixed by its checkpoint; "
            "scale and the causal mask still act, heads can be ablated in the All layers tab"
        )
        self.controls: dict[str, FieldControl] = {spec.name: control_for(spec) for spec in fields}
        for control in self.controls.values():
            for widget in control.widgets:
                setattr(self, widget.objectName(), widget)  # self.embedDimSpin, self.windowCheck, ...
        self._field_errors = {
            name: problem_label("headsError" if name == "num_heads" else f"{name}Error") for name in self.controls
        }
        self.headsError = self._field_errors.get("num_heads") or problem_label("headsError")
        self.variants = ControlGroup([c for c in self.controls.values() if c.spec.group == "variant"])
        self.generalError = problem_label("parametersError")

    def _layout_form(self) -> None:
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Mode", self.modeCombo)
        form.addRow("Model", self.modelInfo)
        for name, control in self.controls.items():  # the spec's order; a size or type refused is said under it
            form.addRow("" if control.spec.kind is bool else control.spec.label, control.row)
            form.addRow("", self._field_errors[name])
        form.setRowVisible(self.modelInfo, False)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.generalError)
        layout.addStretch(1)
        self._form = form

    def _connect(self) -> None:
        for name, control in self.controls.items():
            edit = self._mask_edit if name == "mask" else (lambda c=control: {c.spec.name: c.value()})
            for signal in control.signals:
                signal.connect(lambda *_a, edit=edit: self.state.set_config(**edit()))
        self.modeCombo.currentIndexChanged.connect(self._on_mode_index)

    def _controls(self) -> list[QWidget]:
        return [self.modeCombo, *(w for c in self.controls.values() for w in c.widgets)]

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
        """How the active mode wants the config shown (fixed values, mask choices, info line); the
        same view again draws nothing (the window passes it on every config change)."""
        if view == self._view:
            return
        self._view = view
        self.refresh()

    def refresh(self) -> None:
        """Draw every control from the state (and the mode's fixed values)."""
        self.refreshes += 1
        values = {**self.state.config.to_dict(), **self._view.fixed}
        locked = (
            bool(self._view.fixed) and not self._view.toy_acts
        )  # a real model's architecture: its values, or "unknown"
        for w in self._controls():
            w.blockSignals(True)
        try:
            for name, control in self.controls.items():
                unknown = locked and control.spec.real_model == "fixed" and name not in self._view.fixed
                if name == "mask":
                    self._show_mask(str(values["mask"]))
                else:
                    control.show(values[name], values, unknown)
            self._show_mode()
        finally:
            for w in self._controls():
                w.blockSignals(False)
        for name, control in self.controls.items():
            if isinstance(control, ComboControl):
                control.set_off(self._view.off_choices.get(name, {}))
        for control in self.controls.values():
            spec = control.spec
            acts = spec.acts_when is None or spec.acts_when(values)  # e.g. hidden dim only for one head
            control.set_enabled((spec.real_model == "acts" or not locked) and acts)
        self.modelInfo.setText(self._view.info)
        self._form.setRowVisible(self.modelInfo, bool(self._view.info))
        if "mask" in self.controls:
            self.maskCombo.setToolTip(self._view.mask_tip or self.controls["mask"].spec.tip)

    def _field_widgets(self) -> dict[str, QWidget]:
        """The widget that gets the red frame when its field is refused."""
        return {name: control.framed for name, control in self.controls.items()}

    def _show_mask(self, mask: str) -> None:
        control = self.controls["mask"]
        assert isinstance(control, ComboControl), "the mask is chosen in a combo box"
        control.set_choices(("none", "causal") if self._view.causal_only else control.spec.choices)
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
        if (
            self._view.fixed
            or heads == 1
            or not isinstance(embed, int)
            or not isinstance(heads, int)
            or embed % heads == 0
        ):
            return None
        valid = divisors(embed)
        listed = ", ".join(map(str, valid)) if len(valid) <= 16 else ", ".join(map(str, valid[:14])) + ", ..."
        return f"{heads} heads do not divide {embed} dims. Valid head counts: {listed}"

    def show_problem(self, problem: ConfigProblem | None) -> None:
        """Show a refused config next to the control at fault: the heads (with the valid counts),
        another field's control (red frame, the message under it), or under the form."""
        message = problem.message if problem is not None else None
        heads_msg = self.head_problem() if message else None
        field = "num_heads" if heads_msg else (None if problem is None else problem.field)
        for name, widget in self._field_widgets().items():
            restyle(widget, f"{type(widget).__name__} {{ border: 1px solid {ERROR_COLOR}; }}" if name == field else "")
        for name, label in self._field_errors.items():
            label.setText((heads_msg or message or "") if name == field else "")
            label.setVisible(name == field)
        general = None if (message is None or field in self._field_errors) else message
        self.generalError.setText(general or "")
        self.generalError.setVisible(bool(general))
