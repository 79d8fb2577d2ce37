"""What tools/undo.py records about each turn, and where (its module docstring has the design):
`Turn`, and `TurnRecords`, which keeps the turns' metadata in <git dir>/nanocode/turns.json
(with the newest snapshot's tree and a commit holding it, a cache), the paths the ignore rules
hid at a turn's begin in <git dir>/nanocode/ignored-<id>, and rebuilds the list of turns from
refs/nanocode/turns/* plus that file.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from nanocode.common import write_atomic
from tools.snapshot import GitDir, names


@dataclass
class Turn:
    """One agent turn: its snapshots (`before`, `after` commits) and what it changed."""
    id: int
    before: str
    after: str | None = None
    changed: list[str] = field(default_factory=list)
    message: str = ""
    undone: bool = False
    skipped: list[str] = field(default_factory=list)  # not snapshotted: too big, big nested repo `x/`
    head: str | None = None  # the user's HEAD at begin() (None: no commits yet)
    session: str | None = None  # the agent session that ran the turn
    git: list[str] = field(default_factory=list)  # git state it changed: refs, "HEAD", "stash", "index"
    missing: list[str] = field(default_factory=list)  # its refs found missing (computed, not stored)


class TurnRecords:
    """The turns of one git dir `g`; `run(*args, **kw)` runs git there (Snapshots._run: a git
    failure raised as UndoError)."""

    def __init__(self, g: GitDir, run):
        self.g, self.run = g, run
        self.meta_path = os.path.join(g.meta_dir, "turns.json")

    def load(self) -> dict:
        """turns.json: {"turns": {id: Turn fields}, "last": {"tree", "commit"} or None}."""
        try:
            with open(self.meta_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"turns": {}, "last": None}

    def save(self, meta):
        os.makedirs(self.g.meta_dir, exist_ok=True)
        write_atomic(self.meta_path, json.dumps(meta, indent=1).encode())

    def store(self, turn, tree=None):
        """Record `turn` (and `tree`, its newest snapshot, as the cache begin() reuses)."""
        meta = self.load()
        meta["turns"][str(turn.id)] = {k: v for k, v in asdict(turn).items() if k != "missing"}
        if tree:  # cache: the newest snapshot's tree and a commit holding it
            meta["last"] = {"tree": tree, "commit": turn.after or turn.before}
        self.save(meta)

    def ignored_path(self, tid):
        return os.path.join(self.g.meta_dir, f"ignored-{tid}")

    def ignored(self, tid) -> list[str]:
        try:
            with open(self.ignored_path(tid), "rb") as f:
                return names(f.read())
        except FileNotFoundError:
            return []

    def write_ignored(self, tid, ignored: list[str]) -> None:
        """Record the paths the ignore rules hide at turn `tid`'s begin (none: no file)."""
        if ignored:
            with open(self.ignored_path(tid), "wb") as f:
                f.write(b"".join(os.fsencode(p) + b"\0" for p in ignored))
        elif os.path.exists(self.ignored_path(tid)):  # a stale one (its refs were deleted)
            os.unlink(self.ignored_path(tid))

    def turns(self) -> list[Turn]:
        """All turns, oldest first, rebuilt from refs/nanocode/turns/* plus turns.json. A turn
        whose refs were deleted outside nanocode names them in Turn.missing."""
        refs = {}
        out = self.run("for-each-ref", "--format=%(refname) %(objectname)", "refs/nanocode/turns/")
        for line in out.decode().splitlines():
            name, sha = line.split(" ")
            tid, _, kind = name.rsplit("/", 1)[1].partition("-")
            refs.setdefault(int(tid), {})[kind] = sha
        saved = self.load()["turns"]
        result = []
        for tid in sorted(set(refs) | {int(k) for k in saved}):
            have, rec = refs.get(tid, {}), dict(saved.get(str(tid), {}))
            if "before" not in have and "before" not in rec:
                continue
            wanted = ["before"] + ["after"] * bool(rec.get("after")) + ["keep"] * bool(rec.get("git"))
            rec.update(id=tid, before=have.get("before", rec.get("before")),
                       after=have.get("after", rec.get("after")),
                       missing=[f"refs/nanocode/turns/{tid}-{k}" for k in wanted if k not in have])
            if rec["after"] and str(tid) not in saved:  # metadata lost: recompute from the refs
                rec["changed"] = self.g.changed(rec["before"], rec["after"])
            result.append(Turn(**{k: v for k, v in rec.items() if k in Turn.__dataclass_fields__}))
        return result
