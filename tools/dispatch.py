"""One entry point for a model's tool call: name + args -> the exact result text. Never raises.

The agent, `train synth` and the agentic evals all call `run_tool`, so the model sees the same
bytes in training and at inference. The tools and their arguments are nanocode/protocol.py's TOOLS.
Checking a call's shape (protocol.check_call) before any tool runs turns malformed model output
into one `error:` line the model can learn from: `unknown tool`, `unknown argument X for Read` (valid ones named), `missing argument X`.
Permissions are not decided here (tools/permissions.py); `allow_outside` is what the user approved.
"""
from __future__ import annotations

import threading

from nanocode.protocol import check_call
from tools.bash import bash
from tools.files import edit, read, unexpected
from tools.grep import grep
from tools.sandbox import Sandbox


def run_tool(root, name, args, *, allow_outside: bool = False, same_as=None, timeout: float | None = 30.0,
             cancel: threading.Event | None = None, sandbox: Sandbox | None = None,
             env_names: tuple[str, ...] = ()) -> str:
    """Run one call in the project at `root`. `same_as` ((st_dev, st_ino) of what the permission
    check judged) makes Read and Grep refuse any other file or folder. `timeout`/`cancel`/
    `sandbox` (tools/sandbox.py; None: unsandboxed) and `env_names` (variables passed to the
    command besides tools/bash.py's allow-list) apply to Bash."""
    try:
        err = check_call(name, args)
        if err:
            return err
        if name == "Read":
            return read(root, args, allow_outside=allow_outside, same_as=same_as)
        if name == "Grep":
            return grep(root, args, allow_outside=allow_outside, same_as=same_as)
        if name == "Edit":
            return edit(root, args)
        return bash(root, args, timeout=timeout, cancel=cancel, sandbox=sandbox, env_names=env_names)
    except Exception as e:  # noqa: BLE001 - tools never raise
        return unexpected(e)
