"""The OpenAI wire format (agent/samplers/openai_wire.py) both ways: our conversation -> to_openai ->
to_conversation comes back the same, but for the two cases the module says cannot (a tool_result
that answers no call; a call with no result yet); a call sent out (openai_call, openai_message,
to_openai) reads back through schema_args to the same arguments; the tool schemas list exactly
protocol.TOOLS' arguments; a reply streamed as `nanocode serve` writes it reads back, through
the reader agent/samplers/remote.py uses, to the same content, call, finish reason and usage."""
import json

import pytest

from agent.samplers.openai_wire import (
    DONE, DONE_EVENT, RequestError, StreamedReply, StreamError, call_chunk, completion, first_chunk, last_chunk,
    openai_call, openai_message, read_event, reply_head, schema_args, text_chunk, to_conversation, to_openai,
    tool_schema)
from nanocode.protocol import INT_ARGS, TOOLS

CALLS = [  # every tool, ints and strings, in wire order
    {"name": "Read", "args": {"file_path": "src/app.py", "offset": 10, "limit": 20}},
    {"name": "Edit", "args": {"file_path": "src/app.py", "old_string": "return a",
                              "new_string": "return a + b"}},
    {"name": "Grep", "args": {"pattern": "def main", "path": "src", "-A": 2, "-B": 1}},
    {"name": "Bash", "args": {"command": "python -m pytest -q"}},
]
MALFORMED = "error: malformed tool call: no tool name before the first argument"


def conversation() -> list[dict]:
    """System, user, prose, each tool's call with its result, a malformed call (prose only) with
    its `error:` result, and the answer."""
    msgs = [{"role": "system", "content": "you are nanocode"},
            {"role": "user", "content": "fix the sum in src/app.py"},
            {"role": "assistant", "content": "let me look first."},
            {"role": "user", "content": "go on"}]
    for k, call in enumerate(CALLS):
        msgs += [{"role": "assistant", "content": "looking." if k == 0 else "", "tool_call": call},
                 {"role": "tool_result", "content": f"result {k} ✓"}]
    msgs += [{"role": "assistant", "content": "one more look"},
             {"role": "tool_result", "content": MALFORMED},
             {"role": "assistant", "content": "done: the sum adds b."}]
    return msgs


def test_a_conversation_comes_back_the_same():
    conv = conversation()
    sent = to_openai(conv)
    assert len(sent) == len(conv)
    back = to_conversation(json.loads(json.dumps(sent)))  # as it crosses the wire
    answered = [i for i, m in enumerate(conv) if m["content"] == MALFORMED]
    assert answered == [len(conv) - 2]
    for i, (ours, got) in enumerate(zip(conv, back, strict=True)):
        if i in answered:  # answers no call: a user message there and back
            assert sent[i] == got == {"role": "user", "content": f"[tool result] {MALFORMED}"}
        else:
            assert got == ours
    ints = [v for m in back if "tool_call" in m for v in m["tool_call"]["args"].values()
            if isinstance(v, int)]
    assert ints == [10, 20, 2, 1]  # ints stay ints, in wire order


def test_a_call_with_no_result_yet_is_refused():
    conv = conversation()[:5]  # ends on Read's call
    assert "tool_call" in conv[-1]
    with pytest.raises(RequestError, match="no tool message with its result"):
        to_conversation(to_openai(conv))


def test_a_call_sent_out_reads_back_to_the_same_args():
    for call in CALLS:
        out = [openai_call(call), openai_message({"content": "", "tool_call": call})["tool_calls"][0],
               to_openai([{"role": "assistant", "content": "", "tool_call": call}])[0]["tool_calls"][0]]
        for c in out:
            assert c["type"] == "function" and c["function"]["name"] == call["name"]
            got = schema_args(call["name"], c["function"]["arguments"])
            assert got.error is None and got.args == call["args"]
            assert list(got.args) == list(call["args"])  # wire order
    assert openai_message({"content": "hi", "tool_call": None}) == {"role": "assistant",
                                                                     "content": "hi"}


def test_the_tool_schemas_list_exactly_the_tools_arguments():
    for name, tool in TOOLS.items():
        fn = tool_schema(name)["function"]
        params = fn["parameters"]
        assert fn["name"] == name and fn["description"] == tool.prompt
        assert list(params["properties"]) == list(tool.args)
        assert params["required"] == list(tool.required)
        assert {a: p["type"] for a, p in params["properties"].items()} == \
            {a: "integer" if a in INT_ARGS else "string" for a in tool.args}


def test_a_servers_malformed_or_deeply_nested_arguments_are_an_error_not_a_crash():
    assert "not JSON" in schema_args("Read", "{oops").error
    assert "nested more than" in schema_args("Read", "[" * 100_000).error  # json.loads would recurse out
    assert schema_args("Read", '{"file_path": [[1]]}').error.startswith("error: ")
    assert schema_args("Read", '{"file_path": "a.py", "limit": "3"}') == ({"file_path": "a.py", "limit": 3}, None)


def read_stream(data: bytes) -> tuple[str, StreamedReply]:
    """A stream's bytes read as agent/samplers/remote.py reads them: (its content, the reader)."""
    got, text = StreamedReply(), []
    for line in data.split(b"\n"):
        event = read_event(line)
        if event == DONE:
            return "".join(text), got
        if event is not None:
            text.append(got.feed(event))
    raise AssertionError("no DONE event")


@pytest.mark.parametrize("call", [None, *CALLS], ids=["prose", *(c["name"] for c in CALLS)])
def test_a_streamed_reply_reads_back_the_same(call):
    res = {"content": "looking at ✓ the sum", "tool_call": call,
           "finish_reason": "tool_calls" if call else "stop",
           "usage": {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}}
    head = reply_head("nanocode-test")
    data = first_chunk(head) + b"".join(text_chunk(head, p) for p in ["looking at ✓", " the sum"])
    data += (call_chunk(head, call) if call else b"") + last_chunk(head, res["finish_reason"],
                                                                   res["usage"]) + DONE_EVENT
    assert data.endswith(b"data: [DONE]\n\n") and data.count(b"\n\n") == 5 + bool(call)
    text, got = read_stream(data)
    assert text == res["content"] and got.finish == res["finish_reason"] and got.usage == res["usage"]
    if call:
        assert list(got.calls) == [0] and got.calls[0]["name"] == call["name"]
        assert schema_args(call["name"], got.calls[0]["arguments"]) == (call["args"], None)
    else:
        assert got.calls == {}
    body = json.loads(json.dumps(completion(head, res)))  # the same reply, not streamed
    assert body["object"] == "chat.completion" and body["id"] == head["id"]
    assert body["choices"][0]["message"]["content"] == text
    chunks = [json.loads(ln[6:]) for ln in data.decode().split("\n\n")[:-2]]
    assert {c["id"] for c in chunks} == {head["id"]} and {c["object"] for c in chunks} == \
        {"chat.completion.chunk"}


def test_the_reader_takes_vendor_shapes_and_refuses_what_is_not_a_stream():
    assert [read_event(ln) for ln in [b"", b": ping", b"event: message", b"data: [DONE]  "]] == \
        [None, None, None, DONE]
    got = StreamedReply()
    for args, index in [('{"file_', 0), ('path": "a.py"}', 0), ('{"command": "ls"}', 1)]:
        got.feed({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "function": {"name": "Read" if args.startswith('{"file_') else
                                          "Bash" if index else None, "arguments": args}}]}}]})
    assert got.calls == {0: {"name": "Read", "arguments": '{"file_path": "a.py"}'},
                         1: {"name": "Bash", "arguments": '{"command": "ls"}'}}
    assert got.feed({"choices": [{"delta": {}, "finish_reason": "length"}]}) == "" \
        and got.finish == "length"
    for line in [b"data: {oops", b"data: [1, 2]", b'data: "text"']:
        with pytest.raises(StreamError, match="not a JSON object"):
            read_event(line)
    with pytest.raises(StreamError, match="failed: overloaded"):
        StreamedReply().feed({"error": {"message": "overloaded"}})
