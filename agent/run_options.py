"""The command-line flags that fill agent/settings.py's SamplerSettings and TurnSettings, declared
once for every command that runs the agent (`nanocode`, `evals agent`, `train rollouts`, bench
scripts). Contract:
- FLAGS names each field's flag and help; its default is the field's default in agent/settings.py,
  so a setting has one default. A bool whose default is True is turned off by a `--no-...` flag,
  one whose default is False on by its flag; every flag's dest is the field's name.
- COMMANDS says which fields a command exposes; a field it does not expose keeps the default.
- OVERRIDES is the only place a command's default differs from the field's, each with its reason.
- OTHER_MEANING lists a command's own flag that shares a name with one here but fills no setting.
- add_options(parser, command) declares the flags; settings(args, command) builds the two values
  from them: no field is reached by reflection or by hand, so a renamed flag is an error, not a
  silently dropped setting. tests/test_run_options.py checks the tables against the dataclasses
  and each command's parser.
Trade-off: a command shows only the flags it exposes (a rollout has no --no-sandbox), so adding
a flag to a command is one line in COMMANDS, not a new add_argument with its own default. Light:
stdlib and agent.settings only, so `--help` stays instant.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from agent.settings import SamplerSettings, TurnSettings


@dataclass(frozen=True)
class Flag:
    name: str
    help: str
    metavar: str | None = None


FLAGS = {
    "temperature": Flag("--temperature", "sampling temperature, 0 = greedy"),
    "top_k": Flag("--top-k", "sample from the k likeliest tokens (0: off)"),
    "max_tokens": Flag("--max-tokens", "most tokens per model reply"),
    "seed": Flag("--seed", "sampling seed"),
    "ground": Flag("--no-ground", "the grammar does not ground paths, anchors and names in the "
                   "project"),
    "names": Flag("--no-whole-names", "Grep names and backticked spans in prose need not be whole "
                  "names of the project or the conversation"),
    "loop_guard": Flag("--no-loop-guard", "replies may repeat themselves: no mask or cut of a loop"),
    "copy_bias": Flag("--copy-bias", "copy bias toward tokens seen in the context (0: off)", "BETA"),
    "max_steps": Flag("--max-steps", "most tool calls per request before control returns"),
    "retries": Flag("--retries", "resamples of a failed or repeated call per step"),
    "network": Flag("--network", "let commands reach the network (the sandbox blocks it by default)"),
    "sandbox": Flag("--no-sandbox", "run commands outside the OS sandbox (then every command asks, "
                    "auto mode included)"),
    "question_guard": Flag("--no-question-guard", "a question's Edit runs in auto mode like a "
                           "change request's"),
}

# Fields deliberately without a flag: library knobs that every command runs at their default.
NOT_FLAGS = {
    "top_p": "no command samples the agent with nucleus sampling (`evals humaneval --top-p` is "
             "codegen's own, not an agent setting)",
    "reserve": "None derives it from max_tokens and the context (SamplerSettings.reserve_for)",
    "retry_temperature": "every command retries at the default 0.7",
    "constrain": "the grammar is what keeps a small model's calls well-formed; only code turns it off",
    "tool_timeout": "every command gives a Bash call the default 30 s",
    "memory": "every command reads the project's memory file",
    "snapshots": "undo; only the task harness turns it off, in code (tasks/harness.py)",
}

COMMANDS = {
    "nanocode": ("temperature", "top_k", "max_tokens", "seed", "max_steps", "network", "sandbox"),
    "evals agent": ("temperature", "max_tokens", "ground", "names", "loop_guard", "copy_bias",
                    "max_steps", "retries", "question_guard"),
    "train rollouts": ("max_tokens", "max_steps", "retries"),
    "bench copy_accuracy": ("max_tokens", "max_steps", "ground"),
}

# (command, field): (its default there, why it differs from agent/settings.py's)
OVERRIDES = {
    ("evals agent", "max_steps"): (15, "an eval task needs a few calls; a lower cap keeps a "
                                   "looping model from spending the suite's time"),
    ("train rollouts", "max_steps"): (10, "a rollout that needs more calls is no example worth "
                                      "training on, and a tight cap keeps rounds fast"),
    ("bench copy_accuracy", "max_steps"): (10, "as a rollout's: only whole turns (--turns) use it"),
    ("bench copy_accuracy", "max_tokens"): (512, "the bench reads first calls; long replies only "
                                            "cost time"),
}

# (command, flag): what that command's own flag of this name means instead of the setting
OTHER_MEANING = {
    ("evals agent", "--seed"): "the offset of the task seeds; each task samples with its own seed",
    ("train rollouts", "--seed"): "which draw of tasks; rollout k of a task samples with its seed + k",
    ("train rollouts", "--temperature"): "the temperature of rollouts 2.. of a task (the first is "
                                         "greedy)",
    ("bench copy_accuracy", "--seed"): "the offset of the task seeds, as evals agent's",
}

_DEFAULTS = {f.name: f.default for cls in (SamplerSettings, TurnSettings) for f in fields(cls)}


def default(command: str, field: str):
    """The default of `field`'s flag in `command`: its override, else the field's default."""
    return OVERRIDES.get((command, field), (_DEFAULTS[field],))[0]


def add_options(p: argparse.ArgumentParser, command: str) -> None:
    """Declare the settings flags `command` exposes (COMMANDS) on `p`, with its defaults."""
    for field in COMMANDS[command]:
        flag, value = FLAGS[field], default(command, field)
        if isinstance(value, bool):
            p.add_argument(flag.name, dest=field, action="store_false" if value else "store_true",
                           help=flag.help)
        else:
            p.add_argument(flag.name, dest=field, type=type(value), default=value,
                           metavar=flag.metavar, help=f"{flag.help} (default %(default)s)")


def settings(args: argparse.Namespace, command: str) -> tuple[SamplerSettings, TurnSettings]:
    """The settings `command`'s parsed flags choose; fields it does not expose keep their default."""
    chosen = {field: getattr(args, field) for field in COMMANDS[command]}

    def build(cls):
        return cls(**{f.name: chosen[f.name] for f in fields(cls) if f.name in chosen})
    return build(SamplerSettings), build(TurnSettings)
