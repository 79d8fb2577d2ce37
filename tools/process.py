"""One command's whole life as a process group: start, wait, read, kill everything, reap.

`run(argv, ...)` is the only place that starts a command it must later stop: the Bash tool
(tools/bash.py), the checks that run model-edited code (tools/checks.py: task checks, the
verifier's test runs) and the evals' generated programs (evals/sandbox.py). The contract:

* Start: stdin is /dev/null (``cat`` and ``read`` see EOF at once), the caller's `env` exactly
  (never inherited), `cwd`, and a new session (``start_new_session=True``): no controlling
  terminal, so anything that prompts through /dev/tty (sudo, ssh passwords) fails at once instead
  of stealing the agent's terminal, and the command leads its own process group. Why a group:
  ``bash -c`` forks pipelines, subshells and background jobs; killing only the main pid would
  leave them running and holding the write end of the output pipe. `mark` also puts a per-call
  ``NANOCODE_CALL=<uuid>`` in the environment (see the kill). A command that cannot start raises
  OSError (ValueError for an argument Popen rejects); nothing is left behind then. On Linux the
  command's first process also gets the parent-death signal SIGKILL (``PR_SET_PDEATHSIG``, set by
  util-linux ``setpriv --pdeathsig KILL --`` put in front of `argv`, which execs in place: same
  pid, group and environment; not used where setpriv lacks the option, e.g. macOS, nor when
  ``argv[0]`` is not an executable file, so that start error stays Popen's). The kernel sends it
  when the *thread* that forked the command exits: `run` blocks in its calling thread until the
  command has been killed and reaped, so that only happens when the caller dies (see "What
  escapes").
* Output: stdout and stderr merged into one pipe, read incrementally (a ``select`` loop in the
  calling thread over the pipe and a pidfd of the main process) into `Capture`: the first
  ``budget/2`` bytes and a ring of the last ``budget/2``, with a count of what was dropped. A
  command printing 1 GB costs about ``budget`` bytes of memory plus one read chunk, and the time
  to stream it. (A select loop rather than a reader thread: nothing to stop or join, and exit,
  timeout, cancel and output are handled at one place.) Or, with `files`, stdout and stderr go to
  the caller's two open files and nothing is read (the evals cap them with RLIMIT_FSIZE).
* End: the main process exits, `timeout` seconds pass (None: no limit) or the `cancel` event is
  set, whichever comes first. After an exit, output is still collected for `linger` seconds
  (what quick background jobs print).
* Kill, after EVERY end, a normal exit included: SIGTERM (+ SIGCONT, for stopped jobs) to the
  whole group, up to `grace` seconds for it to go, then SIGKILL, repeated until nothing is left
  (a fork loop needs a few rounds); `grace` 0 sends SIGKILL at once. So a background job
  (``sleep 1000 &``, ``nohup srv &``) never outlives its command: the calls are meant to be
  self-contained, and a leaked process would otherwise run on unnoticed. Then the pipe is drained
  for at most ``DRAIN`` seconds and closed, and the main process reaped. We never wait for EOF
  forever: a process that escaped and holds the pipe gets EPIPE/SIGPIPE on its next write.
* What escapes a group: anything that calls ``setsid``/``setpgid`` (``setsid cmd``, daemons that
  double-fork; ``nohup`` does not) and anything started outside our tree (``systemd-run``,
  ``at``, a docker daemon). With `mark`, on Linux, every process whose environment
  (``/proc/<pid>/environ``, as it was at exec) carries this call's marker is treated as part of
  the group, which catches setsid'd and daemonized descendants (they inherit the environment).
  Still escaping: a process in its own session with a scrubbed environment (``setsid env -i
  cmd``), and anything another daemon starts. Scanning /proc costs a few ms per call; only our
  own processes are readable when not root, which is all we need. Without /proc (macOS) only the
  group is signalled, with a short fixed grace. Zombies are ignored (they are dead). An OS
  sandbox's pid namespace (tools/sandbox.py) closes the remaining gaps for sandboxed commands.
* The caller dies (SIGKILL, or a SIGTERM with no handler, e.g. a pool worker that
  ``Pool.terminate`` stops while it waits here): nothing of this module runs any more, but the
  kernel SIGKILLs the command's first process (see "Start"). A sandboxed command's first process
  is ``unshare --kill-child``, so its whole pid namespace goes with it; an unsandboxed command
  loses its main process only (a ``python -m pytest`` check with everything it runs in-process);
  what that process had forked (``bash -c 'a; b'``'s children) runs on, orphaned, until it ends
  or next writes to the closed pipe (SIGPIPE). Without setpriv (or in the instant between the
  fork and setpriv's prctl) the command outlives its caller, as before.
* Interrupted (KeyboardInterrupt in the waiting thread): the group is SIGKILLed and the main
  process reaped before the exception goes on.
"""
from __future__ import annotations

import fcntl
import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

BUDGET = 1 << 16        # default bytes of output kept (head and tail halves)
DRAIN = 0.5             # after the kill: how long to read what is left in the pipe
READ_CHUNK = 1 << 20
MARKER_NAME = "NANOCODE_CALL"
_PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (no environment to read)
_EXEC_ROUNDS = 10         # 5 ms re-reads of a process caught mid-exec
_PIPE_SIZE = 1 << 20
_NO_PROC_GRACE = 0.1    # without /proc nothing tells us when the group is gone: a fixed wait


@dataclass(frozen=True)
class Outcome:
    """How a run ended. `returncode` follows Popen: -N when the main process died of signal N.
    `output`: the merged stdout+stderr as `Capture.text` gives it ("" when they went to files).
    At most one of `timed_out` and `cancelled` is set; then the group was killed by us."""
    returncode: int
    output: str
    timed_out: bool = False
    cancelled: bool = False


class Capture:
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
        """The kept bytes as UTF-8 (``errors="replace"``). When something was cut: head, a line
        ``... [12,345 bytes cut] ...``, tail; both cuts snap to a line boundary when one is near
        (within a quarter of the kept part) and never split a character."""
        head, tail = bytes(self.head), bytes(self.tail)
        if self.total == len(head) + len(tail):
            return (head + tail).decode("utf-8", "replace")
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


@functools.lru_cache(maxsize=None)
def _die_with_caller() -> tuple[str, ...]:
    """The argv prefix that gives a command the parent-death signal SIGKILL: ``(setpriv,
    "--pdeathsig", "KILL", "--")``, or () off Linux and where setpriv is missing or too old for
    the option. Probed once per process (one ``setpriv ... true``)."""
    path = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if path is None:
        return ()
    prefix = (path, "--pdeathsig", "KILL", "--")
    try:
        probe = subprocess.run([*prefix, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if probe.returncode == 0 else ()


def _executable(name, cwd: str, env: dict) -> bool:
    """Whether Popen would find `name` (argv[0]) as an executable file: a path with a slash
    relative to `cwd`, else looked up in `env`'s PATH, as Popen does."""
    try:
        name = os.fsdecode(name)
        dirs = [""] if os.sep in name else os.get_exec_path(env)
        for d in dirs:
            path = os.path.join(cwd, d, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return True
    except (TypeError, ValueError):
        pass
    return False


def _scan(pgid: int, marker: bytes | None, since: int) -> list[int] | None:
    """Live (non-zombie) pids in process group ``pgid`` or carrying ``marker`` in their environ.

    None when /proc is unavailable. A process caught in the middle of an ``execve`` shows an
    empty environment for a moment (the kernel fills it in late); a ``setsid cmd`` that has
    already left the group would slip through there. So a process started at or after `since`
    (the group leader's start, in clock ticks since boot) that shows no environment is read again
    after short pauses, for a few rounds while one is still in that state."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    me = os.getpid()
    found, unsure = [], []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            fields = _stat_fields(name)
            state, pgrp, flags, start = fields[0], int(fields[2]), int(fields[6]), int(fields[19])
        except (OSError, IndexError, ValueError):
            continue
        if state in (b"Z", b"X", b"x"):
            continue
        if pgrp == pgid:
            found.append(int(name))
        elif marker is not None and not flags & _PF_KTHREAD:
            env = _environ(name)
            if env and marker in env:
                found.append(int(name))
            elif env == b"" and start >= since:
                unsure.append(name)
    for _ in range(_EXEC_ROUNDS):
        if not unsure:
            break
        time.sleep(0.005)
        envs = {name: _environ(name) for name in unsure}
        found += [int(name) for name, env in envs.items() if env and marker in env]
        unsure = [name for name, env in envs.items() if env == b""]
    return found


def _stat_fields(name: str) -> list[bytes]:
    """/proc/<pid>/stat from its third field (state) on: the command name may hold spaces."""
    with open(f"/proc/{name}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2:].split()


def _environ(name: str) -> bytes | None:
    """A process's environment as at its exec; None when it is gone or not ours to read."""
    try:
        with open(f"/proc/{name}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


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


class _Group:
    """A started command: its output pipe (None with files), a pidfd of its main process, and
    the signalling of everything that belongs to it."""

    def __init__(self, proc: subprocess.Popen, capture: Capture, marker: bytes | None):
        self.proc = proc
        self.capture = capture
        self.marker = marker
        try:  # its start time: what started after it may be ours (see _scan)
            self.since = int(_stat_fields(str(proc.pid))[19])
        except (OSError, IndexError, ValueError):
            self.since = 1 << 62  # no /proc (or gone already): no re-reads
        self.fd = proc.stdout.fileno() if proc.stdout is not None else None
        self.eof = self.fd is None
        if self.fd is not None:
            try:
                fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)  # fewer wakeups on floods; best effort
            except (OSError, ValueError, AttributeError):  # AttributeError: no F_SETPIPE_SZ (macOS)
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
        """Read output for up to ``wait`` seconds; True as soon as the main process has exited."""
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
        if self.fd is not None and self.fd in ready:
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

    def pause(self, seconds: float) -> None:
        if self.eof:
            time.sleep(seconds)
        else:
            self.pump(seconds)

    def kill_all(self, grace: float) -> None:
        """SIGTERM the group (and marked escapees), wait up to `grace`, then SIGKILL until none is
        left; `grace` 0: SIGKILL at once."""
        pgid = self.proc.pid
        alive = _scan(pgid, self.marker, self.since)
        if alive is None:  # no /proc: signal blindly
            if grace > 0:
                _signal(pgid, None, signal.SIGTERM)
                _signal(pgid, None, signal.SIGCONT)
                self.pause(min(grace, _NO_PROC_GRACE))
            _signal(pgid, None, signal.SIGKILL)
            return
        if alive and grace > 0:
            _signal(pgid, alive, signal.SIGTERM)
            _signal(pgid, alive, signal.SIGCONT)
            end = time.monotonic() + grace
            while alive and time.monotonic() < end:
                self.pause(0.02)
                alive = _scan(pgid, self.marker, self.since)
        for _ in range(50):  # a fork loop may need a few rounds
            if not alive:
                return
            _signal(pgid, alive, signal.SIGKILL)
            time.sleep(0.01)
            alive = _scan(pgid, self.marker, self.since)

    def close(self) -> None:
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
        if self.proc.stdout is not None:
            try:
                self.proc.stdout.close()
            except OSError:
                pass


def run(argv: list[str], *, cwd: str, env: dict, timeout: float | None = None,
        cancel: threading.Event | None = None, budget: int = BUDGET, files=None,
        linger: float = 0.0, grace: float = 0.0, mark: bool = False) -> Outcome:
    """Run `argv` in its own process group and leave nothing of it running (module docstring).

    `timeout` seconds (None: no limit); `cancel` stops it when set (checked every 50 ms);
    `budget`: output bytes kept; `files`: (stdout, stderr) open files instead of the captured
    pipe; `linger`: seconds of output still collected after a normal exit; `grace`: seconds
    between SIGTERM and SIGKILL; `mark`: add the per-call environment marker that finds
    escapees. The command is SIGKILLed by the kernel if the caller dies first (module docstring,
    "Start"). Raises OSError / ValueError when the command cannot start."""
    capture = Capture(budget)
    marker = None
    if mark:
        call = uuid.uuid4().hex
        env = {**env, MARKER_NAME: call}
        marker = f"{MARKER_NAME}={call}".encode()
    out, err = files if files is not None else (subprocess.PIPE, subprocess.STDOUT)
    wrap = _die_with_caller()  # not for a command that cannot start: Popen's own error then
    if wrap and isinstance(argv, (list, tuple)) and argv and _executable(argv[0], cwd, env):
        argv = [*wrap, *argv]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                            start_new_session=True)
    group = _Group(proc, capture, marker)
    timed_out = cancelled = killed = False
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 0.05 if cancel is not None else 0.5
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if group.exited(wait):
                break
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
        if not (timed_out or cancelled):
            group.pump(linger)  # quick background jobs may still print
        group.kill_all(grace)
        killed = True
        group.pump(DRAIN)
    finally:
        if not killed:  # interrupted above (even KeyboardInterrupt): leave nothing running
            _signal(proc.pid, None, signal.SIGKILL)
        if proc.poll() is None:  # the main process moved itself to another group
            proc.kill()
        group.close()
        code = proc.wait()
    return Outcome(code, capture.text() if files is None else "", timed_out, cancelled)
