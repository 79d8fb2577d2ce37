"""Run untrusted generated Python programs (HumanEval-style completions, evals/codegen.py) and
report how each ended. Contract: a program gets a scrubbed environment (none of the caller's
variables, so no API keys), a fresh temporary directory as its only scratch space, bounded time,
memory, processes, file sizes and output (Limits), and nothing it started outlives its run; at
the "namespaces" level it also cannot reach the network or write outside that directory. Each
`Result` names the level that was in effect; isolation() says which levels work here.

Each program runs as `python -I prog.py` through tools/process.py: its own process group, cwd =
HOME = TMPDIR = a fresh temporary directory (removed afterwards, never chmod-ing through a
symlink the program left there), stdin /dev/null, stdout and stderr into capped files outside
the sandbox (only the tail is kept), a wall-clock timeout, and the whole group SIGKILLed when the
run ends. The "rlimits" fallback prevents neither writes outside the temp dir nor the network, so
it runs only by the user's choice (tools/checks.py: --unsandboxed); without it every program is
an "error" result that names the way on.

Cost: two interpreter starts per program in the namespace mode (the set-up execs a fresh
`python -I`), one in the fallback; tens of milliseconds either way, small beside a program under
test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from tools import checks, process
from tools.sandbox import (ENV_SWITCH, NOBODY, SETUP_FAILED, cgroup_oom, forced_off, make_cgroups,
                           remove_cgroup, unshare_path, wrap)

STATUSES = ("passed", "failed", "timeout", "oom", "error")

@dataclass
class Result:
    status: str  # one of STATUSES
    returncode: int | None
    seconds: float
    stdout: str = ""  # tails, at most max_output bytes each
    stderr: str = ""
    isolation: str = ""  # "namespaces" or "rlimits"


@dataclass
class Limits:
    """What a program may use. Both levels set RLIMIT_AS (a 10 GB allocation raises MemoryError,
    "oom"), RLIMIT_CPU (timeout + 1 s), RLIMIT_FSIZE (also the output cap), RLIMIT_NOFILE,
    RLIMIT_CORE 0 and RLIMIT_NPROC (per user: ignored by the kernel for root in the rlimits
    fallback, said in isolation()["nproc"]; as non-root the user's current process count + nproc,
    so other processes of the user do not starve the sandbox)."""
    timeout: float = 10.0  # wall clock, seconds
    memory_mb: int = 2048  # RLIMIT_AS
    fsize_mb: int = 16  # RLIMIT_FSIZE: every file the program writes, and its stdout/stderr
    work_mb: int = 64  # "namespaces": the work dir is a tmpfs of this size (a cap on the total)
    nofile: int = 256
    nproc: int = 256
    max_output: int = 8192  # bytes of the stdout/stderr tails kept
    group_memory_mb: int = 4096  # memory cgroup limit for all the program's processes together
    extra_env: dict = field(default_factory=dict)


def _user_procs(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                n += os.stat(f"/proc/{pid}").st_uid == uid
            except OSError:
                pass
    return n


def _rlimits(lim: Limits, mode: str) -> dict:
    cpu = int(lim.timeout) + 1
    out = {"RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_CPU": cpu, "RLIMIT_FSIZE": lim.fsize_mb << 20,
           "RLIMIT_NOFILE": lim.nofile, "RLIMIT_CORE": 0}
    if mode == "ns":
        out["RLIMIT_NPROC"] = lim.nproc
    elif os.getuid() != 0:
        out["RLIMIT_NPROC"] = _user_procs(os.getuid()) + lim.nproc
    return out


def _env(work: str, lim: Limits) -> dict:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work,
            "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
            **lim.extra_env}


def _tail(path: str, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _fix(func, p, _exc) -> None:
    """rmtree's error handler: a program may chmod its files away from us (non-root). Never
    chmods through a symlink (os.chmod follows them and Linux has no lchmod): a program leaving
    `link -> /etc/shadow` must not make that file 0700."""
    for q in (os.path.dirname(p), p):
        try:
            if not os.path.islink(q):
                os.chmod(q, 0o700)
        except OSError:
            pass
    try:
        func(p)
    except OSError:
        pass


def _rmtree(path: str) -> None:
    shutil.rmtree(path, onerror=_fix)


def run_program(code: str, limits: Limits | None = None, mode: str | None = None) -> Result:
    """Run `code` (a whole Python program) sandboxed. status: passed (exit 0), failed (non-zero
    exit or killed), timeout (wall clock or CPU limit), oom (MemoryError or killed by the address
    space limit), error (the sandbox itself could not start). mode: "ns" | "plain" | None (the
    best that works here, see isolation(); "plain" only with checks.allowed())."""
    lim = limits or Limits()
    mode = mode or isolation()["mode"]
    if mode == "plain" and not checks.allowed():
        return Result("error", None, 0.0, "", "sandbox: " + checks.refusal("a generated program", "rlimits only"),
                      _MODE_NAMES[mode])
    root = tempfile.mkdtemp(prefix="nanocode-sbx-")
    work = os.path.join(root, "work")
    os.mkdir(work, 0o700)
    src = os.path.join(root, "prog.py")  # outside the work dir: the boot copies it in
    with open(src, "w", encoding="utf-8") as f:
        f.write(code)
    prog = os.path.join(work, "prog.py")
    drop = NOBODY if mode == "ns" and os.getuid() == 0 else None
    groups = make_cgroups(lim.nproc, lim.group_memory_mb)
    try:
        cmd = wrap([sys.executable, "-I", prog], cwd=work, rlimits=_rlimits(lim, mode),
                   work=[(work, lim.work_mb)], copy_in=[(src, prog)], groups=groups, drop=drop,
                   init=False, ns=mode == "ns")
    except OSError as e:
        for d in groups:
            remove_cgroup(d)
        _rmtree(root)
        return Result("error", None, 0.0, "", f"sandbox: cannot start: {e}", _MODE_NAMES[mode])
    out_path, err_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
    t0 = time.perf_counter()
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                ran = process.run(cmd, cwd=work, env=_env(work, lim), timeout=lim.timeout, files=(out, err))
            except OSError as e:
                return Result("error", None, 0.0, "", f"sandbox: cannot start: {e}", _MODE_NAMES[mode])
        secs = time.perf_counter() - t0
        stdout, stderr = _tail(out_path, lim.max_output), _tail(err_path, lim.max_output)
        cg_oom = cgroup_oom(groups)
    finally:
        for d in groups:
            remove_cgroup(d)
        _rmtree(root)
    rc, timed_out = ran.returncode, ran.timed_out
    status = "oom" if cg_oom and rc != 0 and not timed_out else _status(rc, timed_out, stderr)
    return Result(status, rc, round(secs, 4), stdout, stderr, _MODE_NAMES[mode])


def _status(rc: int, timed_out: bool, stderr: str) -> str:
    if timed_out or rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "timeout"
    if rc == 0:
        return "passed"
    if rc == SETUP_FAILED and stderr.startswith("sandbox: "):
        return "error"
    last = stderr.strip().splitlines()[-1:] or [""]
    if "MemoryError" in last[0] or "Cannot allocate memory" in last[0]:
        return "oom"
    return "failed"


def run_many(codes: list[str], limits: Limits | None = None, workers: int | None = None,
             on_done=None) -> list[Result]:
    """run_program over many programs, `workers` at a time (default: the core count); results in
    input order. on_done(index, result) is called as each finishes (e.g. to tick a progress bar)."""
    workers = workers or os.cpu_count() or 1
    isolation()  # probe once, before the threads race for it
    out: list[Result | None] = [None] * len(codes)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_program, c, limits): i for i, c in enumerate(codes)}
        for fut in as_completed(futures):
            i = futures[fut]
            out[i] = fut.result()
            if on_done:
                on_done(i, out[i])
    return out  # type: ignore[return-value]


# ---- the probe ----------------------------------------------------------------------------------
_MODE_NAMES = {"ns": "namespaces", "plain": "rlimits"}
_PROBE = r"""
import json, os, resource, socket
out = {"pid": os.getpid(), "uid": os.getuid()}
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1); out["net"] = "open"
except OSError as e:
    out["net"] = "refused" if isinstance(e, ConnectionRefusedError) else "unreachable"
try:
    open("/.nanocode_sbx_probe", "w").close(); os.remove("/.nanocode_sbx_probe"); out["write_root"] = True
except OSError:
    out["write_root"] = False
try:  # /tmp is a private tmpfs inside: this file must not show up on the host (checked there)
    open("/tmp/" + os.environ["PROBE_NAME"], "w").close()
except (OSError, KeyError):
    pass
out["procs"] = sum(1 for p in os.listdir("/proc") if p.isdigit())
out["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
print(json.dumps(out))
"""
_probe_lock = threading.Lock()
_probe_cache: dict | None = None


def isolation(refresh: bool = False) -> dict:
    """What isolation is in effect here, measured once per process by running a probe program:
    {"mode": "ns"|"plain", "name", "network_blocked", "readonly_fs", "pid_namespace",
     "uid_outside", "rlimits": [...], "nproc": "enforced"|"ignored (root)", "note"}.

    - "namespaces" (when `unshare -nmpf` works): tools/sandbox.py's machinery. A network
      namespace with only a downed `lo`; every mount read-only, /tmp, /var/tmp, /run, /dev/shm
      private tmpfs; the work dir a tmpfs of `work_mb` MiB (a cap on all the program writes,
      none of it on the host disk); a nested user+mount namespace locks the read-only flags. The
      program is pid 1 of its pid namespace, so the kernel kills all it started, setsid()
      escapees too. It runs as an unprivileged uid: as non-root, the caller's (mapped to 0); as
      root, the set-up covers the dirs uid 65534 cannot traverse on the way to the interpreter
      with a tmpfs, carries the interpreter's dirs over read-only, then drops to uid and gid
      65534 (a root-only 0600 file is unreadable, RLIMIT_NPROC is enforced). As root, fresh
      cgroup v1 `pids` and `memory` groups bound a fork bomb and its total memory, and every
      process left in them is SIGKILLed at the end.
    - "rlimits" (fallback): the same process setup without namespaces; a child that calls
      setsid() escapes the group kill.
    """
    global _probe_cache
    with _probe_lock:
        if _probe_cache is not None and not refresh:
            return _probe_cache
        info, note = None, ""
        if not forced_off() and unshare_path():
            name = f".nanocode_sbx_probe_{os.getpid()}"
            r = run_program(f"import os; os.environ['PROBE_NAME'] = {name!r}\n" + _PROBE,
                            Limits(timeout=20), mode="ns")
            leaked = os.path.exists(os.path.join("/tmp", name))
            if leaked:
                os.remove(os.path.join("/tmp", name))
            try:
                p = json.loads(r.stdout.strip().splitlines()[-1])
                ok = (p["net"] == "unreachable" and not p["write_root"] and not leaked
                      and p["pid"] == 1 and p["procs"] < 10)
                if ok:
                    info = {"mode": "ns", "network_blocked": True, "readonly_fs": True,
                            "pid_namespace": True}
                else:
                    note = f"namespace probe did not isolate: {p}"
            except (IndexError, ValueError, KeyError):
                note = f"namespaces unavailable ({r.status}: {r.stderr.strip()[-200:]})"
        else:
            note = "unshare not found" if not unshare_path() else f"{ENV_SWITCH}={os.environ[ENV_SWITCH]}"
        if info is None:
            info = {"mode": "plain", "network_blocked": False, "readonly_fs": False,
                    "pid_namespace": False}
        info["name"] = _MODE_NAMES[info["mode"]]
        info["uid_outside"] = NOBODY if info["mode"] == "ns" and os.getuid() == 0 else os.getuid()
        lims = sorted(_rlimits(Limits(), info["mode"]))
        info["rlimits"] = [n.removeprefix("RLIMIT_") for n in lims]
        real_root = info["uid_outside"] == 0
        info["nproc"] = ("ignored by the kernel (real uid 0)" if real_root or "RLIMIT_NPROC" not in lims
                         else "enforced")
        groups = make_cgroups(Limits().nproc, Limits().group_memory_mb)
        info["cgroups"] = [d.split(os.sep)[-2] for d in groups]  # pids / memory limits in effect
        for d in groups:
            remove_cgroup(d)
        info["note"] = note
        _probe_cache = info
        return info


if __name__ == "__main__":  # python -m evals.sandbox: print what isolation works here
    print(json.dumps(isolation(), indent=1))
