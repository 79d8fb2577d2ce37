"""The Python environment the model's commands run in: the project's, never nanocode's own.

nanocode is installed in a virtualenv of its own (pipx, uv tool, or a venv you made); if its
commands inherited that, `pytest` in your project would be nanocode's pytest, without your
packages. `choose(root)` decides, first match wins:

1. OVERRIDE ($NANOCODE_PYTHON_ENV): a folder holding bin/python, chosen outright (the task
   harness sets it to its own interpreter's prefix: tasks/projects.setup_env);
2. the active virtualenv ($VIRTUAL_ENV) unless it is nanocode's own (`own_venv`);
3. the project's PROJECT_VENVS (.venv, then venv): a virtualenv (pyvenv.cfg and bin/python)
   that git does not track;
4. else the python the user's PATH gives, with nanocode's own venv's bin dir taken out.

The result is the PATH for the commands (the chosen env's bin first; nanocode's own bin dir is
never on it, unless that venv is the one chosen, e.g. nanocode's own checkout), the VIRTUAL_ENV
to set or unset, a one-line `label` and a `short` one, and the folders its interpreter needs
(`dirs`: tools/sandbox.py carries those that lie under the sandbox's private /tmp).

A candidate that cannot be used is passed over with a note in the label, never an error: a
missing or dangling bin/python (an interpreter since removed, a venv made on Windows), a folder
without pyvenv.cfg, a venv git tracks. Why the last: a repository's own files must not replace
the commands you approve (a committed `.venv/bin/git` would run for `git status`); a venv you
made is untracked. Nothing here executes the candidate: its version comes from pyvenv.cfg or the
interpreter's file name. Cost: a few stats per call, plus one `git ls-files` per venv whose
folder or git index changed (cached).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from tools.git import git
from tools.workspace import VENV_MARKER

OVERRIDE = "NANOCODE_PYTHON_ENV"
PROJECT_VENVS = (".venv", "venv")
SHORT_NAME = 14  # the most characters of a venv's name on the status line


@dataclass(frozen=True)
class ProjectEnv:
    """What the model's commands get (module docstring). `virtual_env` None: VIRTUAL_ENV unset."""
    path: str
    virtual_env: str | None
    label: str
    short: str
    dirs: tuple[str, ...] = ()

    def apply(self, env: dict) -> dict:
        """`env` (a command's environment) with this PATH and VIRTUAL_ENV; changed in place."""
        if self.path:
            env["PATH"] = self.path
        env.pop("VIRTUAL_ENV", None)
        if self.virtual_env:
            env["VIRTUAL_ENV"] = self.virtual_env
        return env


def own_venv() -> str | None:
    """nanocode's own virtualenv: this interpreter's sys.prefix when it runs in one, else None."""
    return sys.prefix if sys.prefix != sys.base_prefix else None


def choose(root, environ=None, own: str | None = None) -> ProjectEnv:
    """The environment for commands run in project `root` (module docstring). `environ`: the
    variables to read (default os.environ); `own`: nanocode's own venv (default `own_venv()`)."""
    environ = os.environ if environ is None else environ
    own = own_venv() if own is None else own
    root = os.path.realpath(os.fspath(root))
    bins = [d for d in environ.get("PATH", "").split(os.pathsep) if d]
    if own:
        bins = [d for d in bins if not _same(d, os.path.join(own, "bin"))]
    notes = []
    for kind, folder in _candidates(root, environ, own):
        problem = _problem(kind, folder, root)
        if problem:
            notes.append((kind, folder, problem))
            continue
        bin_dir = os.path.join(folder, "bin")
        version = _version(folder)
        label = f"{_name(kind, folder, root)} ({'Python ' + version if version else 'Python'})"
        short = f"python {_short_name(kind, folder, root)} {version or ''}".strip()
        is_venv = os.path.isfile(os.path.join(folder, VENV_MARKER))
        return ProjectEnv(os.pathsep.join([bin_dir] + [d for d in bins if not _same(d, bin_dir)]),
                          folder if is_venv else None, _with_notes(label, notes),
                          _with_passed_over(short, notes), _needed_dirs(folder))
    path = os.pathsep.join(bins)
    name, found = next(((n, w) for n in ("python", "python3") if (w := shutil.which(n, path=path))),
                       ("python", None))
    label = f"system {name} at {found}" if found else "no python on PATH"
    short = f"system {name}" if found else "no python"
    return ProjectEnv(path, None, _with_notes(label, notes), _with_passed_over(short, notes),
                      (_prefix(found),) if found else ())


def _candidates(root: str, environ, own: str | None):
    """(kind, absolute folder) in the order of the module docstring."""
    if environ.get(OVERRIDE):
        yield "chosen", os.path.abspath(environ[OVERRIDE])
    active = environ.get("VIRTUAL_ENV")
    if active and not (own and _same(active, own)):
        yield "active", os.path.abspath(active)
    for name in PROJECT_VENVS:
        folder = os.path.join(root, name)
        if os.path.lexists(folder):
            yield "project", folder


def _problem(kind: str, folder: str, root: str) -> str | None:
    """Why `folder` cannot be the environment, or None when it can."""
    name = _name(kind, folder, root)
    python = os.path.join(folder, "bin", "python")
    if not os.path.isdir(folder):
        return f"{name} is not a folder"
    if not os.path.exists(python):
        if os.path.islink(python):
            return (f"{name} is broken: bin/python points to {os.readlink(python)!r}, which is gone; "
                    f"recreate it (python3 -m venv --clear {folder})")
        if os.path.isdir(os.path.join(folder, "Scripts")):
            return f"{name} was made on Windows (Scripts, no bin/python); recreate it here"
        return f"{name} has no bin/python"
    if kind == "project":
        if not os.path.isfile(os.path.join(folder, VENV_MARKER)):
            return f"{name} is not a virtualenv (no {VENV_MARKER})"
        if _tracked(root, os.path.basename(folder), _signature(folder, root)):
            return f"{name} is tracked by git (a repository's files do not replace your commands)"
    return None


def _signature(folder: str, root: str) -> tuple:
    """What `_tracked`'s answer depends on: the venv folder and the git index, as stat sees them."""
    out = []
    for p in (folder, os.path.join(root, ".git", "index")):
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _tracked(root: str, name: str, signature: tuple) -> bool:
    """Whether git tracks anything under root/name (False where git cannot tell)."""
    try:
        return bool(git(root, "ls-files", "-z", "--", name, timeout=10).stdout)
    except (OSError, subprocess.SubprocessError):
        return False


def _version(folder: str) -> str | None:
    """The Python version pyvenv.cfg records (venv: `version`, uv: `version_info`), else the one
    in the interpreter's file name (python3.11), else None."""
    try:
        with open(os.path.join(folder, VENV_MARKER), encoding="utf-8", errors="replace") as f:
            for line in f.read(65536).splitlines():
                key, _, value = line.partition("=")
                if key.strip() in ("version", "version_info") and re.fullmatch(r"[\d.]+\w*", value.strip()):
                    return value.strip()
    except OSError:
        pass
    m = re.fullmatch(r"python(\d+\.\d+)", os.path.basename(os.path.realpath(os.path.join(folder, "bin", "python"))))
    return m.group(1) if m else None


def _prefix(python: str) -> str:
    """The prefix of the interpreter `python` resolves to (/usr for /usr/bin/python3.11)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(python)))


def _needed_dirs(folder: str) -> tuple[str, ...]:
    """`folder` and the prefix of the interpreter its bin/python resolves to, resolved."""
    found = [os.path.realpath(folder)]
    python = os.path.join(folder, "bin", "python")
    if os.path.exists(python):
        found.append(_prefix(python))
    return tuple(dict.fromkeys(found))


def _name(kind: str, folder: str, root: str) -> str:
    if kind == "project":
        return f"project {os.path.relpath(folder, root)}"
    return f"{OVERRIDE} {folder}" if kind == "chosen" else f"active venv {folder}"


def _short_name(kind: str, folder: str, root: str) -> str:
    """The status line's name: `.venv`, `venv NAME` (NAME: the folder, with its parent when it is
    a generic .venv/venv), `env NAME` for one OVERRIDE chose."""
    if kind == "project":
        return os.path.relpath(folder, root)
    base = os.path.basename(folder.rstrip(os.sep))
    if base in PROJECT_VENVS:
        base = os.path.join(os.path.basename(os.path.dirname(folder.rstrip(os.sep))), base)
    if len(base) > SHORT_NAME:  # the status line's other fields keep their room
        base = "…" + base[-(SHORT_NAME - 1):]
    return f"{'env' if kind == 'chosen' else 'venv'} {base}"


def _with_notes(label: str, notes) -> str:
    return label + "".join(f" [not used: {problem}]" for _, _, problem in notes)


def _with_passed_over(short: str, notes) -> str:
    passed = [os.path.basename(folder) if kind == "project" else f"{kind} venv" for kind, folder, _ in notes]
    return f"{short} ({', '.join(passed)} not used)" if passed else short


def _same(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)
