"""Per-turn snapshots: snapshot the project before an agent turn, show its diff, undo it.
(Snapshots of the user's files, not model checkpoints: those are nanocode/checkpoint.py.)

Design. A snapshot is a git tree of the whole work tree (tracked + untracked-not-ignored files,
nested repositories' files; tools/snapshot.py says how it is built) made in a private index:
<git dir>/nanocode/index, a copy of the user's .git/index re-copied whenever the user's index
changes and otherwise reused, so unchanged files are not re-hashed; then `write-tree` and
`commit-tree`. begin() keeps the "before" commit alive under refs/nanocode/turns/<id>-before,
end() the "after" one under <id>-after; metadata (message, session id, changed and skipped paths,
undone flag, HEAD at begin) lives in <git dir>/nanocode/turns.json, the paths the ignore rules
hid at begin in <git dir>/nanocode/ignored-<id> (NUL-separated; both tools/turn_records.py), so a
new Snapshots object (agent restart) sees earlier turns. The refs keep the objects through gc and
are not branches: `git branch`, `git log`, `git stash list` show nothing new, and the user's HEAD,
index, stash, branches and files are never touched, except by undo (the turn's paths, and the git
state the turn changed). In a user repository begin() and end() also record the user's git state
(refs, HEAD, stash, index; Turn.git: what differs), which undo puts back: tools/git_state.py. When root
is a subdirectory of a repo the whole work tree is snapshotted and paths are relative to its top.
Outside a git repo (or in one git refuses: another user's, see tools/git.py) the same logic runs
against a bare shadow git dir ($NANOCODE_HOME/shadow/<sha1(realpath(root))[:16]>, NANOCODE_HOME
defaulting to ~/.cache/nanocode) via GIT_DIR + GIT_WORK_TREE; no .git is created in the project;
.nanocode/ and .git/ are excluded. Every git command runs through tools/git.py: nothing the
repository's config names (fsmonitor, hooks, filters, textconv, gpg, pager) is executed.

Undo never loses data. plan() says what undo() would do, and refuses as undo() would: turns are
picked per session (the latest undoable turn of `session`; an explicit turn id reaches any
session). The turn's paths are compared, one by one, with its "after" snapshot on disk (hashed
as a snapshot hashes them); any difference (the user, or a later turn, edited them) raises
UndoError naming the files, and nothing is changed. Paths whose "after" content has since been
committed (HEAD moved and now holds it) make undo refuse unless allow_committed=True. Otherwise
each path is restored from "before": blobs are read with `git cat-file --filters` (smudge/eol
apply, like a checkout), written to a temp file in the target directory and os.replace()d;
symlinks are restored as symlinks; files the turn created are deleted, unless the ignore rules
hid that path at begin or it was skipped then (too big, in a skipped nested repository): such a
file may have existed untracked before the turn and is kept (UndoPlan.keep); directories that
did not exist before and are now empty are removed. Every parent directory is checked with
os.path.realpath against the real root before anything is written, so a symlinked directory can
never redirect a write out of the project. Renames show up as a deletion plus an addition
(--no-renames), so both paths are in Turn.changed. A type change (file, directory, symlink, either
way) is a removal plus a restore; before anything is written the plan checks that nothing the undo
keeps is in the way (a file the user put in a directory that was a file before, a parent that is
now a symlink the turn did not make) and refuses naming it. The git state the turn changed is
checked the same way against its state at end() and then put back (tools/git_state.py); a turn
whose refs under refs/nanocode/turns/ were deleted (outside nanocode: the Bash sandbox makes them
read-only) is refused with their names (Turn.missing), never skipped for an older one.

Trade-offs / limits. Ignored files, .git/ and the project root's .nanocode/ are not snapshotted, so
a turn that edits e.g. build output or .env cannot undo that (and undo never deletes them;
tools/destructive.py asks before a command destroys one). A .nanocode folder elsewhere
(docs/.nanocode/notes.md) is restored like any file. Restored exactly: file bytes, the exec bit,
symlinks, files, directories and symlinks changing into one another (for the git state see
tools/git_state.py). Untracked files over 20 MB (MAX_UNTRACKED_BYTES) and nested repositories over
MAX_NESTED_FILES files are left out; they are listed in Turn.skipped. Git does not track empty
directories: an empty directory that existed before the turn and got files from it is removed by
undo; a nested repository the turn created keeps its .git/ after undo. Modes are git's: only the
exec bit is restored (other permission bits of an existing file are kept; new files get 0666/0777
minus umask), and the on-disk check ignores exec-bit changes. Submodules (gitlinks) are not
restored. Content goes through git's filters both ways (clean on snapshot, smudge on restore), so a
file comes back as `git checkout` would write it: where git normalises line endings (`text`/`eol`,
core.autocrlf) a file that had CRLF in the work tree under `* text=auto` comes back with LF. Two
processes snapshotting one repo at once: the second fails on git's index.lock (UndoError).
Snapshots live in the user's object database (loose objects; gc reclaims them once the refs are
deleted). Snapshot commits are made as "nanocode" and never signed (tools/git.py turns gpg off).

Cost. Each operation starts more git processes than a bare `git add -A` snapshot would: the
config listing that keeps git from running anything (tools/git.py), `ls-files` of the private
index and, in begin(), the ignored listing. Unchanged files are not re-hashed, so with few
edits those process starts are most of the cost: the price of running nothing the repository
names, of nested repositories that stay restorable and of ignored files that never look created.
Recording the git state costs more (tools/git_state.py).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import partial

from nanocode.common import nanocode_home
from tools.git import git, safe_env
from tools.git_state import GitState
from tools.snapshot import OWN, GitDir, GitError, names, names_list, under
from tools.turn_records import Turn, TurnRecords
from tools.workspace import is_inside
from tools.write_tree import UnsafeWrite, blocked, remove_created, restore_file

ABSENT, GITLINK, SYMLINK = "000000", "160000", "120000"


class UndoError(Exception):
    """A snapshot or undo operation was refused; the message names the problem and the fix."""


class NothingToUndo(UndoError):
    """No recorded turn is left to act on (none yet, or every one is undone)."""


@dataclass
class UndoPlan:
    """What undo(turn) does: `restore` gets its before-turn content back, `remove` (created by
    the turn) is deleted, `keep` is left as it is (gitlinks; files that may have existed
    unsnapshotted before the turn), `committed` holds the turn's result in a commit made since,
    `git` is the user's git state put back (ref names, "HEAD", "stash", "index")."""
    turn: int
    restore: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)
    committed: list[str] = field(default_factory=list)
    git: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return sorted(self.restore + self.remove)

    def describe(self) -> str:
        """One line, e.g. `restore a.py; remove new.py; keep as is .env`."""
        parts = [f"{label} {names_list(paths)}" for label, paths in (
            ("restore", self.restore), ("remove", self.remove), ("keep as is", self.keep),
            ("already committed", self.committed), ("restore git", self.git)) if paths]
        return "; ".join(parts) or "nothing to undo"


def _undoable(t: Turn) -> bool:
    return t.after is not None and bool(t.changed or t.git) and not t.undone


def _find(root: str) -> tuple[str, str] | None:
    """(work-tree top, git dir) of the repository git finds for root, or None (none, bare, one
    git refuses, or a core.worktree that does not contain root)."""
    try:
        r = git(root, "rev-parse", "--path-format=absolute", "--show-toplevel", "--absolute-git-dir")
    except OSError as e:
        raise UndoError(f"git is not available ({e}); install git or run without undo snapshots") from e
    lines = os.fsdecode(r.stdout).splitlines()
    if r.returncode != 0 or len(lines) < 2:
        return None
    top = os.path.realpath(lines[0])
    return (top, os.path.realpath(lines[1])) if is_inside(top, root) else None


class Snapshots:
    """The per-turn snapshots of the project at `root` and their undo (module docstring).
    shadow_dir: where the shadow git dir goes when root is in no usable repository."""

    def __init__(self, root, *, shadow_dir=None):
        self.root = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise UndoError(f"project root {self.root} is not a directory; pass an existing directory")
        found = _find(self.root)
        self.shadow = found is None
        if found:
            self.top, self.git_dir = found
        else:
            self.top = self.root
            if shadow_dir is None:
                key = hashlib.sha1(self.root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
                shadow_dir = os.path.join(nanocode_home(), "shadow", key)
            self.git_dir = os.path.realpath(os.fspath(shadow_dir))
            self._make_shadow()
        rel = os.path.relpath(self.root, self.top).replace(os.sep, "/")
        own = [OWN] + ([f"{rel}/{OWN}"] if rel != "." else [])  # nanocode's own: settings, sessions
        self.g = GitDir(self.git_dir, self.top, self.shadow, own)
        self.meta_dir = self.g.meta_dir
        self.records = TurnRecords(self.g, self._run)
        self.git_state = None if self.shadow else GitState(self.g, self.records.load, self.records.save)

    def _make_shadow(self):
        """The bare shadow git dir, made once; its exclude file leaves out the root's .nanocode/."""
        if not os.path.isfile(os.path.join(self.git_dir, "HEAD")):
            os.makedirs(self.git_dir, exist_ok=True)
            r = git(self.git_dir, "init", "-q", "--bare", "--template=", self.git_dir, env=safe_env(self.git_dir))
            if r.returncode != 0:
                raise UndoError(f"cannot make the shadow repo {self.git_dir}: {r.stderr.decode().strip()}")
        os.makedirs(os.path.join(self.git_dir, "info"), exist_ok=True)
        with open(os.path.join(self.git_dir, "info", "exclude"), "w") as f:
            f.write("/.nanocode/\n.git/\n")

    def _wrap(self, fn, *args, **kw):
        """fn(*args, **kw) with a git failure raised as UndoError."""
        try:
            return fn(*args, **kw)
        except GitError as e:
            raise UndoError(str(e)) from e

    def _run(self, *args, **kw):
        return self._wrap(self.g.run, *args, **kw)

    def _commit(self, tree, message):
        out = self._run("commit-tree", tree, "--no-gpg-sign", "-m", message or "nanocode")
        return out.decode().strip()

    def _snapshot(self, ignored=()):
        try:
            return self.g.snapshot(ignored)
        except (GitError, OSError) as e:
            raise UndoError(f"cannot snapshot the project: {e}") from e

    def turns(self) -> list[Turn]:
        """All turns, oldest first (TurnRecords.turns)."""
        return self.records.turns()

    def _get(self, turn, pick, session=None):
        """The turn with that id (any session), or the latest of `session` (None: any) that
        `pick` accepts."""
        if isinstance(turn, Turn):
            turn = turn.id
        all_turns = self.turns()
        if turn is None:
            found = [t for t in all_turns if pick(t) and (session is None or t.session == session)]
            if not found:
                whose = " in this session" if session is not None else ""
                raise NothingToUndo(f"no turn to act on{whose}: nothing has been recorded (or everything is "
                                "undone)" + ("; ask for all sessions to reach earlier ones" if whose else ""))
            return found[-1]
        for t in all_turns:
            if t.id == turn:
                return t
        raise UndoError(f"unknown turn {turn}; see Snapshots.turns() for the recorded ids")

    # ------------------------------------------------------------------ turns

    def begin(self, message="", *, session=None) -> Turn:
        """Snapshot the work tree before a turn (reusing the last snapshot commit when unchanged)
        and record what the ignore rules hide now. Raises UndoError when it cannot."""
        self.g.fresh()
        tree, skipped = self._snapshot()
        ignored = self._wrap(self.g.ignored_now)
        last = self.records.load().get("last")
        if last and last["tree"] == tree:
            before = last["commit"]
        else:
            before = self._commit(tree, f"nanocode before: {message}")
        ids = [t.id for t in self.turns()]
        turn = Turn(id=max(ids, default=0) + 1, before=before, message=message, skipped=skipped,
                    head=None if self.shadow else self.g.head(), session=session)
        self.records.write_ignored(turn.id, ignored)
        lines = [f"update refs/nanocode/turns/{turn.id}-before {before}\n"]
        lines += self._wrap(self.git_state.begin, turn.id) if self.git_state else []
        self._run("update-ref", "--stdin", input="".join(lines).encode())
        self.records.store(turn, tree)
        return turn

    def end(self, turn) -> Turn:
        """Snapshot after the turn (what was ignored at begin stays out) and record which paths it
        changed."""
        self.g.fresh()
        turn = self._get(turn, lambda t: t.after is None)
        tree, skipped = self._snapshot(self.records.ignored(turn.id))
        if tree == self._wrap(self.g.tree, turn.before):
            turn.after, turn.changed = turn.before, []
        else:
            turn.after = self._commit(tree, f"nanocode after: {turn.message}")
            turn.changed = self._wrap(self.g.changed, turn.before, turn.after)
        turn.skipped = sorted(set(turn.skipped) | set(skipped))
        if self.git_state:
            turn.git = self._wrap(self.git_state.end, turn.id)
        self._run("update-ref", f"refs/nanocode/turns/{turn.id}-after", turn.after)
        self.records.store(turn, tree)
        return turn

    def diff(self, turn=None, *, session=None) -> str:
        """Unified diff of the turn (default: the last finished one of `session`, None: any);
        "" when nothing changed. No external diff or textconv runs."""
        self.g.fresh()
        turn = self._get(turn, lambda t: t.after is not None, session)
        if turn.after is None:
            raise UndoError(f"turn {turn.id} is not finished; call end() first")
        if turn.undone:
            raise UndoError(f"turn {turn.id} was undone: none of its changes are in the files now")
        if turn.after == turn.before:
            return ""
        out = self._run("diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
                        "--submodule=short", turn.before, turn.after)
        return out.decode("utf-8", "replace")

    # ------------------------------------------------------------------ undo

    def _inside(self, path):
        return is_inside(self.top, os.path.realpath(path))

    def plan(self, turn=None, *, session=None) -> UndoPlan:
        """What undo() would do (a dry run; nothing changes). Raises UndoError where undo() would
        refuse, except for committed paths, which it lists."""
        self.g.fresh()
        turn = self._get(turn, _undoable, session)
        return self._plan(turn)[0]

    def _plan(self, turn):
        if turn.after is None:
            raise UndoError(f"cannot undo turn {turn.id}: it is not finished; call end() first")
        if turn.undone:
            raise UndoError(f"turn {turn.id} is already undone; nothing to do")
        if turn.missing:
            raise UndoError(f"cannot undo turn {turn.id}: {names_list(turn.missing)} missing (deleted "
                            "outside nanocode), so its snapshot is gone and it cannot be undone; undo "
                            "another turn by its id, or recreate the refs from turns.json")
        plan = UndoPlan(turn.id, git=self._git_plan(turn))
        if not turn.changed:
            return plan, []
        # after -> before, raw: ":<mode after> <mode before> <sha after> <sha before> <status>\0path\0"
        raw = self._run("diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", turn.after, turn.before)
        fields, entries = os.fsdecode(raw).split("\0"), []
        for i in range(0, len(fields) - 1, 2):
            if fields[i].startswith(":"):
                mode_a, mode_b, sha_a, sha_b, _ = fields[i][1:].split(" ")
                entries.append((fields[i + 1], mode_a, sha_a, mode_b, sha_b))
        hidden = set(self.records.ignored(turn.id)) | set(turn.skipped)
        hidden_dirs = {p for p in hidden if p.endswith("/")}
        for path, mode_a, _, mode_b, _ in entries:
            if GITLINK in (mode_a, mode_b):
                plan.keep.append(path)
            elif mode_b != ABSENT:
                plan.restore.append(path)
            elif path in hidden or under(path, hidden_dirs):
                plan.keep.append(path)  # may have existed, unsnapshotted, before the turn
            else:
                plan.remove.append(path)
        disk = self._wrap(self.g.disk_state, plan.restore + plan.remove)
        after_dirs = {p[:i] for p, mode_a, *_ in entries if mode_a != ABSENT for i, c in enumerate(p) if c == "/"}
        moved = []
        for path, mode_a, sha_a, _, _ in entries:
            if path not in disk:
                continue
            now = disk[path]
            if mode_a == ABSENT:  # a directory now only because the turn put files in it
                same = now is None or now == ("dir", None) and path in after_dirs
            else:  # the exec bit is not compared (core.fileMode=false repos record none)
                same = now is not None and now[1] == sha_a and {now[0], mode_a} <= {"100644", "100755"} \
                    or now == (mode_a, sha_a)
            if not same:
                moved.append(path)
        if moved:
            raise UndoError(f"cannot undo turn {turn.id}: {names_list(sorted(moved))} changed since the "
                            "turn (by you or a later turn); undo later turns first, or commit or discard "
                            "those changes, then retry")
        removed = set(plan.remove)
        for path in plan.restore + plan.remove:
            why = blocked(self.top, path, removed) if path in plan.restore else None
            if why:
                raise UndoError(f"cannot undo turn {turn.id}: {why}, which undo would not remove; move it "
                                "away and retry (nothing was changed)")
            parents = {path[:i] for i, c in enumerate(path) if c == "/"}
            fresh = path in plan.restore and bool(parents & removed)  # below a link the undo deletes
            if not fresh and not self._inside(os.path.dirname(os.path.join(self.top, path))):
                raise UndoError(f"cannot undo turn {turn.id}: {path} lies behind a symlink that leaves "
                                f"the project {self.top}; remove that symlink and retry")
        plan.committed = self._committed(turn)
        return plan, entries

    def _git_plan(self, turn) -> list[str]:
        """The git state undo puts back (Turn.git); UndoError when it cannot (tools/git_state.py)."""
        why = self._wrap(self.git_state.refusal, turn.id, turn.git) if turn.git else None
        if why:
            raise UndoError(f"cannot undo turn {turn.id}: {why}")
        return list(turn.git)

    def _committed(self, turn) -> list[str]:
        """The turn's paths whose "after" state a commit made since the turn began holds."""
        head = None if self.shadow else self.g.head()
        if head is None or head == turn.head:
            return []
        base = turn.head or self._run("hash-object", "-t", "tree", "--stdin", input=b"").decode().strip()
        since = set(self._wrap(self.g.changed, base, head)) & set(turn.changed)
        return sorted(since - set(self._wrap(self.g.changed, turn.after, head)))

    def undo(self, turn=None, *, session=None, allow_committed=False) -> list[str]:
        """Restore the turn (default: the latest undoable one of `session`, None: any) to its
        "before" state as plan() describes; returns the restored and removed paths. Refuses if
        they moved on since, or were committed since (unless allow_committed)."""
        self.g.fresh()
        turn = self._get(turn, _undoable, session)
        plan, entries = self._plan(turn)
        if plan.committed and not allow_committed:
            raise UndoError(f"turn {turn.id}: {names_list(plan.committed)} were committed since the turn; "
                            "undoing would revert committed work. Use git revert, or undo with "
                            "allow_committed=True to restore the files anyway")
        before_dirs = set(names(self._run("ls-tree", "-r", "-d", "-z", "--name-only", turn.before)))
        for path in sorted(plan.remove, reverse=True):  # deletions first, deepest first
            remove_created(self.top, path, before_dirs)
        modes = {e[0]: (e[3], e[4]) for e in entries}
        for path in sorted(plan.restore):
            mode, sha = modes[path]
            try:
                restore_file(self.top, path, mode == SYMLINK, mode == "100755",
                             partial(self._content, turn.before, path, mode, sha))
            except UnsafeWrite as e:
                raise UndoError(str(e)) from e
        if plan.git:
            self._wrap(self.git_state.restore, turn.id, plan.git)
        turn.undone = True
        self.records.store(turn)
        return plan.paths

    def _content(self, before, path, mode, sha) -> bytes:
        """What restoring `path` writes: a symlink's target, or the file as `git checkout` would
        write it (smudge and eol filters applied)."""
        if mode == SYMLINK:
            return self._run("cat-file", "blob", sha)
        return self._run("cat-file", "--filters", f"{before}:{path}")
