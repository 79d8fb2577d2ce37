"""The scripted oracle's side of a task: Task (a project, a prompt, a hidden check and the policy
that solves it), OracleRollout (the conversation a policy writes through the real tools,
optionally with a deliberate flaw), shows_flaw (whether a flawed replay visibly differs) and
oracle_first_call.

Contracts: a policy calls only `r.call`, `r.reject`, `r.user`, `r.done` and draws prose only from
`r.rng` / `r.pick`, never from the task's rng, so the same task replays to the same conversation,
and a subclass that overrides those four methods (and maybe `rng`) can replay a policy without
running any tool (train/rollouts.py does, to find where a model departs from the oracle). Every
tool call runs for real (`tools.dispatch.run_tool`), so each tool_result is byte for byte what the
agent sees. A flawed replay (`flaw`) keeps the same prose choices and adds one defect: off_style
prose, a closing "anything else?", a repeated safe call, a skipped Read, ... (shows_flaw lists
them); it needs the untouched project, so build the task again before replaying.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from nanocode.protocol import REJECTED, system_prompt
from tools.dispatch import run_tool
from tools.files import read_memory
from tasks.phrasing import ASKS_MORE, off_style
from tasks.projects import Project

SAFE_REPEAT = ("python -m pytest", "git ", "ls", "wc ")  # commands the `repeat` flaw may run twice


class OracleRollout:
    """A conversation being written by a policy; `flaw` makes it the rejected side of a pair."""

    def __init__(self, task: "Task", flaw: str | None = None):
        self.root, self.flaw = task.root, flaw
        self.rng = random.Random(f"{task.family}:{task.seed}:prose")
        self.flaw_rng = random.Random(f"{task.family}:{task.seed}:flaw")
        self.repeated = False
        self.messages = [{"role": "system", "content": task.system}, {"role": "user", "content": task.prompt}]

    def pick(self, *options: str) -> str:
        return self.rng.choice(options)

    def _prose(self, text: str, final: bool = False) -> str:
        return off_style(text, self.flaw_rng, final) if self.flaw == "off_style" else text

    def _append(self, thought: str, name: str, args: dict, result: str) -> None:
        self.messages.append({"role": "assistant", "content": self._prose(thought),
                              "tool_call": {"name": name, "args": dict(args)}})
        self.messages.append({"role": "tool_result", "content": result})

    def call(self, thought: str, name: str, args: dict) -> str:
        """Run the tool in the project and record the step; returns the tool's result."""
        if self.flaw == "no_read" and name == "Read":
            return ""
        result = run_tool(self.root, name, args)
        self._append(thought, name, args, result)
        safe = name in ("Read", "Grep") or (name == "Bash" and args["command"].startswith(SAFE_REPEAT))
        if self.flaw == "repeat" and not self.repeated and safe:
            self.repeated = True
            self._append("let me check that again.", name, args, run_tool(self.root, name, args))
        return result

    def reject(self, thought: str, name: str, args: dict) -> None:
        """The user refuses this call: nothing runs."""
        self._append(thought, name, args, REJECTED)

    def user(self, text: str) -> None:
        """The user's next message: after a rejected call the turn ends and the user speaks."""
        self.messages.append({"role": "user", "content": text})

    def done(self, text: str) -> None:
        """The final answer, which ends the conversation."""
        text = self._prose(text, final=True)
        if self.flaw == "asks_more":
            text += self.flaw_rng.choice(ASKS_MORE)
        self.messages.append({"role": "assistant", "content": text})


@dataclass
class Task:
    """One task on a project built on disk; `check` is hidden from the model."""
    family: str
    seed: int
    heldout: bool
    project: Project
    prompt: str
    check: Callable[..., bool]     # check(root, answer="") -> bool
    desc: str                      # the hidden check, in words
    policy: Callable[[OracleRollout], None]
    flaws: list[str]
    followup: str | None = None    # user_rejects: the user's message after the rejected call
    guarded: dict = field(default_factory=dict, repr=False)  # the tests as built (tools.test_guard.capture)
    tests_allowed: tuple = ()      # fnmatch patterns of guarded paths the request asks to change
    tests_view: Callable[[bytes], bytes] | None = None  # rewrite the request implies (a rename)
    world: str = "generated"       # where the project came from (tasks.families.WORLDS)

    @property
    def root(self) -> str:
        return self.project.root

    @property
    def system(self) -> str:
        """The agent's system prompt for this project (what the agent loop builds at inference)."""
        return system_prompt(self.root, read_memory(self.root))

    def rollout(self, flaw: str | None = None) -> dict:
        """Run the oracle (or a flawed replay) on the project as it is on disk now."""
        r = OracleRollout(self, flaw)
        self.policy(r)
        return {"messages": r.messages}


class _FirstCall(Exception):
    pass


class _StopAtFirstCall(OracleRollout):
    def call(self, thought, name, args):
        raise _FirstCall({"name": name, "args": dict(args)})
    reject = call


def oracle_first_call(task: Task) -> dict | None:
    """The oracle's first tool call {"name", "args"} (called or refused), or None when it answers
    without one: its policy run up to that call, no tool run, the project untouched."""
    try:
        task.policy(_StopAtFirstCall(task))
    except _FirstCall as e:
        return e.args[0]
    return None


def shows_flaw(flaw: str, chosen: dict, rejected: dict) -> bool:
    """Whether `rejected` visibly has `flaw` compared with `chosen`."""
    cm, rm = chosen["messages"], rejected["messages"]
    calls = lambda ms, n=None: [m["tool_call"] for m in ms if m.get("tool_call") and (n is None or m["tool_call"]["name"] == n)]
    if cm == rm:
        return False
    if flaw == "off_style":
        return any(m["content"][:1].isupper() for m in rm if m["role"] == "assistant")
    if flaw == "asks_more":
        return "anything else" in rm[-1]["content"].lower()
    if flaw == "repeat":
        c = calls(rm)
        return any(a == b for a, b in zip(c, c[1:]))
    if flaw == "no_read":
        return len(calls(rm, "Read")) < len(calls(cm, "Read")) and bool(calls(rm, "Edit"))
    if flaw == "wrong_file":
        return rm[-1]["content"] != cm[-1]["content"]
    if flaw == "retry":
        return sum(m["content"] == REJECTED for m in rm if m["role"] == "tool_result") >= 2
    return False
