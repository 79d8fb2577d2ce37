"""The vocabulary's ordinary tokens as a byte trie, walked together with an automaton.

A mask over V tokens is the set of tokens whose bytes the value's automaton accepts from its
current state. Walking the trie depth first alongside the automaton visits only the prefixes the
automaton can read, so a mask costs about the size of that intersection, not V times a token's
length; sorted-string sets (SortedStrings: paths, words, program names) are walked by bisecting
spans, occurrence sets (an Edit's old_string, the context of a backticked span) by vectorised edge
lookups. `Value`, the automaton of one argument (or of prose) that masks are made from, is the
base of agent/masks/grammar.py's values and agent/masks/prose.py's Prose.
"""
from __future__ import annotations

import copy
from bisect import bisect_left

import numpy as np

FEW_STRINGS = 4        # a span this small is walked string by string
FEW_CHILDREN = 8       # a trie node with this few children probes each
FEW_OCCURRENCES = 32   # an occurrence set this small is walked in Python
MEMO_MASKS = 128       # masks a Value keeps (and grammar options a Grammar keeps)
BYTE = [bytes((c,)) for c in range(256)]
ANY = [True] * 256


class VocabTrie:
    """The ordinary tokens' bytes as a trie: node 0 is the empty prefix, kids[n] maps a byte to
    a child node, tid[n] is the token ending at n (-1: none). Edges are also kept as sorted
    keys node * 257 + byte for vectorised walks (257: byte 256 marks the end of a text)."""

    def __init__(self, pieces: dict[int, bytes]):
        kids, tid = [{}], [-1]
        for i, b in pieces.items():
            n = 0
            for c in b:
                nxt = kids[n].get(c)
                if nxt is None:
                    nxt = kids[n][c] = len(kids)
                    kids.append({})
                    tid.append(-1)
                n = nxt
            tid[n] = i
        self.kids, self.tid, self.tids = kids, tid, np.array(tid, np.int64)
        self.max_len = max(len(b) for b in pieces.values())
        edges = sorted((n * 257 + c, m) for n, d in enumerate(kids) for c, m in d.items())
        edges.append((2**31 - 1, 0))  # a last key above every other: searches stay in bounds
        self.edge_keys = np.array([k for k, _ in edges], np.int32)
        self.edge_child = np.array([m for _, m in edges], np.int32)
        self.first = np.full(257, -1, np.int32)  # byte -> node (the first level, dense)
        self.second = np.full(257 * 257, -1, np.int32)  # two bytes -> node (the second level)
        for c, n in kids[0].items():
            self.first[c] = n
            for c2, n2 in kids[n].items():
                self.second[c * 257 + c2] = n2

    def node(self, b: bytes) -> int:
        n = 0
        for c in b:
            n = self.kids[n][c]
        return n

    def walk_sorted(self, strings, q: bytes, byte_ok=ANY) -> set[int]:
        """Nodes u with q + bytes(u) a prefix of one of `strings` (a SortedStrings), every byte
        of u passing byte_ok; node 0 included when q itself is such a prefix."""
        items, kids = strings.items, self.kids
        lo, hi = strings.span(q)
        nodes: set[int] = set()
        stack = [(0, q, lo, hi)] if lo < hi else []
        while stack:
            node, s, lo, hi = stack.pop()
            nodes.add(node)
            children, d = kids[node], len(s)
            if not children:
                continue
            if hi - lo <= FEW_STRINGS:
                for item in items[lo:hi]:
                    n = node
                    for c in item[d:d + self.max_len]:
                        n = kids[n].get(c) if byte_ok[c] else None
                        if n is None:
                            break
                        nodes.add(n)
            elif len(children) <= FEW_CHILDREN:
                for c, child in children.items():
                    if byte_ok[c]:
                        lo2, hi2 = strings.span(s + BYTE[c], lo, hi)
                        if lo2 < hi2:
                            stack.append((child, s + BYTE[c], lo2, hi2))
            else:  # many children: visit the distinct next bytes of the strings instead
                i = lo
                while i < hi and len(items[i]) == d:
                    i += 1
                while i < hi:
                    c = items[i][d]
                    j = bisect_left(items, s + BYTE[c + 1], i, hi) if c < 255 else hi
                    child = children.get(c)
                    if child is not None and byte_ok[c]:
                        stack.append((child, s + BYTE[c], i, j))
                    i = j
        return nodes

    def walk_occurrences(self, anchor, P: np.ndarray, L: int) -> np.ndarray:
        """Tokens t with text[p + L : p + L + len(t)] == t for some p in P (an AnchorText)."""
        if len(P) <= FEW_OCCURRENCES:
            ids, data, kids, tid = set(), anchor.data, self.kids, self.tid
            for p in P.tolist():
                n = 0
                for c in data[p + L:p + L + self.max_len]:
                    n = kids[n].get(c)
                    if n is None:
                        break
                    if tid[n] >= 0:
                        ids.add(tid[n])
            return np.fromiter(ids, np.int64, len(ids))
        keys, child, arr = self.edge_keys, self.edge_child, anchor.arr
        seen = np.zeros(len(self.kids), bool)
        pos = P + L  # the first two trie levels from dense tables, then one level at a time
        node = self.first[arr[pos]]  # for every occurrence at once
        seen[node[node >= 0]] = True
        node = self.second[arr[pos] * 257 + arr[pos + 1]]
        pos, node = pos[node >= 0] + 2, node[node >= 0]
        seen[node] = True
        for _ in range(self.max_len - 2):
            key = node * 257 + arr[pos]
            idx = np.searchsorted(keys, key)
            ok = keys[idx] == key
            node, pos = child[idx[ok]], pos[ok] + 1
            if not len(node):
                break
            seen[node] = True
        ids = self.tids[seen]
        return ids[ids >= 0]


class SortedStrings:
    """Distinct byte strings, sorted, answering "does some string start with q" by bisection.
    No string holds the byte 0xff (UTF-8 never does), so `q + b"\\xff"` bounds those starting
    with q."""

    def __init__(self, strings):
        self.items = sorted(set(strings))

    def span(self, q: bytes, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
        """[lo, hi) of the strings that start with q (within the given range)."""
        hi = len(self.items) if hi is None else hi
        lo = bisect_left(self.items, q, lo, hi)
        if lo == hi or not self.items[lo].startswith(q):
            return lo, lo
        return lo, bisect_left(self.items, q + b"\xff", lo, hi)

    def has_prefix(self, q: bytes) -> bool:
        i = bisect_left(self.items, q)
        return i < len(self.items) and self.items[i].startswith(q)

    def grown(self, strings) -> "SortedStrings":
        """These strings and `strings`, in one merge (cheap when few are new); a copy of this
        object otherwise (its class and attributes kept)."""
        out = copy.copy(self)
        new = sorted(s for s in strings if not self.holds(s))
        out.items = sorted(self.items + new)  # two sorted runs: timsort merges them
        return out

    def holds(self, s: bytes) -> bool:
        i = bisect_left(self.items, s)
        return i < len(self.items) and self.items[i] == s


class Value:
    """One argument value's automaton walked with the vocabulary: start() -> state,
    step(state, piece) -> state, key(state) (equal keys: equal futures), fill(state, m) sets
    the admissible ordinary tokens in m and says whether the value may stop here. `g` is the
    agent/masks/grammar.Grammar it serves (its vocabulary size and ordinary-token mask); masks are
    memoised per (key, stop tokens), at most MEMO_MASKS per value."""

    def __init__(self, g, automaton=None):
        self.g, self.auto, self.memo = g, automaton, {}  # automaton: what grounding gave

    def mask(self, state, stops: tuple) -> np.ndarray:
        k = (self.key(state), stops)
        m = self.memo.get(k)
        if m is None:
            m = np.zeros(self.g.n_vocab, bool)
            if self.fill(state, m):
                m[list(stops)] = True
            if not m.any():  # a dead state, reached only by a forced token: let the value end
                if stops:
                    m[list(stops)] = True
                else:
                    m |= self.g.text
            if len(self.memo) >= MEMO_MASKS:
                del self.memo[next(iter(self.memo))]
            self.memo[k] = m
        return m

    def key(self, state):
        return state
