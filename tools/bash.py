"""The Bash tool: run one shell command in the project root and return its result text.

Result format (what the model reads; train synth writes the same):

* stdout and stderr as produced, interleaved in order (the command runs with stderr merged
  into stdout, so both go through one pipe); decoded as UTF-8 with ``errors="replace"``;
  trailing newlines stripped; ``(no output)`` when nothing (or only newlines) was printed;
* a final ``(exit code N)`` line when N != 0 (a main process killed by signal S reports the
  shell's convention, 128 + S);
* output over ``budget`` bytes keeps its first ``budget/2`` and last ``budget/2`` bytes with a
  marker line ``... [12,345 bytes cut] ...`` between them; both cuts snap to a line boundary
  when one is near (within a quarter of the kept part), and never split a UTF-8 character;
* errors are one line: ``error: missing argument command`` (absent, empty or non-string
  ``command``), ``error: timed out after N s``, ``error: cancelled`` (the cancel event, i.e.
  Ctrl-C in the agent) and ``error: cannot run command: ...`` (bash missing, bad root).
  Decision: on timeout or cancel, whatever output arrived before is kept, formatted as above
  (head+tail, or nothing when there was none: no ``(no output)``), and the error line follows
  it as the last line, without an exit code line. The model thus still sees what the command
  printed (e.g. a test runner's progress before it hung).

Environment: built from an allow-list (``ENV_ALLOW``, the same with and without the sandbox), not
inherited, with the project's Python environment (tools/project_env.py: PATH and VIRTUAL_ENV
name the project's venv or the user's, never nanocode's own): the model reads whatever a command prints (``env``, ``/proc/self/environ``) and that
text goes to the model server and into saved sessions, so API keys and tokens the user exported
(NANOCODE_API_KEY, OPENAI_API_KEY, GITHUB_TOKEN, AWS_*, ...) must never reach a command. What
passes: the caller's values of ``ENV_ALLOW`` (search path, home, user, shell, locale, time zone,
temp dir, the active virtualenv or conda env, Python's bytecode and pytest's plugin-autoload
switches) and of the names the caller lists in
``env_names`` (a settings choice: e.g. a PYTHONPATH the tests need), plus ``PAGER=cat``,
``GIT_PAGER=cat``, ``NANOCODE=1``, ``TERM=dumb`` and a per-call marker ``NANOCODE_CALL=<uuid>``
(see below). ``ENV_NEVER`` names (GIT_CONFIG_*, GIT_DIR and the other variables that point git
at another repository or config, or carry config values such as tokens) never pass: listing one
in ``env_names`` is an error; only settings that take git config away pass (``_no_config``).
Trade-off: a tool that needs another variable (a proxy, a compiler flag) does not see it until
the user lists it. stdin is /dev/null (``cat`` and ``read`` see EOF at once). The command runs
in a new session, so it has no controlling terminal: anything that insists on prompting through
/dev/tty (sudo, ssh passwords) fails at once instead of stealing the agent's terminal or hanging.

Process lifetime: tools/process.py runs the command (its contract): its own session and process
group, output read incrementally into a bounded head+tail buffer (a command printing 1 GB costs
about ``budget`` bytes of memory), and after it ends everything it started is killed, a normal
exit included. Bash's choices there: after bash exits, output is still collected for ``LINGER``
seconds (what quick background jobs print) before the rest of the group, e.g. ``sleep 1000 &``,
is killed; the kill is SIGTERM, ``TERM_GRACE`` seconds, then SIGKILL; and the call is marked
(``NANOCODE_CALL``), so descendants that left the group with ``setsid`` are killed too.
Trade-off: a command cannot leave a server running in the background (``nohup srv &``); the
agent's calls are meant to be self-contained, and a leaked process would otherwise outlive the
session unnoticed.
"""
from __future__ import annotations

import os
import threading

from tools import process, project_env
from tools import sandbox as sbx
from tools.sandbox_paths import restore

LINGER = 0.2       # after bash exits: how long to keep collecting output before killing the rest
TERM_GRACE = 0.5   # after SIGTERM: how long the processes get to exit before SIGKILL

MISSING = "error: missing argument command"
ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM",
             "TZ", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONDONTWRITEBYTECODE",
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
ENV_NEVER = ("GIT_CONFIG*", "GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES")


def _matches(name: str, patterns) -> bool:
    return any(name == p or p.endswith("*") and name.startswith(p[:-1]) for p in patterns)


def command_env(env_names=(), *, root) -> dict:
    """The environment a command run in project `root` starts with (module docstring,
    "Environment"), without the per-call additions; PATH and VIRTUAL_ENV as
    tools/project_env.choose(root) decides. Raises ValueError naming a bad `env_names` entry and
    the fix."""
    if isinstance(env_names, str):
        raise ValueError(f"env_names: {env_names!r} is one string; pass a list of names such as [\"PYTHONPATH\"]")
    for name in env_names:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"env_names: {name!r} is not a variable name; list plain names such as \"PYTHONPATH\"")
        if _matches(name, ENV_NEVER):
            raise ValueError(f"env_names: {name} cannot be passed to Bash (it points git at another "
                             f"repository or config); remove it from the list")
    env = {k: v for k, v in os.environ.items()
           if (_matches(k, ENV_ALLOW) or k in env_names) and not _matches(k, ENV_NEVER) or _no_config(k, v)}
    return project_env.choose(root).apply(env)


def _no_config(name: str, value: str) -> bool:
    """GIT_CONFIG_NOSYSTEM, and a GIT_CONFIG_GLOBAL/SYSTEM of /dev/null: they only take config away
    (the task harness's "no user git config", tasks/projects.setup_env), so they pass."""
    return (name == "GIT_CONFIG_NOSYSTEM" or name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM")
            and value == os.devnull)


def _format_secs(t: float) -> str:
    """30.0 -> "30", 1.5 -> "1.5", 0.25 -> "0.25"."""
    if float(t).is_integer():
        return str(int(t))
    return f"{t:.3f}".rstrip("0").rstrip(".")


def bash(root, args: dict, *, timeout: float | None = 30.0, cancel: threading.Event | None = None,
         budget: int = 30_000, sandbox: sbx.Sandbox | None = None, env_names: tuple[str, ...] = ()) -> str:
    """Run ``args["command"]`` with ``bash -c`` in ``root``; return the exact result text. Never raises.

    ``timeout`` in seconds (None: no limit), ``cancel`` stops the command when set, ``budget`` is
    the number of output bytes kept (head and tail halves). ``sandbox`` (enabled): run it inside
    tools/sandbox.py's namespaces (writes only to the project and a private /tmp, protected
    paths read-only, no network unless asked, nothing outlives the call); same result format,
    plus one ``(sandbox: undid the command's change to PATH)`` line per protected path that a
    mount could not cover and the command created or re-pointed. Fails closed: ``error: sandbox unavailable: ...`` where
    ``sbx.bash_sandbox()`` says it does not work. ``env_names``: variables of the caller's
    environment the command also gets (module docstring, "Environment"); a bad one is
    ``error: bad tool settings: env_names: ...``."""
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str):
        return MISSING if command is None else "error: argument command must be a string"
    if not command.strip():
        return MISSING
    try:
        timeout = None if timeout is None else max(float(timeout), 0.0)
        budget = int(budget)
        env = command_env(env_names, root=root)
    except (TypeError, ValueError) as e:
        return f"error: bad tool settings: {e}".replace("\n", " ")
    env.update(PAGER="cat", GIT_PAGER="cat", NANOCODE="1", TERM="dumb")
    argv, guarded, groups = ["bash", "-c", command], {}, []
    try:
        if sandbox is not None and sandbox.enabled:
            probe = sbx.bash_sandbox()
            if not probe["available"]:
                return f"error: sandbox unavailable: {probe['note']}".replace("\n", " ")
            argv, guarded, groups = sbx.prepare(root, argv, sandbox, LINGER)
            env["TMPDIR"] = "/tmp"
        ran = process.run(argv, cwd=os.fspath(root), env=env, timeout=timeout, cancel=cancel, budget=budget,
                          linger=LINGER, grace=TERM_GRACE, mark=True)
    except (OSError, ValueError, TypeError) as e:
        return f"error: cannot run command: {e}".replace("\n", " ")
    finally:
        for d in groups:
            sbx.remove_cgroup(d)
        fixed = restore(guarded)

    out = ran.output.rstrip("\n")
    notes = "".join(f"\n(sandbox: undid the command's change to {p})" for p in fixed)
    error = ("error: cancelled" if ran.cancelled else
             f"error: timed out after {_format_secs(timeout)} s" if ran.timed_out else None)
    if error is not None:
        return (f"{out}\n{error}" if out else error) + notes
    code = ran.returncode
    lines = [out or "(no output)"]
    if code < 0:
        code = 128 - code
    if code != 0:
        lines.append(f"(exit code {code})")
    return "\n".join(lines) + notes
