"""`nanocode serve` with a client's own function tools: the model may call them (under the grammar
mask, their values as the tool's JSON schema types them) and the call goes back to the client as
an OpenAI `tool_calls` entry, never run by the server. The real server (make_server) on loopback,
a tiny random checkpoint, driven with the `openai` Python client."""
import json
import threading

import openai
import pytest

from agent.samplers.openai_wire import tool_schema
from agent.serve import Server
from agent.serve_http import make_server

KEY = "client-tools-key"
UNIT = {"type": "function", "function": {
    "name": "set_unit", "description": "set the unit",
    "parameters": {"type": "object", "required": ["unit", "metric"], "properties": {
        "unit": {"type": "string", "enum": ["m", "km"]}, "metric": {"type": "boolean"}}}}}
ASK = [{"role": "user", "content": "use kilometres"}]
CHOOSE = {"type": "function", "function": {"name": "set_unit"}}


@pytest.fixture(scope="module")
def served(ckpt):
    from agent.model import load_engine
    srv = Server(load_engine(ckpt), "tiny")
    httpd = make_server(srv, token=KEY)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield srv, openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key=KEY,
                             max_retries=0, timeout=120)
    httpd.shutdown()
    httpd.server_close()


def test_a_call_of_a_client_tool_comes_back_as_tool_calls(served):
    _, client = served
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=[UNIT], tool_choice=CHOOSE, max_tokens=40)
    choice = r.choices[0]
    [call] = choice.message.tool_calls
    args = json.loads(call.function.arguments)
    assert choice.finish_reason == "tool_calls" and call.type == "function" and call.function.name == "set_unit"
    assert set(args) == {"unit", "metric"} and args["unit"] in ("m", "km") and isinstance(args["metric"], bool)
    stream = client.chat.completions.create(model="tiny", messages=ASK, tools=[UNIT], tool_choice=CHOOSE,
                                            max_tokens=40, stream=True)
    pieces = [tc for chunk in stream for c in chunk.choices for tc in (c.delta.tool_calls or [])]
    assert pieces[0].function.name == "set_unit"
    assert json.loads("".join(p.function.arguments or "" for p in pieces)) == args  # greedy: the same call
    # the client ran it and goes on: its call (JSON values) and the result are read back
    said = {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]}
    done = client.chat.completions.create(model="tiny", max_tokens=8, tools=[UNIT, tool_schema("Read")], messages=[
        *ASK, said, {"role": "tool", "tool_call_id": call.id, "content": "unit set"}])
    assert done.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_the_model_is_told_which_client_tools_it_has(served):
    srv, _ = served
    job = srv.prepare({"messages": [{"role": "system", "content": "be brief"}, *ASK], "tools": [UNIT]})
    text = srv.tok.decode(job["ids"])
    assert "be brief\ntools (one call per message):\n- set_unit(unit: m|km, metric: boolean): set the unit" in text
    assert [t.name for t in job["tools"]] == ["set_unit"] and job["must_call"] is False


def test_client_tools_the_grammar_cannot_write_are_a_400_saying_why(served):
    _, client = served
    tags = {"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}}}
    bad_name = {"type": "function", "function": {"name": "get weather", "parameters": {}}}
    for tools, says in [([tags], "tools[0] ('tag'): this server cannot offer it: argument 'tags' is array"),
                        ([UNIT, bad_name], "tools[1] ('get weather'): this server cannot offer it: its name must be")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny", messages=ASK, tools=tools, max_tokens=4)
        assert says in e.value.body["message"] and e.value.body["param"] == "tools"
