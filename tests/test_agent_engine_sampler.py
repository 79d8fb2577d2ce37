"""The engine sampler (agent/samplers/engine.py) replying on a conversation with no driver around it:
the real tiny engine, scripted through its extra_mask (tests/scripted_agent.py), streams the
reply's prose, appends the message with its parsed call, and keeps its cache exactly the rendered
conversation, prefilling only the new tokens of a tool result."""
import threading

from agent.loop.conversation import Conversation
from agent.samplers.engine import EngineSampler
from agent.settings import SamplerSettings
from nanocode.protocol import TurnResult
from scripted_agent import Script, call


def test_engine_sampler_replies_on_a_conversation_alone(engine, tok, repo):
    script = Script(tok, [call(tok, "looking.", "Read", file_path="a.py")])
    script.V = engine.cfg.vocab_size
    sampler = EngineSampler(engine, str(repo), SamplerSettings(ground=True), extra_mask=script)
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
