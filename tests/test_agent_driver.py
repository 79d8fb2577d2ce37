"""The agent loop on a REAL engine (tiny random model, real tokenizer, real tools in a temp git
repo). The model is scripted through `Agent(extra_mask=...)`: at each step only the next scripted
token is allowed, so the engine really runs (prefill, decode, cache reuse) and the loop's own
grammar mask stays in the path."""

import subprocess
import threading
import time

import numpy as np
import pytest

from agent.driver import Agent
from agent.grammar import Grammar
from agent.sessions import find_session, load_session
from nanocode.engine import Engine
from nanocode.protocol import REJECTED, REPEATED, check_call, system_prompt
from tiny_models import commit_all, random_params, tiny, tiny_tokenizer
from tools.dispatch import run_tool
from tools.permissions import Policy

BIG = "".join(f"value_{i} = {i} * 2\n" for i in range(100))
TEXTS = [system_prompt("{cwd}")] * 3 + [BIG] * 3 + ["def main():\n    return 1\n" * 20,
                                   "let me look. done: it returns 1. rejected by user error"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 512)


@pytest.fixture(scope="module")
def engine(tok):
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=2048)
    return Engine(random_params(cfg), cfg, tok, buckets=(64, 256, 1024))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))  # no user settings, shadow dirs
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "big.py").write_text(BIG)
    commit_all(root)
    return root


def same_text(tok, a, b):
    """Byte-identical text and the same special tokens (a model may split text differently)."""
    sp = lambda ids: [t for t in ids if tok.is_special(t)]  # noqa: E731
    by = lambda ids: b"".join(tok.id_to_bytes(t) for t in ids)  # noqa: E731
    return sp(a) == sp(b) and by(a) == by(b)


class Script:
    """extra_mask that allows only the next scripted token; one token list per generation.
    Also checks, at the start of every generation, that the session holds exactly the rendered
    conversation plus the open <|assistant_start|> (train/inference identity)."""

    def __init__(self, tok, replies):
        self.tok, self.replies, self.i = tok, replies, -1
        self.agent = None
        self.identity = []
        self.V = None

    def __call__(self, out):
        if not out:
            self.i += 1
            a = self.agent
            want = a.sampler.tok.render_conversation({"messages": a.messages})[0] + [
                a.sampler.tok.encode_special("<|assistant_start|>")]
            self.identity.append(a.sampler.cache.ids == want)
        seq = self.replies[min(self.i, len(self.replies) - 1)]
        if len(out) >= len(seq):
            return None
        m = np.zeros(self.V, bool)
        m[seq[len(out)]] = True
        return m


def call(tok, text, name, **args):
    return tok.encode(text) + tok.encode_tool_call({"name": name, "args": args})


def reply(tok, text):
    return tok.encode(text) + [tok.encode_special("<|assistant_end|>")]


def make(engine, repo, replies, **kw):
    """An Agent whose model writes `replies`, one per generation (no retries unless asked: a
    retried reply would take the next scripted one)."""
    kw.setdefault("retries", 0)
    script = Script(engine.tokenizer, replies)
    script.V = engine.cfg.vocab_size
    agent = Agent(engine, repo, extra_mask=script, **kw)
    script.agent = agent
    return agent, script


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
    from agent.mentions import mentioned
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
    agent.store = SessionStore(repo, agent.meta["id"])
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


# ---- the grammar mask --------------------------------------------------------------------------
def test_mask_fuzz_every_terminated_call_is_valid(tok):
    """Random walks through the mask (uniform over allowed tokens, terminators boosted) always
    give calls that parse to a known tool with valid arguments."""
    g = Grammar(tok, 512)
    rng = np.random.default_rng(0)
    start, end = tok.encode_special("<|tool_call_start|>"), tok.encode_special("<|tool_call_end|>")
    special = [tok.encode_special(s) for s in ("<|tool_arg|>", "<|tool_val|>")] + [end]
    done = 0
    for _ in range(400):
        st, out = g.state(), [start]
        for _ in range(60):
            m = st.allowed(out)
            ok = np.flatnonzero(m)
            boost = [t for t in special if m[t]]
            t = int(rng.choice(boost) if boost and rng.random() < 0.3 else rng.choice(ok))
            out.append(t)
            if t == end:
                break
        if out[-1] == end:
            c = tok.parse_tool_call(out)
            assert check_call(c["name"], c["args"]) is None, (c, tok.decode(out))
            done += 1
    assert done > 100


def test_mask_cost_per_token(engine, tok):
    g = Grammar(tok, engine.cfg.vocab_size)
    seq = [tok.encode_special("<|tool_call_start|>")] + tok.encode_tool_call(
        {"name": "Edit", "args": {"file_path": "a.py", "old_string": "x", "new_string": "y"}})[1:]
    st = g.state()
    st.allowed([])
    t = time.perf_counter()
    n = 0
    for _ in range(200):
        st = g.state()
        for k in range(len(seq) + 1):
            st.allowed(seq[:k])
            n += 1
    per = (time.perf_counter() - t) / n
    print(f"mask: {per * 1e6:.1f} us per token")
    assert per < 1e-3


def test_free_running_random_model_never_crashes(engine, tok, repo):
    """No script: the tiny random model writes freely (sampled) for a few turns. Nothing raises,
    the history stays the render, and every call it finishes is well-formed."""
    agent = Agent(engine, repo, temperature=1.0, max_tokens=48, max_steps=3, mode="plan")
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
    agent = Agent(engine, repo, temperature=1.0, max_tokens=200, max_steps=3, mode="plan",
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
    agent = Agent(engine, repo, copy_bias=3.0, max_tokens=4, retries=0)
    res = agent.run_turn("what is x?")
    assert agent.sampler._copy is not None and agent.sampler._copy_seen > 0 and res.stop_reason in ("done", "max_tokens")


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
