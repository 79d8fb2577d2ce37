"""The three console scripts: help (every command listed, no history in it), version, the flags the
training stages share, and no heavy imports."""

import argparse
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from agent import cli as agent_cli
from evals import cli as evals_cli
from train import cli as train_cli

ROOT = Path(__file__).resolve().parents[1]
TRAIN_COMMANDS = ["data", "tokenizer", "base", "synth", "sft", "rollouts", "dpo", "export", "speedrun",
                  "import-nanochat", "export-sessions"]
EVALS_COMMANDS = ["humaneval", "mbpp", "humanevalplus", "mbppplus", "bpb", "agent", "core", "report"]


def run(main, argv):
    """Call a CLI's main in-process and return its exit status (returned or raised)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize(
    "main, words",
    [
        (agent_cli.main, ["--model", "--base-url", "--print", "--plain", "--mode", "--yes", "--cwd"]),
        (train_cli.main, TRAIN_COMMANDS),
        (evals_cli.main, EVALS_COMMANDS),
    ],
)
def test_help_lists_everything(main, words, capsys):
    assert run(main, ["--help"]) == 0
    out = capsys.readouterr().out
    for word in words:
        assert word in out


def stage_parser(add_args):
    parser = argparse.ArgumentParser()
    add_args(parser)
    return parser


def test_training_stages_share_their_run_flags():
    """base, sft and dpo define the run flags once: the same defaults and the same help text."""
    shared = ["--run-dir", "--resume", "--log-every", "--save-every", "--keep", "--seed", "--mesh",
              "--peak-flops", "--multihost"]

    def flags(add_args):
        return {o: (a.default, a.help) for a in stage_parser(add_args)._actions for o in a.option_strings}
    base, sft, dpo = map(flags, (train_cli.add_base_args, train_cli.add_sft_args, train_cli.add_dpo_args))
    for flag in shared:
        assert base[flag] == sft[flag] == dpo[flag], flag


@pytest.mark.parametrize("command", sorted(train_cli.COMMANDS))
def test_train_help_states_no_history(command, capsys):
    assert run(train_cli.main, [command, "--help"]) == 0
    out = capsys.readouterr().out
    for word in ("LOG.md", "sweep", "issue "):
        assert word not in out


def test_version(capsys):
    from nanocode import __version__

    assert run(agent_cli.main, ["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"nanocode {__version__}"


@pytest.mark.parametrize("argv", [["--mode", "nope"], ["--yes", "--mode", "ask"], ["-p", "x", "--plain"]])
def test_agent_rejects_bad_flags(argv, capsys):
    assert run(agent_cli.main, argv) == 2
    assert "error:" in capsys.readouterr().err


def test_agent_modes():
    assert agent_cli.parse_args([]).mode is None  # the settings files decide, else ask
    assert agent_cli.parse_args(["--yes"]).mode == "auto"
    assert agent_cli.parse_args(["--mode", "accept-edits"]).mode == "accept-edits"
    assert agent_cli.parse_args(["--mode", "plan"]).mode == "plan"


def test_subcommand_required(capsys):
    for main in (train_cli.main, evals_cli.main):
        assert run(main, []) == 2
        assert "required" in capsys.readouterr().err


def _commands_with_limit():
    """Every train and evals command whose parser has a --limit flag (found, not listed)."""
    found = []
    for name, main in (("train", train_cli), ("evals", evals_cli)):
        sub = next(a for a in main.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        found += [(main, command) for command, parser in sub.choices.items()
                  if any("--limit" in a.option_strings for a in parser._actions)]
    return found


@pytest.mark.parametrize("value", ["0", "-1"])
@pytest.mark.parametrize("cli, command", _commands_with_limit())
def test_a_limit_below_one_is_a_usage_error(cli, command, value, capsys):
    """--limit 0 used to mean every problem (`problems[:limit] if limit`): now it is refused at
    parse time, before any model or data loads, in one line naming the flag and the way on."""
    assert run(cli.main, [command, "--limit", value, "--model", "x"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--limit" in last and "at least 1" in last and "leave --limit out" in last


def test_every_limit_flag_is_checked_and_one_still_parses():
    commands = _commands_with_limit()
    assert {c for _, c in commands} >= {"humaneval", "mbpp", "humanevalplus", "mbppplus", "agent", "core"}
    for cli, command in commands:
        assert cli.build_parser().parse_args([command, "--limit", "1", "--model", "x"]).limit == 1


def test_import_nanochat_parses_its_arguments():
    args = train_cli.build_parser().parse_args(
        ["import-nanochat", "ckpt", "--out", "o", "--step", "7", "--dtype", "bfloat16"]
    )
    assert (args.path, args.out, args.step, args.dtype) == ("ckpt", "o", 7, "bfloat16")


def test_import_nanochat_missing_path_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("torch")
    missing = tmp_path / "no-such-checkpoint"
    status = run(train_cli.main, ["import-nanochat", str(missing), "--out", str(tmp_path / "out")])
    assert status not in (0, None)
    err = capsys.readouterr().err
    assert str(missing) in err or missing.name in err


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "import agent.cli, train.cli, evals.cli, nanocode.common\n"
        "for m in (agent.cli, train.cli, evals.cli):\n"
        "    try:\n"
        "        m.main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = {'jax', 'flax', 'torch', 'textual', 'numpy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)


@pytest.mark.parametrize("script, word", [("nanocode", "--model"), ("train", "import-nanochat"), ("evals", "humaneval")])
def test_installed_entry_points(script, word):
    path = shutil.which(script, path=sysconfig.get_path("scripts"))
    if path is None:
        pytest.skip(f"{script} is not installed in this environment (pip install -e .)")
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert word in out
