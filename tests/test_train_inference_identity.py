"""Train/inference identity: a synthetic rollout (train synth's oracle through the real tools) and
the same conversation produced by the agent loop at inference (real engine, real tools, the same
generated project) render to identical token ids. The tiny model is scripted to say exactly what
the oracle said (tests/scripted_agent.py's Script); everything else (system prompt, tool results,
the tokens the loop appends) comes from the real agent."""
import warnings

import pytest

from agent_builder import new_agent
from nanocode.engine import Engine
from nanocode.protocol import system_prompt
from nanocode.tokenizer import train_tokenizer
from scripted_agent import Script
from tasks import make_task
from tiny_models import random_params, tiny, untimed


@pytest.fixture(scope="module")
def tok():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train_tokenizer(iter([system_prompt("{cwd}")] * 3 + ["def f(x):\n    return x + 1\n" * 30]), 1024)


@pytest.fixture(scope="module")
def engine(tok):
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=8192)
    return Engine(random_params(cfg), cfg, tok, buckets=(256, 1024, 4096))


def replay(engine, tok, conv, root):
    """Run the agent on `root`, scripted to write the oracle's assistant messages."""
    assistant = [m for m in conv["messages"] if m["role"] == "assistant"]
    replies = []
    for m in assistant:
        ids = tok.encode(m["content"])
        if m.get("tool_call"):
            ids += tok.encode_tool_call(m["tool_call"])
        else:
            ids += [tok.encode_special("<|assistant_end|>")]
        replies.append(ids)
    script = Script(tok, replies)
    script.V = engine.cfg.vocab_size
    agent = new_agent(engine, root, extra_mask=script, mode="auto", memory=True, max_steps=40)
    script.agent = agent
    if any(m["content"] == "rejected by user" for m in conv["messages"]):
        agent.policy.mode = "ask"  # so the call the oracle saw refused is asked about, and refused
    for m in conv["messages"]:  # one run_turn per user message: a rejection hands control back
        if m["role"] == "user":
            agent.run_turn(m["content"], approve=lambda name, args, decision: "no")
    return agent, script


@pytest.mark.parametrize("family,seed", [("find_definition", 3), ("explain", 4), ("git_inspect", 5),
                                         ("user_rejects", 6), ("recover_error", 7), ("fix_bug", 8)])
def test_synthetic_rollout_equals_agent_conversation(engine, tok, tmp_path, family, seed):
    oracle = make_task(family, seed, base=str(tmp_path)).rollout()
    task = make_task(family, seed, base=str(tmp_path))  # the same project again, untouched
    agent, script = replay(engine, tok, oracle, task.root)
    assert all(script.identity), "decoder ids drifted from the rendered conversation"
    # pytest prints its run time ("in 0.03s"), in fix_bug and in some recover_error variants
    pinned = lambda msgs: [{**m, "content": untimed(m["content"])}  # noqa: E731
                           if isinstance(m.get("content"), str) else m for m in msgs]
    want, got = pinned(oracle["messages"]), pinned(agent.messages)
    keys = ("role", "content", "tool_call")
    assert [{k: m[k] for k in keys if m.get(k) is not None} for m in got] == \
        [{k: m[k] for k in keys if m.get(k) is not None} for m in want]
    assert tok.render_conversation({"messages": got}) == tok.render_conversation({"messages": want})
