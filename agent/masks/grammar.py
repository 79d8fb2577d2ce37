"""The tool-call grammar as a logits mask: what the model may write next, given what it wrote.

Phases, driven one generated token at a time:
  content  prose: ordinary tokens, `<|tool_call_start|>` (when some tool is offered),
           `<|assistant_end|>` (never another special: a stray `<|user_start|>` in prose would
           decode to text that re-encodes as plain tokens, breaking the train/inference identity).
           Grounded with names on, backticked spans and `path:line` citations come from the
           context (agent/masks/prose.py) and the reply stops only outside a span; else it is free
  name     tokens extending the name so far towards an offered tool (any split); once whole,
           `<|tool_arg|>`
  key      the next argument in TOOLS[name].args order: optional ones may be skipped, required
           ones never; once whole, `<|tool_val|>`. Grounded, an Edit of an existing file must
           give old_string next and an Edit that creates one must not
  value    the argument's automaton (below); `<|tool_arg|>` / `<|tool_call_end|>` only where it
           may stop, `<|tool_call_end|>` only once every required argument is given
  done     after `<|tool_call_end|>` or `<|assistant_end|>` (the engine draws one unused token)

Values: INT_ARGS are digits (at least one; limit not all zeros), Bash.command free text with a
non-blank byte, new_string free text. A tool from outside (protocol.Tool.kinds: an MCP server's,
a serve client's) has its own: a string is free text, an integer `-?digits`, a number a JSON
number, a boolean `true`/`false`, an enum one of its strings; with no argument at all its call may
end right after the name. Without grounding (or where it has nothing to offer) Edit.old_string is
free text and the paths and Grep.pattern free text with a non-blank byte: an empty one names
nothing (`nanocode serve` has no project to ground in, and a forced Read there wrote file_path
""). With a
Grounding (agent/masks/grounding.py): Read.file_path, Grep.path and Edit.file_path are admissible
paths, Edit.old_string a unique substring of the file's current bytes, Grep.pattern at most
PATTERN_BYTES whose identifier runs are prefixes of known words while written and close (a
non-identifier byte or the end) only at a whole word (names off: lie inside known words; a
backslash and the byte after it are regex syntax, so `\\b`, `\\w`, `\\(` are not identifiers).

Everything is byte-level: the ordinary tokens form a trie (agent/masks/vocab_trie.py) walked with the
value's automaton, so every split of an admissible value is admissible and nothing else is.
Masks are memoised per (automaton state, stop tokens): the same array object for the same
situation (the loop keeps device copies by identity), at most MEMO_MASKS per automaton.
What the mask admits parses (protocol.parse_call), once terminated, to an offered tool with
valid arguments; no mask is ever all False.
"""
from __future__ import annotations

import numpy as np

from agent.masks.grounding import NAME_CHARS
from agent.masks.kind_values import kind_value
from agent.masks.prose import Prose
from agent.masks.spans import IDENT, IDENT_BYTES
from agent.masks.vocab_trie import BYTE, MEMO_MASKS, SortedStrings, Value, VocabTrie
from nanocode.protocol import INT_ARGS, TOOLS, Tool

PATTERN_BYTES = 256
VALUES_KEPT = 16
CONTENT, NAME, KEY, VALUE, DONE = range(5)


class TextValue(Value):
    """Free text (ordinary tokens). State: whether the value may stop."""
    nonblank = False

    def start(self):
        return not self.nonblank

    def step(self, state, piece):
        return state or bool(piece.strip())

    def fill(self, state, m):
        m |= self.g.text
        return state


class NonBlankValue(TextValue):
    """Free text that stops only once a non-blank byte came: Bash.command (Bash refuses a blank
    command), and a path or Grep pattern that no grounding gives (a blank one names nothing)."""
    nonblank = True


class Digits(Value):
    """INT_ARGS: decimal digits, at least one. State: 0 nothing yet, 1 zeros only, 2 a
    non-zero digit seen."""
    positive = False

    def start(self):
        return 0

    def step(self, state, piece):
        return max(state, 2 if piece.strip(b"0") else 1)

    def fill(self, state, m):
        m |= self.g.digits
        return state == 2 or (state == 1 and not self.positive)


class Limit(Digits):
    """Read.limit: not all zeros (Read needs a limit of at least 1)."""
    positive = True


class PathValue(Value):
    """Read.file_path / Grep.path: a prefix of an admissible path, stopping at one. Where the
    paths need disk checks (paths.checked), a token is kept only if some admissible path
    still lies ahead of it."""

    def start(self):
        return b""

    def step(self, q, piece):
        return q + piece

    def fill(self, q, m):
        g, paths = self.g, self.auto
        ids = g.ids_of(g.trie.walk_sorted(paths.strings, q))
        m[[t for t in ids.tolist() if paths.live(q + g.pieces[t])] if paths.checked else ids] = True
        return paths.closable(q)


class EditPathValue(PathValue):
    """Edit.file_path: known paths plus, in new-name mode, every NAME_CHARS token that fits
    the name's room (one that fills it only where the name is free)."""

    def fill(self, q, m):
        g, paths = self.g, self.auto
        room = paths.name_room(q)
        if room:
            short, fits = np.searchsorted(g.name_lens, [room, room + 1])
            m[g.name_ids[:short]] = True
            m[[t for t in g.name_ids[short:fits].tolist() if paths.closable(q + g.pieces[t])]] = True
        return super().fill(q, m)

    def existing(self, q: bytes) -> bool:
        return self.auto.existing(q)


class AnchorValue(Value):
    """Edit.old_string: (bytes so far while not unique, occurrence starts P, length L)."""

    def start(self):
        return b"", self.auto.starts, 0

    def step(self, state, piece):
        q, P, L = state
        P = self.auto.step(P, L, piece)
        return (q + piece if len(P) > 1 else None), P, L + len(piece)

    def key(self, state):
        q, P, L = state
        return q if len(P) > 1 else (int(P[0]) + L, L > 0)

    def fill(self, state, m):
        _, P, L = state
        m[self.g.trie.walk_occurrences(self.auto, P, L)] = True
        return self.auto.closable(P, L)


class PatternValue(Value):
    """Grep.pattern: state (in an escape, the identifier run so far, bytes so far); the words
    (grounding.Words) say which runs may be written (has_prefix) and where one may end (closes).

    A token is its leading identifier bytes (which must extend the run towards some word, and
    close it if more follows) then, if it has more, a remainder read from a fresh run: whether
    that remainder is admissible depends only on the words, so it is decided once per word set
    for every token (the remainders of all tokens that share a leading part hang off that
    part's trie node)."""

    def __init__(self, g, words):
        super().__init__(g, words)
        lead, self.lead_bytes, runs, runs_escaped, self.ends_escaped = g.pattern_lexicon()
        ok: dict = {}

        def fine(rs, open_end):  # every run a prefix; all but an open last one closed
            k = (rs, open_end)
            if k not in ok:
                ok[k] = (all(words.has_prefix(r) for r in rs)
                         and all(words.closes(r) for r in rs[:len(rs) - open_end]))
            return ok[k]
        groups: dict[int, list[int]] = {}
        for t, (rs, open_end) in runs.items():
            if fine(rs, open_end):
                groups.setdefault(lead[t], []).append(t)
        self.groups = {n: np.array(ts, np.int64) for n, ts in groups.items()}
        self.escaped = np.array([t for t, r in runs_escaped.items() if fine(*r)], np.int64)
        self.options: dict = {}

    def start(self):
        return False, b"", 0

    def step(self, state, piece):
        escaped, run, n = state
        for c in piece:
            if escaped:
                escaped, run = False, b""
            elif c == 92:
                escaped, run = True, b""
            elif IDENT[c]:
                run += BYTE[c]
            else:
                run = b""
        return escaped, run, n + len(piece)

    def key(self, state):
        escaped, run, n = state
        return escaped, run, min(PATTERN_BYTES - n, self.g.trie.max_len), n > 0

    def fill(self, state, m):
        escaped, run, n = state
        m[self.tokens(escaped, run, PATTERN_BYTES - n)] = True
        return n > 0 and not escaped and (not run or self.auto.closes(run))

    def tokens(self, escaped: bool, run: bytes, room: int) -> np.ndarray:
        """The admissible tokens, memoised apart from the masks: an empty pattern and one
        whose run just ended differ only in whether they may stop."""
        g, k = self.g, (escaped, run, min(room, self.g.trie.max_len))
        ids = self.options.get(k)
        if ids is not None:
            return ids
        if escaped:
            ids, ends = self.escaped, self.ends_escaped[1]
        else:
            nodes = g.trie.walk_sorted(self.auto, run, IDENT)
            whole = [g.trie.tid[u] for u in nodes if u and g.trie.tid[u] >= 0]
            closing = [self.groups[u] for u in nodes | {0} if u in self.groups
                       and (self.auto.closes(run + self.lead_bytes[u]) if run or u else True)]
            ids = np.concatenate([np.array(whole, np.int64), *closing])
            ends = self.ends_escaped[0]
        if room < g.trie.max_len:  # near the cap: no token past it, none that ends it escaped
            lens = g.lens[ids]
            ids = ids[(lens < room) | ((lens == room) & ~ends[ids])]
        if len(self.options) >= MEMO_MASKS:
            del self.options[next(iter(self.options))]
        self.options[k] = ids
        return ids


_SHARED: dict = {}


class Grammar:
    """Precomputed pieces for one tokenizer and a model vocabulary of `n_vocab` logits."""

    def __init__(self, tokenizer, n_vocab: int | None = None):
        self.n_vocab = int(n_vocab or tokenizer.vocab_size)
        s = tokenizer.special_ids
        self.call_start, self.call_end = s["<|tool_call_start|>"], s["<|tool_call_end|>"]
        self.arg, self.val, self.a_end = s["<|tool_arg|>"], s["<|tool_val|>"], s["<|assistant_end|>"]
        n_text = min(tokenizer.bos_id, self.n_vocab)  # ordinary tokens are ids 0 .. bos_id - 1
        self.pieces = {i: b for b, i in tokenizer.mergeable_ranks.items() if i < n_text}
        self.lens = np.zeros(self.n_vocab, np.int64)
        self.lens[list(self.pieces)] = [len(b) for b in self.pieces.values()]
        self.text = np.zeros(self.n_vocab, bool)
        self.text[:n_text] = True
        self.content, self.prose = self.text.copy(), self.text.copy()
        self.content[[self.call_start, self.a_end]] = self.prose[self.a_end] = True
        self.digits = np.zeros(self.n_vocab, bool)
        self.digits[[i for i, b in self.pieces.items() if b.isdigit()]] = True
        names = sorted((len(b), i) for i, b in self.pieces.items() if not b.translate(None, NAME_CHARS))
        self.name_lens = np.array([n for n, _ in names], np.int64)
        self.name_ids = np.array([i for _, i in names], np.int64)
        self.trie = VocabTrie(self.pieces)
        self.free, self.nonblank = TextValue(self), NonBlankValue(self)
        self.count, self.limit = Digits(self), Limit(self)
        self._memo: dict = {}
        self._values: dict = {}  # grounding automaton -> its Value, the newest VALUES_KEPT
        self._lexicon = None

    @classmethod
    def shared(cls, tokenizer, n_vocab: int | None = None) -> "Grammar":
        """One Grammar per (tokenizer, n_vocab) in this process: building the vocabulary trie
        and the pattern lexicon is the grammar's cold cost, and every Agent (an eval task, a
        best-of rollout, /clear) would otherwise pay it again."""
        key = (id(tokenizer), n_vocab)
        hit = _SHARED.get(key)
        if hit is None or hit[0] is not tokenizer:
            hit = _SHARED[key] = (tokenizer, cls(tokenizer, n_vocab))  # holds tokenizer: id stays valid
        return hit[1]

    def ids_of(self, nodes) -> np.ndarray:
        ids = self.trie.tids[np.fromiter(nodes, np.int64, len(nodes))]
        return ids[ids >= 0]

    def state(self, tools=tuple(TOOLS), ground=None) -> "GrammarState":
        """A fresh reply: only `tools` (names of ours, or protocol.Tools) may be called; `ground`
        (a Grounding) or None."""
        return GrammarState(self, tuple(TOOLS[t] if isinstance(t, str) else t for t in tools), ground)

    # ---- names and keys ------------------------------------------------------------------------
    def words_mask(self, targets: tuple, prefix: bytes, after: tuple) -> np.ndarray:
        """Tokens extending `prefix` towards one of `targets`; once whole, the specials `after`."""
        k = (targets, prefix, after)
        m = self._memo.get(k)
        if m is None:
            m = np.zeros(self.n_vocab, bool)
            enc = [w.encode() for w in targets]
            m[self.ids_of(self.trie.walk_sorted(SortedStrings(enc), prefix))] = True
            if prefix in enc:
                m[list(after)] = True
            self._memo[k] = m
        return m

    # ---- values --------------------------------------------------------------------------------
    def value(self, spec: Tool, arg: str, ground, file_path: bytes) -> Value:
        """The automaton of one argument's value (`file_path`: the Edit's, for old_string)."""
        if spec.kinds:
            return kind_value(self, dict(spec.kinds)[arg])
        tool = spec.name
        if arg in INT_ARGS:
            return self.limit if arg == "limit" else self.count
        if arg == "new_string" or (ground is None and arg == "old_string"):
            return self.free
        if arg == "command" or ground is None:
            return self.nonblank
        if (tool, arg) == ("Edit", "old_string"):
            return self._grounded(AnchorValue, ground.anchor(file_path.decode("utf-8", "replace"),
                                                             self.trie.max_len + 1))
        cls, automaton = {("Read", "file_path"): (PathValue, ground.read_paths),
                          ("Grep", "path"): (PathValue, ground.grep_paths),
                          ("Edit", "file_path"): (EditPathValue, ground.edit_paths),
                          ("Grep", "pattern"): (PatternValue, ground.words)}[tool, arg]
        automaton = automaton()
        return self.nonblank if automaton is None else self._grounded(cls, automaton)

    def _grounded(self, cls, automaton) -> Value:
        if automaton is None:
            return self.free
        v = self._values.get(automaton)
        if v is None:
            if len(self._values) >= VALUES_KEPT:  # the oldest go (and their automata with them)
                del self._values[next(iter(self._values))]
            v = self._values[automaton] = cls(self, automaton)
        return v

    def cached(self, key, make):
        """make(), once per key for this grammar: tables other modules derive from the vocabulary."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def prose_value(self, ground):
        """The content phase's automaton (agent/masks/prose.py) over ground's context, or None: free
        prose (no grounding, names off, a project that could not be listed)."""
        text = ground.spans(self.trie.max_len + 1) if ground is not None else None
        if text is None:
            return None
        return self._grounded(Prose, text)

    def pattern_lexicon(self):
        """Per token, for Grep patterns: the trie node of its leading identifier bytes and those
        bytes by node, the identifier runs after them (for tokens that do not end there) and the
        runs when the token starts escaped (each with whether the last run is still open at the
        token's end), and whether it ends in an escape (read normally, read escaped)."""
        if self._lexicon is None:
            lead, lead_bytes, runs, runs_escaped = {}, {}, {}, {}
            ends = np.zeros((2, self.n_vocab), bool)
            for t, b in self.pieces.items():
                k = len(b) - len(b.lstrip(IDENT_BYTES))
                if k < len(b):
                    lead[t] = self.trie.node(b[:k])
                    lead_bytes[lead[t]] = b[:k]
                    *runs[t], ends[0, t] = _runs(b[k:], False)
                *runs_escaped[t], ends[1, t] = _runs(b, True)
            self._lexicon = lead, lead_bytes, runs, runs_escaped, ends
        return self._lexicon


def _runs(b: bytes, escaped: bool) -> tuple[tuple, bool, bool]:
    """The identifier runs of b read from a fresh run (`escaped`: its first byte is escaped),
    whether the last one is still open at b's end, and whether b ends in an escape."""
    runs, start = [], None
    for i, c in enumerate(b):
        if not escaped and IDENT[c]:
            start = i if start is None else start
            continue
        if start is not None:
            runs.append(b[start:i])
            start = None
        escaped = not escaped and c == 92
    if start is not None:
        runs.append(b[start:])
    return tuple(runs), start is not None, escaped


class GrammarState:
    """Follows one reply; `allowed(out)` is the engine's mask hook (out = tokens so far)."""

    def __init__(self, g: Grammar, tools: tuple[Tool, ...], ground):
        self.specs = {t.name: t for t in tools}
        self.g, self.tools, self.ground = g, tuple(self.specs), ground
        self.seen, self.phase, self.buf = 0, CONTENT, b""
        self.tool, self.last, self.existing = "", -1, None  # last: index of the last argument given
        self.value, self.vstate, self.stops, self.file_path = None, None, (), b""
        self.in_path = False  # the value being written is a file_path (kept for old_string)
        self.prose, self.pstate = False, None  # prose: agent/masks/prose.Prose, None (free), False (not asked yet)

    def next_keys(self) -> tuple:
        """The arguments that may come next, in wire order, up to the first required one."""
        tool = self.specs[self.tool]
        if self.tool == "Edit" and self.last == 0 and self.existing is not None:
            return ("old_string",) if self.existing else ("new_string",)
        out = []
        for a in tool.args[self.last + 1:]:
            out.append(a)
            if a in tool.required:
                break
        return tuple(out)

    def feed(self, t: int) -> None:
        g, phase = self.g, self.phase
        if phase == CONTENT:
            if t == g.call_start:
                self.phase, self.buf = NAME, b""
            elif t == g.a_end:
                self.phase = DONE
            elif t in g.pieces and self._prose() is not None:
                self.pstate = self.prose.feed(self.pstate, g.pieces[t])
        elif phase == NAME:
            if t == g.arg or t == g.call_end:
                self.tool, self.phase, self.buf = self.buf.decode(), KEY if t == g.arg else DONE, b""
            else:
                self.buf += g.pieces[t]
        elif phase == KEY:
            if t == g.val:
                self._start_value(self.buf.decode())
            else:
                self.buf += g.pieces[t]
        elif phase == VALUE:
            if t == g.arg or t == g.call_end:
                if isinstance(self.value, EditPathValue):
                    self.existing = self.value.existing(self.vstate)
                self.phase, self.buf = (KEY if t == g.arg else DONE), b""
            else:
                self.vstate = self.value.step(self.vstate, g.pieces[t])
                if self.in_path:
                    self.file_path += g.pieces[t]

    def _start_value(self, arg: str) -> None:
        g = self.g
        spec = self.specs[self.tool]
        self.last = spec.args.index(arg)
        self.value = g.value(spec, arg, self.ground, self.file_path)
        self.vstate, self.phase, self.in_path = self.value.start(), VALUE, arg == "file_path"
        rest = spec.args[self.last + 1:]
        self.stops = ((g.arg,) if rest else ()) + (
            () if any(a in spec.required for a in rest) else (g.call_end,))

    def _prose(self):
        """The content phase's automaton, asked for at the first prose token (it syncs the context)."""
        if self.prose is False:
            self.prose = self.g.prose_value(self.ground)
            self.pstate = self.prose.start() if self.prose is not None else None
        return self.prose

    def allowed(self, out) -> np.ndarray:
        while self.seen < len(out):
            self.feed(int(out[self.seen]))
            self.seen += 1
        g, phase = self.g, self.phase
        if phase == CONTENT:
            if self._prose() is not None:
                return self.prose.mask(self.pstate, (g.call_start, g.a_end) if self.tools else (g.a_end,))
            return g.content if self.tools else g.prose
        if phase == NAME:
            spec = self.specs.get(self.buf.decode("utf-8", "replace"))
            after = () if spec is None else ((g.arg,) if spec.args else ()) + (
                () if spec.required else (g.call_end,))
            return g.words_mask(self.tools, self.buf, after)
        if phase == KEY:
            return g.words_mask(self.next_keys(), self.buf, (g.val,))
        if phase == VALUE:
            return self.value.mask(self.vstate, self.stops)
        return g.content  # done: the engine still draws one token after a stop (unused)
