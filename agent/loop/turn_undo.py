"""Undo for one agent conversation, on top of tools/undo.py's Snapshots.

Contract:
- begin(message, session) before a turn's first Edit or Bash takes the snapshot (once per turn;
  turns that only read cost nothing). When the snapshot fails it returns the `error:` result
  that refuses the call: nothing may change that /undo could not restore (enabled=False opts
  out: calls then run without snapshots).
- end() closes the open turn: its tools.undo.Turn (changed paths, turn id, paths it could not
  snapshot), or None when the turn took no snapshot. It raises when recording fails (the changes are made; the
  caller says so and goes on).
- undo / plan / diff act on the last recorded turn of `session` (None: of any session; a turn id
  reaches any). undo() keeps a note of what it restored in `notes`, which the agent puts at the
  start of the next user message so the model knows its edits are gone. Every refusal is an
  UndoError whose message says why (tools/undo.py: moved on since, committed since).
- rewind(turn ids) puts the files of several turns back (/rewind), newest first, each turn by
  tools/undo.py's undo. The rule for a file changed since a turn (by the user, or by a later
  turn that could not be undone): the user's version is kept and the turn is not undone, and
  the report says so; undo refuses per turn, so that turn's other files stay as they are too.
  Nothing is ever written over a change the snapshots do not hold; nothing committed since is
  reverted. Ignored files, files too big to snapshot and what commands did outside the
  project's files are never restored; the report names them (RewindFiles.describe).
The Snapshots object is made on first use: a project that is never edited never runs git.
The turn id is saved as meta["turns"][i]["checkpoint"] (agent/loop/conversation.py): users' saved
sessions and `train export-sessions` read that field name.

Words: tools/undo.py numbers its turns across all of a project's sessions, so the third snapshot
can be a one-request session's only one. What /undo and /diff say names the request as the user
knows it instead (`request_label`: "request N" of this conversation).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from tools.snapshot import names_list
from tools.undo import NothingToUndo, Snapshots, UndoError

_TURN = re.compile(r"\bturn (\d+)\b")  # how tools/undo.py's messages name a snapshot turn


@dataclass
class RewindFiles:
    """What rewind() did to the files: paths `restored` and `removed` (the turns created them),
    `kept` as they are (ignored or unsnapshotted paths undo never touches, too-big files), the
    git state put back, and the turns it `refused` to undo ((turn id, why, their paths)).
    `off`: why no file was touched at all (undo off or unavailable), else "". Paths are
    relative to the work tree's top (the project root but in a subfolder of a repository)."""
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    git: list[str] = field(default_factory=list)
    refused: list[tuple[int, str, list[str]]] = field(default_factory=list)
    off: str = ""
    commands: bool = False  # the turns ran commands: what they did beyond the snapshot stays

    @property
    def unrestored(self) -> list[str]:
        """Paths the rewound turns changed that are not back as they were."""
        return sorted({p for _, _, paths in self.refused for p in paths} | set(self.kept))

    def describe(self, requests: dict[int, int]) -> list[str]:
        """The report's lines: what was put back, then what could not be and why. `requests`:
        the request number each turn id answered (the user knows requests, /undo turn ids)."""
        lines = [f"{label} {names_list(sorted(set(paths)))}" for label, paths in (
            ("files restored:", self.restored), ("removed (the rewound turns created them):", self.removed),
            ("put back git's", self.git)) if paths]
        if self.off:
            lines.append(f"files left as they are: {self.off}")
        lines += [f"request {requests.get(tid, '?')}'s changes left as they are now"
                  f"{f' ({names_list(sorted(paths))})' if paths else ''}: {why}" for tid, why, paths in self.refused]
        if self.kept:
            lines.append(f"left as they are (no snapshot holds them: ignored, too big or outside the "
                         f"project): {names_list(sorted(set(self.kept)))}")
        if self.commands:
            lines.append("commands ran in the rewound turns: what they did outside the project's "
                         "files (other folders, .git, ignored files, processes, the network) is not undone")
        return lines


class TurnUndo:
    """Per-conversation snapshots and undo (module docstring). root: the project directory."""

    def __init__(self, root: str, enabled: bool = True):
        self.root, self.enabled = root, enabled
        self._snapshots = None  # tools.undo.Snapshots, made on first use
        self.open = None  # the open turn's tools.undo.Turn, once its snapshot is taken
        self.notes: list[str] = []  # what undo restored, for the next user message
        self._noted: dict[str, int] = {}  # each note's turn id, for `forget`
        self.last_undone = None  # the turn id the last undo() restored

    @property
    def made(self) -> bool:
        """Whether a snapshot was ever taken (the project's git was touched)."""
        return self._snapshots is not None

    def snapshots(self):
        """The project's Snapshots; UndoError when undo is off or cannot work here."""
        if not self.enabled:
            raise UndoError("undo is off for this agent (TurnSettings.snapshots=False)")
        if self._snapshots is None:
            try:
                self._snapshots = Snapshots(self.root)
            except UndoError:
                raise
            except Exception as e:  # noqa: BLE001 - e.g. git missing
                raise UndoError(f"undo is not available here: {e}") from e
        return self._snapshots

    def begin(self, message: str, session: str) -> str | None:
        """Snapshot before the turn's first change; the refusing result when that fails."""
        if self.open is not None or not self.enabled:
            return None
        try:
            self.open = self.snapshots().begin(message[:200], session=session)
        except Exception as e:  # noqa: BLE001
            return (f"error: not run: the project could not be snapshotted for /undo ({e}); nothing "
                    "was changed. Fix that, or turn snapshots off (TurnSettings.snapshots=False) to change files "
                    "without undo")
        return None

    def end(self):
        """Record the open turn: its tools.undo.Turn, None when none is open."""
        if self.open is None:
            return None
        turn, self.open = self.open, None
        return self._snapshots.end(turn)

    def undo(self, session: str | None, turn=None, allow_committed: bool = False) -> list[str]:
        """Restore the turn; the restored and removed paths. The note goes to `notes`."""
        ck = self.snapshots()
        plan = ck.plan(turn, session=session)
        paths = ck.undo(plan.turn, allow_committed=allow_committed)
        self.last_undone = plan.turn
        note = (f"[the user undid an earlier request's changes ({plan.describe()}): those files are "
                "back as they were before it]")
        self.notes.append(note)
        self._noted[note] = plan.turn  # `forget` finds a rewound turn's notes by it
        return paths

    def rewind(self, turn_ids: list[int], session: str, edited: list[str], commands: bool) -> RewindFiles:
        """Undo each of `turn_ids` (newest first) that `session` made and is not undone yet, as
        the module docstring says; a refusal is reported, never raised. `edited`: the real paths
        the turns' Edits wrote (one no snapshot holds is named as kept); `commands`: whether they
        ran Bash."""
        done = RewindFiles(commands=commands)
        if not turn_ids and not (commands or edited):
            return done
        try:
            ck = self.snapshots()
            recorded = {t.id: t for t in ck.turns()}
        except UndoError as e:
            done.off = f"{e}; what the rewound turns changed cannot be put back"
            return done
        held = {os.path.join(ck.top, p) for t in turn_ids if t in recorded for p in recorded[t].changed}
        done.kept += sorted({os.path.relpath(p, ck.top) for p in edited if p not in held})
        for tid in turn_ids:
            turn = recorded.get(tid)
            if turn is not None and turn.undone:
                continue  # undone already (/undo): its files are back
            if turn is not None and turn.session not in (None, session):
                done.refused.append((tid, f"turn {tid} was made by another session ({turn.session}), not "
                                     "undone here; /undo all reaches it", list(turn.changed)))
                continue
            try:
                plan = ck.plan(tid)
                paths = ck.undo(tid)
            except UndoError as e:
                done.refused.append((tid, str(e), list(turn.changed) if turn else []))
                continue
            done.restored += [p for p in paths if p not in plan.remove]
            done.removed += [p for p in paths if p in plan.remove]
            done.kept += plan.keep + list(turn.skipped if turn else [])
            done.git += [g for g in plan.git if g not in done.git]
        return done

    def forget(self, turn_ids) -> None:
        """Drop the undo notes about these turns (a rewind cut them out of the conversation)."""
        gone = {note for note, turn in self._noted.items() if turn in set(turn_ids)}
        self.notes = [n for n in self.notes if n not in gone]

    def plan(self, session: str | None, turn=None):
        """What undo() would do, for a UI to confirm (tools.undo.UndoPlan; nothing changes)."""
        return self.snapshots().plan(turn, session=session)

    def diff(self, session: str | None, turn=None) -> str:
        """Unified diff of the turn ("" when it changed nothing)."""
        return self.snapshots().diff(turn, session=session)


UNDO_HELP = ("/undo [all] [yes] [committed]: show what undoing the last request of this session (all: "
             "of any session) would restore; with yes, do it (committed: even files committed since)")


def request_label(agent, turn_id: int) -> str:
    """Snapshot turn `turn_id` as the user knows it: "request N" when it is the Nth request of
    this conversation, else the request's own words and its session (/undo all)."""
    for n, record in enumerate(getattr(agent, "meta", {}).get("turns", []), 1):
        if record.get("checkpoint") == turn_id:
            return f"request {n}"
    try:
        turn = next((t for t in agent.undo_log.snapshots().turns() if t.id == turn_id), None)
    except Exception:  # noqa: BLE001 - no snapshots to ask: the number is all there is
        turn = None
    if turn is None:
        return f"change {turn_id}"
    said = (turn.message.strip().splitlines() or [""])[-1]  # the request, after any notes
    return f"the request {said[:50]!r} (session {turn.session})"


def for_user(agent, text: str) -> str:
    """`text` (tools/undo.py's words) with each "turn N" named as request_label names it."""
    return _TURN.sub(lambda m: request_label(agent, int(m.group(1))), text)


def slash_undo(agent, rest: str) -> str:
    """The /undo command of the REPL and the TUI, as the text to show: without `yes` only the
    plan (nothing changes: the user confirms by typing `/undo yes`); with it, the restore. Words
    of `rest`: all (any session's last turn), yes (do it), committed (allow_committed)."""
    words = set(rest.split())
    unknown = words - {"all", "yes", "committed"}
    if unknown:
        return f"unknown /undo option {', '.join(sorted(unknown))}; {UNDO_HELP}"
    scope = dict(all_sessions="all" in words)
    try:
        plan = agent.undo_plan(**scope)
        if "yes" not in words:
            extra = " all" if scope["all_sessions"] else ""
            more = " committed" if plan.committed else ""
            return (f"/undo would undo {request_label(agent, plan.turn)}: {plan.describe()}. Type "
                    f"/undo{extra} yes{more} to do it")
        paths = agent.undo(plan.turn, allow_committed="committed" in words)
    except NothingToUndo:
        undone = agent.undo_log.last_undone
        said = f" ({request_label(agent, undone)} is undone already)" if undone is not None else ""
        where = "in any session" if scope["all_sessions"] else \
            "in this session; /undo all reaches the last request of any session"
        return f"nothing left to undo{said} {where}"
    except UndoError as e:
        return for_user(agent, str(e))
    removed = [p for p in paths if p in plan.remove]
    restored = [p for p in paths if p not in plan.remove]
    done = [f"{label} {names_list(items)}" for label, items in (
        ("restored", restored), ("removed (the request created them)", removed),
        ("put back git's", plan.git)) if items]
    return f"undid {request_label(agent, plan.turn)}: {'; '.join(done)}" if done else "nothing to undo"
