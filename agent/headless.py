"""`nanocode -p PROMPT`: one request to completion, no questions asked.

stdout gets only the answer (text) or one JSON object (`--output-format json`: answer,
tool_calls [{name, args, result}], files_changed, steps, stop_reason, session); progress (each
tool call and a one-line summary of its result, status notes) goes to stderr. Nobody is there to
approve: a call the policy would ask about is rejected (`rejected by user`, which ends the turn,
stop_reason "rejected") unless the mode allows it: `--mode accept-edits` lets Edit run,
`--yes`/`--mode auto` lets Edit and Bash run (destructive commands are still rejected), and
`--mode plan` denies Edit and Bash outright. Ctrl-C cancels the run (stop_reason "cancelled").
Exit status 0 when the loop ran (whatever its stop_reason), 1 if it crashed.
"""
from __future__ import annotations

import json
import signal
import sys
import threading


def summarize(result: str, width: int = 100) -> str:
    lines = result.splitlines() or [""]
    first = lines[0] if len(lines[0]) <= width else lines[0][:width] + "..."
    return first + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


def format_call(name, args, width: int = 100) -> str:
    parts = []
    for k, v in args.items():
        text = json.dumps(v, ensure_ascii=False) if isinstance(v, str) else str(v)
        parts.append(f"{k}={text if len(text) <= 60 else text[:57] + '...'}")
    out = f"{name}({', '.join(parts)})"
    return out if len(out) <= width else out[:width] + "..."


def run_headless(agent, prompt: str, output_format: str = "text") -> int:
    cancel = threading.Event()

    def on_event(ev):
        if ev.kind == "tool_call":
            print(f"> {format_call(ev.name, ev.args)}", file=sys.stderr, flush=True)
        elif ev.kind == "tool_result":
            print(f"  {summarize(ev.result)}", file=sys.stderr, flush=True)
        elif ev.kind == "approval" and ev.answer == "no":
            print(f"  (needs approval: {ev.reason}; rejected in headless mode, see --mode)",
                  file=sys.stderr, flush=True)
        elif ev.kind == "status":
            print(f"[{ev.text}]", file=sys.stderr, flush=True)

    old = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda *a: cancel.set())
    try:
        res = agent.run_turn(prompt, approve=None, on_event=on_event, cancel=cancel)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, old)
    if output_format == "json":
        print(json.dumps({**res.to_dict(), "session": agent.meta.get("id")}, ensure_ascii=False))
    else:
        print(res.answer)
    return 0
