"""Snapshot plumbing for tools/undo.py: one git dir + work tree, a private index, work-tree trees.

`GitDir` runs every command through tools/git.py (safe_env computed once per public Snapshots
operation, `fresh()`), with GIT_DIR / GIT_WORK_TREE naming the repository explicitly, and builds
a tree of the work tree as it is now (`snapshot`). How a snapshot is built, and why:

* The file list is made by us, not by `git add -A`: the private index's entries (`ls-files`)
  plus the untracked, not-ignored files (`ls-files --others --exclude-standard`), then
  `update-index --add --remove --replace --stdin` (unchanged files are not re-hashed: stat
  data), `write-tree`. `git add -A` fails outright on a nested repository without a commit
  (`git init x` in a turn) and would record one with commits as a bare gitlink, whose files then
  cannot be restored; listing ourselves makes both ordinary directories.
* Nested repositories (an untracked directory with its own .git, which git lists as `x/`):
  their files (every file but .git, whatever the ignore rules say: git cannot evaluate them past
  a nested .git) are snapshotted like any others when there are at most MAX_NESTED_FILES of
  them; a bigger one is skipped whole and named in the result (`x/`), so its changes cannot be
  undone and the caller says so. Registered submodules (gitlinks in the index) stay gitlinks.
* `ignored` (what `ignored_now()` listed at the turn's begin) is left out of a snapshot even
  when the rules no longer ignore it: a turn that edits .gitignore or .git/info/exclude cannot
  make a file that was ignored before it look created by it (undo would delete it).
* Paths with a `.git` component are never snapshotted, nor nanocode's own folders (`own`: the
  project root's `.nanocode`, its settings and sessions, and the work-tree top's); a `.nanocode`
  folder anywhere else (docs/.nanocode/notes.md) is a user file like any other. Untracked files
  over MAX_UNTRACKED_BYTES are skipped (named in the result).
* A type change is an ordinary change: a tracked path that now lies beyond a symlink or a file
  (`d/f` after `d` became a link) is dropped from the private index first, then the new entry is
  added, so the snapshot holds the tree as it is on disk.

The user's git state (refs, HEAD, stash, index) is recorded and put back by tools/git_state.py.

`unrestorable(root, paths)` answers the question the destructive-command check asks: which of
these existing paths a snapshot would not hold (ignored by git's rules, nanocode's or git's own
folders, too big), so that deleting or overwriting them could not be undone.
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import subprocess
import tempfile

from tools.git import git, safe_env

MAX_UNTRACKED_BYTES = 20 * 1024 * 1024
MAX_NESTED_FILES = 2_000  # files of one nested repository snapshotted at most; more: skipped whole
GIT = ".git"  # a path component never snapshotted, at any depth
OWN = ".nanocode"  # nanocode's folder: left out at the project root and the work-tree top only
IDENT = {"GIT_AUTHOR_NAME": "nanocode", "GIT_AUTHOR_EMAIL": "nanocode@localhost",
         "GIT_COMMITTER_NAME": "nanocode", "GIT_COMMITTER_EMAIL": "nanocode@localhost"}


class GitError(Exception):
    """A git command failed; the message has its stderr."""


def names(out: bytes) -> list[str]:
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def names_list(paths, limit=5) -> str:
    """`paths` for a message: the first `limit`, then how many more."""
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more


def never(path: str, own=(OWN,)) -> bool:
    """Whether `path` (top-relative) is never snapshotted: a `.git` component, or inside one of
    nanocode's own folders `own` (top-relative)."""
    path = path.rstrip("/")
    return GIT in path.split("/") or any(path == o or path.startswith(o + "/") for o in own)


def beyond(top: str, path: str, seen: dict) -> bool:
    """Whether a parent of `path` (top-relative) is not a real directory on disk (a symlink, a
    file, or missing): then `path` itself cannot exist in the work tree. `seen` caches parents."""
    parent = os.path.dirname(path)
    while parent:
        if parent not in seen:
            try:
                seen[parent] = stat.S_ISDIR(os.lstat(os.path.join(top, parent)).st_mode)
            except OSError:
                seen[parent] = False
        if not seen[parent]:
            return True
        parent = os.path.dirname(parent)
    return False


def under(path: str, dirs: set[str]) -> bool:
    """Whether `path` is inside one of `dirs` (each ending in "/")."""
    i = path.find("/")
    while i != -1:
        if path[:i + 1] in dirs:
            return True
        i = path.find("/", i + 1)
    return False


_EMPTY_GIT_DIR: list[str] = []  # made once per process: reads ignore rules outside a repository


def _empty_git_dir() -> str:
    if not _EMPTY_GIT_DIR:
        d = tempfile.mkdtemp(prefix="nanocode-rules-")
        atexit.register(shutil.rmtree, d, True)
        git(d, "init", "-q", "--bare", "--template=", d, env=safe_env(d))
        _EMPTY_GIT_DIR.append(d)
    return _EMPTY_GIT_DIR[0]


def _ignored_among(root: str, paths: list[str]) -> list[str] | None:
    """What `git ls-files --others --ignored --directory` lists for `paths` (root-relative,
    literal): ignored files, or ignored directories as `dir/`. Outside a repository the project's
    own rules are read through an empty git dir. None when git cannot say."""
    args = ("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory", "--", *paths)
    try:
        for extra in ({}, {"GIT_DIR": _empty_git_dir(), "GIT_WORK_TREE": root}):
            env = dict(safe_env(root, extra), GIT_LITERAL_PATHSPECS="1")
            r = git(root, *args, env=env)
            if r.returncode == 0:
                return names(r.stdout)
    except (OSError, subprocess.SubprocessError):
        return None
    return None


def unrestorable(root, paths) -> list[str]:
    """Those of `paths` (root-relative, existing on disk) that no snapshot would hold, so deleting,
    moving or overwriting them could not be undone: ignored by git's rules (a directory: holding
    ignored files), inside a `.git` or the root's `.nanocode`, or files over MAX_UNTRACKED_BYTES
    (tracked or not: asking costs less than looking). Every path when git cannot say."""
    root = os.fspath(root)
    paths = [os.path.normpath(p) for p in paths]
    out = [p for p in paths if never(p) or _big(os.path.join(root, p))]
    rest = [p for p in paths if p not in out]
    listed = _ignored_among(root, rest) if rest else []
    if listed is None:
        return paths
    hit = lambda p, q: q.rstrip("/") == p or q.startswith(p + "/") or p.startswith(q) and q.endswith("/")  # noqa: E731
    return out + [p for p in rest if any(hit(p, q) for q in listed)]


def _big(full: str) -> bool:
    try:
        st = os.lstat(full)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > MAX_UNTRACKED_BYTES


class GitDir:
    """One git dir + work tree. own: nanocode's own folders (top-relative), never snapshotted."""

    def __init__(self, git_dir: str, top: str, shadow: bool, own=(OWN,)):
        self.git_dir, self.top, self.shadow, self.own = git_dir, top, shadow, tuple(own)
        self.meta_dir = os.path.join(git_dir, "nanocode")
        self._env = None

    def fresh(self) -> None:
        """Re-read the repo's config (the filter drivers to neutralise): at every public step."""
        self._env = safe_env(self.top, {"GIT_DIR": self.git_dir, "GIT_WORK_TREE": self.top})

    def run(self, *args: str, index: str | None = None, ident: bool = True, input: bytes | None = None,
            check: bool = True) -> bytes | None:
        """stdout of git run at the work-tree top (pathspecs are top-relative); a failure raises
        GitError, or gives None when check is False."""
        if self._env is None:
            self.fresh()
        env = dict(self._env)
        if index:
            env["GIT_INDEX_FILE"] = index
        if ident:
            env.update(IDENT)
        r = git(self.top, *args, env=env, input=input, timeout=None)
        if r.returncode == 0:
            return r.stdout
        if check:
            raise GitError(f"git {args[0]} failed: {r.stderr.decode(errors='replace').strip()}")
        return None

    def head(self) -> str | None:
        out = self.run("rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
        return out.decode().strip() or None if out else None

    def tree(self, commit: str) -> str:
        return self.run("rev-parse", f"{commit}^{{tree}}").decode().strip()

    def changed(self, a: str, b: str) -> list[str]:
        return sorted(names(self.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", a, b)))

    def index(self) -> str:
        """Path of the private index. In a user repo it is a copy of .git/index (mtime kept, which
        git's racy-clean check needs), re-copied whenever the user's index changed (inode, size,
        mtime), and otherwise reused, so untracked files are hashed once, not at every snapshot."""
        if self.shadow:
            return os.path.join(self.git_dir, "index")
        index, user_index = os.path.join(self.meta_dir, "index"), os.path.join(self.git_dir, "index")
        try:
            st = os.stat(user_index)
            seed = f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"
        except FileNotFoundError:
            seed = "none"
        try:
            with open(index + ".seed") as f:
                old = f.read()
        except OSError:
            old = None
        if old != seed or (seed != "none" and not os.path.exists(index)):
            if seed == "none":
                if os.path.exists(index):
                    os.unlink(index)
            else:
                shutil.copy2(user_index, index + ".tmp")
                os.replace(index + ".tmp", index)
            with open(index + ".seed", "w") as f:
                f.write(seed)
        return index

    def ignored_now(self) -> list[str]:
        """The untracked paths the ignore rules hide now (a wholly ignored directory as `dir/`)."""
        out = self.run("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
                       index=self.index())
        return [p for p in names(out) if not never(p, self.own)]

    def snapshot(self, ignored=()) -> tuple[str, list[str]]:
        """(tree sha, skipped paths) of the work tree now, as the module docstring describes."""
        os.makedirs(self.meta_dir, exist_ok=True)
        index = self.index()
        ign_files = {p for p in ignored if not p.endswith("/")}
        ign_dirs = {p for p in ignored if p.endswith("/")}
        hidden = lambda p: p in ign_files or p in ign_dirs or under(p, ign_dirs)  # noqa: E731
        seen: dict = {}
        paths = [p for p in names(self.run("ls-files", "-z", index=index)) if not never(p, self.own)]
        gone = [p for p in paths if beyond(self.top, p, seen)]  # its parent became a link or a file
        if gone:
            feed = b"".join(os.fsencode(p) + b"\0" for p in gone)
            self.run("update-index", "-z", "--force-remove", "--stdin", index=index, input=feed)
            paths = [p for p in paths if p not in set(gone)]
        skipped = []
        for p in names(self.run("ls-files", "-z", "--others", "--exclude-standard", index=index)):
            if never(p, self.own) or hidden(p):
                continue
            if p.endswith("/"):  # a nested repository
                files = self._nested(p)
                if files is None:
                    skipped.append(p)
                    continue
            else:
                files = [p]
            for f in files:
                st = os.lstat(os.path.join(self.top, f))
                if stat.S_ISREG(st.st_mode) and st.st_size > MAX_UNTRACKED_BYTES:
                    skipped.append(f)
                elif not hidden(f):
                    paths.append(f)
        if skipped:
            gone = set(skipped)
            dirs = {s for s in skipped if s.endswith("/")}
            paths = [p for p in paths if p not in gone and not under(p, dirs)]
        feed = b"".join(os.fsencode(p) + b"\0" for p in sorted(set(paths)))
        self.run("update-index", "-z", "--add", "--remove", "--replace", "--stdin", index=index, input=feed)
        return self.run("write-tree", index=index).decode().strip(), sorted(skipped)

    def _nested(self, d: str) -> list[str] | None:
        """Top-relative paths of the files and symlinks of nested repository `d` (its .git dirs
        left out), or None when it has more than MAX_NESTED_FILES."""
        out = []
        for cur, dirs, files in os.walk(os.path.join(self.top, d)):
            rel = os.path.relpath(cur, self.top).replace(os.sep, "/")
            dirs[:] = sorted(x for x in dirs if x != GIT)
            for x in sorted(files) + [x for x in dirs if os.path.islink(os.path.join(cur, x))]:
                if x != GIT:
                    out.append(f"{rel}/{x}")
            if len(out) > MAX_NESTED_FILES:
                return None
        return out

    def disk_state(self, paths) -> dict[str, tuple[str, str | None] | None]:
        """{path: (mode, blob sha) or None when absent} of the work tree now, hashed the way a
        snapshot hashes (filters and eol rules of the path; symlinks as their target); a
        directory or other non-file is ("dir", None); a path beyond a symlink or a file is absent."""
        state, files, seen = {}, [], {}
        for p in paths:
            full = os.path.join(self.top, p)
            try:
                st = None if beyond(self.top, p, seen) else os.lstat(full)
            except FileNotFoundError:
                st = None
            if st is None:
                state[p] = None
                continue
            if stat.S_ISLNK(st.st_mode):
                target = os.fsencode(os.readlink(full))
                sha = self.run("hash-object", "-t", "blob", "--no-filters", "--stdin", input=target)
                state[p] = ("120000", sha.decode().strip())
            elif stat.S_ISREG(st.st_mode):
                files.append(p)
                state[p] = ("100755" if st.st_mode & 0o100 else "100644", None)
            else:
                state[p] = ("dir", None)
        for i in range(0, len(files), 500):
            chunk = files[i:i + 500]
            shas = self.run("hash-object", "--", *chunk).decode().split()
            for p, sha in zip(chunk, shas):
                state[p] = (state[p][0], sha)
        return state
