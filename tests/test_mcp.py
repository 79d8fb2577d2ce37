"""MCP servers as tools (agent/mcp_hub.py), against real servers written with the SDK
(tests/mcp_servers.py) over stdio and streamable HTTP on loopback: tools listed with their kinds
(and the ones the grammar cannot write refused, with the reason), typed calls, a call that hangs,
Ctrl-C, a server that crashes mid-call, /mcp; then the agent calling them end to end: through the
permission policy (ask, deny, allow, always, plan mode), undo, the result budget, our engine's
grammar, and a remote model's tool list. Hostile servers, floods, orphans and the approval of a
project's .mcp.json are tests/test_mcp_security.py's."""
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
import test_remote as remote_helpers

from agent import commands
from agent.loop.driver import Agent
from agent.mcp_hub import McpHub
from agent.settings import TurnSettings
from mcp_servers import HERE, server_config
from nanocode.protocol import REJECTED
from race_helpers import ScriptedModel
from tiny_models import commit_all
from tools.mcp_config import parse_servers
from tools.permissions import Policy

TURN = TurnSettings(retries=0, sandbox=False, memory=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp") / "proj"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    commit_all(root)
    return root.resolve()


@pytest.fixture(scope="module")
def http_url():
    port = free_port()
    p = subprocess.Popen([sys.executable, HERE, "http", str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert p.poll() is None, p.stderr.read().decode()
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    p.kill()
    p.wait()


@pytest.fixture(scope="module")
def hub(project, http_url):
    """main, crashy and an HTTP server, started once for the module; a secret in the
    environment that only main's config passes on (by name)."""
    os.environ["NANOCODE_TEST_SECRET"] = "s3cret"
    servers = parse_servers({"main": server_config("main", env={"GIVEN": "${NANOCODE_TEST_SECRET}"}),
                             "crashy": server_config("crashy"),
                             "web": {"type": "http", "url": http_url}}, "test")
    h = McpHub(project, servers, call_timeout=3.0, startup_timeout=60.0)
    h.wait()
    yield h
    h.close()
    del os.environ["NANOCODE_TEST_SECRET"]


def agent_for(hub, project, calls, mode="ask", allow=(), deny=(), **turn):
    policy = Policy.load(project, mode=mode)
    policy.allow, policy.deny = list(allow), list(deny)
    return Agent(ScriptedModel(calls), project, policy, replace(TURN, **turn), mcp=hub)


def test_tools_are_listed_with_their_kinds_and_refusals_say_why(hub):
    tools = hub.tools()
    assert tools["mcp__main__add"].prompt == \
        "mcp__main__add(a: number, b?: number, negate?: boolean, unit?: m|km): add numbers"
    assert tools["mcp__main__echo"].changes_files is False  # readOnlyHint
    assert tools["mcp__main__write_file"].changes_files is True
    assert "mcp__main__tags" not in tools and "mcp__web__echo" in tools
    shown = hub.describe()
    assert "main (stdio" in shown and "): running" in shown and "web (http http://127.0.0.1" in shown
    assert "not offered: mcp__main__tags: argument 'tags' is array" in shown


def test_calls_take_typed_values_and_the_server_runs_in_the_project(hub, project):
    assert hub.call("mcp__main__add", {"a": "2.5", "b": "1", "negate": "true", "unit": "km"}) == "-3.5 km"
    assert hub.call("mcp__web__add", {"a": 4}) == "4"
    assert hub.call("mcp__main__echo", {"text": "ab", "times": "x"}) == \
        "error: argument times must be an integer, not 'x'"
    where = hub.call("mcp__main__whereami", {})
    assert f"cwd={project}" in where and "seen=[]" in where  # no secret unless the config names it
    assert "given=s3cret" in where  # ${VAR}: filled when the server starts


def test_a_call_that_hangs_times_out_and_ctrl_c_abandons_one(hub):
    t = time.monotonic()
    assert hub.call("mcp__main__sleep", {"seconds": "60"}) == \
        "error: mcp__main__sleep did not answer within 3 s; nanocode stopped waiting (the server may still be running it)"
    assert time.monotonic() - t < 10
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t = time.monotonic()
    assert hub.call("mcp__main__sleep", {"seconds": "60"}, cancel).startswith("error: cancelled by user")
    assert time.monotonic() - t < 3
    assert hub.call("mcp__main__echo", {"text": "still here"}) == "still here"


def test_a_server_that_crashes_is_failed_and_the_session_goes_on(hub, project):
    agent = agent_for(hub, project, [("mcp__crashy__crash", {}), ("mcp__main__echo", {"text": "ok"})],
                      allow=["mcp__crashy", "mcp__main__*"])
    res = agent.run_turn("crash it, then echo")
    crash, echo = res.tool_calls
    assert crash["result"] == ("error: the MCP server crashy stopped: the server exited (stderr: crashy: "
                               "going down on purpose); /mcp shows it")
    assert echo["result"] == "ok" and res.stop_reason == "done"
    assert not any(n.startswith("mcp__crashy__") for n in hub.tools())  # no longer offered
    shown = commands.run("/mcp", agent, project).text
    assert "crashy (stdio" in shown and "failed: the server exited" in shown and "main (stdio" in shown
    assert hub.call("mcp__crashy__echo", {"text": "x"}).startswith("error: mcp__crashy__echo's MCP server is not running")


def test_the_agent_asks_and_a_yes_runs_it_undoably(hub, project):
    asked = []
    agent = agent_for(hub, project, [("mcp__main__write_file", {"name": "out.txt", "content": "hi"})], mode="auto")
    assert "mcp__main__write_file(name, content): write a file" in agent.new_system_prompt()
    res = agent.run_turn("write it", approve=lambda n, a, d: asked.append(d.reason) or "yes")
    assert asked == ["calls the MCP tool mcp__main__write_file (a rule mcp__main__write_file or "
                     "mcp__main__* allows it)"]  # auto mode too: what it does is the server's
    assert res.tool_calls[0]["result"] == "wrote out.txt" and (project / "out.txt").read_text() == "hi"
    agent.undo()  # a server tool not marked read-only is snapshotted like an Edit
    assert not (project / "out.txt").exists()


def test_no_deny_and_rules(hub, project):
    call = [("mcp__main__write_file", {"name": "no.txt", "content": "x"})]
    res = agent_for(hub, project, call).run_turn("write", approve=lambda *a: "no")
    assert res.tool_calls[0]["result"] == REJECTED and res.stop_reason == "rejected"
    res = agent_for(hub, project, call).run_turn("write", approve=None)  # headless: nobody to ask
    assert res.tool_calls[0]["result"] == REJECTED
    res = agent_for(hub, project, call, mode="auto", allow=["mcp__main__*"], deny=["mcp__main__write_*"]).run_turn("w")
    assert res.tool_calls[0]["result"] == "error: denied by rule"
    assert not (project / "no.txt").exists()
    agent = agent_for(hub, project, call * 2, allow=["mcp__main"])
    assert agent.run_turn("write", approve=None).tool_calls[0]["result"] == "wrote no.txt"


def test_always_adds_a_session_rule_for_that_tool(hub, project):
    echo = ("mcp__main__echo", {"text": "a"})
    agent = agent_for(hub, project, [echo, ("mcp__main__echo", {"text": "b"})])
    answers = iter(["always"])
    res = agent.run_turn("echo twice", approve=lambda *a: next(answers))
    assert [c["result"] for c in res.tool_calls] == ["a", "b"] and agent.policy.session == ["mcp__main__echo"]


def test_plan_mode_runs_only_read_only_tools(hub, project):
    agent = agent_for(hub, project, [("mcp__main__write_file", {"name": "p.txt", "content": "x"}),
                                     ("mcp__main__echo", {"text": "read"})], mode="plan", allow=["mcp__main"])
    offered = [t.name for t in agent.offered_tools()]
    assert offered[:2] == ["Read", "Grep"] and "mcp__main__echo" in offered and "mcp__main__write_file" not in offered
    res = agent.run_turn("plan it")
    assert res.tool_calls[0]["result"] == ("error: plan mode is read-only: this MCP tool's server does not "
                                           "mark it read-only (readOnlyHint)")
    assert res.tool_calls[1]["result"] == "read" and not (project / "p.txt").exists()


def test_a_large_result_is_cut_to_the_result_budget(hub, project):
    agent = agent_for(hub, project, [("mcp__main__flood", {"mb": "1"})], allow=["mcp__main"])
    result = agent.run_turn("flood").tool_calls[0]["result"]
    assert agent.sampler.count(result) <= agent.result_budget
    assert result.startswith("line of flood output\n") and "more lines cut to fit the context; ask for less]" in result


@pytest.mark.slow  # compiles the tiny engine's buckets: ~30 s on a loaded 2-core machine
def test_our_engine_writes_an_mcp_call_through_the_grammar(engine, tok, project):
    """The real engine under the grammar mask, its tokens scripted (tests/scripted_agent.py): the
    mask admits the call of an MCP tool with an integer argument, and the session holds exactly
    the rendered conversation (MCP tools in the system prompt included)."""
    from agent.samplers.engine import EngineSampler
    from agent.settings import SamplerSettings
    from scripted_agent import Script, reply
    small = McpHub(project, parse_servers({"main": server_config("main")}, "test"), startup_timeout=60)
    try:
        echo = tok.encode_tool_call({"name": "mcp__main__echo", "args": {"text": "hi", "times": "3"}})
        script = Script(tok, [echo, reply(tok, "done")])
        script.V = engine.cfg.vocab_size
        policy = Policy.load(project, mode="ask")
        policy.allow = ["mcp__main__echo"]
        agent = Agent(EngineSampler(engine, project, SamplerSettings(max_tokens=64), script), project, policy,
                      TURN, mcp=small)
        script.agent = agent
        res = agent.run_turn("echo hi three times")
        assert [(c["name"], c["result"]) for c in res.tool_calls] == [("mcp__main__echo", "hihihi")]
        assert res.answer == "done" and all(script.identity)
        assert "mcp__main__echo(text, times?: integer): say text back" in agent.messages[0]["content"]
    finally:
        small.close()


def test_a_remote_model_gets_the_tools_as_function_schemas(hub, project):
    R = remote_helpers
    R.Scripted.script, R.Scripted.requests = [
        [*R.call_pieces(0, "mcp__main__add", '{"a": 2.5, "negate": true, "unit": "km"}'), R.finish("tool_calls")],
        [R.delta(content="it is -2.5 km."), R.finish("stop")]], []
    httpd, url = R.serve_in_thread(R.Scripted)
    try:
        from agent.samplers.remote import RemoteSampler
        policy = Policy.load(project, mode="ask")
        policy.allow = ["mcp__main__add"]
        agent = Agent(RemoteSampler(url), project, policy, TURN, mcp=hub)
        res = agent.run_turn("add")
    finally:
        httpd.shutdown()
    assert res.tool_calls == [{"name": "mcp__main__add", "args": {"a": "2.5", "negate": "true", "unit": "km"},
                               "result": "-2.5 km"}]
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in R.Scripted.requests[0]["tools"]}
    assert schema["mcp__main__add"] == {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}, "negate": {"type": "boolean"},
        "unit": {"type": "string", "enum": ["m", "km"]}}}
    assert {"Read", "Edit", "Grep", "Bash", "mcp__main__echo"} <= set(schema)


def test_the_grammar_writes_each_kind_and_nothing_else(tok):
    """Our model's calls of tools from outside under the mask alone (no engine): each value as its
    kind allows, a call with no argument ends after its name, and random walks finish only calls
    that their tool takes (protocol.check_call, then foreign_tools.call_values)."""
    import numpy as np

    from agent.masks.grammar import Grammar
    from agent.samplers.foreign_tools import call_values, from_schema
    from grammar_walks import admits, walk
    from nanocode.protocol import TOOLS, check_call
    add = from_schema("mcp__m__add", "", {"properties": {
        "a": {"type": "number"}, "n": {"type": "integer"}, "neg": {"type": "boolean"},
        "unit": {"enum": ["m", "km"]}, "note": {"type": "string"}}, "required": ["a"]})
    ping = from_schema("mcp__m__ping", "", {"type": "object"})
    g, rng, tools = Grammar(tok, 512), np.random.default_rng(0), (TOOLS["Read"], add, ping)
    ok = lambda name, **args: admits(g, tok, None, rng, name, tools, **args)  # noqa: E731
    assert ok("mcp__m__add", a="-2.5e3", n="-12", neg="true", unit="km", note="any text")
    assert ok("mcp__m__add", a="7") and ok("mcp__m__ping") and ok("Read", file_path="a.py")
    for bad in ({"a": "2."}, {"a": "x"}, {"a": "1", "n": "1.5"}, {"a": "1", "neg": "yes"},
                {"a": "1", "unit": "mi"}, {"a": "1", "unit": "kmh"}, {"n": "1"}, {"a": "1", "zz": "1"}):
        assert not ok("mcp__m__add", **bad), bad
    assert not ok("mcp__m__ping", x="1") and not ok("mcp__m__pin")
    table = {**TOOLS, add.name: add, ping.name: ping}
    finished = 0
    for _ in range(300):
        ids = walk(g, tok, None, rng, tools=tools, max_len=60)
        if ids[-1] == tok.encode_special("<|tool_call_end|>"):
            c = tok.parse_tool_call(ids)
            assert check_call(c["name"], c["args"], table) is None, c
            if c["name"] in (add.name, ping.name):
                assert call_values(table[c["name"]], c["args"])[1] is None, c
                finished += 1
    assert finished > 30
    page = from_schema("mcp__m__page", "", {"properties": {"limit": {"type": "string"}}})
    ids = tok.encode_tool_call({"name": page.name, "args": {"limit": "007"}})
    assert admits(g, tok, None, rng, page.name, (page,), limit="007")
    assert tok.parse_tool_call(ids)["args"] == {"limit": "007"}  # its kind, not our Read's int limit


def test_mcp_reconnect_restarts_failed_servers_and_their_tools_come_back(project):
    """A stdio server that crashed mid-call, and one that could not start (its program exits
    until a file exists): `/mcp reconnect` starts both again without leaving nanocode, their
    tools are offered (and in the system prompt) from the next turn, and a call works."""
    late = {"command": "sh", "args": ["-c", 'test -f ready || exit 1; exec "$0" "$@"', sys.executable, HERE, "main"]}
    h = McpHub(project, parse_servers({"crashy": server_config("crashy"), "late": late}, "test"),
               call_timeout=10.0, startup_timeout=60.0)
    try:
        h.wait()
        agent = agent_for(h, project, [("mcp__crashy__crash", {})], allow=["mcp__crashy", "mcp__late"])
        agent.run_turn("crash it")
        assert h.servers["late"].state == h.servers["crashy"].state == "failed"
        assert "mcp__late__echo" not in agent.messages[0]["content"] and not h.tools()
        assert commands.run("/mcp reconnect nosuch", agent, project).text == \
            "error: no MCP server named nosuch (configured: crashy, late); /mcp lists them"
        (project / "ready").write_text("")
        shown = commands.run("/mcp reconnect", agent, project).text
        assert "crashy (stdio" in shown and "late (stdio" in shown and shown.count("): running") == 2
        assert shown.endswith("their tools are offered from the next turn")
        assert {"mcp__crashy__echo", "mcp__late__echo"} <= {t.name for t in agent.offered_tools()}
        assert "mcp__late__echo(text, times?: integer): say text back" in agent.messages[0]["content"]
        agent.sampler = ScriptedModel([("mcp__late__echo", {"text": "back"}), ("mcp__crashy__echo", {"text": "too"})])
        notes = []
        res = agent.run_turn("echo on both", on_event=notes.append)
        assert any(getattr(e, "text", "").startswith("the MCP servers were reconnected: it goes on with the new "
                                                     "system prompt") for e in notes)
        assert [c["result"] for c in res.tool_calls] == ["back", "too"]
        assert commands.run("/mcp reconnect", agent, project).text.startswith("no MCP server has failed;")
        pid = h.call("mcp__late__whereami", {})
        shown = commands.run("/mcp reconnect late", agent, project).text  # a running one, by name
        assert shown.startswith("late (stdio") and "crashy" not in shown
        assert h.call("mcp__late__whereami", {}) != pid  # a new process
        assert commands.run("/mcp reconnect all", agent, project).text.count("): running") == 2
        assert commands.run("/mcp restart", agent, project).text.startswith("unknown /mcp argument 'restart'")
    finally:
        h.close()
    assert "/mcp [reconnect [NAME|all]]" in commands.help_text()
