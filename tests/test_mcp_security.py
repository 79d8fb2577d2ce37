"""MCP servers that attack or break the client, and a repository that ships one. Each case runs
the real thing (SDK servers from tests/mcp_servers.py, agent/mcp_hub.py, the relay, the policy,
the CLI's start-up question) and checks the damage: what reached the prompt and the terminal,
this process's memory, processes left running, a program run that the user never approved."""
import io
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import cli, commands
from agent.loop.driver import Agent
from agent.mcp_http import MAX_LISTEN
from agent.mcp_hub import McpHub
from agent.samplers.foreign_tools import MAX_DESCRIPTION, Refused, from_schema
from agent.settings import TurnSettings
from mcp_servers import HERE, server_config
from nanocode.protocol import REJECTED
from race_helpers import ScriptedModel
from tools.mcp_config import parse_servers
from tools.permissions import Policy, SettingsError, parse_rule
from tools.workspace import accepted_store

ROOT = Path(__file__).resolve().parents[1]
ESCAPES = ("\x1b", "\x07", "\u202e", "\x9b")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert server.poll() is None, "the test server exited"
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


def hub_of(root, servers: dict, **kw) -> McpHub:
    h = McpHub(root, parse_servers(servers, "test"), **kw)
    h.wait()
    return h


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def test_a_hostile_listing_is_sanitized_capped_and_still_asks(proj):
    h = hub_of(proj, {"hostile": server_config("hostile"), "deep": server_config("deep")}, startup_timeout=60)
    try:
        tools = h.tools()
        assert tools and all(n.startswith("mcp__hostile__") and len(n) <= 64 and
                             n.replace("_", "a").replace("-", "a").isalnum() for n in tools)
        inject = tools["mcp__hostile__inject"]
        assert not any(e in inject.prompt for e in ESCAPES) and len(inject.prompt) < 64 + 10 + MAX_DESCRIPTION
        assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in inject.prompt  # data, not a grant: see below
        shown = h.describe()
        assert "not offered: mcp__hostile__huge: its input schema is over 32 KB" in shown
        assert "not offered: mcp__hostile__bad_arg: argument name 'a b' has characters" in shown
        assert "deep (stdio" in shown and "failed: the server's reply was nested over 64 levels" in shown
        policy = Policy.load(proj, mode="auto")
        agent = Agent(ScriptedModel([("mcp__hostile__inject", {"q": "x"})]), proj, policy,
                      TurnSettings(retries=0, sandbox=False, snapshots=False), mcp=h)
        text = commands.run("/mcp", agent, proj).text
        assert not any(e in text for e in ESCAPES)
        assert not any(e in agent.new_system_prompt() for e in ESCAPES)
        assert agent.run_turn("go", approve=None).tool_calls[0]["result"] == REJECTED  # auto mode: still asks
    finally:
        h.close()


def test_a_deep_schema_fails_its_server_at_once_not_at_the_timeout(proj):
    t = time.monotonic()
    h = hub_of(proj, {"deep": server_config("deep")}, startup_timeout=120)
    h.close()
    assert h.servers["deep"].state == "failed" and time.monotonic() - t < 60


def test_schemas_the_grammar_cannot_write_are_refused_never_crash():
    deep: dict = {"type": "string"}
    for _ in range(100_000):
        deep = {"type": "object", "properties": {"x": deep}}
    for schema, says in [({"type": "array"}, "not an object"), ({"type": "object", "properties": {"d": deep}},
                                                                "nested too deep"),
                         ({"properties": {"a": {"$ref": "#/x"}}}, "argument 'a' is of no single type"),
                         ({"properties": {"e": {"enum": ["ok", "\x1b[2J"]}}}, "an enum is taken only as"),
                         ({"properties": {"n": {"enum": [1, 2]}}}, "an enum is taken only as"),
                         ({"anyOf": [{"type": "object"}]}, "uses anyOf"), ("nope", "not a JSON object"),
                         ({"properties": {f"a{i}": {"type": "string"} for i in range(40)}}, "40 arguments"),
                         ({"required": ["ghost"]}, "requires 'ghost'"),
                         ({"required": [{"a": 1}]}, "required list is malformed"),
                         ({"properties": {"a": {"anyOf": [{"anyOf": [{"type": "string"}]}]}}}, "several schemas")]:
        with pytest.raises(Refused, match=says):
            from_schema("t", "", schema)
    tool = from_schema("t", "d", {"properties": {"o": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                                                 "c": {"const": "x"}, "s": {"type": ["string", "null"]}}})
    assert tool.kinds == (("o", "integer"), ("c", ("x",)), ("s", "string"))


def test_a_flood_is_dropped_before_it_reaches_memory(proj):
    """30 MB in one reply: the relay drops it (over MAX_LINE) and answers its id, so the call
    fails at once and this process never holds it. Control, measured once with the relay's limit
    raised past it: the same call took 28 s and raised this process's peak memory by 181 MB."""
    h = hub_of(proj, {"main": server_config("main")}, startup_timeout=60)
    try:
        assert h.call("mcp__main__echo", {"text": "warm"}) == "warm"
        before, t = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
        result = h.call("mcp__main__flood", {"mb": "30"})
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert result == "error: the MCP server main sent a reply over nanocode's limit of 4,194,304 bytes: nanocode dropped it"
        assert grown < 20 and time.monotonic() - t < 10
        assert h.call("mcp__main__echo", {"text": "after"}) == "after"  # the server goes on
    finally:
        h.close()


BLOATED = """
import json, sys
from agent.mcp_hub import McpHub
from mcp_servers import server_config
from tools.mcp_config import parse_servers

def peak_mb():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) // 1024

servers = {"bloat": {"type": "http", "url": sys.argv[1]}, "main": server_config("main")}
h = McpHub(".", parse_servers(servers, "t"), startup_timeout=60, call_timeout=60)
h.wait()
out = {"control": h.call("mcp__bloat__flood", {"mb": "3", "how": "length"})[:30]}
out["before"] = peak_mb()
for how in sys.argv[2:]:
    out[how] = h.call("mcp__bloat__flood", {"mb": "200", "how": how})
out["grown"] = peak_mb() - out["before"]
out["echo"] = h.call("mcp__bloat__echo", {"text": "after"})
out["main"] = h.call("mcp__main__echo", {"text": "other"})
out["shown"] = h.describe()
h.close()
print(json.dumps(out))
"""


def test_a_huge_http_reply_is_cut_at_the_limit_and_the_session_goes_on(proj):
    """A hostile HTTP server answers a call with 200 MB (a JSON body with and without a
    Content-Length, an SSE stream of small events, a gzip bomb): each call fails with the
    server, the limit and what it sent named; the server's next call and another server's work;
    the client's peak memory (a child process's VmHWM) grows by a few MB, not 200. A 3 MB reply
    still comes through. Without the cap the JSON reply is read whole (mcp's aread)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, HERE, "bloat", str(port)])
    try:
        wait_for_port(port, server)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        child = subprocess.run([sys.executable, "-c", BLOATED, f"http://127.0.0.1:{port}/mcp",
                                "length", "chunked", "sse", "gzip"], cwd=proj, env=env, capture_output=True,
                               text=True, timeout=120)
    finally:
        server.kill()
        server.wait()
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout)
    assert out["control"] == "x" * 30
    assert out["length"] == ("error: the MCP server bloat sent a reply of 209,715,273 bytes, over nanocode's "
                             "limit of 4,194,304: nanocode did not read it")
    over = "error: the MCP server bloat sent a reply over nanocode's limit of 4,194,304 bytes: nanocode "
    assert out["chunked"] == out["sse"] == over + "stopped reading it there and dropped it"
    assert out["gzip"] == ("error: the MCP server bloat sent its reply compressed (gzip) though nanocode "
                           "asked for none: nanocode did not read it")
    assert out["echo"] == "after" and out["main"] == "other" and "bloat (http" in out["shown"]
    assert "): running" in out["shown"] and "failed" not in out["shown"]
    assert out["grown"] < 40, out


LISTENING = """
import json, resource, sys, time
from agent.mcp_hub import McpHub
from tools.mcp_config import parse_servers

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

h = McpHub(".", parse_servers({"bloat": {"type": "http", "url": sys.argv[1]}}, "t"), startup_timeout=60,
           call_timeout=60)
h.wait()
start = cpu()
time.sleep(float(sys.argv[2]))
out = {"cpu": cpu() - start, "read": h.servers["bloat"].http.listened,
       "echo": h.call("mcp__bloat__echo", {"text": "after"})}
out.update(json.loads(h.call("mcp__bloat__stats", {})))
out["shown"] = h.describe()
h.close()
print(json.dumps(out))
"""


def listen_to(proj, listen: str, seconds: float) -> dict:
    """A child process's hub on a bloat server whose GET listening stream is `listen`, for
    `seconds` after start-up: its CPU seconds then, a call after it, the server's GET counts."""
    port = free_port()
    server = subprocess.Popen([sys.executable, HERE, "bloat", str(port), listen])
    try:
        wait_for_port(port, server)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        child = subprocess.run([sys.executable, "-c", LISTENING, f"http://127.0.0.1:{port}/mcp", str(seconds)],
                               cwd=proj, env=env, capture_output=True, text=True, timeout=120)
    finally:
        server.kill()
        server.wait()
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout)


@pytest.mark.parametrize("listen", ["endless", "storm"])
def test_an_endless_or_storming_listening_stream_is_closed_and_not_reopened(proj, listen):
    """A hostile server's GET listening stream: endless small notifications, or an empty stream
    that asks to be reopened at once, forever. The client stops reading at MAX_LISTEN (the server
    sees the stream closed, having written no more than that and the sockets' buffers), reopens
    it no more (one GET seen), spends little CPU, says why in /mcp, and the calls still work.
    Control, measured once on the old transport over the same 3 s: endless: 3.0 CPU s, 6.9 MB
    written, the stream never closed; storm: 2.4 CPU s, 3,351 GETs."""
    out = listen_to(proj, listen, 3.0)
    assert out["echo"] == "after", out
    assert out["gets"] == 1 and out["cpu"] < 1.5, out
    assert "listening stream closed: the server" in out["shown"], out["shown"]
    if listen == "endless":
        assert out["get_closed"] == 1 and out["get_bytes"] < 16 << 20, out
        assert MAX_LISTEN < out["read"] <= MAX_LISTEN + (64 << 10), out
        assert ("the server sent over nanocode's limit of 262,144 bytes on its listening stream in all"
                in out["shown"])
    else:
        assert "made nanocode reopen its listening stream within 0.5 s of the last open" in out["shown"]


def test_startup_hangs_and_missing_commands_fail_their_server_only(proj):
    t = time.monotonic()
    h = hub_of(proj, {"mute": server_config("mute"), "ghost": {"command": "no-such-mcp-server-xyz"},
                      "unset": {"command": "${NO_SUCH_VAR_XYZ}"}}, startup_timeout=2)
    try:
        s = h.servers
        assert s["mute"].why == "did not start within 2 s" and time.monotonic() - t < 15
        assert "cannot start 'no-such-mcp-server-xyz'" in s["ghost"].why
        assert "${NO_SUCH_VAR_XYZ} is not set" in s["unset"].why
        assert h.tools() == {} and all(x.state == "failed" for x in s.values())
    finally:
        h.close()


CHILD = """
import os, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from agent.mcp_hub import McpHub
from mcp_servers import server_config
from tools.mcp_config import parse_servers
servers = {{"s": server_config("stubborn", env={{"PIDFILE": "pids"}})}}
h = McpHub(os.getcwd(), parse_servers(servers, "t"), startup_timeout=600)
while not os.path.exists("pids") or not open("pids").read():
    time.sleep(0.02)
print(open("pids").read(), flush=True)
if sys.argv[1] == "close":
    h.close()
    print("closed", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["close", "kill"])
def test_servers_never_outlive_nanocode(proj, how):
    """A server that ignores SIGTERM and the end of its stdin: close() ends it while nanocode
    lives on (the SDK: stdin closed, SIGTERM, then SIGKILL to its group); a nanocode killed
    outright takes it along too (the relay's PR_SET_PDEATHSIG: without it, both stay)."""
    code = CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"))
    p = subprocess.Popen([sys.executable, "-c", code, how], cwd=proj, stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in p.stdout.readline().split()]  # the server and its relay
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    if how == "kill":
        p.send_signal(signal.SIGKILL)
    else:
        assert p.stdout.readline() == "closed\n" and p.poll() is None
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:  # never leave them to the rest of the run
        os.kill(pid, signal.SIGKILL)
    p.kill()
    p.wait(60)
    assert not left


def interactive(monkeypatch, answer):
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: answer)


def test_a_project_mcp_json_starts_nothing_until_accepted(proj, monkeypatch, capsys):
    """A repository's .mcp.json names a program; it runs only once the user accepted exactly
    that file, and a change to it must be accepted again (tools/workspace.project_settings)."""
    marker = proj / "PWNED"
    evil = {"command": "sh", "args": ["-c", f"touch {marker}; exec {sys.executable} {HERE} main"]}
    (proj / ".mcp.json").write_text(json.dumps({"mcpServers": {"evil": evil}}))

    def started() -> McpHub:
        policy = Policy.load(proj)
        h = McpHub(proj, policy.mcp_servers, policy.mcp_ignored, startup_timeout=60)
        h.wait()
        h.close()
        return h
    h = started()
    assert h.servers == {} and not marker.exists()
    assert "evil: not approved: " in h.describe() and "not accepted yet" in h.describe()
    assert cli.review_settings(proj, headless=True) is False
    assert ".mcp.json" in capsys.readouterr().err and not accepted_store().exists()
    interactive(monkeypatch, "y")
    cli.review_settings(proj, headless=False)
    assert f"project MCP servers {proj / '.mcp.json'}" in capsys.readouterr().err  # shown before the question
    h = started()
    assert h.servers["evil"].state == "stopped" and marker.exists()
    marker.unlink()
    (proj / ".mcp.json").write_text(json.dumps({"mcpServers": {"evil": {**evil, "args": ["-c", "touch x"]}}}))
    h = started()
    assert h.servers == {} and not marker.exists() and "not accepted yet" in h.describe()
    interactive(monkeypatch, "n")
    cli.review_settings(proj, headless=False)
    assert "changed since you accepted" in capsys.readouterr().err
    assert Policy.load(proj, trust_settings=True).mcp_servers[0].name == "evil"  # --trust-settings


def test_the_model_cannot_approve_servers_for_itself(proj):
    policy = Policy.load(proj, mode="auto")
    edit = policy.check("Edit", {"file_path": ".mcp.json", "new_string": "{}"})
    assert edit.action == "ask" and "the project's MCP servers" in edit.reason
    bash = policy.check("Bash", {"command": "echo '{}' > .mcp.json"})
    assert bash.action == "ask" and "nanocode permission settings" in bash.reason


def test_bad_configs_and_rules_say_what_and_how(proj, tmp_path):
    user = tmp_path / "user.json"
    for servers, says in [({"x": {"command": 3}}, '"mcpServers.x".command must be the program'),
                          ({"x": {"type": "sse", "url": "http://h"}}, "SSE servers are not supported"),
                          ({"x": {"command": "a", "cwd": "/"}}, "unknown key 'cwd'"),
                          ({"x": {"type": "http", "url": "ftp://h"}}, "url must be an http"),
                          ({"a b": {"command": "a"}, "a_b": {"command": "b"}}, "reads the same as 'a_b'")]:
        user.write_text(json.dumps({"mcpServers": servers}))
        with pytest.raises(SettingsError, match="fix: e.g.") as e:
            Policy.load(proj, user_file=user)
        assert says in str(e.value) and str(user) in str(e.value)
    (proj / ".mcp.json").write_text('{"servers": {}}')
    with pytest.raises(SettingsError, match='only the key "mcpServers"'):
        Policy.load(proj, trust_settings=True)
    assert parse_rule("mcp__files") == ("mcp__files__*", None)
    assert parse_rule("mcp__files__read_*") == ("mcp__files__read_*", None)
    with pytest.raises(ValueError, match="not a rule"):
        parse_rule("mcp__files(x)")
