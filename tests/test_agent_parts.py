"""The Agent's parts, each alone (agent/driver.py builds a turn from them): asking for approval
(agent/approval.py) against a real Policy, the conversation store (agent/conversation.py) saved by
the real SessionStore, and the engine sampler (agent/sampler.py) replying on a conversation with no
driver around it (the real tiny engine, scripted through its extra_mask)."""
import json
import threading

from agent.approval import ask
from agent.conversation import Conversation
from agent.sampler import EngineSampler
from agent.sessions import SessionStore
from nanocode.protocol import TurnResult
from test_agent_driver import Script, call, engine, repo, tok  # noqa: F401 - fixtures
from tools.permissions import Policy


def test_ask_reads_answers_and_stores_only_real_rules(repo):
    policy = Policy.load(repo, mode="ask")
    bash = {"command": "pytest -q"}
    d = policy.check("Bash", bash)
    assert d.action == "ask"
    idle = threading.Event()
    assert ask(policy, d, "Bash", bash, lambda *a: "Y", idle) == ("yes", "")
    assert ask(policy, d, "Bash", bash, None, idle) == ("no", "")  # headless: nobody says yes
    assert ask(policy, d, "Bash", bash, lambda *a: "maybe", idle) == ("no", "")

    def ctrl_c(*a):
        raise KeyboardInterrupt
    assert ask(policy, d, "Bash", bash, ctrl_c, idle)[0] == "cancelled"
    stopped = threading.Event()
    stopped.set()  # the turn was cancelled while the question was up
    assert ask(policy, d, "Bash", bash, lambda *a: "yes", stopped)[0] == "cancelled"
    shown = []
    answer, rule = ask(policy, d, "Bash", bash, lambda n, a, dec: shown.append(dec.always) or "a", idle)
    assert answer == "always" and rule and shown == [rule]  # the face saw what "always" stores
    assert policy.check("Bash", bash).action == "allow"
    rm = {"command": "rm -rf build"}  # destructive: asks every time, "always" is once
    assert ask(policy, policy.check("Bash", rm), "Bash", rm, lambda *a: "always", idle) == ("yes", "")
    assert policy.check("Bash", rm).action == "ask"


def test_conversation_records_marks_saves_and_clears(tmp_path):
    store = SessionStore(tmp_path, "abc")
    conv = Conversation(str(tmp_path), [{"role": "user", "content": "hi"}], {"id": "abc"}, store)
    assert conv.meta["cwd"] == str(tmp_path) and conv.meta["turns"] == []  # defaults filled in
    conv.messages.append({"role": "assistant", "content": "hello"})
    conv.record_turn(0, "done", [], None)
    assert conv.mark("good") == 1
    saved = json.loads(store.path.read_text())
    assert saved["messages"][-1]["content"] == "hello" and saved["meta"]["turns"][0]["mark"] == "good"
    conv.clear()
    assert conv.messages == [] and conv.id != "abc" and conv.store.path != store.path


def test_engine_sampler_replies_on_a_conversation_alone(engine, tok, repo):
    script = Script(tok, [call(tok, "looking.", "Read", file_path="a.py")])
    script.V = engine.cfg.vocab_size
    sampler = EngineSampler(engine, str(repo), extra_mask=script, ground=True)
    conv = Conversation(str(repo), [{"role": "system", "content": "be brief"},
                                    {"role": "user", "content": "what is x?"}])
    conv.turn_start = 1
    script.agent = type("Bare", (), {"messages": conv.messages, "sampler": sampler})()
    usage = TurnResult().usage
    events = []
    reply = sampler.reply(conv, ("Read", "Grep"), events.append, threading.Event(), usage)
    assert reply.call == {"name": "Read", "args": {"file_path": "a.py"}} and reply.error is None
    assert conv.messages[-1] is reply.message and reply.message["content"] == "looking."
    assert "".join(e.text for e in events if e.kind == "text") == "looking."
    assert script.identity == [True]  # the cache held exactly the rendered conversation
    conv.messages.append({"role": "tool_result", "content": "    1→x = 1"})
    sampler.sync(conv, events.append, usage)
    assert sampler.cache.ids == sampler.rendered_ids(conv.messages)  # only the new tokens went in
    assert usage["completion_tokens"] == len(call(tok, "looking.", "Read", file_path="a.py"))
