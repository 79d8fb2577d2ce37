"""The loop guard on the real driver (tiny engine, scripted model, real tools in a temp git repo):
loops turned away in argument values, a looping answer cut with stop_reason "loop"."""

from agent.loop_guard import first_loop
from test_agent_driver import call, engine, make, repo, tok  # noqa: F401 - fixtures
from tools.permissions import Policy


def test_loops_are_masked_in_arguments_and_a_looping_answer_stops(engine, tok, repo):
    """The scripted model tries to write `tests/tests/...` as a Read path and a Bash command, then
    `isisis...` as its answer: the loop guard turns each loop away (the real model then writes
    another token, and the script goes on), so no value holds a loop, and the answer, which keeps
    coming back to it, is cut: stop_reason "loop"."""
    loop = "tests/" * 12
    answer = tok.encode("it is " + "is" * 150)
    agent, _ = make(engine, repo, [call(tok, "", "Read", file_path=loop), call(tok, "", "Bash", command=loop),
                                   answer], policy=Policy(repo, mode="auto", deny=["Bash(tests*)"]),
                      ground=False, max_tokens=300)
    events = []
    res = agent.run_turn("where?", on_event=events.append)
    values = [v for c in res.tool_calls for v in c["args"].values()]
    assert [c["name"] for c in res.tool_calls] == ["Read", "Bash"]
    assert all(v.startswith("tests/tests/tests/") and first_loop(v.encode()) is None for v in values)
    assert res.stop_reason == "loop" and first_loop(res.answer.encode()) is None
    assert res.answer.startswith("it is isisis") and len(res.answer) < 100
    assert "reply stopped: it was repeating itself" in [e.text for e in events if e.kind == "status"]
    assert agent.messages[-1]["content"] == res.answer
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)
    agent, _ = make(engine, repo, [answer], loop_guard=False, max_tokens=40)  # off: runs to max_tokens
    assert agent.run_turn("again?").stop_reason == "max_tokens"
