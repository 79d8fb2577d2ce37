"""The agent loop: one conversation, UI-independent. The TUI, the REPL and headless mode drive it
through `Agent.run_turn(user_text, approve, on_event, cancel)` and only render its events.

Token history. `agent.session` (an engine Session: KV cache + ids) always holds exactly the
rendered conversation (the wire format of nanocode/protocol.py): `Tokenizer.render_conversation(
{"messages": agent.messages})` ids, plus an open `<|assistant_start|>` while the model writes.
The model's own tokens are kept as sampled (only new tokens are prefilled, turn after turn; the
history then equals the render byte for byte, and token for token unless the model picked a
non-canonical split of its own text),
except when its output cannot be represented in the conversation schema (an unterminated or
malformed call, a Ctrl-C inside a call): then the message keeps what can be represented and the
Session is rebuilt from the re-rendered conversation (one prefill of the history, ~17k tok/s).

One user turn: append the user message (the first also carries the system prompt, merged by the
renderer) -> generate (grammar-masked, see agent/grammar.py) until `<|tool_call_end|>` or
`<|assistant_end|>` -> for a call: append `<|assistant_end|>`, check it (protocol.check_call),
ask the policy (allow / deny -> `error: <reason>` / ask -> approve(name, args,
decision) -> "yes" | "no" | "always"; "no" -> `rejected by user` and the turn ends; Ctrl-C or
Ctrl-D at the prompt -> `cancelled by user`, recorded as "cancelled", not a rejection), run it
(tools.dispatch.run_tool), append the result, generate again; a plain reply ends the turn.
Also ending a turn: the same call three times in a row, `max_steps` calls, Ctrl-C (`cancel`),
a reply cut by `max_tokens`, a request that does not fit the context.

Retries. A reply whose call is malformed, repeats a call made since the turn's last Edit or
Bash, or fails with an `error:` from Read, Grep or Edit (which change nothing on disk) is taken
back and resampled, `retries` times at most per step (at retry_temperature when the agent is
greedy); then it stands as today (and three identical calls in a row end the turn). Taken-back
replies are not in the conversation; `TurnResult.retries` counts them.

Context. Each tool result is cut to its share of the context (agent/context.py: result_budget,
with a note saying how to see the rest), the memory file to its share, and a Read without
`limit` asks for about what fits. Before new tokens go in, they plus `reserve` slots for the
reply must fit; if not, old tool outputs and then old turns are dropped, the Session is rebuilt
and a status event says what was dropped. `compact()` (/compact) drops old outputs the same way.

Undo. The first Edit or Bash of a turn takes a tools.undo.Checkpoints snapshot (begin); the turn's
end records its changes (end) and says which paths it could not snapshot. Turns that only read
cost nothing. When the snapshot fails the call is refused (an `error:` result and a status: no
change without undo; checkpoints=False opts out). `undo()` / `diff()` / `undo_plan()` act on the
last recorded turn of this conversation (meta["id"]; all_sessions=True or a turn id reach
further); what undo restored is said to the model at the start of the next user message.

Mode. The system prompt lists the tools the mode offers (plan: Read and Grep) and the grammar
offers only those; a switch between modes with different tools mid-conversation is said in the
next user message (protocol.mode_note).

Events: `on_event(event)` with one of protocol's typed events (Text, ToolCall, Approval,
ToolResult, Status, TurnEnd; `event.kind` names it). run_turn returns a TurnResult (answer,
tool_calls, files_changed, steps, stop_reason, retries). It may run on a worker thread (approve
then blocks that thread); set `cancel` from any thread.
"""
from __future__ import annotations

import codecs
import dataclasses
import json
import os
import threading
import time
import uuid

import numpy as np

from agent.context import (ContextFull, digest, droppable, dropped_note, fit, fit_memory,
                           fit_result, memory_budget, read_limit, result_budget)
from agent.copy_bias import CopyBias
from agent.grammar import CONTENT, Grammar
from agent.grounding import Grounding
from agent.mentions import mentioned
from agent.turn_undo import TurnUndo
from nanocode.protocol import (
    CANCELLED, DROPPED, MODE_TOOLS, MODES, REJECTED, REPEATED, Approval, Status, Text, ToolCall, ToolResult, TurnEnd,
    TurnResult, check_call, mode_note, system_prompt)
from tools.dispatch import run_tool
from tools.files import read_memory
from tools.sandbox import for_commands


class Agent:
    """One conversation with one model in one project.

    engine: a nanocode.engine.Engine with a tokenizer. root: the project directory.
    mode / policy: permission mode (ask, accept-edits, auto, plan) or a ready tools.permissions
    Policy (settings files are read when only a mode is given). messages / meta: a conversation
    to continue (agent.sessions.load). Sampling: temperature, top_k, top_p, seed (generation n
    of the conversation uses seed + n); max_tokens per model reply. max_steps: tool calls per
    user turn. reserve: context slots kept free for a reply (default min(max_tokens,
    max_len // 4)). extra_mask(out) -> bool (V,) or None is ANDed with the grammar mask (tests
    script the model with it; constrain=False turns the grammar off). ground: the grammar also
    grounds paths, edit anchors and grep names in the project (agent/grounding.py). retries: how
    many times a failed or repeated call is resampled before it stands (retry_temperature when
    sampling is greedy). copy_bias: +beta on the logits of tokens that continue a copy of the
    context, in prose and answers only (agent/copy_bias.py; 0 = off). store: an
    agent.sessions.SessionStore saved after every turn. checkpoints: False disables undo.
    sandbox: run every Bash call in the OS sandbox (tools/sandbox.py; network: let it reach the
    network); where none can be had, or with sandbox=False, every Bash call asks, auto mode
    included. `sandbox_status` says which, for the faces to show.
    """

    def __init__(self, engine, root, *, mode: str = "ask", policy=None, messages=None, meta=None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 max_tokens: int = 1024, max_steps: int = 25, reserve: int | None = None,
                 tool_timeout: float | None = 30.0, extra_mask=None, constrain: bool = True,
                 memory: bool = True, store=None, checkpoints: bool = True, ground: bool = True,
                 retries: int = 2, retry_temperature: float = 0.7, copy_bias: float = 0.0,
                 sandbox: bool = True, network: bool = False):
        if engine.tokenizer is None:
            raise ValueError("the engine has no tokenizer (the checkpoint was saved without one)")
        self.engine, self.tok = engine, engine.tokenizer
        self.root = os.path.realpath(os.fspath(root))
        if policy is None:
            from tools.permissions import Policy
            policy = Policy.load(self.root, mode=mode)
        self.policy = policy
        self.sandbox, self.sandbox_status = for_commands(sandbox, network)
        policy.sandboxed = self.sandbox is not None  # no sandbox: every Bash asks
        self.temperature, self.top_k, self.top_p, self.seed = temperature, top_k, top_p, seed
        self.max_tokens, self.max_steps, self.tool_timeout = max_tokens, max_steps, tool_timeout
        self.reserve = reserve if reserve is not None else min(max_tokens, engine.max_len // 4)
        self.result_budget = result_budget(engine.max_len, self.reserve)  # agent/context.py
        self.read_limit = read_limit(self.result_budget)
        self.extra_mask, self.constrain, self.memory = extra_mask, constrain, memory
        self.grammar = Grammar.shared(self.tok, engine.cfg.vocab_size)
        self.grounding = Grounding(self.root) if ground and constrain else None
        self._grounded = 0  # messages[:_grounded] were given to grounding.add_text
        self._notes = 0  # grounding.notes[:_notes] were shown
        self._copy, self._copy_session, self._copy_seen = None, None, 0  # agent/copy_bias.py
        self.retries, self.retry_temperature, self.copy_bias = retries, retry_temperature, copy_bias
        self.messages: list[dict] = [dict(m) for m in messages] if messages else []
        self.meta = meta if meta is not None else {}
        self.meta.setdefault("id", uuid.uuid4().hex[:8])
        self.meta.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.meta.setdefault("cwd", self.root)
        self.meta.setdefault("approvals", [])
        self.meta.setdefault("turns", [])
        self.store = store
        self.session = engine.session()
        self._k = 0  # messages[:_k] are in the session
        self._dirty = True  # the session must be rebuilt from a full render
        self._n_gen = len([m for m in self.messages if m["role"] == "assistant"])
        self.undo_log = TurnUndo(self.root, checkpoints)  # agent/turn_undo.py
        self._turn_start = 0
        self._emit = lambda *a, **k: None
        self._usage = TurnResult().usage  # the running turn's (compact() outside a turn too)
        self._startup_notes: list[str] = []  # status notes for the next turn (refresh_system_prompt)
        self._said_no_snapshot = False  # the "could not snapshot" note is said once
        self._full = np.ones(engine.cfg.vocab_size, bool)
        self._device_masks: dict = {}  # id(numpy mask) -> (mask, device copy); masks are memoised
        self.mask_time = 0.0  # seconds spent in the mask hook (for the overhead number)
        self.mask_calls = 0
        s = self.tok.special_ids
        self._a_start, self._a_end = s["<|assistant_start|>"], s["<|assistant_end|>"]
        self._call_start, self._call_end = s["<|tool_call_start|>"], s["<|tool_call_end|>"]
        self._stops = (self._a_end, self._call_end)

    # ---- public helpers ------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.policy.mode

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        self.policy.mode = mode

    def conversation(self) -> dict:
        return {"messages": self.messages, "meta": self.meta}

    def clear(self) -> None:
        """Start a new conversation (new session id); settings and undo history stay."""
        self.messages = []
        self.meta = {"id": uuid.uuid4().hex[:8], "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "cwd": self.root, "approvals": [], "turns": []}
        if self.store is not None:
            self.store = self.store.fresh(self.meta["id"])
        self.session = self.engine.session()
        self._k, self._dirty, self._n_gen, self._grounded = 0, True, 0, 0
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
        self._save()
        return paths

    def mark(self, verdict: str) -> int:
        """/good, /bad: the user's verdict on the last turn, kept in its record (`train
        export-sessions` trains on good turns and pairs bad ones); returns its number (1-based)."""
        if not self.meta["turns"]:
            raise ValueError("no turn to mark yet")
        self.meta["turns"][-1]["mark"] = verdict
        self._save()
        return len(self.meta["turns"])

    def _save(self, emit=None) -> None:
        if self.store is None:
            return
        try:
            self.store.save(self.messages, self.meta)
        except OSError as e:
            if emit is not None:
                emit(Status(f"could not save the session: {e}"))

    def undo_plan(self, turn: int | None = None, *, all_sessions: bool = False):
        """What undo() would do, for a UI to confirm (tools.undo.UndoPlan; nothing changes)."""
        return self.undo_log.plan(self._scope(all_sessions), turn)

    def diff(self, turn: int | None = None, *, all_sessions: bool = False) -> str:
        """Unified diff of the last recorded turn of this conversation ("" when it changed
        nothing)."""
        return self.undo_log.diff(self._scope(all_sessions), turn)

    def _scope(self, all_sessions: bool) -> str | None:
        return None if all_sessions else self.meta["id"]

    def compact(self, keep: int = 1) -> int:
        """/compact: replace every tool output but the newest `keep` by the DROPPED marker and a
        one-line digest of it now
        (what a full context does by itself, oldest first; the system prompt and the requests
        are never touched) and return the tokens freed. Trade-off: the session is rebuilt from
        the render right away (one prefill of what is left, ~17k tok/s on the CPU d4 model)
        so the context count is true at once; call it between turns, not during one."""
        olds = droppable(self.messages, self.tok, len(self.messages))
        drop = olds[:max(0, len(olds) - keep)]
        if not drop:
            return 0
        before = len(self.rendered_ids())
        for i in drop:  # the marker and a line on what the output held (agent/context.digest)
            short = digest(self.messages[i - 1].get("tool_call"), self.messages[i]["content"])
            if len(self.tok.encode(short)) >= len(self.tok.encode(self.messages[i]["content"])):
                short = DROPPED
            self.messages[i] = {"role": "tool_result", "content": short}
        self._dirty = True
        try:
            self._flush(open_reply=False)
        except ContextFull:  # still too long (an oversized request): the next turn says so
            pass
        return before - len(self.rendered_ids())

    def _system_prompt(self) -> str:
        """The system message a new conversation starts with: the mode's tools, the folder and
        the memory file cut to its share of the context."""
        memory = read_memory(self.root) if self.memory else None
        memory = fit_memory(memory, self.tok, memory_budget(self.engine.max_len))
        return system_prompt(self.root, memory, self.mode)

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
        self._dirty = True
        self._startup_notes.append("the project notes, folder or mode changed since this session "
                                   "was saved: it goes on with the new system prompt")
        return True

    def rendered_ids(self) -> list[int]:
        """The canonical render of the conversation (what the session holds, when not open)."""
        return self.tok.render_conversation({"messages": self.messages})[0] if self.messages else []

    # ---- the turn --------------------------------------------------------------------------------
    def run_turn(self, user_text: str, approve=None, on_event=None,
                 cancel: threading.Event | None = None) -> TurnResult:
        emit = on_event or (lambda event: None)
        cancel = cancel or threading.Event()
        res = TurnResult()
        self._usage, started = res.usage, time.perf_counter()
        for note in self._startup_notes:
            emit(Status(note))
        self._startup_notes = []
        if not self.messages:
            self.meta["mode"] = self.mode
            self.messages.append({"role": "system", "content": self._system_prompt()})
        elif MODE_TOOLS[self.meta.get("mode", "ask")] != MODE_TOOLS[self.mode]:
            self.meta["mode"] = self.mode
            user_text = f"{mode_note(self.mode)}\n{user_text}"
        if self.undo_log.notes:
            user_text = "\n".join(self.undo_log.notes + [user_text])
            self.undo_log.notes = []
        self.messages.append({"role": "user", "content": user_text})
        self._turn_start = len(self.messages) - 1
        self._emit = emit
        last_calls: list[str] = []
        attempt = 0  # retries spent on the current step
        seen: set[str] = set()  # calls since the last Edit or Bash (after one, a call may rightly recur)
        try:
            for path in mentioned(user_text, self.root):  # @path: pinned as a Read step
                seen.add(self._pin(path, res, emit))
            while True:
                if cancel.is_set():
                    res.stop_reason = "cancelled"
                    break
                try:
                    out, stop = self._generate(emit, cancel, retry=attempt > 0)
                except ContextFull as e:
                    emit(Status(str(e)))
                    res.stop_reason = "context"
                    break
                msg, call, error = self._finish_reply(out, stop)
                if call is None and error is None:
                    res.answer = msg["content"]
                    res.stop_reason = {"stop": "done", "cancelled": "cancelled"}.get(stop, "max_tokens")
                    if res.stop_reason == "max_tokens":
                        emit(Status(f"reply cut at {self.max_tokens} tokens"))
                    break
                name, args = (call["name"], call["args"]) if call else ("?", {})
                key = json.dumps([name, args], sort_keys=True)
                why = ("a malformed call" if error is not None else
                       "a repeat of an earlier call" if key in seen else None)
                if why and attempt < self.retries and stop != "cancelled":
                    attempt = self._retry(attempt, why, res)
                    continue
                emit(ToolCall(name, args, res.steps + 1))
                last_calls = (last_calls + [key])[-3:]
                stop_after = None
                if error is not None:
                    result = error
                elif len(last_calls) == 3 and len(set(last_calls)) == 1:
                    result, stop_after = REPEATED, "repeat"
                else:
                    result, stop_after = self._run_call(name, args, approve, emit, cancel)
                if (stop_after is None and name in ("Read", "Grep", "Edit") and result.startswith("error:")
                        and attempt < self.retries and not cancel.is_set()):  # no effect on disk: resample
                    emit(ToolResult(name, args, result, res.steps + 1))
                    last_calls.pop()
                    attempt = self._retry(attempt, "a failed call", res)
                    continue
                attempt = 0
                changes = name in ("Edit", "Bash") and not result.startswith("error:")
                seen = (set() if changes else seen) | {key}
                res.steps += 1
                res.tool_calls.append({"name": name, "args": args, "result": result})
                emit(ToolResult(name, args, result, res.steps))
                self.messages.append({"role": "tool_result", "content": result})
                if stop_after is None and cancel.is_set():
                    stop_after = "cancelled"
                if stop_after is None and res.steps >= self.max_steps:
                    stop_after = "step_limit"
                if stop_after:
                    res.stop_reason = stop_after
                    emit(Status({
                        "repeat": "the same call three times in a row: stopped; your turn",
                        "step_limit": f"step limit ({self.max_steps} calls) reached; your turn",
                        "cancelled": "cancelled",
                        "rejected": "call rejected; your turn",
                    }[stop_after]))
                    break
            try:
                self._flush(open_reply=False)
            except ContextFull as e:  # keep going: the next turn will compact or say so again
                emit(Status(str(e)))
        finally:
            ck_id = None
            try:
                ended = self.undo_log.end()
            except Exception as e:  # noqa: BLE001 - the changes are made: say so, go on
                emit(Status(f"could not record this turn for /undo: {e}"))
                ended = None
            if ended:
                res.files_changed, ck_id, skipped = ended
                if skipped:  # untracked files too big, nested repos with too many files
                    emit(Status(f"/undo cannot restore {', '.join(skipped[:5])}"
                                f"{' and more' if len(skipped) > 5 else ''}: too big to snapshot"))
            self.meta["turns"].append({"user_index": self._turn_start, "steps": res.steps,
                                       "stop_reason": res.stop_reason,
                                       "files_changed": res.files_changed, "checkpoint": ck_id})
            self.meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            res.usage["seconds"] = time.perf_counter() - started
            self._save(emit)
        emit(TurnEnd(res.stop_reason, res.steps, res.retries))
        return res

    # ---- one call ----------------------------------------------------------------------------------
    def _pin(self, path: str, res: TurnResult, emit) -> str:
        """An @-mentioned file as a Read step in the conversation (agent/mentions.py): the call
        and its result, cut to the result's share; returns the call's key for the repeat check."""
        args = {"file_path": path}
        result = run_tool(self.root, "Read", {**args, "limit": self.read_limit}, allow_outside=False)
        result = fit_result("Read", result, self.tok, self.result_budget)
        res.steps += 1
        emit(ToolCall("Read", args, res.steps))
        self.messages += [{"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": args}},
                          {"role": "tool_result", "content": result}]
        res.tool_calls.append({"name": "Read", "args": args, "result": result})
        emit(ToolResult("Read", args, result, res.steps))
        return json.dumps(["Read", args], sort_keys=True)

    def _run_call(self, name, args, approve, emit, cancel):
        err = check_call(name, args)
        if err:
            return err, None
        d = self.policy.check(name, args)
        if d.action == "deny":
            return f"error: {d.reason}", None
        if d.action == "ask":
            d = dataclasses.replace(d, always=self.policy.always(name, args, store=False))
            answer = "no"
            if approve is not None:
                try:
                    answer = str(approve(name, args, d)).strip().lower()
                except (KeyboardInterrupt, EOFError):  # Ctrl-C / Ctrl-D at the prompt
                    answer = "cancelled"
                answer = {"y": "yes", "n": "no", "a": "always"}.get(answer, answer)
                if cancel.is_set():
                    answer = "cancelled"
                elif answer not in ("yes", "no", "always", "cancelled"):
                    answer = "no"
            rule = self.policy.always(name, args) if answer == "always" else ""
            if answer == "always" and not rule:  # nothing to remember (e.g. destructive): once
                answer = "yes"
            self.meta["approvals"].append({"turn": len(self.meta["turns"]), "name": name,
                                           "args": args, "reason": d.reason, "answer": answer,
                                           **({"rule": rule} if rule else {})})
            emit(Approval(name, args, d.action, d.reason, answer, rule))
            if answer == "no":
                return REJECTED, "rejected"
            if answer == "cancelled":  # not the user's verdict on the call: nothing ran
                return CANCELLED, "cancelled"
        if name in ("Edit", "Bash"):
            refused = self.undo_log.begin(self.messages[self._turn_start]["content"], self.meta["id"])
            if refused:
                if not self._said_no_snapshot:  # e.g. a read-only project: not on every call
                    emit(Status("could not snapshot the project for /undo, so the call was not run"))
                    self._said_no_snapshot = True
                return refused, None
        if name == "Read" and "limit" not in args:  # the default follows the context
            args = {**args, "limit": self.read_limit}
        result = run_tool(self.root, name, args, allow_outside=True, timeout=self.tool_timeout,
                          cancel=cancel, sandbox=self.sandbox)
        result = fit_result(name, result, self.tok, self.result_budget)
        if name in ("Edit", "Bash") and self.grounding is not None:
            self.grounding.refresh()  # the tree may have changed
        return result, None

    # ---- generation ------------------------------------------------------------------------------
    def _hook(self):
        import jax
        state = self.grammar.state(tools=MODE_TOOLS[self.mode], ground=self.grounding) \
            if self.constrain else None
        extra, full, dev, copy = self.extra_mask, self._full, self._device_masks, self._copy

        def allowed(out):
            t0 = time.perf_counter()
            m = state.allowed(out) if state is not None else full
            e = extra(out) if extra is not None else None
            row = None
            if e is not None:
                both = m & np.asarray(e, bool)
                m = both if both.any() else m  # never an all-False row
            elif copy is not None and (state is None or state.phase == CONTENT):
                row = copy.bias(out, m)  # prose and answers: a float row, mask included
            if row is not None:
                m = row
            elif e is None:  # a grammar mask seen before: hand the engine its device copy
                d = dev.get(id(m))
                if d is None:
                    if len(dev) >= 1024:  # anchors make a mask per token: bounded
                        dev.clear()
                    d = dev[id(m)] = (m, jax.device_put(m))  # keeps m alive, so its id stays its
                m = d[1]
            self.mask_time += time.perf_counter() - t0
            self.mask_calls += 1
            return m
        return allowed

    def _retry(self, attempt: int, why: str, res: TurnResult) -> int:
        """Take back the reply just made (its call is not kept) so the next one is resampled."""
        self.messages.pop()
        self._dirty = True  # the session holds the dropped reply: rebuilt at the next flush
        res.retries += 1
        self._emit(Status(f"{why}: resampling ({attempt + 1} of {self.retries})"))
        return attempt + 1

    def _generate(self, emit, cancel, retry: bool = False):
        """Open a reply and stream it. Returns (generated ids, "stop" | "length" | "cancelled").
        A retry samples at retry_temperature when the agent is greedy (greedy would repeat itself)."""
        self._flush(open_reply=True)
        if self.grounding is not None:
            for m in self.messages[min(self._grounded, len(self.messages)):]:
                self.grounding.add_text(m["content"])
            self._grounded = len(self.messages)
        budget = min(self.max_tokens, self.session.room() - 1)  # one slot for <|assistant_end|>
        if budget < 1:
            raise ContextFull("the context is full: no room left for a reply")
        seed = self.seed + self._n_gen
        self._n_gen += 1
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out, in_call, cancelled = [], False, False
        if self.copy_bias:  # the copy index follows the session (rebuilt when the session is)
            if self._copy is None or self._copy_session is not self.session:
                self._copy = CopyBias.for_tokenizer(self.tok, self.engine.cfg.vocab_size, self.copy_bias)
                self._copy_session, self._copy_seen = self.session, 0
            self._copy.extend(self.session.ids[self._copy_seen:])
            self._copy_seen = len(self.session.ids)
        temperature = self.temperature or (self.retry_temperature if retry else 0.0)
        t0 = time.perf_counter()
        for t in self.session.generate(max_tokens=budget, temperature=temperature,
                                       top_k=self.top_k, top_p=self.top_p, seed=seed,
                                       allowed=self._hook()):
            out.append(t)
            if t == self._call_start:
                in_call = True
                tail = dec.decode(b"", final=True)
                if tail:
                    emit(Text(tail))
            elif not in_call and not self.tok.is_special(t):
                piece = dec.decode(self.tok.id_to_bytes(t))
                if piece:
                    emit(Text(piece))
            if cancel.is_set() and t not in self._stops:
                cancelled = True
                break
        self._usage["generate_s"] += time.perf_counter() - t0
        self._usage["completion_tokens"] += len(out)
        if not in_call:
            tail = dec.decode(b"", final=True)
            if tail:
                emit(Text(tail))
        if self.grounding is not None:  # e.g. a project too large to ground: said once
            for note in self.grounding.notes[self._notes:]:
                emit(Status(note))
            self._notes = len(self.grounding.notes)
        if out and out[-1] in self._stops:
            return out, "stop"
        return out, "cancelled" if cancelled else "length"

    def _finish_reply(self, out, stop):
        """Turn generated ids into an assistant message, close it in the session.
        Returns (message, tool call or None, error result or None)."""
        ends_reply = bool(out) and out[-1] == self._a_end
        body = out[:-1] if ends_reply else list(out)
        call, error = None, None
        content_ids = body
        if self._call_start in body:
            content_ids = body[:body.index(self._call_start)]
            if stop != "cancelled":
                try:
                    call = self.tok.parse_tool_call(body)
                except ValueError as e:
                    error = f"error: {e}"
        msg = {"role": "assistant", "content": self.tok.decode(content_ids)}
        if call is not None:
            msg["tool_call"] = call
        self.messages.append(msg)
        # keep the sampled tokens when they are this message's render, up to the token split
        sampled = list(out) + ([] if ends_reply else [self._a_end])
        canonical = self._piece(msg)[1:]
        same = (self._bytes(sampled) == self._bytes(canonical)
                and [t for t in sampled if self.tok.is_special(t)]
                == [t for t in canonical if self.tok.is_special(t)])
        if same and not self._dirty:
            if not ends_reply:
                self._prefill([self._a_end])
            self._k = len(self.messages)
        else:
            self._dirty = True  # rebuilt from the render at the next flush
        return msg, call, error

    # ---- token bookkeeping ---------------------------------------------------------------------------
    def _bytes(self, ids) -> bytes:
        return b"".join(self.tok.id_to_bytes(t) for t in ids)

    def _piece(self, msg) -> list[int]:
        """The ids one (non-first) message renders to."""
        return self.tok.render_message(msg)[0]

    def _flush(self, open_reply: bool) -> None:
        """Bring the session up to the conversation (+ an open <|assistant_start|>), compacting
        the conversation when the new tokens plus the reply reserve do not fit."""
        extra = self.reserve if open_reply else 0
        tail = [self._a_start] if open_reply else []
        if not self._dirty and self._k > 0:
            new = [t for m in self.messages[self._k:] for t in self._piece(m)] + tail
            if len(new) + extra <= self.session.room():
                if new:
                    self._prefill(new)
                self._k = len(self.messages)
                return
        self._dirty = True  # messages may change below: only a full render is right now
        ids = self._fit(len(tail) + extra)
        self.session = self.engine.session()
        self._prefill(ids + tail)
        self._k, self._dirty = len(self.messages), False

    def _prefill(self, ids: list[int]) -> None:
        t0, before = time.perf_counter(), self.session.stats["prefilled_total"]
        self.session.append(ids)  # (it may also feed the last sampled token: counted)
        self._usage["prefill_s"] += time.perf_counter() - t0
        self._usage["prompt_tokens"] += self.session.stats["prefilled_total"] - before

    def _fit(self, extra: int) -> list[int]:
        """The render, compacted (agent/context.py) to fit with `extra` more slots; one status
        event says what was dropped, also when it still does not fit."""
        try:
            ids, self._turn_start, outputs, turns = fit(self.messages, self.tok, self.engine.max_len,
                                                        extra, self._turn_start)
        except ContextFull as e:
            ids, self._turn_start, outputs, turns = None, e.turn_start, e.outputs, e.turns
            full = e
        if outputs or turns:
            self._emit(Status(dropped_note(outputs, turns), outputs, turns))
        if ids is None:
            raise full
        return ids
