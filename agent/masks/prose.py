"""The content phase (thoughts before a call, final answers) as a grounded automaton: names in
prose come from the context, as names in calls do.

Outside backticks prose is free, but for `path:line` citations: a run of path bytes
(`[A-Za-z0-9_./-]`) that looks like a path (a '/', or a '.' before a letter) followed by ':'
and a digit must be a listed file, and its digits a line in it (Citations: 1..its number of
lines, no leading zero). `e.g. 10:30` and `x = a:1` stay free, and so is a URL: a run after
`scheme:` that starts `//` (`http://example.com:8443/x.py:3`), and a port and its path after a
host's ':' (`localhost:8443/app/x.py:3`, `127.0.0.1:8000/x.py:3`), up to the next byte that is no
path byte. A bare `host:PORT/path` could in principle be a file `PORT/path` cited after a colon;
we read it as a URL, because a folder named by digits alone is rare and a URL is common, while a
refused URL leaves the model no way to write it. A host with a dot and no scheme still reads as a
citation (`example.com:8080` is refused: a known limit; `http://example.com:8080` is free).

A span in single backticks is one of
  an occurrence  of the context (agent/masks/spans.py SpanText: project files, their listing, every
                 message but the model's own prose, and every tool call so far), starting at an identifier boundary; it may close
                 only where the occurrence may end (`mean_pr` and `ean_price` never close where
                 only `mean_price` occurs; a snippet like `return a + b` does)
  a citation     `path:line`, as above (a Read result numbers lines, it does not hold the string)
A command in backticks is no exception: one the model announces before running it must already
occur (the system prompt holds `python -m pytest -q`); after the call, its arguments are context.
Tokens are checked byte by byte across their backticks: a token may close one span and open
another. A fence (three backticks) opens a code block that is free text up to the next three
backticks: code the model proposes need not exist yet. Two backticks that are not a fence, an
empty span, and a reply that ends inside a span or a fence are never written.

Masks are memoised per (state key, context version): outside spans the key is the pending
citation only, so ordinary prose reuses one mask per reply. Inside a span the occurrence set
is walked with the vocabulary trie (the first token of a span from the tokens that start an
occurrence, gathered incrementally as the context grows); the few tokens that hold a backtick
or a colon before a digit, and digit tokens where a line number goes, are decided by running
the automaton on their bytes, so a mask admits exactly what step() admits.
"""
from __future__ import annotations

import re

import numpy as np

from agent.masks.vocab_trie import BYTE, Value

OUT, SPAN, TICKS, FENCE, LOST = range(5)
BAD = "bad"   # a citation that cannot be: a path-like run that is no listed file, then ':'
TICK = 96
RUN_BYTES = 1024  # a path run is tracked up to this long
PATH_BYTE = [chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_./-") for c in range(256)]
PATH_LIKE = re.compile(rb"/|\.[A-Za-z]")
COLON_DIGIT = re.compile(rb":[0-9]")
AFTER_HOST = b":"  # a run after a host's ':' (a run that is neither a path nor a listed file) starts with it
PORT_PATH = re.compile(rb":[0-9]+/")  # such a run that is a port and a URL's path


def _path(run: bytes) -> bytes:
    """The run's own bytes, without the AFTER_HOST mark: what may name a listed file."""
    return run.removeprefix(AFTER_HOST)


def _path_like(run: bytes) -> bool:
    """Whether a run before ':' + digit reads as a path: a '/' or a '.' before a letter, but not
    a URL: a `//host` (the run after `scheme:`), or a port and its path after a host's ':'."""
    if PORT_PATH.match(run):
        return False
    run = _path(run)
    return bool(PATH_LIKE.search(run)) and not run.startswith(b"//")


def _head(run: bytes) -> str:
    """How a run starts, as far as _path_like's `//` and port tests can still change: a memo key
    part (a run after a host: a port and its path stay free; digits alone may still become one)."""
    if run.startswith(AFTER_HOST):
        rest = _path(run)
        return "port path" if PORT_PATH.match(run) else "port" if rest.isdigit() else "host " + _head(rest)
    return "url" if run.startswith(b"//") else "slash" if run == b"/" else "empty" if not run else "other"


class ProseLexicon:
    """Per vocabulary: the tokens decided by running the automaton (a backtick, or a colon
    before a digit), those that start with a digit, and the separator byte's."""

    def __init__(self, g):
        pieces = g.pieces.items()
        self.special = np.array([t for t, b in pieces if b"`" in b or COLON_DIGIT.search(b)], np.int64)
        self.run_matters = any(COLON_DIGIT.search(b) for _, b in pieces)  # then OUT keys hold the run
        self.digit_lead = np.array([t for t, b in pieces if b[:1].isdigit()], np.int64)
        self.sep = np.array([t for t, b in pieces if b == b"\xff"], np.int64)


class Prose(Value):
    """The automaton over a SpanText (`auto`). States: (OUT, path run, pending citation: None,
    BAD or (file, digits)), (SPAN, bytes so far, occurrence starts P), (TICKS,) after two backticks, (FENCE, backticks seen), (LOST,) after a token the
    mask refused (only a caller that forces tokens gets there: free up to the next backtick)."""

    def __init__(self, g, text):
        super().__init__(g, text)
        self.lex = g.cached("prose", lambda: ProseLexicon(g))
        self.first = np.zeros(g.n_vocab, bool)  # tokens that start an occurrence, of starts[:walked]
        self.walked = 0

    def start(self):
        return OUT, b"", None

    def feed(self, state, piece: bytes):
        """step(), never dead: a refused piece is LOST in a span, plain prose outside one."""
        nxt = self.step(state, piece)
        if nxt is None:
            return (LOST,) if state[0] in (SPAN, TICKS) else self.start()
        return nxt

    def step(self, state, piece: bytes):
        """The state after `piece`, or None where it is not admissible."""
        i = 0
        while state is not None and i < len(piece):
            if state[0] == SPAN:
                j = piece.find(b"`", i)
                j = len(piece) if j < 0 else j
                if j > i:
                    state, i = self._extend(state, piece[i:j]), j
                else:
                    state, i = self._close(state), i + 1
            else:
                state, i = self._byte(state, piece[i]), i + 1
        return state

    def _byte(self, s, c: int):
        kind = s[0]
        if kind == OUT:
            _, run, cite = s
            if c == TICK:
                return SPAN, b"", self.auto.starts
            if cite is not None and 48 <= c <= 57:
                if cite is BAD or not self.auto.cites.number(cite[0], cite[1] + BYTE[c], False):
                    return None
                return OUT, run + BYTE[c], (cite[0], cite[1] + BYTE[c])
            if c == 58:  # ':'
                if _path(run) in self.auto.cites.files:
                    return OUT, b"", (_path(run), b"")
                if _path_like(run):
                    return OUT, b"", BAD
                return OUT, AFTER_HOST if run else b"", None  # `localhost:`, `http:`, `a:`: maybe a host
            return OUT, (run + BYTE[c])[:RUN_BYTES] if PATH_BYTE[c] else b"", None
        if kind == TICKS:
            return (FENCE, 0) if c == TICK else None
        if kind == FENCE:
            return ((self.start() if s[1] == 2 else (FENCE, s[1] + 1)) if c == TICK else (FENCE, 0))
        return self.start() if c == TICK else s  # LOST

    def _extend(self, s, chunk: bytes):
        _, q, P = s
        q2 = q + chunk
        P2 = self.auto.step(P, len(q), chunk) if len(P) else P
        if len(P2) or self._cite(q2, False):
            return SPAN, q2, P2
        return None

    def _close(self, s):
        _, q, P = s
        if not q:
            return (TICKS,)
        if self.auto.closable(P, len(q)) or self._cite(q, True):
            return self.start()
        return None

    def _cite(self, q: bytes, whole: bool) -> bool:
        """Whether q is (whole) or may become (not whole) a `path:line` citation."""
        cites, k = self.auto.cites, q.rfind(b":")
        if k < 0:
            return not whole and cites.strings.has_prefix(q)
        return cites.number(q[:k], q[k + 1:], whole)

    def key(self, s):
        v, kind = self.auto.version, s[0]
        if kind == OUT:  # a run matters only to tokens with a colon before a digit, and then
            run = s[1]   # itself only while it may still become a listed file
            if not self.lex.run_matters:
                run = None
            elif not self.auto.cites.strings.has_prefix(_path(run)):  # what decides a later ':' + digit
                run = bool(PATH_LIKE.search(run)), run[-1:] == b".", _head(run)
            return v, OUT, s[2], run
        if kind == SPAN:
            return v, SPAN, s[1]
        return (v,) + s

    def fill(self, s, m):
        g, lex, kind = self.g, self.lex, s[0]
        if kind == SPAN:
            _, q, P = s
            if q:
                m[g.trie.walk_occurrences(self.auto, P, len(q))] = True
            else:
                m |= self._first()
            cites = self.auto.cites
            if b":" not in q and cites.strings.has_prefix(q):
                ids = g.ids_of(g.trie.walk_sorted(cites.strings, q))
                m[ids] = True
                self._decide(s, m, np.array([t for t in ids.tolist() if b":" in g.pieces[t]], np.int64))
            m[lex.sep] = False
            if b":" in q and self._cite(q, False):
                self._decide(s, m, lex.digit_lead)
        elif kind != TICKS:
            m |= g.text
            if kind == OUT and s[2] is not None:
                self._decide(s, m, lex.digit_lead)
        self._decide(s, m, lex.special)
        return kind == OUT

    def _decide(self, s, m, ids) -> None:
        pieces = self.g.pieces
        closed = self._close(s) if s[0] == SPAN else None  # most special tokens in a span close it
        for t in ids.tolist():
            b = pieces[t]
            if s[0] == SPAN and b[:1] == b"`":
                m[t] = closed is not None and self.step(closed, b[1:]) is not None
            else:
                m[t] = self.step(s, b) is not None

    def _first(self) -> np.ndarray:
        """Tokens that start an occurrence: walked once per start, as the context grows."""
        starts = self.auto.starts
        if self.walked < len(starts):
            self.first[self.g.trie.walk_occurrences(self.auto, starts[self.walked:], 0)] = True
            self.walked = len(starts)
        return self.first
