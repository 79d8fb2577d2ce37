"""The turn driver: one conversation with one model in one project, UI-independent. The TUI, the
REPL and headless mode drive it through `Agent.run_turn(user_text, approve, on_event, cancel)` and
only render its events (protocol's typed events); run_turn returns a TurnResult. It may run on a
worker thread (approve then blocks that thread); set `cancel` from any thread.

It is built from parts with small interfaces, each testable alone: the model (agent/samplers/sampler.py's
Sampler: our engine or any OpenAI-compatible server), the call rules (agent/loop/call_rules.py: take a
reply back and resample it, let it stand, end on repeats), the conversation
(agent/loop/conversation.py), permissions (tools/permissions.Policy), undo (agent/loop/turn_undo.py: a
snapshot before a turn's first change; no change without undo unless TurnSettings.snapshots is
off) and the context budget (agent/loop/context.py: each result and the memory file cut to its share).

One user turn (agent/loop/turn.py): append the user message -> the sampler replies (prose, and
at most one tool call) -> for a call: check it, ask the policy (allow / deny -> `error: <reason>` /
ask -> approve: "no" -> `rejected by user` and the turn ends; Ctrl-C or Ctrl-D at the prompt ->
"cancelled"), run it on exactly the file or folder the policy judged, append the result, ask for
the next reply; a plain reply ends the turn. Agent holds what outlives a turn: the conversation,
the budgets, undo, rewind, the sampler in use and the usage totals.
"""
from __future__ import annotations

import os
import threading
import time

from agent.loop.context import ContextFull, compact, fit_memory, memory_budget, read_limit, result_budget
from agent.loop.conversation import Conversation
from agent.loop.hooks import Hooks
from agent.loop.turn import Turn
from agent.loop.turn_undo import TurnUndo
from agent.samplers.sampler import Sampler, SamplerError
from agent.settings import TurnSettings
from nanocode.protocol import CANCELLED, MODES, REJECTED, Status, TurnResult, mode_tools, system_prompt
from tools.files import read_memory
from tools.permissions import Policy
from tools.sandbox import for_commands



class Agent:
    """One conversation with `sampler` in the project at `root` under `policy` (a
    tools.permissions.Policy: mode, rules, settings). messages / meta / store: a conversation to
    continue and where to save it (agent/loop/conversation.py). `sandbox_status` says what contains
    the commands. `mcp`: an agent/mcp_hub.McpHub whose servers' tools the model may call too
    (None: ours only)."""

    def __init__(self, sampler: Sampler, root, policy: Policy, settings: TurnSettings = TurnSettings(),
                 messages=None, meta=None, store=None, mcp=None):
        self.root = os.path.realpath(os.fspath(root))
        self.sampler, self.policy, self.settings, self.mcp = sampler, policy, settings, mcp
        self.sandbox, self.sandbox_status = for_commands(settings.sandbox, settings.network)
        policy.sandboxed = self.sandbox is not None  # no sandbox: every Bash asks
        self.hooks = Hooks(self.root, policy, self.sandbox)  # the settings' "hooks" (agent/loop/hooks.py)
        self.result_budget = result_budget(sampler.max_len, sampler.reserve)  # agent/loop/context.py
        self.read_limit = read_limit(self.result_budget)
        self.conv = Conversation(self.root, messages, meta, store)
        # a continued conversation goes on with its seeds: reply n uses seed + n
        sampler.n_replies = sum(m["role"] == "assistant" for m in self.conv.messages)
        self.undo_log = TurnUndo(self.root, settings.snapshots)  # agent/loop/turn_undo.py
        self._startup_notes: list[str] = []  # status notes for the next turn (refresh_system_prompt)
        self._said_no_snapshot = False  # the "could not snapshot" note is said once
        # the turns' usage added up, and the prefills of load_context and compact
        self.totals = dict(TurnResult().usage, turns=0)
        self.started = time.monotonic()

    # ---- public helpers ------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict]:
        return self.conv.messages

    @property
    def meta(self) -> dict:
        return self.conv.meta

    @property
    def mode(self) -> str:
        return self.policy.mode

    def set_mode(self, mode: str) -> None:
        """The system prompt lists the tools the mode offers (plan: Read and Grep) and the sampler
        offers only those; a switch to a mode with other tools is said in the next user message
        (protocol.mode_note)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        self.policy.mode = mode

    def extra_tools(self) -> tuple:
        """The MCP tools offered now (their servers running), as protocol.Tools; the policy
        judges their calls by the same table (Policy.external)."""
        self.policy.external = self.mcp.tools() if self.mcp is not None else {}
        return tuple(self.policy.external.values())

    def offered_tools(self) -> tuple:
        """What a reply may call in this mode: ours, then the MCP tools (protocol.mode_tools)."""
        return mode_tools(self.mode, self.extra_tools())

    def conversation(self) -> dict:
        return {"messages": self.messages, "meta": self.meta}

    def adopt(self, messages: list[dict], meta: dict) -> None:
        """Continue from another agent's conversation (best-of: the winning rollout's, which
        started from this one's context; the turns this one had dropped stay in its transcript)."""
        self.conv.messages, self.conv.meta = messages, meta
        self.sampler.invalidate()

    def resume(self, messages: list[dict], meta: dict, store) -> None:
        """/resume ID: go on with a saved conversation instead (agent/sessions.py), as
        `nanocode --resume ID` would; the model, settings and undo history stay."""
        model = self.meta.get("model")
        self.conv = Conversation(self.root, messages, meta, store)
        if model:
            self.meta["model"] = model
        self.sampler.reset()
        self.sampler.n_replies = sum(m["role"] == "assistant" for m in self.conv.messages)
        self.undo_log.notes = []
        self.refresh_system_prompt()
        self.load_context()

    def use_sampler(self, sampler, name: str) -> None:
        """/model NAME: the conversation goes on with another model; the budgets follow its
        context and the conversation is rendered for it afresh."""
        sampler.n_replies = self.sampler.n_replies
        self.sampler = sampler
        self.result_budget = result_budget(sampler.max_len, sampler.reserve)
        self.read_limit = read_limit(self.result_budget)
        self.meta["model"] = name
        sampler.invalidate()
        self.refresh_system_prompt(f"the model changed to {name}")  # the memory file's share follows the context

    def clear(self) -> None:
        """Start a new conversation (new session id); settings and undo history stay."""
        self.conv.clear()
        self.sampler.reset()
        self.undo_log.notes = []  # undo notes belong to the conversation they were made in

    def undo(self, turn: int | None = None, *, all_sessions: bool = False,
             allow_committed: bool = False) -> list[str]:
        """Restore what the last undoable turn of this conversation (or `turn`, or of any
        conversation with all_sessions) changed; returns the restored and removed paths. Raises
        UndoError when it refuses (tools/undo.py: moved on since, committed since unless
        allow_committed). The next user message tells the model what was undone; the turn's
        record says "undone" (a turn the user did not want: `train export-sessions`)."""
        paths = self.undo_log.undo(self._scope(all_sessions), turn, allow_committed)
        for record in self.meta["turns"]:
            if record.get("checkpoint") == self.undo_log.last_undone:
                record["undone"] = True
        self.conv.save()
        return paths

    def rewind(self, n: int) -> tuple[str, str]:
        """/rewind N: the conversation goes back to just before request n (Conversation.rewind)
        and the files its turns and the later ones changed go back as they were (TurnUndo.rewind:
        a file changed since is kept as it is, and said). Returns (the report, the request as
        typed, for the prompt). ValueError for a request that does not exist; nothing changes."""
        points = self.conv.requests()
        entry = self.conv.rewind(n)
        cut, turns = entry["messages"], entry["turns"]
        ran = [m["tool_call"] for m, out in zip(cut, cut[1:] + [{}]) if isinstance(m.get("tool_call"), dict)
               and not str(out.get("content", "error")).startswith(("error", REJECTED, CANCELLED))]
        edited = [os.path.realpath(os.path.join(self.root, str(c["args"].get("file_path"))))
                  for c in ran if c.get("name") == "Edit" and isinstance(c.get("args"), dict)]
        answered = {t["checkpoint"]: i for i, t in enumerate(turns, n) if isinstance(t.get("checkpoint"), int)}
        files = self.undo_log.rewind(list(answered)[::-1], self.meta["id"], edited,
                                     commands=any(c.get("name") == "Bash" for c in ran))
        self.undo_log.forget(answered)
        carried = turns[0].get("notes")  # the cut request carried them: told again
        notes = [note for note in carried if isinstance(note, str)] if isinstance(carried, list) else []
        if files.unrestored:
            notes.append("[the user went back to before a request of theirs; these files were not put back "
                         f"and may differ from what you saw: {', '.join(files.unrestored)}]")
        self.undo_log.notes = notes + [note for note in self.undo_log.notes if note not in notes]
        self.sampler.invalidate()
        self.conv.save()
        said = (f"rewound to before request {n}: {len(turns)} request{'s' * (len(turns) != 1)} taken out "
                "of the conversation (kept in the session file under \"rewinds\")")
        return "\n".join([said] + files.describe(answered)), points[n - 1][1]

    def mark(self, verdict: str) -> tuple[int, str | None]:
        """/good, /bad on the last turn (Conversation.mark)."""
        return self.conv.mark(verdict)

    def undo_plan(self, turn: int | None = None, *, all_sessions: bool = False):
        """What undo() would do, for a UI to confirm (tools.undo.UndoPlan; nothing changes)."""
        return self.undo_log.plan(self._scope(all_sessions), turn)

    def diff(self, turn: int | None = None, *, all_sessions: bool = False) -> str:
        """Unified diff of the last recorded turn of this conversation ("" when it changed
        nothing)."""
        return self.undo_log.diff(self._scope(all_sessions), turn)

    def _scope(self, all_sessions: bool) -> str | None:
        return None if all_sessions else self.meta["id"]

    def load_context(self) -> None:
        """A continued session: fit its transcript to the context and bring the model up to it
        now (one prefill), so the status line says how full the context is before the first
        request and that request starts at once. Nothing said: the first turn's fit speaks. The
        prefill counts in /usage's totals."""
        usage = TurnResult().usage
        try:
            self.sampler.sync(self.conv, lambda event: None, usage)
        except (ContextFull, SamplerError):  # the first turn says so, where it can be acted on
            pass
        self.count(usage)

    def count(self, usage: dict, turns: int = 0) -> None:
        """Add `usage` (a TurnResult's) to the totals /usage shows."""
        for key, value in usage.items():
            self.totals[key] = self.totals.get(key, 0) + value
        self.totals["turns"] += turns

    def compact(self, keep: int = 1) -> int:
        """/compact (agent/loop/context.compact): old outputs become one-line digests; tokens freed.
        The prefill that rebuilds the model's cache counts in /usage's totals (no turn)."""
        usage = TurnResult().usage
        freed = compact(self.conv, self.sampler, usage, keep)
        self.count(usage)
        return freed

    def new_system_prompt(self) -> str:
        """The system message a new conversation starts with: the mode's tools (the MCP servers'
        too, once each has started or failed), the folder and the memory file cut to its share of
        the context."""
        memory = read_memory(self.root) if self.settings.memory else None
        memory = fit_memory(memory, self.sampler.count, memory_budget(self.sampler.max_len))
        if self.mcp is not None:
            self.mcp.wait()
        return system_prompt(self.root, memory, self.mode, self.extra_tools())

    def refresh_system_prompt(self, why: str = "the project notes, folder or mode changed since this "
                              "session was saved") -> bool:
        """A resumed conversation starts from today's system prompt (the memory file, the folder
        or the mode may have changed since it was saved; also after /model and /mcp reconnect);
        True when it changed. The next turn says so in a status note that opens with `why`."""
        if not self.messages or self.messages[0]["role"] != "system":
            return False
        fresh = self.new_system_prompt()
        if fresh == self.messages[0]["content"]:
            return False
        self.messages[0] = {"role": "system", "content": fresh}
        self.meta["mode"] = self.mode
        self.sampler.invalidate()
        self._startup_notes.append(f"{why}: it goes on with the new system prompt")
        return True

    def take_startup_notes(self) -> list[str]:
        """The status notes the next turn opens with (refresh_system_prompt's), said once."""
        notes, self._startup_notes = self._startup_notes, []
        return notes

    def say_no_snapshot(self, emit) -> None:
        """A changing call could not be snapshotted for /undo, so it did not run: said once a
        session (e.g. a read-only project), not on every call."""
        if not self._said_no_snapshot:
            emit(Status("could not snapshot the project for /undo, so the call was not run"))
            self._said_no_snapshot = True

    def run_turn(self, user_text: str, approve=None, on_event=None,
                 cancel: threading.Event | None = None) -> TurnResult:
        """One request's turn (agent/loop/turn.py): the model's replies and calls until it answers
        or a rule stops it. approve(name, args, decision) answers what the policy asks (None: nobody to
        ask); on_event gets each event; cancel stops it."""
        return Turn(self, approve, on_event, cancel).run(user_text)
