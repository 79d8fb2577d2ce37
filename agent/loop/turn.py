"""One request's turn of an Agent (agent/loop/driver.py): open it with the user's message, pin
the @-mentioned files, then step (a reply and, for a call, its result) until a step says why the
turn stops; bring the model up to the closed conversation; record the turn for /undo and save it.

A call is checked, judged by the policy (asking through `approve` when it says ask), snapshotted
for /undo when it changes files, run on exactly what the policy judged, and its result cut to its
share of the context. CallRules decide when a reply is taken back and resampled (a malformed or
failed call within the retry budget). A turn also ends on: the same call three times in a row,
`max_steps` calls, `cancel`, a reply cut by `max_tokens` or for looping, a request that does not
fit the context, a model server that fails. A turn whose request is a question makes an Edit that
only the mode would allow ask (headless: an `error:`, resampled), so the model answers instead.
"""
from __future__ import annotations

import threading
import time

from agent.loop.approval import ask
from agent.loop.call_rules import CallRules, call_key
from agent.loop.context import ContextFull, fit_result
from agent.loop.mentions import mentioned
from agent.loop.request_kind import is_question
from agent.samplers.sampler import Reply, SamplerError
from nanocode.protocol import (
    CANCELLED, MODE_TOOLS, REJECTED, REPEATED, TOOLS, Approval, Status, ToolCall, ToolResult, TurnEnd,
    TurnResult, check_call, mode_note)
from tools.dispatch import run_tool
from tools.permissions import QUESTION_EDIT

STOP_NOTES = {"repeat": "the same call three times in a row: stopped; your turn",
              "cancelled": "cancelled",
              "loop": "reply stopped: it was repeating itself"}
REPLY_STOPS = {"stop": "done", "cancelled": "cancelled", "loop": "loop", "length": "max_tokens"}


class Turn:
    """One turn of `agent`: approve(name, args, decision) answers what the policy asks (None:
    nobody to ask, so an ask is a no), emit gets each event, cancel stops it between tokens and
    calls. `res` is the TurnResult it fills."""

    def __init__(self, agent, approve, on_event, cancel: threading.Event | None):
        self.agent, self.approve = agent, approve
        self.emit = on_event or (lambda event: None)
        self.cancel = cancel or threading.Event()
        self.res = TurnResult()
        self.rules = CallRules(agent.settings.retries)

    def run(self, user_text: str) -> TurnResult:
        a, res, emit = self.agent, self.res, self.emit
        started = time.perf_counter()
        self.open(user_text)
        try:
            for path in mentioned(user_text, a.root):  # @path: pinned as a Read step
                self.rules.kept("Read", self.pin(path), "")
            stop = None
            while stop is None:
                stop = "cancelled" if self.cancel.is_set() else self.step()
            res.stop_reason = stop
            try:
                a.sampler.sync(a.conv, emit, res.usage)
            except ContextFull as e:  # keep going: the next turn will compact or say so again
                emit(Status(str(e)))
        finally:
            self.close(started)
        a.hooks.stop(res.stop_reason, a.meta["id"], emit)
        emit(TurnEnd(res.stop_reason, res.steps, res.retries))
        return res

    def open(self, user_text: str) -> None:
        """The user's message, after the notes it carries: the system prompt for a new
        conversation, a mode switch, what /undo restored."""
        a = self.agent
        raw_text = user_text  # the request as the user wrote it (agent/loop/request_kind.py)
        for note in a.take_startup_notes():
            self.emit(Status(note))
        if not a.messages:
            a.meta["mode"] = a.mode
            a.messages.append({"role": "system", "content": a.new_system_prompt()})
        told = a.meta.get("mode", "ask")  # the mode the model knows of before this request
        if MODE_TOOLS[told] != MODE_TOOLS[a.mode]:
            a.meta["mode"] = a.mode
            user_text = f"{mode_note(a.mode)}\n{user_text}"
        notes, a.undo_log.notes = a.undo_log.notes, []
        if notes:
            user_text = "\n".join(notes + [user_text])
        a.policy.question = a.settings.question_guard and is_question(raw_text)
        a.conv.open_turn(user_text, raw_text, notes, told)

    def step(self):
        """One reply and, for a call, its result: the turn's stop reason, or None to go on."""
        a, res, emit, rules = self.agent, self.res, self.emit, self.rules
        offered = a.offered_tools()
        rules.tools = {**TOOLS, **a.policy.external}
        try:
            reply = a.sampler.reply(a.conv, offered, emit, self.cancel, res.usage, retry=rules.attempt > 0)
        except ContextFull as e:
            emit(Status(str(e)))
            return "context"
        except SamplerError as e:
            emit(Status(str(e)))
            return "model_error"
        if reply.call is None and reply.error is None:
            return self.answer(reply)
        name, args = (reply.call["name"], reply.call["args"]) if reply.call else ("?", {})
        key = call_key(name, args)
        why = rules.take_back(key, reply.error is not None, reply.stop == "cancelled")
        if why:
            return self.take_back(why)
        emit(ToolCall(name, args, res.steps + 1))
        three_in_a_row = rules.made(key)
        stop = None
        if reply.error is not None:
            result = reply.error
        elif three_in_a_row:
            result, stop = REPEATED, "repeat"
        else:
            result, stop = self.run_call(name, args)
        if stop is None and (why := rules.take_back_failure(name, result, self.cancel.is_set())):
            emit(ToolResult(name, args, result, res.steps + 1))
            return self.take_back(why)
        rules.kept(name, key, result)
        res.steps += 1
        res.tool_calls.append({"name": name, "args": args, "result": result})
        emit(ToolResult(name, args, result, res.steps))
        a.messages.append({"role": "tool_result", "content": result})
        if stop is None and self.cancel.is_set():
            stop = "cancelled"
        if stop is None and res.steps >= a.settings.max_steps:
            stop = "step_limit"
        if stop and stop != "rejected":  # a rejection is said once, by the call's result
            emit(Status(STOP_NOTES.get(stop) or f"step limit ({a.settings.max_steps} calls) reached; your turn"))
        return stop

    def answer(self, reply: Reply):
        """A reply without a call ends the turn."""
        self.res.answer = reply.message["content"]
        stop = REPLY_STOPS[reply.stop]
        if stop == "max_tokens":
            self.emit(Status(f"reply cut at {self.agent.sampler.settings.max_tokens} tokens"))
        elif stop == "loop":
            self.emit(Status(STOP_NOTES["loop"]))
        return stop

    def take_back(self, why: str) -> None:
        """Take back the reply just made (its call is not kept) so the next one is resampled."""
        a = self.agent
        a.messages.pop()
        a.sampler.invalidate()  # the model saw the dropped reply: rebuilt before the next one
        self.res.retries += 1
        self.emit(Status(f"{why}: resampling ({self.rules.resampled()} of {a.settings.retries})", took_back=True))

    def close(self, started: float) -> None:
        """Record the turn's changes for /undo (saying what it could not snapshot) and save it."""
        a, res, emit = self.agent, self.res, self.emit
        turn_id = None
        try:
            ended = a.undo_log.end()
        except Exception as e:  # noqa: BLE001 - the changes are made: say so, go on
            emit(Status(f"could not record this turn for /undo: {e}"))
            ended = None
        if ended is not None:
            res.files_changed, turn_id = list(ended.changed), ended.id
            if ended.skipped:  # untracked files too big, nested repos with too many files
                emit(Status(f"/undo cannot restore {', '.join(ended.skipped[:5])}"
                            f"{' and more' if len(ended.skipped) > 5 else ''}: too big to snapshot"))
        a.conv.record_turn(res.steps, res.stop_reason, res.files_changed, turn_id)
        res.usage["seconds"] = time.perf_counter() - started
        a.count(res.usage, turns=1)
        a.conv.save(emit)

    def pin(self, path: str) -> str:
        """An @-mentioned file as a Read step in the conversation (agent/loop/mentions.py): the call
        and its result, cut to the result's share; returns the call's key for the repeat check."""
        a, res = self.agent, self.res
        args = {"file_path": path}
        result = run_tool(a.root, "Read", {**args, "limit": a.read_limit}, allow_outside=False)
        result = fit_result("Read", result, a.sampler.count, a.result_budget)
        res.steps += 1
        self.emit(ToolCall("Read", args, res.steps))
        a.messages.extend([
            {"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": args}},
            {"role": "tool_result", "content": result}])
        res.tool_calls.append({"name": "Read", "args": args, "result": result})
        self.emit(ToolResult("Read", args, result, res.steps))
        return call_key("Read", args)

    def run_call(self, name, args):
        """Check, ask, snapshot, run: (result, the stop reason it causes or None)."""
        a, emit, cancel = self.agent, self.emit, self.cancel
        table = {**TOOLS, **a.policy.external}
        err = check_call(name, args, table)
        if err:
            return err, None
        d = a.policy.check(name, args)
        if d.action == "deny":
            return f"error: {d.reason}", None
        if d.reason == QUESTION_EDIT and self.approve is None:  # headless: nobody to ask, so the model answers
            return "error: the request is a question: answer it; edit only when the user asks for a change", None
        blocked = a.hooks.before(name, args, a.meta["id"], emit, cancel)  # PreToolUse: before asking
        if blocked:
            return blocked
        if d.action == "ask":
            answer, rule = ask(a.policy, d, name, args, self.approve, cancel)  # agent/loop/approval.py
            a.meta["approvals"].append({"turn": len(a.meta["turns"]), "name": name,
                                        "args": args, "reason": d.reason, "answer": answer,
                                        **({"rule": rule} if rule else {})})
            emit(Approval(name, args, d.action, d.reason, answer, rule))
            if answer == "no":
                return REJECTED, "rejected"
            if answer == "cancelled":  # not the user's verdict on the call: nothing ran
                return CANCELLED, "cancelled"
        changes = table[name].changes_files
        if changes:
            refused = a.undo_log.begin(a.messages[a.conv.turn_start]["content"], a.meta["id"])
            if refused:
                a.say_no_snapshot(emit)
                return refused, None
        if name == "Read" and "limit" not in args:  # the default follows the context
            args = {**args, "limit": a.read_limit}
        # check = use: a Read or Grep judged inside the project runs without allow_outside (its
        # descriptor-level open refuses what became outside), one judged outside reads only
        # there, and both refuse a file other than the one judged (tools/permissions.Decision)
        if name in a.policy.external:  # an MCP server's (agent/mcp_hub.py)
            result = a.mcp.call(name, args, cancel)
        else:
            result = run_tool(a.root, name, args, allow_outside=d.inside is False, same_as=d.identity,
                              timeout=a.settings.tool_timeout, cancel=cancel, sandbox=a.sandbox,
                              env_names=tuple(a.policy.env))
        result = fit_result(name, result, a.sampler.count, a.result_budget)
        result = a.hooks.after(name, args, result, a.meta["id"], emit, cancel)  # PostToolUse
        if changes:
            a.sampler.tree_changed()  # grounding lists the project again
        return result, None
