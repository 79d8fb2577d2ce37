"""The tool-call grammar as a logits mask: what the model may write next, given what it wrote.

States, driven one generated token at a time:
  content  prose: every ordinary token, `<|tool_call_start|>`, `<|assistant_end|>` (never another
           special: a stray `<|user_start|>` in prose would decode to text that re-encodes as
           plain tokens, breaking the train/inference identity of the token history)
  name     after `<|tool_call_start|>`: tokens whose bytes extend the name so far towards a tool
           name (any split of "Read" is fine, "Rea"+"d" or "R"+"ead"); once the name is whole,
           only `<|tool_arg|>` (every tool has a required argument)
  key      after `<|tool_arg|>`: tokens extending an argument name of that tool not given yet;
           once whole, `<|tool_val|>`
  value    after `<|tool_val|>`: ordinary tokens (digit-only tokens for offset/limit/-A/-B, at
           least one), `<|tool_arg|>` while arguments remain, `<|tool_call_end|>` once every
           required argument is given
  done     after `<|tool_call_end|>` or `<|assistant_end|>` (the engine stops there anyway)

Masks are numpy bool arrays built once per distinct situation and memoised, so a step costs a
dict lookup (measured in tests/test_agent_loop.py: a few microseconds per token). A sequence the
mask admits always parses (Tokenizer.parse_tool_call) to a known tool with valid arguments
(protocol.check_call passes), once it is terminated.
"""
from __future__ import annotations

import numpy as np

from nanocode.protocol import INT_ARGS, TOOL_ARGS


class Grammar:
    """Precomputed pieces for one tokenizer and a model vocabulary of `n_vocab` logits."""

    def __init__(self, tokenizer, n_vocab: int | None = None):
        self.tok = tokenizer
        self.n_vocab = int(n_vocab or tokenizer.vocab_size)
        s = tokenizer.special_ids
        self.call_start, self.call_end = s["<|tool_call_start|>"], s["<|tool_call_end|>"]
        self.arg, self.val = s["<|tool_arg|>"], s["<|tool_val|>"]
        self.a_end = s["<|assistant_end|>"]
        n_text = tokenizer.bos_id  # ordinary tokens are ids 0 .. bos_id - 1
        self.text = np.zeros(self.n_vocab, bool)
        self.text[:n_text] = True
        self.content = self._with(self.text, self.call_start, self.a_end)
        self.tools = {name: (tuple(req), tuple(opt)) for name, (req, opt) in TOOL_ARGS.items()}
        words = set(self.tools) | {a for req, opt in self.tools.values() for a in req + opt}
        longest = max(len(w) for w in words)
        # every ordinary token whose bytes occur inside some name (the only candidates for names)
        self.pieces: list[tuple[int, bytes]] = [
            (i, b) for b, i in tokenizer.mergeable_ranks.items()
            if i < self.n_vocab and len(b) <= longest and any(b in w.encode() for w in words)]
        digits = [i for b, i in tokenizer.mergeable_ranks.items() if b.isdigit() and i < self.n_vocab]
        self.digits = np.zeros(self.n_vocab, bool)
        self.digits[digits] = True
        self._memo: dict = {}

    def _with(self, base, *ids):
        m = base.copy()
        for i in ids:
            if i < self.n_vocab:
                m[i] = True
        return m

    def _extend(self, prefix: bytes, targets) -> np.ndarray:
        """Tokens t with prefix + bytes(t) a prefix of one of `targets` (bytes)."""
        m = np.zeros(self.n_vocab, bool)
        for i, b in self.pieces:
            p = prefix + b
            if any(t.startswith(p) for t in targets):
                m[i] = True
        return m

    def mask(self, key) -> np.ndarray:
        m = self._memo.get(key)
        if m is None:
            m = self._memo[key] = self._build(key)
        return m

    def _build(self, key) -> np.ndarray:
        kind = key[0]
        if kind == "content":
            return self.content
        if kind == "name":
            prefix = key[1]
            m = self._extend(prefix, [n.encode() for n in self.tools])
            if prefix.decode("utf-8", "replace") in self.tools:
                m[self.arg] = True
            return m
        if kind == "key":
            _, tool, used, prefix = key
            req, opt = self.tools[tool]
            left = [a.encode() for a in req + opt if a not in used]
            m = self._extend(prefix, left)
            if prefix in left:
                m[self.val] = True
            return m
        if kind == "value":
            _, tool, used, arg, n_digits = key  # used includes arg
            req, opt = self.tools[tool]
            if arg in INT_ARGS:
                m = self.digits.copy()
                if n_digits == 0:
                    return m
            else:
                m = self.text.copy()
            if any(a not in used for a in req + opt):
                m[self.arg] = True
            if all(a in used for a in req):
                m[self.call_end] = True
            return m
        raise KeyError(key)

    def state(self) -> "GrammarState":
        return GrammarState(self)


class GrammarState:
    """Follows one generation; `allowed(out)` is the engine's mask hook (out = tokens so far)."""

    def __init__(self, g: Grammar):
        self.g = g
        self.seen = 0
        self.key: tuple = ("content",)
        self.tool: str | None = None
        self.used: frozenset = frozenset()
        self.buf = b""  # name / key bytes so far, or the digit count's carrier for int values
        self.n_digits = 0
        self.arg: str | None = None

    def feed(self, t: int) -> None:
        g, kind = self.g, self.key[0]
        if kind == "content":
            if t == g.call_start:
                self.key, self.buf = ("name", b""), b""
            elif t == g.a_end:
                self.key = ("done",)
        elif kind == "name":
            if t == g.arg:
                self.tool = self.buf.decode("utf-8", "replace")
                self.buf, self.key = b"", ("key", self.tool, self.used, b"")
            else:
                self.buf += self.g.tok.id_to_bytes(t)
                self.key = ("name", self.buf)
        elif kind == "key":
            if t == g.val:
                self.arg = self.buf.decode("utf-8", "replace")
                self.used = self.used | {self.arg}
                self.n_digits = 0
                self.key = ("value", self.tool, self.used, self.arg, 0)
            else:
                self.buf += self.g.tok.id_to_bytes(t)
                self.key = ("key", self.tool, self.used, self.buf)
        elif kind == "value":
            if t == g.arg:
                self.buf, self.key = b"", ("key", self.tool, self.used, b"")
            elif t == g.call_end:
                self.key = ("done",)
            elif self.arg in INT_ARGS:
                self.n_digits = 1
                self.key = ("value", self.tool, self.used, self.arg, 1)

    def allowed(self, out) -> np.ndarray:
        while self.seen < len(out):
            self.feed(int(out[self.seen]))
            self.seen += 1
        if self.key[0] == "done":  # the engine still draws one token after a stop (unused):
            return self.g.content  # an array, not None, so no second compile of the step
        return self.g.mask(self.key)
