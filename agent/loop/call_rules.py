"""When a model's call is taken back and resampled, and when a repeat ends the turn: the rules of
one user turn's calls, kept apart from running them (agent/loop/driver.py) so they can be read and
tested alone.

- A reply whose call is malformed, or repeats a call made since the turn's last change (a
  successful Edit or Bash: after one, reading the same file again is right), is taken back
  before anything runs.
- A call whose tool reports an `error:` that changed nothing (protocol.Tool.error_changes_nothing:
  Read, Grep, a refused Edit) is taken back after it ran: the model sees a fresh chance instead
  of its own failure. Not a call a hook blocked (protocol.BLOCKED): that is the user's verdict,
  and the model reads why.
- At most `retries` take-backs per step; then the call stands, and the same call three times in
  a row ends the turn (protocol.REPEATED).
A call's identity is its name and arguments (`call_key`). `tools` is the session's table (ours and
the MCP tools offered: protocol.Tool says whether a call changes files, whether its error does).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from nanocode.protocol import BLOCKED, TOOLS


def call_key(name: str, args: dict) -> str:
    return json.dumps([name, args], sort_keys=True)


@dataclass
class CallRules:
    """The state of one turn: take-backs spent on the current step, calls since the last change,
    the last three calls made."""
    retries: int
    tools: dict = field(default_factory=lambda: dict(TOOLS))
    attempt: int = 0
    seen: set[str] = field(default_factory=set)
    recent: list[str] = field(default_factory=list)

    def take_back(self, key: str, malformed: bool, cancelled: bool) -> str | None:
        """Why a reply's call should be resampled before it runs, or None: it stands."""
        if self.attempt >= self.retries or cancelled:
            return None
        if malformed:
            return "a malformed call"
        return "a repeat of an earlier call" if key in self.seen else None

    def made(self, key: str) -> bool:
        """Note a call that stands; True when it is the same call three times in a row."""
        self.recent = (self.recent + [key])[-3:]
        return len(self.recent) == 3 and len(set(self.recent)) == 1

    def take_back_failure(self, name: str, result: str, cancelled: bool) -> str | None:
        """Why a call that ran should be taken back (its error changed nothing), or None."""
        tool = self.tools.get(name)
        if (tool is None or not tool.error_changes_nothing or not result.startswith("error:")
                or result.startswith(BLOCKED) or self.attempt >= self.retries or cancelled):
            return None
        self.recent.pop()  # it is taken back: not one of the calls in a row
        return "a failed call"

    def resampled(self) -> int:
        """One more take-back on this step; returns how many so far."""
        self.attempt += 1
        return self.attempt

    def kept(self, name: str, key: str, result: str) -> None:
        """A call's result goes into the conversation: the next step starts afresh, and after a
        change every earlier call may rightly recur."""
        self.attempt = 0
        changed = name in self.tools and self.tools[name].changes_files and not result.startswith("error:")
        self.seen = (set() if changed else self.seen) | {key}
