"""The Train tab's form: every field of ``TrainConfig``'s spec with a label, in the spec's order (the
spec gives each control's kind, range, default and tooltip; a "zero" control's 0 stands for None),
a problem line under each, Start / Pause / Resume / Stop, the message line, and the trained models
(the shipped presets, Open… / Save…, Open in views)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal, SignalInstance
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
)

from attndesk.app.widgets.named import named
from attndesk.app.widgets.styles import ERROR_STYLE
from attndesk.runs.fields import Param
from attndesk.train.config import TRAIN_FIELDS, TrainConfig

from ...docks.variant_controls import spin_range

FIELDS: tuple[Param, ...] = tuple(spec for spec in TRAIN_FIELDS if spec.label)
DEFAULTS = TrainConfig()  # the defaults with the default task's shape filled in


Control = QComboBox | QCheckBox | QDoubleSpinBox | QSpinBox


def _control(spec: Param) -> Control:
    """The control the field's declaration calls for, showing the default config's value."""
    default = getattr(DEFAULTS, spec.name)
    if spec.choices:
        choice = QComboBox()
        choice.addItems(list(spec.choices))
        choice.setCurrentText(default)
        return choice
    if spec.kind is bool:
        check = QCheckBox()
        check.setChecked(default)
        return check
    low, high = spin_range(spec)
    low = 0 if spec.control == "zero" else low
    number: QDoubleSpinBox | QSpinBox
    if spec.kind is float:
        number = QDoubleSpinBox(decimals=spec.decimals, singleStep=spec.step)
        number.setRange(low, high)  # after the decimals, which round the range
    else:
        number = QSpinBox(minimum=int(low), maximum=int(high))
    if spec.control == "zero":
        number.setSpecialValueText(spec.none)
    number.setValue(0 if default is None else default)
    return number


def _zero(widget: Control) -> bool:
    """A number control whose 0 stands for None."""
    return isinstance(widget, (QSpinBox, QDoubleSpinBox)) and bool(widget.specialValueText())


def _value(widget: Control) -> Any:
    if isinstance(widget, QComboBox):
        return widget.currentText()
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if _zero(widget) and widget.value() == widget.minimum():
        return None
    return widget.value()


def _set_value(widget: Control, value: Any) -> None:
    if isinstance(widget, QComboBox):
        widget.setCurrentText(str(value))
    elif isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    else:
        widget.setValue(0 if value is None else value)


def _edited(widget: Control) -> SignalInstance:
    """The signal ``widget`` sends when the user edits its value."""
    if isinstance(widget, QComboBox):
        return widget.currentTextChanged
    if isinstance(widget, QCheckBox):
        return widget.toggled
    return widget.valueChanged


class TrainForm(QGroupBox):
    """The "Training run" box: its buttons' signals are the Train view's (the view forwards them)."""

    startRequested = Signal()
    pauseRequested = Signal()
    resumeRequested = Signal()
    stopRequested = Signal()
    settingsEdited = Signal()
    presetRequested = Signal(str)  # a shipped preset's name
    openRequested = Signal()  # "Open trained model…"
    saveRequested = Signal()  # "Save…" the run on screen
    viewsRequested = Signal()  # "Open in views": the run on screen becomes the toy mode's weights

    def __init__(self) -> None:
        super().__init__("Training run")
        self.controls: dict[str, Control] = {}
        self.problems: dict[str, QLabel] = {}
        grid = QGridLayout(self)
        for row, spec in enumerate(FIELDS):
            self._add_field(grid, row, spec)
        buttons = self._build_buttons()
        opened = self._build_opened()
        self.message = named(QLabel(), "trainMessage", wordWrap=True)
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        rows = 2 * len(FIELDS)
        grid.addLayout(buttons, rows, 0, 1, 2)
        grid.addWidget(self.message, rows + 1, 0, 1, 2)
        grid.addWidget(QLabel("Trained models"), rows + 2, 0, 1, 2)
        grid.addWidget(self.presetCombo, rows + 3, 0, 1, 2)
        grid.addLayout(opened, rows + 4, 0, 1, 2)
        grid.addWidget(self.viewsButton, rows + 5, 0, 1, 2)
        grid.setRowStretch(rows + 6, 1)
        self.setMinimumWidth(230)
        self.setMaximumWidth(320)  # the plots take the rest

    def _add_field(self, grid: QGridLayout, row: int, spec: Param) -> None:
        name = spec.name
        widget = _control(spec)
        widget.setObjectName(f"train_{name}")
        widget.setToolTip(spec.tip)
        problem = named(QLabel(), f"train_{name}_problem", wordWrap=True)
        problem.setStyleSheet(ERROR_STYLE)
        problem.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        problem.hide()
        grid.addWidget(QLabel(spec.label), 2 * row, 0)
        grid.addWidget(widget, 2 * row, 1)
        grid.addWidget(problem, 2 * row + 1, 0, 1, 2)
        self.controls[name], self.problems[name] = widget, problem
        _edited(widget).connect(lambda *_a: self.settingsEdited.emit())

    def _build_buttons(self) -> QHBoxLayout:
        buttons = QHBoxLayout()
        self.startButton = named(QPushButton("Start"), "trainStart")
        self.pauseButton = named(QPushButton("Pause"), "trainPause")
        self.resumeButton = named(QPushButton("Resume"), "trainResume")
        self.stopButton = named(QPushButton("Stop"), "trainStop")
        for button, signal in (
            (self.startButton, self.startRequested),
            (self.pauseButton, self.pauseRequested),
            (self.resumeButton, self.resumeRequested),
            (self.stopButton, self.stopRequested),
        ):
            button.clicked.connect(lambda _c=False, s=signal: s.emit())
            buttons.addWidget(button)
        return buttons

    def _build_opened(self) -> QHBoxLayout:
        """The shipped presets, Open… / Save… and Open in views."""
        opened = QHBoxLayout()
        self.presetCombo = named(QComboBox(), "trainPreset")
        self.presetCombo.setToolTip("small models this trainer trained, shipped with attndesk: their learned attention")
        self.presetCombo.activated.connect(self._preset_chosen)
        self.openButton = named(QPushButton("Open…"), "trainOpen")
        self.openButton.setToolTip("open a run saved by attndesk train (a folder)")
        self.openButton.clicked.connect(lambda _c=False: self.openRequested.emit())
        self.saveButton = named(QPushButton("Save…"), "trainSave")
        self.saveButton.setToolTip(
            "save the run on screen as a folder (weights, checkpoints, history), as attndesk train writes it"
        )
        self.saveButton.setEnabled(False)
        self.saveButton.clicked.connect(lambda _c=False: self.saveRequested.emit())
        self.viewsButton = named(QPushButton("Open in views"), "trainOpenInViews")
        self.viewsButton.setToolTip(
            "show this model in the toy views (heatmaps, step-through, head stats, compare before vs "
            "after training, online softmax): Weights > Random goes back"
        )
        self.viewsButton.setEnabled(False)
        self.viewsButton.clicked.connect(lambda _c=False: self.viewsRequested.emit())
        opened.addWidget(self.openButton)
        opened.addWidget(self.saveButton)
        return opened

    def set_presets(self, presets: Sequence[tuple[str, str]]) -> None:
        """The shipped presets: (name, one line about it)."""
        self.presetCombo.clear()
        self.presetCombo.addItem("show a shipped preset…", "")
        for name, about in presets:
            self.presetCombo.addItem(name, name)
            self.presetCombo.setItemData(self.presetCombo.count() - 1, about, Qt.ItemDataRole.ToolTipRole)

    def _preset_chosen(self, index: int) -> None:
        name = self.presetCombo.itemData(index)
        if name:
            self.presetRequested.emit(name)

    # -- settings -------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """The values of every control, by ``TrainConfig`` field name."""
        return {name: _value(widget) for name, widget in self.controls.items()}

    def set_settings(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            widget = self.controls.get(name)
            if widget is not None and (value is not None or _zero(widget)):
                _set_value(widget, value)

    def show_problem(self, field: str | None, message: str) -> None:
        """``message`` next to the control of ``field`` (None: under the buttons); "" clears all."""
        for label in self.problems.values():
            label.hide()
        if not message:
            return
        problem = self.problems.get(field) if field is not None else None
        if problem is None:
            self.show_message(message, error=True)
        else:
            problem.setText(message)
            problem.show()

    def problem(self) -> str:
        """The message shown next to a control, or "" (for tests and the status line)."""
        return next((label.text() for label in self.problems.values() if not label.isHidden()), "")

    def show_message(self, text: str, *, error: bool = False) -> None:
        self.message.setText(text)
        self.message.setStyleSheet(ERROR_STYLE if error else "")

    def set_phase(self, phase: str) -> None:
        """ "idle", "running" or "paused": which buttons act, whether the settings can change."""
        running = phase in ("running", "paused")
        self.startButton.setEnabled(not running)
        self.pauseButton.setEnabled(phase == "running")
        self.resumeButton.setEnabled(phase == "paused")
        self.stopButton.setEnabled(running)
        for widget in (*self.controls.values(), self.presetCombo, self.openButton):
            widget.setEnabled(not running)
        if running:
            self.saveButton.setEnabled(False)
            self.viewsButton.setEnabled(False)
