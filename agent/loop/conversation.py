"""One conversation: its messages (the schema of train/conversations.py, rendered by the tokenizer),
its meta (id, created, cwd, mode, model, the approvals asked, one record per turn) and where the
current user request sits (`turn_start`, which compaction moves when it drops old turns). It is
what the turn driver writes, the samplers read and trim, and agent/sessions.SessionStore saves.

Two views of one conversation. `messages` is the model's context: a full context shortens old
tool outputs in place and drops old turns (agent/loop/context.py, through `shorten` and `drop_turn`).
`transcript()` is everything that happened, as it happened: the dropped turns (`earlier`) back
in their place and every shortened output whole (`originals`). The session file holds the
transcript, and each turn record's "user_index" points into it, so a saved session never loses a
turn to a small context and `train export-sessions` reads every turn; a continued session loads
the whole transcript and the next turn fits it to the context again.

Rewind (`rewind(n)`, /rewind): the conversation goes back to just before request n. The
transcript is cut there and becomes the context again (as a continued session's does); the
turns cut off, their records and approvals move into one entry of meta["rewinds"], so the saved
session shows the rewound conversation and still holds what was dropped. A turn record keeps
what rewinding needs: the request as the user typed it ("request", which goes back into the
prompt), the mode the model had been told before it ("mode_before") and the /undo notes its
message carried ("notes", told again with the next request).
"""
from __future__ import annotations

import time
import uuid

from nanocode.protocol import MODES, Status


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
        self._opening: dict = {}  # the open turn's record fields known at its start (open_turn)

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

    def open_turn(self, content: str, request: str, notes: list[str], mode_before: str) -> None:
        """Append the user's message (`content`: `request` as typed, after the notes it carries)
        and keep what the turn's record says of its start (the module docstring)."""
        self._opening = {"request": request, "mode_before": mode_before,
                         **({"notes": list(notes)} if notes else {})}
        self.messages.append({"role": "user", "content": content})
        self.turn_start = len(self.messages) - 1

    def record_turn(self, steps: int, stop_reason: str, files_changed, snapshot) -> None:
        """One turn's record. The undo snapshot's turn id is saved under "checkpoint", the field's
        name in saved sessions since before snapshots were called so (export-sessions reads it)."""
        self.meta["turns"].append({"user_index": self.absolute(self.turn_start), "steps": steps,
                                   "stop_reason": stop_reason, "files_changed": files_changed,
                                   "checkpoint": snapshot, **self._opening})
        self._opening = {}
        self.meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    def requests(self) -> list[tuple[int, str, dict]]:
        """(n, the request as typed, its turn record) for each recorded turn, oldest first: the
        points `rewind` can go back to. Empty when the records do not point at the requests (a
        session saved by a tool that kept no user_index)."""
        whole, out = self.transcript(), []
        for n, record in enumerate(self.meta["turns"], 1):
            i = record.get("user_index")
            if not (isinstance(i, int) and 0 <= i < len(whole) and whole[i]["role"] == "user"):
                return []
            request = record.get("request")
            out.append((n, request if isinstance(request, str) else whole[i]["content"], record))
        return out

    def rewind(self, n: int) -> dict:
        """Go back to just before request n (1-based, as `requests` numbers them): the entry
        added to meta["rewinds"] ({"time", "to_request": n, and what was cut off: "messages",
        "turns", "approvals"}). ValueError naming the numbers there are."""
        points = self.requests()
        if not 1 <= n <= len(points):
            have = f"1 to {len(points)}" if points else "none: no request recorded yet"
            raise ValueError(f"no request {n} to rewind to (this conversation has {have})")
        whole, record = self.transcript(), points[n - 1][2]
        cut = record["user_index"]
        self.messages, self.earlier, self.originals = whole[:cut], [], {}
        self.turn_start = max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=0)
        if record.get("mode_before") in MODES:
            self.meta["mode"] = record["mode_before"]
        approvals = self.meta["approvals"]  # each names its turn, 0-based
        cut_off = [a for a in approvals if isinstance(a.get("turn"), int) and a["turn"] >= n - 1]
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "to_request": n, "messages": whole[cut:],
                 "turns": self.meta["turns"][n - 1:], "approvals": cut_off}
        self.meta["turns"] = self.meta["turns"][:n - 1]
        self.meta["approvals"] = [a for a in approvals if a not in cut_off]
        self.meta.setdefault("rewinds", []).append(entry)
        self.meta["updated"] = entry["time"]
        return entry

    def save(self, emit=None) -> None:
        """Write it to the store; a failure is a status event (the turn is not lost for it)."""
        if self.store is None:
            return
        try:
            self.store.save(self.transcript(), self.meta)
        except OSError as e:
            if emit is not None:
                emit(Status(f"could not save the session: {e}"))
