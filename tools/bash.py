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
inherited: the model reads whatever a command prints (``env``, ``/proc/self/environ``) and that
text goes to the model server and into saved sessions, so API keys and tokens the user exported
(NANOCODE_API_KEY, OPENAI_API_KEY, GITHUB_TOKEN, AWS_*, ...) must never reach a command. What
passes: the caller's values of ``ENV_ALLOW`` (search path, home, user, shell, locale, time zone,
temp dir, the active virtualenv or conda env) and of the names the caller lists in
``env_names`` (a settings choice: e.g. a PYTHONPATH the tests need), plus ``PAGER=cat``,
``GIT_PAGER=cat``, ``NANOCODE=1``, ``TERM=dumb`` and a per-call marker ``NANOCODE_CALL=<uuid>``
(see below). ``ENV_NEVER`` names (GIT_CONFIG_*, GIT_DIR and the other variables that point git
at another repository or config, or carry config values such as tokens) never pass: listing one
in ``env_names`` is an error; only settings that take git config away pass (``_no_config``).
Trade-off: a tool that needs another variable (a proxy, a compiler flag) does not see it until
the user lists it. stdin is /dev/null
(``cat`` and ``read`` see EOF at once). The command runs in a new session
(``start_new_session=True``), so it has no controlling terminal: anything that insists on
prompting through /dev/tty (sudo, ssh passwords) fails at once instead of stealing the
agent's terminal or hanging.

Process lifetime. Why a process group: ``bash -c`` forks pipelines, subshells and
background jobs; killing only the bash pid on timeout would leave its children running and,
worse, holding the write end of our output pipe, so we would never see EOF. The new session
makes the command the leader of its own process group, and ``os.killpg`` reaches every
descendant that did not move itself elsewhere. The rules:

* The output pipe is read incrementally (a ``select`` loop in the calling thread over the
  pipe and a pidfd of the bash process) into a bounded buffer: the first ``budget/2`` bytes and
  a ring of the last ``budget/2``, with a count of what was dropped. A command printing 1 GB
  costs ~``budget`` bytes of memory (plus one 1 MiB read chunk) and the time to stream it.
  (A select loop rather than a reader thread: nothing to stop or join, and exit, timeout,
  cancel and output are all handled at one place.)
* On timeout or cancel: SIGTERM (+ SIGCONT, for stopped jobs) to the whole group, up to
  ``TERM_GRACE`` seconds for it to go, then SIGKILL, repeated until nothing is left.
* When the bash process exits, the command is over: we keep reading for at most ``LINGER``
  seconds (to collect what quick background jobs still print), then the rest of the group,
  e.g. ``sleep 1000 &``, is killed the same way, the pipe is drained for at most
  ``DRAIN`` seconds and closed. We never wait for EOF forever: a process that escaped and
  holds the pipe just gets EPIPE/SIGPIPE on its next write. Trade-off: a command cannot leave
  a server running in the background (``nohup srv &``); the agent's calls are meant to be
  self-contained, and a leaked process would otherwise outlive the session unnoticed.
* What escapes a process group: anything that calls ``setsid``/``setpgid`` (``setsid cmd``,
  daemons that double-fork, ``nohup`` does not), and anything started outside our tree
  (``systemd-run``, ``at``, a docker daemon, ssh to another host). Best effort on Linux,
  without cgroups: every process whose environment (``/proc/<pid>/environ``, as it was at
  exec) carries this call's ``NANOCODE_CALL`` marker is treated as part of the group and is
  signalled and waited for too. That catches ``setsid``/daemonized grandchildren, which
  inherit the environment. Still escaping: a process started with a scrubbed environment in
  its own group or session (``setsid env -i cmd``), and anything started by another daemon.
  Scanning /proc costs a few ms per call; only our own processes are readable when not
  root, which is all we need. Without /proc (macOS), only the group is signalled, with a
  fixed short grace. Zombies are ignored (they are dead; a PID 1 that does not reap leaves them).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
import uuid

from tools import sandbox as sbx
from tools.sandbox_paths import restore

LINGER = 0.2       # after bash exits: how long to keep collecting output before killing the rest
TERM_GRACE = 0.5   # after SIGTERM: how long the processes get to exit before SIGKILL
DRAIN = 0.5        # after the kill: how long to read what is left in the pipe
READ_CHUNK = 1 << 20
_PIPE_SIZE = 1 << 20

MISSING = "error: missing argument command"
ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM",
             "TZ", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONDONTWRITEBYTECODE")
ENV_NEVER = ("GIT_CONFIG*", "GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES")


class _Capture:
    """Keeps the first ``head_cap`` and the last ``tail_cap`` bytes of a stream, counts the rest."""

    def __init__(self, budget: int):
        budget = max(int(budget), 2)
        self.head_cap = budget // 2
        self.tail_cap = budget - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if len(chunk) >= self.tail_cap:
            self.tail = bytearray(chunk[len(chunk) - self.tail_cap:])
        else:
            self.tail += chunk
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    def text(self) -> str:
        head, tail = bytes(self.head), bytes(self.tail)
        if self.total == len(head) + len(tail):
            return (head + tail).decode("utf-8", "replace")
        # Something was cut: snap to line boundaries when one is near, never split a character.
        nl = head.rfind(b"\n")
        if nl >= 0 and nl + 1 >= len(head) - len(head) // 4:
            head_text = head[: nl + 1].decode("utf-8", "replace")
            head_kept = nl + 1
        else:
            head_kept = len(head) - _incomplete_tail_len(head)
            head_text = head[:head_kept].decode("utf-8", "replace")
        nl = tail.find(b"\n")
        if 0 <= nl < len(tail) // 4:
            start = nl + 1
        else:
            start = 0
            while start < min(3, len(tail)) and 0x80 <= tail[start] < 0xC0:
                start += 1
        tail_text = tail[start:].decode("utf-8", "replace")
        cut = self.total - head_kept - (len(tail) - start)
        sep = "" if head_text.endswith("\n") or not head_text else "\n"
        return f"{head_text}{sep}... [{cut:,} bytes cut] ...\n{tail_text}"


def _incomplete_tail_len(data: bytes) -> int:
    """Length of an incomplete UTF-8 sequence at the end of ``data`` (0 when it ends cleanly)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return 0
        if b >= 0xC0:  # lead byte: how long its sequence should be
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return back if back < need else 0
    return 0


def _scan(pgid: int, marker: bytes) -> list[int] | None:
    """Live (non-zombie) pids in process group ``pgid`` or carrying ``marker`` in their environ.

    None when /proc is unavailable."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    me = os.getpid()
    found = []
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rfind(b")") + 2:].split()
            state, pgrp = fields[0], int(fields[2])
        except (OSError, IndexError, ValueError):
            continue
        if state in (b"Z", b"X", b"x"):
            continue
        if pgrp == pgid:
            found.append(pid)
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if marker in env:
            found.append(pid)
    return found


def _signal(pgid: int, pids: list[int] | None, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass
    for pid in pids or ():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


class _Run:
    def __init__(self, proc: subprocess.Popen, capture: _Capture, marker: bytes):
        self.proc = proc
        self.capture = capture
        self.marker = marker
        self.fd = proc.stdout.fileno()
        self.eof = False
        try:
            import fcntl
            fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)  # fewer wakeups on floods; best effort
        except (OSError, ImportError, ValueError, AttributeError):
            pass
        try:
            self.pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None  # fall back to polling (reaps early; pgid reuse is a negligible race)

    def read_once(self) -> None:
        try:
            chunk = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self.capture.add(chunk)
        else:
            self.eof = True

    def exited(self, wait: float) -> bool:
        """Read output for up to ``wait`` seconds; True as soon as the bash process has exited."""
        fds = [] if self.eof else [self.fd]
        if self.pidfd is not None:
            fds.append(self.pidfd)
        elif self.proc.poll() is not None:
            return True
        else:
            wait = min(wait, 0.02)
        if not fds:
            time.sleep(max(wait, 0))
            return self.proc.poll() is not None
        ready, _, _ = select.select(fds, [], [], max(wait, 0))
        if self.fd in ready:
            self.read_once()
        if self.pidfd is not None:
            return self.pidfd in ready
        return self.proc.poll() is not None

    def pump(self, seconds: float) -> None:
        """Read output until EOF or ``seconds`` have passed."""
        end = time.monotonic() + seconds
        while not self.eof:
            left = end - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                self.read_once()

    def kill_all(self) -> None:
        """SIGTERM the group (and marked escapees), wait up to TERM_GRACE, then SIGKILL until none is left."""
        pgid = self.proc.pid
        alive = _scan(pgid, self.marker)
        if alive is None:  # no /proc: signal blindly
            _signal(pgid, None, signal.SIGTERM)
            _signal(pgid, None, signal.SIGCONT)
            self.pump(min(TERM_GRACE, 0.1))
            _signal(pgid, None, signal.SIGKILL)
            return
        if not alive:
            return
        _signal(pgid, alive, signal.SIGTERM)
        _signal(pgid, alive, signal.SIGCONT)
        end = time.monotonic() + TERM_GRACE
        while alive and time.monotonic() < end:
            if self.eof:
                time.sleep(0.02)
            else:
                self.pump(0.02)
            alive = _scan(pgid, self.marker)
        for _ in range(50):  # a fork loop may need a few rounds
            if not alive:
                return
            _signal(pgid, alive, signal.SIGKILL)
            time.sleep(0.01)
            alive = _scan(pgid, self.marker)

    def close(self) -> None:
        for fd in (self.pidfd,):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:
            self.proc.stdout.close()
        except OSError:
            pass


def _matches(name: str, patterns) -> bool:
    return any(name == p or p.endswith("*") and name.startswith(p[:-1]) for p in patterns)


def command_env(env_names=()) -> dict:
    """The environment a command starts with (module docstring, "Environment"), without the
    per-call additions. Raises ValueError naming a bad `env_names` entry and the fix."""
    if isinstance(env_names, str):
        raise ValueError(f"env_names: {env_names!r} is one string; pass a list of names such as [\"PYTHONPATH\"]")
    for name in env_names:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"env_names: {name!r} is not a variable name; list plain names such as \"PYTHONPATH\"")
        if _matches(name, ENV_NEVER):
            raise ValueError(f"env_names: {name} cannot be passed to Bash (it points git at another "
                             f"repository or config); remove it from the list")
    return {k: v for k, v in os.environ.items()
            if (_matches(k, ENV_ALLOW) or k in env_names) and not _matches(k, ENV_NEVER) or _no_config(k, v)}


def _no_config(name: str, value: str) -> bool:
    """GIT_CONFIG_NOSYSTEM, and a GIT_CONFIG_GLOBAL/SYSTEM of /dev/null: they only take config away
    (the task harness's "no user git config", train/tasks/projects.setup_env), so they pass."""
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
    plus one ``(sandbox: removed ...)`` line when the command created a protected path that a
    mount could not cover. Fails closed: ``error: sandbox unavailable: ...`` where
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
        capture = _Capture(budget)
        env = command_env(env_names)
    except (TypeError, ValueError) as e:
        return f"error: bad tool settings: {e}".replace("\n", " ")
    call_id = uuid.uuid4().hex
    env.update(PAGER="cat", GIT_PAGER="cat", NANOCODE="1", TERM="dumb", NANOCODE_CALL=call_id)
    argv, guarded, groups = ["bash", "-c", command], {}, []
    try:
        if sandbox is not None and sandbox.enabled:
            probe = sbx.bash_sandbox()
            if not probe["available"]:
                return f"error: sandbox unavailable: {probe['note']}".replace("\n", " ")
            argv, guarded, groups = sbx.prepare(root, argv, sandbox, LINGER)
            env["TMPDIR"] = "/tmp"
        proc = subprocess.Popen(argv, cwd=os.fspath(root), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
    except (OSError, ValueError, TypeError) as e:
        for d in groups:
            sbx.remove_cgroup(d)
        return f"error: cannot run command: {e}".replace("\n", " ")

    run = _Run(proc, capture, f"NANOCODE_CALL={call_id}".encode())
    error = None
    try:
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        while True:
            wait = 0.05 if cancel is not None else 0.5
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if run.exited(wait):
                break
            if cancel is not None and cancel.is_set():
                error = "error: cancelled"
                break
            if deadline is not None and time.monotonic() >= deadline:
                error = f"error: timed out after {_format_secs(timeout)} s"
                break
        if error is None:
            run.pump(LINGER)  # quick background jobs may still print
        run.kill_all()
        run.pump(DRAIN)
    finally:
        # Whatever happened above (even KeyboardInterrupt), leave nothing running.
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        run.close()
        code = proc.wait()
        for d in groups:
            sbx.remove_cgroup(d)
        fixed = restore(guarded)

    out = run.capture.text().rstrip("\n")
    notes = "".join(f"\n(sandbox: undid the command's change to {p})" for p in fixed)
    if error is not None:
        return (f"{out}\n{error}" if out else error) + notes
    lines = [out or "(no output)"]
    if code < 0:
        code = 128 - code
    if code != 0:
        lines.append(f"(exit code {code})")
    return "\n".join(lines) + notes
