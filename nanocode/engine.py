"""Inference: bucketed chunked prefill, jitted single-token decode, a fused while_loop decoder,
sampling, streaming, n samples per prompt, and a Decoder that reuses its KV cache across turns.

Everything runs `gpt.forward` with a preallocated `KVCache` in the compute dtype (keys
(L, B, K, D, max_len), values (L, B, K, max_len, D): the layout XLA:CPU's two attention matmuls
read without a transpose; the (L, B, S, K, D) layout cost 1.5-1.8x per decode step), so cached
logits equal full recomputation (tested token for token, windows and smear included).
Numbers below: bench/infer.py, cpu-d4, random weights, 2-core CPU, max_len 512.

- Prefill compiles once per bucket (16, 64, 256, 1024, ... <= max_len), not per prompt length
  (each cold compile costs under a second on CPU; the persistent cache keeps them). `plan_chunks` cuts a prompt into
  one padded chunk when padding wastes at most half of it, else the largest full bucket first (a
  300-token prompt runs 256 + 64 rows, not 1024); an exact-size chunk (one more compile) happens
  only when the cache's last free slots are fewer than every bucket. Only the last real token goes
  through the head (`last_only`), and a chunk attends to a kv_len prefix of the cache (below), so
  one compile per (chunk bucket, kv bucket) pair actually used (time to first token against
  nanochat's engine: docs/BENCHMARKS.md).
- Decode is one jitted step (forward of one token + sampling of the next) with the cache donated,
  so there is no cache copy per token. It attends to a kv_len prefix of the cache (128, 256, ...
  slots, one compile per size: `Engine.kv_bucket`), so a short conversation does not pay for a long
  context. Every emitted token is written to the cache before it is handed out, so the cache always
  holds the whole history, the next turn prefills only new tokens, and generation can emit at most
  `room()` tokens.
- The streaming path syncs to the host once per token (it must, to yield). `Engine.generate`
  runs the decode as `lax.while_loop`s (one per kv_len bucket crossed), stopping on stop tokens or
  the budget inside the loop, with no host round trip per token. The fused loop does NOT support the logits hook (a host
  callable); constrain or bias output through the streaming path.
- The streaming hook returns, per draw, None, a bool (V,) mask (False = never drawn) or a float
  (V,) additive bias (-inf = never drawn, 0 = neutral, +beta = favoured: agent/masks/copy_bias.py).
  The step is traced per hook kind (none / bool / float32), so each kind compiles once per kv_len
  bucket: bool-only callers compile exactly what they did before the float kind existed.
- Sampling settings are static (`Sampling`, hashable): greedy compiles to a bare argmax, and only
  top-p pays for a full sort of the vocab. One compile per distinct setting.
- Seeds: token i of a generation is drawn with fold_in(PRNGKey(seed), i), so both paths give the
  same tokens for the same seed, and rows of a batch draw independently from the same key.
"""

from __future__ import annotations

import codecs
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanocode.config import GPTConfig
from nanocode.gpt import KVCache, forward, init_cache

STOP_TOKENS = ("<|assistant_end|>", "<|tool_call_end|>")  # generation stops


class ContextOverflow(ValueError):
    """Raised BEFORE anything is written when tokens would not fit in the KV cache."""


class Sampling(NamedTuple):
    """temperature 0 = greedy; top_k 0 = off; top_p 1.0 = off. Static under jit (hashable)."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0


# ---- pure, jitted pieces -------------------------------------------------------------------------
def sample(logits: jax.Array, key: jax.Array, sampling: Sampling, allowed=None) -> jax.Array:
    """logits (B, V) fp32 -> (B,) int32. allowed: optional (B, V) or (V,) array, either bool
    (False slots are never drawn) or float, an additive bias on the logits before temperature,
    top-k and top-p (-inf slots are never drawn; greedy picks argmax(logits + bias); +inf is not
    supported). At least one slot per row must be allowed (True, or a finite bias)."""
    if allowed is not None:
        allowed = jnp.asarray(allowed)
        if allowed.dtype == jnp.bool_:
            logits = jnp.where(allowed, logits, -jnp.inf)
        else:
            logits = logits + allowed.astype(logits.dtype)
    if sampling.temperature <= 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / sampling.temperature
    if sampling.top_k > 0:
        kth = jax.lax.top_k(logits, min(sampling.top_k, logits.shape[-1]))[0][:, -1:]  # (B, 1)
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if sampling.top_p < 1.0:  # keep the smallest prefix of sorted tokens whose mass reaches top_p
        desc = -jnp.sort(-logits, axis=-1)  # (B, V)
        probs = jax.nn.softmax(desc, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each token
        n_keep = jnp.maximum(jnp.sum(before < sampling.top_p, axis=-1, keepdims=True), 1)  # (B, 1)
        cut = jnp.take_along_axis(desc, n_keep - 1, axis=-1)
        logits = jnp.where(logits < cut, -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(1, 5), donate_argnums=(2,))
def _prefill_chunk(params, cfg: GPTConfig, cache: KVCache, chunk, n_valid, kv_len: int):
    """chunk (B, T) padded to a bucket; n_valid real tokens -> (logits (B, V) at the last real
    token, cache advanced by n_valid). Attends to the first kv_len slots (>= pos + T)."""
    logits, cache = forward(params, cfg, chunk, cache, n_valid, last_only=True, kv_len=kv_len)
    return logits[:, 0], cache


@functools.partial(jax.jit, static_argnums=(2,))
def _sample_first(logits, key, sampling: Sampling, allowed):
    return sample(logits, jax.random.fold_in(key, 0), sampling, allowed)


@functools.partial(jax.jit, static_argnums=(1, 7, 8), donate_argnums=(2,))
def _decode_step(params, cfg: GPTConfig, cache: KVCache, tok, key, i, allowed, sampling: Sampling,
                 kv_len: int):
    """tok (B,) -> write it to the cache, return (next token (B,) drawn with fold_in(key, i),
    logits (B, V), cache). Attends to the first kv_len slots (static, >= pos + 1)."""
    logits, cache = forward(params, cfg, tok[:, None], cache, kv_len=kv_len)
    logits = logits[:, -1]
    return sample(logits, jax.random.fold_in(key, i), sampling, allowed), logits, cache


@functools.partial(jax.jit, static_argnums=(1, 7, 8), donate_argnums=(2,))
def _decode_loop(params, cfg: GPTConfig, cache: KVCache, state, key, stops, stop_at,
                 sampling: Sampling, kv_len: int):
    """Fused decode of one kv_len segment. state = (i, tok (B,) to emit next, logits (B, V),
    out (B, S) with -1 after a row stops, done (B,)). Each emitted token is written to the cache;
    the loop ends when every row has emitted a stop token or i reaches stop_at (traced; the
    caller keeps every write below kv_len)."""

    def cond(st):
        i, _, _, _, done = st[0]
        return (i < stop_at) & ~jnp.all(done)

    def body(st):
        (i, tok, _, out, done), cache = st
        out = out.at[:, i].set(jnp.where(done, -1, tok))
        done = done | jnp.isin(tok, stops)
        logits, cache = forward(params, cfg, tok[:, None], cache, kv_len=kv_len)
        logits = logits[:, -1]
        nxt = sample(logits, jax.random.fold_in(key, i + 1), sampling)
        return (i + 1, nxt, logits, out, done), cache

    return jax.lax.while_loop(cond, body, (state, cache))


# ---- host-side helpers ---------------------------------------------------------------------------
def default_buckets(max_len: int) -> tuple[int, ...]:
    """16, 64, 256, 1024, ... up to max_len (powers of 4: at most 4x padding per chunk)."""
    out, b = [], 16
    while b <= max_len:
        out.append(b)
        b *= 4
    return tuple(out)


def plan_chunks(n: int, room: int, buckets: Sequence[int]) -> list[tuple[int, int]]:
    """(chunk size, real tokens) pairs covering n tokens with `room` free cache slots (n <= room).
    Per chunk: the smallest bucket >= remaining tokens if it wastes at most half of itself (or
    nothing smaller exists), else the largest bucket <= remaining, full; when no bucket fits the
    remaining room, one exact-size chunk."""
    plan = []
    while n > 0:
        fit = [b for b in buckets if b <= room]
        up, down = [b for b in fit if b >= n], [b for b in fit if b <= n]
        if up and (up[0] <= 2 * n or not down):
            size, real = up[0], n
        elif down:
            size = real = down[-1]
        else:
            size = real = n
        plan.append((size, real))
        n, room = n - real, room - real
    return plan


def decode_text(tokenizer, ids: Iterable[int]) -> Iterator[str]:
    """Token ids -> text pieces; a UTF-8 character split across tokens comes out whole, once its
    last byte arrives. ''.join(pieces) == tokenizer.decode(ids)."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for t in ids:
        piece = dec.decode(tokenizer.id_to_bytes(t))
        if piece:
            yield piece
    tail = dec.decode(b"", final=True)
    if tail:
        yield tail


class Engine:
    """Owns the params, the config and the compiled functions. Stateless between calls; one
    sequence's state (its token ids and the KV cache holding them) lives in a `Decoder`, made by
    `Engine.decoder()`."""

    def __init__(self, params, cfg: GPTConfig, tokenizer=None, max_len: int | None = None,
                 dtype=None, buckets: Sequence[int] | None = None):
        if dtype is not None:  # run in `dtype`: cast float params, compute and embeddings
            dt = jnp.dtype(dtype)
            params = jax.tree.map(lambda x: x.astype(dt) if jnp.issubdtype(x.dtype, jnp.floating)
                                  else x, params)
            cfg = cfg.replace(compute_dtype=dt.name, embed_dtype=dt.name)
        elif jnp.dtype(cfg.compute_dtype) == jnp.float32:  # bf16-stored params (the shipped default
            # model) would be cast at every use, ~2x a CPU decode step: upcast them once here
            params = jax.tree.map(lambda x: x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16)
                                  else x, params)
        self.params, self.cfg, self.tokenizer = params, cfg, tokenizer
        self.max_len = int(max_len or cfg.sequence_len)
        self.buckets = tuple(sorted(buckets)) if buckets else default_buckets(self.max_len)
        self.stop_ids = tuple(tokenizer.encode_special(s) for s in STOP_TOKENS) if tokenizer else ()

    # -- building blocks ----------------------------------------------------------------------
    def new_cache(self, batch: int = 1) -> KVCache:
        return init_cache(self.cfg, batch, self.max_len)

    def prefill(self, cache: KVCache, ids, pos: int) -> tuple[jax.Array, KVCache]:
        """ids (B, n) appended at cache position pos (a host int, so no sync) -> (logits (B, V)
        after the last token, cache). Raises ContextOverflow if pos + n > max_len."""
        ids = np.asarray(ids, np.int32)
        n, room = ids.shape[1], self.max_len - pos
        if n < 1:
            raise ValueError("prefill needs at least one token")
        if n > room:
            raise ContextOverflow(f"{n} tokens do not fit: the context holds {self.max_len} and "
                                  f"{pos} are used ({room} free)")
        start, logits = 0, None
        for size, real in plan_chunks(n, room, self.buckets):
            chunk = np.zeros((ids.shape[0], size), np.int32)  # (B, bucket), zero padding
            chunk[:, :real] = ids[:, start:start + real]
            logits, cache = _prefill_chunk(self.params, self.cfg, cache, chunk, np.int32(real),
                                           self.kv_bucket(pos + start + size))
            start += real
        return logits, cache

    def warmup(self, batch: int = 1) -> dict[int, float]:
        """Compile (or load from the persistent cache) every prefill bucket at this batch size;
        returns seconds per bucket (first call, compile included). Decode compiles on first use
        per kv_len bucket (~0.5 s cold each)."""
        out = {}
        for b in self.buckets:
            t = time.perf_counter()
            logits, _ = self.prefill(self.new_cache(batch), np.zeros((batch, b), np.int32), 0)
            logits.block_until_ready()
            out[b] = time.perf_counter() - t
        return out

    def decoder(self) -> Decoder:
        """A new, empty Decoder (batch 1, its own KV cache of max_len slots) on this engine."""
        return Decoder(self)

    # -- non-streaming, batched -----------------------------------------------------------------
    def generate(self, prompts, n: int = 1, max_tokens: int | None = None, stop=None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int = 0) -> list[list[int]]:
        """Fused while_loop generation (no per-token host sync, no mask hook). prompts: one list
        of ids or a list of equal-length lists. The prompt batch is prefilled once, its cache is
        broadcast to n rows per prompt, and each row draws its own tokens. Returns B * n lists
        (prompt-major), each ending at its stop token (included) or at max_tokens."""
        single = len(prompts) > 0 and np.ndim(prompts[0]) == 0
        rows = [list(prompts)] if single else [list(p) for p in prompts]
        if len({len(p) for p in rows}) != 1:
            lengths = [len(p) for p in rows]
            raise ValueError(f"batched prompts must have equal lengths, got {lengths}")
        T = len(rows[0])
        max_new = self._budget(T, max_tokens)
        logits, cache = self.prefill(self.new_cache(len(rows)), rows, 0)
        if n > 1:  # row b * n + j is sample j of prompt b
            cache = KVCache(jnp.repeat(cache.k, n, axis=1), jnp.repeat(cache.v, n, axis=1),
                            cache.pos, jnp.repeat(cache.prev_embed, n, axis=0))
            logits = jnp.repeat(logits, n, axis=0)
        stops = self.stop_ids if stop is None else stop
        return self.decode(cache, logits, T, max_new, stops,
                           Sampling(float(temperature), int(top_k), float(top_p)), seed)

    def decode(self, cache: KVCache, logits, T: int, max_new: int, stops=(),
               sampling: Sampling = Sampling(), seed: int = 0) -> list[list[int]]:
        """The fused decode after a prefill: cache holds T tokens, logits (B, V) follow them.
        Rows end at their stop token (included); the cache is consumed (donated)."""
        stops = jnp.asarray(stops, jnp.int32).reshape(-1)
        key, B = jax.random.PRNGKey(seed), logits.shape[0]
        state = (jnp.int32(0), _sample_first(logits, key, sampling, None), logits,
                 jnp.full((B, self.max_len), -1, jnp.int32), jnp.zeros((B,), bool))
        i = 0
        while i < max_new:  # one while_loop per kv_len bucket the history grows through
            kv = self.kv_bucket(T + i + 1)
            state, cache = _decode_loop(self.params, self.cfg, cache, state, key, stops,
                                        np.int32(min(max_new, kv - T)), sampling, kv)
            i = int(state[0])
            if bool(jnp.all(state[4])):
                break
        out = np.asarray(state[3][:, :i])
        return [[int(t) for t in row if t >= 0] for row in out]

    def kv_bucket(self, n: int) -> int:
        """Cache slots decode attends to with n tokens in it: 128, 256, 512, ... capped at
        max_len (one decode compile per bucket; reads scale with the history, not max_len)."""
        b = 128
        while b < n:
            b *= 2
        return min(b, self.max_len)

    def _budget(self, used: int, max_tokens: int | None) -> int:
        room = self.max_len - used
        if used > self.max_len:
            raise ContextOverflow(f"prompt of {used} tokens is longer than the context "
                                  f"({self.max_len})")
        if max_tokens is None:
            return room
        if max_tokens > room:
            raise ContextOverflow(f"{max_tokens} new tokens do not fit: {used} of {self.max_len} "
                                  f"context slots are used ({room} free); lower max_tokens or "
                                  "start a new Decoder")
        return int(max_tokens)


class Decoder:
    """One token sequence at batch 1, decoded incrementally (made by `Engine.decoder()`).

    Holds: `ids`, the token history; `cache`, a KV cache holding exactly those tokens (slot i is
    ids[i], `cache.pos` == len(ids)); `logits`, the (1, V) fp32 next-token logits after the last
    of them (None until the first append). Invariant: after every call, and after every token a
    generate() stream has handed out, the three agree.

    - append(ids): prefill the new tokens after the history, and only them. ContextOverflow,
      raised before anything is written, when they do not fit in room().
    - generate(...): stream sampled ids (the stop token included), starting from `logits`. Each
      token is written to the cache and to `ids` before it is yielded, so a caller that stops
      iterating early still holds a consistent Decoder. At most room() tokens; an explicit
      max_tokens > room() raises ContextOverflow at the call, before any token. Needs a prior
      append. stop_reason afterwards: "stop" | "length" | "context".
    - room(): free cache slots, max_len - len(ids): how many more tokens, appended or
      generated, fit.
    - Reuse across turns: keep one Decoder for a conversation and append() only each turn's new
      tokens (the model's own replies are already in it); the logits match (to float rounding)
      those of the whole history prefilled into a fresh Decoder. The history only grows: to drop or change tokens
      already in it, make a new Decoder and append the new history.
    - stats: prefilled / generated (the last call), prefilled_total / generated_total (since
      creation).
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self.ids: list[int] = []
        self.cache = engine.new_cache(1)
        self.logits = None  # (1, V) fp32 after the last token in the cache
        self.stop_reason: str | None = None  # "stop" | "length" | "context" after generate
        self.stats = {"prefilled": 0, "generated": 0, "prefilled_total": 0, "generated_total": 0}

    def room(self) -> int:
        """Free cache slots: how many more tokens (appended or generated) fit."""
        return self.engine.max_len - len(self.ids)

    def append(self, ids: Sequence[int]) -> None:
        """Prefill new tokens after the history (ContextOverflow if they do not fit, before
        anything is written)."""
        ids = [int(t) for t in ids]
        if not ids:
            return
        self.logits, self.cache = self.engine.prefill(self.cache, [ids], len(self.ids))
        self.ids += ids
        self.stats["prefilled"] = len(ids)
        self.stats["prefilled_total"] += len(ids)

    def generate(self, max_tokens: int | None = None, stop=None, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 allowed: Callable[[list[int]], object] | None = None) -> Iterator[int]:
        """Stream token ids (the stop token included). max_tokens None = until a stop token or
        the context is full (stop_reason "context"); an explicit max_tokens larger than room()
        raises ContextOverflow now, before any token. allowed(generated_so_far) is called before
        each draw (the same growing list every call) and returns None, a (V,) mask (bool, or any
        non-float dtype, cast to bool as before: the tool-call grammar) or a float (V,) additive
        bias (cast to float32; -inf = disallowed, 0 = neutral, +beta = favoured: the copy bias),
        numpy or on device; at least one slot must stay allowed, and a returned array must not
        be mutated afterwards (a host float row goes to the jitted step as is, which may read it
        asynchronously). Breaking out of the loop early leaves the Decoder consistent."""
        if self.logits is None:
            raise ValueError("append a prompt before generating")
        budget = self.engine._budget(len(self.ids), max_tokens)
        stops = set(self.engine.stop_ids if stop is None else stop)
        sampling = Sampling(float(temperature), int(top_k), float(top_p))
        return self._stream(budget, max_tokens, stops, sampling, jax.random.PRNGKey(seed), allowed)

    def _stream(self, budget, max_tokens, stops, sampling, key, allowed) -> Iterator[int]:
        e, out = self.engine, []
        self.stats["generated"], self.stop_reason = 0, None

        def mask():  # None, a bool mask or a float32 bias: one trace of the step per kind
            m = None if allowed is None else allowed(out)
            if m is None:
                return None
            if not jnp.issubdtype(getattr(m, "dtype", bool), jnp.floating):
                return jnp.asarray(m, bool)  # a mask (the grammar's): as it always was
            if isinstance(m, np.ndarray):  # the jitted call transfers it: a jnp.asarray first
                return m.astype(np.float32, copy=False)  # cost ~100-200 us/token (2-core CPU)
            return jnp.asarray(m, jnp.float32)

        tok = _sample_first(self.logits, key, sampling, mask())  # (1,)
        for i in range(budget):
            t = int(tok[0])  # the one host sync per token
            out.append(t)
            # write t to the cache and draw the next token (async) before handing t out
            tok, self.logits, self.cache = _decode_step(e.params, e.cfg, self.cache, tok, key,
                                                        np.int32(i + 1), mask(), sampling,
                                                        e.kv_bucket(len(self.ids) + 1))
            self.ids.append(t)
            self.stats["generated"] += 1
            self.stats["generated_total"] += 1
            last = t in stops or i + 1 == budget
            if last:
                self.stop_reason = ("stop" if t in stops else
                                    "length" if max_tokens is not None else "context")
            yield t
            if last:
                return

    def generate_text(self, **kw) -> Iterator[str]:
        """generate() as text pieces (multi-byte characters never split)."""
        return decode_text(self.engine.tokenizer, self.generate(**kw))
