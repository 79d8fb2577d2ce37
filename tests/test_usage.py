"""/usage and its alias /cost (agent/commands.py, totals kept by agent/loop/driver.Agent): the tokens
the model read and wrote, tok/s and the time, added up over every turn since nanocode started,
equal to the sum of the turns' own counts (and a continued session's first prefill, and
/compact's rebuild); with --base-url, what the server reported in `usage`, and a plain word when
it reported none. The plain face through a real pipe; the remote model is a scripted server on
loopback (tests/test_remote.py's)."""
import io
import os
import sys

from test_remote import Scripted, delta, finish, remote_agent, scripted  # noqa: F401 - fixture

from agent import commands
from agent.repl import Console, run_repl
from scripted_agent import call, make, reply


def piped_repl(agent, lines: bytes, monkeypatch) -> str:
    """What the plain face prints when `lines` come through a real pipe as its stdin."""
    r, w = os.pipe()
    os.write(w, lines)
    os.close(w)
    monkeypatch.setattr(sys, "stdin", os.fdopen(r))
    con = Console(out=io.StringIO(), color=False)
    assert run_repl(agent, "tiny", console=con) == 0
    return con.out.getvalue()


def test_usage_adds_up_the_turns_and_cost_is_its_alias(engine, tok, repo, monkeypatch):
    agent, _ = make(engine, repo, [call(tok, "", "Read", file_path="a.py"), reply(tok, "x is 1."),
                                   reply(tok, "ok.")])
    results = []
    turn = agent.run_turn

    def counted(*a, **kw):
        results.append(turn(*a, **kw))
        return results[-1]
    agent.run_turn = counted
    out = piped_repl(agent, b"what is x?\nthanks\n/cost\n/quit\n", monkeypatch)
    prompt = sum(res.usage["prompt_tokens"] for res in results)
    written = sum(res.usage["completion_tokens"] for res in results)
    sampling = sum(res.usage["generate_s"] for res in results)
    assert len(results) == 2 and prompt > 0 and written > 0
    said = out[out.index("usage since nanocode started"):]
    assert said.startswith(f"usage since nanocode started (2 turns; session {agent.meta['id']}):")
    assert f"tokens in (read by the model): {prompt:,} in " in said
    assert f"tokens out (written by the model, resampled ones included): {written:,} in {sampling:.1f} s, " \
           f"{written / sampling:,.1f} tok/s" in said
    seconds = sum(res.usage["seconds"] for res in results)
    assert f"wall time: {seconds:.1f} s in turns (approvals and tools included)" in said
    assert commands.find("/cost")[0] is commands.find("/usage")[0]
    resumed, _ = make(engine, repo, [reply(tok, "ok.")], messages=agent.messages, meta=agent.meta)
    resumed.load_context()  # a continued session's prefill, before any request, counts too
    read = len(resumed.sampler.cache.ids)
    text = commands.run("/usage", resumed, resumed.root).text
    assert read > 0 and "(0 turns;" in text and f"tokens in (read by the model): {read:,} in " in text


def test_usage_with_a_server_is_what_it_reported(scripted, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    Scripted.script = [[delta(content="x is 1."), finish("stop")],
                       [delta(content="again."), finish("stop")]]
    agent = remote_agent(scripted, tmp_path)
    agent.run_turn("what is x?")
    agent.run_turn("and again?")
    text = commands.run("/usage", agent, agent.root).text
    assert f"as {scripted} reported it (`usage` of each reply): 100 tokens in, 14 out" in text
    assert "sent no `usage`" not in text and "2 turns" in text
    silent = remote_agent(scripted, tmp_path)  # a server that reports no usage
    Scripted.script = [[delta(content="x is 1."), {"choices": [{"index": 0, "delta": {},
                                                                 "finish_reason": "stop"}]}]]
    silent.run_turn("what is x?")
    text = commands.run("/cost", silent, silent.root).text
    assert "0 tokens in, 0 out" in text and "the server sent no `usage` with its replies" in text
    assert "the counts are unknown, not zero" in text


def test_compacts_prefill_counts_in_usage(engine, tok, repo, monkeypatch):
    """/compact rebuilds the model's cache from the shorter conversation (one prefill): /usage's
    tokens in grow by exactly what that rebuild read, no turn added. The plain face, a real pipe."""
    rd = call(tok, "", "Read", file_path="big.py", limit="20")
    agent, _ = make(engine, repo, [rd, reply(tok, "ok")] * 2)
    rebuilt = []
    compact = agent.compact

    def measured(*a, **kw):  # what the rebuild reads: every token of the fresh cache
        freed = compact(*a, **kw)
        rebuilt.append(len(agent.sampler.cache.ids))
        return freed
    agent.compact = measured
    out = piped_repl(agent, b"read it\nagain\n/usage\n/compact\n/usage\n/quit\n", monkeypatch)
    assert "tokens freed" in out and rebuilt and rebuilt[0] > 0
    before, after = (int(said.split(" in ", 1)[0].replace(",", "")) for said in
                     out.split("tokens in (read by the model): ")[1:])
    assert out.count("(2 turns;") == 2  # /compact is no turn
    assert after - before == rebuilt[0], (before, after, rebuilt)
