"""What a transcript shows about the model's replies beyond the verdict, for `evals agent`: the
backticked spans of its answers that occur nowhere it could have read them (invented names), and
the replies that loop.

Contracts. `invented_spans(messages, project)`: every `span` in a final answer (an assistant
message without a tool call; fenced blocks are left out, as agent/masks/prose.py leaves them free) that is not a substring of the request, a tool output, an earlier
tool call's arguments or a project file (`project`: path -> text, the tree as the run left it);
a `path:line` span counts as real when the file exists and has that line (a citation is checked,
not searched). `looping_replies(messages)`: assistant messages whose prose or any call argument
agent/masks/loop_guard.py would call a loop, the one definition the mask uses too.
`repeating_answers(messages)`: final answers that repeat a phrase, the audit the model issue
asks for: a unit of 1 to PHRASE_TOKENS words and punctuation marks, one word at least, three
times or more in a row (`repeated_phrase`). The mask's prose rule is the same three times in
bytes (units of 4 bytes or more), so under the guard it counts what slipped between the two. Words, not a
tokenizer's tokens: the same count for every model, a server's included.
"""
from __future__ import annotations

import json
import re

from agent.masks.loop_guard import PROSE, first_loop

CITATION = re.compile(r"((?:[\w.-]+/)*[\w.-]+):(\d+)")
PHRASE_TOKENS = 40  # the longest unit of a repeated phrase
_WORDS = re.compile(r"\w+|[^\w\s]")


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
        args = [str(v) for v in (m.get("tool_call") or {}).get("args", {}).values()]
        count += (first_loop(m["content"].encode("utf-8", "replace"), PROSE) is not None
                  or any(first_loop(a.encode("utf-8", "replace")) is not None for a in args))
    return count


def repeated_phrase(text: str) -> str | None:
    """The first phrase that `text` says three times or more in a row (module docstring), or None."""
    words = _WORDS.findall(text)
    for n in range(1, min(PHRASE_TOKENS, len(words) // 3) + 1):
        run = 0  # how many words in a row equal the one n before
        for i in range(n, len(words)):
            run = run + 1 if words[i] == words[i - n] else 0
            if run >= 2 * n and any(w[0].isalnum() or w[0] == "_" for w in words[i - n + 1:i + 1]):
                return " ".join(words[i - n + 1:i + 1])
    return None


def repeating_answers(messages: list[dict]) -> int:
    """How many final answers (assistant messages without a tool call) repeat a phrase."""
    return sum(repeated_phrase(m["content"]) is not None for m in messages
               if m["role"] == "assistant" and not m.get("tool_call"))
