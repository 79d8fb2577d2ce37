"""Can the model ground what the oracle writes? For each assistant step of a rollout, which of its
arguments (and backticked names in its prose) can be copied from what the model has seen so far:
the system prompt, the user's messages and earlier tool results. The assistant's own earlier words
do not count: a name the oracle wrote unprompted is a guess the model would learn to make.

What is checked, per kind:
- path: Read/Edit `file_path` and Grep `path` occur in the context (an Edit that creates a file
  takes its path from the user's words like any other).
- old_string: Edit's `old_string` occurs in a tool result once Read's `    N→` and Grep's
  `path:N:` / `path-N-` line prefixes are taken off.
- offset: Read's `offset` + 1 is a line number a Grep result showed for that file.
- pattern: every identifier of a Grep pattern (keywords aside) occurs in the context.
- prose: every backticked span of a thought or answer occurs in the context or is the command the
  same step runs (reported, not required: an answer may quote a parameter the user described).

`audit(rollouts)` counts grounded / total per kind and keeps the first misses as examples;
`train synth` prints the shares and tests/test_synth.py requires paths, old_strings and offsets at
100%.
"""
from __future__ import annotations

import re
from collections import Counter

KINDS = ("path", "old_string", "offset", "pattern", "prose")
_PREFIX = re.compile(r"^(?: *\d+→|[^\s:]+[:-]\d+[:-])", re.M)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
_KEYWORDS = {"def", "class", "from", "import"}  # Python words a pattern may add
_BACKTICKED = re.compile(r"`([^`\n]+)`")


def _seen_text(message: dict) -> str:
    text = message["content"]
    return text + "\n" + _PREFIX.sub("", text) if message["role"] == "tool_result" else text


def step_checks(args_name: str, args: dict, seen: str) -> list[tuple[str, bool, str]]:
    """(kind, grounded, value) for each checked argument of one call, against the context `seen`."""
    out = []
    path = args.get("file_path") or args.get("path")
    if path:
        out.append(("path", path in seen, path))
    if args_name == "Edit" and args.get("old_string"):
        out.append(("old_string", args["old_string"] in seen, args["old_string"]))
    if args_name == "Read" and args.get("offset"):
        n = int(args["offset"]) + 1
        shown = re.search(rf"^{re.escape(path)}[:-]{n}[:-]", seen, re.M) is not None
        out.append(("offset", shown, f"{path} offset {args['offset']}"))
    if args_name == "Grep":
        words = [w for w in _IDENT.findall(re.sub(r"\\.", " ", args.get("pattern", ""))) if w not in _KEYWORDS]
        out.append(("pattern", all(w in seen for w in words), args.get("pattern", "")))
    return out


def audit(rollouts, examples: int = 5) -> dict:
    """{"counts": {kind: [grounded, total]}, "misses": [(family?, kind, value), ...]} over rollouts
    (dicts with "messages", optionally "family")."""
    counts = {k: Counter() for k in KINDS}
    misses = []
    for ro in rollouts:
        seen = ""
        for m in ro["messages"]:
            if m["role"] != "assistant":
                seen += "\n" + _seen_text(m)
                continue
            call = m.get("tool_call")
            own = (call.get("args") or {}).get("command", "") if call else ""  # "running `ls`."
            checks = [("prose", span in seen or span == own, span) for span in _BACKTICKED.findall(m.get("content", ""))]
            if call:
                checks += step_checks(call["name"], call.get("args") or {}, seen)
            for kind, ok, value in checks:
                counts[kind]["grounded" if ok else "missed"] += 1
                if not ok and len(misses) < examples:
                    misses.append((ro.get("family", "?"), kind, value))
    return {"counts": {k: [c["grounded"], c["grounded"] + c["missed"]] for k, c in counts.items()},
            "misses": misses}


def shares_line(result: dict) -> str:
    """`path 100% (412/412), old_string ...`: the shares of grounded arguments, for logs."""
    parts = []
    for kind, (ok, total) in result["counts"].items():
        if total:
            parts.append(f"{kind} {100 * ok / total:.1f}% ({ok}/{total})")
    return "grounded: " + ", ".join(parts)
