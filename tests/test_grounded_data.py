"""The training data and the grounded grammar agree: every assistant message `train synth` writes
is admitted token by token by the grammar the agent samples under (agent/masks/grammar.py with
agent/masks/grounding.py, names on: whole Grep names, backticked spans of prose from the context,
agent/masks/prose.py), replayed on the project as it was at that step and fed to the grounding as the
sampler feeds it (Grounding.add_message), and every tool result replays byte for byte. A conversation the grammar refused would teach the model a move it can
never make at inference (the train/inference identity).

Fast: one task per family (all families, eval-only ones too). Slow: >= 300 conversations drawn as
`train synth` draws them (`python -m pytest -q -m slow tests/test_grounded_data.py`).
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from agent.masks.grammar import Grammar
from agent.masks.grounding import Grounding
from nanocode.checkpoint import load_tokenizer
from nanocode.common import DEFAULT_MODEL
from nanocode.protocol import MODE_TOOLS, REJECTED
from tasks import ATTEMPT_STRIDE, ATTEMPTS, EVAL_ONLY_FAMILIES, TRAIN_FAMILIES, make_task
from tiny_models import untimed
from tools.dispatch import run_tool

FAMILIES = TRAIN_FAMILIES + EVAL_ONLY_FAMILIES


@pytest.fixture(scope="module")
def grammar():
    tok = load_tokenizer(DEFAULT_MODEL / "checkpoints")
    return tok, Grammar(tok, tok.vocab_size)


def replay(messages: list[dict], root: str, tok, grammar) -> Counter:
    """Assert every assistant message is admitted and every tool result reproduces; count calls."""
    ground, fed, calls = Grounding(root), 0, Counter()
    for k, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        for m in messages[fed:k]:
            ground.add_message(m)
        fed = k
        state = grammar.state(tools=MODE_TOOLS["auto"], ground=ground)
        ids = tok.render_message(msg)[0][1:]  # after <|assistant_start|>, up to <|assistant_end|>
        for j, t in enumerate(ids):
            if not state.allowed(ids[:j])[t]:
                raise AssertionError(f"message {k} token {j} ({tok.decode(ids[j:j + 1])!r}) refused after "
                                     f"{tok.decode(ids[max(0, j - 40):j])!r}: {msg.get('tool_call')}")
        call = msg.get("tool_call")
        if call is None:
            continue
        calls[call["name"]] += 1  # admitted by the grammar (a rejected call too)
        if messages[k + 1]["content"] == REJECTED:
            continue
        assert untimed(run_tool(root, call["name"], call["args"])) == untimed(messages[k + 1]["content"]), (k, call)
        if call["name"] in ("Edit", "Bash"):
            ground.refresh()
    return calls


def roll_and_replay(family: str, seed: int, base: str, tok, grammar) -> Counter:
    for attempt in range(ATTEMPTS):  # as train synth does: a project the family cannot use
        aseed = seed + attempt * ATTEMPT_STRIDE  # gives way to the next one
        try:
            messages = make_task(family, aseed, False, base).rollout()["messages"]
            break
        except (ValueError, IndexError):  # what train synth's retry catches in practice
            if attempt == ATTEMPTS - 1:
                raise
    task = make_task(family, aseed, False, base)  # the same project again, untouched, same path
    return replay(messages, task.root, tok, grammar)


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f == "fix_bug_across" else f
                                    for f in FAMILIES])  # fix_bug_across: the slowest (test_real_packages has one)
def test_each_family_is_admitted(family, grammar, tmp_path):
    tok, g = grammar
    calls = roll_and_replay(family, 7_000 + FAMILIES.index(family), str(tmp_path), tok, g)
    assert sum(calls.values()) >= 1


@pytest.mark.slow
def test_a_synth_sample_is_admitted(grammar, tmp_path):
    tok, g = grammar
    rng, total, n = random.Random(0), Counter(), 0
    while n < 300:
        family, seed = rng.choice(FAMILIES), rng.randrange(10**9)
        total += roll_and_replay(family, seed, str(tmp_path), tok, g)
        n += 1
    print(f"{n} conversations admitted; calls replayed: {dict(total)}")
    assert all(total[name] > 0 for name in ("Read", "Edit", "Grep", "Bash"))
