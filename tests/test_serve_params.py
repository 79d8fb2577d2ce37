"""`nanocode serve` honours or refuses what a chat-completions request asks, never ignores it
(issue 45, item 8): `stop`, `n`, `tool_choice`, the model's name, client tools and the parameters
it does not implement. The real server (make_server, as `nanocode serve` builds it) on loopback,
in a thread, on the shipped default model (trained: its replies are words and tool calls), with
a key; each request goes over HTTP and is checked on the wire, streamed and not."""
import contextlib
import http.client
import itertools
import json
import threading

import pytest

from agent.samplers.openai_wire import StopText, tool_schema
from agent.serve import Server
from agent.serve_http import make_server
from nanocode.protocol import TOOLS, system_prompt

KEY = "k3y-for-the-tests"
NAME = "default"
TOOLS_LISTED = [tool_schema(n) for n in TOOLS]
RUN_TESTS = {"messages": [{"role": "system", "content": system_prompt("/tmp/project")},
                          {"role": "user", "content": "please run the tests"}],
             "max_tokens": 40, "tools": TOOLS_LISTED}


@pytest.fixture(scope="module")
def port():
    from agent.model import load_engine, resolve_model
    httpd = make_server(Server(load_engine(resolve_model(None)[0]), NAME), token=KEY)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def post(port, body) -> tuple[int, dict | list]:
    """(status, the JSON reply), or for a 200 to a streamed request (200, its chunks)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    with contextlib.closing(conn):
        conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
        r = conn.getresponse()
        data = r.read().decode()
    if r.status != 200 or not body.get("stream"):
        return r.status, json.loads(data)
    events = [ln[6:] for ln in data.splitlines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return 200, [json.loads(e) for e in events[:-1]]


def reply(port, body) -> dict:
    """The reply, asked twice: {"content", "call" (name or None), "finish"} from the plain
    answer, the same read off the stream, and `pieces`: the streamed content deltas."""
    status, got = post(port, body)
    assert status == 200, got
    choice = got["choices"][0]
    calls = choice["message"].get("tool_calls") or [{"function": {"name": None}}]
    plain = {"content": choice["message"]["content"], "call": calls[0]["function"]["name"],
             "finish": choice["finish_reason"]}
    status, chunks = post(port, {**body, "stream": True})
    assert status == 200, chunks
    deltas = [c["choices"][0]["delta"] for c in chunks]
    pieces = [d["content"] for d in deltas[1:] if d.get("content")]
    streamed_calls = [d["tool_calls"][0]["function"]["name"] for d in deltas if d.get("tool_calls")]
    streamed = {"content": "".join(pieces), "call": (streamed_calls or [None])[0],
                "finish": chunks[-1]["choices"][0]["finish_reason"]}
    assert streamed == plain, "the stream says what the plain answer says"
    return {**plain, "pieces": pieces}


def refused(port, body, param: str, status: int = 400) -> str:
    """The error's message, after checking it is OpenAI's shape naming `param`."""
    got_status, got = post(port, body)
    assert got_status == status, got
    err = got["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
    return err["message"]


def test_stop_ends_the_reply_before_the_first_stop_string(port):
    whole = reply(port, RUN_TESTS)
    text = whole["content"]
    assert whole["call"] and len(text) >= 12, whole  # the shipped model: prose, then a call
    cut = text[len(text) // 2:len(text) // 2 + 5]
    for stop in (cut, [cut, "\x00never"]):
        got = reply(port, {**RUN_TESTS, "stop": stop})
        assert got["content"] == text[:text.index(cut)] and got["finish"] == "stop"
        assert got["call"] is None  # the reply ended before its call
    # a stop string the reply starts but does not finish: what was held back goes out
    almost = cut + "\x00"
    got = reply(port, {**RUN_TESTS, "stop": almost})
    assert got["content"] == text and got["call"] == whole["call"] and got["finish"] == "tool_calls"


def test_bad_stop_is_a_400_naming_it(port):
    for stop in ("", ["a", "b", "c", "d", "e"], [1], {"s": 1}, "x" * 257):
        assert "stop must be a string or a list of at most 4" in \
            refused(port, {**RUN_TESTS, "stop": stop}, "stop")


def test_n_above_one_is_refused_and_n_one_works(port):
    assert reply(port, {**RUN_TESTS, "n": 1})["finish"] in ("tool_calls", "stop", "length")
    for n in (2, 0, "2"):
        assert "one choice per request (n=1)" in refused(port, {**RUN_TESTS, "n": n}, "n")


def test_tool_choice_none_required_and_named_are_honoured(port):
    auto = reply(port, RUN_TESTS)
    assert auto["call"] == "Bash"  # the shipped model runs the tests
    assert reply(port, {**RUN_TESTS, "tool_choice": "auto"}) == auto
    none = reply(port, {**RUN_TESTS, "tool_choice": "none"})
    assert none["call"] is None and none["content"] and none["finish"] in ("stop", "length")
    read = {"type": "function", "function": {"name": "Read"}}
    named = reply(port, {**RUN_TESTS, "tool_choice": read})
    assert named["call"] == "Read" and named["content"] == "" and named["finish"] == "tool_calls"
    ask = {**RUN_TESTS, "messages": RUN_TESTS["messages"][:1] + [
        {"role": "user", "content": "what is a test?"}], "tools": [tool_schema("Grep")]}
    required = reply(port, {**ask, "tool_choice": "required"})
    assert required["call"] == "Grep" and required["content"] == ""
    assert required["finish"] == "tool_calls"


def test_a_tool_choice_that_cannot_be_honoured_is_a_400(port):
    assert 'tool_choice "required" needs tools' in refused(
        port, {**RUN_TESTS, "tools": [], "tool_choice": "required"}, "tool_choice")
    assert "names 'Read', which tools does not list" in refused(port, {
        **RUN_TESTS, "tools": [tool_schema("Bash")],
        "tool_choice": {"type": "function", "function": {"name": "Read"}}}, "tool_choice")
    for bad in ("always", {"type": "function"}, {"type": "allowed_tools"}):
        assert 'tool_choice must be "auto", "none", "required"' in refused(
            port, {**RUN_TESTS, "tool_choice": bad}, "tool_choice")


def test_client_tools_the_grammar_cannot_write_are_a_400_naming_them(port):
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"days": {"type": "array"}}}}}
    message = refused(port, {**RUN_TESTS, "tools": [tool_schema("Read"), weather]}, "tools")
    assert "tools[1] ('get_weather')" in message and "argument 'days' is array" in message
    # tests/test_serve_client_tools.py: the client tools it can write, called and handed back


def test_another_models_name_is_a_404_in_openais_shape(port):
    status, got = post(port, {**RUN_TESTS, "model": "gpt-4o"})
    assert status == 404 and got["error"]["type"] == "invalid_request_error"
    assert got["error"]["param"] == "model" and got["error"]["code"] == "model_not_found"
    assert "'gpt-4o'" in got["error"]["message"] and repr(NAME) in got["error"]["message"]
    assert refused(port, {**RUN_TESTS, "model": 3}, "model").startswith("model must be a string")
    # the listed name, or none at all, is served; agent/samplers/remote.py's request shape included
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as conn:
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        listed = json.loads(conn.getresponse().read())["data"][0]["id"]
    assert listed == NAME
    remote = {**RUN_TESTS, "model": listed, "stream_options": {"include_usage": True},
              "parallel_tool_calls": False, "top_p": 1.0, "seed": 3}
    assert reply(port, remote) == reply(port, {**remote, "model": None})


def test_parameters_the_server_does_not_implement_are_refused_not_ignored(port):
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    for key, value in [("logprobs", True), ("top_logprobs", 2), ("presence_penalty", 0.5),
                       ("frequency_penalty", -1), ("logit_bias", {"50": 100}),
                       ("response_format", {"type": "json_object"}), ("response_format", schema),
                       ("functions", [{"name": "f"}]), ("function_call", {"name": "f"})]:
        message = refused(port, {**RUN_TESTS, key: value}, key)
        assert message.startswith(f"{key} is ") and f"leave {key} out" in message
    neutral = {"logprobs": False, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {},
               "response_format": {"type": "text"}, "top_logprobs": 0}
    assert reply(port, {**RUN_TESTS, **neutral}) == reply(port, RUN_TESTS)


def test_stop_text_holds_back_what_may_be_a_stop_string():
    """Every split of a text into pieces: what goes out is the text before the first stop string
    (all of it when none occurs), and no piece that goes out ends in the start of one it could
    still become, i.e. nothing of a stop string ever goes out."""
    text = "abcab-cabd"
    for stops, want in [(("abd",), "abcab-c"), (("b-c", "cabd"), "abca"), (("zz",), text),
                        (("abx",), text), (("a",), "")]:
        for cuts in itertools.combinations(range(1, len(text)), 3):
            pieces = [text[i:j] for i, j in zip((0, *cuts), (*cuts, len(text)))]
            st, out = StopText(stops), []
            for p in pieces:
                out.append(st.feed(p))
                assert want.startswith("".join(out))  # never ahead of the answer
            out.append(st.flush())
            assert "".join(out) == want and st.hit == (want != text)
