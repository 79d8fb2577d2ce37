"""One entry point for a model's tool call: name + args -> the exact result text. Never raises.

The agent, `train synth` and the agentic evals all call `run_tool`, so the model sees the same
bytes in training and at inference. TOOL_ARGS is the single list of tool names and argument names
(the agent's logits mask and the data validator read it too). Checking a call's shape here, before
any tool runs, turns malformed model output into one `error:` line the model can learn from:
`unknown tool`, `unknown argument X for Read` (valid ones named), `missing argument X`.
Permissions are not decided here (tools/permissions.py); `allow_outside` is what the user approved.
"""
from __future__ import annotations

import threading

from tools.bash import bash
from tools.files import edit, read, unexpected
from tools.grep import grep

# name -> (required args, optional args), in the order the system prompt lists them
TOOL_ARGS = {
    "Read": (("file_path",), ("offset", "limit")),
    "Edit": (("file_path", "new_string"), ("old_string",)),
    "Grep": (("pattern",), ("path", "-A", "-B")),
    "Bash": (("command",), ()),
}
INT_ARGS = {"offset", "limit", "-A", "-B"}


def check_call(name, args) -> str | None:
    """The `error:` line for a malformed call, or None when its shape is right."""
    if name not in TOOL_ARGS:
        return "error: unknown tool"
    if not isinstance(args, dict):
        return "error: arguments must be a mapping of names to values"
    required, optional = TOOL_ARGS[name]
    for key in args:
        if key not in required and key not in optional:
            valid = ", ".join(required + optional)
            return f"error: unknown argument {key} for {name} (valid: {valid})"
    for key in required:
        if args.get(key) is None:
            return f"error: missing argument {key}"
    return None


def run_tool(root, name, args, *, allow_outside: bool = False, timeout: float | None = 30.0,
             cancel: threading.Event | None = None) -> str:
    """Run one call in the project at `root`. `timeout`/`cancel` apply to Bash."""
    try:
        err = check_call(name, args)
        if err:
            return err
        if name == "Read":
            return read(root, args, allow_outside=allow_outside)
        if name == "Grep":
            return grep(root, args, allow_outside=allow_outside)
        if name == "Edit":
            return edit(root, args)
        return bash(root, args, timeout=timeout, cancel=cancel)
    except Exception as e:  # noqa: BLE001 - tools never raise
        return unexpected(e)
