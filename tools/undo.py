"""Per-turn checkpoints: snapshot the project before an agent turn, show its diff, undo it.

Design. A snapshot is a git tree of the whole work tree (tracked + untracked-not-ignored files)
built in a private index: GIT_INDEX_FILE points at <git dir>/nanocode/index, a copy of the user's
.git/index (mtime kept, for git's racy-clean check) that is re-copied whenever the user's index
changes and otherwise reused, so unchanged files, untracked ones included, are not re-hashed;
then `git add -A`, `git write-tree`, `git commit-tree`. begin() keeps the "before" commit alive
under refs/nanocode/turns/<id>-before, end() the "after" one under <id>-after; metadata (message,
changed paths, undone flag, HEAD at begin) lives in <git dir>/nanocode/turns.json, so a new
Checkpoints object (agent restart) sees earlier turns. The refs keep the objects through gc and are
not branches: `git branch`, `git log`, `git stash list` show nothing new, and the user's HEAD,
index, stash, branches and files are never touched, except by undo (the turn's paths only) and by
the opt-in auto_commit. When root is a subdirectory of a repo the whole work tree is snapshotted and
paths are relative to its top. Outside a git repo the same logic runs against a bare shadow git dir
($NANOCODE_HOME/shadow/<sha1(realpath(root))[:16]>, NANOCODE_HOME defaulting to ~/.cache/nanocode)
via GIT_DIR + GIT_WORK_TREE; no .git is created in the project; .nanocode/ and .git/ are excluded.

undo() first re-snapshots the work tree and compares the turn's changed paths with its "after"
snapshot; any difference (the user, or a later turn, edited them) raises UndoError naming the files
and nothing is changed. Otherwise each path is restored from "before": blobs are read with
`git cat-file --filters` (smudge/eol filters apply, like a checkout), written to a temp file in the
target directory and os.replace()d; symlinks are restored as symlinks; files the turn created are
deleted and directories that did not exist before and are now empty are removed. Every parent
directory is checked with os.path.realpath against the real root before anything is written, so a
symlinked directory can never redirect a write out of the project. Renames show up as a deletion
plus an addition (--no-renames), so both paths are in Turn.changed.

Trade-offs / limits. Ignored files (and .git/, .nanocode/) are not snapshotted, so a turn that
edits e.g. build output or .env cannot undo that. Untracked files over 20 MB (MAX_UNTRACKED_BYTES)
are left out to keep the object database small; they are listed in Turn.skipped. Git does not
track empty directories: an empty directory that existed before the turn and got files from it is
removed by undo. Modes are git's: only the exec bit is restored (other permission bits of an
existing file are kept; new files get 0666/0777 minus umask). Submodules (gitlinks) are not
restored. A file that becomes ignored stays in the private index until the user's index changes.
Content goes through git's filters both ways (clean on snapshot, smudge on restore), so a file
comes back as `git checkout` would write it: where git normalises line endings (a `text`/`eol`
attribute, core.autocrlf) a file that had CRLF in the work tree under `* text=auto` comes back
with LF (exact raw snapshots need hash-object --no-filters per file, or GIT_ATTR_SOURCE, git 2.40).
Two processes snapshotting one repo at once: the second fails on git's index.lock (GitCommandError).
Snapshots live in the user's object database (loose objects; gc reclaims them once the refs are
deleted). Snapshot commits are made without hooks or signing as "nanocode". auto_commit() uses
commit-tree + update-ref (no commit hooks), then `git reset -q` so the user's index matches HEAD.

Measured (2-CPU container, git 2.39, GitPython 3.2.1, medians of 5): a committed repo of 2,000
files (~8 MB in 50 dirs): begin() 20 ms, end() after editing 3 files 28 ms, undo() 30 ms, diff()
4 ms. The same 2,000 files untracked in a repo without commits: the first snapshot hashes them all
(336 ms), later ones 19-23 ms (when re-seeded from a fresh copy of .git/index at every snapshot,
as a first version did, it stayed at 73 ms). Shadow repo, 2,000 files: 339 ms first, then 15 ms.
20,000 committed files: 135-140 ms per snapshot (two directory walks: ls-files --others, add -A).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import asdict, dataclass, field

import git

from tools.workspace import is_inside

MAX_UNTRACKED_BYTES = 20 * 1024 * 1024
EXCLUDE = [":(exclude,glob)**/.nanocode/**", ":(exclude,glob)**/.git/**"]
NULL_SHA = "0" * 40
# Our git calls never run the repo's fsmonitor or hooks (a model-written .git/config must not
# turn a snapshot into command execution; edits under .git/ also always ask, permissions.py).
_SAFE_CONFIG = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": "false",
                "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": os.devnull}
_IDENT = {"GIT_AUTHOR_NAME": "nanocode", "GIT_AUTHOR_EMAIL": "nanocode@localhost",
          "GIT_COMMITTER_NAME": "nanocode", "GIT_COMMITTER_EMAIL": "nanocode@localhost"}


class UndoError(Exception):
    """A checkpoint operation was refused; the message names the problem and the fix."""


@dataclass
class Turn:
    id: int
    before: str
    after: str | None = None
    changed: list[str] = field(default_factory=list)
    message: str = ""
    undone: bool = False
    skipped: list[str] = field(default_factory=list)  # untracked files too big to snapshot
    head: str | None = None  # the user's HEAD at begin() (None: no commits yet)


def _names(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def _names_list(paths, limit=5) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more


class Checkpoints:
    def __init__(self, root, *, shadow_dir=None):
        self.root = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise UndoError(f"project root {self.root} is not a directory; pass an existing directory")
        try:
            user = git.Repo(self.root, search_parent_directories=True)
            if user.bare or user.working_tree_dir is None:
                raise git.InvalidGitRepositoryError(self.root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            user = None
        if user is not None:
            self.shadow = False
            self.repo = user
            self.top = os.path.realpath(user.working_tree_dir)
            self.git_dir = os.path.realpath(user.git_dir)
        else:
            self.shadow = True
            self.top = self.root
            if shadow_dir is None:
                from nanocode.common import nanocode_home
                home = nanocode_home()
                key = hashlib.sha1(self.root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
                shadow_dir = os.path.join(home, "shadow", key)
            self.git_dir = os.path.realpath(os.fspath(shadow_dir))
            if not os.path.isfile(os.path.join(self.git_dir, "HEAD")):
                os.makedirs(self.git_dir, exist_ok=True)
                git.Repo.init(self.git_dir, bare=True)
                os.makedirs(os.path.join(self.git_dir, "info"), exist_ok=True)
                with open(os.path.join(self.git_dir, "info", "exclude"), "a") as f:
                    f.write(".nanocode/\n.git/\n")
            self.repo = git.Repo(self.git_dir)  # bare; commands get GIT_WORK_TREE=root
        self.meta_dir = os.path.join(self.git_dir, "nanocode")
        self.meta_path = os.path.join(self.meta_dir, "turns.json")
        self.g = git.Git(self.top)  # commands run at the work-tree top, so pathspecs are top-relative

    # ------------------------------------------------------------------ git plumbing

    def _env(self, index=None, ident=True):
        env = {"GIT_DIR": self.git_dir, "GIT_WORK_TREE": self.top, **_SAFE_CONFIG}
        if index:
            env["GIT_INDEX_FILE"] = index
        if ident:
            env.update(_IDENT)
        return env

    def _git(self, cmd, *args, index=None, ident=True, **kw):
        return getattr(self.g, cmd)(*args, env=self._env(index, ident), **kw)

    def _head(self):
        try:
            return self._git("rev_parse", "--verify", "-q", "HEAD^{commit}") or None
        except git.GitCommandError:
            return None

    def _tree(self, commit):
        return self._git("rev_parse", f"{commit}^{{tree}}")

    def _index(self):
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

    def _snapshot(self):
        """(tree sha, skipped paths) of the work tree as it is now."""
        os.makedirs(self.meta_dir, exist_ok=True)
        index = self._index()
        others = _names(self._git("ls_files", "-z", "--others", "--exclude-standard",
                                  "--", ".", *EXCLUDE, index=index))
        skipped = []
        for p in others:
            st = os.lstat(os.path.join(self.top, p))
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_UNTRACKED_BYTES:
                skipped.append(p)
        skip = [f":(exclude,literal){p}" for p in skipped]
        self._git("add", "-A", "--", ".", *EXCLUDE, *skip, index=index)
        return self._git("write_tree", index=index), sorted(skipped)

    def _commit(self, tree, message, parents=(), ident=True):
        args = [a for p in parents for a in ("-p", p)]
        sign = ["--no-gpg-sign"] if ident else []
        return self._git("commit_tree", tree, *args, *sign, "-m", message or "nanocode", ident=ident)

    def _changed(self, a, b):
        return sorted(_names(self._git("diff_tree", "-r", "-z", "--no-renames", "--name-only", a, b)))

    # ------------------------------------------------------------------ metadata

    def _load(self):
        try:
            with open(self.meta_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"turns": {}, "last": None}

    def _save(self, meta):
        os.makedirs(self.meta_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.meta_dir, prefix=".turns-")
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp, self.meta_path)

    def _store(self, turn, tree=None):
        meta = self._load()
        meta["turns"][str(turn.id)] = asdict(turn)
        if tree:  # cache: the newest snapshot's tree and a commit holding it
            meta["last"] = {"tree": tree, "commit": turn.after or turn.before}
        self._save(meta)

    def turns(self) -> list[Turn]:
        """All turns, oldest first, rebuilt from refs/nanocode/turns/* plus turns.json."""
        refs = {}
        out = self._git("for_each_ref", "--format=%(refname) %(objectname)", "refs/nanocode/turns/")
        for line in out.splitlines():
            name, sha = line.split(" ")
            tid, _, kind = name.rsplit("/", 1)[1].partition("-")
            refs.setdefault(int(tid), {})[kind] = sha
        saved = self._load()["turns"]
        result = []
        for tid in sorted(refs):
            if "before" not in refs[tid]:
                continue
            rec = dict(saved.get(str(tid), {}))
            rec.update(id=tid, before=refs[tid]["before"], after=refs[tid].get("after"))
            if rec["after"] and str(tid) not in saved:  # metadata lost: recompute from the refs
                rec["changed"] = self._changed(rec["before"], rec["after"])
            result.append(Turn(**rec))
        return result

    def _get(self, turn, pick):
        if isinstance(turn, Turn):
            turn = turn.id
        all_turns = self.turns()
        if turn is None:
            found = [t for t in all_turns if pick(t)]
            if not found:
                raise UndoError("no turn to act on: nothing has been recorded (or everything is undone)")
            return found[-1]
        for t in all_turns:
            if t.id == turn:
                return t
        raise UndoError(f"unknown turn {turn}; see Checkpoints.turns() for the recorded ids")

    # ------------------------------------------------------------------ turns

    def begin(self, message="") -> Turn:
        """Snapshot the work tree before a turn. Reuses the last snapshot commit when unchanged."""
        tree, skipped = self._snapshot()
        last = self._load().get("last")
        if last and last["tree"] == tree:
            before = last["commit"]
        else:
            before = self._commit(tree, f"nanocode before: {message}")
        ids = [t.id for t in self.turns()]
        turn = Turn(id=max(ids, default=0) + 1, before=before, message=message,
                    skipped=skipped, head=None if self.shadow else self._head())
        self._git("update_ref", f"refs/nanocode/turns/{turn.id}-before", before)
        self._store(turn, tree)
        return turn

    def end(self, turn) -> Turn:
        """Snapshot after the turn and record which paths it changed."""
        turn = self._get(turn, lambda t: t.after is None)
        tree, skipped = self._snapshot()
        if tree == self._tree(turn.before):
            turn.after, turn.changed = turn.before, []
        else:
            turn.after = self._commit(tree, f"nanocode after: {turn.message}")
            turn.changed = self._changed(turn.before, turn.after)
        turn.skipped = sorted(set(turn.skipped) | set(skipped))
        self._git("update_ref", f"refs/nanocode/turns/{turn.id}-after", turn.after)
        self._store(turn, tree)
        return turn

    def diff(self, turn=None) -> str:
        """Unified diff of the turn (default: the last finished one); "" when nothing changed."""
        turn = self._get(turn, lambda t: t.after is not None)
        if turn.after is None:
            raise UndoError(f"turn {turn.id} is not finished; call end() first")
        if turn.after == turn.before:
            return ""
        out = self._git("diff", "--no-color", "--no-ext-diff", "--no-renames", turn.before,
                        turn.after, strip_newline_in_stdout=False)
        return out

    # ------------------------------------------------------------------ undo

    def _inside(self, path):
        return is_inside(self.top, os.path.realpath(path))

    def undo(self, turn=None) -> list[str]:
        """Restore the turn's changed paths to their "before" state; refuse if they moved on since."""
        turn = self._get(turn, lambda t: t.after is not None and t.changed and not t.undone)
        if turn.after is None:
            raise UndoError(f"cannot undo turn {turn.id}: it is not finished; call end() first")
        if turn.undone:
            raise UndoError(f"turn {turn.id} is already undone; nothing to do")
        if not turn.changed:
            return []
        now, _ = self._snapshot()
        moved = sorted(set(self._changed(turn.after, now)) & set(turn.changed))
        if moved:
            raise UndoError(f"cannot undo turn {turn.id}: {_names_list(moved)} changed since the turn "
                            "(by you or a later turn); undo later turns first, or commit or discard "
                            "those changes, then retry")
        # after -> before, raw: ":<mode after> <mode before> <sha after> <sha before> <status>\0path\0"
        raw = self._git("diff_tree", "-r", "-z", "--no-renames", "--no-abbrev", turn.after, turn.before)
        fields = raw.split("\0")
        plan = []
        for i in range(0, len(fields) - 1, 2):
            if not fields[i].startswith(":"):
                continue
            _, mode, _, sha, _ = fields[i][1:].split(" ")
            plan.append((fields[i + 1], mode, sha))
        for path, _, _ in plan:
            if not self._inside(os.path.dirname(os.path.join(self.top, path))):
                raise UndoError(f"cannot undo turn {turn.id}: {path} lies behind a symlink that leaves "
                                f"the project {self.top}; remove that symlink and retry")
        before_dirs = set(_names(self._git("ls_tree", "-r", "-d", "-z", "--name-only", turn.before)))
        for path, mode, sha in sorted(plan, reverse=True):  # deletions first, deepest first
            if mode == "000000":
                self._remove(path, before_dirs)
        for path, mode, sha in sorted(plan):
            if mode not in ("000000", "160000"):  # gitlinks (submodules) are left alone
                self._write(path, mode, sha, turn.before)
        turn.undone = True
        self._store(turn)
        return sorted(p for p, _, _ in plan)

    def _remove(self, path, before_dirs):
        full = os.path.join(self.top, path)
        if os.path.islink(full) or os.path.lexists(full) and not os.path.isdir(full):
            os.unlink(full)
        parent = os.path.dirname(path)
        while parent and parent not in before_dirs:
            full = os.path.join(self.top, parent)
            if not os.path.isdir(full) or os.path.islink(full) or os.listdir(full):
                break
            os.rmdir(full)
            parent = os.path.dirname(parent)

    def _write(self, path, mode, sha, before):
        full = os.path.join(self.top, path)
        parent = os.path.dirname(full)
        os.makedirs(parent, exist_ok=True)  # _restore checked every existing parent already
        if not self._inside(parent):
            raise UndoError(f"refusing to write {path}: its directory resolves outside {self.top}")
        if os.path.isdir(full) and not os.path.islink(full):
            raise UndoError(f"cannot restore {path}: a directory is in the way; move it and retry")
        if mode == "120000":
            target = self.repo.odb.stream(bytes.fromhex(sha)).read()
            tmp = os.path.join(parent, f".nanocode-{os.getpid()}-{os.path.basename(full)}")
            os.symlink(target, tmp)
            os.replace(tmp, full)
            return
        data = self._git("cat_file", "--filters", f"{before}:{path}", stdout_as_string=False,
                         strip_newline_in_stdout=False)
        exe = mode == "100755"
        try:
            old = os.lstat(full)
            perm = stat.S_IMODE(old.st_mode) if stat.S_ISREG(old.st_mode) else None
        except FileNotFoundError:
            perm = None
        if perm is not None:  # an existing file keeps its other bits; only x follows the snapshot
            perm = perm | (perm & 0o444) >> 2 if exe else perm & ~0o111
        tmp = os.path.join(parent, f".nanocode-{os.getpid()}-{threading.get_ident()}.tmp")
        try:  # a new file gets 0o777/0o666 minus the umask, applied by the kernel (thread-safe)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if exe else 0o666)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if perm is not None:
                os.chmod(tmp, perm)
            os.replace(tmp, full)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    # ------------------------------------------------------------------ auto-commit

    def auto_commit(self, turn, message) -> str | None:
        """Commit the turn on the user's current branch (moves HEAD, opt-in). The user's own
        uncommitted changes from before the turn are committed first, separately."""
        if self.shadow:
            raise UndoError("auto_commit needs a git repository; this project has none (it uses a "
                            "private shadow repo). Run `git init` in the project to enable it")
        turn = self._get(turn, lambda t: t.after is not None)
        if turn.after is None:
            raise UndoError(f"cannot commit turn {turn.id}: it is not finished; call end() first")
        if turn.undone:
            raise UndoError(f"cannot commit turn {turn.id}: it was undone")
        before_tree, after_tree = self._tree(turn.before), self._tree(turn.after)
        if before_tree == after_tree:
            return None
        head = self._head()
        if head != turn.head:
            raise UndoError(f"cannot commit turn {turn.id}: HEAD moved since the turn began "
                            f"({turn.head} -> {head}); commit the turn's files yourself")
        has_ident = self._git("config", "--get", "user.email", ident=False, with_exceptions=False)
        own = not has_ident  # no user identity configured: commit as "nanocode"
        parents = [head] if head else []
        head_tree = self._tree(head) if head else None
        if before_tree != head_tree:
            parents = [self._commit(before_tree, "nanocode: your changes before the turn",
                                    parents, ident=own)]
        sha = self._commit(after_tree, message, parents, ident=own)
        self._git("update_ref", "-m", f"nanocode: {message}", "HEAD", sha, head or NULL_SHA)
        self._git("reset", "-q", ident=False)  # the user's index now matches the new HEAD
        return sha
