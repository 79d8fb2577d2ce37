"""Occurrence automata over byte texts, for the grounded grammar: an Edit's old_string must come
from its file (AnchorText), a backticked span in prose from the context (SpanText), a `path:line`
citation must name a file and a line in it (Citations).

A state of an occurrence automaton is the array P of the start positions where the bytes written
so far (L of them) occur: what a suffix automaton state stands for (its end positions), kept
explicitly since building a suffix automaton in Python costs hundreds of bytes per text byte.
Advancing by a token filters P (vectorised while it is large); agent/masks/vocab_trie.py walks the
vocabulary along P. Texts are kept as an int32 array padded with 256 (matches no byte).
"""
from __future__ import annotations

import os

import numpy as np

from agent.masks.vocab_trie import SortedStrings
from tools.files import is_binary_bytes

IDENT = [chr(c).isascii() and (chr(c).isalnum() or c == 95) for c in range(256)]
IDENT_BYTES = bytes(c for c in range(256) if IDENT[c])
BOM = b"\xef\xbb\xbf"
SEP = b"\xff"             # between the texts of a SpanText (UTF-8 never holds it)
SPAN_TEXT_BYTES = 16 * 1024 * 1024
_IDENT = np.array(IDENT + [False], bool)  # by byte, 256 (past a text) included
_CONT = np.zeros(257, bool)  # UTF-8 continuation bytes: no span starts or ends before one
_CONT[0x80:0xC0] = True
_NO_START = _CONT.copy()  # blanks, backticks, the separator and past-the-end start no span
_NO_START[[9, 10, 11, 12, 13, 32, 96, 255, 256]] = True


class AnchorText:
    """The bytes an Edit's old_string must come from, as an automaton of occurrence sets: the
    count of occurrences is len(P), and old_string may stop only where it is 1 and at a
    character boundary. Starts are character starts, so old_string is always whole UTF-8."""

    def __init__(self, data: bytes, pad: int):
        self.data, self.n = data, len(data)
        self.arr = np.full(self.n + pad + 1, 256, np.int32)  # 256: past the end, matches no byte
        self.arr[:self.n] = np.frombuffer(data, np.uint8)
        self.starts = np.flatnonzero((self.arr[:self.n] & 0xC0) != 0x80).astype(np.int32)

    def step(self, P: np.ndarray, L: int, piece: bytes) -> np.ndarray:
        if len(P) == 1:
            p = int(P[0]) + L
            return P if self.data[p:p + len(piece)] == piece else P[:0]
        for k, b in enumerate(piece):
            P = P[self.arr[P + (L + k)] == b]
        return P

    def closable(self, P: np.ndarray, L: int) -> bool:
        if len(P) != 1 or L == 0:
            return False
        e = int(P[0]) + L
        return e == self.n or (self.data[e] & 0xC0) != 0x80


def anchor_bytes(data: bytes) -> bytes | None:
    """What Edit matches old_string against (BOM cut, CRLF as LF when every newline is CRLF),
    or None when it cannot be grounded (binary, not UTF-8, empty)."""
    if is_binary_bytes(data):
        return None
    data = data.removeprefix(BOM)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if b"\r\n" in data and data.count(b"\r\n") == data.count(b"\n"):
        data = data.replace(b"\r\n", b"\n")
    return data or None


class SpanText(AnchorText):
    """The context a backticked span must come from: texts added (project files, messages, tool
    calls) joined by SEP, at most SPAN_TEXT_BYTES (later ones are left out). It only grows: a
    span from a text since changed or dropped from the conversation stays admissible, and P
    stays valid across growth. `version` changes whenever what is admissible may have (texts
    added, new `cites`), so masks are memoised per version.

    A span starts at an occurrence start: a position not inside an identifier (its byte and
    the one before are not both identifier bytes), not blank, not a backtick, not inside a
    UTF-8 character. It may close where the byte written last or the occurrence's next byte
    is not an identifier byte (and the next is no continuation byte): `mean_pr` and `ean_price`
    cannot close where only `mean_price` occurs; `add(`, `return a + b` can."""

    def __init__(self):
        self.data, self.n, self.pad, self.version = b"", 0, 0, 0
        self.arr = np.full(1, 256, np.int32)
        self.starts = np.zeros(0, np.int32)
        self.cites: Citations | None = None
        self._pending: list[bytes] = []
        self._added: set[int] = set()  # hashes of the texts added: a text repeated adds nothing

    def add(self, text: bytes) -> None:
        h = hash(text)
        if text and h not in self._added:
            self._added.add(h)
            self._pending.append(text)

    def sync(self, pad: int, cites: "Citations") -> bool:
        """Take in the texts added since the last sync, with `pad` sentinel slots past the end;
        whether they fit (False: they were left out)."""
        fit = True
        if self._pending or pad > self.pad or cites is not self.cites:
            new = SEP.join(self._pending)
            if self.n + len(new) + 1 > SPAN_TEXT_BYTES:
                new, fit = b"", False
            self._pending.clear()
            lo, data = self.n, self.data + new + SEP * bool(new)
            self.pad, self.data, self.n = max(pad, self.pad), data, len(data)
            arr = np.full(self.n + self.pad + 1, 256, np.int32)
            arr[:self.n] = np.frombuffer(data, np.uint8)
            arr[:self.n][arr[:self.n] == 255] = 256  # the separators match no byte
            cur, prev = arr[lo:self.n], arr[lo - 1:self.n - 1] if lo else np.concatenate(([256], arr[:self.n - 1]))
            ok = ~_NO_START[cur] & ~(_IDENT[prev] & _IDENT[cur])
            self.starts = np.concatenate((self.starts, np.flatnonzero(ok).astype(np.int32) + lo))
            self.arr, self.cites, self.version = arr, cites, self.version + 1
        return fit

    def closable(self, P: np.ndarray, L: int) -> bool:
        if L == 0 or not len(P):
            return False
        last, nxt = self.arr[P + (L - 1)], self.arr[P + L]
        return bool((~(_IDENT[last] & _IDENT[nxt]) & ~_CONT[nxt]).any())


class Citations:
    """`path:line` in prose: a listed file, a colon, a line number in 1..its number of lines
    (the file's count as Read numbers them, read when first cited). `strings` are the files
    with their colon, for walking a path being written. Made anew after every refresh."""

    def __init__(self, root: str, files):
        self.root, self.files = root, frozenset(files)
        self.strings = SortedStrings(f + b":" for f in self.files)
        self._lines: dict[bytes, int] = {}

    def lines(self, f: bytes) -> int:
        n = self._lines.get(f)
        if n is None:
            n = 0
            try:
                with open(os.path.join(self.root, os.fsdecode(f)), "rb") as fh:
                    last = b"\n"
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        n, last = n + block.count(b"\n"), block[-1:]
                    n += last != b"\n"
            except OSError:
                n = 0
            self._lines[f] = n
        return n

    def number(self, f: bytes, digits: bytes, whole: bool) -> bool:
        """Whether `digits` after `f:` are (whole) or may become (not whole) a line of f."""
        if f not in self.files:
            return False
        if not digits:
            return not whole and self.lines(f) > 0
        return digits.isdigit() and digits[:1] != b"0" and int(digits) <= self.lines(f)
