"""agent/masks/prose.py alone: the Prose automaton over a SpanText made here from a real project
folder (no Grounding, no model), with a tiny real BPE tokenizer's Grammar. Outside backticks
prose is free but for `path:line` citations, which must name a listed file and a line in it; a
backticked span must occur in the context at identifier boundaries (or be a citation); a fence
is free; `feed` never dies; the reply stops only outside a span; and every mask admits exactly
the tokens step() admits. tests/test_whole_names.py checks the same through the whole grammar
with the shipped tokenizer."""
import numpy as np
import pytest

from agent.masks.grammar import Grammar
from agent.masks.prose import LOST, OUT, SPAN, TICKS, Prose
from agent.masks.spans import Citations, SpanText

CART = ("class Stack:\n    def push(self, item):\n        self.items.append(item)\n\n\n"
        "def mean_price(items):\n    return sum(i.price for i in items) / len(items)\n")  # 7 lines
FILES = {"shop/cart.py": CART, "README.md": "# shop\nrun `python -m pytest -q`\n"}


@pytest.fixture(scope="module")
def g(tok):
    return Grammar(tok, tok.vocab_size)


@pytest.fixture
def prose(g, tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    text = SpanText()
    for body in FILES.values():
        text.add(body.encode())
    text.add(b"\n".join(name.encode() for name in FILES))  # the listing
    assert text.sync(g.trie.max_len + 1, Citations(str(tmp_path), [n.encode() for n in FILES]))
    return Prose(g, text)


def ok(p, text: str) -> bool:
    """Whether `text` steps, whole and byte by byte alike, and may then end the reply."""
    whole = p.step(p.start(), text.encode())
    state = p.start()
    for c in text.encode():
        state = state and p.step(state, bytes([c]))
    assert (whole is None) == (state is None) and (whole == state), text
    return whole is not None and whole[0] == OUT


@pytest.mark.parametrize("text", [
    "prose outside backticks is free: zorblax mean_pr ean_price.",
    "`mean_price` is in `shop/cart.py`; `Stack` too.",
    "it returns `sum(i.price for i in items) / len(items)`.",
    "running `python -m pytest -q`.",
    "see shop/cart.py:6 and `shop/cart.py:7`, or README.md:2.",
    "at 10:30, ratio 3.5:1, x = a:1, see: 2 things, localhost:8080.",
    "like this:\n```python\ndef zorblax_new():\n    `unbacked` here\n```\ndone.",
])
def test_what_prose_may_say(prose, text):
    assert ok(prose, text)


@pytest.mark.parametrize("text", [
    "`mean_pr`", "`ean_price`", "`mean_prize`", "`zorblax`", "running `git log -n 3`.",
    "see shop/cart.py:8.", "see shop/cart.py:06.", "see shop/cart.py:0.", "see shop/nope.py:3.",
    "`shop/cart.py:99`", "at example.com:8080",  # a host with a dot reads as a citation: a known limit
    "``x", "`` `", "``",
])
def test_what_prose_may_not_say(prose, text):
    assert not ok(prose, text)


@pytest.mark.parametrize("text", ["`mean_pr", "```python\nunclosed", "`", "see `Stack"])
def test_a_reply_never_ends_inside_a_span_or_a_fence(prose, g, text):
    state = prose.step(prose.start(), text.encode())
    assert state is not None and state[0] != OUT
    assert not prose.mask(state, (g.a_end,))[g.a_end]
    assert prose.mask(prose.start(), (g.a_end,))[g.a_end]


def test_feed_never_dies(prose):
    """A refused piece (a forced token) is LOST inside a span, free up to the next backtick;
    outside one it starts over."""
    assert prose.feed(prose.start(), b"`zorbl") == prose.start()  # refused from plain prose
    span = prose.feed(prose.feed(prose.start(), b"`"), b"zorbl")
    assert span == (LOST,)
    assert prose.feed(span, b"anything: 9") == (LOST,)
    assert prose.feed(span, b"`") == prose.start()
    assert prose.feed(prose.start(), b"shop/nope.py:3") == prose.start()
    assert prose.feed(prose.start(), b"``")[0] == TICKS


def test_the_context_grows_what_may_be_named(prose, g):
    assert not ok(prose, "it printed `zorblax: 42 total`.")
    prose.auto.add(b"zorblax: 42 total\n")  # a tool result, say
    before = prose.auto.version
    prose.auto.sync(g.trie.max_len + 1, prose.auto.cites)
    assert prose.auto.version == before + 1
    assert ok(prose, "it printed `zorblax: 42 total`, then `zorblax`.")


@pytest.mark.parametrize("prefix", ["", "plain words ", "see `mean", "see `", "at shop/cart.py:",
                                    "at shop/cart.py", "``` code\n", "`shop/cart.py:", "``", "`Stack",
                                    "at http:", "at http:/", "at http://host", "at x/", "at /", "at localhost:",
                                    "at localhost:84", "at localhost:8443/", "at localhost:8443/app/x",
                                    "at http://h:8443/x", "see:", "see:shop/cart", "see:shop/cart.py", "at a:1",
                                    "at a:/", "at a:1.", "at a:1/"])
def test_each_mask_admits_exactly_what_step_admits(prose, g, prefix):
    state = prose.step(prose.start(), prefix.encode())
    assert state is not None
    m = prose.mask(state, (g.a_end,))
    wrong = [t for t, b in g.pieces.items() if bool(m[t]) != (prose.step(state, b) is not None)]
    assert wrong == [], [g.pieces[t] for t in wrong[:5]]
    assert m.any()


def test_plain_prose_shares_one_mask(prose, g):
    a = prose.mask(prose.step(prose.start(), b"one thing "), (g.a_end,))
    b = prose.mask(prose.step(prose.start(), b"and another "), (g.a_end,))
    assert a is b
    inside = prose.step(prose.start(), b"`mean")
    assert inside[0] == SPAN and prose.mask(inside, (g.a_end,)) is not a
    assert np.array_equal(prose.mask(inside, (g.a_end,)), prose.mask(prose.step(prose.start(), b"`mean"), (g.a_end,)))


def test_a_urls_port_is_free(prose):
    assert ok(prose, "the server is at http://localhost:8080/ now.")
    assert ok(prose, "or https://example.com:8443/ and //host:80")  # a scheme's `//host`: not a path
    assert not ok(prose, "see pkg//mod.py:3")  # a path with a doubled slash is still a citation (refused)


@pytest.mark.parametrize("text", [
    "at http://example.com:8443/x.py:3 and https://h:80/a/b.py:12#L3",  # a URL is no citation
    "at localhost:8443/app/x.py:3 or 127.0.0.1:8000/x.py:3",  # a bare host:port/path: a URL too
    "see:shop/cart.py:6, then http://localhost:8080/ and shop/cart.py:7",
])
def test_a_urls_path_after_its_port_is_free(prose, text):
    assert ok(prose, text)


@pytest.mark.parametrize("text", [
    "see:shop/nope.py:3",  # a colon before a path is no host: the citation is checked
    "at localhost:8443/ then shop/nope.py:3",  # the URL ends at its run; citations after it are checked
    "at a:1 shop/cart.py:9", "at a:x/nope.py:3",  # no port, no URL
])
def test_a_citation_near_a_url_is_still_checked(prose, text):
    assert not ok(prose, text)
