"""Hooks: the user's own shell commands around the agent's tool calls and at the end of a turn, in
the shape Claude Code uses (`"hooks": {"PreToolUse": [{"matcher": "Bash|Edit", "command":
"./check.sh", "timeout": 30}], ...}` in a settings file). EVENTS is the table: PreToolUse runs for
a call the permissions did not deny, before the user is asked, and exit 2 blocks it (`error:
blocked by a hook: <stderr>`); PostToolUse runs after a call, and exit 2 appends its stderr to the
result as a note; Stop runs once at the end of every turn. Any other failure or a timeout is a
warning and the call goes on. matcher: a regex the whole tool name must match (absent, "" or
"*": every tool). stdin: one JSON object {"event", "session_id", "cwd", ...what EVENTS adds}.

A hook runs with `bash -c` in the project root, in the same OS sandbox and scrubbed environment as
a Bash call (the project's Python environment included; plus NANOCODE_HOOK=<event>), with a
timeout (default 30 s). Hooks come only from the user settings file and project settings the
user accepted; an event's hooks run in settings order, and the first PreToolUse hook that blocks
ends the list.

Trade-offs: PreToolUse runs before the approval, because a hook is a policy the user wrote, like
a deny rule, and a call it blocks is never put to the user; so it also sees calls the user then
rejects (they get no PostToolUse). Without a sandbox the hooks still run, unsandboxed (they are
the user's own commands, as Claude Code runs them), and a Status says so once per session.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import threading
from dataclasses import dataclass, replace

from nanocode.protocol import BLOCKED, CANCELLED, Status
from tools import process
from tools import sandbox as sbx
from tools.bash import LINGER, TERM_GRACE, command_env
from tools.permissions import HOOK_EVENTS, Hook
from tools.sandbox_paths import restore

EVENTS = {  # event: (what its stdin adds, what exit 2 does)
    "PreToolUse": (("tool_name", "tool_input"), "block"),
    "PostToolUse": (("tool_name", "tool_input", "tool_result"), "note"),
    "Stop": (("stop_reason",), "warn"),
}
assert tuple(EVENTS) == HOOK_EVENTS  # tools/permissions.py validates the settings by these names

INPUT = "nanocode-hook-input.json"  # in the hook's /tmp
KEPT = 4000  # characters of a hook's stderr kept for a message


@dataclass(frozen=True)
class Ran:
    """How one hook run ended: `code` its exit status (128 + S for a signal), None when it did
    not finish (`problem` says why: timed out, cancelled, cannot run); `stderr` cut to KEPT;
    `fixed`: protected paths it created or re-pointed, undone (tools/sandbox_paths.restore)."""
    code: int | None
    stderr: str = ""
    problem: str = ""
    fixed: tuple[str, ...] = ()


def run_hook(root, hook: Hook, payload: dict, sandbox: sbx.Sandbox | None, env_names=(),
             cancel: threading.Event | None = None) -> Ran:
    """Run `hook.command` in `root` with `payload` as JSON on stdin (module docstring), in
    `sandbox` (None or not enabled: unsandboxed). Never raises."""
    try:
        return _run_hook(os.path.realpath(os.fspath(root)), hook, payload,
                         sandbox if sandbox is not None and sandbox.enabled else None, env_names, cancel)
    except (OSError, ValueError, TypeError) as e:  # no temp dir, a bad env name, a command that cannot start
        return Ran(None, problem=f"cannot run it: {e}".replace("\n", " "))


def _run_hook(root: str, hook: Hook, payload: dict, sandbox, env_names, cancel) -> Ran:
    with tempfile.TemporaryDirectory(prefix="nanocode-hook-") as tmp, \
            open(os.devnull, "wb") as out, tempfile.TemporaryFile() as err:  # stdout: ignored
        with open(os.path.join(tmp, INPUT), "w", encoding="utf-8") as f:
            json.dump(payload, f)
        inside = "/tmp" if sandbox is not None else tmp  # the sandbox mounts `tmp` as its /tmp
        argv = ["bash", "-c", f"exec 0<{shlex.quote(os.path.join(inside, INPUT))}\n{hook.command}"]
        env = {**command_env(env_names, root=root), "NANOCODE": "1", "NANOCODE_HOOK": hook.event, "TERM": "dumb",
               "PAGER": "cat", "GIT_PAGER": "cat"}
        guarded, groups = {}, []
        try:
            if sandbox is not None:
                argv, guarded, groups = sbx.prepare(root, argv, replace(sandbox, tmp=tmp), LINGER)
                env["TMPDIR"] = "/tmp"
            ran = process.run(argv, cwd=root, env=env, timeout=hook.timeout, cancel=cancel, files=(out, err),
                              grace=TERM_GRACE, mark=True)
        finally:
            for d in groups:
                sbx.remove_cgroup(d)
            fixed = tuple(restore(guarded))
        err.seek(0)
        stderr = err.read(KEPT * 4).decode("utf-8", "replace").strip()[:KEPT]
    if ran.timed_out or ran.cancelled:
        why = "cancelled" if ran.cancelled else f"timed out after {hook.timeout:g} s"
        return Ran(None, stderr, why, fixed)
    code = ran.returncode
    return Ran(128 - code if code < 0 else code, stderr, "", fixed)


def matches(hook: Hook, tool: str | None) -> bool:
    """The hook runs for `tool` (None: a Stop, no tool)."""
    return tool is None or hook.matcher is None or re.fullmatch(hook.matcher, tool) is not None


class Hooks:
    """The agent's hooks: `policy.hooks` (tools/permissions.Hook), run in `root` in `sandbox`
    (the agent's; None: unsandboxed). The driver calls `before`, `after` and `stop`; each costs
    nothing when no hook matches."""

    def __init__(self, root, policy, sandbox: sbx.Sandbox | None):
        self.root, self.policy, self.sandbox = root, policy, sandbox
        self._said_unsandboxed = False

    def _run(self, event: str, tool: str | None, fields: dict, session_id: str, emit, cancel=None):
        """Each matching hook of `event` in order, as (hook, Ran); a generator, so a caller may
        stop at the first that blocks. Warns (Status) about every failure but exit 2."""
        for hook in [h for h in self.policy.hooks if h.event == event and matches(h, tool)]:
            if self.sandbox is None and not self._said_unsandboxed:
                self._said_unsandboxed = True
                emit(Status("hooks run without an OS sandbox here (none is in effect)"))
            payload = {"event": event, "session_id": session_id, "cwd": self.root, **fields}
            ran = run_hook(self.root, hook, payload, self.sandbox, tuple(self.policy.env), cancel)
            shown = " ".join(hook.command.split())
            name = f"{event} hook `{shown if len(shown) <= 60 else shown[:57] + '...'}`"
            for path in ran.fixed:
                emit(Status(f"{name}: undid its change to {path} (protected)"))
            if ran.problem and ran.problem != "cancelled":
                emit(Status(f"{name}: {ran.problem}; going on"))
            elif ran.code not in (0, 2, None) or (ran.code == 2 and EVENTS[event][1] == "warn"):
                first = ran.stderr.splitlines()[0] if ran.stderr else "no message"
                emit(Status(f"{name}: exit {ran.code}: {first}; going on"))
            yield hook, ran

    def before(self, name: str, args: dict, session_id: str, emit, cancel) -> tuple[str, str | None] | None:
        """PreToolUse: None to go on, or (the call's result, the stop reason) when a hook blocked
        it (exit 2) or Ctrl-C stopped a hook (then the turn is cancelled, nothing ran)."""
        fields = {"tool_name": name, "tool_input": args}
        for _, ran in self._run("PreToolUse", name, fields, session_id, emit, cancel):
            if ran.problem == "cancelled":
                return CANCELLED, "cancelled"
            if ran.code == 2:
                return BLOCKED + (ran.stderr or "(the hook gave no reason)"), None
        return None

    def after(self, name: str, args: dict, result: str, session_id: str, emit, cancel) -> str:
        """PostToolUse: the result the model reads, with the stderr of each hook that exited 2
        appended as a note."""
        fields = {"tool_name": name, "tool_input": args, "tool_result": result}
        notes = [ran.stderr for _, ran in self._run("PostToolUse", name, fields, session_id, emit, cancel)
                 if ran.code == 2 and ran.stderr]
        return "\n".join([result] + [f"(note from a hook: {n})" for n in notes])

    def stop(self, stop_reason: str, session_id: str, emit) -> None:
        """Stop: every Stop hook once, at the end of a turn; failures are warnings."""
        for _ in self._run("Stop", None, {"stop_reason": stop_reason}, session_id, emit):
            pass
