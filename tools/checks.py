"""How our own checks run code a model edited: the one place that decides it.

A check (a task's hidden check, tasks/projects.run_tests and run_python; the tests a verdict
runs, tools/test_guard.run_tests, for best-of's verifier) executes the project as the model left
it: with `evals agent --base-url` or `train rollouts --base-url` that is whatever a server sent.
`run` starts such a command the way the Bash tool starts the model's own (tools/bash.py):

* environment: the allow-list (tools.bash.command_env: no API keys or tokens of the caller; the
  project's Python environment, tools/project_env.py), plus ``PYTHONDONTWRITEBYTECODE=1`` and
  what the caller adds (a pytest switch);
* the OS sandbox (tools/sandbox.py, `prepare`: the project root writable, its git hooks and
  config read-only, a private /tmp, no network unless the given Sandbox allows it, nothing
  outlives the call) whenever its probe (`tools.sandbox.bash_sandbox`) says it works here;
* tools/process.py: its own process group, killed whole at the timeout and after a normal exit,
  marked (descendants that called setsid are found), output kept to a bounded head and tail.

Where no sandbox can start (a host without user namespaces, such as the TPU chip's), a check
runs only when the user chose that: ``--unsandboxed`` on the command that runs checks (evals
agent and the code evals, train synth and rollouts, nanocode --best-of), which puts
``UNSANDBOXED_ENV=1`` in the environment, so worker processes inherit the choice (an exported
variable is the same choice, e.g. train/v5e.sh on the chip's throwaway host). Without it `run`
raises Refused, and `gate` (through `gate_or_exit`, called by those commands before any work)
refuses in one line that names the way on, exit status 2. With it the checks keep the environment rules and the group kill, but files
outside the project, the network and processes that leave the group are not contained; `gate`
says so on stderr and the command records ``"unsandboxed": true`` in its result.

Trade-off: a sandboxed check costs one more interpreter start and a few mounts (the bootstrap)
plus a `git config` for the project's hooks path; bench/check_cost.py measures it per check.
"""
from __future__ import annotations

import os
import sys

from tools import process
from tools import sandbox as sbx
from tools.bash import command_env
from tools.sandbox_paths import restore

UNSANDBOXED_ENV = "NANOCODE_UNSANDBOXED"  # "1": checks may run without the OS sandbox
FLAG = "--unsandboxed"


class Refused(RuntimeError):
    """A check was asked to run model-edited code where no sandbox works and nobody chose to."""


def allowed() -> bool:
    """Whether the user chose to run checks without the sandbox (UNSANDBOXED_ENV=1)."""
    return os.environ.get(UNSANDBOXED_ENV) == "1"


def missing() -> str | None:
    """None where the Bash sandbox works here, else why not (the probe's note)."""
    probe = sbx.bash_sandbox()
    return None if probe["available"] else probe["note"] or "unavailable"


def add_flag(parser) -> None:
    """FLAG on the argparse parser of a command that runs checks (its dest: `unsandboxed`)."""
    parser.add_argument(FLAG, action="store_true", help="where no OS sandbox can start (no user "
                        "namespaces), run the checks of model-written code without it, saying so "
                        "on stderr: only on a throwaway machine")


def refusal(what: str, why: str) -> str:
    """The one-line refusal: what would run model code, why no sandbox, the two ways on."""
    return (f"no OS sandbox here ({why}): {what} runs model-written code only inside one; allow "
            f"unprivileged user namespaces (`unshare -r true` must work), or pass {FLAG} on a "
            "throwaway machine")


def gate(what: str, flag: bool, probe=missing) -> bool:
    """Before a command runs any check: whether its checks will run unsandboxed. `flag`: its
    --unsandboxed (True puts UNSANDBOXED_ENV in os.environ, for the workers it starts);
    `probe()`: None where the sandbox works, else why not. Raises Refused (the one-line
    message) where there is none and no choice was made; prints the warning line where the
    choice lets the run go on unsandboxed."""
    if flag:
        os.environ[UNSANDBOXED_ENV] = "1"
    why = probe()
    if why is None:
        return False
    if not allowed():
        raise Refused(refusal(what, why))
    print(f"warning: no OS sandbox here ({why}); {FLAG}: {what} runs model-written code without "
          "one: files outside its folder, the network and processes that leave its group are not "
          "contained", file=sys.stderr)
    return True


def gate_or_exit(what: str, flag: bool, probe=missing) -> bool:
    """`gate` for a command's entry point: on Refused its line goes to stderr as `error: ...` and
    the process exits with status 2 (SystemExit), the status of any refused argument, so every
    command refuses alike. Returns whether the checks will run unsandboxed."""
    try:
        return gate(what, flag, probe)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def run(argv: list[str], cwd: str, timeout: float, *, env: dict | None = None,
        sandbox: sbx.Sandbox | None = None) -> process.Outcome:
    """Run `argv` in `cwd` as a check (module docstring): sandboxed as `sandbox` says (None: the
    default Sandbox, network off) wherever the probe finds one, else only with the user's
    choice; output kept to process.BUDGET bytes. `env`: variables added to the allow-listed
    environment. Raises Refused (no sandbox, no choice) and OSError (the command cannot start)."""
    env = {**command_env(root=cwd), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    guarded, groups = {}, []
    if (why := missing()) is None:
        argv, guarded, groups = sbx.prepare(cwd, argv, sandbox or sbx.Sandbox())
        env["TMPDIR"] = "/tmp"
    elif not allowed():
        raise Refused(refusal("this check", why))
    try:
        return process.run(argv, cwd=cwd, env=env, timeout=timeout, mark=True)
    finally:
        for d in groups:
            sbx.remove_cgroup(d)
        restore(guarded)
