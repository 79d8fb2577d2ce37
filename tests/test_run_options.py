"""agent/run_options.py: every settings field has a flag or a reason not to, every flag a field, and
no command's defaults differ from another's except where OVERRIDES says so."""
from __future__ import annotations

import argparse
import importlib.util
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from agent.run_options import COMMANDS, FLAGS, NOT_FLAGS, OTHER_MEANING, OVERRIDES, settings
from agent.settings import SamplerSettings, TurnSettings

ROOT = Path(__file__).resolve().parent.parent
FIELDS = [f.name for cls in (SamplerSettings, TurnSettings) for f in fields(cls)]


def _bench_parser():
    spec = importlib.util.spec_from_file_location("copy_accuracy", ROOT / "bench" / "copy_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_parser(), []


def _sub(parser, name):
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def _parser(command: str):
    """(the command's parser, the least argv it parses: required options only)."""
    if command == "nanocode":
        from agent.cli import build_parser
        return build_parser(), []
    if command == "evals agent":
        from evals.cli import build_parser
        return _sub(build_parser(), "agent"), []
    if command == "train rollouts":
        from train.cli import build_parser
        return _sub(build_parser(), "rollouts"), ["--out", "x"]
    return _bench_parser()


def test_every_field_has_a_flag_or_a_reason():
    assert set(FLAGS) | set(NOT_FLAGS) == set(FIELDS), "a settings field needs a flag or a NOT_FLAGS reason"
    assert not set(FLAGS) & set(NOT_FLAGS)
    assert all(field in FLAGS for names in COMMANDS.values() for field in names)
    assert all(reason for reason in NOT_FLAGS.values())


def test_every_flag_names_its_field():
    defaults = {**asdict(SamplerSettings()), **asdict(TurnSettings())}
    for field, flag in FLAGS.items():
        if isinstance(defaults[field], bool):
            assert flag.name.startswith("--no-") == defaults[field], f"{flag.name}: turns {field} the wrong way"
        # the one flag not named like its field: --no-whole-names (names), named for what it lifts
        assert flag.name.lstrip("-").removeprefix("no-").replace("-", "_") in (field, "whole_names"), flag.name


def test_overrides_and_other_meanings_name_real_commands():
    for (command, field), (value, reason) in OVERRIDES.items():
        assert field in COMMANDS[command] and reason
        assert value != getattr(SamplerSettings(), field, getattr(TurnSettings(), field, None))
    flags = {f.name for f in FLAGS.values()}
    for (command, flag), reason in OTHER_MEANING.items():
        assert command in COMMANDS and flag in flags and reason


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_command_declares_exactly_its_flags(command):
    """Each settings flag on the command's parser fills its field, or is listed in OTHER_MEANING."""
    parser, _ = _parser(command)
    by_flag = {f.name: field for field, f in FLAGS.items()}
    seen = set()
    for action in parser._actions:
        for opt in action.option_strings:
            if opt not in by_flag:
                continue
            if by_flag[opt] in COMMANDS[command]:
                assert action.dest == by_flag[opt], opt
                seen.add(by_flag[opt])
            else:
                assert (command, opt) in OTHER_MEANING, f"{command} {opt}: not the setting, and not listed"
    assert seen == set(COMMANDS[command])


def test_commands_differ_only_where_overrides_say():
    """Parsed with no options, each command's settings equal the fields' defaults except its OVERRIDES."""
    base = {**asdict(SamplerSettings()), **asdict(TurnSettings())}
    for command in COMMANDS:
        parser, argv = _parser(command)
        sampling, turn = settings(parser.parse_args(argv), command)
        got = {**asdict(sampling), **asdict(turn)}
        differ = {k: v for k, v in got.items() if v != base[k]}
        assert differ == {field: value for (c, field), (value, _) in OVERRIDES.items() if c == command}, command


def test_todays_defaults():
    """The defaults each command had before run_options: a change here changes a command."""
    expect = {"nanocode": {"temperature": 0.0, "top_k": 0, "max_tokens": 1024, "seed": 0, "max_steps": 25,
                           "network": False, "sandbox": True},
              "evals agent": {"temperature": 0.0, "max_tokens": 1024, "ground": True, "names": True,
                              "loop_guard": True, "copy_bias": 0.0, "max_steps": 15, "retries": 2,
                              "question_guard": True},
              "train rollouts": {"max_tokens": 1024, "max_steps": 10, "retries": 2,
                                 "temperature": 0.8, "seed": 0},
              "bench copy_accuracy": {"max_tokens": 512, "max_steps": 10, "ground": True, "seed": 0}}
    for command, want in expect.items():
        parser, argv = _parser(command)
        args = vars(parser.parse_args(argv))
        assert {k: args[k] for k in want} == want, command


def test_a_flag_reaches_its_setting():
    parser, _ = _parser("evals agent")
    args = parser.parse_args(["--no-ground", "--no-whole-names", "--no-loop-guard",
                              "--no-question-guard", "--copy-bias", "0.5", "--retries", "0",
                              "--max-steps", "3", "--temperature", "0.2"])
    sampling, turn = settings(args, "evals agent")
    assert (sampling.ground, sampling.names, sampling.loop_guard, sampling.copy_bias,
            sampling.temperature) == (False, False, False, 0.5, 0.2)
    assert (turn.question_guard, turn.retries, turn.max_steps) == (False, 0, 3)
    parser, _ = _parser("nanocode")
    args = parser.parse_args(["--no-sandbox", "--network", "--top-k", "5", "--seed", "7"])
    sampling, turn = settings(args, "nanocode")
    assert (turn.sandbox, turn.network, sampling.top_k, sampling.seed) == (False, True, 5, 7)
