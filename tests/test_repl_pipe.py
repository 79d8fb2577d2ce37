"""The --plain face through a real pipe: `nanocode --plain` as a subprocess, its requests and
approval answers on stdin, its model a scripted OpenAI-compatible server on loopback
(`--base-url`), so every reply, and so every approval, is known in advance. Checked on disk and in
what the server was sent: an approval reads exactly one line, an answer that is not one is a no
(said once) and the next line is the next request, and the end of input at an approval is a no
and a clean exit. And the words: /session, /undo, /diff and a resumed session name requests as
the user counts them, and the real command that resumes."""
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]


def call(name, **args):
    return {"tool_calls": [{"index": 0, "id": "c", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}


class Scripted(BaseHTTPRequestHandler):
    """/v1/models, then per POST the next reply of `script` (a delta), streamed; the request
    bodies are kept in `requests`."""
    script: list = []
    requests: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._send("application/json", json.dumps(
            {"data": [{"id": "scripted", "max_model_len": 8192}]}).encode())

    def do_POST(self):
        Scripted.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        delta = Scripted.script.pop(0)
        finish = "tool_calls" if "tool_calls" in delta else "stop"
        events = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 5}}]
        self._send("text/event-stream", b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
                   + b"data: [DONE]\n\n")

    def _send(self, kind, data):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    Scripted.script, Scripted.requests = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def plain(url, proj, stdin: str, *flags) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", "--plain", "--base-url", url, "--cwd",
                           str(proj), *flags], input=stdin, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_an_approval_reads_one_line_and_the_rest_stay_requests(server, proj):
    """Three requests, each met by a call that asks: "maybe" is no answer, so a no (it used to
    re-ask, eating the next request and the "y" after it); "y" lets the second edit run; the
    input ends at the third approval: a no, and the REPL leaves with status 0."""
    edit = call("Edit", file_path="a.py", old_string="x = 1", new_string="x = 2")
    Scripted.script = [edit, edit, {"content": "done."}, call("Bash", command="echo hi > b.txt")]
    r = plain(server, proj, "change x\nmaybe\nchange x again\ny\nmake b.txt\n")
    out = r.stdout
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert out.count("allow? ") == 3, out
    assert out.count("is not an answer") == 1 and "'maybe' is not an answer (y / n / a): taken as no" in out
    assert "(end of input: rejected)" in out
    assert (proj / "a.py").read_text() == "x = 2\n" and not (proj / "b.txt").exists()
    asked = [[m["content"] for m in req["messages"] if m["role"] == "user"] for req in Scripted.requests]
    assert asked[-1] == ["change x", "change x again", "make b.txt"] and not Scripted.script
    session = json.loads(next((proj / ".nanocode" / "sessions").glob("*.jsonl")).read_text())
    assert [a["answer"] for a in session["meta"]["approvals"]] == ["no", "yes", "no"]


def test_session_and_undo_name_what_the_user_sees(server, proj):
    """A session before this one leaves two snapshot turns, so this one-request session's edit
    is snapshot 3: /undo and /diff call it request 1 (they said "turn 3"), /session prints the
    command that resumes it (it printed a literal `--resume ID`), and resuming says that the
    request was undone."""
    done = {"content": "done."}
    Scripted.script = [call("Edit", file_path="b.txt", new_string="b\n"), done,
                       call("Edit", file_path="c.txt", new_string="c\n"), done,
                       call("Edit", file_path="a.py", old_string="x = 1", new_string="x = 2"), done]
    first = plain(server, proj, "create b.txt\ncreate c.txt\n", "--mode", "auto")
    assert first.returncode == 0 and (proj / "c.txt").exists(), first.stderr[-2000:]
    r = plain(server, proj, "set x to 2\n/session\n/undo\n/undo yes\n/diff\n", "--mode", "auto")
    out = r.stdout
    sid = out.rsplit("nanocode --resume ", 1)[1].split()[0]
    [path] = (proj / ".nanocode" / "sessions").glob(f"*-{sid}.jsonl")
    assert f"session {sid}: {path}\nresume this session with: nanocode --resume {sid}\n" in out
    assert "--resume ID" not in out and "turn 3" not in out, out
    assert "/undo would undo request 1: restore a.py. Type /undo yes to do it" in out
    assert "undid request 1: restored a.py" in out and (proj / "a.py").read_text() == "x = 1\n"
    assert "request 1 was undone: none of its changes are in the files now" in out
    again = plain(server, proj, "", "--resume", sid)
    assert f"continuing session {sid} (1 earlier requests; request 1 undone with /undo)" in again.stdout
