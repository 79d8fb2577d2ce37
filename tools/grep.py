"""Grep tool: Python regex over every text file under a path; never raises.

Output: `path:line:content` for matches, `path-line-content` for -A/-B context lines, `--` between
non-adjacent groups of one file when context is asked for, `no matches found` when empty. Paths are
relative to the project root when inside it. At most MAX_MATCHES matching lines are shown; then a
final line `... (N more matches not shown)`.

Files: when `git ls-files --cached --others --exclude-standard` works for the search directory (it
is in a git work tree and git is installed), its list is used, so .gitignore is respected; otherwise
the tree is walked, skipping SKIP_DIRS and the patterns of a .gitignore at the search root (simple
fnmatch subset: `name`, `dir/`, `/anchored`, `*.ext`; negations are ignored). Always skipped: .git,
files over MAX_FILE_BYTES (5 MB), binary files (NUL in the first 8 KB), symlinks resolving outside
the root, and unreadable files. ripgrep is not used (not installed here); the Python path is the
reference implementation.
"""
from __future__ import annotations

import fnmatch
import os
import re
import subprocess

from tools.files import SNIFF_BYTES, _err, get_int, get_str, is_binary_bytes, unexpected
from tools.workspace import PathOutside, display, is_inside, resolve

MAX_MATCHES = 200
MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_LINE_CHARS = 2000
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache",
             ".pytest_cache", ".tox", ".ruff_cache", ".ipynb_checkpoints"}


def _git_files(d: str):
    try:
        r = subprocess.run(["git", "-C", d, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    names = [os.fsdecode(x) for x in r.stdout.split(b"\0") if x]
    return sorted(set(os.path.join(d, n) for n in names))


def _gitignore(d: str):
    pats = []
    try:
        with open(os.path.join(d, ".gitignore"), encoding="utf-8", errors="replace") as f:
            for l in f:
                l = l.strip()
                if l and not l.startswith("#") and not l.startswith("!"):
                    pats.append(l)
    except OSError:
        pass
    return pats


def _ignored(rel: str, is_dir: bool, pats) -> bool:
    name = os.path.basename(rel)
    for p in pats:
        dir_only = p.endswith("/")
        p = p.rstrip("/")
        if dir_only and not is_dir:
            continue
        if p.startswith("/") or "/" in p:
            if fnmatch.fnmatch(rel, p.lstrip("/")):
                return True
        elif fnmatch.fnmatch(name, p):
            return True
    return False


def _walk_files(d: str):
    pats = _gitignore(d)
    out = []
    for cur, dirs, files in os.walk(d, followlinks=False):
        reld = os.path.relpath(cur, d)
        keep = []
        for x in dirs:
            rel = x if reld == "." else os.path.join(reld, x)
            if x in SKIP_DIRS or _ignored(rel, True, pats):
                continue
            if os.path.islink(os.path.join(cur, x)):
                continue
            keep.append(x)
        dirs[:] = sorted(keep)
        for x in files:
            rel = x if reld == "." else os.path.join(reld, x)
            if not _ignored(rel, False, pats):
                out.append(os.path.join(cur, x))
    return sorted(out)


def grep(root, args: dict, *, allow_outside: bool = False) -> str:
    try:
        return _grep(root, args, allow_outside)
    except Exception as e:  # noqa: BLE001 - tools never raise
        return unexpected(e)


def _grep(root, args, allow_outside):
    pattern, err = get_str(args, "pattern")
    if err:
        return err
    path, err = get_str(args, "path", required=False)
    if err:
        return err
    after, err = get_int(args, "-A", 0, 0)
    if err:
        return err
    before, err = get_int(args, "-B", 0, 0)
    if err:
        return err
    try:
        rx = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        return _err(f"invalid regex: {e}")
    try:
        base = resolve(root, path or ".", write=False, allow_outside=allow_outside)
    except PathOutside:
        return _err("path outside the project")
    except ValueError:
        return _err("file not found")
    if not os.path.exists(base):
        return _err("file not found")
    if os.path.isdir(base):
        files = _git_files(os.fspath(base))
        if files is None:
            files = _walk_files(os.fspath(base))
    else:
        files = [os.fspath(base)]
    outside_ok = allow_outside and not is_inside(root, base)
    out, shown, hidden = [], 0, 0
    for fp in files:
        if os.sep + ".git" + os.sep in fp + os.sep and not os.sep + ".git" + os.sep in os.fspath(base) + os.sep:
            continue
        real = os.path.realpath(fp)
        if not outside_ok and not is_inside(root, real):
            continue
        try:
            if not os.path.isfile(real) or os.path.getsize(real) > MAX_FILE_BYTES:
                continue
            with open(real, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if is_binary_bytes(data[:SNIFF_BYTES]):
            continue
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        text = data.decode("utf-8", "replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        lines = [l[:-1] if l.endswith("\r") else l for l in lines]
        hits = [i for i, l in enumerate(lines) if rx.search(l)]
        if not hits:
            continue
        if shown >= MAX_MATCHES:
            hidden += len(hits)
            continue
        if shown + len(hits) > MAX_MATCHES:
            hidden += shown + len(hits) - MAX_MATCHES
            hits = hits[:MAX_MATCHES - shown]
        shown += len(hits)
        name = display(root, fp if is_inside(root, fp) else real)
        hitset, last = set(hits), None
        for h in hits:
            lo, hi = max(0, h - before), min(len(lines) - 1, h + after)
            if last is not None and lo <= last:
                lo = last + 1
            elif last is not None and (before or after):
                out.append("--")
            for i in range(lo, hi + 1):
                line = lines[i]
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + " … (line truncated)"
                sep = ":" if i in hitset else "-"
                out.append(f"{name}{sep}{i + 1}{sep}{line}")
            last = max(hi, last if last is not None else -1)
    if not out:
        return "no matches found"
    if hidden:
        out.append(f"... ({hidden} more matches not shown)")
    return "\n".join(out)
