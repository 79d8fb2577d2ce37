"""Our engine as the agent's model (agent/samplers/sampler.Sampler): KV-cached, grammar-masked, grounded in
the project. The turn driver (agent/loop/driver.py) hands it the conversation and gets back one
assistant message.

Token history. `cache` (an engine Decoder: KV cache + ids) always holds exactly the rendered
conversation (the wire format of nanocode/protocol.py), plus an open `<|assistant_start|>` while
the model writes. The model's own tokens are kept as sampled (only new tokens are prefilled,
turn after turn; the history then equals the render byte for byte, and token for token unless
the model picked a non-canonical split of its own text), except when its output cannot be
represented in the conversation schema (an unterminated or malformed call, a Ctrl-C inside a
call): then the message keeps what can be represented and the cache is rebuilt from the
re-rendered conversation (one prefill of the history).

Context. Before new tokens go in, they plus `reserve` slots for the reply must fit; if not,
agent/loop/context.fit drops old tool outputs and then old turns from the conversation in place, the
cache is rebuilt and a status event says what was dropped.

Masks. Every sampled token goes through the grammar (agent/masks/grammar.py: only well-formed calls to
the mode's tools; with `ground`, paths, edit anchors and grep names that exist in the project),
ANDed with the loop guard's (agent/masks/loop_guard.py: no token that would complete a loop in the
prose or an argument value; after repeated near loops the prose may only end, and the reply's stop
is "loop") and with `extra_mask(out)` when given (tests script the model with it); `copy_bias`
adds +beta to tokens that continue a copy of the context, in prose only (agent/masks/copy_bias.py).
"""
from __future__ import annotations

import time

import jax
import numpy as np

from agent.loop.context import ContextFull, fit
from agent.masks.copy_bias import CopyBias
from agent.masks.grammar import CONTENT, Grammar
from agent.masks.grounding import Grounding
from agent.masks.loop_guard import LoopGuard
from agent.samplers.reply_stream import stream_reply
from agent.samplers.sampler import Reply
from agent.settings import SamplerSettings
from nanocode.protocol import Status, Text


class EngineSampler:
    """Our engine (nanocode.engine.Engine with a tokenizer) sampling with `settings` for the
    project at `root` (None: no grounding). extra_mask(out) -> bool row or None is ANDed with
    every mask: tests script the model with it."""

    def __init__(self, engine, root=None, settings: SamplerSettings = SamplerSettings(), extra_mask=None):
        if engine.tokenizer is None:
            raise ValueError("the engine has no tokenizer (the checkpoint was saved without one)")
        self.engine, self.tok, self.root, self.settings = engine, engine.tokenizer, root, settings
        self.max_len = engine.max_len
        self.reserve = settings.reserve_for(engine.max_len)
        self.extra_mask = extra_mask
        self.grammar = Grammar.shared(self.tok, engine.cfg.vocab_size)
        grounded = settings.ground and settings.constrain and root is not None
        self.grounding = Grounding(root, names=settings.names) if grounded else None
        self.loops = LoopGuard.shared(self.grammar) if settings.loop_guard else None  # agent/masks/loop_guard.py
        self._grounded = 0  # messages[:_grounded] were given to grounding.add_message
        self._notes = 0  # grounding.notes[:_notes] were shown
        self._copy, self._copy_cache, self._copy_seen = None, None, 0  # agent/masks/copy_bias.py
        self._full = np.ones(engine.cfg.vocab_size, bool)
        self._device_masks: dict = {}  # id(numpy mask) -> (mask, device copy); masks are memoised
        self.mask_time = 0.0  # seconds spent in the mask hook (for the overhead number)
        self.mask_calls = 0
        s = self.tok.special_ids
        self._a_start, self._a_end = s["<|assistant_start|>"], s["<|assistant_end|>"]
        self.reset()

    def fork(self, root, settings: SamplerSettings) -> "EngineSampler":
        return EngineSampler(self.engine, root, settings, self.extra_mask)

    # ---- the interface -------------------------------------------------------------------------
    def reset(self) -> None:
        self.cache = self.engine.decoder()
        self._k = 0  # messages[:_k] are in the cache
        self._dirty = True  # the cache must be rebuilt from a full render
        self._grounded = 0
        self.n_replies = 0  # replies sampled in this conversation (the seed offset)

    def invalidate(self) -> None:
        self._dirty = True

    def tree_changed(self) -> None:
        if self.grounding is not None:
            self.grounding.refresh()

    def count(self, text: str) -> int:
        return len(self.tok.encode(text))

    def context_used(self, messages) -> int:
        return len(self.cache.ids)

    def describe(self) -> str:
        c = self.engine.cfg
        return (f"{c.n_layer} layers, width {c.n_embd}, vocab {c.vocab_size}, context "
                f"{self.max_len} tokens")

    def rendered_ids(self, messages) -> list[int]:
        """The canonical render of `messages` (what the cache holds, when no reply is open)."""
        return self.tok.render_conversation({"messages": messages})[0] if messages else []

    def sync(self, conv, emit, usage) -> None:
        self._flush(conv, emit, usage, open_reply=False)

    def reply(self, conv, tools, emit, cancel, usage, retry: bool = False) -> Reply:
        """Open a reply, stream its prose (Text events), close it; the message is appended to
        conv.messages. Raises ContextFull when no reply fits."""
        streamed, stop = self._generate(conv, tools, emit, cancel, usage, retry)
        return self._finish(conv.messages, streamed, stop, usage)

    # ---- generation ------------------------------------------------------------------------------
    def _hook(self, tools, loops):
        """The engine's mask hook for one reply; `loops`: its ReplyLoops, or None."""
        state = self.grammar.state(tools=tools, ground=self.grounding) if self.settings.constrain else None
        extra, full, dev, copy = self.extra_mask, self._full, self._device_masks, self._copy

        def allowed(out):
            t0 = time.perf_counter()
            m = state.allowed(out) if state is not None else full
            if loops is not None:
                m = loops.mask(out, m, prose=state is None or state.phase == CONTENT)
            e = extra(out) if extra is not None else None
            row = None
            if e is not None:
                both = m & np.asarray(e, bool)
                m = both if both.any() else m  # never an all-False row
            elif copy is not None and (state is None or state.phase == CONTENT):
                row = copy.bias(out, m)  # prose and answers: a float row, mask included
            if row is not None:
                m = row
            elif e is None:  # hand the engine a device copy, memoised by identity (the grammar's
                # and the loop guard's masks are memoised arrays; a fresh ban is rare)
                d = dev.get(id(m))
                if d is None:
                    if len(dev) >= 1024:  # anchors make a mask per token: bounded
                        dev.clear()
                    d = dev[id(m)] = (m, jax.device_put(m))  # keeps m alive, so its id stays its
                m = d[1]
            self.mask_time += time.perf_counter() - t0
            self.mask_calls += 1
            return m
        return allowed

    def _generate(self, conv, tools, emit, cancel, usage, retry: bool):
        """Sample one reply (agent/samplers/reply_stream.py): (the StreamedReply, its stop, "loop" when
        the loop guard ended it)."""
        self._flush(conv, emit, usage, open_reply=True)
        if self.grounding is not None:
            for m in conv.messages[min(self._grounded, len(conv.messages)):]:
                self.grounding.add_message(m)
            self._grounded = len(conv.messages)
        st = self.settings
        budget = min(st.max_tokens, self.cache.room() - 1)  # one slot for <|assistant_end|>
        if budget < 1:
            raise ContextFull("the context is full: no room left for a reply")
        seed = st.seed + self.n_replies
        self.n_replies += 1
        if st.copy_bias:  # the copy index follows the cache (rebuilt when the cache is)
            if self._copy is None or self._copy_cache is not self.cache:
                self._copy = CopyBias.for_tokenizer(self.tok, self.engine.cfg.vocab_size, st.copy_bias)
                self._copy_cache, self._copy_seen = self.cache, 0
            self._copy.extend(self.cache.ids[self._copy_seen:])
            self._copy_seen = len(self.cache.ids)
        temperature = st.temperature_for(retry)
        loops = self.loops.reply() if self.loops is not None else None
        t0 = time.perf_counter()
        tokens = self.cache.generate(max_tokens=budget, temperature=temperature, top_k=st.top_k,
                                     top_p=st.top_p, seed=seed, allowed=self._hook(tools, loops))
        streamed = stream_reply(self.tok, tokens, lambda piece: emit(Text(piece)), cancel)
        usage["generate_s"] += time.perf_counter() - t0
        usage["completion_tokens"] += len(streamed.ids)
        if self.grounding is not None:  # e.g. a project too large to ground: said once
            for note in self.grounding.notes[self._notes:]:
                emit(Status(note))
            self._notes = len(self.grounding.notes)
        ended_by_loops = streamed.stop == "stop" and loops is not None and loops.ended
        return streamed, "loop" if ended_by_loops else streamed.stop

    def _finish(self, messages, streamed, stop, usage) -> Reply:
        """The reply as an assistant message, closed in the cache."""
        out = streamed.ids
        ends_reply = out[-1:] == (self._a_end,)
        msg = {"role": "assistant", "content": streamed.content}
        if streamed.call is not None:
            msg["tool_call"] = streamed.call
        messages.append(msg)
        # keep the sampled tokens when they are this message's render, up to the token split
        sampled = list(out) + ([] if ends_reply else [self._a_end])
        canonical = self._piece(msg)[1:]
        same = (self._bytes(sampled) == self._bytes(canonical)
                and [t for t in sampled if self.tok.is_special(t)]
                == [t for t in canonical if self.tok.is_special(t)])
        if same and not self._dirty:
            if not ends_reply:
                self._prefill([self._a_end], usage)
            self._k = len(messages)
        else:
            self._dirty = True  # rebuilt from the render at the next flush
        return Reply(msg, streamed.call, streamed.error, stop)

    # ---- token bookkeeping ---------------------------------------------------------------------------
    def _bytes(self, ids) -> bytes:
        return b"".join(self.tok.id_to_bytes(t) for t in ids)

    def _piece(self, msg) -> list[int]:
        """The ids one (non-first) message renders to."""
        return self.tok.render_message(msg)[0]

    def _flush(self, conv, emit, usage, open_reply: bool) -> None:
        """Bring the cache up to the conversation (+ an open <|assistant_start|>), compacting
        the conversation when the new tokens plus the reply reserve do not fit."""
        extra = self.reserve if open_reply else 0
        tail = [self._a_start] if open_reply else []
        messages = conv.messages
        if not self._dirty and self._k > 0:
            new = [t for m in messages[self._k:] for t in self._piece(m)] + tail
            if len(new) + extra <= self.cache.room():
                if new:
                    self._prefill(new, usage)
                self._k = len(messages)
                return
        self._dirty = True  # messages may change below: only a full render is right now
        ids = self._fit(conv, emit, len(tail) + extra)
        self.cache = self.engine.decoder()
        self._prefill(ids + tail, usage)
        self._k, self._dirty = len(messages), False

    def _prefill(self, ids: list[int], usage) -> None:
        t0, before = time.perf_counter(), self.cache.stats["prefilled_total"]
        self.cache.append(ids)  # (it may also feed the last sampled token: counted)
        usage["prefill_s"] += time.perf_counter() - t0
        usage["prompt_tokens"] += self.cache.stats["prefilled_total"] - before

    def _fit(self, conv, emit, extra: int) -> list[int]:
        """The render, compacted (agent/loop/context.fit) to leave `extra` slots free."""
        ids: list[int] = []

        def size(messages) -> int:  # the render plus the slots kept free; the last one is kept
            ids[:] = self.rendered_ids(messages)
            return len(ids) + extra
        fit(conv, self.count, size, self.max_len, emit)
        return ids
