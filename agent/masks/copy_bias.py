"""Copy bias: a soft pull toward continuing a copy of the context, for prose and answers.

A small model garbles names it has just read (`mergeumulidian` for `merge_obsidian`). This is
prompt-lookup decoding's idea used as a logit bias instead of a draft: find the longest suffix of
the reply so far (max_match tokens down to min_match) that occurs in the context, and add +beta
to the tokens that followed its most recent occurrences (at most max_sources of them, all with
the same bonus). Inside backticks (an odd number of '`' bytes in the reply so far) the bonus is
backtick_beta (default 2 * beta): names and code are where exact copies matter most. The model
still decides: a bias of a few logits tips near-ties toward the copy, it does not force one.

Contract:
- extend(ids) appends context tokens (prompt, tool results, finished replies: whatever the model
  may copy from; it needn't equal the decoder's ids). The index is maintained incrementally: each
  new token adds one entry per n-gram length (n-gram -> positions after it), never a rebuild.
- favour(out) / bias(out, mask) are called once per draw with the reply's tokens so far, not yet
  in the context (the engine's growing `out` list: the backtick parity is then updated from the
  new tokens only; any other list is recounted from its start). Matching is exact, token level,
  against the context only (not the reply itself). A favoured token may be a special one (the
  end of an earlier reply after the same words): the grammar mask has the last word.
- min_match 1 (the default) lets a single shared token pull toward what followed it: the most
  help on names (`merge` -> `_obs`), and a weak pull toward the context's wording in prose;
  min_match 2 keeps only longer copies.
- beta = 0 and backtick_beta = 0 (the default when beta is 0): disabled, favour/bias return None
  at once. Deterministic: no randomness, occurrences in context order.

Trade-off: memory for speed. The index holds max_match dict entries per context token (tuples
of up to max_match ids), so a step costs (match length + 1) dict lookups and one (V,) float32 row
whatever the context length; a suffix automaton would be smaller but slower in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class CopyBias:
    """Additive logit bias toward continuing a copy of the context (module docstring).

    n_vocab: the model's logits width (padding rows included). token_bytes: the bytes of ids
    0..len-1 (`[tok.id_to_bytes(i) for i in range(tok.vocab_size)]`, or use `for_tokenizer`); ids
    past its end count no backticks. max_match / min_match: the longest and shortest suffix of the
    reply tried (tokens). max_sources: how many of the most recent occurrences of the match lend
    their next token."""

    def __init__(self, n_vocab: int, beta: float, token_bytes: Sequence[bytes],
                 backtick_beta: float | None = None, max_match: int = 8, min_match: int = 1,
                 max_sources: int = 4):
        if not 1 <= min_match <= max_match or max_sources < 1:
            raise ValueError("need 1 <= min_match <= max_match and max_sources >= 1")
        self.n_vocab, self.beta = int(n_vocab), float(beta)
        self.backtick_beta = 2.0 * self.beta if backtick_beta is None else float(backtick_beta)
        self.enabled = self.beta != 0.0 or self.backtick_beta != 0.0
        self.max_match, self.min_match, self.max_sources = max_match, min_match, max_sources
        flips = [b.count(b"`") & 1 for b in token_bytes]  # 1: the token flips the backtick parity
        self._flips = flips + [0] * (self.n_vocab - len(flips))  # list: fastest scalar reads
        self.ctx: list[int] = []  # the context tokens, in order
        self.index: dict[tuple[int, ...], list[int]] = {}  # n-gram -> ascending positions after it
        self._out, self._seen, self._odd = None, 0, 0  # backtick parity of the reply so far
        self._bases: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(mask) -> (mask, 0/-inf row)

    @classmethod
    def for_tokenizer(cls, tokenizer, n_vocab: int, beta: float, **kw) -> CopyBias:
        """A CopyBias reading backticks from a nanocode Tokenizer's token bytes."""
        return cls(n_vocab, beta, [tokenizer.id_to_bytes(i) for i in range(tokenizer.vocab_size)],
                   **kw)

    def extend(self, ids) -> None:
        """Append context tokens; indexes every n-gram (n <= max_match) that ends in them."""
        ctx, index, m = self.ctx, self.index, self.max_match
        for t in ids:
            ctx.append(int(t))
            i = len(ctx)  # the position right after the new token
            for n in range(1, min(m, i) + 1):
                key = tuple(ctx[i - n:i])
                pos = index.get(key)
                if pos is None:
                    index[key] = [i]
                else:
                    pos.append(i)

    def in_backticks(self, out: list[int]) -> bool:
        """Whether the reply so far holds an odd number of '`' bytes."""
        if out is not self._out or len(out) < self._seen:
            self._out, self._seen, self._odd = out, 0, 0
        flips = self._flips
        for i in range(self._seen, len(out)):
            self._odd ^= flips[out[i]]
        self._seen = len(out)
        return bool(self._odd)

    def favour(self, out: list[int]) -> tuple[list[int], float] | None:
        """(ids to favour, bonus) after the reply `out`, or None: disabled, a zero bonus here, or
        no suffix of out (min_match tokens at least) occurs in the context with a token after it.
        ids: the tokens after the most recent occurrences of the longest such suffix (up to
        max_sources, oldest first, may repeat)."""
        if not self.enabled:
            return None
        n_out, end = len(out), len(self.ctx)
        best = None  # (positions, usable count) of the longest usable suffix so far
        # shortest first: a suffix of n tokens occurs (with a token after it) only if its suffix
        # of n - 1 does, so the first miss ends the search (typically 2-3 lookups, not max_match)
        for n in range(1, min(self.max_match, n_out) + 1):
            pos = self.index.get(tuple(out[n_out - n:]))
            if pos is None:
                break
            hi = len(pos) - (pos[-1] == end)  # an occurrence at the very end has no next token
            if not hi:
                break
            if n >= self.min_match:
                best = pos, hi
        if best is None:
            return None
        bonus = self.backtick_beta if self.in_backticks(out) else self.beta
        if bonus == 0.0:
            return None
        pos, hi = best
        return [self.ctx[p] for p in pos[max(0, hi - self.max_sources):hi]], bonus

    def bias(self, out: list[int], mask: np.ndarray | None = None) -> np.ndarray | None:
        """The hook value for one draw: a fresh float32 (V,) row, 0 where allowed (everywhere
        when mask is None), -inf where the bool (V,) host mask is False, +bonus on the favoured
        ids that are allowed. None when there is nothing to favour: hand the engine the mask
        itself (its bool path, no float row at all). One (V,) allocation per step: the 0/-inf
        row of a mask is memoised by the mask's identity (the grammar's masks are memoised
        arrays, never mutated); a mask not seen before costs one np.where."""
        fav = self.favour(out)
        if fav is None:
            return None
        ids, bonus = fav
        if mask is None:
            row = np.zeros(self.n_vocab, np.float32)  # (V,)
        else:
            hit = self._bases.get(id(mask))
            if hit is None:
                if len(self._bases) >= 16:  # fresh masks every step (e.g. ANDed ones): stay small
                    self._bases.clear()
                base = np.where(mask, np.float32(0), np.float32(-np.inf))  # (V,) float32
                hit = self._bases[id(mask)] = (mask, base)  # mask kept: its id stays its own
            row = hit[1].copy()  # (V,) float32
        b = np.float32(bonus)
        for t in set(ids):  # -inf + b stays -inf: a disallowed id stays disallowed
            row[t] += b
        return row
