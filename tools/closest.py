"""The closest real alternatives for a tool error, so a model can recover by copying them.

Read, Edit and Grep append these hints to their errors (`file not found`, `old_string not found`,
`no matches found`); `train synth` runs the same tools, so the data shows the same hints. Every
hint is deterministic (candidates in a fixed order, ties broken by position or by name, no timing)
and one line, with paths as the tools show them (relative to the root). Each helper returns "" when
nothing is close enough, and the caller then keeps its plain message.

Bounds, the trade-off for speed on the error path: at most MAX_CANDIDATES project paths are
scored; Edit compares windows of the file until SCAN_CHARS characters (or MAX_RATIOS exact
ratios); Grep collects identifiers from at most SCAN_FILES of the searched files, SCAN_BYTES bytes
and MAX_NAMES names, and looks up at most MAX_LOOKUPS absent ones. A closer match past a bound is
missed, and Grep may call an identifier absent that only occurs past the bound. Exact
SequenceMatcher ratios (slow) run only where the cheap upper bounds say they can win.
"""
from __future__ import annotations

import os
import re
import subprocess
from difflib import SequenceMatcher

from tools.git import git
from tools.workspace import display, is_inside, real_root

SHOWN = 3                # alternatives named at most
MAX_CANDIDATES = 20_000  # project paths scored at most
CUTOFF = 0.6             # least basename similarity of a suggested path / identifier
LINE_CUTOFF = 0.5        # least similarity of a suggested Edit window
SCAN_CHARS = 1_000_000   # window characters Edit compares at most
MAX_RATIOS = 200         # exact (slow) similarity computations per Edit hint
MAX_HINT_CHARS = 300     # characters of file text an Edit hint shows at most
SCAN_BYTES = 2 * 1024 * 1024  # Grep reads at most this much of the searched files for names
SCAN_FILES = 2_000            # ... and at most this many files
MAX_NAMES = 20_000
MIN_NAME = 3             # shorter identifier-like runs of a pattern are not looked up
MAX_LOOKUPS = 5          # absent identifiers of one pattern looked up at most
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache",
             ".pytest_cache", ".tox", ".ruff_cache", ".ipynb_checkpoints"}
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# regex syntax whose letters are not names: escapes (\b, \x41, \N{..}), classes, (?flags / (?P<name>
_NOT_NAMES = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|.)"
                        r"|\[\^?\]?[^\]]*\]|\(\?(?:P?<[A-Za-z_]\w*>|P=\w+\)|[A-Za-z-]*)")


def git_files(d: str):
    """Sorted paths (relative to `d`) of `git ls-files --cached --others --exclude-standard` run in
    `d` through tools/git.py (no program the repo's config names runs), or None when `d` is not
    in a git work tree git accepts, or git is missing."""
    try:
        r = git(d, "ls-files", "-z", "--cached", "--others", "--exclude-standard", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    return sorted(set(os.fsdecode(x) for x in r.stdout.split(b"\0") if x))


def project_paths(root: str, dirs: bool = False) -> list[str]:
    """Up to MAX_CANDIDATES paths relative to the root (git's list, else a sorted walk that does not
    follow symlinks), none inside SKIP_DIRS, with every ancestor directory too when `dirs`."""
    names = git_files(root)
    if names is not None:  # untracked caches of a repo without a .gitignore are no alternatives
        names = [n for n in names if SKIP_DIRS.isdisjoint(n.split(os.sep)[:-1])]
    else:
        names = []
        for seen, (cur, sub, files) in enumerate(os.walk(root), 1):
            sub[:] = sorted(x for x in sub if x not in SKIP_DIRS)
            rel = os.path.relpath(cur, root)
            names += [x if rel == "." else os.path.join(rel, x) for x in sorted(files)]
            if len(names) >= MAX_CANDIDATES or seen >= MAX_CANDIDATES:  # files or directories
                break
    names = names[:MAX_CANDIDATES]
    if dirs:
        parents = set()
        for n in names:
            while (n := os.path.dirname(n)) and n not in parents:
                parents.add(n)
        names = sorted(set(names) | parents)
    return names


def _matcher(target: str) -> SequenceMatcher:
    sm = SequenceMatcher(None)
    sm.set_seq2(target)
    return sm


def _upper(sm: SequenceMatcher, s: str, floor: float = CUTOFF) -> float:
    """A cheap upper bound of sm's ratio against `s` (0 when below `floor`)."""
    sm.set_seq1(s)
    if sm.real_quick_ratio() < floor:
        return 0.0
    q = sm.quick_ratio()
    return q if q >= floor else 0.0


def _ratio(sm: SequenceMatcher, s: str) -> float:
    sm.set_seq1(s)
    return sm.ratio()


def _top(items, bound, score, valid) -> list:
    """The SHOWN valid items of highest score (ties: the smaller item first). `bound(item)` is an
    upper bound of `score(item)` (None: skip); `score` may say None (not close). Items are scored
    in decreasing bound order, stopping once no bound can reach the SHOWN-th score, so only a few
    of the slow exact ratios run."""
    ranked = sorted((-b, it) for it in items if (b := bound(it)) is not None)
    top: list = []  # (-score, item), best first
    for neg_bound, it in ranked:
        if len(top) == SHOWN and -neg_bound < -top[-1][0]:
            break
        sc = score(it)
        if sc is None or (len(top) == SHOWN and (-sc, it) >= top[-1]) or not valid(it):
            continue
        top = sorted(top + [(-sc, it)])[:SHOWN]
    return [it for _, it in top]


def path_hint(root, path, *, dirs: bool = False) -> str:
    """`: <path> (closest: a, b)` for a missing `path` (resolved), or "" when nothing is close.

    Scores a candidate by the similarity of its basename without extension (case-insensitive, at
    least CUTOFF: a shared `.py` alone is not close) plus that of the whole path; the same
    basename in another directory ranks first. `dirs` lets directories be suggested too (Grep's
    path may be one). Only existing paths inside the root are named."""
    rroot = os.fspath(real_root(root))
    query = display(rroot, path)
    if "\n" in query or "\r" in query:
        return ""
    qbase = os.path.basename(query).lower()
    stem, full = _matcher(os.path.splitext(qbase)[0]), _matcher(query.lower())

    def bound(rel):
        if "\n" in rel:
            return None
        base = os.path.basename(rel).lower()
        if base == qbase:
            return 3.0 + _upper(full, rel.lower(), 0.0)
        ub = _upper(stem, os.path.splitext(base)[0])
        return ub + _upper(full, rel.lower(), 0.0) if ub else None

    def score(rel):  # exact basename: 3 + path ratio, above any other (at most 2)
        if os.path.basename(rel).lower() == qbase:
            return 3.0 + _ratio(full, rel.lower())
        r = _ratio(stem, os.path.splitext(os.path.basename(rel).lower())[0])
        return r + _ratio(full, rel.lower()) if r >= CUTOFF else None

    def valid(rel):
        real = os.path.join(rroot, rel)
        try:
            return os.path.exists(real) and is_inside(rroot, os.path.realpath(real))
        except OSError:  # swapped for a link meanwhile (realpath's EINVAL): no hint
            return False

    top = _top(project_paths(rroot, dirs), bound, score, valid)
    out = [display(rroot, os.path.join(rroot, rel)) for rel in top]
    return f": {query} (closest: {', '.join(out)})" if out else ""


def _visible(line: str) -> str:
    """A file line as a one-line hint shows it: no CR, undecodable bytes as U+FFFD."""
    return line.replace("\r", "").encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def lines_hint(text: str, old: str) -> str:
    """`closest line N: <line>`, or for a k-line old_string `closest lines N-M, differing at line
    J: <line>` (up to SHOWN differing lines, `; line K: <line>` each), or "" when no window of
    the file is at least LINE_CUTOFF similar. `text` and `old` have LF newlines.

    Windows of as many lines as old_string are compared in file order; upper bounds
    (real_quick_ratio, quick_ratio) skip windows that cannot beat the best so far, so the result
    is the earliest best window among those scanned (SCAN_CHARS, MAX_RATIOS)."""
    want = old.strip("\n").split("\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not old.strip() or not lines:
        return ""
    k = min(len(want), len(lines))
    sm = SequenceMatcher(None)
    sm.set_seq2("\n".join(want))
    best, start, scanned, ratios = 0.0, 0, 0, 0
    for i in range(len(lines) - k + 1):
        window = "\n".join(lines[i:i + k])
        scanned += len(window)
        if scanned > SCAN_CHARS or ratios >= MAX_RATIOS:
            break
        sm.set_seq1(window)
        if not (_beats(sm.real_quick_ratio(), best) and _beats(sm.quick_ratio(), best)):
            continue
        ratios += 1
        r = sm.ratio()
        if r > best:
            best, start = r, i
    if best < LINE_CUTOFF:
        return ""
    if k == 1:
        return f"closest line {start + 1}: " + _clip(_visible(lines[start]), MAX_HINT_CHARS)
    differ = [j for j in range(k) if lines[start + j] != want[j]]
    label = ", differing at " if differ else ", "
    differ = differ or list(range(k))
    parts, budget = [], MAX_HINT_CHARS
    for j in differ[:SHOWN]:
        shown = _visible(lines[start + j])
        if parts and len(shown) > budget:
            break
        parts.append(f"line {start + j + 1}: " + _clip(shown, budget))
        budget -= len(shown)
    more = len(differ) - len(parts)
    tail = f"; and {more} more differing lines" if more > 0 else ""
    return f"closest lines {start + 1}-{start + k}{label}" + "; ".join(parts) + tail


def _beats(upper_bound: float, best: float) -> bool:
    return upper_bound >= LINE_CUTOFF and upper_bound > best


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:max(0, n)] + " …"


def pattern_names(pattern: str) -> list[str]:
    """The identifier-like runs (at least MIN_NAME long) of a regex, escapes and classes left out."""
    runs = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _NOT_NAMES.sub(" ", pattern))
    return list(dict.fromkeys(r for r in runs if len(r) >= MIN_NAME))


def names_hint(pattern: str, reals) -> str:
    """` (closest names: a, b)` when some identifier of `pattern` occurs in none of the files
    `reals` (read in order, bounded by SCAN_FILES / SCAN_BYTES / MAX_NAMES), naming the identifiers of those
    files most similar to the absent ones (case-insensitive, at least CUTOFF); else ""."""
    wanted = pattern_names(pattern)
    if not wanted:
        return ""
    names, left = set(), SCAN_BYTES
    for real in reals[:SCAN_FILES]:
        if left <= 0 or len(names) >= MAX_NAMES:
            break
        try:
            with open(real, "rb") as f:
                data = f.read(left)
        except OSError:
            continue
        left -= len(data)
        names.update(_IDENT.findall(data))
    present = {n.decode("ascii") for n in names}
    absent = [w for w in wanted if w not in present][:MAX_LOOKUPS]
    if not absent:
        return ""
    sms = [_matcher(w.lower()) for w in absent]

    def bound(n):
        return max(_upper(sm, n.lower()) for sm in sms) or None

    def score(n):
        r = max(_ratio(sm, n.lower()) for sm in sms)
        return r if r >= CUTOFF else None

    top = _top(sorted(present)[:MAX_NAMES], bound, score, lambda n: True)
    return f" (closest names: {', '.join(top)})" if top else ""
