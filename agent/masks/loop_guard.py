"""Replies that never loop: a byte-level repetition detector, and the mask that keeps a reply from
extending a loop (`/s/s/s...`, `:::::...`, `tests/tests/...`, a name again and again), in prose
and in tool-call argument values alike.

The detector (Tail) reads one segment of a reply (the prose, each argument value) and keeps, for
every period p = 1..PERIODS, how many trailing bytes repeat the byte p before. A loop is a period
whose tail covers need(p) = max(repeats * p, MIN_BYTES) bytes with a unit that is not whitespace
only; a unit of rule and table bytes (DRAWING) needs RULE_BYTES. `repeats` is the segment's Rule:
REPEATS in an argument value, PROSE_REPEATS in prose, where a phrase said three times in a row is
already what evals/reply_audit.py counts as a repeating answer.

The mask (ReplyLoops.mask, ANDed into the grammar's) bans exactly the tokens whose bytes would
complete a loop; a row is never made all False (in prose the reply then ends, stop "loop"). A
reply that keeps circling (HITS entries into a near loop, one unit short) has its prose cut.

Trade-offs: exact bans for a small per-token cost (a compare per token and period, then a bisect
per period that could still loop); periods longer than PERIODS are not seen, tokens that hold a
loop by themselves are never written, and text that repeats on purpose (`0, 0, 0, 0, 0` in an
Edit) cannot be written out (the model must write `[0] * 5`). The thresholds pass every oracle
conversation of the training split untouched (tests/test_loop_guard.py).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

PERIODS = 128      # the longest unit looked for: a long line of code and its newline
# Chosen on the training split's oracle conversations (360 tasks): the closest any comes to a loop
# is 5 bytes short, so every one passes; within that margin as low as the shipped model's loops
# ask: a unit of 3 bytes or more is stopped at its 4th repeat, `/s` at its 6th, `:` at its 12th.
REPEATS = 4        # a loop repeats its unit this many times (in an argument value) ...
PROSE_REPEATS = 3  # ... in prose, three times: the thresholds pass the oracle's prose there too
MIN_BYTES = 12     # ... and covers at least this many bytes (short units: `::::`, `isis`)
RULE_BYTES = 120   # a drawing is a loop from this long (a rule wider than a line)
HITS = 3           # near loops entered in one reply before its prose is cut
WHITESPACE = b" \t\n\r\x0b\x0c"
DRAWING = b"-=_~#*|+: \t"  # the bytes of rules and table borders

_P = np.arange(1, PERIODS + 1)                    # (P,) the periods
_J = np.arange(64)[:, None]                       # (64, 1) byte offsets in a push (longer: made)
_BACK = PERIODS - _P                              # (P,) where in hist + data the byte p before is
_FAR = 1 << 30                                    # the slack of a blank unit: never a loop
_CLASSES = np.zeros((3, 256), bool)  # (3, 256): blank, drawing, light (blank or a colon) bytes
for _row, _bytes in enumerate((WHITESPACE, DRAWING, WHITESPACE + b":")):
    _CLASSES[_row, list(_bytes)] = True


class Rule:
    """What a loop is in one kind of segment: `repeats` of a unit, need (P,) bytes a loop covers,
    rule_need (P,) the same for a run of one rule byte, shortest_inside: bytes of a token that
    completes a loop inside it."""

    def __init__(self, repeats: int):
        self.repeats = repeats
        self.need = np.maximum(repeats * _P, MIN_BYTES)
        self.rule_need = np.maximum(self.need, RULE_BYTES)
        self.shortest_inside = int((self.need - _P + 1).min())


ARGUMENT, PROSE = Rule(REPEATS), Rule(PROSE_REPEATS)


def slack(runs: np.ndarray, rule: Rule = ARGUMENT) -> np.ndarray:
    """(..., P + 3) runs -> (..., P): how many more bytes of its periodic continuation make each
    period's tail a loop under `rule` (_FAR where the unit is blank)."""
    drawing = (_P <= runs[..., PERIODS + 1:PERIODS + 2]) & (_P > runs[..., PERIODS + 2:])
    need = np.where(drawing, rule.rule_need, rule.need)  # (..., P)
    return np.where(_P > runs[..., PERIODS:PERIODS + 1], need - runs[..., :PERIODS] - _P, _FAR)


class Tail:
    """The detector over one segment under a Rule: push(data) appends bytes and says where a loop
    completes; reset() starts a new segment; use(rule) switches the rule. After a push: runs
    (P + 3,: each period's run, then how many trailing bytes are blank, drawing and light ones),
    slack (P,: how many more bytes of its continuation make each period's tail a loop, _FAR for a
    blank unit), n (segment bytes), near (a tail one unit short of a loop)."""

    def __init__(self, rule: Rule = ARGUMENT):
        self.rule = rule
        self.reset()

    def reset(self) -> None:
        self.hist = np.full(PERIODS, -1, np.int16)  # (P,) the last P bytes, oldest first; -1: none
        self.runs = np.zeros(PERIODS + 3, np.int64)  # (P + 3,) the runs, then the trailing classes
        self.slack = self.rule.need - _P  # (P,) bytes period p's tail lacks for a loop (_FAR: blank)
        self.n, self.near = 0, False

    def use(self, rule: Rule) -> None:
        """Judge the segment so far, and what follows, by `rule`."""
        if rule is not self.rule:
            self.rule = rule
            self.slack = slack(self.runs, rule) if self.n else rule.need - _P
            self.near = bool(self.n and (self.slack <= _P).any())

    def copy(self) -> "Tail":
        t = Tail.__new__(Tail)
        t.__dict__.update(self.__dict__)  # arrays are replaced by push, never written in place
        return t

    def scan(self, data: bytes):
        """What pushing `data` would make of the tail, byte by byte, the tail unchanged: the
        last P + k bytes and runs (k, P + 3)."""
        k = len(data)
        new = np.frombuffer(data, np.uint8).astype(np.int16)  # (k,)
        full = np.concatenate([self.hist, new])  # (P + k,)
        j = _J[:k] if k <= len(_J) else np.arange(k)[:, None]  # (k, 1)
        same = np.concatenate([new[:, None] == full[j + _BACK],  # (k, P): the byte p before it
                               _CLASSES[:, new].T], axis=1)  # (k, P + 3)
        # the last mismatch at or before byte j; without one, the tail's run reaches back further
        last = np.maximum.accumulate(np.where(same, -1 - self.runs, j), axis=0)  # (k, P + 3)
        return full, j - last

    def push(self, data: bytes) -> int | None:
        """Append `data`; the offset in it of the byte at which a loop first completes, or None."""
        if not data:
            return None
        full, runs = self.scan(data)
        rule = self.rule
        self.hist, self.runs, self.slack = full[-PERIODS:], runs[-1], slack(runs[-1], rule)
        self.n += len(data)
        self.near = bool((self.slack <= _P).any())
        rows = np.flatnonzero((runs[:, :PERIODS] >= rule.need - _P).any(axis=1))  # may end a loop
        loop = (slack(runs[rows], rule) <= 0).any(axis=1) if len(rows) else rows
        return int(rows[np.argmax(loop)]) if loop.any() else None

    def unit(self, p: int) -> bytes:
        """The last p bytes (p <= n)."""
        return self.hist[PERIODS - p:].astype(np.uint8).tobytes()


def first_loop(text: bytes, rule: Rule = ARGUMENT) -> int | None:
    """The offset of the byte at which a loop first completes in `text` (one segment), or None."""
    return Tail(rule).push(text)


_SHARED: dict = {}


class LoopGuard:
    """Precomputed pieces for one vocabulary: pieces (id -> bytes, the ordinary tokens), n_vocab
    logits, end_id (`<|assistant_end|>`). reply() follows one reply."""

    def __init__(self, pieces: dict[int, bytes], n_vocab: int, end_id: int):
        self.pieces = pieces
        order = sorted(pieces, key=pieces.__getitem__)
        self.sorted = [pieces[i] for i in order]  # token bytes, ascending: a prefix is a range
        self.ids = np.array(order, np.int64)  # (T,) their ids
        self.max_len = max(len(b) for b in self.sorted)
        self.end = np.zeros(n_vocab, bool)
        self.end[end_id] = True
        self.special = np.ones(n_vocab, bool)  # (V,) the special tokens: a value's own stops
        self.special[list(pieces)] = False
        self.reach = self._reach()
        self.looping, self.self_looping = {}, {}  # per Rule: tokens that loop by themselves, or may
        for rule in (ARGUMENT, PROSE):
            inside = [(t, b) for t, b in pieces.items() if self._may_loop_inside(b, rule)]
            self.looping[rule] = np.array([t for t, b in inside if first_loop(b, rule) is not None], np.int64)
            self.self_looping[rule] = [(t, b) for t, b in inside if first_loop(b, rule) is None]  # tail-dependent
        self._static: dict = {}  # (id(mask), repeats) -> (mask, mask less the looping tokens)

    @classmethod
    def shared(cls, grammar) -> "LoopGuard":
        """One LoopGuard per Grammar (agent/masks/grammar.py) in this process."""
        hit = _SHARED.get(id(grammar))
        if hit is None or hit[0] is not grammar:
            guard = cls(grammar.pieces, grammar.n_vocab, grammar.a_end)
            hit = _SHARED[id(grammar)] = (grammar, guard)  # holds grammar: its id stays its own
        return hit[1]

    def _reach(self) -> np.ndarray:
        """(257, P): reach[c, p - 1] bounds how far one token starting with byte c can carry a
        continuation of period p: its longest prefix with period p, less than p when that
        prefix starts with p blank bytes (a blank unit is never a loop); row 256 (no byte
        yet: hist's -1) is 0."""
        L, T = self.max_len, len(self.sorted)
        arr = np.full((T, L), -1, np.int64) - np.arange(L)  # (T, L) token bytes; pads never match
        for i, b in enumerate(self.sorted):
            arr[i, :len(b)] = list(b)
        lens = np.array([len(b) for b in self.sorted])  # (T,)
        blank = np.cumprod(_CLASSES[0, arr.clip(0, 255)] & (arr >= 0), axis=1).sum(1)  # (T,)
        reach = np.zeros((257, PERIODS), np.int64)
        for p in range(1, PERIODS + 1):
            eq = arr[:, p:] == arr[:, :-p]  # (T, L - p)
            lead = np.where(eq.all(1), L - p, np.argmin(eq, 1)) if p < L else 0  # (T,)
            longest = np.minimum(lens, p + lead)  # (T,)
            longest = np.where(blank >= np.minimum(longest, p), np.minimum(longest, p - 1), longest)
            np.maximum.at(reach[:, p - 1], arr[:, 0], longest)
        return reach

    @staticmethod
    def _may_loop_inside(b: bytes, rule: Rule) -> bool:
        """Whether a token could complete a loop that starts inside it: one the tail before it
        reaches into by fewer than p bytes (the tail's own loops are the continuation's)."""
        if len(b) < rule.shortest_inside:
            return False
        return bool((slack(Tail().scan(b)[1], rule) <= _P - 1).any())

    def reply(self) -> "ReplyLoops":
        return ReplyLoops(self)

    def without_looping(self, m: np.ndarray, rule: Rule = ARGUMENT) -> np.ndarray:
        """m less the tokens that hold a loop by themselves under `rule` (memoised by m's
        identity: the grammar's masks are memoised arrays, so this one is too); m when nothing
        is left."""
        looping = self.looping[rule]
        if not len(looping) or not m[looping].any():
            return m
        key = (id(m), rule.repeats)
        hit = self._static.get(key)
        if hit is None:
            if len(self._static) >= 256:
                self._static.clear()
            masked = m.copy()
            masked[looping] = False
            hit = self._static[key] = (m, masked if masked.any() else m)  # keeps m: its id stays
        return hit[1]

    def prefix_ids(self, prefix: bytes) -> np.ndarray:
        """The ids of the tokens that start with `prefix`."""
        lo = bisect_left(self.sorted, prefix)
        hi = bisect_right(self.sorted, prefix + b"\xff" * self.max_len, lo)
        return self.ids[lo:hi]


class ReplyLoops:
    """Follows one reply (the engine's `out`, fed incrementally): mask(out, m, prose) returns m,
    or a fresh copy with the loop-completing tokens banned, or, once HITS near loops were entered
    and in prose, only `<|assistant_end|>`; `ended` says that happened."""

    def __init__(self, guard: LoopGuard):
        self.g, self.tail = guard, Tail()
        self.seen, self.hits, self.ended = 0, 0, False

    def feed(self, out) -> None:
        pieces, tail = self.g.pieces, self.tail
        while self.seen < len(out):
            b = pieces.get(int(out[self.seen]))
            self.seen += 1
            if b is None:  # a special token: a new segment
                tail.reset()
                continue
            was = tail.near
            tail.push(b)
            self.hits += tail.near and not was

    def mask(self, out, m: np.ndarray, prose: bool) -> np.ndarray:
        rule = PROSE if prose else ARGUMENT
        self.tail.use(rule)
        self.feed(out)
        g = self.g
        if self.hits >= HITS and prose and m[g.end].any():
            self.ended = True
            return g.end
        m = g.without_looping(m, rule)
        ban = self.banned(m)
        if not len(ban) or not m[ban].any():
            return m
        masked = m.copy()
        masked[ban] = False
        if masked.any():
            return masked
        if prose:  # the grammar left only the loop (e.g. inside a backticked span): end the reply
            self.ended = True
            return g.end
        stops = m & g.special  # an argument value: end it where the grammar lets it end
        return stops if stops.any() else m

    def banned(self, m: np.ndarray) -> np.ndarray:
        """The ids whose bytes would complete a loop after the segment so far, but for the
        `looping` ones (self_looping ones only where m allows them: the check is a push each)."""
        g, t = self.g, self.tail
        d = t.slack  # (P,) bytes of the continuation that complete period p's loop
        live = np.flatnonzero(d <= g.reach[t.hist[_BACK], _P - 1])  # one token reaches that far
        out = []
        for i in live.tolist():
            p, k = i + 1, max(int(d[i]), 1)
            out.append(g.prefix_ids((t.unit(p) * (k // p + 1))[:k]))
        out.extend(np.array([tid], np.int64) for tid, b in g.self_looping[t.rule]
                   if m[tid] and t.copy().push(b) is not None)
        return np.concatenate(out) if out else np.zeros(0, np.int64)
