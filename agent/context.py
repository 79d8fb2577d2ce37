"""Fitting a conversation into the model's context: old tool outputs first, then old turns.

When the rendered conversation plus the slots kept for a reply do not fit, the oldest tool
outputs are replaced by protocol.DROPPED (never the newest message, never one the marker would not
shorten), then the oldest whole turns are dropped (never the system prompt, which rides on the
first user message, and never the current request). Trade-off: dropping whole outputs is crude
but keeps every kept message byte-identical to what the model saw, so the KV cache stays valid up
to the first change; summarising would cost a model call per compaction.
"""
from __future__ import annotations

from nanocode.protocol import DROPPED


class ContextFull(Exception):
    """Even after dropping everything droppable the request does not fit the context. Carries
    what was dropped on the way (the messages stay dropped) and the request's new index."""

    def __init__(self, text: str, outputs: int = 0, turns: int = 0, turn_start: int = 0):
        super().__init__(text)
        self.outputs, self.turns, self.turn_start = outputs, turns, turn_start


def droppable(messages: list[dict], tok, end: int) -> list[int]:
    """Indices of the tool outputs in messages[:end] that the marker would shorten."""
    short = len(tok.encode(DROPPED))
    return [i for i, m in enumerate(messages[:end]) if m["role"] == "tool_result"
            and m["content"] != DROPPED and len(tok.encode(m["content"])) > short]


def fit(messages: list[dict], tok, limit: int, extra: int, turn_start: int):
    """Drop from `messages` in place until its render plus `extra` slots fit in `limit`.
    Returns (ids, turn_start after drops, outputs dropped, turns dropped); raises ContextFull."""
    outputs = turns = 0
    while True:
        ids = tok.render_conversation({"messages": messages})[0] if messages else []
        if len(ids) + extra <= limit:
            return ids, turn_start, outputs, turns
        idx = next(iter(droppable(messages, tok, len(messages) - 1)), None)
        if idx is not None:
            messages[idx] = {"role": "tool_result", "content": DROPPED}
            outputs += 1
            continue
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if len(users) >= 2 and users[1] <= turn_start:
            del messages[users[0]:users[1]]
            turn_start -= users[1] - users[0]
            turns += 1
            continue
        raise ContextFull(f"the request does not fit the context ({len(ids)} + {extra} tokens > "
                          f"{limit}) even after dropping old output and turns; shorten it or /clear",
                          outputs, turns, turn_start)


def dropped_note(outputs: int, turns: int) -> str:
    what = " and ".join(x for x in (
        f"{outputs} old tool output{'s' * (outputs != 1)}" if outputs else "",
        f"{turns} earlier turn{'s' * (turns != 1)}" if turns else "") if x)
    return f"context full: dropped {what}"
