"""Engine: cached decoding equals full recomputation, chunked/bucketed prefill equals one prefill,
Decoder turn reuse, seeded sampling, overflow errors, streaming text."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanocode.engine import (ContextOverflow, Engine, Sampling, decode_text, default_buckets,
                             plan_chunks, sample)
from nanocode.gpt import forward
from nanocode.load import load_engine
from tiny_models import random_params, tiny, tiny_tokenizer

BUCKETS = (16, 64)  # small buckets: prompts of 10-150 tokens go through several padded chunks

CFG = tiny()
PARAMS = random_params(CFG)
ENGINE = Engine(PARAMS, CFG, buckets=BUCKETS)
TOKENIZER = tiny_tokenizer(["def f(x):\n    return x + 1\n"] * 20, 280)  # saved with checkpoints


def prompt_ids(n, seed=0, vocab=300):
    return [int(t) for t in np.random.RandomState(seed).randint(0, vocab, n)]


@functools.partial(jax.jit, static_argnums=1)
def _full_logits_at(params, cfg, padded, n):
    """Next-token logits at position n-1 from a full forward (no cache) over a padded row."""
    logits, _ = forward(params, cfg, padded)
    return jax.lax.dynamic_index_in_dim(logits, n - 1, axis=1, keepdims=False)


def greedy_by_recompute(params, cfg, prompts, n_new):
    """Argmax of a full forward over the whole sequence at every step (causal, so padding to a
    fixed length changes nothing and compiles once)."""
    seqs = [list(p) for p in prompts]
    for _ in range(n_new):
        n = len(seqs[0])
        padded = np.zeros((len(seqs), cfg.sequence_len), np.int32)
        padded[:, :n] = seqs
        nxt = np.asarray(jnp.argmax(_full_logits_at(params, cfg, padded, n), axis=-1))
        for s, t in zip(seqs, nxt):
            s.append(int(t))
    return [s[len(p):] for s, p in zip(seqs, prompts)]


# ---- correctness of the cache ------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{}, pytest.param(dict(window_pattern="L", value_embeds=False, smear=False,
                                                      lambdas=False, backout=False), marks=pytest.mark.slow),
                                pytest.param(dict(attn_impl="xla", n_kv_head=4), marks=pytest.mark.slow)])
def test_cached_greedy_equals_full_recompute(kw):
    cfg = tiny(**kw)
    params = random_params(cfg, seed=3)
    engine = Engine(params, cfg, buckets=BUCKETS)
    # 120-token prompts + 16 new: past the 128-token short window of the S layers, and across
    # the 128 -> 256 boundary of the decode's kv_len buckets (two while_loop segments)
    prompts = [prompt_ids(120, seed=1), prompt_ids(120, seed=2)]
    want = greedy_by_recompute(params, cfg, prompts, 16)
    assert want[0] != want[1]
    s = engine.decoder()
    s.append(prompts[0])
    assert list(s.generate(max_tokens=16)) == want[0]  # streaming, batch 1
    assert engine.generate(prompts, max_tokens=16) == want  # fused loop, batch 2
    assert engine.generate(prompts[1], max_tokens=16) == [want[1]]


def test_chunked_prefill_equals_single_prefill():
    ids = prompt_ids(150, seed=4)
    padded = np.zeros((1, CFG.sequence_len), np.int32)
    padded[0, :150] = ids
    ref = _full_logits_at(PARAMS, CFG, padded, 150)
    one = ENGINE.decoder()
    one.append(ids)  # 64 + 64 + 22 padded to 64 (buckets)
    np.testing.assert_allclose(one.logits, ref, atol=1e-5, rtol=1e-5)
    for splits in [(37, 1, 90, 22), (1, 1, 1, 147), (16, 64, 70)]:
        s = ENGINE.decoder()
        start = 0
        for n in splits:
            s.append(ids[start:start + n])
            start += n
        assert int(s.cache.pos) == 150 and len(s.ids) == 150
        np.testing.assert_allclose(s.logits, one.logits, atol=1e-5, rtol=1e-5)


def test_plan_chunks_uses_buckets_and_exact_size_only_at_the_end():
    assert default_buckets(2048) == (16, 64, 256, 1024)
    b = (16, 64, 256, 1024)
    assert plan_chunks(300, 512, b) == [(256, 256), (64, 44)]  # not one 1024 chunk, 70% padding
    assert plan_chunks(1000, 2048, b) == [(1024, 1000)]
    assert plan_chunks(2048, 2048, b) == [(1024, 1024), (1024, 1024)]
    assert plan_chunks(5, 512, b) == [(16, 5)]
    assert plan_chunks(20, 20, b) == [(16, 16), (4, 4)]  # the cache's last 4 slots: exact size
    for n, room in [(1, 1), (77, 80), (513, 600), (999, 1000)]:
        plan = plan_chunks(n, room, b)
        assert sum(r for _, r in plan) == n
        used = 0
        for size, real in plan:
            assert used + size <= room and real <= size
            used += real


# ---- decoders ----------------------------------------------------------------------------------
def test_decoder_reuses_cache_across_ten_turns():
    s = ENGINE.decoder()
    total_new = 0
    for turn in range(10):
        new = prompt_ids(5 + turn, seed=10 + turn)
        s.append(new)
        assert s.stats["prefilled"] == len(new)  # only the new tokens, never the history
        total_new += len(new)
        reply = list(s.generate(max_tokens=4))
        assert len(reply) == 4 and s.ids[-4:] == reply
        assert int(s.cache.pos) == len(s.ids)
    assert s.stats["prefilled_total"] == total_new
    assert s.stats["generated_total"] == 40
    fresh = ENGINE.decoder()  # the same history prefilled from scratch
    fresh.append(s.ids)
    np.testing.assert_allclose(s.logits, fresh.logits, atol=1e-5, rtol=1e-5)


def test_stop_tokens_end_generation_and_are_kept():
    s = ENGINE.decoder()
    s.append(prompt_ids(20, seed=5))
    free = list(s.generate(max_tokens=8, stop=()))
    assert s.stop_reason == "length"
    stop_tok = free[3]
    cut = free[:free.index(stop_tok) + 1]
    s2 = ENGINE.decoder()
    s2.append(prompt_ids(20, seed=5))
    assert list(s2.generate(max_tokens=8, stop=[stop_tok])) == cut
    assert s2.stop_reason == "stop"
    assert ENGINE.generate(prompt_ids(20, seed=5), max_tokens=8, stop=[stop_tok]) == [cut]


# ---- sampling ----------------------------------------------------------------------------------
def _stream(prompt, **kw):
    s = ENGINE.decoder()
    s.append(prompt)
    return list(s.generate(**kw))


def test_seeds_temperature_topk_topp_and_fused_equals_streaming():
    p = prompt_ids(30, seed=6)
    greedy = _stream(p, max_tokens=10)
    assert _stream(p, max_tokens=10) == greedy  # temperature 0: deterministic
    assert _stream(p, max_tokens=10, temperature=0.0, seed=5) == greedy  # seed is ignored
    hot = dict(max_tokens=10, temperature=1.0)
    a = _stream(p, seed=1, **hot)
    assert _stream(p, seed=1, **hot) == a  # same seed, same output
    assert _stream(p, seed=2, **hot) != a  # different seeds differ
    assert _stream(p, top_k=1, **hot) == greedy
    assert _stream(p, top_p=1e-6, **hot) == greedy
    assert ENGINE.generate(p, max_tokens=10) == [greedy]  # fused while_loop == streaming
    assert ENGINE.generate(p, seed=1, **hot) == [a]  # same keys in both paths
    # n samples per prompt: one shared prefill, rows independent
    rows = ENGINE.generate(p, n=4, seed=1, **hot)
    assert len(rows) == 4 and len({tuple(r) for r in rows}) > 1


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    keys = jax.random.split(jax.random.PRNGKey(0), 300)
    draw = jax.vmap(lambda k, s: sample(logits, k, s), in_axes=(0, None))
    assert set(np.asarray(draw(keys, Sampling(1.0, top_k=2))).ravel()) == {0, 1}
    assert set(np.asarray(draw(keys, Sampling(1.0, top_p=0.7))).ravel()) == {0, 1}
    assert set(np.asarray(draw(keys, Sampling(1.0, top_p=0.81))).ravel()) == {0, 1, 2}


def test_logits_mask_hook_constrains_streaming():
    allowed = np.zeros(CFG.vocab_size, bool)
    allowed[[5, 6, 7]] = True
    seen = []

    def hook(generated):
        seen.append(len(generated))
        return allowed if len(generated) % 2 == 0 else None  # constrain every other token

    out = _stream(prompt_ids(12, seed=7), max_tokens=8, temperature=1.0, allowed=hook)
    assert all(t in (5, 6, 7) for t in out[::2])
    assert seen[:8] == list(range(8))


def test_float_bias_adds_to_the_logits_and_minus_inf_blocks():
    logits = jnp.array([[1.0, 3.0, 2.0, 0.0]])
    key = jax.random.PRNGKey(0)
    greedy = lambda a: int(sample(logits, key, Sampling(), a)[0])  # noqa: E731
    assert greedy(None) == 1
    assert greedy(np.array([2.5, 0, 0, 0], np.float32)) == 0  # argmax(logits + bias)
    assert greedy(np.array([0, -np.inf, 0, 0], np.float32)) == 2
    assert greedy(np.array([[0, -np.inf, 0, 0]], np.float32)) == 2  # (B, V) too
    assert greedy(np.array([True, False, False, True])) == 0  # bool: a mask, not a bias
    keys = jax.random.split(key, 300)
    bias = jnp.array([0, -jnp.inf, 0, -jnp.inf])
    draw = jax.vmap(lambda k: sample(logits, k, Sampling(1.0), bias))
    assert set(np.asarray(draw(keys)).ravel()) == {0, 2}


def test_float_bias_hook_streams_and_bool_path_is_unchanged():
    from nanocode.engine import _decode_step
    p, kw = prompt_ids(12, seed=11), dict(max_tokens=6, temperature=1.0, seed=4)
    allowed = np.zeros(CFG.vocab_size, bool)
    allowed[[5, 6, 7, 40]] = True
    as_bias = np.where(allowed, 0, -np.inf).astype(np.float32)
    want = _stream(p, allowed=lambda out: allowed, **kw)
    n_compiled = _decode_step._cache_size()
    assert _stream(p, allowed=lambda out: allowed, **kw) == want
    assert _decode_step._cache_size() == n_compiled  # the bool path: nothing new
    # the same constraint as a 0/-inf bias (host or device, fresh each step) draws the same tokens
    assert _stream(p, allowed=lambda out: as_bias.copy(), **kw) == want
    assert _decode_step._cache_size() == n_compiled + 1  # one more trace: the float32 kind
    assert _stream(p, allowed=lambda out: jnp.asarray(as_bias), **kw) == want
    free = _stream(p, **kw)
    pick = next(t for t in range(CFG.vocab_size) if t not in free)
    boost = np.zeros(CFG.vocab_size, np.float32)
    boost[pick] = 1e4
    # a float64 bias on some steps, none on the others (float64 runs as the float32 kind)
    out = _stream(p, allowed=lambda out: boost.astype(np.float64) if len(out) % 2 == 0 else None,
                  **kw)
    assert out[::2] == [pick] * 3 and pick not in out[1::2]


# ---- context limits ----------------------------------------------------------------------------
def test_prompt_longer_than_context_is_a_clear_error():
    too_long = prompt_ids(CFG.sequence_len + 1)
    with pytest.raises(ContextOverflow, match="257 tokens do not fit.*256"):
        ENGINE.decoder().append(too_long)
    with pytest.raises(ValueError, match="longer than the context"):
        ENGINE.generate(too_long, max_tokens=1)


def test_overflow_during_generation_is_announced_before_it_happens():
    s = ENGINE.decoder()
    s.append(prompt_ids(250))
    assert s.room() == 6
    with pytest.raises(ContextOverflow, match="10 new tokens do not fit.*250 of 256.*6 free"):
        s.generate(max_tokens=10)  # raised at the call, before any token
    assert len(s.ids) == 250
    out = list(s.generate(stop=()))  # no max_tokens: runs to the end of the context
    assert len(out) == 6 and s.room() == 0 and s.stop_reason == "context"
    with pytest.raises(ContextOverflow):
        s.append([1])
    with pytest.raises(ContextOverflow):
        ENGINE.generate(prompt_ids(250), max_tokens=7)


# ---- text streaming ----------------------------------------------------------------------------
def test_streamed_text_pieces_concatenate_to_decode():
    from nanocode.tokenizer import train_tokenizer
    text = ("def héllo(wörld):\n    return '日本語 ✓ naïve café'  # ünïcödé\n" * 40
            + "the quick brown fox jumps over the lazy dog 12345\n" * 40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a small corpus may run out of merges: fine here
        tok = train_tokenizer([text], 300)
    # a multi-byte character split over byte tokens comes out whole
    ids = tok.encode("日本語 ✓")
    assert len(ids) > 4
    pieces = list(decode_text(tok, ids))
    assert "".join(pieces) == "日本語 ✓" and all("\ufffd" not in p for p in pieces)
    # model output (random tokens, specials included) streams to exactly decode(ids)
    cfg = tiny(vocab_size=tok.vocab_size)
    engine = Engine(random_params(cfg, seed=8), cfg, tokenizer=tok, buckets=BUCKETS)
    s = engine.decoder()
    s.append([tok.bos_id] + tok.encode("def héllo"))
    start = len(s.ids)
    pieces = list(s.generate_text(max_tokens=40, temperature=1.0, seed=3, stop=()))
    assert "".join(pieces) == tok.decode(s.ids[start:])
    assert engine.stop_ids == (tok.encode_special("<|assistant_end|>"),
                               tok.encode_special("<|tool_call_end|>"))



def test_load_engine_from_checkpoint_and_bf16(tmp_path):
    from nanocode.checkpoint import save
    save(tmp_path, 1, PARAMS, config=CFG, tokenizer=TOKENIZER)
    p = prompt_ids(20, seed=9)
    want = ENGINE.generate(p, max_tokens=6, stop=())
    assert load_engine(tmp_path, buckets=BUCKETS).generate(p, max_tokens=6, stop=()) == want
    bf16 = load_engine(tmp_path, dtype=jnp.bfloat16, buckets=BUCKETS)
    s = bf16.decoder()
    s.append(p)
    assert s.cache.k.dtype == jnp.bfloat16 and s.logits.dtype == jnp.float32
    assert len(list(s.generate(max_tokens=6))) == 6


def test_bf16_stored_params_run_in_float32(tmp_path):
    """bf16-stored params with a float32 config are upcast once at load and decode exactly like a
    float32 engine over the same (bf16-rounded) weights."""
    from nanocode.checkpoint import save
    rounded = jax.tree.map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    save(tmp_path, 1, rounded, config=CFG, tokenizer=TOKENIZER)
    engine = load_engine(tmp_path, buckets=BUCKETS)
    assert {x.dtype for x in jax.tree.leaves(engine.params)} == {jnp.dtype(jnp.float32)}
    up = jax.tree.map(lambda x: x.astype(jnp.float32), rounded)
    p = prompt_ids(20, seed=4)
    assert engine.generate(p, max_tokens=8, stop=()) == Engine(up, CFG, buckets=BUCKETS).generate(
        p, max_tokens=8, stop=())
