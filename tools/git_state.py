"""The user's git state around an agent turn, for tools/undo.py: record it, keep it, put it back.

Contract. In a user repository (never in a shadow git dir) Snapshots.begin() records the user's
git state (`GitState.begin`): every ref (`for-each-ref`, refs/nanocode/ aside), HEAD (symbolic or
detached), the stash reflog (sha and message of each entry) and a digest of the index's entries
(`ls-files -s`: a stat refresh by `git status` is no change), in <git dir>/nanocode/git-<id>.json,
and copies the index file's bytes to <git dir>/nanocode/index-<id>. It keeps that state's objects
alive under refs/nanocode/turns/<id>-keep, a commit whose tree is the index's (written from a
copy of it; an index with conflicts gets the empty tree) and whose parents are the commits the
refs, HEAD and stash entries name, so `git gc --prune=now` cannot take them; other objects a ref
names (annotated tags) get their own refs, <id>-keep-<n>. The keep commit is reused while the
state is unchanged (turns.json's "keep" entry). end() records the state again and lists what
differs (`GitState.end`, Turn.git: ref names, "HEAD", "stash", "index").

Undo. `refusal` is checked before anything is changed: what the turn changed must still be as
end() recorded it (else the user or a later turn moved it on), and its record and the objects it
names must still be there. `restore` then puts back what the turn changed: the refs in one
`update-ref --stdin` transaction, HEAD, the stash reflog rebuilt entry by entry (`stash list`
reads the same; the entries' dates are new) and the index bytes (through index.lock, as git
writes it).

Trade-offs / limits. Restored exactly: refs (branches, tags, remotes, refs/stash), HEAD (symbolic
or detached), the stash list (entries and messages; their reflog dates are new) and the index
bytes. Not restored: the reflogs of other refs (a branch the turn deleted comes back without its
reflog), git state beyond refs, HEAD, stash and index (.git/config, .git/info/), and the objects
of an index with conflicts that no ref or commit names. Recording adds about six git processes
to begin() (for-each-ref, symbolic-ref, the stash reflog, ls-files -s; write-tree and
commit-tree only when that state changed since the last turn) and four to end(), and one copy of
the index file per turn. Git failures raise GitError (tools/snapshot.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

from tools.snapshot import GitDir, GitError, names_list


def git_changes(before: dict, after: dict) -> list[str]:
    """What differs between two `GitState.state()`s: ref names, "HEAD", "stash", "index"."""
    names_ = sorted(set(before["refs"]) | set(after["refs"]))
    out = [n for n in names_ if n != "refs/stash" and before["refs"].get(n) != after["refs"].get(n)]
    out += [k.replace("head", "HEAD") for k in ("head", "stash", "index") if before[k] != after[k]]
    return out


class GitState:
    """The user's git state in the repository of `g`, per turn (module docstring). load/save read
    and write turns.json, whose "keep" entry caches the last keep commit."""

    def __init__(self, g: GitDir, load, save):
        self.g, self._load, self._save = g, load, save
        self.meta_dir = g.meta_dir

    # ------------------------------------------------------------------ a turn's records

    def _record_path(self, tid) -> str:
        return os.path.join(self.meta_dir, f"git-{tid}.json")

    def _index_path(self, tid) -> str:
        return os.path.join(self.meta_dir, f"index-{tid}")

    def _record(self, tid) -> dict | None:
        """The git state recorded for turn `tid`: {"before", "after"?, "index"} or None."""
        try:
            with open(self._record_path(tid)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def _save_record(self, tid, rec) -> None:
        with open(self._record_path(tid), "w") as f:
            json.dump(rec, f)

    def _saved_index(self, tid) -> bytes | None:
        try:
            with open(self._index_path(tid), "rb") as f:
                return f.read() if self._record(tid)["index"] else None
        except FileNotFoundError:
            return None

    def begin(self, tid) -> list[str]:
        """Record the git state at turn `tid`'s begin and keep its objects; returns the
        `update-ref --stdin` lines that make its keep refs."""
        state = self.state()
        try:
            with open(os.path.join(self.g.git_dir, "index"), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = None
        saved = self._index_path(tid)
        if data is not None:
            with open(saved, "wb") as f:
                f.write(data)
        meta = self._load()
        last = meta.get("keep")
        if last and last["state"] == state:
            keep, others = last["commit"], last["others"]
        else:
            copy = saved + ".tree"
            if data is not None:
                shutil.copyfile(saved, copy)
            try:
                keep, others = self._keep(state, copy if data is not None else None)
            finally:
                if os.path.exists(copy):
                    os.unlink(copy)
            meta["keep"] = {"state": state, "commit": keep, "others": others}
            self._save(meta)
        self._save_record(tid, {"before": state, "index": data is not None})
        refs = [f"refs/nanocode/turns/{tid}-keep {keep}"]
        refs += [f"refs/nanocode/turns/{tid}-keep-{k} {sha}" for k, sha in enumerate(others)]
        return [f"update {r}\n" for r in refs]

    def end(self, tid) -> list[str]:
        """Record the git state at turn `tid`'s end; returns what the turn changed (Turn.git)."""
        rec = self._record(tid)
        if rec is None:
            return []
        rec["after"] = self.state()
        self._save_record(tid, rec)
        return git_changes(rec["before"], rec["after"])

    # ------------------------------------------------------------------ undo

    def refusal(self, tid, what: list[str]) -> str | None:
        """Why the parts `what` (Turn.git) of turn `tid` cannot be put back: they changed since
        the turn, or its record or objects are gone; None when they can."""
        rec = self._record(tid)
        if rec is None or "after" not in rec or ("index" in what and rec["index"]
                                                 and not os.path.exists(self._index_path(tid))):
            return (f"its record of your git state ({self.meta_dir}/git-{tid}.json, index-{tid}) is "
                    "missing; the files alone cannot be undone safely: restore your index and refs by "
                    "hand (git reflog)")
        moved = [w for w in git_changes(rec["after"], self.state()) if w in what]
        if moved:
            return (f"{names_list(moved)} changed since the turn (by you or a later turn); undo later "
                    "turns first, or put them back, then retry")
        before = rec["before"]
        shas = [before["refs"][w][0] for w in what if w in before["refs"]]
        shas += [sha for sha, _ in before["stash"]] if "stash" in what else []
        out = self.g.run("cat-file", "--batch-check", input="".join(x + "\n" for x in shas).encode())
        if b" missing" in out:
            return ("objects of your refs or stash before the turn are gone (its keep refs were "
                    "deleted and git pruned them)")
        return None

    def restore(self, tid, what: list[str]) -> None:
        """Put back the parts of turn `tid`'s "before" state named in `what` (ref names, "HEAD",
        "stash", "index"); `refusal` has checked them."""
        before, index_bytes = self._record(tid)["before"], self._saved_index(tid)
        run = self.g.run
        if "HEAD" in what and before["head"]:
            if before["head"].startswith("ref: "):
                run("symbolic-ref", "HEAD", before["head"][5:])
            else:
                run("update-ref", "--no-deref", "HEAD", before["head"])
        lines = []
        for name in (w for w in what if w.startswith("refs/")):
            old = before["refs"].get(name)
            lines.append(f"update {name} {old[0]}" if old else f"delete {name}")
        if lines:
            data = "".join(x + "\n" for x in lines).encode(errors="surrogateescape")
            run("update-ref", "--stdin", input=data)
        if "stash" in what:
            run("update-ref", "-d", "refs/stash", check=False)
            for sha, message in reversed(before["stash"]):
                run("update-ref", "--create-reflog", "-m", message, "refs/stash", sha)
        if "index" in what:
            self._write_index(index_bytes)

    # ------------------------------------------------------------------ git plumbing

    def state(self) -> dict:
        """{"refs": {name: [sha, type]}, "head": "ref: <name>" | sha | None, "stash": [[sha,
        message], ...] newest first, "index": digest of the index entries}."""
        run, refs = self.g.run, {}
        out = run("for-each-ref", "--format=%(objectname) %(objecttype) %(refname)")
        out = out.decode(errors="surrogateescape")  # a ref name may be any bytes >= 0x80
        for line in out.splitlines():
            sha, kind, name = line.split(" ", 2)
            if not name.startswith("refs/nanocode/"):
                refs[name] = [sha, kind]
        ref = run("symbolic-ref", "-q", "HEAD", check=False)
        head = f"ref: {ref.decode(errors='surrogateescape').strip()}" if ref else self.g.head()
        stash = []
        if "refs/stash" in refs:
            log = run("log", "-g", "-z", "--format=%H %gs", "refs/stash", "--")
            stash = [e.split(" ", 1) for e in log.decode(errors="surrogateescape").split("\0") if e]
        index = hashlib.sha1(run("ls-files", "-s", "-z")).hexdigest()
        return {"refs": refs, "head": head, "stash": stash, "index": index}

    def _keep(self, state: dict, index_copy: str | None) -> tuple[str, list[str]]:
        """(keep commit, other objects to keep by ref) for `state`; index_copy: a copy of the
        index, whose tree the keep commit gets (consumed: write-tree updates it)."""
        tree = None
        if index_copy:
            tree = self.g.run("write-tree", index=index_copy, check=False)
        empty = self.g.run("hash-object", "-t", "tree", "-w", "--stdin", input=b"")
        tree = (tree or empty).decode().strip()
        commits = [sha for sha, kind in state["refs"].values() if kind == "commit"]
        commits += [sha for sha, _ in state["stash"]]
        commits += [state["head"]] if state["head"] and not state["head"].startswith("ref: ") else []
        others = sorted({sha for sha, kind in state["refs"].values() if kind != "commit"})
        parents = [a for sha in dict.fromkeys(commits) for a in ("-p", sha)]
        out = self.g.run("commit-tree", tree, "--no-gpg-sign", *parents, "-m", "nanocode keep")
        return out.decode().strip(), others

    def _write_index(self, data: bytes | None) -> None:
        """The user's index file set to `data` (None: removed), through index.lock like git."""
        index = os.path.join(self.g.git_dir, "index")
        lock = index + ".lock"
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            raise GitError(f"{lock} exists: another git command is running; wait for it (or remove "
                           "the stale lock) and retry") from None
        with os.fdopen(fd, "wb") as f:
            f.write(data or b"")
        if data is None:
            os.unlink(lock)
            if os.path.exists(index):
                os.unlink(index)
        else:
            os.replace(lock, index)
