"""Train/inference identity: a synthetic rollout (train synth's oracle through the real tools) and
the same conversation produced by the agent loop at inference (real engine, real tools, the same
generated project) render to identical token ids. The tiny model is scripted to say exactly what
the oracle said (tests/test_agent_driver.py's Script); everything else (system prompt, tool results,
the tokens the loop appends) comes from the real agent. And the grounded grammar, names on
(whole Grep names, backticked spans from the context), admits every assistant message of a
training-split sample token by token: ~30 conversations by default, >= 300 with `-m slow`."""
import random
import warnings

import pytest

from agent.driver import Agent
from agent.grammar import Grammar
from agent.grounding import Grounding
from nanocode.checkpoint import load_tokenizer
from nanocode.common import DEFAULT_MODEL
from nanocode.protocol import MODE_TOOLS, REJECTED, system_prompt
from nanocode.engine import Engine
from nanocode.tokenizer import train_tokenizer
from test_agent_driver import Script
from tiny_models import random_params, tiny, untimed
from tools.dispatch import run_tool
from train.tasks import TRAIN_FAMILIES, make_task
from train.tasks.harness import build_task


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
    agent = Agent(engine, root, extra_mask=script, mode="auto", memory=True, max_steps=40)
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


# ---- the grounded grammar admits the training data ---------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    tok = load_tokenizer(DEFAULT_MODEL / "checkpoints")
    return tok, Grammar(tok, tok.vocab_size)


def grounded_replay(messages: list[dict], root: str, tok, g, bash: bool) -> None:
    """Assert every assistant message is admitted token by token by the grammar the agent samples
    under, with names on: Grounding fed as agent/sampler.py feeds it (each message's content and
    tool-call arguments), the project replayed step by step (Edit calls run, Bash calls too with
    `bash`; refreshed after either)."""
    ground, fed = Grounding(root), 0
    for k, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        for m in messages[fed:k]:
            ground.add_message(m)
        fed = k
        state = g.state(tools=MODE_TOOLS["auto"], ground=ground)
        ids = tok.render_message(msg)[0][1:]  # after <|assistant_start|>, up to <|assistant_end|>
        for j, t in enumerate(ids):
            assert state.allowed(ids[:j])[t], (f"message {k} token {j} ({tok.decode(ids[j:j + 1])!r}) refused after "
                                               f"{tok.decode(ids[max(0, j - 40):j])!r}")
        call = msg.get("tool_call")
        if call and messages[k + 1]["content"] != REJECTED and (call["name"] == "Edit" or bash and call["name"] == "Bash"):
            run_tool(root, call["name"], call["args"])
            ground.refresh()


def sample_admitted(n: int, base: str, tok, g, bash: bool) -> None:
    """n training-split conversations (train synth's build_task, families in turn, seeds drawn)."""
    rng = random.Random(n)
    for i in range(n):
        family, seed = TRAIN_FAMILIES[i % len(TRAIN_FAMILIES)], rng.randrange(10**9)
        messages = build_task(family, seed, False, base).rollout()["messages"]
        grounded_replay(messages, build_task(family, seed, False, base).root, tok, g, bash)


def test_a_training_sample_is_admitted_with_whole_names(shipped, tmp_path):
    sample_admitted(30, str(tmp_path), *shipped, bash=False)


@pytest.mark.slow
def test_300_training_conversations_are_admitted_with_whole_names(shipped, tmp_path):
    sample_admitted(300, str(tmp_path), *shipped, bash=True)
