"""`nanocode serve`: the real server in a subprocess on loopback (a tiny random checkpoint),
driven over HTTP with the key it printed: /v1/models, a chat completion equal to the engine's
own greedy reply, the same streamed as server-sent events, tool calls in the OpenAI shape, and
400s that say why. Its containment is attacked in tests/test_security_server.py."""
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.samplers.openai_wire import openai_message, to_conversation, tool_schema
from agent.serve import CANNOT_LISTEN, Server, build_parser, server_token

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(ckpt):
    p = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--model", str(ckpt),
                          "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line, said = p.stdout.readline(), p.stdout.readline()
    assert "nanocode serve: model" in line, p.stderr.read()
    assert said.startswith("nanocode serve: API key ") and "$NANOCODE_API_KEY" in said
    yield line.rsplit("http://", 1)[1].strip(), said.split()[4]
    p.terminate()
    p.wait(30)


def request(server, path, body=None):
    base, key = server
    return urllib.request.Request(f"http://{base}{path}", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        data=None if body is None else json.dumps(body).encode())


def post(server, body, raw=False):
    with urllib.request.urlopen(request(server, "/chat/completions", body), timeout=120) as r:
        return r.read().decode() if raw else json.loads(r.read())


def test_models_and_a_completion_equal_to_the_engine(server, ckpt):
    with urllib.request.urlopen(request(server, "/models"), timeout=30) as r:
        models = json.loads(r.read())
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "nanocode"
    body = {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": "what is x?"}], "max_tokens": 12}
    got = post(server, body)
    choice = got["choices"][0]
    assert got["object"] == "chat.completion" and choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length") and "tool_calls" not in choice["message"]
    assert got["usage"]["completion_tokens"] <= 12
    from agent.model import load_engine
    srv = Server(load_engine(ckpt), "x")
    here = srv.complete(srv.prepare(body))  # the same engine, in this process
    assert choice["message"]["content"] == here["content"]
    events = [ln[6:] for ln in post(server, {**body, "stream": True}, raw=True).splitlines()
              if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert streamed == here["content"] and chunks[-1]["choices"][0]["finish_reason"] == \
        choice["finish_reason"] and chunks[-1]["usage"]["completion_tokens"] >= 1


def test_bad_requests_say_why(server):
    for body, says in [({"messages": []}, "non-empty list"),
                       ({"messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}]},
                        "answers no earlier tool call"),
                       ({"messages": [{"role": "robot", "content": "hi"}]}, "unknown role")]:
        with pytest.raises(urllib.error.HTTPError) as e:
            post(server, body)
        assert e.value.code == 400 and says in json.loads(e.value.read())["error"]["message"]


def test_the_key_is_printed_fresh_and_required(server, monkeypatch):
    """A fresh key per start (the fixture read it from the second line), asked of every request;
    --token or $NANOCODE_SERVE_TOKEN sets it, --no-auth turns it off, an empty one is refused."""
    base, key = server
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{base}/models", timeout=30)
    assert e.value.code == 401 and json.loads(e.value.read())["error"]["code"] == "invalid_api_key"
    parse = build_parser().parse_args
    monkeypatch.delenv("NANOCODE_SERVE_TOKEN", raising=False)
    fresh = {server_token(parse([])) for _ in range(3)}
    assert len(fresh) == 3 and all(len(k) >= 40 and k != key for k in fresh)
    assert server_token(parse(["--token", "t0k"])) == "t0k" and server_token(parse(["--no-auth"])) is None
    monkeypatch.setenv("NANOCODE_SERVE_TOKEN", "from-env")
    assert server_token(parse([])) == "from-env"
    for bad in ("", "two words"):
        with pytest.raises(ValueError, match="printable ASCII without spaces"):
            server_token(parse(["--token", bad]))
    with pytest.raises(SystemExit):
        parse(["--token", "x", "--no-auth"])


def test_openai_tool_calls_round_trip():
    """An assistant turn with two calls becomes two of ours, each with its result; our call goes
    back out in the OpenAI shape."""
    conv = to_conversation([
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "Read", "arguments": '{"file_path": "x.py"}'}},
            {"id": "b", "type": "function", "function": {"name": "Grep", "arguments": '{"pattern": "f"}'}}]},
        {"role": "tool", "tool_call_id": "b", "content": "x.py:1:f"},
        {"role": "tool", "tool_call_id": "a", "content": "    1→f"},
    ])
    assert conv == [{"role": "user", "content": "look"},
                    {"role": "assistant", "content": "ok", "tool_call": {"name": "Read", "args": {"file_path": "x.py"}}},
                    {"role": "tool_result", "content": "    1→f"},
                    {"role": "assistant", "content": "", "tool_call": {"name": "Grep", "args": {"pattern": "f"}}},
                    {"role": "tool_result", "content": "x.py:1:f"}]
    msg = openai_message({"content": "", "tool_call": {"name": "Read", "args": {"file_path": "a.py"}}})
    call = msg["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "Read"
    assert json.loads(call["function"]["arguments"]) == {"file_path": "a.py"}


def test_the_grammar_offers_only_the_listed_tools(ckpt):
    """Our backend, our mask: with only Read listed, any call the model makes is a Read, and
    with no tools listed it makes none (sampled at temperature 1 over several seeds)."""
    from agent.model import load_engine
    srv = Server(load_engine(ckpt), "x")
    read = [{"type": "function", "function": {"name": "Read", "parameters": {}}}]
    for seed in range(6):
        body = {"messages": [{"role": "user", "content": "read a.py"}], "max_tokens": 40,
                "temperature": 1.0, "seed": seed}
        with_read = srv.complete(srv.prepare({**body, "tools": read}))
        assert with_read["tool_call"] is None or with_read["tool_call"]["name"] == "Read"
        assert srv.complete(srv.prepare(body))["tool_call"] is None


def test_a_port_in_use_is_one_line_and_its_own_exit_status(ckpt):
    """`nanocode serve --port P` with P taken by another socket on loopback: one line that names
    the port and the fix, exit status 7 (it was two tracebacks ending in an AttributeError)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--model", str(ckpt),
                            "--port", str(port)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, CANNOT_LISTEN) == (7, 7) and r.stdout == "", r.stderr[-2000:]
    assert r.stderr.strip() == f"error: port {port} is in use; pass --port N or stop the other server"


def test_a_route_asked_with_the_other_method_is_a_405(server):
    """GET /v1/chat/completions (a browser, curl without -d) and POST /v1/models are 405s with an
    Allow header naming the method, not a 404 that sends the caller to the route it used."""
    base, key = server
    for method, path, allow in [("GET", "/v1/chat/completions", "POST"), ("POST", "/v1/models", "GET")]:
        conn = http.client.HTTPConnection(base.split("/")[0], timeout=30)
        conn.request(method, path, body=b"{}" if method == "POST" else None,
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        r = conn.getresponse()
        said = json.loads(r.read())["error"]["message"]
        assert (r.status, r.getheader("Allow")) == (405, allow), (path, r.status, said)
        assert said == f"{path} takes {allow}, not {method}"
        conn.close()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request(server, "/nothing"), timeout=30)
    assert e.value.code == 404


@pytest.fixture(scope="module")
def stopper(ckpt):
    """`nanocode serve`'s server in this process on loopback (no key), its model one that ranks
    <|tool_call_end|> first wherever it stands: every token embeds alike and the output
    projections are zero, so the last hidden state is one vector, which lm_head maps to that token
    alone (every other logit 0: greedy takes the lowest id the grammar allows)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from agent.model import load_engine
    from agent.serve_http import make_server
    from nanocode.engine import Engine
    from nanocode.gpt import init_params
    tok, cfg = (e := load_engine(ckpt)).tokenizer, e.cfg
    params = init_params(cfg, jax.random.PRNGKey(0))
    u = np.random.default_rng(0).standard_normal(cfg.n_embd)
    params["wte"] = jnp.asarray(np.tile(u, (params["wte"].shape[0], 1)), params["wte"].dtype)
    head = np.zeros(params["lm_head"].shape, np.float32)
    head[:, tok.special_ids["<|tool_call_end|>"]] = 10 * u / np.sqrt(np.mean(u * u)) / cfg.n_embd
    params["lm_head"] = jnp.asarray(head, params["lm_head"].dtype)
    httpd = make_server(Server(Engine(params, cfg, tok), "stopper"))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("tool,arg", [("Read", "file_path"), ("Grep", "pattern")])
def test_a_forced_call_has_a_real_argument(stopper, tool, arg):
    """tool_choice naming Read (or Grep), through the openai client: the model would end the call
    at once, and the grammar used to let it (file_path ""; serve has no project to ground paths
    in); a path or pattern now ends only after a non-blank byte, streamed or not."""
    import openai
    client = openai.OpenAI(base_url=stopper, api_key="unused", max_retries=0)
    schema = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    tools = [{"type": "function", "function": {"name": tool, "parameters": schema}}]
    ask = dict(model="stopper", messages=[{"role": "user", "content": "look at a.py"}], tools=tools,
               tool_choice={"type": "function", "function": {"name": tool}}, max_tokens=40)
    reply = client.chat.completions.create(**ask)
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and calls[0].function.name == tool
    assert json.loads(calls[0].function.arguments)[arg].strip()
    streamed = [c for chunk in client.chat.completions.create(stream=True, **ask) for c in
                (chunk.choices[0].delta.tool_calls or [] if chunk.choices else [])]
    assert streamed[0].function.arguments == calls[0].function.arguments


def _wire(base: str, body: dict) -> list[dict]:
    """The reply to `body` over HTTP, plain and streamed, each as {"finish", "content", "calls"
    ([(name, arguments text)])}, after checking the stream's shape (role first, [DONE] last,
    the finish reason only on the last chunk)."""
    out = []
    for stream in (False, True):
        req = urllib.request.Request(f"{base}/chat/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({**body, "stream": stream}).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            data = r.read().decode()
        if not stream:
            choice = json.loads(data)["choices"][0]
            msg = choice["message"]
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", [])]
            out.append({"finish": choice["finish_reason"], "content": msg["content"], "calls": calls})
            continue
        events = [ln[6:] for ln in data.splitlines() if ln.startswith("data: ")]
        assert events[-1] == "[DONE]"
        choices = [json.loads(e)["choices"][0] for e in events[:-1]]
        assert choices[0]["delta"]["role"] == "assistant"
        assert [c["finish_reason"] for c in choices[:-1]] == [None] * (len(choices) - 1)
        deltas = [c["delta"] for c in choices]
        calls = [(c["function"]["name"], c["function"]["arguments"])
                 for d in deltas for c in d.get("tool_calls", [])]
        out.append({"finish": choices[-1]["finish_reason"], "calls": calls,
                    "content": "".join(d.get("content") or "" for d in deltas)})
    return out


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "Grep"}}])
def test_a_forced_call_cut_by_max_tokens_is_a_length_reply_without_a_call(stopper, choice):
    """tool_choice "required" or a named function, with max_tokens too small for the call: every
    budget short of the whole call gets finish_reason "length" and no tool_calls (never a partial
    or malformed call), content "" (the reply opened with the call); the budget that holds the
    call gets it whole. The same plain and streamed."""
    body = {"messages": [{"role": "user", "content": "find f"}], "tool_choice": choice,
            "tools": [tool_schema("Grep"), tool_schema("Read")]}
    plain, streamed = _wire(stopper, {**body, "max_tokens": 64})
    assert plain == streamed and plain["finish"] == "tool_calls" and len(plain["calls"]) == 1
    name, arguments = plain["calls"][0]
    assert name in ("Grep", "Read") and isinstance(json.loads(arguments), dict)
    with urllib.request.urlopen(urllib.request.Request(f"{stopper}/chat/completions", json.dumps(
            {**body, "max_tokens": 64}).encode(), {"Content-Type": "application/json"}), timeout=120) as r:
        whole = json.loads(r.read())["usage"]["completion_tokens"]  # the call, to its last token
    assert whole >= 3, whole
    for budget in range(1, whole):
        plain, streamed = _wire(stopper, {**body, "max_tokens": budget})
        assert plain == streamed == {"finish": "length", "content": "", "calls": []}, budget
    assert _wire(stopper, {**body, "max_tokens": whole})[0]["finish"] == "tool_calls"
