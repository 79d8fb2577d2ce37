"""agent/masks/vocab_trie.py against brute force over a real tiny tokenizer's vocabulary: the trie holds
every token, `walk_sorted` finds exactly the prefixes a SortedStrings set can continue with,
`walk_occurrences` exactly the tokens that occur at the given text positions, and SortedStrings
answers span / has_prefix / holds / grown as a scan of its strings would. Each walk has several
strategies chosen by the FEW_* thresholds; every test forces each one in turn, so all of them are
checked on the same cases."""

import numpy as np
import pytest

from agent.masks import vocab_trie
from agent.masks.spans import AnchorText
from agent.masks.vocab_trie import ANY, SortedStrings, VocabTrie
from tiny_models import tiny_tokenizer

CORPUS = [
    "def parse_config(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "class Server:\n    def serve_forever(self, port=8080):\n        self.socket.listen(port)\n",
    "The server reads its settings from src/settings.py; the café serves crème brûlée.\n",
    "import os, sys\nfor name in sorted(os.listdir('src')):\n    print(name, file=sys.stderr)\n",
] * 4
WORDS = sorted({w.encode() for text in CORPUS for w in text.replace("\n", " ").split(" ") if w})
PATHS = [b"src/settings.py", b"src/server.py", b"src/serve/__init__.py", b"setup.cfg",
         b"tests/test_server.py", b"README.md", "docs/café.md".encode()]
IDENT = [chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) for c in range(256)]
HUGE = 10**9


@pytest.fixture(scope="module")
def pieces():
    tok = tiny_tokenizer(CORPUS, 400)
    return {i: b for b, i in tok.mergeable_ranks.items() if i < tok.bos_id}


@pytest.fixture(scope="module")
def trie(pieces):
    return VocabTrie(pieces)


def prefixes(pieces) -> set[bytes]:
    """Every prefix of every token, the empty one included: what the trie's nodes stand for."""
    return {b[:k] for b in pieces.values() for k in range(len(b) + 1)}


def test_the_trie_holds_every_token_and_nothing_else(pieces, trie):
    assert len(pieces) > 256  # the byte tokens and some merges: a real vocabulary
    assert len(trie.kids) == len(prefixes(pieces))
    for i, b in pieces.items():
        assert trie.tid[trie.node(b)] == i
    assert sorted(t for t in trie.tid if t >= 0) == sorted(pieces)
    assert trie.max_len == max(map(len, pieces.values()))


@pytest.mark.parametrize("few_strings,few_children", [
    (vocab_trie.FEW_STRINGS, vocab_trie.FEW_CHILDREN),  # as shipped
    (HUGE, 0),  # every span walked string by string
    (0, HUGE),  # every node's children probed one by one
    (0, 0),  # always the strings' distinct next bytes
])
@pytest.mark.parametrize("strings", [WORDS, PATHS, WORDS[:3]], ids=["words", "paths", "few"])
@pytest.mark.parametrize("q", [b"", b"s", b"src/", b"se", b"zz"])
@pytest.mark.parametrize("byte_ok", [ANY, IDENT], ids=["any", "ident"])
def test_walk_sorted_finds_exactly_the_continuable_prefixes(monkeypatch, pieces, trie, few_strings,
                                                            few_children, strings, q, byte_ok):
    monkeypatch.setattr(vocab_trie, "FEW_STRINGS", few_strings)
    monkeypatch.setattr(vocab_trie, "FEW_CHILDREN", few_children)
    want = {trie.node(p) for p in prefixes(pieces)
            if all(byte_ok[c] for c in p) and any(s.startswith(q + p) for s in strings)}
    assert trie.walk_sorted(SortedStrings(strings), q, byte_ok) == want


@pytest.mark.parametrize("few_occurrences", [vocab_trie.FEW_OCCURRENCES, 0, HUGE])
@pytest.mark.parametrize("L", [0, 1, 3])
@pytest.mark.parametrize("count", [1, 5, 200])
def test_walk_occurrences_finds_exactly_the_tokens_at_those_positions(monkeypatch, pieces, trie,
                                                                      few_occurrences, L, count):
    monkeypatch.setattr(vocab_trie, "FEW_OCCURRENCES", few_occurrences)
    data = "".join(CORPUS).encode()
    anchor = AnchorText(data, trie.max_len + 1)
    rng = np.random.default_rng(count * 10 + L)
    P = np.sort(rng.choice(len(data) - L + 1, size=count, replace=False)).astype(np.int32)
    P[-1] = len(data) - L  # one occurrence right at the end: nothing fits after it
    want = {i for i, b in pieces.items() if any(data[p + L:p + L + len(b)] == b for p in P.tolist())}
    got = trie.walk_occurrences(anchor, P, L)
    assert sorted(got.tolist()) == sorted(want)
    assert len(got) == len(set(got.tolist()))  # each token once


@pytest.mark.parametrize("q", [b"", b"s", b"se", b"src/", b"src/settings.py", b"zz", "docs/caf".encode()])
def test_sorted_strings_answer_as_a_scan_would(q):
    strings = SortedStrings(WORDS + PATHS)
    items = sorted(set(WORDS + PATHS))
    assert strings.items == items
    lo, hi = strings.span(q)
    assert items[lo:hi] == [s for s in items if s.startswith(q)]
    assert strings.has_prefix(q) == any(s.startswith(q) for s in items)
    assert strings.holds(q) == (q in items)
    if items[lo:hi]:  # a span within a range: the same strings, cut to the range
        assert strings.span(q, lo, hi) == (lo, hi)
        assert strings.span(q, lo + 1, hi) == ((lo + 1, hi) if hi > lo + 1 else (lo + 1, lo + 1))


def test_grown_merges_new_strings_and_keeps_the_original():
    class Paths(SortedStrings):
        pass
    base = Paths(PATHS)
    base.checked = True
    grown = base.grown([b"src/new.py", PATHS[0], b"a.txt"])
    assert grown.items == sorted(set(PATHS) | {b"src/new.py", b"a.txt"})
    assert type(grown) is Paths and grown.checked  # its class and attributes kept
    assert base.items == sorted(set(PATHS))  # the original untouched
