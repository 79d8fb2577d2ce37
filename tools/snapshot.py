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
* Paths with a `.git` or `.nanocode` component are never snapshotted; untracked files over
  MAX_UNTRACKED_BYTES are skipped (named in the result).
"""
from __future__ import annotations

import os
import shutil
import stat

from tools.git import git, safe_env

MAX_UNTRACKED_BYTES = 20 * 1024 * 1024
MAX_NESTED_FILES = 2_000  # files of one nested repository snapshotted at most; more: skipped whole
NEVER = (".git", ".nanocode")  # path components never snapshotted
IDENT = {"GIT_AUTHOR_NAME": "nanocode", "GIT_AUTHOR_EMAIL": "nanocode@localhost",
         "GIT_COMMITTER_NAME": "nanocode", "GIT_COMMITTER_EMAIL": "nanocode@localhost"}


class GitError(Exception):
    """A git command failed; the message has its stderr."""


def names(out: bytes) -> list[str]:
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def never(path: str) -> bool:
    return any(part in NEVER for part in path.rstrip("/").split("/"))


def under(path: str, dirs: set[str]) -> bool:
    """Whether `path` is inside one of `dirs` (each ending in "/")."""
    i = path.find("/")
    while i != -1:
        if path[:i + 1] in dirs:
            return True
        i = path.find("/", i + 1)
    return False


class GitDir:
    def __init__(self, git_dir: str, top: str, shadow: bool):
        self.git_dir, self.top, self.shadow = git_dir, top, shadow
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
        return [p for p in names(out) if not never(p)]

    def snapshot(self, ignored=()) -> tuple[str, list[str]]:
        """(tree sha, skipped paths) of the work tree now, as the module docstring describes."""
        os.makedirs(self.meta_dir, exist_ok=True)
        index = self.index()
        ign_files = {p for p in ignored if not p.endswith("/")}
        ign_dirs = {p for p in ignored if p.endswith("/")}
        hidden = lambda p: p in ign_files or p in ign_dirs or under(p, ign_dirs)  # noqa: E731
        paths = [p for p in names(self.run("ls-files", "-z", index=index)) if not never(p)]
        skipped = []
        for p in names(self.run("ls-files", "-z", "--others", "--exclude-standard", index=index)):
            if never(p) or hidden(p):
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
            dirs[:] = sorted(x for x in dirs if x not in NEVER)
            for x in sorted(files) + [x for x in dirs if os.path.islink(os.path.join(cur, x))]:
                if x not in NEVER:
                    out.append(f"{rel}/{x}")
            if len(out) > MAX_NESTED_FILES:
                return None
        return out

    def disk_state(self, paths) -> dict[str, tuple[str, str | None] | None]:
        """{path: (mode, blob sha) or None when absent} of the work tree now, hashed the way a
        snapshot hashes (filters and eol rules of the path; symlinks as their target); a
        directory or other non-file is ("dir", None)."""
        state, files = {}, []
        for p in paths:
            full = os.path.join(self.top, p)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
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
