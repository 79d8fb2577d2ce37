"""The reply streamer (agent/samplers/reply_stream.py) on its own: ids built with a real tiny tokenizer
(tok.encode, tok.encode_tool_call) fed as the engine's iterator would yield them. Prose streams in
whole characters (a character split across tokens comes out once), nothing after the call's start
is streamed, a call is parsed, a cut or malformed call is an `error:`, and a cancel stops reading
before the next token unless the token read was a stop."""
import threading

import pytest

from agent.samplers.reply_stream import stream_reply
from tiny_models import tiny_tokenizer

TEXTS = ["let me look at the file first.\n" * 20, "def f(x):\n    return x\n" * 20]
PROSE = "héllo → wörld 🙂 done"  # none of these characters is in TEXTS: one token per byte
CALL = {"name": "Read", "args": {"file_path": "a.py", "offset": 3}}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 320)


def special(tok, name):
    return tok.special_ids[name]


def read(tok, ids, cancel=None, cancel_at=None):
    """stream_reply over `ids`; cancel is set while the token at index cancel_at is handed out.
    Returns (reply, the pieces streamed, how many ids were pulled from the iterator)."""
    pulled, pieces = [], []

    def tokens():
        for k, t in enumerate(ids):
            pulled.append(t)
            if k == cancel_at:
                cancel.set()
            yield t
    reply = stream_reply(tok, tokens(), pieces.append, cancel)
    return reply, pieces, len(pulled)


def test_prose_streams_whole_characters(tok):
    ids = tok.encode(PROSE)
    assert any(_cut(tok.id_to_bytes(t)) for t in ids)  # some character is split across tokens
    reply, pieces, _ = read(tok, ids + [special(tok, "<|assistant_end|>")])
    assert "".join(pieces) == PROSE and "\ufffd" not in "".join(pieces)
    assert "→" in pieces and "🙂" in pieces  # a split character comes out once, whole
    assert reply.content == PROSE and reply.call is None and reply.error is None
    assert reply.stop == "stop" and reply.ids == tuple(ids) + (special(tok, "<|assistant_end|>"),)


def test_a_reply_cut_by_the_budget(tok):
    ids = tok.encode(PROSE)
    reply, pieces, _ = read(tok, ids)
    assert reply.stop == "length" and reply.content == PROSE == "".join(pieces)


def test_a_call_is_parsed_not_streamed(tok):
    prose = tok.encode("let me look.")
    call = tok.encode_tool_call(CALL)
    reply, pieces, _ = read(tok, prose + call)
    assert "".join(pieces) == "let me look." == reply.content  # nothing after the call's start
    assert reply.call == CALL and reply.error is None and reply.stop == "stop"
    assert reply.ids == tuple(prose + call)


def test_a_character_cut_at_the_call_is_flushed_there(tok):
    """Prose ending inside a character: what the decoder held back comes out at the call's start
    (as U+FFFD, as tokenizer.decode writes it), before the call."""
    prose = tok.encode("ok é")[:-1]  # the first byte of é only
    reply, pieces, _ = read(tok, prose + tok.encode_tool_call(CALL))
    assert "".join(pieces) == tok.decode(prose) == reply.content and pieces[-1].endswith("\ufffd")
    assert reply.call == CALL


def test_a_cut_call_and_a_malformed_call_are_errors(tok):
    prose = tok.encode("let me look.")
    cut = tok.encode_tool_call(CALL)[:-2]  # the budget ran out inside the call
    reply, pieces, _ = read(tok, prose + cut)
    assert reply.stop == "length" and reply.call is None and reply.content == "let me look."
    assert reply.error.startswith("error: malformed tool call: no <|tool_call_end|>")
    empty = [special(tok, "<|tool_call_start|>"), special(tok, "<|tool_call_end|>")]
    reply, pieces, _ = read(tok, prose + empty)
    assert reply.stop == "stop" and reply.call is None and "no tool name" in reply.error
    assert "".join(pieces) == "let me look."


def test_cancel_stops_before_the_next_token(tok):
    ids = tok.encode(PROSE) + [special(tok, "<|assistant_end|>")]
    reply, pieces, pulled = read(tok, ids, threading.Event(), cancel_at=4)
    assert pulled == 5 and reply.ids == tuple(ids[:5]) and reply.stop == "cancelled"
    assert "".join(pieces) == tok.decode(ids[:5]) == reply.content


def test_cancel_inside_a_call_parses_nothing(tok):
    prose = tok.encode("let me look.")
    call = tok.encode_tool_call(CALL)
    for at in (len(prose), len(prose) + 2):  # at the call's start, inside it
        reply, pieces, pulled = read(tok, prose + call, threading.Event(), cancel_at=at)
        assert pulled == at + 1 and reply.stop == "cancelled"
        assert reply.call is None and reply.error is None
        assert reply.content == "let me look." == "".join(pieces)


def test_a_cancel_at_a_stop_token_keeps_the_whole_reply(tok):
    prose = tok.encode("let me look.")
    call = tok.encode_tool_call(CALL)
    reply, _, _ = read(tok, prose + call, threading.Event(), cancel_at=len(prose + call) - 1)
    assert reply.stop == "stop" and reply.call == CALL
    end = [special(tok, "<|assistant_end|>")]
    reply, _, _ = read(tok, prose + end, threading.Event(), cancel_at=len(prose))
    assert reply.stop == "stop" and reply.content == "let me look."


def _cut(data: bytes) -> bool:
    """Whether these bytes end or start inside a UTF-8 character."""
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True
