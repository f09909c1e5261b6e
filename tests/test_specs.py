"""Every settings spec (``runs.fields.param``) against what is built from it, field by field: the
command's flags (default, choices, help, and a refusal of what the spec excludes: one line, exit
2, nothing written), the settings' own checks, and the Train tab's form (control, range, default,
tooltip). The parameters panel built from ``AttentionConfig``'s spec: tests/app/test_parameters_spec.py."""

from __future__ import annotations

import argparse

import pytest
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox

from attndesk.app.docks.variant_controls import spin_range
from attndesk.app.tabs.train import TrainView
from attndesk.cli import main, render, render_job, train, train_job
from attndesk.cli.base import command_parser
from attndesk.errors import ConfigError
from attndesk.runs.config import FIELDS, AttentionConfig
from attndesk.runs.fields import Param, check_value
from attndesk.train.config import TRAIN_FIELDS, TrainConfig

# command, the settings it builds, its spec
SPECS = {"render": (render, AttentionConfig, FIELDS), "train": (train, TrainConfig, TRAIN_FIELDS)}
CASES = [(command, spec) for command, (_m, _c, fields) in SPECS.items() for spec in fields if spec.flag]


def _actions(command: str) -> dict[str, argparse.Action]:
    parser = command_parser(SPECS[command][0].register)
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings}


def _outside(spec: Param) -> list[str]:
    """Values the spec refuses, as typed on a command line."""
    if spec.choices:
        return ["not-a-choice"]
    if spec.kind not in (int, float):
        return []
    bad = []
    if spec.low is not None:
        bad.append(spec.low if spec.low_open else spec.low - 1)
    if spec.high is not None:
        bad.append(spec.high if spec.high_open else spec.high + 1)
    return [str(spec.kind(b)) for b in bad]


def test_every_spec_has_a_label_or_flag_only_where_it_says_and_its_defaults_pass():
    for _command, (_module, settings, fields) in SPECS.items():
        assert [s.name for s in fields] == [s.name for s in fields if s.name in settings.__dataclass_fields__]
        for spec in fields:
            check_value(spec, spec.default)
            assert spec.tip and (not spec.flag or spec.flag.startswith("--"))
        flags = [s.flag for s in fields if s.flag]
        assert len(set(flags)) == len(flags)


@pytest.mark.parametrize("command, spec", CASES, ids=lambda v: v if isinstance(v, str) else v.name)
def test_each_flag_is_its_field(command, spec):
    action = _actions(command)[spec.flag]
    assert action.dest == spec.name and action.help == spec.help()
    if spec.choices:
        assert tuple(action.choices or ()) == spec.choices
    if command == "train":  # a flag not given leaves the field to the default or the preset
        assert action.default is None
        if spec.kind is bool:
            assert action.const is (not spec.default)
    elif spec.kind is not bool:
        assert action.default == spec.default


def test_no_flags_give_the_settings_defaults(tmp_path):
    assert render_job.config_from_args(command_parser(render.register).parse_args([])) == AttentionConfig()
    parsed = command_parser(train.register).parse_args(["--out", str(tmp_path)])
    assert train_job.config_from_args(parsed) == TrainConfig().validate()


@pytest.mark.parametrize(
    "command, spec", [c for c in CASES if _outside(c[1])], ids=lambda v: v if isinstance(v, str) else v.name
)
def test_each_flag_refuses_what_its_spec_excludes_in_one_line(command, spec, capsys, tmp_path):
    settings = SPECS[command][1]
    out = tmp_path / "out"
    for text in _outside(spec):
        with pytest.raises(ConfigError) as caught:  # the settings' own check, naming the field
            settings(**{spec.name: spec.kind(text) if not spec.choices else text}).validate()
        assert spec.name in str(caught.value)
        code = main([command, f"{spec.flag}={text}", "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("attndesk: error: "), (text, err)
        assert not out.exists()


def test_the_train_form_is_the_spec(qtbot):
    view = TrainView()
    qtbot.addWidget(view)
    defaults = TrainConfig()
    form = [spec for spec in TRAIN_FIELDS if spec.label]
    assert list(view.controls) == [spec.name for spec in form]
    for spec in form:
        control = view.controls[spec.name]
        assert control.toolTip() == spec.tip and control.objectName() == f"train_{spec.name}"
        if spec.choices:
            assert isinstance(control, QComboBox)
            assert tuple(control.itemText(i) for i in range(control.count())) == spec.choices
        elif spec.kind is bool:
            assert isinstance(control, QCheckBox)
        else:
            assert isinstance(control, QDoubleSpinBox if spec.kind is float else QSpinBox)
            low, high = spin_range(spec)
            assert (control.minimum(), control.maximum()) == (0 if spec.control == "zero" else low, high)
            assert spec.high is None or control.maximum() <= spec.high  # never a value the spec refuses
            if spec.control == "zero":  # 0 shows what None means and reads back as None
                assert control.specialValueText() == spec.none
    assert view.settings() == {spec.name: getattr(defaults, spec.name) for spec in form}
    assert TrainConfig(**view.settings()) == defaults  # the form, the class and the CLI agree


def test_a_zero_control_sets_and_reads_none(qtbot):
    view = TrainView()
    qtbot.addWidget(view)
    view.set_settings({"kv_heads": 2, "window": 8, "softcap": 30.0})
    assert {k: view.settings()[k] for k in ("kv_heads", "window", "softcap")} == {
        "kv_heads": 2,
        "window": 8,
        "softcap": 30.0,
    }
    view.set_settings({"kv_heads": None, "window": None, "softcap": None})
    assert {k: view.settings()[k] for k in ("kv_heads", "window", "softcap")} == dict.fromkeys(
        ("kv_heads", "window", "softcap")
    )
