"""Workspace guard: every tool path is resolved against the project root, and opened the way it was checked.

`resolve(root, path, write=...)` turns a (relative or absolute) path into an absolute path with all
symlinks resolved (`os.path.realpath`, non-strict so missing tails are allowed) and raises
`PathOutside` when the result is not inside the (also resolved) root. Reads outside the root are
allowed only when the caller passes `allow_outside=True` (the permission layer asks the user first);
writes outside are always refused.

Checked path = used path: `open_dir`, `open_resolved` and `open_inside` never open the checked path by name. They
walk the resolved path one component at a time from a file descriptor of the real root (or of `/`
for an approved outside read) with `O_NOFOLLOW|O_DIRECTORY` and `dir_fd`, so a component swapped
for a symlink between the check and the use fails with `PathOutside` instead of being followed.
Callers then work relative to the returned descriptors (Edit creates its temp file, renames and
cleans up with `dir_fd`), so a later swap of a parent cannot redirect them either.

Protected places (`protected`) are where an Edit changes what runs or what is allowed: any path
component named `.git` (nested repositories included) or `.nanocode`, hook directories (`.husky`,
`.githooks` and the `core.hooksPath` of `.git/config`), every virtualenv inside the project
(`project_venvs`: its bin/activate and python wrappers, *.pth and sitecustomize files in
site-packages, the packages themselves all run when the user later uses it) and the user
settings folder (`user_settings_dir`). Both the literal and the resolved path are judged, case-insensitively, and
each place is taken both as named and as resolved, so `conf -> .nanocode` and a shipped
`.nanocode -> conf` are both caught. `trust_problem` says why a root must not be trusted silently.

Check = use: `identity(root, resolved)` is the (st_dev, st_ino) of what a check judged, found by
the same no-follow walk (MISSING where nothing was); the permission layer records it and Read
and Grep refuse to use any other file (tools/permissions.Decision).

Project settings (`.nanocode/settings.json`, `settings.local.json`, and `.mcp.json`, the MCP
servers Claude Code users list at the project root: programs to run) ship with the repository, so
they are read here through the guard (a `.nanocode` or settings file linking out of the project,
a FIFO or a file over 1 MB is never loaded) and are trusted only once the user accepted them:
`project_settings` reads each file's bytes once and says whether their sha256 is the one
`accept_settings` recorded for this project (keyed by its real path) in the user settings folder
(ACCEPTED_FILE, written atomically; the accepted text is kept so a changed file can be shown as
a diff). The check and the load use the same bytes, so a file changed after the prompt is
untrusted again, never silently honoured. The store is outside the project, so the model cannot
accept settings for itself (Edit refuses outside writes; Bash sees it read-only in the sandbox).

What remains: a directory already opened can still be renamed by another process to a place
outside the root (that needs write access to both, i.e. an attacker who could copy the data
anyway), hard links to outside files are the same file and are read, and the root path itself is
trusted as given. The protected list is about code that runs and permissions; other tools'
config files (editor tasks, CI) are ordinary files.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nanocode.common import write_atomic

PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", "package.json", "Cargo.toml", "go.mod",
                   "Makefile", "CMakeLists.txt", "pom.xml", "build.gradle", "Gemfile", "composer.json",
                   "NANOCODE.md", "AGENTS.md", ".nanocode")
HOOK_DIRS = (".husky", ".githooks")
VENV_MARKER = "pyvenv.cfg"  # what makes a folder a virtualenv (PEP 405)
VENV_DEPTH = 2  # how far below the root a virtualenv is looked for (.venv, backend/.venv)
VENV_SKIP = (".git", "node_modules")  # never virtualenvs, possibly huge
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


OUTSIDE = "path outside the project"  # what a tool or a permission says of a PathOutside


class PathOutside(Exception):
    """The path resolves (after following symlinks) to a place outside the project root, or a
    component of it was swapped for a symlink while it was being opened."""


class PathSwapped(PathOutside):
    """A component of the path turned into a symlink or back while it was being resolved
    (os.path.realpath saw a link, then readlink met something else: EINVAL). Raised instead of
    that bare OSError so a tool can say what happened (tools.files.CHANGED)."""


def realpath(path) -> str:
    """os.path.realpath that raises PathSwapped, not `OSError: [Errno 22]`, when a component is
    swapped under it (Python 3.11's realpath does not catch that EINVAL)."""
    try:
        return os.path.realpath(path)
    except OSError as e:
        if e.errno == errno.EINVAL:
            raise PathSwapped(os.fspath(path)) from e
        raise


def real_root(root) -> Path:
    return Path(os.path.realpath(os.fspath(root)))


def is_inside(root, path) -> bool:
    """True when the already-resolved `path` is the root or below it (`root` is resolved here)."""
    r = os.fspath(real_root(root))
    p = os.fspath(path)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def resolve(root, path, *, write: bool, allow_outside: bool = False) -> Path:
    """Absolute, symlink-free path of `path` (relative paths are taken from `root`).

    Raises PathOutside when it lies outside the root, unless `allow_outside` and not `write`
    (PathSwapped, a PathOutside, when a component is swapped for a link meanwhile).
    Raises ValueError for paths the OS cannot represent (e.g. containing NUL)."""
    p = os.fspath(path)
    if "\x00" in p:
        raise ValueError("path contains a NUL byte")
    p = os.path.expanduser(p) if p.startswith("~") else p
    rroot = real_root(root)
    full = p if os.path.isabs(p) else os.path.join(os.fspath(rroot), p)
    resolved = Path(realpath(full))
    if not is_inside(rroot, resolved) and (write or not allow_outside):
        raise PathOutside(p)
    return resolved


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_dir(root, resolved_dir, *, create: bool = False) -> int:
    """Descriptor of the already-resolved directory `resolved_dir`, opened by walking from the real
    root (from `/` when it lies outside) one component at a time without following symlinks;
    `create` makes missing components (mode 0o777 minus umask). The caller closes it.
    Raises PathOutside when a component is (now) a symlink, OSError for the rest."""
    rroot, target = os.fspath(real_root(root)), os.fspath(resolved_dir)
    base = rroot if is_inside(rroot, target) else os.sep
    rel = os.path.relpath(target, base)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [] if rel == os.curdir else rel.split(os.sep):
            if part in ("", os.curdir, os.pardir):  # a resolved path has none; refuse rather than walk up
                raise PathOutside(target)
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno == errno.ELOOP or (e.errno == errno.ENOTDIR and _is_link(part, fd)):
                    raise PathOutside(target) from e  # Linux says ENOTDIR for a link with O_DIRECTORY
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_resolved(root, resolved, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """Descriptor of the already-resolved path `resolved`, opened where it was checked: the parent
    by `open_dir`, the last component with O_NOFOLLOW and O_NONBLOCK (a FIFO never blocks: fstat
    the result before reading); the root itself is opened directly. The caller closes it."""
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if os.fspath(resolved) == os.fspath(real_root(root)):
        return os.open(resolved, flags)
    dfd = open_dir(root, os.path.dirname(os.fspath(resolved)))
    try:
        return os.open(os.path.basename(os.fspath(resolved)), flags, mode, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathOutside(os.fspath(resolved)) from e
        raise
    finally:
        os.close(dfd)


def open_inside(root, path, flags: int = os.O_RDONLY, mode: int = 0o666, *, write: bool = False,
                allow_outside: bool = False) -> tuple[int, Path]:
    """(descriptor, resolved path): `resolve` then `open_resolved`. Raises PathOutside, ValueError
    (unrepresentable path) or OSError (missing, permission, ...)."""
    p = resolve(root, path, write=write, allow_outside=allow_outside)
    return open_resolved(root, p, flags, mode), p


MISSING = (-1, -1)  # the identity of a path where nothing exists: it matches no file


def identity(root, resolved) -> tuple[int, int]:
    """(st_dev, st_ino) of the already-resolved path as the no-follow walk finds it now (the last
    component is not followed either); MISSING when nothing is there. Raises PathOutside when a
    component is (now) a symlink, OSError for the rest."""
    if os.fspath(resolved) == os.fspath(real_root(root)):
        st = os.stat(resolved)
        return st.st_dev, st.st_ino
    try:
        dfd = open_dir(root, os.path.dirname(os.fspath(resolved)))
    except (FileNotFoundError, NotADirectoryError):
        return MISSING
    try:
        st = os.stat(os.path.basename(os.fspath(resolved)), dir_fd=dfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return MISSING
    finally:
        os.close(dfd)
    if stat.S_ISLNK(st.st_mode):
        raise PathOutside(os.fspath(resolved))
    return st.st_dev, st.st_ino


def is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def display(root, path) -> str:
    """Path as shown to the model: relative to the root when inside it, else absolute; never
    contains undecodable surrogates (non-UTF-8 names are shown with U+FFFD)."""
    rroot = os.fspath(real_root(root))
    p = os.fspath(path)
    if is_inside(rroot, p):
        p = os.path.relpath(p, rroot)
    return p.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# ------------------------------------------------------------------ protected places, trust

def user_settings_dir(home=None) -> Path:
    """Folder of the user settings file: $NANOCODE_HOME, else ~/.config/nanocode."""
    env = os.environ.get("NANOCODE_HOME")
    if env:
        return Path(env).expanduser()
    return Path(Path.home() if home is None else home) / ".config" / "nanocode"


def _hooks_path(config: str) -> str | None:
    """core.hooksPath as set in one git config file (the last one set; None when unset or
    unreadable). A line-based reading of git's format: `[core]` sections, `key = value`, `#`/`;`
    comments; includes are not followed."""
    try:
        with open(config, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return None
    section, value = "", None
    for line in lines:
        line = line.strip()
        head = re.match(r"\[\s*([^\]\s\"]+)", line)
        if head:
            section, line = head.group(1).lower(), line[line.find("]") + 1:].strip()
        kv = re.match(r"([A-Za-z][\w-]*)\s*=\s*(.*)", line)
        if section == "core" and kv and kv.group(1).lower() == "hookspath":
            value = re.split(r"\s[#;]", kv.group(2), maxsplit=1)[0].strip().strip('"') or None
    return value


def _work_tree_top(root: str) -> str:
    """The nearest directory at or above root holding a .git (root when none)."""
    d = root
    while not os.path.lexists(os.path.join(d, ".git")):
        if os.path.dirname(d) == d:
            return root
        d = os.path.dirname(d)
    return d


def hooks_paths(root) -> list[str]:
    """Every core.hooksPath the user's git could use in this project, absolute: from each scope
    git reads (system, global and XDG files, GIT_CONFIG_GLOBAL/SYSTEM, GIT_CONFIG_COUNT/KEY_n/
    VALUE_n, the repository's config and its includes), asked of git itself in the project with
    this process's environment, plus the repository config parsed here in case git refuses the
    repository (safe.directory). `~` is expanded; relative values are taken from the work tree
    top, where git runs hooks. All values are returned, not only the last one git would use.
    Costs one `git config` process."""
    top = _work_tree_top(os.path.realpath(os.fspath(root)))
    values = [v for v in (_hooks_path(os.path.join(top, ".git", "config")),) if v]
    for cwd in (top, os.sep):
        try:
            r = subprocess.run(["git", "config", "--type=path", "--get-all", "core.hooksPath"], cwd=cwd,
                               capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            break
        values += r.stdout.splitlines()
        if r.returncode in (0, 1):  # found / not set: every scope was read
            break
    return [os.path.normpath(os.path.join(top, os.path.expanduser(v))) for v in dict.fromkeys(values) if v]


def project_venvs(root) -> list[str]:
    """Every virtualenv inside the project, absolute and as named: a folder holding VENV_MARKER
    at most VENV_DEPTH levels below the root (symlinks not followed, VENV_SKIP not entered),
    plus $VIRTUAL_ENV when it lies inside. Everything in one is code the user runs later
    (activate, the python wrappers, *.pth and sitecustomize at start-up, the installed
    packages), so all of it is protected, not only those files. Trade-off: a sandboxed command
    cannot install into a project venv (pip fails on the read-only folder; the user runs it) and
    a venv deeper than VENV_DEPTH is not found; costs a scandir of the root and of each folder
    below it."""
    root = os.path.abspath(os.fspath(root))
    out, level = [], [root]
    for _ in range(VENV_DEPTH):
        below = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    below += [e.path for e in it if e.name not in VENV_SKIP and e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
        out += [d for d in below if os.path.isfile(os.path.join(d, VENV_MARKER))]
        level = [d for d in below if d not in out]
    active = os.path.realpath(os.environ["VIRTUAL_ENV"]) if os.environ.get("VIRTUAL_ENV") else None
    if active and is_inside(root, active) and active != os.fspath(real_root(root)):
        out.append(active)
    return list(dict.fromkeys(out))


def _places(root, home, hooks: list[str]) -> list[tuple[str, str]]:
    """(absolute folder, why) of every protected place, each as named and as resolved."""
    root = os.fspath(root)
    named = [(os.path.join(root, ".nanocode"), "nanocode settings"), (os.path.join(root, ".git"), "git internals"),
             (os.path.join(root, ".mcp.json"), "the project's MCP servers (programs nanocode runs)")]
    named += [(os.path.join(root, d), "git hooks") for d in HOOK_DIRS]
    named += [(h, "git hooks (core.hooksPath)") for h in hooks]
    named += [(v, "a virtualenv (code that runs when it is used)") for v in project_venvs(root)]
    named.append((os.fspath(user_settings_dir(home)), "nanocode user settings"))
    out = []
    for place, why in named:
        out += [(os.path.normpath(place), why), (os.path.realpath(place), why)]
    return out


def _under(path: str, folder: str) -> bool:
    p, f = os.path.normcase(path).lower(), os.path.normcase(folder).lower().rstrip(os.sep)
    return p == f or p.startswith(f + os.sep)


def protected(root, path, home=None) -> str | None:
    """Why an Edit of `path` must ask whatever the mode or rules say, or None. Judged on the
    literal path (relative to `root`, symlinks not followed) and on the resolved one."""
    p = os.path.expanduser(os.fspath(path)) if os.fspath(path).startswith("~") else os.fspath(path)
    literal = os.path.normpath(os.path.join(os.path.abspath(os.fspath(root)), p))
    resolved = os.path.realpath(literal)
    rroot = os.fspath(real_root(root))
    for full in (literal, resolved):
        base = rroot if is_inside(rroot, full) else os.path.abspath(os.fspath(root))
        for part in os.path.relpath(full, base).split(os.sep):
            if part.lower() == ".git":
                return f"changes git internals ({display(root, full)})"
            if part.lower() == ".nanocode":
                return f"changes nanocode settings ({display(root, full)})"
    hooks = hooks_paths(root)
    for place, why in _places(rroot, home, hooks) + _places(os.path.abspath(os.fspath(root)), home, hooks):
        if _under(literal, place) or _under(resolved, place):
            return f"changes {why} ({display(root, resolved)})"
    return None


def trust_problem(root, home=None) -> str | None:
    """Why the folder `root` needs an explicit "trust this folder?" prompt before a session starts
    in it, or None: it is `/`, $HOME or a parent of $HOME, or holds no project marker
    (PROJECT_MARKERS: .git, pyproject.toml, package.json, ...)."""
    r = os.path.realpath(os.fspath(root))
    h = os.path.realpath(os.fspath(Path.home() if home is None else home))
    if r == os.sep:
        return "the folder is the file-system root /"
    if r == h:
        return "the folder is your home folder"
    if _under(h, r):
        return f"the folder contains your home folder ({h})"
    if not any(os.path.lexists(os.path.join(r, m)) for m in PROJECT_MARKERS):
        return "the folder has no project marker (.git, pyproject.toml, package.json, ...)"
    return None


# ------------------------------------------------------------------ project settings, accepted once

SETTINGS_FILES = (".nanocode/settings.json", ".nanocode/settings.local.json", ".mcp.json")  # .mcp.json: MCP servers
ACCEPTED_FILE = "accepted-project-settings.json"
MAX_SETTINGS_BYTES = 1 << 20
_KEPT_TEXT = 64 * 1024  # accepted text kept for the diff (larger: only its hash)


@dataclass(frozen=True)
class ProjectSettings:
    """One project settings file that exists. data: its bytes as read through the guard (None
    when it is never loaded; `problem` says why). trusted: data is what the user accepted for
    this project. accepted: the text accepted before (None: never, or too large to keep)."""
    path: Path
    data: bytes | None
    problem: str = ""
    trusted: bool = False
    accepted: str | None = None


def accepted_store(home=None) -> Path:
    return user_settings_dir(home) / ACCEPTED_FILE


def _read_store(path: Path) -> dict:
    """The accepted-settings store; {} when missing or unreadable (nothing accepted: safe)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) else None
    return projects if isinstance(projects, dict) else {}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_settings_file(root, name: str) -> tuple[bytes | None, str]:
    try:
        fd, _ = open_inside(root, name)
    except PathOutside:
        return None, "it links outside the project"
    except (OSError, ValueError) as e:
        return None, f"cannot read it ({e})"
    with os.fdopen(fd, "rb") as f:
        if not is_regular(f.fileno()):
            return None, "not a regular file"
        data = f.read(MAX_SETTINGS_BYTES + 1)
    if len(data) > MAX_SETTINGS_BYTES:
        return None, f"over {MAX_SETTINGS_BYTES // 2**20} MB"
    return data, ""


def project_settings(root, home=None) -> list[ProjectSettings]:
    """The project's settings files that exist, each read once through the guard, with whether
    the user accepted exactly these bytes for this project."""
    accepted = _read_store(accepted_store(home)).get(os.fspath(real_root(root)), {})
    out = []
    for name in SETTINGS_FILES:
        path = Path(root) / name
        if not os.path.lexists(path):
            continue
        data, problem = _read_settings_file(root, name)
        entry = accepted.get(path.name) if isinstance(accepted.get(path.name), dict) else {}
        trusted = data is not None and entry.get("sha256") == _sha256(data)
        text = entry.get("text") if isinstance(entry.get("text"), str) else None
        out.append(ProjectSettings(path, data, problem, trusted, text))
    return out


def accept_settings(root, files: list[ProjectSettings], home=None) -> Path:
    """Record `files` (their bytes as read) as accepted for this project; returns the store's
    path. Re-read just before the write (another session may have accepted meanwhile) and written
    atomically (temp file, fsync, rename). Raises OSError when the folder is not writable."""
    store = accepted_store(home)
    store.parent.mkdir(parents=True, exist_ok=True)
    projects = _read_store(store)
    mine = projects.setdefault(os.fspath(real_root(root)), {})
    for f in files:
        if f.data is None:
            continue
        text = f.data.decode("utf-8", "replace")
        mine[f.path.name] = {"sha256": _sha256(f.data), **({"text": text} if len(text) <= _KEPT_TEXT else {})}
    write_atomic(store, json.dumps({"projects": projects}, indent=1, sort_keys=True).encode())
    return store
