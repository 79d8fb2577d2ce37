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

One user turn: append the user message -> the sampler replies (prose, and at most one tool call)
-> for a call: check it, ask the policy (allow / deny -> `error: <reason>` / ask -> approve: "no"
-> `rejected by user` and the turn ends; Ctrl-C or Ctrl-D at the prompt -> "cancelled"), run it
on exactly the file or folder the policy judged, append the result, ask for the next reply; a
plain reply ends the turn. Also ending a turn: the same call three times in a row, `max_steps`
calls, `cancel`, a reply cut by `max_tokens` or for looping, a request that does not fit the
context, a model server that fails. A turn whose request is a question makes an Edit that only the
mode would allow ask (headless: an `error:`, resampled), so the model answers instead.
"""
from __future__ import annotations

import os
import threading
import time

from agent.loop.approval import ask
from agent.loop.call_rules import CallRules, call_key
from agent.loop.context import ContextFull, compact, fit_memory, fit_result, memory_budget, read_limit, result_budget
from agent.loop.conversation import Conversation
from agent.loop.hooks import Hooks
from agent.loop.mentions import mentioned
from agent.loop.request_kind import is_question
from agent.loop.turn_undo import TurnUndo
from agent.samplers.sampler import Reply, Sampler, SamplerError
from agent.settings import TurnSettings
from nanocode.protocol import (
    CANCELLED, MODE_TOOLS, MODES, REJECTED, REPEATED, TOOLS, Approval, Status, ToolCall, ToolResult, TurnEnd,
    TurnResult, check_call, mode_note, mode_tools, system_prompt)
from tools.dispatch import run_tool
from tools.files import read_memory
from tools.permissions import QUESTION_EDIT, Policy
from tools.sandbox import for_commands

STOP_NOTES = {"repeat": "the same call three times in a row: stopped; your turn",
              "cancelled": "cancelled",
              "loop": "reply stopped: it was repeating itself"}
REPLY_STOPS = {"stop": "done", "cancelled": "cancelled", "loop": "loop", "length": "max_tokens"}


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
        self.totals = dict(TurnResult().usage, turns=0)  # the turns' usage added up, and load_context's
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
        self.refresh_system_prompt()  # the memory file's share follows the context

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
        self._count(usage)

    def _count(self, usage: dict, turns: int = 0) -> None:
        """Add `usage` (a TurnResult's) to the totals /usage shows."""
        for key, value in usage.items():
            self.totals[key] = self.totals.get(key, 0) + value
        self.totals["turns"] += turns

    def compact(self, keep: int = 1) -> int:
        """/compact (agent/loop/context.compact): old outputs become one-line digests; tokens freed."""
        return compact(self.conv, self.sampler, keep)

    def _system_prompt(self) -> str:
        """The system message a new conversation starts with: the mode's tools (the MCP servers'
        too, once each has started or failed), the folder and the memory file cut to its share of
        the context."""
        memory = read_memory(self.root) if self.settings.memory else None
        memory = fit_memory(memory, self.sampler.count, memory_budget(self.sampler.max_len))
        if self.mcp is not None:
            self.mcp.wait()
        return system_prompt(self.root, memory, self.mode, self.extra_tools())

    def refresh_system_prompt(self) -> bool:
        """A resumed conversation starts from today's system prompt (the memory file, the folder
        or the mode may have changed since it was saved); True when it changed. The next turn
        says so in a status note."""
        if not self.messages or self.messages[0]["role"] != "system":
            return False
        fresh = self._system_prompt()
        if fresh == self.messages[0]["content"]:
            return False
        self.messages[0] = {"role": "system", "content": fresh}
        self.meta["mode"] = self.mode
        self.sampler.invalidate()
        self._startup_notes.append("the project notes, folder or mode changed since this session "
                                   "was saved: it goes on with the new system prompt")
        return True

    # ---- the turn --------------------------------------------------------------------------------
    def run_turn(self, user_text: str, approve=None, on_event=None,
                 cancel: threading.Event | None = None) -> TurnResult:
        """Open the turn with the user's message; pin the @-mentioned files; then step (a reply
        and its call) until a step says why the turn stops; bring the model up to the closed
        conversation; record the turn for /undo and save it."""
        emit = on_event or (lambda event: None)
        cancel = cancel or threading.Event()
        res, started = TurnResult(), time.perf_counter()
        rules = CallRules(self.settings.retries)
        self._open_turn(user_text, emit)
        try:
            for path in mentioned(user_text, self.root):  # @path: pinned as a Read step
                rules.kept("Read", self._pin(path, res, emit), "")
            stop = None
            while stop is None:
                stop = "cancelled" if cancel.is_set() else self._step(rules, res, approve, emit, cancel)
            res.stop_reason = stop
            try:
                self.sampler.sync(self.conv, emit, res.usage)
            except ContextFull as e:  # keep going: the next turn will compact or say so again
                emit(Status(str(e)))
        finally:
            self._close_turn(res, emit, started)
        self.hooks.stop(res.stop_reason, self.meta["id"], emit)
        emit(TurnEnd(res.stop_reason, res.steps, res.retries))
        return res

    def _open_turn(self, user_text: str, emit) -> None:
        """The user's message, after the notes it carries: the system prompt for a new
        conversation, a mode switch, what /undo restored."""
        raw_text = user_text  # the request as the user wrote it (agent/loop/request_kind.py)
        for note in self._startup_notes:
            emit(Status(note))
        self._startup_notes = []
        if not self.messages:
            self.meta["mode"] = self.mode
            self.messages.append({"role": "system", "content": self._system_prompt()})
        told = self.meta.get("mode", "ask")  # the mode the model knows of before this request
        if MODE_TOOLS[told] != MODE_TOOLS[self.mode]:
            self.meta["mode"] = self.mode
            user_text = f"{mode_note(self.mode)}\n{user_text}"
        notes, self.undo_log.notes = self.undo_log.notes, []
        if notes:
            user_text = "\n".join(notes + [user_text])
        self.policy.question = self.settings.question_guard and is_question(raw_text)
        self.conv.open_turn(user_text, raw_text, notes, told)

    def _step(self, rules: CallRules, res: TurnResult, approve, emit, cancel):
        """One reply and, for a call, its result: the turn's stop reason, or None to go on."""
        offered = self.offered_tools()
        rules.tools = {**TOOLS, **self.policy.external}
        try:
            reply = self.sampler.reply(self.conv, offered, emit, cancel, res.usage,
                                       retry=rules.attempt > 0)
        except ContextFull as e:
            emit(Status(str(e)))
            return "context"
        except SamplerError as e:
            emit(Status(str(e)))
            return "model_error"
        if reply.call is None and reply.error is None:
            return self._answer(reply, res, emit)
        name, args = (reply.call["name"], reply.call["args"]) if reply.call else ("?", {})
        key = call_key(name, args)
        why = rules.take_back(key, reply.error is not None, reply.stop == "cancelled")
        if why:
            return self._take_back(why, rules, res, emit)
        emit(ToolCall(name, args, res.steps + 1))
        three_in_a_row = rules.made(key)
        stop = None
        if reply.error is not None:
            result = reply.error
        elif three_in_a_row:
            result, stop = REPEATED, "repeat"
        else:
            result, stop = self._run_call(name, args, approve, emit, cancel)
        if stop is None and (why := rules.take_back_failure(name, result, cancel.is_set())):
            emit(ToolResult(name, args, result, res.steps + 1))
            return self._take_back(why, rules, res, emit)
        rules.kept(name, key, result)
        res.steps += 1
        res.tool_calls.append({"name": name, "args": args, "result": result})
        emit(ToolResult(name, args, result, res.steps))
        self.messages.append({"role": "tool_result", "content": result})
        if stop is None and cancel.is_set():
            stop = "cancelled"
        if stop is None and res.steps >= self.settings.max_steps:
            stop = "step_limit"
        if stop and stop != "rejected":  # a rejection is said once, by the call's result
            emit(Status(STOP_NOTES.get(stop) or f"step limit ({self.settings.max_steps} calls) reached; your turn"))
        return stop

    def _answer(self, reply: Reply, res: TurnResult, emit):
        """A reply without a call ends the turn."""
        res.answer = reply.message["content"]
        stop = REPLY_STOPS[reply.stop]
        if stop == "max_tokens":
            emit(Status(f"reply cut at {self.sampler.settings.max_tokens} tokens"))
        elif stop == "loop":
            emit(Status(STOP_NOTES["loop"]))
        return stop

    def _take_back(self, why: str, rules: CallRules, res: TurnResult, emit) -> None:
        """Take back the reply just made (its call is not kept) so the next one is resampled."""
        self.messages.pop()
        self.sampler.invalidate()  # the model saw the dropped reply: rebuilt before the next one
        res.retries += 1
        emit(Status(f"{why}: resampling ({rules.resampled()} of {self.settings.retries})", took_back=True))

    def _close_turn(self, res: TurnResult, emit, started: float) -> None:
        """Record the turn's changes for /undo (saying what it could not snapshot) and save it."""
        turn_id = None
        try:
            ended = self.undo_log.end()
        except Exception as e:  # noqa: BLE001 - the changes are made: say so, go on
            emit(Status(f"could not record this turn for /undo: {e}"))
            ended = None
        if ended is not None:
            res.files_changed, turn_id = list(ended.changed), ended.id
            if ended.skipped:  # untracked files too big, nested repos with too many files
                emit(Status(f"/undo cannot restore {', '.join(ended.skipped[:5])}"
                            f"{' and more' if len(ended.skipped) > 5 else ''}: too big to snapshot"))
        self.conv.record_turn(res.steps, res.stop_reason, res.files_changed, turn_id)
        res.usage["seconds"] = time.perf_counter() - started
        self._count(res.usage, turns=1)
        self.conv.save(emit)

    # ---- one call ----------------------------------------------------------------------------------
    def _pin(self, path: str, res: TurnResult, emit) -> str:
        """An @-mentioned file as a Read step in the conversation (agent/loop/mentions.py): the call
        and its result, cut to the result's share; returns the call's key for the repeat check."""
        args = {"file_path": path}
        result = run_tool(self.root, "Read", {**args, "limit": self.read_limit}, allow_outside=False)
        result = fit_result("Read", result, self.sampler.count, self.result_budget)
        res.steps += 1
        emit(ToolCall("Read", args, res.steps))
        self.messages.extend([
            {"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": args}},
            {"role": "tool_result", "content": result}])
        res.tool_calls.append({"name": "Read", "args": args, "result": result})
        emit(ToolResult("Read", args, result, res.steps))
        return call_key("Read", args)

    def _run_call(self, name, args, approve, emit, cancel):
        """Check, ask, snapshot, run: (result, the stop reason it causes or None)."""
        table = {**TOOLS, **self.policy.external}
        err = check_call(name, args, table)
        if err:
            return err, None
        d = self.policy.check(name, args)
        if d.action == "deny":
            return f"error: {d.reason}", None
        if d.reason == QUESTION_EDIT and approve is None:  # headless: nobody to ask, so the model answers
            return "error: the request is a question: answer it; edit only when the user asks for a change", None
        blocked = self.hooks.before(name, args, self.meta["id"], emit, cancel)  # PreToolUse: before asking
        if blocked:
            return blocked
        if d.action == "ask":
            answer, rule = ask(self.policy, d, name, args, approve, cancel)  # agent/loop/approval.py
            self.meta["approvals"].append({"turn": len(self.meta["turns"]), "name": name,
                                           "args": args, "reason": d.reason, "answer": answer,
                                           **({"rule": rule} if rule else {})})
            emit(Approval(name, args, d.action, d.reason, answer, rule))
            if answer == "no":
                return REJECTED, "rejected"
            if answer == "cancelled":  # not the user's verdict on the call: nothing ran
                return CANCELLED, "cancelled"
        changes = table[name].changes_files
        if changes:
            refused = self.undo_log.begin(self.messages[self.conv.turn_start]["content"], self.meta["id"])
            if refused:
                if not self._said_no_snapshot:  # e.g. a read-only project: not on every call
                    emit(Status("could not snapshot the project for /undo, so the call was not run"))
                    self._said_no_snapshot = True
                return refused, None
        if name == "Read" and "limit" not in args:  # the default follows the context
            args = {**args, "limit": self.read_limit}
        # check = use: a Read or Grep judged inside the project runs without allow_outside (its
        # descriptor-level open refuses what became outside), one judged outside reads only
        # there, and both refuse a file other than the one judged (tools/permissions.Decision)
        if name in self.policy.external:  # an MCP server's (agent/mcp_hub.py)
            result = self.mcp.call(name, args, cancel)
        else:
            result = run_tool(self.root, name, args, allow_outside=d.inside is False, same_as=d.identity,
                              timeout=self.settings.tool_timeout, cancel=cancel, sandbox=self.sandbox,
                              env_names=tuple(self.policy.env))
        result = fit_result(name, result, self.sampler.count, self.result_budget)
        result = self.hooks.after(name, args, result, self.meta["id"], emit, cancel)  # PostToolUse
        if changes:
            self.sampler.tree_changed()  # grounding lists the project again
        return result, None
