"""The agent on an OpenAI-compatible server (`nanocode --base-url`, agent/samplers/remote.py).

End to end against our own server on loopback: the shipped model served by `nanocode serve`
drives the agent through the same tool calls, edits and answers as the engine in-process; the
CLI in subprocesses (server, headless agent, `train export-sessions`, `train sft`) distils the
saved session into a checkpoint. A scripted server stands in for other vendors' shapes (calls
streamed in pieces, two calls in one reply, arguments that are not JSON, a context 400, a 500)."""
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.samplers.engine import EngineSampler
from agent.samplers.openai_wire import schema_args, to_conversation, to_openai
from agent.samplers.remote import RemoteSampler
from agent.samplers.sampler import SamplerError
from agent.settings import SamplerSettings, TurnSettings
from nanocode.protocol import DROPPED
from tools.permissions import Policy

ROOT = Path(__file__).resolve().parents[1]


def serve_in_thread(handler_class):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"


@pytest.fixture(scope="module")
def default_engine():
    from agent.model import load_engine, resolve_model
    return load_engine(resolve_model(None)[0])


@pytest.fixture(scope="module")
def our_server(default_engine):
    from agent.serve import Server
    from agent.serve_http import make_server
    httpd = make_server(Server(default_engine, "default"))  # no key: loopback, in this process
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("family,seed", [("git_inspect", 5), pytest.param("fix_bug", 8, marks=pytest.mark.slow)])
def test_remote_agent_equals_the_engine_on_our_server(default_engine, our_server, tmp_path, family, seed):
    """Greedy, the same model in-process and behind the server: the same calls, the same
    edits on disk, the same answer, the same verdict (the grammar mask applies on the server).
    Not run_command: its answer follows a pytest run's "in 0.15s", which varies between runs, and
    the greedy answer with it (fix_bug's, after its test run, has held across timings)."""
    from tasks import build_task, drive, resolved, setup_env, task_agent
    setup_env()
    runs = []
    for kind in ("local", "remote"):  # the same project path for both: the model reads it
        shutil.rmtree(tmp_path / "task", ignore_errors=True)
        task = build_task(family, seed, False, str(tmp_path / "task"))
        settings = SamplerSettings(max_tokens=300, ground=False)
        sampler = (EngineSampler(default_engine, task.root, settings) if kind == "local"
                   else RemoteSampler(our_server, settings=settings))
        agent = task_agent(sampler, task, task.root, TurnSettings(max_steps=8))
        turns = drive(agent, task)
        calls = [c for t in turns for c in t.tool_calls]
        runs.append(([(c["name"], c["args"]) for c in calls], turns[-1].answer, turns[-1].stop_reason,
                     resolved(task, turns[-1].answer, calls).resolved))
    local, remote = runs
    assert local[0] and remote == local
    assert remote[2] == "done" and remote[3] is True  # the shipped model resolves these two


@pytest.mark.slow  # ~140 s idle: the CLI, a server and a distillation run end to end
def test_cli_base_url_end_to_end_then_distilled(our_server, tmp_path):
    """`nanocode serve` and `nanocode -p --base-url` in subprocesses, the key the server printed
    in $NANOCODE_API_KEY; the saved session exports as a valid SFT row and `train sft` trains a
    checkpoint of its own on it."""
    from tasks import build_task
    task = build_task("fix_bug", 8, False, str(tmp_path / "tasks"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NANOCODE_HOME": str(tmp_path / "home")}
    server = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--port", "0"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line, said = server.stdout.readline(), server.stdout.readline()
        assert "nanocode serve: model" in line, server.stderr.read()
        url = "http://" + line.rsplit("http://", 1)[1].strip()
        out = subprocess.run([sys.executable, "-m", "agent.cli", "-p", task.prompt, "--base-url", url,
                              "--mode", "auto", "--output-format", "json", "--max-tokens", "300"],
                             cwd=task.root, env={**env, "NANOCODE_API_KEY": said.split()[4]},
                             capture_output=True, text=True, timeout=600)
    finally:
        server.terminate()
        server.wait(30)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["stop_reason"] == "done" and [c["name"] for c in result["tool_calls"]][-1] == "Bash"
    assert "Edit" in [c["name"] for c in result["tool_calls"]] and result["files_changed"]
    saved, = (Path(task.root) / ".nanocode" / "sessions").glob("*.jsonl")
    meta = json.loads(saved.read_text())["meta"]
    assert meta["model"].startswith(url) and meta["turns"][0]["stop_reason"] == "done"

    export = tmp_path / "export"
    train = [sys.executable, "-m", "train.cli"]
    done = subprocess.run(train + ["export-sessions", str(saved), "--out", str(export)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in (export / "sft.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["messages"][-1]["content"] == result["answer"]
    run = tmp_path / "distilled"
    done = subprocess.run(train + ["sft", "--from", "default", "--data", str(export / "sft.jsonl"),
                                   "--seq-len", "2048", "--device-batch", "1", "--steps", "1",
                                   "--save-every", "0", "--eval-every", "0", "--sample-tokens", "0",
                                   "--run-dir", str(run)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "checkpoints" / "1").is_dir()


def test_cli_says_when_the_server_cannot_be_reached(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--base-url",
                          "http://127.0.0.1:9/v1", "--cwd", str(tmp_path), "--trust"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 6 and "Traceback" not in out.stderr  # the model server failed
    assert "error: cannot reach the model server at http://127.0.0.1:9/v1" in out.stderr
    out = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--base-url", "not-a-url",
                          "--cwd", str(tmp_path), "--trust"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--base-url 'not-a-url' is not an http(s) URL" in out.stderr
    out = subprocess.run([sys.executable, "-m", "agent.cli", "--context", "4096"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--context goes with --base-url" in out.stderr


# ---- other vendors' shapes, from a scripted server ------------------------------------------------
class Scripted(BaseHTTPRequestHandler):
    """Answers /v1/models and, per POST, the next scripted reply: (status, body), a list of SSE
    chunks, or "broken". Every request body is kept in `requests`."""
    script: list = []
    requests: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        if not self.path.startswith("/v1/"):
            return self._send(404, {"error": {"message": "Not Found"}})
        self._send(200, {"data": [{"id": "vendor-model", "max_model_len": 4096}]})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        Scripted.requests.append(json.loads(self.rfile.read(n)))
        step = Scripted.script.pop(0)
        if isinstance(step, tuple):
            return self._send(*step)
        cut = isinstance(step, dict)  # {"cut": chunks}: the connection closes before [DONE]
        step = step["cut"] if cut else step
        if step == "broken":  # a chunked reply whose connection drops mid-chunk
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"40\r\ndata: {")
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in step:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if not cut:
            self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def delta(**d):
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def call_pieces(index, name, *pieces, cid="x"):
    first = {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": pieces[0]}}
    return [delta(tool_calls=[first])] + [delta(tool_calls=[{"index": index, "function": {"arguments": p}}])
                                          for p in pieces[1:]]


def finish(reason):
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 7}}


@pytest.fixture
def scripted(tmp_path):
    Scripted.script, Scripted.requests = [], []
    httpd, url = serve_in_thread(Scripted)
    yield url
    httpd.shutdown()


def remote_agent(url, root, **turn):
    from agent.loop.driver import Agent
    return Agent(RemoteSampler(url), root, Policy.load(root, mode="auto"),
                 TurnSettings(snapshots=False, **turn))


def test_vendor_shapes_stream_into_one_call_per_reply(scripted, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    Scripted.script = [
        # a call streamed in pieces (limit as a string), and a second call nanocode does not run
        [delta(role="assistant", content="let me look."), *call_pieces(0, "Read", '{"file_pa', 'th": "a.py", ',
                                                                      '"limit": "1"}'),
         *call_pieces(1, "Grep", '{"pattern": "y"}', cid="y"), finish("tool_calls")],
        # arguments that are not JSON: taken back and resampled
        [*call_pieces(0, "Read", '{"file_path": a.py}'), finish("tool_calls")],
        [delta(content="x is 1."), finish("stop")],
    ]
    events = []
    agent = remote_agent(scripted, tmp_path)
    res = agent.run_turn("what is x?", on_event=events.append)
    assert res.stop_reason == "done" and res.answer == "x is 1." and res.retries == 1
    assert [(c["name"], c["args"]) for c in res.tool_calls] == [("Read", {"file_path": "a.py", "limit": 1})]
    assert res.tool_calls[0]["result"].startswith("    1→x = 1")
    notes = [e.text for e in events if e.kind == "status"]
    assert any("2 calls in one reply" in n for n in notes) and any("malformed call" in n for n in notes)
    assert res.usage["prompt_tokens"] == 150 and res.usage["completion_tokens"] == 21
    first, second = Scripted.requests[0], Scripted.requests[1]
    assert first["model"] == "vendor-model" and first["parallel_tool_calls"] is False
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert set(schema) == {"Read", "Edit", "Grep", "Bash"}
    assert schema["Read"]["properties"]["limit"] == {"type": "integer"}
    assert schema["Read"]["required"] == ["file_path"]
    said, answered = second["messages"][-2:]  # our call, and the tool message answering its id
    assert said["tool_calls"][0]["function"] == {"name": "Read", "arguments": '{"file_path": "a.py", "limit": 1}'}
    assert answered == {"role": "tool", "tool_call_id": said["tool_calls"][0]["id"],
                        "content": res.tool_calls[0]["result"]}
    assert second["temperature"] == 0.0 and Scripted.requests[2]["temperature"] == 0.7  # a retry samples
    from train.conversations import keep_valid  # the session is valid training data as it stands
    assert keep_valid([agent.conversation()])[1] == {}


def test_a_context_400_drops_old_output_and_resends(scripted, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n" * 50)
    Scripted.script = [
        [*call_pieces(0, "Read", '{"file_path": "a.py"}'), finish("tool_calls")],
        [delta(content="read it."), finish("stop")],
        (400, {"error": {"message": "This model's maximum context length is 4096 tokens.",
                         "code": "context_length_exceeded"}}),
        [delta(content="still here."), finish("stop")],
    ]
    agent = remote_agent(scripted, tmp_path)
    assert agent.run_turn("read a.py").stop_reason == "done"
    events = []
    res = agent.run_turn("and now?", on_event=events.append)
    assert res.stop_reason == "done" and res.answer == "still here."
    assert any("dropped 1 old tool output" in e.text for e in events if e.kind == "status")
    resent = Scripted.requests[3]["messages"]
    assert [m["content"] for m in resent if m["role"] == "tool"] == [DROPPED]


def test_a_looping_answer_is_cut_and_a_looping_argument_is_resampled(scripted, tmp_path):
    """No mask on a remote model: the loop detector reads the stream. Prose that completes a loop
    ends the reply there (stop "loop", the text before it kept); a call whose argument loops is
    malformed, taken back and resampled."""
    from agent.headless import EXIT_CODES
    from agent.masks.loop_guard import PROSE, first_loop
    Scripted.script = [
        [*call_pieces(0, "Bash", '{"command": "ls ' + "tests/" * 8 + '"}'), finish("tool_calls")],
        [*call_pieces(0, "Bash", '{"command": "ls tests/"}'), finish("tool_calls")],
        [delta(content="the tests are in ")] + [delta(content="tests/") for _ in range(200)]
        + [finish("length")],
    ]
    events = []
    agent = remote_agent(scripted, tmp_path, max_steps=2)
    res = agent.run_turn("where are the tests?", on_event=events.append)
    assert res.retries == 1 and [c["args"]["command"] for c in res.tool_calls] == ["ls tests/"]
    assert res.stop_reason == "loop" and EXIT_CODES["loop"] == 4
    # prose's rule: cut right before the phrase would complete its third time
    assert res.answer == "the tests are in tests/tests/tests" and first_loop(res.answer.encode(), PROSE) is None
    assert first_loop((res.answer + "/").encode(), PROSE) is not None
    notes = [e.text for e in events if e.kind == "status"]
    assert "reply stopped: it was repeating itself" in notes and any("malformed call" in n for n in notes)
    assert "".join(e.text for e in events if e.kind == "text") == res.answer
    assert schema_args("Read", '{"file_path": "' + "ab" * 20 + '"}')[1] == \
        "error: the Read call's file_path repeats itself; write it once"


def test_a_failing_server_ends_the_turn_and_a_missing_model_is_named(scripted, tmp_path):
    Scripted.script = [(500, {"error": {"message": "out of memory"}}), "broken"]
    agent = remote_agent(scripted, tmp_path)
    events = []
    assert agent.run_turn("hi", on_event=events.append).stop_reason == "model_error"
    assert agent.run_turn("again", on_event=events.append).stop_reason == "model_error"
    notes = [e.text for e in events if e.kind == "status"]
    assert "answered 500: out of memory" in notes[0] and "broke off its reply" in notes[1]
    # a server that dies mid-reply: some prose, then the connection closes without [DONE]
    Scripted.script = [{"cut": [delta(content="The answer is")]}]
    res = agent.run_turn("and now?", on_event=events.append)
    assert res.stop_reason == "model_error"
    assert "closed before `data: [DONE]`" in [e.text for e in events if e.kind == "status"][-1]
    from agent.headless import EXIT_CODES
    assert EXIT_CODES["model_error"] == 6
    with pytest.raises(SamplerError, match="no model 'gpt-9'.*vendor-model"):
        RemoteSampler(scripted, "gpt-9")
    with pytest.raises(SamplerError, match="cannot reach the model server"):
        RemoteSampler("http://127.0.0.1:9/v1")
    with pytest.raises(SamplerError, match="answered 404.*ends in /v1: --base-url http://127.0.0.1:\\d+/v1 "):
        RemoteSampler(scripted.removesuffix("/v1"))
    with pytest.raises(SamplerError, match="not an http"):
        RemoteSampler("127.0.0.1:8000/v1")
    assert RemoteSampler(scripted).max_len == 4096  # the server's max_model_len


def test_headless_exits_6_when_the_server_fails(scripted, tmp_path):
    """The headless CLI in a subprocess: a reply cut before [DONE] and an unknown model both exit
    with 6 (the model server failed), never 0 with an empty answer."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    Scripted.script = [{"cut": [delta(content="The answer")]}]
    run = lambda *a: subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--base-url",  # noqa: E731
                                     *a, "--cwd", str(tmp_path), "--trust", "--output-format", "json"],
                                    env=env, capture_output=True, text=True, timeout=120)
    out = run(scripted)
    assert out.returncode == 6 and json.loads(out.stdout)["stop_reason"] == "model_error", out.stderr
    assert "closed before `data: [DONE]`" in out.stderr
    out = run(scripted, "--model", "gpt-9")
    assert out.returncode == 6 and "error: the server at" in out.stderr and "no model 'gpt-9'" in out.stderr
    out = run(scripted.removesuffix("/v1"))
    assert out.returncode == 6 and "/v1 ?" in out.stderr and "Traceback" not in out.stderr


def test_schema_conversions():
    assert schema_args("Read", '{"limit": "7", "file_path": "a.py"}') == \
        ({"file_path": "a.py", "limit": 7}, None)  # wire order, ints
    assert schema_args("Bash", '{"command": 5}') == ({"command": "5"}, None)
    assert schema_args("Read", '{"file_path": ["a"]}')[1].startswith("error:")
    assert "not JSON" in schema_args("Read", "{oops")[1]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "", "tool_call": {"name": "Bash", "args": {"command": "ls"}}},
            {"role": "tool_result", "content": "a.py"},
            {"role": "assistant", "content": "bad call"}, {"role": "tool_result", "content": "error: x"}]
    out = to_openai(msgs)
    assert out[2]["tool_calls"][0]["id"] == out[3]["tool_call_id"] and out[2]["content"] is None
    assert out[5] == {"role": "user", "content": "[tool result] error: x"}  # it answers no call
    assert to_conversation(out[:4]) == msgs[:4]


def test_the_tui_runs_on_a_remote_model(scripted, tmp_path, monkeypatch):
    """`nanocode --base-url URL` opens the TUI: its loader builds the agent on the server, the
    status line names the model and its context, a turn streams the server's reply and runs its
    call; the session is saved with the server as its model."""
    from agent import cli
    from agent.sessions import list_sessions
    from agent.tui import app as tui
    from tui_pilot import drive, submit, until
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    (tmp_path / "a.py").write_text("x = 1\n")
    got = {}
    monkeypatch.setattr(tui, "run", lambda loader, args: got.setdefault("loader", loader) and 0)
    monkeypatch.setattr(cli, "terminal_problem", lambda: None)  # pytest's stdin is a pipe
    assert cli.main(["--base-url", scripted, "--cwd", str(tmp_path), "--trust", "--mode", "auto"]) == 0
    Scripted.script = [[*call_pieces(0, "Read", '{"file_path": "a.py"}'), finish("tool_calls")],
                       [delta(content="x is 1."), finish("stop")]]
    app = tui.NanocodeApp(loader=got["loader"], model_name=got["loader"].name)

    async def body(pilot):
        await until(pilot, lambda: app.agent is not None)
        await submit(pilot, "what is x?")
        await until(pilot, lambda: app.turns == 1)
        status = str(app.query_one("#status").content)
        assert "vendor-model" in status and "/4,096" in status and "NO SANDBOX" not in status
        assert "x is 1." in app.transcript_text()
    drive(app, body)
    saved, = list_sessions(tmp_path)
    meta = json.loads(saved.read_text())["meta"]
    assert meta["model"] == f"{scripted} vendor-model" and meta["turns"][0]["stop_reason"] == "done"


def test_a_continued_conversation_goes_on_with_its_seeds(scripted, tmp_path):
    """Reply n of a conversation samples with seed + n, also after a resume; /clear starts over."""
    said = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
            {"role": "assistant", "content": "d"}]
    Scripted.script = [[delta(content="e"), finish("stop")], [delta(content="f"), finish("stop")]]
    from agent.loop.driver import Agent
    agent = Agent(RemoteSampler(scripted, settings=SamplerSettings(seed=100)), tmp_path,
                  Policy.load(tmp_path), TurnSettings(snapshots=False), messages=said)
    agent.run_turn("go on")
    agent.clear()
    agent.run_turn("new")
    assert [r["seed"] for r in Scripted.requests] == [102, 100]
