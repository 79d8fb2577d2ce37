"""The OpenAI wire format (agent/openai_wire.py) both ways: our conversation -> to_openai ->
to_conversation comes back the same, but for the two cases the module says cannot (a tool_result
that answers no call; a call with no result yet); a call sent out (openai_call, openai_message,
to_openai) reads back through schema_args to the same arguments; the tool schemas list exactly
protocol.TOOLS' arguments."""
import json

import pytest

from agent.openai_wire import (RequestError, openai_call, openai_message, schema_args,
                               to_conversation, to_openai, tool_schema)
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
