"""OS sandbox for commands the agent did not write itself: model-written Bash (tools/bash.py), the
checks that run model-edited code (tools/checks.py) and generated eval programs (evals/sandbox.py).
Linux namespaces, no root needed, no setuid helper.

`wrap(argv, ...)` returns the argv that runs `argv` as
``unshare [-r] [-n] -mpf --mount-proc --kill-child -- python -I -S -c _BOOT spec argv...``.
The bootstrap `_BOOT`, inside the new user + mount + pid (+ net) namespaces:

1. joins the given cgroups (root only: pids.max bounds a fork bomb, memory.limit the total);
2. bind-mounts every `writable` dir onto itself; gives the command a private /dev: a fresh
   read-only tmpfs holding only the host's null, zero, full, random, urandom and tty (bound from
   the host's nodes), fd/stdin/stdout/stderr links into /proc/self/fd, a new devpts instance
   (pts/, ptmx) and shm/ (step 3), so no block device, kmsg, kvm, fuse or loop-control can be
   opened (as root a command could otherwise write a disk). Then remounts every other mount
   read-only and nodev (a device node elsewhere on the host disk cannot be opened either; the
   host's /dev below the new one gets the same); mknod is refused in a user namespace anyway;
3. covers /tmp, /var/tmp, /run, /dev/shm with fresh tmpfs (hides host sockets: docker.sock,
   ssh-agent, dbus; a read-only mount still lets connect() reach a socket file). /tmp becomes a
   private, size-capped scratch dir (or the caller's `tmp` dir, bind-mounted there, to keep files
   across calls). Writable dirs and `keep_ro` dirs (the interpreter's prefixes) that lie below a
   covered dir are carried over by bind mounts from fds opened before covering;
4. bind-mounts every `protected` path (existing files/dirs inside the writable dirs, e.g.
   ``.git/hooks``) read-only over itself. A mount point cannot be renamed, unlinked or replaced,
   and a non-recursive bind that would expose the writable dir below it is refused by the kernel
   (locked submounts). A path that does not exist cannot be mounted over and creating it would
   leave a trace in the user's project: `guard()`/`restore()` handle those after the call;
5. optionally mounts a size-capped tmpfs as `work` dir (eval programs: a bound on the total
   written, nothing of it lands on the host disk) and copies files into it;
6. optionally drops to uid/gid `drop` (only when the caller is real root: then no user namespace
   is used for set-up, so dirs that `drop` cannot traverse on the way to what it needs, e.g.
   /root (700) above a pyenv interpreter, are covered by a tmpfs and the needed dirs carried);
7. enters a nested user + mount namespace: the read-only flags are now locked (root inside
   cannot remount them rw), then sets the rlimits, chdirs to `cwd` and either execs the command
   (pid 1, `init=False`) or forks it and stays pid 1 as reaper (`init=True`): when the command
   exits, the remaining processes get `linger` seconds, then pid 1 exits and the kernel kills
   everything left in the pid namespace, setsid/double-fork/nohup/`env -i` escapees included.
   Exit status: the command's, 128 + S when it died of signal S. SETUP_FAILED (97) with a
   ``sandbox: ...`` line on stderr when the set-up itself failed.

Trade-offs: one extra interpreter start per call (bench/sandbox.py, docs/BENCHMARKS.md); the command
keeps the caller's uid (as root: uid 0 mapped in a user namespace, so it can still *read*
root-owned files; writes are what is contained); RLIMIT_NPROC is per user, so as root it is
ignored by the kernel and only the pids cgroup bounds processes (absent where cgroups are not
writable). `NANOCODE_SANDBOX=off` (or ``plain``, the evals' spelling) makes the probe report the
sandbox unavailable, to exercise the fallback.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from tools import project_env
from tools.sandbox_paths import guard, loosen_undo_refs, mountable, pin_reftable_undo, pins, project_protected

NOBODY = 65534
SETUP_FAILED = 97  # exit status of the bootstrap when the namespace set-up itself failed
COVERED = ("/tmp", "/var/tmp", "/run", "/dev/shm")  # private tmpfs over the host's socket dirs
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")  # the host's, bound into the private /dev
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))
CGROUP_ROOT = "/sys/fs/cgroup"
ENV_SWITCH = "NANOCODE_SANDBOX"  # "off" / "plain": no namespaces

_BOOT = r"""
import ctypes, json, os, resource, sys, time
spec = json.loads(sys.argv[1]); argv = sys.argv[2:]
def fail(msg):
    print("sandbox: " + msg, file=sys.stderr, flush=True); os._exit(@SETUP_FAILED@)
for d in spec["groups"]:  # first: everything later inherits the cgroups
    try:
        with open(os.path.join(d, "cgroup.procs"), "w") as f: f.write("0")
    except OSError as e: fail(f"cannot join {d}: {e}")
copy_in = [(open(src, "rb").read(), dst) for src, dst in spec["copy_in"]]
drop = spec["drop"]
if spec["ns"]:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC = 1, 2, 4, 8, 32, 4096, 16384
    OPT = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
    def mount(src, dst, flags, fstype=None, data=None, what="cannot mount"):
        if libc.mount(src.encode(), dst.encode(), fstype and fstype.encode(), flags, data and data.encode()):
            fail(f"{what} {dst}: " + os.strerror(ctypes.get_errno()))
    def under(p, d): return p == d or p.startswith(d.rstrip("/") + "/")
    writable, keep, tmp = spec["writable"], spec["keep_ro"], spec["tmp"]
    for w in writable:
        mount(w, w, BIND, what="cannot bind")
    host_dev = os.open("/dev", os.O_PATH | os.O_DIRECTORY)
    nodes = {n: os.open("/dev/" + n, os.O_PATH) for n in @DEV_NODES@ if os.path.exists("/dev/" + n)}
    mount("tmpfs", "/dev", NOSUID | NODEV, "tmpfs", "size=64k,mode=755", "cannot make /dev")
    for n, fd in nodes.items():
        open("/dev/" + n, "w").close()
        mount(f"/proc/self/fd/{fd}", "/dev/" + n, BIND, what="cannot make /dev")
        os.close(fd)
    libc.mount(b"none", f"/proc/self/fd/{host_dev}".encode(), None, REMOUNT | BIND | RDONLY | NOSUID | NODEV, None)
    os.close(host_dev)
    for n, target in @DEV_LINKS@:
        os.symlink(target, "/dev/" + n)
    os.mkdir("/dev/shm"); os.mkdir("/dev/pts")
    if not libc.mount(b"devpts", b"/dev/pts", b"devpts", NOSUID | NOEXEC, b"newinstance,ptmxmode=0666,mode=0620"):
        os.symlink("pts/ptmx", "/dev/ptmx")
    mount("none", "/dev", REMOUNT | RDONLY | NOSUID | NODEV, what="cannot lock /dev")
    keep_dev = {"/dev/" + n for n in nodes} | {"/dev/pts"}
    for f in [line.split() for line in open("/proc/self/mountinfo")]:
        mp = f[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        if mp not in writable and mp not in keep_dev:  # best effort: "/" is checked below
            flags = REMOUNT | BIND | RDONLY
            for o in f[5].split(","): flags |= OPT.get(o, 0)
            if libc.mount(b"none", mp.encode(), None, flags | NODEV, None):
                libc.mount(b"none", mp.encode(), None, flags, None)
    covered = {d: "size=%dm,mode=1777" % (spec["tmp_mb"] if d == "/tmp" else 16)
               for d in @COVERED@ if os.path.isdir(d) and not os.path.islink(d)}
    if drop is not None:  # cover the first dir on the way that `drop` cannot traverse
        for p in keep + writable + [spec["cwd"]] + [w[0] for w in spec["work"]]:
            parts = p.split("/")
            for i in range(2, len(parts)):
                a = "/".join(parts[:i])
                if any(under(a, c) for c in covered): break
                if not os.stat(a).st_mode & 1:
                    covered = {c: v for c, v in covered.items() if not under(c, a)}
                    covered[a] = "size=1m,mode=755"; break
    carried = []
    for p, ro in sorted([(w, False) for w in writable] + [(k, True) for k in keep]):
        if any(under(p, c) for c in covered) and not any(under(p, q) for q, _, _ in carried):
            carried.append((p, ro, os.open(p, os.O_PATH | os.O_DIRECTORY)))
    tmp_fd = os.open(tmp, os.O_PATH | os.O_DIRECTORY) if tmp else None
    for d, opts in covered.items():
        if d == "/tmp" and tmp_fd is not None: mount(f"/proc/self/fd/{tmp_fd}", d, BIND, what="cannot cover")
        else: mount("tmpfs", d, NOSUID | NODEV, "tmpfs", opts, "cannot cover")
    for p, ro, fd in carried:
        os.makedirs(p, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", p, BIND | REC, what="cannot carry")
        if ro: mount("none", p, REMOUNT | BIND | RDONLY, what="cannot carry")
        os.close(fd)
    for p in spec["protected"]:
        mount(p, p, BIND | REC, what="cannot protect")
        mount("none", p, REMOUNT | BIND | RDONLY, what="cannot protect")
    for path, mb in spec["work"]:
        os.makedirs(path, exist_ok=True)
        own = "" if drop is None else f",uid={drop},gid={drop}"
        mount("tmpfs", path, NOSUID | NODEV, "tmpfs", f"size={mb}m,mode=0700{own}", "cannot mount work dir")
    try:
        open("/.nanocode_sbx_probe", "w").close()
        fail("/ is still writable")
    except OSError:
        pass
for data, dst in copy_in:
    with open(dst, "wb") as f: f.write(data)
    if drop is not None: os.chown(dst, drop, drop)
if drop is not None:
    os.setgroups([]); os.setresgid(drop, drop, drop); os.setresuid(drop, drop, drop)
if spec["ns"] and libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER|CLONE_NEWNS: lock ro
    fail("nested unshare failed: " + os.strerror(ctypes.get_errno()))
os.chdir(spec["cwd"])
for name, value in spec["rlimits"].items():
    try: resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError): pass
if not spec["init"]:
    os.execvp(argv[0], argv)
pid = os.fork()
if pid == 0:
    try: os.execvp(argv[0], argv)
    finally: os._exit(127)
code = None
while code is None:
    p, status = os.waitpid(-1, 0)
    if p == pid: code = os.waitstatus_to_exitcode(status)
end = time.monotonic() + spec["linger"]
while time.monotonic() < end:  # orphans are ours (pid 1): none left means the namespace is empty
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0: time.sleep(0.01)
    except ChildProcessError:
        break
os._exit(code if code >= 0 else 128 - code)
"""
_BOOT = (_BOOT.replace("@SETUP_FAILED@", str(SETUP_FAILED)).replace("@COVERED@", repr(COVERED))
         .replace("@DEV_NODES@", repr(DEV_NODES)).replace("@DEV_LINKS@", repr(DEV_LINKS)))


@dataclass(frozen=True)
class Sandbox:
    """How tools.bash.bash sandboxes a command (None there: no sandbox). The project root is
    always writable and its `project_protected()` paths always protected; these add to that."""
    enabled: bool = True
    network: bool = False
    writable: tuple[str, ...] = ()  # extra dirs the command may write
    protected: tuple[str, ...] = ()  # extra read-only paths inside the writable dirs
    tmp: str | None = None  # host dir mounted as /tmp (files kept across calls); None: fresh tmpfs
    tmp_mb: int = 1024  # size of the fresh /tmp tmpfs
    memory_mb: int = 8192  # RLIMIT_AS per process (and, as root, the memory cgroup for all)
    nproc: int = 1024  # RLIMIT_NPROC (and, as root, pids.max)
    fsize_mb: int = 4096  # RLIMIT_FSIZE: largest file the command may write


def unshare_path() -> str | None:
    return shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")


def forced_off() -> bool:
    return os.environ.get(ENV_SWITCH, "").lower() in ("off", "plain", "0", "none")


def interpreter_dirs() -> list[str]:
    """Directories an interpreter started from inside needs (venv and base prefixes, the executable's)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(os.path.realpath(d) for d in dirs)


def _path_dirs(writable: list[str], env: project_env.ProjectEnv) -> list[str]:
    """The dirs of the commands' PATH and Python environment (`env`: a venv under /tmp, its base
    interpreter) that lie below a covered dir, to be carried over read-only; never a covered dir
    itself nor one holding a writable dir (that would hide it read-only)."""
    out = []
    for d in env.path.split(os.pathsep) + list(env.dirs):
        d = os.path.realpath(d) if d and os.path.isdir(d) else ""
        below = [c for c in COVERED if d.startswith(c + "/")]
        if below and not any(w == d or w.startswith(d + "/") for w in writable):
            out.append(d)
    return out


def wrap(argv: list[str], *, cwd: str, writable=(), protected=(), network: bool = False,
         rlimits: dict | None = None, keep_ro=None, tmp: str | None = None, tmp_mb: int = 16,
         work=(), copy_in=(), groups=(), drop: int | None = None, init: bool = True,
         linger: float = 0.0, ns: bool = True) -> list[str]:
    """The argv that runs `argv` sandboxed as described in the module docstring. Paths must be
    absolute; they are resolved here. `rlimits`: {"RLIMIT_AS": bytes, ...}. `work`: [(dir, MiB)]
    tmpfs dirs; `copy_in`: [(host file, path inside)], read before and written after the mounts.
    `drop` (real root only): the uid/gid the command runs as. ns=False: only cgroups, rlimits and
    the exec (the evals' "plain" fallback). Raises OSError when unshare is missing."""
    real = os.path.realpath
    spec = {"writable": [real(w) for w in writable if tmp is None or real(w) != real(tmp)],
            "protected": [real(p) for p in protected], "keep_ro": [real(k) for k in keep_ro or interpreter_dirs()],
            "tmp": real(tmp) if tmp else None, "tmp_mb": tmp_mb, "work": [list(w) for w in work],
            "copy_in": [list(c) for c in copy_in], "groups": list(groups), "drop": drop,
            "cwd": real(cwd), "rlimits": rlimits or {}, "init": init, "linger": linger, "ns": ns}
    if spec["tmp"]:
        spec["writable"].append(spec["tmp"])  # bound rw first, so /tmp can be bound from it
    boot = [sys.executable, "-I", "-S", "-c", _BOOT, json.dumps(spec), *argv]
    if not ns:
        return boot
    exe = unshare_path()
    if exe is None:
        raise OSError("unshare not found")
    flags = "-" + ("" if drop is not None else "r") + ("" if network else "n") + "mpf"
    return [exe, flags, "--mount-proc", "--kill-child", "--", *boot]


def prepare(root, argv: list[str], cfg: Sandbox, linger: float = 0.0):
    """For tools.bash: (wrapped argv, guarded paths for `restore`, cgroups for `remove_cgroup`).
    Writable: the project root, its .git and the `pins` of the protected paths (bound onto
    themselves: they cannot be renamed or replaced while what they hold is protected),
    cfg.writable; /tmp private; the folders of the commands' PATH and Python environment
    (tools/project_env.choose(root)) that lie under a covered dir carried over read-only.
    Loosens packed undo refs first (`loosen_undo_refs`); in a reftable repository pins them
    (`pin_reftable_undo`: its kept packs read-only, the refs put back by `restore`). Raises
    OSError."""
    root = os.path.realpath(root)
    if not os.path.isdir(root):
        raise OSError(f"not a directory: {root}")
    git = os.path.join(root, ".git")
    writable = [root] + ([git] if os.path.isdir(git) and not os.path.islink(git) else [])
    undo = None
    if os.path.isdir(git) and not os.path.islink(git):
        loosen_undo_refs(git)
        undo = pin_reftable_undo(root, git)
    paths = project_protected(root) + list(undo.files if undo else ())
    writable += [p for p in pins(paths, root) if p not in writable]
    writable += [os.path.realpath(w) for w in cfg.writable]
    paths += [os.path.realpath(p) for p in cfg.protected]
    guarded = guard(paths)
    if undo:
        guarded[os.path.join(git, "reftable")] = undo
    groups = make_cgroups(cfg.nproc, cfg.memory_mb)
    limits = {"RLIMIT_AS": cfg.memory_mb << 20, "RLIMIT_NPROC": cfg.nproc, "RLIMIT_CORE": 0,
              "RLIMIT_FSIZE": cfg.fsize_mb << 20}
    keep = interpreter_dirs() + _path_dirs(writable, project_env.choose(root))
    if cfg.network and os.path.isdir("/run/systemd/resolve"):
        keep.append("/run/systemd/resolve")  # where /etc/resolv.conf often points
    try:
        out = wrap(argv, cwd=root, writable=writable, protected=mountable(paths, guarded),
                   network=cfg.network, rlimits=limits, keep_ro=keep, tmp=cfg.tmp, tmp_mb=cfg.tmp_mb,
                   groups=groups, init=True, linger=linger)
    except OSError:
        for d in groups:
            remove_cgroup(d)
        raise
    return out, guarded, groups


# ---- cgroups (root only) ------------------------------------------------------------------------
def make_cgroups(nproc: int, memory_mb: int | None) -> list[str]:
    """Fresh cgroup v1 pids (+ memory) groups, [] where they cannot be made (not root, no v1):
    they bound the process count and total memory of everything a command starts, and list its
    processes for the final kill (`remove_cgroup`)."""
    if os.getuid() != 0:
        return []
    out = []
    name = f"nanocode-sbx-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    knobs = [("pids", "pids.max", nproc)]
    if memory_mb:
        knobs.append(("memory", "memory.limit_in_bytes", memory_mb << 20))
    for ctrl, knob, value in knobs:
        base = os.path.join(CGROUP_ROOT, ctrl)
        if not os.access(os.path.join(base, "cgroup.procs"), os.W_OK):
            continue
        d = os.path.join(base, name)
        try:
            os.mkdir(d)
            with open(os.path.join(d, knob), "w") as f:
                f.write(str(value))
            out.append(d)
        except OSError:
            remove_cgroup(d)
    return out


def cgroup_oom(groups: list[str]) -> bool:
    for d in groups:
        if d.startswith(os.path.join(CGROUP_ROOT, "memory")):
            try:
                with open(os.path.join(d, "memory.failcnt")) as f:
                    return int(f.read()) > 0
            except (OSError, ValueError):
                pass
    return False


def remove_cgroup(d: str) -> None:
    """SIGKILL whatever is left in the group, then remove it (retries while they die)."""
    for _ in range(100):
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


# ---- the probe ----------------------------------------------------------------------------------
_probe_lock = threading.Lock()
_probe: dict | None = None


def for_commands(wanted: bool = True, network: bool = False) -> tuple[Sandbox | None, str]:
    """The agent's choice: (the Sandbox its Bash calls run in, or None, and the one-line status
    the faces show). None when not `wanted` or when the probe finds no working sandbox; the
    permission policy then asks before every command."""
    if not wanted:
        return None, "NO SANDBOX (turned off): every command asks"
    probe = bash_sandbox()
    if not probe["available"]:
        return None, f"NO SANDBOX ({probe['note']}): every command asks"
    return Sandbox(network=network), f"sandbox: {probe['name']}, network {'on' if network else 'off'}"


def unattended_warning() -> str | None:
    """None where Bash calls run in the sandbox. Else the warning a run with nobody to approve
    (`evals agent`, `train rollouts`) prints: every command asks, nobody answers, and the
    tasks that need one (tests, git, listing files) fail, so its numbers and rollouts are not
    comparable with a sandboxed run's."""
    probe = bash_sandbox()
    if probe["available"]:
        return None
    return (f"no OS sandbox here ({probe['note']}): every Bash call asks and nobody answers, so "
            "tasks that need a command fail and these results are not comparable with a sandboxed "
            "run's; allow unprivileged user namespaces (`unshare -r true` must work) and run again")


def bash_sandbox(refresh: bool = False) -> dict:
    """Can tools.bash.bash sandbox commands here? Runs the real machinery once per process:
    {"available": bool, "name": "namespaces"|"none", "network": "blocked"|"unknown",
     "note": why not / what is not enforced}."""
    global _probe
    with _probe_lock:
        if _probe is not None and not refresh:
            return _probe
        _probe = _run_probe()
        return _probe


def _run_probe() -> dict:
    off = {"available": False, "name": "none", "network": "open"}
    if forced_off():
        return {**off, "note": f"{ENV_SWITCH}={os.environ[ENV_SWITCH]}"}
    if unshare_path() is None:
        return {**off, "note": "unshare not found"}
    with tempfile.TemporaryDirectory(prefix="nanocode-probe-") as proj, \
            tempfile.TemporaryDirectory(prefix="nanocode-probe-out-") as outside:
        os.mkdir(os.path.join(proj, "ro"))
        script = (f"echo x > {proj}/ok; echo x > {outside}/bad; echo x > {proj}/ro/bad; "
                  "echo x > /tmp/x && [ -f /tmp/x ] && echo tmp; "
                  "(exec 3<>/dev/tcp/127.0.0.1/9) 2>/dev/null && echo net; echo $$")
        argv = wrap(["bash", "-c", script], cwd=proj, writable=[proj],
                    protected=[os.path.join(proj, "ro")])
        try:
            r = subprocess.run(argv, cwd=proj, capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            return {**off, "note": f"cannot start: {e}"}
        lines = r.stdout.split()
        ok = (r.returncode == 0 and os.path.exists(os.path.join(proj, "ok"))
              and not os.path.exists(os.path.join(outside, "bad"))
              and not os.path.exists(os.path.join(proj, "ro", "bad")) and "tmp" in lines
              and "net" not in lines and lines[-1:] == ["2"])
    if not ok:
        return {**off, "note": f"namespaces do not isolate here (exit {r.returncode}: "
                               f"{(r.stderr.strip() or r.stdout.strip())[-200:]})"}
    note = ""
    if os.getuid() == 0:
        groups = make_cgroups(1, None)
        for d in groups:
            remove_cgroup(d)
        note = "as root: RLIMIT_NPROC is ignored by the kernel; " + (
            "a pids cgroup bounds processes" if groups else "no cgroup: processes are unbounded")
    return {"available": True, "name": "namespaces", "network": "blocked", "note": note}
