"""Context budgeting (agent/loop/context.py) alone and through the real driver on a tiny engine: each
result and the memory file cut to its share with a note, old outputs then old turns dropped
when a request does not fit, /compact's digests, a request too long for any context."""
import pytest

from nanocode.protocol import DROPPED
from scripted_agent import call, make, reply


def test_drop_oldest_takes_outputs_then_whole_turns_never_the_request():
    from agent.loop.context import drop_oldest
    from agent.loop.conversation import Conversation
    count = len  # characters stand in for tokens
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "one"},
            {"role": "assistant", "content": "", "tool_call": {"name": "Bash", "args": {"command": "ls"}}},
            {"role": "tool_result", "content": "x" * 100}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "two"}]
    conv = Conversation("/p", msgs)
    conv.turn_start = 5
    msgs = conv.messages
    assert drop_oldest(conv, count) == "output" and msgs[3]["content"] == DROPPED and conv.turn_start == 5
    assert drop_oldest(conv, count) == "turn" and conv.turn_start == 1  # the first turn goes, the system prompt stays
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "two"
    assert drop_oldest(conv, count) is None
    assert conv.transcript() == [{"role": "system", "content": "s"}, {"role": "user", "content": "one"},
                                 {"role": "assistant", "content": "", "tool_call": {"name": "Bash", "args": {"command": "ls"}}},
                                 {"role": "tool_result", "content": "x" * 100}, {"role": "assistant", "content": "ok"},
                                 {"role": "user", "content": "two"}]  # the transcript keeps it all
    assert conv.absolute(1) == 5


def test_context_drops_old_output_then_turns(engine, tok, repo):
    rd = call(tok, "", "Read", file_path="big.py", limit="50")
    agent, script = make(engine, repo, [rd, reply(tok, "ok")] * 3, max_tokens=64)
    events = []
    agent.run_turn("read it", on_event=events.append)
    assert not [e for e in events if e.kind == "status"]
    agent.run_turn("again", on_event=events.append)
    status = [e.text for e in events if e.kind == "status"]
    assert status == ["context full: dropped 1 old tool output"]
    assert agent.messages[3]["content"] == DROPPED and agent.messages[7]["content"] != DROPPED
    assert all(script.identity)
    # a reply reserve that only a nearly empty history leaves room for: whole turns go too
    n_min = len(tok.render_conversation({"messages": [agent.messages[0], {
        "role": "user", "content": "third"}]})[0]) + 1
    agent.sampler.reserve = engine.max_len - n_min - 10
    script.replies, script.i = [reply(tok, "fine")], -1
    events.clear()
    res = agent.run_turn("third", on_event=events.append)
    status = [e.text for e in events if e.kind == "status"]
    assert status == ["context full: dropped 1 old tool output and 2 earlier turns"], status
    assert agent.messages[0]["role"] == "system" and agent.messages[1]["content"] == "third"
    assert res.answer == "fine" and all(script.identity)


def test_the_saved_session_keeps_every_turn(engine, tok, repo, tmp_path, monkeypatch):
    """Turns that left a full context stay in the session file, whole, and each turn record
    points at its own request there; --continue loads them all and fits them again."""
    from agent.sessions import SessionStore, load_session
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    rd = call(tok, "", "Read", file_path="big.py", limit="50")
    agent, script = make(engine, repo, [rd, reply(tok, "ok")] * 3 + [reply(tok, "fine")], max_tokens=64)
    agent.conv.store = SessionStore(repo, agent.meta["id"])
    asks = ["read it", "again", "and again", "fourth"]
    for i, ask in enumerate(asks):
        if i == 3:  # room for the request alone: every earlier turn leaves the context
            n_min = len(tok.render_conversation({"messages": [agent.messages[0], {
                "role": "user", "content": ask}]})[0]) + 1
            agent.sampler.reserve = engine.max_len - n_min - 10
        agent.run_turn(ask)
    assert [m["content"] for m in agent.messages if m["role"] == "user"] == ["fourth"]
    messages, meta = load_session(agent.conv.store.path)
    assert [m["content"] for m in messages if m["role"] == "user"] == asks
    assert [messages[t["user_index"]]["content"] for t in meta["turns"]] == asks
    outs = [m["content"] for m in messages if m["role"] == "tool_result"]
    assert len(outs) == 3 and DROPPED not in "".join(outs) and outs[0].startswith("    1→value_0")
    again, _ = make(engine, repo, [reply(tok, "sure")], messages=messages, meta=meta, max_tokens=64)
    again.load_context()  # what build_agent does for --continue: the status shows a true count
    assert 0 < again.sampler.context_used(again.messages) <= engine.max_len
    assert again.run_turn("fifth").answer == "sure"
    assert [m["content"] for m in again.conv.transcript() if m["role"] == "user"] == [*asks, "fifth"]


def test_big_results_are_cut_to_their_share(engine, tok, repo):
    """A default Read of a long log and `seq 1 200000` used to end the turn ("does not fit the
    context"): each result now takes at most its share, says how to see the rest, and the
    turn goes on to an answer."""
    (repo / "app.log").write_text("".join(f"2026-12-01 12:00:{i % 60:02d} INFO worker {i} handled "
                                          f"request /api/items/{i} in {i % 97} ms\n" for i in range(300)))
    agent, _ = make(engine, repo, [call(tok, "", "Read", file_path="app.log"),
                                   call(tok, "", "Bash", command="seq 1 200000"),
                                   reply(tok, "done")], mode="auto")
    res = agent.run_turn("what is in the log?", approve=lambda *a: "yes")
    assert res.stop_reason == "done" and res.answer == "done"
    read, bash = (c["result"] for c in res.tool_calls)
    budget = agent.result_budget
    assert budget == (engine.max_len - agent.sampler.reserve) // 2
    assert len(tok.encode(read)) <= budget and len(tok.encode(bash)) <= budget
    last = int(read.split("\n")[-2].split("→")[0])  # the last line shown, then where to go on
    assert read.split("\n")[-1] == f"[cut to fit the context: {agent.read_limit - last} more " \
        f"lines; Read it with offset={last} to see more]"
    lines = bash.split("\n")
    assert lines[0] == "1" and lines[-1] == "200000" and "lines cut to fit the context" in bash
    # the default limit follows the context: fewer lines asked for than Read's own default
    assert 20 <= agent.read_limit < 100


@pytest.mark.parametrize("name, result, says", [
    ("Grep", "\n".join(f"src/m{i}.py:{i}:needle = {i}" for i in range(200)), "narrow the pattern"),
    ("Bash", "y" * 20000, "cut to fit the context"),
    ("Read", "    1→" + "z" * 20000, "cut to fit the context"),
    ("Bash", "\n".join(["Traceback"] + [f"  frame {i}" for i in range(300)] + ["ValueError: boom"]),
     "cut to fit the context"),
])
def test_fit_result_stays_in_budget(tok, name, result, says):
    from agent.loop.context import fit_result
    count = lambda text: len(tok.encode(text))  # noqa: E731
    for budget in (64, 200):
        out = fit_result(name, result, count, budget)
        assert len(tok.encode(out)) <= budget and says in out
        assert out.startswith(result[:5])
    if name == "Bash" and "ValueError" in result:  # the end, where the error is, is kept
        out = fit_result(name, result, count, 200)
        assert out.endswith("ValueError: boom") and "lines cut to fit the context" in out
    assert fit_result(name, "short", count, 64) == "short"


def test_digest_says_what_a_dropped_output_held():
    from agent.loop.context import digest
    read = "    1→import os\n    2→def parse(x):\n    3→class Tok:"
    assert digest({"name": "Read", "args": {"file_path": "p.py"}}, read) == \
        f"{DROPPED} Read p.py: 3 lines, defines parse, Tok"
    assert digest({"name": "Bash", "args": {"command": "seq 3"}}, "1\n2\n3") == \
        f"{DROPPED} Bash seq 3: 3 lines, the last: 3"
    assert digest({"name": "Grep", "args": {"pattern": "zz"}}, "no matches found") == \
        f"{DROPPED} Grep 'zz': no matches"
    assert digest(None, "x") == DROPPED


def test_a_long_memory_file_fits_its_share(engine, tok, repo):
    """A 4.8 KB AGENTS.md made every request of that project fail: it is cut to its share of
    the context (the note says /memory shows it all) and requests run."""
    from agent.loop.context import memory_budget
    (repo / "AGENTS.md").write_text("".join(f"- rule {i}: always run the tests in tests/unit_{i} "
                                            f"before committing a change\n" for i in range(80)))
    assert len((repo / "AGENTS.md").read_text()) > 4800
    agent, _ = make(engine, repo, [reply(tok, "ok")])
    res = agent.run_turn("hi")
    assert res.stop_reason == "done"
    system = agent.messages[0]["content"]
    assert "- rule 0: always run" in system and "AGENTS.md cut to fit the context" in system
    notes = system.split("project notes (AGENTS.md):\n")[1]
    assert len(tok.encode(notes)) <= memory_budget(engine.max_len)


def test_compact_drops_old_outputs_now(engine, tok, repo):
    rd = call(tok, "", "Read", file_path="big.py", limit="20")
    agent, script = make(engine, repo, [rd, reply(tok, "ok")] * 2 + [reply(tok, "fine")])
    assert agent.compact() == 0  # nothing to drop yet
    agent.run_turn("read it")
    agent.run_turn("again")
    n = len(agent.sampler.cache.ids)
    freed = agent.compact()
    outs = [m["content"] for m in agent.messages if m["role"] == "tool_result"]
    assert outs[0] == f"{DROPPED} Read big.py: 20 lines"  # a digest of what it held
    assert outs[1].startswith("    1→value_0")  # the newest one stays
    assert freed > 0 and len(agent.sampler.cache.ids) == n - freed
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)  # rebuilt now, not at the next turn
    assert agent.messages[0]["role"] == "system"
    assert [m["content"] for m in agent.messages if m["role"] == "user"] == ["read it", "again"]
    assert agent.compact() == 0
    assert agent.run_turn("third").answer == "fine" and all(script.identity)
    agent.messages.append({"role": "tool_result", "content": "ok"})  # shorter than the marker
    agent.compact(keep=0)
    assert agent.messages[-1]["content"] == "ok"
    assert agent.messages[7]["content"].startswith(DROPPED)


def test_repl_compact(engine, tok, repo):
    from agent.repl import slash
    rd = call(tok, "", "Read", file_path="big.py", limit="20")
    agent, _ = make(engine, repo, [rd, reply(tok, "ok")] * 2)
    out = []
    con = type("Con", (), {"write": lambda self, text: out.append(text)})()
    slash(agent, "/compact", con)
    agent.run_turn("read it")
    agent.run_turn("again")
    slash(agent, "/compact", con)
    assert out[0].startswith("nothing to compact") and "tokens freed" in out[1]
    assert slash(agent, "/help", con) is None and "/compact" in out[-1]


def test_request_too_long_for_the_context(engine, tok, repo):
    agent, script = make(engine, repo, [reply(tok, "ok")])
    events = []
    res = agent.run_turn("value_1 = 2 * 3 " * 800, on_event=events.append)
    assert res.stop_reason == "context"
    assert any("does not fit the context" in e.text for e in events if e.kind == "status")
    # the next request fits once the oversized turn is dropped as an old turn
    events.clear()
    assert agent.run_turn("short", on_event=events.append).answer == "ok"
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant"]
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)
