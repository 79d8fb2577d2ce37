"""Fitting a conversation into the model's context: each new piece to its share, then old tool
outputs, then old turns; /compact leaves a one-line digest of each output it drops.

Text is measured by a `count(text) -> tokens` function (the sampler's: exact for our engine, an
estimate for a remote server). Shares (of the model's max_len, so a longer-context model sees more): one tool result gets
`result_budget` tokens (half of what the reply reserve leaves), the project memory file
`memory_budget` (an eighth). `fit_result` cuts a longer result on line boundaries and says where
and how to see the rest (Read: the offset to go on from; Bash: head and tail kept, how to page it;
Grep: narrow it); `fit_memory` keeps the memory file's first lines. `read_limit` is the default
number of lines a Read without `limit` asks for: about what fits its share.

When the rendered conversation plus the slots kept for a reply do not fit, the oldest tool
outputs are replaced by protocol.DROPPED (never the newest message, never one the marker would not
shorten), then the oldest whole turns are dropped (never the system prompt, which rides on the
first user message, and never the current request). Trade-off: dropping whole outputs is crude
but keeps every kept message byte-identical to what the model saw, so the KV cache stays valid up
to the first change; summarising would cost a model call per compaction.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from nanocode.protocol import DROPPED, Status

TOKENS_PER_READ_LINE = 10  # a numbered line of code, roughly, at a 4k vocab (read_limit)


class ContextFull(Exception):
    """Even after dropping everything droppable the request does not fit the context. What was
    dropped on the way stays dropped (and was said in a Status event)."""


def droppable(messages: list[dict], count, end: int) -> list[int]:
    """Indices of the tool outputs in messages[:end] that the marker would shorten."""
    short = count(DROPPED)
    return [i for i, m in enumerate(messages[:end]) if m["role"] == "tool_result"
            and not m["content"].startswith(DROPPED) and count(m["content"]) > short]


def drop_oldest(conv, count) -> str | None:
    """Drop one thing from conv.messages in place: the oldest tool output the marker shortens
    (never the newest message), else the oldest whole turn before the current request
    (conv.turn_start follows). Returns what: "output" | "turn", or None when nothing is left."""
    messages = conv.messages
    idx = next(iter(droppable(messages, count, len(messages) - 1)), None)
    if idx is not None:
        conv.shorten(idx, DROPPED)
        return "output"
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if len(users) >= 2 and users[1] <= conv.turn_start:
        conv.drop_turn(users[0], users[1])
        return "turn"
    return None


@dataclass
class Dropped:
    """What a fit dropped: old tool outputs and old turns."""
    outputs: int = 0
    turns: int = 0

    def add(self, what: str) -> None:
        if what == "output":
            self.outputs += 1
        else:
            self.turns += 1

    def say(self, emit) -> None:
        """One Status event saying what was dropped (none when nothing was)."""
        if self.outputs or self.turns:
            what = " and ".join(x for x in (
                f"{self.outputs} old tool output{'s' * (self.outputs != 1)}" if self.outputs else "",
                f"{self.turns} earlier turn{'s' * (self.turns != 1)}" if self.turns else "") if x)
            emit(Status(f"context full: dropped {what}", self.outputs, self.turns))


def fit(conv, count, size, limit: int, emit, strict: bool = True) -> Dropped:
    """Drop from conv.messages in place (drop_oldest) until size(messages) <= limit; one Status
    event says what was dropped. When nothing is left to drop: strict raises ContextFull, else
    the conversation goes as it is (a server counts for itself)."""
    dropped = Dropped()
    try:
        while (n := size(conv.messages)) > limit:
            what = drop_oldest(conv, count)
            if what is None:
                if strict:
                    raise ContextFull(f"the request does not fit the context ({n} tokens > {limit}) "
                                      "even after dropping old output and turns; shorten it or /clear")
                break
            dropped.add(what)
    finally:
        dropped.say(emit)
    return dropped


DEFINES = re.compile(r"^ *\d+→\s*(?:async\s+)?(?:def|class)\s+(\w+)", re.M)


def digest(call: dict | None, result: str) -> str:
    """What /compact leaves of an old tool output: the DROPPED marker and one line on what it
    held (a Read's size and the names it defines, a command's last line ...), so the model can
    still name what it saw. No model call: the line is read off the output."""
    if not isinstance(call, dict) or not isinstance(call.get("args"), dict):
        return DROPPED
    name, args, lines = call.get("name"), call["args"], result.split("\n")
    if name == "Read":
        names = list(dict.fromkeys(DEFINES.findall(result)))[:8]
        what = f"Read {args.get('file_path')}: {len(lines)} lines" + \
            (f", defines {', '.join(names)}" if names else "")
    elif name == "Grep":
        what = f"Grep {args.get('pattern')!r}: " + \
            ("no matches" if result.startswith("no matches") else f"{len(lines)} lines")
    elif name == "Bash":
        command = (str(args.get("command", "")).splitlines() or [""])[0][:60]
        what = f"Bash {command}: {len(lines)} lines, the last: {lines[-1].strip()[:80]}"
    elif name == "Edit":
        what = f"Edit {args.get('file_path')}: " + ("failed" if result.startswith("error:") else "applied")
    else:
        return DROPPED
    return f"{DROPPED} {what}"


def result_budget(max_len: int, reserve: int) -> int:
    """Tokens one tool result may take: half of what the reply reserve leaves (64 at least)."""
    return max(64, (max_len - reserve) // 2)


def memory_budget(max_len: int) -> int:
    """Tokens the memory file (NANOCODE.md / AGENTS.md) may take in the system prompt."""
    return max(32, max_len // 8)


def read_limit(budget: int) -> int:
    """The default `limit` of a Read: about the lines that fit `budget` tokens (20 to 2,000)."""
    return max(20, min(2000, budget // TOKENS_PER_READ_LINE))


def _head(lines: list[str], count, budget: int) -> int:
    """How many leading lines fit in `budget` tokens (each line costs its tokens plus one)."""
    used = 0
    for i, line in enumerate(lines):
        used += count(line) + 1
        if used > budget:
            return i
    return len(lines)


def fit_result(name: str, result: str, count, budget: int) -> str:
    """`result` when it fits `budget` tokens, else its first lines (Bash: first and last, where
    errors are) with a line saying what was cut and how to see it; never over `budget`."""
    n = count(result)
    if n <= budget:
        return result
    lines = result.split("\n")
    if name == "Bash":  # a third of the room for the head, the rest for the tail
        tail = _head(lines[::-1], count, budget * 2 // 3)
        head = _head(lines[:len(lines) - tail], count, budget // 3)
    else:
        head, tail = _head(lines, count, budget), 0

    def compose(head: int, tail: int) -> str:
        rest = len(lines) - head - tail
        if head + tail == 0:  # one huge line: cut by characters
            return f"{result[:budget]}\n[... cut to fit the context ({n:,} tokens)]"
        if name == "Bash":
            note = (f"[... {rest} lines cut to fit the context ({n:,} tokens); page the output "
                    "with `| head -n N`, `| tail -n N`, or `> out.txt` and Read it]")
            return "\n".join(lines[:head] + [note] + lines[len(lines) - tail:])
        if name == "Read":
            m = re.match(r" *(\d+)→", lines[head - 1])
            go_on = f"Read it with offset={m.group(1)} to see more" if m else "Read on with offset"
            return "\n".join(lines[:head] + [f"[cut to fit the context: {rest} more lines; {go_on}]"])
        how = "narrow the pattern or the path" if name == "Grep" else "ask for less"
        return "\n".join(lines[:head] + [f"[... {rest} more lines cut to fit the context; {how}]"])

    out = compose(head, tail)
    while count(out) > budget and head + tail > 0:  # the note's tokens: shrink to fit
        head, tail = head * 9 // 10, tail * 9 // 10
        out = compose(head, tail)
    while count(out) > budget:  # characters of the one-line form
        result = result[:len(result) * 9 // 10]
        out = compose(0, 0)
    return out


def fit_memory(memory: tuple[str, str] | None, count, budget: int) -> tuple[str, str] | None:
    """The memory file's (name, text) cut to its first lines that fit `budget` tokens."""
    if memory is None or count(memory[1]) <= budget:
        return memory
    name, text = memory
    lines = text.split("\n")
    keep = _head(lines, count, budget)
    while True:
        cut = "\n".join(lines[:keep] + [f"[... {name} cut to fit the context: /memory shows it all]"])
        if keep == 0 or count(cut) <= budget:
            return name, cut
        keep -= 1


def compact(conv, sampler, usage: dict, keep: int = 1) -> int:
    """/compact: replace every tool output of the conversation but the newest `keep` by the
    DROPPED marker and a one-line digest of it (what a full context does by itself, oldest first;
    the system prompt and the requests are never touched); returns the tokens freed. Trade-off:
    the sampler is brought up to the shorter conversation right away (one prefill of what is
    left, added to `usage`, a TurnResult's usage dict) so the context count is true at once;
    call it between turns, not during one."""
    messages, count, quiet = conv.messages, sampler.count, (lambda event: None)
    olds = droppable(messages, count, len(messages))
    drop = olds[:max(0, len(olds) - keep)]
    if not drop:
        return 0
    sampler.sync(conv, quiet, usage)
    before = sampler.context_used(messages)
    for i in drop:  # the marker and a line on what the output held
        short = digest(messages[i - 1].get("tool_call"), messages[i]["content"])
        if count(short) >= count(messages[i]["content"]):
            short = DROPPED
        conv.shorten(i, short)
    sampler.invalidate()
    try:
        sampler.sync(conv, quiet, usage)
    except ContextFull:  # still too long (an oversized request): the next turn says so
        pass
    return before - sampler.context_used(messages)
