"""One conversation: its messages (the schema of train/conversations.py, rendered by the tokenizer),
its meta (id, created, cwd, mode, model, the approvals asked, one record per turn) and where the
current user request sits (`turn_start`, which compaction moves when it drops old turns). It is
what the turn driver writes, the samplers read and trim, and agent/sessions.SessionStore saves.

Two views of one conversation. `messages` is the model's context: a full context shortens old
tool outputs in place and drops old turns (agent/context.py, through `shorten` and `drop_turn`).
`transcript()` is everything that happened, as it happened: the dropped turns (`earlier`) back
in their place and every shortened output whole (`originals`). The session file holds the
transcript, and each turn record's "user_index" points into it, so a saved session never loses a
turn to a small context and `train export-sessions` reads every turn; a continued session loads
the whole transcript and the next turn fits it to the context again.
"""
from __future__ import annotations

import time
import uuid

from nanocode.protocol import Status


def new_meta(root: str) -> dict:
    return {"id": uuid.uuid4().hex[:8], "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "cwd": root, "approvals": [], "turns": []}


class Conversation:
    """messages / meta: a conversation to continue (agent.sessions.load), else a new one.
    store: an agent.sessions.SessionStore, saved after every turn (None: not saved)."""

    def __init__(self, root: str, messages=None, meta=None, store=None):
        self.root = root
        self.messages: list[dict] = [dict(m) for m in messages] if messages else []
        self.meta = meta if meta is not None else {}
        for key, value in new_meta(root).items():
            self.meta.setdefault(key, value)
        self.store = store
        self.turn_start = 0  # index of the current (or last) user request
        self.earlier: list[dict] = []  # whole turns dropped from the context, as they were
        self.originals: dict[int, str] = {}  # transcript index -> an output's text before shortening

    @property
    def id(self) -> str:
        return self.meta["id"]

    def clear(self) -> None:
        """A new conversation (new id, saved to a new file)."""
        self.messages, self.meta, self.turn_start = [], new_meta(self.root), 0
        self.earlier, self.originals = [], {}
        if self.store is not None:
            self.store = self.store.fresh(self.meta["id"])

    def _lead(self) -> int:
        """Index of the first request: what comes before it (the system prompt) is never dropped,
        and dropped turns always start there."""
        return next((i for i, m in enumerate(self.messages) if m["role"] == "user"), len(self.messages))

    def absolute(self, i: int) -> int:
        """messages[i]'s index in the transcript."""
        return i if i < self._lead() else i + len(self.earlier)

    def _as_written(self, i: int) -> dict:
        m = self.messages[i]
        original = self.originals.get(self.absolute(i))
        return m if original is None else {**m, "content": original}

    def shorten(self, i: int, content: str) -> None:
        """The model sees tool output messages[i] as `content` from now on; the transcript keeps
        the original."""
        self.originals.setdefault(self.absolute(i), self.messages[i]["content"])
        self.messages[i] = {"role": "tool_result", "content": content}

    def drop_turn(self, start: int, end: int) -> None:
        """messages[start:end], the oldest whole turn, leaves the context (not the transcript)."""
        assert start == self._lead() and end <= self.turn_start, (start, end, self.turn_start)
        self.earlier += [self._as_written(i) for i in range(start, end)]
        del self.messages[start:end]
        self.turn_start -= end - start

    def transcript(self) -> list[dict]:
        """Every message of the conversation as it was written (see the module docstring)."""
        lead = self._lead()
        return ([self._as_written(i) for i in range(lead)] + self.earlier +
                [self._as_written(i) for i in range(lead, len(self.messages))])

    def mark(self, verdict: str) -> tuple[int, str | None]:
        """/good, /bad: the user's verdict on the last turn, kept in its record (`train
        export-sessions` trains on good turns and pairs bad ones); one verdict per turn, the
        latest. Returns (its number, 1-based; the verdict it replaced or None); ValueError when
        there is no turn or it already has this verdict."""
        if not self.meta["turns"]:
            raise ValueError("no turn to mark yet")
        n, before = len(self.meta["turns"]), self.meta["turns"][-1].get("mark")
        if before == verdict:
            raise ValueError(f"turn {n} is already marked {verdict}")
        self.meta["turns"][-1]["mark"] = verdict
        self.save()
        return n, before

    def record_turn(self, steps: int, stop_reason: str, files_changed, snapshot) -> None:
        """One turn's record. The undo snapshot's turn id is saved under "checkpoint", the field's
        name in saved sessions since before snapshots were called so (export-sessions reads it)."""
        self.meta["turns"].append({"user_index": self.absolute(self.turn_start), "steps": steps,
                                   "stop_reason": stop_reason, "files_changed": files_changed,
                                   "checkpoint": snapshot})
        self.meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    def save(self, emit=None) -> None:
        """Write it to the store; a failure is a status event (the turn is not lost for it)."""
        if self.store is None:
            return
        try:
            self.store.save(self.transcript(), self.meta)
        except OSError as e:
            if emit is not None:
                emit(Status(f"could not save the session: {e}"))
