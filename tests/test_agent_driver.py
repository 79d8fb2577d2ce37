"""The agent loop (agent/loop/driver.py) on a REAL engine (tiny random model, real tokenizer, real
tools in a temp git repo). The model is scripted (tests/scripted_agent.py): at each step only the
next scripted token is allowed, so the engine really runs (prefill, decode, cache reuse) and the
loop's own grammar mask and loop guard stay in the path."""

import subprocess
import threading
import time

import numpy as np
import pytest

from agent.masks.loop_guard import first_loop
from agent.sessions import find_session, load_session
from agent_builder import new_agent
from nanocode.protocol import REJECTED, REPEATED, check_call
from scripted_agent import call, make, reply, same_text
from tools.dispatch import run_tool
from tools.permissions import Policy


def test_read_call_runs_and_result_is_fed_back(engine, tok, repo):
    agent, script = make(engine, repo, [call(tok, "let me look.", "Read", file_path="a.py"),
                                        reply(tok, "done: it returns 1.")])
    events = []
    res = agent.run_turn("what is x?", on_event=events.append)
    want = run_tool(repo, "Read", {"file_path": "a.py"})
    assert want.startswith("    1→x = 1")
    assert res.stop_reason == "done" and res.steps == 1
    assert res.tool_calls == [{"name": "Read", "args": {"file_path": "a.py"}, "result": want}]
    assert res.answer == "done: it returns 1."
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant", "tool_result",
                                                   "assistant"]
    assert agent.messages[0]["content"].startswith("you are nanocode")
    assert agent.messages[3]["content"] == want
    assert script.identity == [True, True]
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)  # closed turn: exactly the render
    kinds = [e.kind for e in events]
    assert kinds.index("tool_call") < kinds.index("tool_result") < len(kinds) - 1
    assert kinds[-1] == "turn_end"
    assert "".join(e.text for e in events if e.kind == "text") == \
        "let me look.done: it returns 1."
    # a second turn prefills only the new tokens and keeps the identity
    script.replies.append(reply(tok, "ok."))
    agent.run_turn("thanks")
    st = agent.sampler.cache.stats  # one Decoder all along: nothing was prefilled twice
    assert st["prefilled_total"] + st["generated_total"] == len(agent.sampler.cache.ids)
    assert script.identity == [True, True, True]
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)


def test_rejection_ends_the_turn(engine, tok, repo):
    agent, script = make(engine, repo, [call(tok, "", "Edit", file_path="a.py",
                                             old_string="x = 1", new_string="x = 2"),
                                        reply(tok, "never")], mode="ask")
    asked = []
    res = agent.run_turn("set x to 2", approve=lambda n, a, d: asked.append((n, d.action)) or "no")
    assert asked == [("Edit", "ask")]
    assert res.stop_reason == "rejected" and res.tool_calls[0]["result"] == REJECTED
    assert agent.messages[-1] == {"role": "tool_result", "content": REJECTED}
    assert script.i == 0  # no second generation
    assert (repo / "a.py").read_text() == "x = 1\n"
    assert agent.meta["approvals"][0]["answer"] == "no"
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)


def test_always_then_runs(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="echo hi"),
                                   call(tok, "", "Bash", command="echo there"),
                                   reply(tok, "done")])
    asked = []
    res = agent.run_turn("say hi", approve=lambda n, a, d: asked.append(d) or "always")
    assert [c["result"] for c in res.tool_calls] == ["hi", "there"]
    assert len(asked) == 1  # the session rule `Bash(echo*)` covers the second call
    assert asked[0].always == "Bash(echo*)"  # shown with the question, before it was stored
    assert agent.meta["approvals"][0]["rule"] == "Bash(echo*)"


def test_always_on_a_destructive_command_is_once(engine, tok, repo):
    """No rule can allow `rm -r` for the session: "always" there runs it once, says no rule,
    and the next rm -r asks again."""
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="rm -r b"),
                                   call(tok, "", "Bash", command="rm -r c"), reply(tok, "done")],
                    mode="auto")
    for d in ("b", "c"):
        (repo / d).mkdir()
        (repo / d / "f").write_text(d)
    asked, events = [], []
    agent.run_turn("clean up", approve=lambda n, a, d: asked.append(d) or "always",
                   on_event=events.append)
    assert len(asked) == 2 and asked[0].always == "" and agent.policy.session == []
    assert [a["answer"] for a in agent.meta["approvals"]] == ["yes", "yes"]
    assert [(e.answer, e.rule) for e in events if e.kind == "approval"] == [("yes", "")] * 2
    assert not (repo / "b").exists() and not (repo / "c").exists()


@pytest.mark.parametrize("how", ["interrupt", "cancel event"])
def test_ctrl_c_at_an_approval_cancels(engine, tok, repo, how):
    """Ctrl-C at the prompt is not the user's "no": nothing runs, the result says cancelled,
    the approval is recorded as cancelled, the turn stops as cancelled."""
    import threading

    from nanocode.protocol import CANCELLED
    agent, script = make(engine, repo, [call(tok, "", "Bash", command="rm a.py"), reply(tok, "x")],
                         mode="accept-edits")
    cancel = threading.Event()

    def approve(name, args, decision):
        if how == "interrupt":
            raise KeyboardInterrupt
        cancel.set()
        return "no"
    res = agent.run_turn("delete a.py", approve=approve, cancel=cancel)
    assert res.stop_reason == "cancelled" and res.tool_calls[0]["result"] == CANCELLED
    assert agent.meta["approvals"][-1]["answer"] == "cancelled" and script.i == 0
    assert (repo / "a.py").exists()


def test_usage_counts_tokens_and_time(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "look.", "Read", file_path="a.py"), reply(tok, "done.")])
    res = agent.run_turn("what is x?")
    u, st = res.usage, agent.sampler.cache.stats  # one Decoder all turn long
    assert (u["prompt_tokens"], u["completion_tokens"]) == (st["prefilled_total"], st["generated_total"])
    assert u["completion_tokens"] == len(tok.encode("look.")) + len(tok.encode("done.")) + \
        len(tok.encode_tool_call({"name": "Read", "args": {"file_path": "a.py"}})) + 1
    assert u["seconds"] >= u["generate_s"] + u["prefill_s"] and res.tokens_per_second > 0


def test_plan_mode_denies_and_continues(engine, tok, repo):
    # the grammar offers no Edit in plan mode (below); the policy denies it even without the grammar
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", new_string="y"),
                                   reply(tok, "ok")], mode="plan", constrain=False)
    res = agent.run_turn("edit", approve=lambda *a: pytest.fail("plan mode must not ask"))
    assert res.tool_calls[0]["result"].startswith("error: plan mode is read-only")
    assert res.stop_reason == "done" and res.answer == "ok"
    assert "mode: plan (read-only" in agent.messages[0]["content"]
    assert "- Edit(" not in agent.messages[0]["content"]


def test_plan_mode_grammar_offers_only_read_and_grep(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", new_string="y")], mode="plan",
                    max_tokens=30)
    res = agent.run_turn("edit")
    assert all(c["name"] in ("Read", "Grep") for c in res.tool_calls)
    assert repo.joinpath("a.py").read_text() == "x = 1\n"
    agent.set_mode("auto")  # a switch that changes the tools offered is said in the next request
    agent.sampler.extra_mask = None
    agent.max_tokens = 1
    agent.run_turn("now edit it")
    assert agent.messages[agent.conv.turn_start]["content"] == "mode: auto (every tool)\nnow edit it"


@pytest.mark.parametrize("name, args, want", [
    ("Foo", {"x": "1"}, "error: unknown tool"),
    ("Read", {"limit": "3"}, "error: missing argument file_path"),
])
def test_malformed_calls_become_error_results(engine, tok, repo, name, args, want):
    seq = tok.encode_tool_call({"name": name, "args": args})
    agent, script = make(engine, repo, [seq, reply(tok, "sorry")], constrain=False)
    res = agent.run_turn("go")
    assert res.tool_calls[0]["result"] == want
    assert res.stop_reason == "done" and script.identity == [True, True]


def test_unterminated_call_is_an_error_and_history_stays_well_formed(engine, tok, repo):
    long = tok.encode_tool_call({"name": "Bash", "args": {"command": "echo " + "a b c " * 30}})
    agent, script = make(engine, repo, [long[:-1], reply(tok, "ok")], max_tokens=40)
    res = agent.run_turn("go")
    assert res.tool_calls[0]["result"].startswith("error: malformed tool call: no <|tool_call_end|>")
    assert "tool_call" not in agent.messages[2]
    assert script.identity == [True, True]  # the session was rebuilt from the render
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)


def test_three_identical_calls_stop(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Read", file_path="a.py")] * 5)
    res = agent.run_turn("loop")
    assert res.stop_reason == "repeat" and res.steps == 3
    assert [c["result"] for c in res.tool_calls][2] == REPEATED
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)


def test_step_limit(engine, tok, repo):
    replies = [call(tok, "", "Read", file_path="a.py", offset=str(i)) for i in range(10)]
    agent, _ = make(engine, repo, replies, max_steps=4)
    res = agent.run_turn("loop")
    assert res.stop_reason == "step_limit" and res.steps == 4
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)


def test_resumed_session_gets_todays_system_prompt(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "ok")])
    agent.run_turn("hi")
    assert agent.refresh_system_prompt() is False  # nothing changed
    (repo / "AGENTS.md").write_text("use tabs\n")
    again, _ = make(engine, repo, [reply(tok, "ok")], messages=agent.messages, meta=agent.meta)
    assert again.refresh_system_prompt() is True
    assert again.messages[0]["content"].endswith("project notes (AGENTS.md):\nuse tabs")
    events = []
    again.run_turn("and now?", on_event=events.append)
    assert any("new system prompt" in e.text for e in events if e.kind == "status")
    assert again.sampler.cache.ids == again.sampler.rendered_ids(again.messages)


def test_failed_snapshot_is_said_once(engine, tok, repo):
    """A project /undo cannot snapshot (read-only, say): each change is refused, the note is
    said once, not on every call."""
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="echo a"),
                                   call(tok, "", "Bash", command="echo b"), reply(tok, "ok")],
                    mode="auto", retries=0)
    agent.undo_log.begin = lambda *a: "error: not run: the project could not be snapshotted"
    events = []
    res = agent.run_turn("go", on_event=events.append)
    assert [c["result"][:12] for c in res.tool_calls] == ["error: not r"] * 2
    assert sum("could not snapshot" in e.text for e in events if e.kind == "status") == 1


def test_at_mention_pins_the_file_as_a_read(engine, tok, repo):
    """`@a.py` pins the file as a Read step before the model's first reply; words that are
    not project files (`@property`, an address, a path outside) pin nothing; a re-Read of the
    pinned file is a repeat (resampled)."""
    from agent.loop.mentions import mentioned
    (repo / "sub").mkdir()
    (repo / "sub" / "b.py").write_text("y = 2\n")
    assert mentioned("look at @a.py and @sub/b.py, not @property or me@x.org or @../x or @a.py",
                     repo) == ["a.py", "sub/b.py"]
    agent, script = make(engine, repo, [reply(tok, "x is 1.")])
    res = agent.run_turn("what is x in @a.py?")
    assert res.answer == "x is 1." and res.steps == 1
    want = run_tool(repo, "Read", {"file_path": "a.py"})
    assert agent.messages[2:4] == [
        {"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": {"file_path": "a.py"}}},
        {"role": "tool_result", "content": want}]
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages) and script.i == 0  # one generation


def test_undo_restores_an_edit(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                        new_string="x = 2"), reply(tok, "done")],
                    mode="accept-edits")
    res = agent.run_turn("set x to 2")
    assert (repo / "a.py").read_text() == "x = 2\n"
    assert res.files_changed == ["a.py"]
    assert "+x = 2" in agent.diff()
    assert agent.undo() == ["a.py"]
    assert (repo / "a.py").read_text() == "x = 1\n"


def test_read_only_turn_takes_no_snapshot(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Read", file_path="a.py"), reply(tok, "ok")])
    agent.run_turn("look")
    assert not agent.undo_log.made and agent.meta["turns"][-1]["checkpoint"] is None


def test_cancel_keeps_the_session(engine, tok, repo):
    cancel = threading.Event()
    agent, script = make(engine, repo, [reply(tok, "let me look. done: it returns 1.")])

    def on_event(ev):
        if ev.kind == "text":
            cancel.set()
    res = agent.run_turn("go", on_event=on_event, cancel=cancel)
    assert res.stop_reason == "cancelled"
    assert 0 < len(res.answer) < len("let me look. done: it returns 1.")
    assert agent.sampler.cache.ids[-1] == tok.encode_special("<|assistant_end|>")
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)
    script.replies = [reply(tok, "ok")]
    script.i = -1
    assert agent.run_turn("again").answer == "ok"


def test_cancel_stops_a_running_command(engine, tok, repo):
    cancel = threading.Event()
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="sleep 20"), reply(tok, "x")],
                    mode="auto")
    threading.Timer(1.0, cancel.set).start()
    t = time.time()
    res = agent.run_turn("wait", cancel=cancel)
    assert time.time() - t < 10
    assert res.stop_reason == "cancelled" and "cancelled" in res.tool_calls[0]["result"]
    assert agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)


def test_sessions_are_saved_and_render(engine, tok, repo):
    from agent.sessions import SessionStore
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="b.py", new_string="z"),
                                   reply(tok, "ok")])
    agent.conv.store = SessionStore(repo, agent.meta["id"])
    agent.run_turn("make a.py", approve=lambda *a: "no")
    path = find_session(repo)
    assert path.name.endswith(f"-{agent.meta['id']}.jsonl") and path.parent.name == "sessions"
    assert find_session(repo, agent.meta["id"]) == path
    messages, meta = load_session(path)
    assert messages == agent.messages
    assert meta["approvals"][0]["answer"] == "no" and meta["approvals"][0]["name"] == "Edit"
    ids, _ = tok.render_conversation({"messages": messages, "meta": meta})
    assert ids == agent.sampler.cache.ids
    # resuming: a new Agent renders the saved conversation and carries on
    agent2, script2 = make(engine, repo, [reply(tok, "back")], messages=messages, meta=meta)
    assert agent2.run_turn("hello again").answer == "back" and script2.identity == [True]
    assert "" == subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                capture_output=True, text=True).stdout.strip()


def test_free_running_random_model_never_crashes(engine, tok, repo):
    """No script: the tiny random model writes freely (sampled) for a few turns. Nothing raises,
    the history stays the render, and every call it finishes is well-formed."""
    agent = new_agent(engine, repo, temperature=1.0, max_tokens=48, max_steps=3, mode="plan")
    calls = []
    for i in range(3):
        res = agent.run_turn(f"turn {i}", approve=lambda *a: "no")
        calls += res.tool_calls
        assert res.stop_reason in ("done", "max_tokens", "repeat", "step_limit", "rejected")
        assert same_text(tok, agent.sampler.cache.ids, agent.sampler.rendered_ids(agent.messages))
    # force the first token to open a call, then let the model (under the grammar) write it
    opener = tok.encode_special("<|tool_call_start|>")

    def first_opens(out):
        if not out:
            m = np.zeros(engine.cfg.vocab_size, bool)
            m[opener] = True
            return m
        return None
    agent = new_agent(engine, repo, temperature=1.0, max_tokens=200, max_steps=3, mode="plan",
                      extra_mask=first_opens, seed=1)
    for i in range(2):
        calls += agent.run_turn(f"call {i}", approve=lambda *a: "no").tool_calls
        assert same_text(tok, agent.sampler.cache.ids, agent.sampler.rendered_ids(agent.messages))
    finished = [c for c in calls if not c["result"].startswith("error: malformed")]
    print(f"{len(calls)} calls, {len(finished)} finished:", [c["name"] for c in finished])
    assert finished, "the model finished no call"
    for c in finished:
        assert check_call(c["name"], c["args"]) is None, c


def test_policy_object_is_used(engine, tok, repo):
    policy = Policy(repo, mode="auto", deny=["Bash(rm*)"])
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="rm a.py"), reply(tok, "ok")],
                    policy=policy)
    res = agent.run_turn("delete")
    assert res.tool_calls[0]["result"] == "error: denied by rule"
    assert (repo / "a.py").exists()


# ---- retries -----------------------------------------------------------------------------------
def test_a_repeated_call_is_resampled_not_run(engine, tok, repo):
    agent, script = make(engine, repo, [call(tok, "", "Read", file_path="a.py"),
                                        call(tok, "again.", "Read", file_path="a.py"),
                                        reply(tok, "x is 1.")], retries=1)
    events = []
    res = agent.run_turn("what is x?", on_event=events.append)
    assert res.answer == "x is 1." and res.retries == 1 and len(res.tool_calls) == 1
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant", "tool_result", "assistant"]
    assert any(e.kind == "status" and "repeat of an earlier call" in e.text for e in events)
    assert all(script.identity)  # the session was rebuilt without the taken-back reply


def test_a_failed_read_is_resampled_and_a_rerun_after_an_edit_is_not(engine, tok, repo):
    agent, script = make(engine, repo, [call(tok, "", "Read", file_path="nope.py"),
                                        call(tok, "", "Bash", command="cat a.py"),
                                        call(tok, "", "Edit", file_path="a.py", old_string="x = 1", new_string="x = 2"),
                                        call(tok, "", "Bash", command="cat a.py"),
                                        reply(tok, "done.")], retries=1, ground=False, mode="auto")
    res = agent.run_turn("bump x")
    assert res.retries == 1 and [c["name"] for c in res.tool_calls] == ["Bash", "Edit", "Bash"]
    assert res.tool_calls[2]["result"].startswith("x = 2") and all(script.identity)


def test_copy_bias_runs_in_prose(engine, tok, repo):
    agent = new_agent(engine, repo, copy_bias=3.0, max_tokens=4, retries=0)
    res = agent.run_turn("what is x?")
    assert agent.sampler._copy is not None and agent.sampler._copy_seen > 0 and res.stop_reason in ("done", "max_tokens")


# ---- the loop guard (agent/masks/loop_guard.py) in the loop ------------------------------------------
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


# ---- the OS sandbox around Bash (tools/sandbox.py) ------------------------------------------------

def test_bash_runs_in_the_sandbox_and_without_one_every_command_asks(engine, tok, repo, tmp_path):
    """auto mode: a command that writes outside the project runs unasked but the write fails on
    disk (read-only; under /tmp the outside dir is not even visible), the in-project write lands; with sandbox=False the same command asks (and,
    with nobody to approve, is rejected: nothing runs)."""
    from tools.permissions import NO_SANDBOX
    from tools.sandbox import bash_sandbox
    outside = tmp_path / "outside"
    outside.mkdir()
    cmd = f"echo in > inside.txt; echo out > {outside}/pwned.txt; cat {outside}/pwned.txt"
    if bash_sandbox()["available"]:
        agent, _ = make(engine, repo, [call(tok, "", "Bash", command=cmd), reply(tok, "done")],
                        mode="auto")
        assert agent.sandbox_status.startswith("sandbox: namespaces, network off")
        res = agent.run_turn("write the files")
        assert "(exit code 1)" in res.tool_calls[0]["result"]  # read-only, or hidden under /tmp
        assert (repo / "inside.txt").read_text() == "in\n" and not (outside / "pwned.txt").exists()
    asked = []
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="echo hi > made.txt"),
                                   reply(tok, "ok")], mode="auto", sandbox=False)
    assert agent.sandbox_status.startswith("NO SANDBOX")
    res = agent.run_turn("go", approve=lambda n, a, d: asked.append(d.reason) or "no")
    assert asked == [NO_SANDBOX] and res.stop_reason == "rejected"
    assert not (repo / "made.txt").exists()
