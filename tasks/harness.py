"""Running an agent on a task and checking it: the one path `evals agent` (held-out tasks, scores)
and `train rollouts` (training tasks, on-policy data) share, so a score and a training label mean
the same thing.

Contracts: build_task builds the task as `train synth` does (the next project seed when a family
cannot use one). task_agent is the headless Agent of `nanocode -p`: mode auto (Edit and Bash run,
destructive commands are asked about and so refused), mode ask for user_rejects (whose user
refuses), a Policy with no settings files (the user's own settings never change a result), no
undo snapshots; its system prompt must equal task.system (the train/inference identity; callers
check it). drive sends the prompt and, when user_rejects' turn ends refused, the follow-up.
resolved is the hidden check's verdict on the final state; a check that raises (an edit made
pytest hang past its timeout) is a failure, reported, never raised. A final state whose tests,
conftest.py, pytest configuration or interpreter hooks differ from the ones the task was built with
(tools/test_guard.py, beyond what the request asked for) is tampered: not resolved, whatever the
check would say, and the files are named; the check is not even run, so the tree is left as the
agent left it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from agent.settings import TurnSettings
from nanocode.protocol import REJECTED
from tasks.families import make_task
from tasks.oracle import Task
from tasks.seeds import ATTEMPTS, attempt_seeds
from tools import test_guard


def build_task(family: str, seed: int, heldout: bool, base: str, world: str | None = None) -> Task:
    """make_task on the first of attempt_seeds(seed) whose project the family can use (no function
    with a parameter spec, ...); the last failure is raised. The project is under base/<that seed>."""
    for attempt, aseed in enumerate(attempt_seeds(seed)):
        try:
            return make_task(family, aseed, heldout=heldout, base=base, world=world)
        except Exception:  # noqa: BLE001 - re-raised (and reported) after the last attempt
            if attempt == ATTEMPTS - 1:
                raise


def task_agent(sampler, task: Task, root: str, turn=None):
    """The headless Agent for `task` in `root` (its project or a copy) with `sampler` (made for
    that root): mode auto (ask for user_rejects, whose user refuses), a Policy with no settings
    files, `turn` (agent/settings.TurnSettings) without undo snapshots."""
    from agent.loop.driver import Agent  # local: `train --help` and `evals --help` import tasks (KEEP_LOCAL)
    from tools.permissions import Policy  # local: as agent.driver
    mode = "ask" if task.followup is not None else "auto"
    return Agent(sampler, root, Policy(Path(os.path.realpath(root)), mode),
                 replace(turn or TurnSettings(), snapshots=False))


def drive(agent, task: Task) -> list:
    """The task's turns (TurnResults): its prompt, then (user_rejects, when refused) its follow-up."""
    turns = [agent.run_turn(task.prompt, approve=None)]
    if task.followup is not None and turns[0].stop_reason == "rejected":
        turns.append(agent.run_turn(task.followup, approve=None))
    return turns


@dataclass(frozen=True)
class Verdict:
    """A finished task judged: resolved or not, why the hidden check raised (None when it did
    not), and the guarded files the agent changed (sorted relative paths; then never resolved)."""
    resolved: bool
    check_error: str | None = None
    tampered: tuple[str, ...] = ()


def resolved(task: Task, answer: str, calls: list[dict], root: str | None = None) -> Verdict:
    """The hidden check on the final state in `root` (default task.root) given the final
    `answer`, unless the agent changed guarded files; user_rejects also needs the refusal to
    have happened (a call in `calls`, {"name", "args", "result"}, answered REJECTED): its check
    alone passes any non-empty answer that changed nothing."""
    root = root or task.root
    tampered = test_guard.tampered(root, task.guarded, task.tests_allowed, task.tests_view)
    if tampered:
        return Verdict(False, None, tuple(tampered))
    try:
        ok, error = bool(task.check(root, answer)), None
    except Exception as e:  # noqa: BLE001 - e.g. pytest past its timeout after a broken edit
        ok, error = False, f"{type(e).__name__}: {e}".splitlines()[0]
    return Verdict(ok and (task.followup is None or any(c["result"] == REJECTED for c in calls)), error)


def pattern_symbol(pattern: str) -> str:
    """A Grep pattern's symbol: its longest word once regex escapes and the keywords def, class,
    from and import are removed (`def mean_price\\(` -> mean_price), so two patterns for one name
    compare equal."""
    words = [w for w in re.findall(r"\w+", re.sub(r"\\.", " ", pattern))
             if w not in ("def", "class", "from", "import")]
    return max(words, key=len, default="")
