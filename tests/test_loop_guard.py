"""The loop guard (agent/masks/loop_guard.py) with the shipped model's tokenizer: the shipped model's
loops are stopped by their first few repeats, token by token through the real encoding; indentation,
drawings, real Python and the oracle conversations of training tasks pass untouched. The engine
path is tests/test_agent_driver.py's, the remote one tests/test_remote.py's."""
import inspect
import json.decoder
import textwrap
import time

import numpy as np
import pytest

from agent.masks.grammar import CONTENT, Grammar
from agent.masks.loop_guard import ARGUMENT, HITS, MIN_BYTES, PROSE, LoopGuard, Tail, first_loop
from nanocode.protocol import MODE_TOOLS

# (text before the loop, its unit): what the shipped model ran on with until max_tokens
LOOPS = [("the file is ", "/s"), ("answer", ":"), ("", "tests/"), ("this ", "is"),
         ("x = 1 ", "* 2 * 3 "), ("it is defined in ", "word_counts_hoe "), ("see ", "`tests/` ")]


@pytest.fixture(scope="module")
def tok():
    from nanocode.checkpoint import load_tokenizer
    from nanocode.common import DEFAULT_MODEL
    return load_tokenizer(DEFAULT_MODEL / "checkpoints")


@pytest.fixture(scope="module")
def grammar(tok):
    return Grammar.shared(tok, tok.vocab_size)


@pytest.fixture(scope="module")
def guard(grammar):
    return LoopGuard.shared(grammar)


def first_ban(guard, ids, prose=True):
    """The index of the first token of `ids` the guard bans (None: all admitted) and the guard."""
    loops, full = guard.reply(), np.ones(guard.end.shape, bool)
    for i, t in enumerate(ids):
        if not loops.mask(ids[:i], full, prose)[t]:
            return i, loops
    return None, loops


@pytest.mark.parametrize("prose", [True, False])
@pytest.mark.parametrize("before,unit", LOOPS)
def test_the_shipped_models_loops_are_stopped_within_a_few_repeats(tok, guard, before, unit, prose):
    """In prose at the third time (a phrase three times in a row is what the evals' audit counts),
    in an argument value at the fourth; short units when they cover MIN_BYTES."""
    ids = tok.encode(before + unit * 40)
    i, _ = first_ban(guard, ids, prose)
    assert i is not None
    written = tok.decode(ids[:i])[len(before):]
    rule = PROSE if prose else ARGUMENT
    repeats = max(rule.repeats, -(-MIN_BYTES // len(unit)))  # the repeat that would complete the loop
    assert written.count(unit) < repeats and len(written) >= (repeats - 1) * len(unit) - len(unit)
    assert first_loop((before + written).encode(), rule) is None  # what was written holds no loop


def test_every_token_split_of_the_extension_is_banned(tok, guard):
    text = "tests/" * 3 + "tests"
    loops, full = guard.reply(), np.ones(guard.end.shape, bool)
    m = loops.mask(tok.encode(text), full, True)
    banned = {t for t in range(tok.bos_id) if not m[t]}
    want = {t for t in range(tok.bos_id)
            if first_loop(text.encode() + tok.id_to_bytes(t)) is not None}
    assert want and banned == want  # exactly the tokens that would complete the loop


def test_blank_units_drawings_and_real_python_pass(tok, guard):
    texts = ["    " * 60, "\n" * 80, "        \n" * 30, "\t\t\n" * 40, "# " + "-" * 78,
             "=" * 100, "| a | b | c |\n|---|---|---|---|---|---|---|---|\n", "+=====" * 10 + "+",
             "*" * 60, inspect.getsource(textwrap), inspect.getsource(json.decoder)]
    for text in texts:
        assert first_ban(guard, tok.encode(text))[0] is None, text[:60]
        assert first_loop(text.encode()) is None


def test_a_drawing_wider_than_a_line_is_a_loop(tok, guard):
    assert first_ban(guard, tok.encode("-" * 400))[0] is not None


def test_a_model_that_keeps_circling_is_cut_after_hits(tok, guard):
    """Turned away from the loop, it starts over: after HITS near loops the prose may only end."""
    loops, full = guard.reply(), np.ones(guard.end.shape, bool)
    out, unit, space, k = [], tok.encode("tests/"), tok.encode(" ")[0], 0
    while len(out) < 400:
        m = loops.mask(out, full, True)
        if loops.ended:
            break
        t = unit[k % len(unit)]
        out.append(t if m[t] else space)
        k = k + 1 if m[t] else 0  # turned away: it starts the unit over
    assert loops.ended and loops.hits == HITS and len(out) < 200
    assert np.flatnonzero(m).tolist() == [int(guard.end.argmax())]  # only <|assistant_end|>
    assert loops.mask(out, full, False).sum() > 1  # an argument value is never cut, only masked


def test_segments_restart_at_special_tokens(tok, guard):
    tests = tok.encode("tests/" * 3)
    arg = tok.encode_special("<|tool_arg|>")
    assert first_ban(guard, tests + [arg] + tests + [arg] + tests, prose=False)[0] is None
    twice = tok.encode("tests/" * 2)
    assert first_ban(guard, twice + [arg] + twice + [arg] + twice)[0] is None


def test_a_segment_switching_to_prose_is_judged_by_the_prose_rule(tok, guard):
    """The same bytes, three times in a row: admitted in an argument value, a loop in prose (the
    tail kept across the switch: Tail.use)."""
    ids = tok.encode("tests/" * 2 + "tests")
    slash = tok.encode("/")[0]
    full = np.ones(guard.end.shape, bool)
    assert first_loop(b"tests/" * 3) is None and first_loop(b"tests/" * 3, PROSE) == 17
    loops = guard.reply()
    assert loops.mask(ids, full, False)[slash]
    assert not loops.mask(ids, full, True)[slash]


def test_the_mask_never_empties_a_row(tok, guard):
    loops = guard.reply()
    ids = tok.encode("tests/" * 3 + "tests")
    only = np.zeros(guard.end.shape, bool)
    only[tok.encode("/")[0]] = True  # the grammar allows nothing but the loop's next byte
    assert loops.mask(ids, only, False)[tok.encode("/")[0]]  # an argument value that may not end: the grammar stands
    may_end = only.copy()
    may_end[guard.end.size - 1] = True  # a special token: where the grammar lets the value end
    stop = guard.reply().mask(ids, may_end, False)
    assert stop.sum() == 1 and stop[guard.end.size - 1]
    prose = guard.reply()  # prose (e.g. inside a backticked span): the reply ends instead
    assert (prose.mask(ids, only, True) == guard.end).all() and prose.ended


def test_detector_offsets_and_incremental_pushes_agree():
    text = b"abc " + b"xy" * 20
    whole = first_loop(text)
    assert whole == 4 + MIN_BYTES - 1
    t = Tail()
    offs = [t.push(text[i:i + 3]) for i in range(0, len(text), 3)]
    k = next(i for i, o in enumerate(offs) if o is not None)
    assert 3 * k + offs[k] == whole


def oracle_messages(n_seeds: int, base: str):
    from tasks import TRAIN_FAMILIES
    from tasks.harness import build_task
    for seed in range(n_seeds):
        for family in TRAIN_FAMILIES:
            task = build_task(family, seed, heldout=False, base=base)
            yield [m for m in task.rollout()["messages"] if m["role"] == "assistant"]


def check_untouched(tok, grammar, guard, conversations) -> int:
    """Every token of every assistant message (prose, call, argument values) is admitted by the
    grammar mask with the loop guard ANDed in, and no reply is cut; returns the conversations."""
    n = 0
    for messages in conversations:
        n += 1
        for msg in messages:
            ids = tok.render_message(msg)[0][1:]  # after <|assistant_start|>
            state, loops = grammar.state(tools=MODE_TOOLS["auto"]), guard.reply()
            for i, t in enumerate(ids):
                m = loops.mask(ids[:i], state.allowed(ids[:i]), state.phase == CONTENT)
                assert m[t] and not loops.ended, (msg, tok.decode(ids[:i + 1])[-80:])
    return n


def test_oracle_conversations_of_training_tasks_are_untouched(tok, grammar, guard, tmp_path):
    """One training task per family (the slow test below runs 306)."""
    assert check_untouched(tok, grammar, guard, oracle_messages(1, str(tmp_path))) >= 9


@pytest.mark.slow
def test_306_oracle_conversations_of_training_tasks_are_untouched(tok, grammar, guard, tmp_path):
    assert check_untouched(tok, grammar, guard, oracle_messages(34, str(tmp_path))) >= 300


def test_mask_cost_per_token(tok, grammar, guard):
    text = inspect.getsource(textwrap)[:6000]
    ids = tok.encode(text)
    full = np.ones(guard.end.shape, bool)
    loops = guard.reply()
    t0 = time.perf_counter()
    for i in range(len(ids)):
        loops.mask(ids[:i], full, True)
    per = (time.perf_counter() - t0) / len(ids)
    print(f"loop guard: {per * 1e6:.1f} us per token")
    assert per < 1e-3
