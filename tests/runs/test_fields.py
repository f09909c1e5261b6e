"""The field spec (``runs.config.FIELDS``): the config, its checks, the command line and a real
model's refusals are built from it, so they agree with it field by field."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from attndesk.cli import CliError, _model_arguments, build_parser, config_from_args
from attndesk.cli.render_model import toy_only
from attndesk.errors import ConfigError
from attndesk.runs.config import FIELDS, AttentionConfig, field_spec
from attndesk.runs.fields import check_value, fields_of, param
from attndesk.runs.pipeline import plan_text, run_attention


def _flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    render = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["render"]
    return {a.dest: a for a in render._actions if a.option_strings}


def test_the_spec_is_the_config_fields_with_their_defaults():
    config = AttentionConfig()
    assert [spec.name for spec in FIELDS] == [f.name for f in dataclasses.fields(AttentionConfig)]
    assert {spec.name: spec.default for spec in FIELDS} == config.to_dict()
    for spec in FIELDS:
        check_value(spec, spec.default)  # every default passes its own field's check
        assert field_spec(spec.name) is spec and spec.label and spec.tip and spec.flag.startswith("--")
        assert spec.kind in (bool, int, float, str) and (spec.kind is not str or spec.choices)
    assert len({spec.flag for spec in FIELDS}) == len(FIELDS)


def _below(spec):
    """A value just outside the spec's range or choices (None for a field that has no lower end)."""
    if spec.choices:
        return "not-a-choice"
    if spec.kind is bool:
        return "yes"
    if spec.low is None:
        return None
    return spec.low if spec.low_open else spec.low - 1


@pytest.mark.parametrize("spec", FIELDS, ids=lambda s: s.name)
def test_each_field_refuses_what_its_spec_excludes_and_names_itself(spec):
    bad = _below(spec)
    with pytest.raises(ConfigError) as caught:
        AttentionConfig(**{spec.name: bad}).validate()
    assert caught.value.field == spec.name and spec.name in str(caught.value)
    if not spec.optional:
        with pytest.raises(ConfigError, match=spec.name):
            check_value(spec, None)
    if spec.high is not None and not spec.high_open:
        with pytest.raises(ConfigError, match=spec.name):
            check_value(spec, spec.kind(spec.high * 2))


def test_every_field_has_its_flag_with_the_spec_default_choices_and_help():
    actions = _flag_actions(build_parser())
    for spec in FIELDS:
        action = actions[spec.name]
        assert action.option_strings == [spec.flag]
        if spec.kind is bool:  # the flag sets the opposite of the default
            assert action.default is spec.default and action.const is (not spec.default)
        else:
            assert action.default == spec.default and tuple(action.choices or ()) == spec.choices
            assert spec.tip in action.help
    defaults = build_parser().parse_args(["render"])
    assert config_from_args(defaults) == AttentionConfig()


@pytest.mark.parametrize(
    "spec", [s for s in FIELDS if s.kind in (int, float) and s.low is not None], ids=lambda s: s.name
)
def test_the_command_line_refuses_a_value_below_the_spec_range(spec):
    parser = build_parser()
    low = spec.low if spec.low_open else spec.low - 1
    text = f"{low:g}" if spec.kind is float else str(int(low))
    with pytest.raises((CliError, ConfigError)):
        config_from_args(parser.parse_args(["render", f"{spec.flag}={text}"]))


def test_a_real_model_refuses_exactly_the_fields_it_does_not_act_on():
    assert set(toy_only()) == {s.name for s in FIELDS if s.real_model != "acts"} | {"positional"}
    assert {"mask", "scaled", "memory_budget"} == {s.name for s in FIELDS if s.real_model == "acts"}


def test_a_field_added_to_the_spec_gets_a_flag_and_a_config_key():
    extra = dataclasses.make_dataclass(
        "WithSinks",
        [
            (
                "sinks",
                int,
                param(2, kind=int, label="Sink tokens", flag="--sinks", low=0, tip="Keys every query always sees"),
            )
        ],
        bases=(AttentionConfig,),
    )
    fields = fields_of(extra)
    assert fields[-1].name == "sinks" and fields[-1].default == 2 and fields[:-1] == FIELDS
    parser = argparse.ArgumentParser()
    _model_arguments(parser, fields)
    assert parser.parse_args([]).sinks == 2 and parser.parse_args(["--sinks", "5"]).sinks == 5
    assert "--sinks" in parser.format_help() and "Keys every query always sees" in parser.format_help()
    assert list(extra().to_dict()) == [s.name for s in fields]
    assert "sinks" in toy_only(fields)
    with pytest.raises(ConfigError, match="sinks must be a whole number >= 0"):
        extra(sinks=-1).validate()


def test_one_config_is_checked_once_by_the_window_the_plan_and_the_run(monkeypatch):
    checked = []
    original = AttentionConfig._check_fields
    monkeypatch.setattr(AttentionConfig, "_check_fields", lambda self: checked.append(1) or original(self))
    config = AttentionConfig(embed_dim=8, num_heads=2).validate()
    plan = plan_text(config, "the cat sat")
    run_attention(config, "the cat sat", plan=plan)
    assert len(checked) == 1
    config.seed = 3  # a field changed in place: checked again
    config.validate()
    config.num_heads = 3
    with pytest.raises(ConfigError, match="do not divide"):
        config.validate()
    assert len(checked) == 3
    assert AttentionConfig(softcap=True).__dict__.get("_valid_as") is None
    with pytest.raises(ConfigError):  # True is not the number 1: refused though 1 passes
        AttentionConfig(window=True).validate()
