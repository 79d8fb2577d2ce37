"""`nanocode -p PROMPT`: one request to completion, no questions asked.

The prompt is the argument, or stdin with `-p -` or a bare `-p` (`git diff | nanocode -p`).
Three output formats:
- text: stdout gets only the answer; progress (each tool call and a one-line summary of its
  result, status notes) goes to stderr.
- json: one JSON object on stdout at the end: answer, tool_calls [{name, args, result}],
  files_changed, steps, stop_reason, retries, usage, session, sandbox.
- stream-json: one JSON object per line on stdout as things happen: first an "init" line
  (`stream_start`: session, model, cwd, mode, tools, sandbox), then (`stream_event`) text
  deltas, tool calls and results, approvals, status notes, then one "result" line carrying
  the json format's fields, usage included). Nothing but the sandbox line goes to stderr.
The sandbox line (what contains Bash) is always the first stderr line. Text that came from the
model or a tool is escaped (agent/display.py: no control or bidi character reaches the
terminal); the JSON keeps every value exact, those characters written as JSON escapes.

Nobody is there to approve: a call the policy would ask about is rejected (the model reads
protocol.REJECTED; the turn ends, stop_reason "rejected") unless the mode allows it: `--mode
accept-edits` lets Edit run, `--yes`/`--mode auto` lets Edit and Bash run (destructive commands
are still rejected), and `--mode plan` denies Edit and Bash outright. Ctrl-C cancels the run.

Exit status (EXIT_CODES, by stop_reason): 0 the model answered; 3 a call needed an approval
nobody could give; 4 stopped before an answer (step limit, a repeated call, a reply cut at
--max-tokens or for repeating itself: "loop"); 5 the request did not fit the context; 6 the model
server failed (--base-url); 130 cancelled; 1 a crash, a --best-of pick that could not be
applied, or --best-of rollouts whose changes all edited the tests unasked or all fail them no
less than before (nothing applied); 2 bad usage.

`--best-of N` (run_best_of): N rollouts in copies of the project, the verifier's pick applied as
one undoable turn (agent/loop/best_of.py); progress per rollout on stderr, the winner's answer on stdout,
and in JSON a `best_of` object beside the winner's fields (every rollout's stop reason, changed
files, test verdict and score; pass_at_1 = rollout 0). Rollouts share the agent's model, policy
(re-rooted at the copy), sampling settings and conversation, so `-c --best-of N` continues it; the
winner's conversation, relocated to the project, is what the session saves. The exit status is
the winner's.
"""
from __future__ import annotations

import copy
import dataclasses
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from agent.display import CALL_MARK, RESULT_MARK, format_call, printable, printable_json, summarize
from agent.loop.best_of import BestOfError, BestOfOptions, best_of
from agent.loop.driver import Agent
from nanocode.protocol import REJECTED, Approval, Event, Status, StopReason, ToolCall, ToolResult

EXIT_CODES: dict[StopReason, int] = {
    "done": 0, "rejected": 3, "step_limit": 4, "repeat": 4, "max_tokens": 4, "loop": 4,
    "context": 5, "model_error": 6, "cancelled": 130}
OUTPUT_FORMATS = ("text", "json", "stream-json")


def on_event(ev: Event) -> None:
    """Progress on stderr: each call, a line of its result, approvals refused, status notes."""
    match ev:
        case ToolCall(name=name, args=args):
            line = f"{CALL_MARK}{format_call(name, args)}"
        case ToolResult(result=result) if result == REJECTED:  # there is no user to reject it
            line = f"{RESULT_MARK}rejected: nobody can approve it in headless mode"
        case ToolResult(result=result):
            line = f"{RESULT_MARK}{summarize(result)}"
        case Approval(answer="no", reason=reason):
            line = f"  (needs approval: {printable(reason)}; rejected in headless mode, see --mode)"
        case Status(text=text):
            line = f"[{printable(text)}]"
        case _:
            return
    print(line, file=sys.stderr, flush=True)


def stream_event(ev: Event) -> None:
    """One event as one JSON line on stdout: {"type": ev.kind, ...its fields}."""
    print(printable_json({"type": ev.kind, **dataclasses.asdict(ev)}), flush=True)


def stream_start(agent) -> None:
    """stream-json's first line, before anything runs: {"type": "init", session, model, cwd,
    mode, tools (those the mode offers, the MCP servers' once started), sandbox}, so a reader
    knows what it is talking to."""
    if agent.mcp is not None:
        agent.mcp.wait()
    tools = [t.name for t in agent.offered_tools()]
    print(printable_json({"type": "init", "session": agent.meta.get("id"), "model": agent.meta.get("model"),
                          "cwd": agent.root, "mode": agent.mode, "tools": tools,
                          "sandbox": agent.sandbox_status}), flush=True)


def read_prompt(prompt: str) -> str | None:
    """The -p argument, or all of stdin for "-"; None when it is empty (or stdin is a terminal
    with nothing typed)."""
    if prompt == "-":
        prompt = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    return prompt if prompt.strip() else None


def _with_sigint(cancel: threading.Event, fn):
    """fn() with Ctrl-C setting `cancel` instead of raising (main thread only)."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.getsignal(signal.SIGINT)
    if main:
        signal.signal(signal.SIGINT, lambda *a: cancel.set())
    try:
        return fn()
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def _print(res, output_format: str, **extra) -> None:
    """The answer on stdout, escaped (agent/display.printable), or the JSON object: its values
    exact, every character a terminal would act on written as a JSON escape."""
    if output_format == "json":
        print(printable_json({**res.to_dict(), **extra}))
    elif output_format == "stream-json":
        print(printable_json({"type": "result", **res.to_dict(), **extra}), flush=True)
    else:
        print(printable(res.answer))


def run_headless(agent, prompt: str, output_format: str = "text") -> int:
    cancel = threading.Event()
    _say_sandbox(agent)
    if output_format == "stream-json":
        stream_start(agent)
    events = stream_event if output_format == "stream-json" else on_event
    res = _with_sigint(cancel, lambda: agent.run_turn(prompt, approve=None, on_event=events,
                                                      cancel=cancel))
    _print(res, output_format, session=agent.meta.get("id"), sandbox=agent.sandbox_status)
    return EXIT_CODES[res.stop_reason]


def _say_sandbox(agent) -> None:
    """What contains the commands, on stderr before anything runs (loud when nothing does)."""
    no = agent.sandbox is None
    print(f"{'warning: ' if no else ''}{agent.sandbox_status}", file=sys.stderr)


def rollout_agent(agent, root, temperature: float, seed: int):
    """A fresh Agent like `agent` working in `root`: its sampler forked (same engine or server,
    its settings but temperature and seed), its policy and turn settings, its conversation, no
    undo snapshots (best_of takes its own)."""
    policy = replace(agent.policy, root=Path(root), session=list(agent.policy.session))
    sampler = agent.sampler.fork(str(root), replace(agent.sampler.settings, temperature=temperature, seed=seed))
    return Agent(sampler, root, policy, replace(agent.settings, snapshots=False),
                 agent.messages, copy.deepcopy(agent.meta))


def run_best_of(agent, prompt: str, n: int, output_format: str = "text",
                sample_temperature: float = 0.7, test_command: str | None = None) -> int:
    cancel = threading.Event()
    _say_sandbox(agent)
    if output_format == "stream-json":
        stream_start(agent)

    def run():
        settings = agent.sampler.settings
        opts = BestOfOptions(n, seed=settings.seed, temperature=settings.temperature,
                             sample_temperature=sample_temperature, test_command=test_command)
        return best_of(lambda root, t, s: rollout_agent(agent, root, t, s), agent.root, prompt, opts,
                       on_event=stream_event if output_format == "stream-json" else on_event,
                       cancel=cancel)
    try:
        res = _with_sigint(cancel, run)
    except BestOfError as e:
        print(f"error: {printable(e)}", file=sys.stderr)
        return 1
    if res.pick is not None:  # the session keeps the winner's conversation, as a plain run would
        agent.adopt(res.messages, res.meta)
        if agent.meta.get("turns"):
            agent.meta["turns"][-1].update(files_changed=res.applied, checkpoint=res.checkpoint,
                                           best_of={"n": n, "pick": res.pick})
        agent.conv.save(lambda ev: print(f"[{printable(ev.text)}]", file=sys.stderr))
    _print(res.result, output_format, session=agent.meta.get("id"), sandbox=agent.sandbox_status,
           best_of=res.to_dict())
    return 1 if res.kind in ("tampered", "failed") else EXIT_CODES[res.result.stop_reason]
