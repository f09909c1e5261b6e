"""The parameters panel, the command line and the session are built from one field spec: each
spec field has its control (range, choices, label, tooltip as declared), the same default as its
flag, and its session key; a field added to the spec appears in all three; one edit draws the
panel once and checks the config once."""

from __future__ import annotations

import argparse
import dataclasses
import json

from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox, QWidget

from attndesk.app.docks.parameters import ParametersPanel
from attndesk.cli import _model_arguments, build_parser, config_from_args
from attndesk.runs.config import FIELDS, AttentionConfig
from attndesk.runs.fields import fields_of, param
from attndesk.session.file import parse_session, session_json
from attndesk.session.state import WINDOW_MAX, AppState, PanelView

INT_TOP = 2**31 - 1


def _panel(qtbot, state: AppState | None = None, fields=FIELDS) -> ParametersPanel:
    panel = ParametersPanel(state or AppState(), fields=fields)
    qtbot.addWidget(panel)
    return panel


def _expected_range(spec) -> tuple[float, float]:
    """What the spin box must offer, worked out from the spec alone (bytes in MiB; 0 = None)."""
    scale = 2**20 if spec.unit == "bytes" else 1
    tick = 10.0**-spec.decimals if spec.kind is float else 1
    top = min(v for v in (spec.high, spec.window_max, INT_TOP * scale) if v is not None) / scale
    low = 0 if spec.control == "zero" else spec.low + tick * spec.low_open
    return low, top - tick * spec.high_open


def test_every_spec_field_has_its_control_with_the_spec_range_choices_and_texts(qtbot):
    panel = _panel(qtbot)
    assert list(panel.controls) == [spec.name for spec in FIELDS]
    for spec in FIELDS:
        widgets = {w.objectName(): w for w in panel.controls[spec.name].widgets}
        kind = "Combo" if spec.choices or spec.control == "divisors" else "Check" if spec.kind is bool else "Spin"
        widget = panel.findChild(QWidget, spec.stem + kind)
        assert widget is not None and widgets[spec.stem + kind] is widget, spec.name
        assert widget.toolTip() == spec.tip or spec.name == "mask"  # the mask's tip is the mode's
        if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
            assert (widget.minimum(), widget.maximum()) == _expected_range(spec), spec.name
        if isinstance(widget, QCheckBox) and spec.control != "switch":
            assert widget.text() == spec.label
        if isinstance(widget, QComboBox) and spec.choices:
            assert tuple(widget.itemData(i) for i in range(widget.count())) == spec.choices
        if spec.window_max is not None:
            assert WINDOW_MAX[spec.name] == spec.window_max
        assert panel.findChild(QWidget, "headsError" if spec.name == "num_heads" else f"{spec.name}Error")


def test_the_panel_the_command_line_and_the_session_agree_field_by_field(qtbot):
    state = AppState()
    panel = _panel(qtbot, state)
    flags = build_parser().parse_args(["render"])
    session = session_json(state)["config"]
    assert set(session) == {spec.name for spec in FIELDS} == set(panel.controls)
    for spec in FIELDS:
        assert panel.controls[spec.name].value() == getattr(flags, spec.name) == spec.default == session[spec.name]
    # a non-default value travels the same way: the control shows what the flag sets and the session holds
    parsed = build_parser().parse_args(
        [
            "render",
            "--heads",
            "8",
            "--window",
            "5",
            "--softcap",
            "2.5",
            "--memory-budget",
            "512M",
            "--no-bias",
            "--vocab-size",
            "99",
        ]
    )
    state.config = config_from_args(parsed)
    back = parse_session(json.dumps(session_json(state))).state.config
    for spec in FIELDS:
        assert panel.controls[spec.name].value() == getattr(parsed, spec.name) == getattr(back, spec.name), spec.name


def test_a_field_added_to_the_spec_appears_in_the_panel_the_flags_and_the_session(qtbot):
    extra = dataclasses.make_dataclass(
        "WithSinks",
        [
            (
                "sinks",
                int,
                param(
                    2,
                    kind=int,
                    label="Sink tokens",
                    flag="--sinks",
                    low=0,
                    window_max=64,
                    tip="Keys every query always sees",
                ),
            )
        ],
        bases=(AttentionConfig,),
    )
    fields = fields_of(extra)
    state = AppState(config=extra())
    panel = _panel(qtbot, state, fields)
    spin = panel.findChild(QSpinBox, "sinksSpin")
    assert spin is not None and (spin.minimum(), spin.maximum(), spin.value()) == (0, 64, 2)
    assert spin.toolTip() == "Keys every query always sees"
    spin.setValue(7)
    assert state.config.sinks == 7 and isinstance(state.config, extra)
    state.set_config(sinks=3)
    assert spin.value() == 3
    parser = argparse.ArgumentParser()
    _model_arguments(parser, fields)
    assert parser.parse_args([]).sinks == 2 and "--sinks" in parser.format_help()
    assert session_json(state)["config"]["sinks"] == 3


def test_a_pretrained_view_fixes_the_architecture_and_leaves_what_acts(qtbot):
    panel = _panel(qtbot)
    panel.set_panel_view(PanelView(fixed={"embed_dim": 384, "num_heads": 12}, causal_only=True))
    for spec in FIELDS:
        control = panel.controls[spec.name]
        assert control.framed.isEnabled() == (spec.real_model == "acts"), spec.name
    assert panel.embedDimSpin.value() == 384 and panel.state.config.embed_dim == 64
    assert [panel.maskCombo.itemData(i) for i in range(panel.maskCombo.count())] == ["none", "causal"]


def test_one_edit_draws_the_panel_once_and_checks_the_config_once(qtbot, monkeypatch):
    checked = []
    original = AttentionConfig._check_fields
    monkeypatch.setattr(AttentionConfig, "_check_fields", lambda self: checked.append(1) or original(self))
    # the panel on its own
    state = AppState()
    panel = _panel(qtbot, state)
    before = panel.refreshes
    panel.seedSpin.setValue(5)
    assert state.config.seed == 5 and panel.refreshes == before + 1 and checked == []
    # the window: the panel, the mode's panel view, the request, the plan and the run
    w = shown_window(qtbot)
    try:
        drawn, checked[:] = w.parametersPanel.refreshes, []
        with qtbot.waitSignal(w.resultDisplayed, timeout=60000):
            w.parametersPanel.seedSpin.setValue(7)
        assert w.state.config.seed == 7
        assert w.parametersPanel.refreshes - drawn == 1 and len(checked) == 1
    finally:
        dispose(w)
