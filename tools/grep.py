"""Grep tool: Python regex over every text file under a path; never raises.

Output: `path:line:content` for matches, `path-line-content` for -A/-B context lines, `--` between
non-adjacent groups of one file when context is asked for, `no matches found` when empty (followed
by ` (closest names: a, b)` when an identifier of the pattern occurs in none of the searched files,
tools/closest.py). Paths are relative to the project root when inside it. Bounds: -A/-B over
MAX_CONTEXT count as MAX_CONTEXT; at most MAX_MATCHES matching lines, MAX_OUTPUT_LINES lines and
MAX_OUTPUT_BYTES bytes are shown (lines over MAX_LINE_CHARS are cut), whichever comes first, then
a final line `... (N more matches not shown)` (the format the tools have always had, so training
data and live output agree). A missing path is `error: file not found`, naming the closest
existing paths when some are close.

Files: when `git ls-files --cached --others --exclude-standard` works for the search directory (it
is in a git work tree and git is installed; run through tools/git.py, so nothing the repo's
config names is executed), its list is used, so .gitignore is respected; otherwise
the tree is walked, skipping SKIP_DIRS and the patterns of a .gitignore at the search root (simple
fnmatch subset: `name`, `dir/`, `/anchored`, `*.ext`; negations are ignored). Always skipped: .git,
files over MAX_FILE_BYTES (5 MB), files whose name is not UTF-8 (Read could not be given it back),
binary files (NUL in the first 8 KB), symlinks resolving outside the root, and unreadable files;
a last line in parentheses names the big ones (and how to search one) and counts the others. Every file is opened where it was checked
(tools.workspace.open_resolved) and searched through that descriptor, by either engine.
`same_as` is the (st_dev, st_ino) of the path the permission check judged
(tools/permissions.Decision): a search path that is now another file or folder is refused
(files.CHANGED, also when it or a listed file is swapped for a link while being resolved), and
an approved search outside the project reads only files whose real path is below that folder
(a subfolder swapped for a link elsewhere is left out).

Engines: the file list, the binary/size filters and the output formatting are ours either way; the
line matching runs in ripgrep when `rg` is on PATH (linear-time regex, parallel, no catastrophic
backtracking; pip's `ripgrep` wheel provides it) and in Python's `re` otherwise, or when rg rejects
the pattern (lookarounds, backreferences). tests/test_tools_grep.py asserts both give identical
output. The Python engine stops after MAX_SECONDS and says so; a single pathological pattern on one
line can still take longer than that (re cannot be interrupted from another thread).
"""
from __future__ import annotations

import base64
import fnmatch
import functools
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import warnings

from tools.closest import SKIP_DIRS, git_files, names_hint, path_hint
from tools.files import (CHANGED, NOT_FOUND, SNIFF_BYTES, _err, get_int, get_str, is_binary_bytes, resolve_arg,
                         unexpected)
from tools.workspace import (PathOutside, PathSwapped, display, identity, is_inside, open_resolved, real_root,
                             realpath)

MAX_MATCHES = 200
MAX_CONTEXT = 50               # -A / -B larger than this are cut to it
MAX_OUTPUT_BYTES = 30_000      # the output (UTF-8, before the final note) stops short of this ...
MAX_OUTPUT_LINES = 500         # ... and of this many lines, match, context and `--` lines alike
MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_LINE_CHARS = 2000
MAX_SECONDS = 20      # the Python search stops (and says so) after this long; rg gets the same limit
RG_BATCH = 1000       # paths per rg process (argv stays far below ARG_MAX)
TIMED_OUT = object()  # key in the search result: the Python search hit MAX_SECONDS
NO_MATCHES = "no matches found"


def _git_files(d: str):
    names = git_files(d)
    return None if names is None else [os.path.join(d, n) for n in names]


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


def grep(root, args: dict, *, allow_outside: bool = False, use_rg: bool = True,
         same_as: tuple[int, int] | None = None) -> str:
    """Search; `use_rg=False` forces the Python engine (the reference the rg path must equal);
    `same_as`: the search path must still be this (st_dev, st_ino) (module docstring)."""
    try:
        return _grep(root, args, allow_outside, use_rg, same_as)
    except Exception as e:  # noqa: BLE001 - tools never raise
        return unexpected(e)


def _same(root, base, same_as) -> bool:
    try:
        return identity(root, base) == tuple(same_as)
    except (PathOutside, OSError):
        return False


def _grep(root, args, allow_outside, use_rg, same_as):
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
    after, before = min(after, MAX_CONTEXT), min(before, MAX_CONTEXT)
    try:
        with warnings.catch_warnings():  # e.g. "possible set intersection": the tool says nothing
            warnings.simplefilter("ignore")
            rx = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        return _err(f"invalid regex: {e}")
    base, err = resolve_arg(root, path or ".", write=False, allow_outside=allow_outside)
    if err:
        return err
    if same_as is not None and not _same(root, base, same_as):
        return _err(CHANGED)
    if not os.path.exists(base):
        return _err(NOT_FOUND + path_hint(root, base, dirs=True))
    if os.path.isdir(base):
        files = _git_files(os.fspath(base))
        if files is None:
            files = _walk_files(os.fspath(base))
    else:
        files = [os.fspath(base)]
    within = os.fspath(base if allow_outside and not is_inside(root, base) else real_root(root))
    listed = []  # (shown name, real path) of every file that may be searched, in output order
    undecodable = 0
    for fp in files:
        if os.sep + ".git" + os.sep in fp + os.sep and not os.sep + ".git" + os.sep in os.fspath(base) + os.sep:
            continue
        try:
            real = realpath(fp)
        except PathSwapped:  # a listed file or folder swapped for a link (or back) meanwhile
            return _err(CHANGED)
        if real == within or real.startswith(within.rstrip(os.sep) + os.sep):  # `within` as judged, not re-resolved
            try:
                os.fsencode(fp).decode("utf-8")
            except UnicodeDecodeError:  # a name Read could not be given back: said, not searched
                undecodable += 1
                continue
            listed.append((display(root, fp if is_inside(root, fp) else real), real))
    candidates, found, big = _search(root, pattern, rx, listed, before, after, use_rg)
    out = _format(candidates, found, before, after)
    if out == NO_MATCHES:
        out += names_hint(pattern, [r for _, r in candidates])
    if undecodable:
        out += (f"\n(not searched: {undecodable} file{'s' * (undecodable != 1)} whose name is not "
                "UTF-8; rename them to search them)")
    return out + _big_note(big)


def _big_note(big: list[tuple[str, int]]) -> str:
    """Says which files were too big to search (never a silent `no matches found`)."""
    if not big:
        return ""
    names = ", ".join(f"{name} ({size / 2**20:.1f} MB)" for name, size in big[:5])
    more = f" and {len(big) - 5} more" if len(big) > 5 else ""
    return (f"\n(not searched, over the {MAX_FILE_BYTES // 2**20} MB limit: {names}{more}; "
            "Bash `grep -n PATTERN FILE` searches one)")


def _open_text(root, real: str) -> tuple[int | None, int]:
    """(a descriptor of the file the check saw (tools.workspace.open_resolved: no component may
    have become a symlink since), or None when it is not a regular text file under the size cap;
    the size of a regular file over the cap, else 0)."""
    try:
        fd = open_resolved(root, real)
    except (OSError, PathOutside):
        return None, 0
    big = 0
    try:
        st = os.fstat(fd)
        big = st.st_size if stat.S_ISREG(st.st_mode) and st.st_size > MAX_FILE_BYTES else 0
        if stat.S_ISREG(st.st_mode) and not big and not is_binary_bytes(os.pread(fd, SNIFF_BYTES, 0)):
            return fd, 0
    except OSError:
        pass
    os.close(fd)
    return None, big


def _search(root, pattern, rx, listed, before, after, use_rg):
    """(candidates, found, big): the text files searched, the hits by real path, and (shown
    name, size) of the files over MAX_FILE_BYTES left out. Files are opened
    RG_BATCH at a time and both engines read the open descriptors (rg gets them as /dev/fd/N),
    so what is searched is what was checked, whatever is swapped on disk meanwhile."""
    candidates, found, big, deadline = [], {}, [], time.monotonic() + MAX_SECONDS
    for i in range(0, len(listed), RG_BATCH):
        fds = {}
        try:
            for shown, real in listed[i:i + RG_BATCH]:
                fd, size = _open_text(root, real)
                if size:
                    big.append((shown, size))
                if fd is not None and real not in fds:
                    fds[real] = fd
                    candidates.append((shown, real))
            part = _rg_search(pattern, fds, before, after, deadline) if use_rg else None
            if part is None:
                part = _py_search(rx, fds, deadline)
        finally:
            for fd in fds.values():
                os.close(fd)
        found.update(part)
        if part.get(TIMED_OUT):
            break
    return candidates, found, big


def _lines(data: bytes) -> list[str]:
    """The file's lines as the search sees them: BOM dropped, bad bytes as U+FFFD, CR of CRLF cut."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [l[:-1] if l.endswith("\r") else l for l in lines]


def _py_search(rx, fds: dict, deadline: float):
    """{real path: (hit line indexes, {index: line})} with Python's re over the open files
    {real path: fd}; stops at the deadline."""
    found = {}
    for real, fd in fds.items():
        if time.monotonic() > deadline:
            found[TIMED_OUT] = True
            break
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                f.seek(0)
                lines = _lines(f.read())
        except OSError:
            continue
        hits = [i for i, l in enumerate(lines) if rx.search(l)]
        if hits:
            found[real] = (hits, dict(enumerate(lines)))
    return found


@functools.lru_cache(maxsize=1)
def _rg_path() -> str | None:
    return shutil.which("rg") or shutil.which("rg", path=os.path.dirname(sys.executable))


def _rg_search(pattern, fds: dict, before, after, deadline: float):
    """The same result as _py_search from ripgrep's --json output (linear-time regex, parallel), or
    None when rg is missing or rejects the pattern (lookarounds, backreferences): Python then runs.
    Patterns whose meaning differs between the engines go to Python too: POSIX classes `[[:`, and
    `&&` `--` `~~` which rg reads as set operations inside a bracket."""
    rg = _rg_path()
    if rg is None or "[[:" in pattern or ("[" in pattern and any(op in pattern for op in ("&&", "--", "~~"))):
        return None
    found = {}
    flags = ["--json", "--no-config", "--no-ignore", "--hidden", "--text", "--crlf", "--no-messages",
             "-A", str(after), "-B", str(before), "-e", pattern, "--"]
    if not fds:
        return found
    real_of = {f"/dev/fd/{fd}": real for real, fd in fds.items()}  # rg reads our descriptors
    try:
        r = subprocess.run([rg, *flags, *real_of], capture_output=True, pass_fds=tuple(fds.values()),
                           timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        found[TIMED_OUT] = True  # say the search stopped
        return found
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode not in (0, 1) and not r.stdout:  # 2 with output: some file was unreadable
        return None
    for raw in r.stdout.splitlines():
        msg = json.loads(raw)
        if msg["type"] not in ("match", "context"):
            continue
        d = msg["data"]
        path = d["path"].get("text") or os.fsdecode(base64.b64decode(d["path"]["bytes"]))
        text = _rg_text(d["lines"]).rstrip("\n")
        hits, lines = found.setdefault(real_of.get(path, path), ([], {}))
        n = d["line_number"] - 1
        lines[n] = text[:-1] if text.endswith("\r") else text
        if msg["type"] == "match":
            hits.append(n)
    return found


def _rg_text(field) -> str:
    """A line of rg's JSON: text when it is UTF-8, else base64 bytes (decoded like _lines does)."""
    if "text" in field:
        return field["text"]
    return base64.b64decode(field["bytes"]).decode("utf-8", "replace")


def _format(candidates, found, before, after) -> str:
    out, size, total, shown, full = [], 0, 0, 0, False

    def put(*new: str) -> bool:  # all of `new` or nothing (a `--` only with the line it leads)
        nonlocal size, full
        size += sum(len(x.encode("utf-8", "surrogateescape")) + 1 for x in new)
        full = full or len(out) + len(new) > MAX_OUTPUT_LINES or size > MAX_OUTPUT_BYTES
        if not full:
            out.extend(new)
        return not full

    for name, real in candidates:
        if real not in found:
            continue
        hits, lines = found[real]
        total += len(hits)
        if full or shown >= MAX_MATCHES:
            continue
        hits = hits[:MAX_MATCHES - shown]
        hitset, last = set(hits), None
        for h in hits:
            lo, hi = max(0, h - before), h + after
            sep_first = last is not None and lo > last and bool(before or after)
            if last is not None and lo <= last:
                lo = last + 1
            for i in range(lo, hi + 1):
                if i not in lines:
                    break
                line = lines[i]
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + " … (line truncated)"
                sep = ":" if i in hitset else "-"
                if not put(*(["--"] if sep_first else []), f"{name}{sep}{i + 1}{sep}{line}"):
                    break
                sep_first = False
                shown += sep == ":"
            if full:
                break
            last = max(hi, last if last is not None else -1)
    if found.get(TIMED_OUT):
        out.append(f"... (search stopped after {MAX_SECONDS} s: narrow the path or the pattern)")
    if not out:
        return NO_MATCHES
    if total > shown:
        out.append(f"... ({total - shown} more matches not shown)")
    return "\n".join(out)
