"""What a transcript shows about the model's replies beyond the verdict, for `evals agent`: the
backticked spans of its answers that occur nowhere it could have read them (invented names), and
the replies that loop.

Contracts. `invented_spans(messages, project)`: every `span` in a final answer (an assistant
message without a tool call; fenced blocks are left out, as agent/masks/prose.py leaves them free) that is not a substring of the request, a tool output, an earlier
tool call's arguments or a project file (`project`: path -> text, the tree as the run left it);
a `path:line` span counts as real when the file exists and has that line (a citation is checked,
not searched). `looping_replies(messages)`: assistant messages whose prose or any call argument
agent/masks/loop_guard.py would call a loop, the one definition the mask uses too.
"""
from __future__ import annotations

import json
import re

from agent.masks.loop_guard import first_loop

CITATION = re.compile(r"((?:[\w.-]+/)*[\w.-]+):(\d+)")


def backticked_spans(text: str) -> list[str]:
    """The closed `spans` of prose read left to right as agent/masks/prose.py reads them: three
    backticks outside a span open a fenced block (free text) up to the next three; one opens a
    span up to the next backtick."""
    spans, i = [], 0
    while (i := text.find("`", i)) >= 0:
        if text.startswith("```", i):
            end = text.find("```", i + 3)
            i = len(text) if end < 0 else end + 3
            continue
        end = text.find("`", i + 1)
        if end < 0:
            break
        spans.append(text[i + 1:end])
        i = end + 1
    return spans


def _citation_ok(span: str, project: dict[str, str]) -> bool:
    m = CITATION.fullmatch(span.strip())
    if m is None:
        return False
    text = project.get(m.group(1).removeprefix("./"))
    return text is not None and 1 <= int(m.group(2)) <= text.count("\n") + (not text.endswith("\n"))


def invented_spans(messages: list[dict], project: dict[str, str]) -> list[str]:
    """The answers' backticked spans found nowhere the model could read them (module docstring)."""
    seen = [m["content"] for m in messages if m["role"] in ("system", "user", "tool_result")]
    seen += [json.dumps(m["tool_call"]["args"], ensure_ascii=False) + "\n" + "\n".join(
        str(v) for v in m["tool_call"]["args"].values()) for m in messages if m.get("tool_call")]
    corpus = "\n".join(seen + list(project.values()) + list(project))
    answers = [m["content"] for m in messages if m["role"] == "assistant" and not m.get("tool_call")]
    return [s for a in answers for s in backticked_spans(a)
            if s.strip() and s not in corpus and not _citation_ok(s, project)]


def looping_replies(messages: list[dict]) -> int:
    """How many assistant messages loop in their prose or in a call argument."""
    count = 0
    for m in messages:
        if m["role"] != "assistant":
            continue
        parts = [m["content"]] + [str(v) for v in (m.get("tool_call") or {}).get("args", {}).values()]
        count += any(first_loop(p.encode("utf-8", "replace")) is not None for p in parts)
    return count
