"""Where the paths a shell command names land, for tools/destructive.py: `Where` holds $HOME, the
project root, the temp dirs and the directory the command has `cd`-ed to, and says whether a path
is outside the project, scratch (a literal path below a temp dir), or an existing project path
undo could not restore (tools/snapshot.unrestorable); `target_reason` says why writing to a path
needs a person. Never runs anything but the git processes `unrestorable` starts.
"""
from __future__ import annotations

import glob
import os
import re

from tools.snapshot import unrestorable

_HOME_DOT = re.compile(r"^(?:~[\w.-]*|\$HOME|\$\{HOME\}|/home/[^/]+|/Users/[^/]+|/root)/+\.")
_SYSTEM = re.compile(r"^/(?:etc|boot|usr|bin|sbin|lib|lib32|lib64|sys|proc)(?:/|$)")
_DISK = re.compile(r"^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-)")
GIT_DIR = re.compile(r"(?:^|/)\.git(?:/|$)", re.I)
_TEMP_DIRS = ("/tmp", "/var/tmp")  # and $TMPDIR: scratch space (a private tmpfs in the sandbox)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Where:
    """What paths in a command are judged against: $HOME, the project root (None: unknown), the
    temp dirs and the directory the command is in after its `cd`s (None: not known from the text)."""

    def __init__(self, home, root):
        self.home, self.root = home, None if root is None else os.path.realpath(os.fspath(root))
        self.cwd = self.root
        self.homes = {os.path.normpath(os.fspath(home)), os.path.realpath(home)}
        env = os.path.normpath(os.environ.get("TMPDIR") or "/")
        own = not any(_within(h, env) for h in self.homes)  # a $TMPDIR of / or holding $HOME is not scratch
        temps = _TEMP_DIRS + ((env,) if own and os.path.isabs(env) else ())
        self.temps = {t for d in temps for t in (os.path.normpath(d), os.path.realpath(d))}

    def abspath(self, path: str) -> str | None:
        """`path` made absolute (~ and $HOME expanded); None when the current directory is unknown."""
        for h in ("~", "$HOME", "${HOME}"):
            if path == h or path.startswith(h + "/"):
                path = os.fspath(self.home) + path[len(h):]
        if os.path.isabs(path):
            return os.path.normpath(path)
        return os.path.normpath(os.path.join(self.cwd, path)) if self.cwd else None

    def outside(self, path: str) -> bool:
        """True when `path` names a place outside the project; False when the root is unknown or
        the path is computed at run time ($VAR, substitutions)."""
        full = None if self.root is None else self.abspath(path)
        if self.root is None or re.search(r"[$`\ue000]", path.replace("${HOME}", "").replace("$HOME", "")):
            return False
        return full is None or not (_within(full, self.root) or self.scratch(path))

    def scratch(self, path: str) -> bool:
        """True when `path` is a literal path below a temp dir (not the dir itself) and neither under
        $HOME nor the project or a folder holding it; False when the root is unknown."""
        if self.root is None or path[:1] == "~" or re.search(r"[$`*?\[\ue000]", path):
            return False
        full = self.abspath(path)
        if full is None or any(_within(full, h) for h in self.homes):
            return False
        if _within(full, self.root) or _within(self.root, full):
            return False
        return any(full != t and _within(full, t) for t in self.temps)

    def lost(self, paths: list[str], computed: bool = False) -> str | None:
        """The first of `paths` inside the project that exists (globs expanded) and undo could not
        restore if it were destroyed, or None; with `computed`, a path computed at run time
        ($VAR, a substitution) counts as such."""
        if self.root is None:
            return None
        found = {}
        for path in paths:
            if re.search(r"[$`\ue000]", path):
                if computed and not self.outside(path):
                    return path
                continue
            full = self.abspath(path)
            matches = glob.glob(full) if full and re.search(r"[*?\[]", path) else [full]
            for m in matches:
                if m and _within(m, self.root) and m != self.root and os.path.lexists(m):
                    found.setdefault(os.path.relpath(m, self.root), path)
        lost = unrestorable(self.root, list(found)) if found else []
        return found[lost[0]] if lost else None

    def cd(self, args: list[str]) -> None:
        target = next((a for a in args if not a.startswith("-") or a == "-"), "~")  # `cd -`: the last one
        self.cwd = self.abspath(target) if target != "-" else None


def home_dotfile(path: str, home) -> bool:
    """Whether `path` names a dot-file or dot-folder directly in $HOME (~/.x, $HOME/.x, /home/u/.x)."""
    if _HOME_DOT.match(path):
        return True
    h = os.path.realpath(home).rstrip("/") + "/"
    return path.startswith(h) and path[len(h):].lstrip("/").startswith(".")


def target_reason(path: str, where: Where) -> str | None:
    """Why writing to `path` needs a person (a $HOME dot-file, a disk, a system path, git
    internals, outside the project, unrestorable by undo), or None."""
    if home_dotfile(path, where.home):
        return f"writes to a dot-file in $HOME ({path})"
    if _DISK.match(path):
        return f"writes to a raw disk device ({path})"
    if _SYSTEM.match(path):
        return f"writes to a system path ({path})"
    if GIT_DIR.search(path):
        return f"writes to git internals ({path})"
    if path != "/dev/null" and where.outside(path):
        return f"writes outside the project ({path})"
    if where.lost([path]):
        return f"overwrites {path}, which undo cannot restore (ignored by git or not snapshotted)"
    return None
