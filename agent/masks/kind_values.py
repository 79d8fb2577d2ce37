"""The value automata of tools from outside (protocol.Tool.kinds: an MCP server's, a serve
client's), for agent/masks/grammar.py: a string is free text (the grammar's own), an integer
`-?digits`, a number a JSON number, a boolean `true`/`false`, an enum one of its strings.
Each is memoised per kind on the Grammar (Grammar.cached), as the grounded values are.
"""
from __future__ import annotations

from agent.masks.vocab_trie import SortedStrings, Value


class PatternBytes(Value):
    """A value of a tool from outside whose bytes follow a small automaton (`kind` "integer":
    -?digits, "number": a JSON number). State: the automaton's state. The tokens admissible from
    a state are found once, among the tokens made only of the automaton's bytes."""
    MOVES = {"integer": ({0: {"-": 1, "d": 2}, 1: {"d": 2}, 2: {"d": 2}}, {2}),
             "number": ({0: {"-": 1, "d": 2}, 1: {"d": 2}, 2: {"d": 2, ".": 3, "e": 5},
                         3: {"d": 4}, 4: {"d": 4, "e": 5}, 5: {"+": 6, "-": 6, "d": 7},
                         6: {"d": 7}, 7: {"d": 7}}, {2, 4, 7})}

    def __init__(self, g, kind: str):
        super().__init__(g)
        self.moves, self.final = self.MOVES[kind]
        self.candidates = [t for t, b in g.pieces.items() if not b.translate(None, b"0123456789-+.eE")]
        self.options: dict = {}

    def start(self):
        return 0

    def step(self, state, piece):
        for c in piece:
            byte = "d" if 48 <= c <= 57 else "e" if c in b"eE" else chr(c) if c in b"+-." else None
            state = self.moves.get(state, {}).get(byte, -1)
        return state

    def fill(self, state, m):
        ids = self.options.get(state)
        if ids is None:
            ids = self.options[state] = [t for t in self.candidates if self.step(state, self.g.pieces[t]) >= 0]
        m[ids] = True
        return state in self.final


class EnumValue(Value):
    """A value that is one of a few strings (an enum, a boolean's true/false). State: bytes so far."""

    def start(self):
        return b""

    def step(self, q, piece):
        return q + piece

    def fill(self, q, m):
        m[self.g.ids_of(self.g.trie.walk_sorted(self.auto, q))] = True
        return self.auto.holds(q)


def kind_value(g, kind) -> Value:
    """The automaton of one argument of kind `kind` for the grammar `g`."""
    if kind == "string":
        return g.free
    if kind in PatternBytes.MOVES:
        return g.cached(("kind", kind), lambda: PatternBytes(g, kind))
    words = ("true", "false") if kind == "boolean" else kind
    return g.cached(("enum", words), lambda: EnumValue(g, SortedStrings(w.encode() for w in words)))
