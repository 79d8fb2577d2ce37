"""Whole names only (agent/masks/grammar.py's Grep patterns, agent/masks/prose.py's backticked spans and
`path:line` citations), with the shipped tokenizer and a real git project: what the context
backs is admitted under any split, a garbled or misspelt name never closes, names=False is the
substring-and-free-prose behaviour."""
import os
import re

import numpy as np
import pytest

from agent.masks.grammar import Grammar
from agent.masks.grounding import Grounding
from evals.reply_audit import backticked_spans
from grammar_walks import calls, ident_runs, sp, words_of, write_files
from nanocode.checkpoint import load_tokenizer
from nanocode.common import DEFAULT_MODEL
from nanocode.protocol import TOOLS
from tiny_models import commit_all

CART = ("class Stack:\n    def push(self, item):\n        self.items.append(item)\n\n\n"
        "def mean_price(items):\n    return sum(i.price for i in items) / len(items)\n")
FILES = {"shop/cart.py": CART, "shop/__init__.py": "", "README.md": "# shop\nrun `python -m pytest -q`\n"}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_MODEL / "checkpoints")


@pytest.fixture(scope="module")
def g(tok):
    return Grammar(tok, tok.vocab_size)


@pytest.fixture
def project(tmp_path):
    root = str(tmp_path / "proj")
    os.makedirs(root)
    write_files(root, FILES)
    commit_all(root)
    return root


def encodings(tok, text):
    """The text canonically and byte by byte."""
    ranks = tok.mergeable_ranks
    return [tok.encode(text), [ranks[bytes([c])] for c in text.encode()]]


def prose_ok(g, tok, ground, text, end=True) -> bool:
    """Whether `text` is admitted as prose (then <|assistant_end|> when `end`); splits agree."""
    got = set()
    for ids in encodings(tok, text):
        ids = ids + [sp(tok, "assistant_end")] * end
        st = g.state(ground=ground)
        got.add(all(st.allowed(ids[:k])[t] for k, t in enumerate(ids)))
    assert len(got) == 1, text
    return got.pop()


def grep_ok(g, tok, ground, pattern) -> bool:
    got = set()
    for enc in encodings(tok, pattern):
        ids = [sp(tok, "tool_call_start"), *tok.encode("Grep"), sp(tok, "tool_arg"), *tok.encode("pattern"),
               sp(tok, "tool_val"), *enc, sp(tok, "tool_call_end")]
        st = g.state(ground=ground)
        got.add(all(st.allowed(ids[:k])[t] for k, t in enumerate(ids)))
    assert len(got) == 1, pattern
    return got.pop()


def occurs(s: str, context: str) -> bool:
    """s occurs in context starting and ending at an identifier boundary (an empty span, ``,
    names nothing: v6's tokenizer has a token for two backticks)."""
    if not s:
        return True
    w = r"[A-Za-z0-9_]"
    lead = rf"(?<!{w})" if re.match(w, s) else ""
    tail = rf"(?!{w})" if re.match(w, s[-1]) else ""
    return re.search(lead + re.escape(s) + tail, context) is not None


# ---- Grep ---------------------------------------------------------------------------------------
def test_grep_runs_close_only_at_whole_names(g, tok, project):
    ground = Grounding(project)
    for p in [r"def mean_price\(", r"\bmean_price\b", "class Stack", r"def push\(self", r"items\.append"]:
        assert grep_ok(g, tok, ground, p), p
    for p in [r"def p it\(", r"def p il\(", "mean_pr", r"mean_pr\(", r"def ean_price\(", "mean_prize", "Stac"]:
        assert not grep_ok(g, tok, ground, p), p
    st, ids = g.state(ground=ground), [sp(tok, "tool_call_start"), *tok.encode("Grep"), sp(tok, "tool_arg"),
                                       *tok.encode("pattern"), sp(tok, "tool_val"), *tok.encode("mean_pr")]
    m = st.allowed(ids)  # a prefix while still being written: it may go on, not stop
    assert m.any() and not m[sp(tok, "tool_call_end")] and m[tok.encode("ice")[0]]


def test_random_patterns_name_whole_words(g, tok, project):
    ground, rng = Grounding(project), np.random.default_rng(0)
    words = words_of([t.encode() for t in [*FILES.values(), *FILES]])
    for _, raw in calls(g, tok, ground, rng, 60, tools=("Grep",)):
        assert all(run in words for run in ident_runs(raw["pattern"])), raw["pattern"]


# ---- backticked spans ---------------------------------------------------------------------------
def test_spans_are_names_the_context_backs(g, tok, project):
    ground = Grounding(project)
    assert prose_ok(g, tok, ground, "`mean_price` is defined in `shop/cart.py`; `Stack` too.")
    assert prose_ok(g, tok, ground, "it returns `sum(i.price for i in items) / len(items)`.")
    assert prose_ok(g, tok, ground, "`mean_pr", end=False)  # a prefix while written
    for text in ["`mean_pr` is it.", "`ean_price`.", "`mean_prize`.", "`mean price`.", "`shop/carts.py`.",
                 "`p il`.", "`mean_price"]:
        assert not prose_ok(g, tok, ground, text), text
    assert prose_ok(g, tok, ground, "prose outside backticks is free: zorblax mean_pr ean_price.")


def test_a_snippet_from_a_tool_result_or_call(g, tok, project):
    ground = Grounding(project)
    assert not prose_ok(g, tok, ground, "it printed `zorblax: 42 total`.")
    ground.add_text("zorblax: 42 total\n")  # a tool result
    assert prose_ok(g, tok, ground, "it printed `zorblax: 42 total`.")
    assert prose_ok(g, tok, ground, "`zorblax`, then `42 total`.")
    assert not prose_ok(g, tok, ground, "`zorbla`.")


def test_citations_name_a_file_and_a_line_in_it(g, tok, project):
    ground = Grounding(project)
    n = CART.count("\n")
    for text in [f"see `shop/cart.py:{n}`.", "see `shop/cart.py:1`.", "at shop/cart.py:6, then README.md:2."]:
        assert prose_ok(g, tok, ground, text), text
    for text in [f"see `shop/cart.py:{n + 1}`.", "see `shop/cart.py:0`.", "see `shop/nope.py:1`.",
                 f"at shop/cart.py:{n + 1}.", "at shop/nope.py:3 it is.", "at shop/cart.py:07."]:
        assert not prose_ok(g, tok, ground, text), text
    assert prose_ok(g, tok, ground, "at 10:30, ratio 3.5:1, x:1 and see: 2 things.")


def test_an_edit_changes_what_may_be_cited_and_named(g, tok, project):
    ground = Grounding(project)
    assert not prose_ok(g, tok, ground, "`median_price` at `shop/cart.py:9`.")
    write_files(project, {"shop/cart.py": CART + "\n\ndef median_price(items):\n    return 0\n"})
    ground.refresh()
    assert prose_ok(g, tok, ground, "`median_price` at `shop/cart.py:9`.")


def test_fences_commands_and_malformed_ticks(g, tok, project):
    ground = Grounding(project)
    assert prose_ok(g, tok, ground, "like this:\n```python\ndef zorblax_new():\n    pass\n```\ndone.")
    assert not prose_ok(g, tok, ground, "```python\nunclosed")
    for text in ["``x``", "an empty `` span", "`mean_price` `"]:
        assert not prose_ok(g, tok, ground, text), text
    assert prose_ok(g, tok, ground, "running `python -m pytest -q`.")  # README.md holds it
    assert not prose_ok(g, tok, ground, "running `git log --oneline -n 3`.")  # nowhere yet
    assert not prose_ok(g, tok, ground, "running `capsh -q`.")


def test_random_prose_closes_only_backed_spans(g, tok, project):
    """Random walks in prose, backticks boosted: every closed span occurs in the context (the
    files, their listing) at an identifier boundary, or is a citation."""
    ground, rng = Grounding(project), np.random.default_rng(1)
    context = "\n".join([*FILES.values(), *sorted(FILES)])
    tick, end = tok.encode("`")[0], sp(tok, "assistant_end")
    spans = 0
    for _ in range(30):
        st, out = g.state(tools=(), ground=ground), []
        while len(out) < 60 and (not out or out[-1] != end):
            ok = np.flatnonzero(st.allowed(out))
            assert len(ok)
            out.append(int(tick if st.allowed(out)[tick] and rng.random() < 0.3 else rng.choice(ok)))
        text = tok.decode(out[:-1] if out[-1] == end else out)
        for s in backticked_spans(text):
            spans += 1
            cite = re.fullmatch(r"(.+):(\d+)", s)
            assert occurs(s, context) or cite and cite.group(1) in FILES, (s, text)
    assert spans > 5


# ---- the lever ----------------------------------------------------------------------------------
def test_names_off_is_the_old_behaviour(g, tok, project):
    ground = Grounding(project, names=False)
    assert grep_ok(g, tok, ground, r"def p it\(") and grep_ok(g, tok, ground, "ean_pr")
    assert not grep_ok(g, tok, ground, "zorblax")
    assert prose_ok(g, tok, ground, "`mean_pr` at `shop/nope.py:99`, at shop/nope.py:3.")
    fresh = Grounding(project, names=False)
    assert g.state(tools=tuple(TOOLS), ground=fresh).allowed([]) is g.content  # the constant prose mask
    assert fresh._listed is None  # nothing listed or scanned for prose


def test_prose_masks_are_memoised_and_never_empty(g, tok, project):
    ground = Grounding(project)
    ids = tok.encode("the mean is computed in `mean_price`; see shop/cart.py:6 and `Stack`. done")
    st = g.state(ground=ground)
    masks = [st.allowed(ids[:k]) for k in range(len(ids) + 1)]
    assert all(m.any() and m[t] for m, t in zip(masks, ids))
    plain = masks[:4]  # before any backtick: one shared array
    assert all(m is plain[0] for m in plain)
    again = g.state(ground=ground)
    assert all(again.allowed(ids[:k]) is masks[k] for k in range(len(ids) + 1))  # the same situation, the same array


def test_an_empty_file_is_never_cited(g, tok, project):
    write_files(project, {"shop/empty.txt": ""})
    ground = Grounding(project)
    assert not prose_ok(g, tok, ground, "`shop/empty.txt:", end=False)  # no line to go on with
    assert prose_ok(g, tok, ground, "`shop/empty.txt` is empty.")


@pytest.mark.parametrize("prefix", ["running `wc -l x", "see `mean", "at shop/cart.py:", "``` code\n", "ok `git"])
def test_the_prose_mask_admits_exactly_what_the_automaton_steps(g, tok, project, prefix):
    st = g.state(tools=(), ground=Grounding(project))
    ids = tok.encode(prefix)
    m = st.allowed(ids)
    assert [t for t in g.pieces if bool(m[t]) != (st.prose.step(st.pstate, g.pieces[t]) is not None)] == []


def test_a_forced_dead_pattern_still_gets_a_mask_that_can_end_it(g, tok, project):
    """A caller that forces a token the mask refused (a test, a fuzzer) must never meet an
    all-False row: the value may end there."""
    ids = [sp(tok, "tool_call_start"), *tok.encode("Grep"), sp(tok, "tool_arg"), *tok.encode("pattern"),
           sp(tok, "tool_val"), *tok.encode("zorblax_nope")]
    m = g.state(ground=Grounding(project)).allowed(ids)
    assert m.any() and m[sp(tok, "tool_call_end")]
