"""One assistant reply read off the engine as it is sampled: its prose streamed, its call parsed.

Both users of our engine read a reply this way: agent/samplers/engine.py (the agent's model; prose
goes out as Text events) and agent/serve.py (`nanocode serve`; prose goes out as content deltas).
They own the sampling (the mask hook, the budget, the seed) and hand over the token iterator of
nanocode/engine.Decoder.generate; this module turns the ids it yields into a StreamedReply.

Streaming. Prose pieces go to on_text as soon as their UTF-8 characters are whole
(nanocode/engine.decode_text); a character split across tokens comes out once, whole. Special
tokens are not prose and are not streamed. At <|tool_call_start|> the prose ends: what the
decoder held back is flushed and nothing after it is streamed (the call comes back parsed).

Cancelling. `cancel` (a threading.Event) is looked at after each token: when it is set, reading
stops before the next token, unless the token just read is a stop token (<|assistant_end|>,
<|tool_call_end|>): a reply that has ended is a whole reply, not a cancelled one. The engine's
Decoder stays consistent when its iterator is left early.

Why it stopped: "stop" (the last id is a stop token), "cancelled", or "length" (the iterator
ran out: the budget or the context). The loop guard is not seen here: a caller whose guard
ended the prose (agent/masks/loop_guard.py: ReplyLoops.ended) reports a "stop" as "loop" itself.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from nanocode.engine import STOP_TOKENS, decode_text

StreamStop = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class StreamedReply:
    """One reply as sampled.

    ids: every id read, the stop token included (what the Decoder's history gained).
    content: the prose: the text before <|tool_call_start|> when the reply has one, else the
        whole reply less a closing <|assistant_end|> (special tokens inside it show by name,
        as tokenizer.decode writes them; only a constrained reply is free of them).
    call: the parsed {"name", "args"} of a call that closed, else None.
    error: `error: ...` (the result the agent answers a malformed call with) when the reply holds
        a call that does not parse: malformed, or cut by the budget before <|tool_call_end|>;
        None otherwise. A cancelled call is neither parsed nor an error: call and error are None.
    stop: "stop" | "length" | "cancelled" (the module docstring)."""
    ids: tuple[int, ...]
    content: str
    call: dict | None
    error: str | None
    stop: StreamStop


def stream_reply(tok, tokens: Iterable[int], on_text: Callable[[str], None] | None = None,
                 cancel=None) -> StreamedReply:
    """Read one reply from `tokens` (ids as the engine samples them, after an open
    <|assistant_start|>), streaming its prose to on_text(piece) and stopping early when `cancel`
    (an Event, or None) is set. tok: the nanocode Tokenizer the ids come from."""
    specials = tok.special_ids
    call_start = specials["<|tool_call_start|>"]
    stops = {specials[name] for name in STOP_TOKENS}
    ids: list[int] = []
    cancelled = False

    def read():
        """The ids of `tokens`, each recorded, until the end or a cancel."""
        nonlocal cancelled
        for t in tokens:
            ids.append(t)
            yield t
            if cancel is not None and cancel.is_set() and t not in stops:
                cancelled = True
                return

    def prose(sampled):
        """The prose ids of `sampled`, up to the call's start (left unread after it)."""
        for t in sampled:
            if t == call_start:
                return
            if not tok.is_special(t):
                yield t

    sampled = read()
    for piece in decode_text(tok, prose(sampled)):
        if on_text is not None:
            on_text(piece)
    for _ in sampled:  # the call, if any: read, not streamed
        pass

    stop: StreamStop = "stop" if ids and ids[-1] in stops else "cancelled" if cancelled else "length"
    body = ids[:-1] if ids and ids[-1] == specials["<|assistant_end|>"] else ids
    content_ids, call, error = body, None, None
    if call_start in body:
        content_ids = body[:body.index(call_start)]
        if stop != "cancelled":
            try:
                call = tok.parse_tool_call(body)
            except ValueError as e:
                error = f"error: {e}"
    return StreamedReply(tuple(ids), tok.decode(content_ids), call, error, stop)
