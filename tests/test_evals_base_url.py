"""`evals agent --base-url`: any OpenAI-compatible server scored on the agentic suite with the
same tasks, checks and result JSON as a checkpoint, against real servers on loopback:
`nanocode serve` in a subprocess on a tiny random checkpoint (the plumbing: the summary has a
checkpoint run's keys, `evals compare` pairs the two), and a scripted teacher in this process
that replays the oracle's calls for one task (resolved through the real agent loop, on
RemoteSampler, in two worker processes) and gives up on another. Bad URLs, an unreachable
server, a model the server lacks and engine-only flags are one-line errors.

The scripted teacher (Teacher, teacher) and `nanocode serve` (serve) are shared with
tests/test_rollouts_base_url.py."""
import contextlib
import io
import json
import os
import urllib.request
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import evals.agent as ea
from tasks import build_task
from test_remote import call_pieces, delta, finish, serve_in_thread

ROOT = Path(__file__).resolve().parents[1]
GIVE_UP = "i do not know."


class Teacher(BaseHTTPRequestHandler):
    """An OpenAI-compatible server of one model, TEACHER, whose replies are scripted per task: the
    conversation whose first user message holds a prompt in `scripts` gets that script's next
    assistant message (as many as the request already has), or (status, body) when the script
    says so; any other conversation gets GIVE_UP. Subclass it per server with its own scripts."""
    scripts: dict = {}  # task prompt -> [assistant message {"content", "tool_call"?} | (status, body)]

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._send(200, {"data": [{"id": TEACHER, "max_model_len": 32768}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        script = next((s for prompt, s in self.scripts.items() if prompt in user), [])
        k = sum(m["role"] == "assistant" for m in messages)
        step = script[k] if k < len(script) else {"content": GIVE_UP}
        if isinstance(step, tuple):
            return self._send(*step)
        chunks = [delta(role="assistant", content=step["content"])]
        if step.get("tool_call"):
            call = step["tool_call"]
            chunks += [*call_pieces(0, call["name"], json.dumps(call["args"])), finish("tool_calls")]
        else:
            chunks.append(finish("stop"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


TEACHER = "oracle-teacher"


@contextlib.contextmanager
def teacher(scripts: dict):
    """A Teacher with these scripts on loopback: yields its API root."""
    httpd, url = serve_in_thread(type("Scripted", (Teacher,), {"scripts": scripts}))
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()


def oracle_script(task) -> list[dict]:
    """The oracle's assistant messages for `task` (built anywhere: its calls name relative paths)."""
    return [m for m in task.rollout()["messages"] if m["role"] == "assistant"]


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    """A tiny random checkpoint whose tokenizer knows the system prompt, with room for it."""
    from nanocode.checkpoint import save
    from nanocode.protocol import system_prompt
    from tiny_models import random_params, tiny, tiny_tokenizer
    tok = tiny_tokenizer([system_prompt("{cwd}")] * 3 + ["def f(x):\n    return x + 1\n" * 30], 512)
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=2048)
    run = tmp_path_factory.mktemp("base_url") / "runs" / "tinyserved"
    save(run / "checkpoints", 2, random_params(cfg), config=cfg, tokenizer=tok,
         metadata={"step": 2, "stage": "sft"})
    return run


@contextlib.contextmanager
def serve(model):
    """`nanocode serve --model MODEL --port 0` in a subprocess: yields (API root, model id, key)."""
    p = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--model", str(model), "--port", "0"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line, said = p.stdout.readline(), p.stdout.readline()
        assert "nanocode serve: model" in line, p.stderr.read()
        url, key = "http://" + line.rsplit("http://", 1)[1].strip(), said.split()[4]
        req = urllib.request.Request(url + "/models", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            name = json.loads(r.read())["data"][0]["id"]
        yield url, name, key
    finally:
        p.terminate()
        p.wait(30)


def evals(*argv) -> tuple[int, str, str]:
    """`evals ...` in this process: (status, stdout, stderr)."""
    from evals import cli
    with contextlib.redirect_stdout(out := io.StringIO()), contextlib.redirect_stderr(err := io.StringIO()):
        status = cli.main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_nanocode_serve_scores_like_a_checkpoint_and_compares(tiny_ckpt, tmp_path, monkeypatch):
    """The same tiny model scored in-process and behind `nanocode serve`: the server's result
    has the checkpoint run's keys (summary and groups), says which server and model it was, and
    `evals compare` pairs the two per task."""
    common = ["--limit", "2", "--max-steps", "2", "--max-tokens", "12", "--workers", "1", "--quiet"]
    with serve(tiny_ckpt) as (url, name, key):
        monkeypatch.setenv("NANOCODE_API_KEY", key)
        status, _, err = evals("agent", "--base-url", url, *common, "--out", str(tmp_path / "server"))
    assert status == 0, err
    status, _, err = evals("agent", "--model", str(tiny_ckpt), *common, "--out", str(tmp_path / "ckpt"))
    assert status == 0, err
    server = json.loads((tmp_path / "server" / "agent_server.json").read_text())
    ckpt = json.loads((tmp_path / "ckpt" / "agent_step2.json").read_text())
    assert set(server) == set(ckpt)
    for group in ("overall", "trained_families", "eval_only_families"):
        assert set(server[group]) == set(ckpt[group])
    assert (server["model"], server["base_url"], server["step"], server["checkpoint"]) == \
        (f"{url} {name}", url, None, None)
    assert (ckpt["model"], ckpt["base_url"], ckpt["step"]) == ("tinyserved", None, 2)
    assert server["ground"] is None and ckpt["ground"] is True  # engine-only: not the server's
    assert server["max_steps"] == ckpt["max_steps"] == 2 and server["errors"] == 0
    assert server["overall"]["tasks"] == 2 and "model_error" not in server["overall"]["stop_reasons"]
    records = [json.loads(x) for x in (tmp_path / "server" / "agent_server.jsonl").read_text().splitlines()]
    assert all(r["steps"] <= 2 and "error" not in r for r in records)
    assert len(list((tmp_path / "server" / "agent_server_transcripts").glob("*.jsonl"))) == 2
    status, out, err = evals("compare", str(tmp_path / "ckpt"), str(tmp_path / "server"),
                             "--out", str(tmp_path / "paired.json"))
    assert status == 0, err
    paired = json.loads((tmp_path / "paired.json").read_text())
    assert paired["rows"]["all"]["tasks"] == 2 and paired["unpaired"] == 0


def test_a_teacher_replaying_the_oracle_resolves_in_worker_processes(tmp_path, monkeypatch):
    """fix_bug replayed call by call by a scripted server resolves (hidden check, first call, every
    call valid, every edit applied); find_definition, given up on, does not. Two spawned workers,
    each with its own RemoteSampler. Against the oracle baseline, `evals compare` pairs them."""
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    [(_, seed)] = ea.task_jobs(["fix_bug"], 1)
    script = oracle_script(build_task("fix_bug", seed, True, str(tmp_path / "oracle")))
    task = build_task("fix_bug", seed, True, str(tmp_path / "prompt"))
    flags = ["--families", "fix_bug,find_definition", "--per-family", "1", "--max-steps", "8", "--quiet"]
    with teacher({task.prompt: script}) as url:
        status, out, err = evals("agent", "--base-url", url, "--workers", "2", *flags)
    assert status == 0, err
    dest = tmp_path / "home" / "evals" / TEACHER  # the default: the server's model name
    s = json.loads((dest / "agent_server.json").read_text())
    assert (s["model"], s["base_url"], s["workers"], s["errors"]) == (f"{url} {TEACHER}", url, 2, 0)
    assert (s["overall"]["tasks"], s["overall"]["resolved"], s["system_prompt_mismatches"]) == (2, 1, 0)
    fix = s["families"]["fix_bug"]
    assert fix["resolve_rate"] == fix["valid_tool_call_rate"] == fix["first_call_correct_rate"] == 1.0
    assert fix["edits_applied_rate"] == 1.0
    assert fix["tool_calls"] == sum(1 for m in script if m.get("tool_call"))
    assert s["families"]["find_definition"]["resolved"] == 0
    [rec] = [json.loads(x) for x in (dest / "agent_server.jsonl").read_text().splitlines()
             if json.loads(x)["family"] == "fix_bug"]
    saved = json.loads((dest / "agent_server_transcripts" / f"{rec['id']}.jsonl").read_text())
    assert [m.get("tool_call") for m in saved["messages"] if m["role"] == "assistant"] == \
        [m.get("tool_call") for m in script]
    status, _, err = evals("agent", "--policy", "oracle", "--workers", "1", *flags,
                           "--out", str(tmp_path / "ref"))
    assert status == 0, err
    status, out, err = evals("compare", str(tmp_path / "ref"), str(dest), "--out", str(tmp_path / "p.json"))
    assert status == 0, err
    every = json.loads((tmp_path / "p.json").read_text())["rows"]["all"]
    assert (every["tasks"], every["resolved_a"], every["resolved_b"], every["only_a"]) == (2, 2, 1, 1)


@pytest.mark.parametrize("argv,code,says", [
    (["--base-url", "http://127.0.0.1:9/v1"], 6, "cannot reach the model server at http://127.0.0.1:9/v1"),
    (["--base-url", "not-a-url"], 2, "--base-url 'not-a-url' is not an http(s) URL"),
    (["--base-url", "http://127.0.0.1:9/v1", "--no-ground", "--copy-bias", "0.5"], 2,
     "--no-ground, --copy-bias set our engine"),
    (["--base-url", "http://127.0.0.1:9/v1", "--step", "3"], 2, "--step set our engine"),
    (["--base-url", "http://127.0.0.1:9/v1", "--policy", "oracle"], 2, "--base-url goes with --policy model"),
    (["--context", "4096"], 2, "--context goes with --base-url"),
])
def test_bad_server_flags_are_one_line_errors(tmp_path, argv, code, says):
    status, _, err = evals("agent", *argv, "--limit", "1", "--workers", "1", "--out", str(tmp_path), "--quiet")
    assert status == code and err.startswith("error: ") and says in err, err
    assert len(err.strip().splitlines()) == 1 and not list(tmp_path.glob("agent*.json"))


def test_a_model_the_server_lacks_names_the_ones_it_has(tmp_path):
    with teacher({}) as url:
        status, _, err = evals("agent", "--base-url", url, "--model", "gpt-9", "--limit", "1",
                               "--out", str(tmp_path), "--quiet")
    assert status == 6 and f"has no model 'gpt-9' (it has: {TEACHER})" in err, err


def test_best_of_and_turn_flags_apply_to_a_server(tmp_path):
    """--best-of N, --retries and --no-question-guard set the agent, not the engine: they apply to
    a server, and the summary records them."""
    [(_, seed)] = ea.task_jobs(["fix_bug"], 1)
    task = build_task("fix_bug", seed, True, str(tmp_path / "oracle"))
    with teacher({task.prompt: oracle_script(task)}) as url:
        status, _, err = evals("agent", "--base-url", url, "--families", "fix_bug", "--per-family", "1",
                               "--best-of", "2", "--retries", "0", "--no-question-guard", "--workers", "1",
                               "--out", str(tmp_path / "out"), "--quiet")
    assert status == 0, err
    s = json.loads((tmp_path / "out" / "agent_server.json").read_text())
    assert (s["best_of"], s["best_of_temperature"], s["retries"], s["question_guard"]) == (2, 0.7, 0, False)
    assert s["overall"]["resolve_rate"] == s["overall"]["pass_at_1_rate"] == 1.0
    [rec] = [json.loads(x) for x in (tmp_path / "out" / "agent_server.jsonl").read_text().splitlines()]
    assert rec["best_of"]["n"] == 2 and len(rec["best_of"]["rollouts"]) == 2
