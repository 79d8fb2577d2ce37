"""The copy bias (agent/masks/copy_bias.py): what it favours, longest match, backticks, incremental
context, off at beta 0, per-step cost, and a real tiny model that copies a span from its prompt
when the bias is large."""

import time

import jax
import numpy as np
import pytest

from agent.masks.copy_bias import CopyBias
from nanocode.engine import Engine
from nanocode.gpt import init_params
from tiny_models import tiny, tiny_tokenizer

DOC = ("def merge_obsidian(vault, notes):\n    return [n for n in notes if n.title in vault]\n\n"
       "Call `merge_obsidian` on the vault, then `split_notes(vault)`.\n")
TEXTS = [DOC * 3, "the quick brown fox jumps over the lazy dog\n" * 20,
         "".join(f"value_{i} = {i} * 2\n" for i in range(100))]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 512)


def noise_params(cfg, scale=0.15):
    """random_params' recipe (noise on every leaf) drawn with numpy from the shapes alone: no
    eager JAX op to compile per leaf shape (~10 s on a shared 2-core CPU)."""
    rng = np.random.default_rng(5)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    return jax.tree.map(lambda x: (scale * rng.standard_normal(x.shape)).astype(x.dtype), shapes)


def find(seq, sub):
    """The first index of the sublist `sub` in `seq`."""
    return next(i for i in range(len(seq) - len(sub) + 1) if seq[i:i + len(sub)] == sub)


def test_favours_the_next_token_of_a_copied_span(tok):
    V = tok.vocab_size
    ctx = tok.encode("Here is the code:\n" + DOC)
    cb = CopyBias.for_tokenizer(tok, V, 1.5)
    cb.extend(ctx)
    span = tok.encode("def merge_obsidian(vault, notes")
    s = find(ctx, span)
    lead = tok.encode("I will rewrite ")
    for k in range(1, len(span) + 1):
        out = lead + ctx[s:s + k]
        ids, bonus = cb.favour(out)
        assert ctx[s + k] in ids and bonus == 1.5
        if k >= 2:  # two tokens of the definition occur once: one continuation
            assert ids == [ctx[s + k]]
        row = cb.bias(out)
        assert row.shape == (V,) and row.dtype == np.float32
        assert row[ctx[s + k]] == np.float32(1.5) and row.sum() == np.float32(1.5 * len(set(ids)))
    unseen = next(t for t in range(256) if t not in ctx)  # a byte token absent from the context
    assert cb.favour(lead + [unseen]) is None and cb.bias(lead + [unseen]) is None
    assert cb.favour([]) is None


def test_longest_match_wins_recent_sources_and_the_end_of_the_context():
    cb = CopyBias(16, 1.0, [], max_sources=2)
    cb.extend([1, 2, 3, 9, 4, 2, 5, 9, 6, 2, 7])
    assert cb.favour([4, 2]) == ([5], 1.0)  # "4 2" beats "2" (followed by 3, 5 and 7)
    assert cb.favour([9, 4, 2]) == ([5], 1.0)
    assert cb.favour([8, 2]) == ([5, 7], 1.0)  # only "2": its 2 most recent occurrences
    assert cb.favour([6, 2, 7]) is None  # "7" only ends the context: nothing follows it yet
    cb.extend([8])
    assert cb.favour([6, 2, 7]) == ([8], 1.0)
    assert CopyBias(16, 1.0, [], min_match=2).favour([8, 2]) is None
    longest = CopyBias(16, 1.0, [], max_match=1)
    longest.extend([1, 2, 3, 9, 4, 2, 5])
    assert longest.favour([4, 2]) == ([3, 5], 1.0)  # max_match 1: unigrams only


def test_backticks_boost_and_the_mask_combination(tok):
    V = tok.vocab_size
    cb = CopyBias.for_tokenizer(tok, V, 1.0, backtick_beta=4.0)
    ctx = tok.encode(DOC)
    cb.extend(ctx)
    name = tok.encode(" merge_obsidian")
    s = find(ctx, name)
    nxt = ctx[s + len(name)]
    plain = tok.encode("Then") + name
    ticked = tok.encode("Then `x` and `") + name
    assert cb.favour(plain) == ([nxt], 1.0)
    assert cb.favour(ticked) == ([nxt], 4.0)
    assert cb.favour(tok.encode("Then `x`") + name) == ([nxt], 1.0)  # closed again
    # the same growing list is counted incrementally; a new list is counted from its start
    out = []
    for t in ticked:
        out.append(t)
        assert cb.in_backticks(out) == (tok.decode(out).count("`") % 2 == 1)
    assert cb.in_backticks(tok.encode("no ticks")) is False  # another list: recounted
    assert cb.in_backticks(list(ticked)) is True
    # with a grammar mask: 0 / -inf rows, the bonus only where allowed, the mask untouched
    mask = np.ones(V, bool)
    mask[:10] = False
    row = cb.bias(ticked, mask)
    assert nxt >= 10 and row.dtype == np.float32 and row[nxt] == 4.0 and np.isneginf(row[:10]).all()
    assert (row[10:] == 0).sum() == V - 11 and mask[10:].all()
    mask2 = mask.copy()
    mask2[nxt] = False
    row2 = cb.bias(ticked, mask2)
    assert np.isneginf(row2[nxt]) and np.array_equal(np.isfinite(row2), mask2)
    assert np.array_equal(cb.bias(ticked, mask), row)  # memoised base, fresh row
    assert cb.bias(ticked, mask) is not cb.bias(ticked, mask)


def test_incremental_context_equals_from_scratch(tok):
    ctx = tok.encode(DOC * 2 + TEXTS[2][:400])
    whole = CopyBias.for_tokenizer(tok, tok.vocab_size, 1.0)
    whole.extend(ctx)
    parts = CopyBias.for_tokenizer(tok, tok.vocab_size, 1.0)
    cuts = [0, 1, 2, 7, 30, 31, 90, len(ctx)]
    for a, b in zip(cuts, cuts[1:]):  # turn by turn, one token or many at a time
        parts.extend(ctx[a:b])
    assert parts.ctx == whole.ctx and parts.index == whole.index
    probe = tok.encode("Call `merge_obsidian` then value_3 = 3")
    for k in range(len(probe) + 1):
        assert parts.favour(probe[:k]) == whole.favour(probe[:k])


def test_beta_zero_is_off(tok):
    ctx = tok.encode(DOC)
    off = CopyBias.for_tokenizer(tok, tok.vocab_size, 0.0)
    off.extend(ctx)
    assert not off.enabled
    assert off.favour(ctx[:5]) is None and off.bias(ctx[:5], np.ones(tok.vocab_size, bool)) is None
    only_code = CopyBias.for_tokenizer(tok, tok.vocab_size, 0.0, backtick_beta=2.0)
    only_code.extend(ctx)
    name = tok.encode(" merge_obsidian")
    assert only_code.favour(tok.encode("Then") + name) is None  # a zero bonus: no row
    assert only_code.favour(tok.encode("Then `") + name)[1] == 2.0


def test_per_step_cost_at_context_2048(tok):
    text = "".join(TEXTS) * 4
    ctx = tok.encode(text)[:2048]
    assert len(ctx) == 2048
    reply = tok.encode(DOC + TEXTS[2][:300])[:300]  # mostly copies: the costly case
    for V in (4096, 32768):
        cb = CopyBias.for_tokenizer(tok, V, 1.0)
        cb.extend(ctx)
        mask = np.ones(V, bool)
        times, out = [], []
        for t in reply:
            t0 = time.perf_counter()
            cb.bias(out, mask)
            times.append(time.perf_counter() - t0)
            out.append(t)
        med = float(np.median(times))
        print(f"copy bias: V={V} context 2048: median {med * 1e6:.1f} us per step")
        assert med < 200e-6  # ~10 us measured on the 2-core dev machine; loose for shared CPUs


def test_large_beta_makes_greedy_decode_copy_a_span(tok):
    """A tiny random model never copies by itself; with the bias it follows the prompt."""
    V = tok.vocab_size
    cfg = tiny(vocab_size=V, n_layer=2, sequence_len=128)
    engine = Engine(noise_params(cfg), cfg, tok, buckets=(64,))
    prompt = [tok.bos_id] + tok.encode(DOC)[:60]
    # start at a token that occurs once, so the copy has exactly one continuation
    s = next(i for i, t in enumerate(prompt) if prompt.count(t) == 1 and i > 5)
    first = np.full(V, -np.inf, np.float32)
    first[prompt[s]] = 0  # the first draw is forced (a float row too: one compiled kind)
    n = min(12, len(prompt) - s - 1)

    def run(beta):
        cb = CopyBias.for_tokenizer(tok, V, beta)
        cb.extend(prompt)

        def hook(out):  # the float kind at every draw (a zero row when there is no bias)
            if not out:
                return first
            row = cb.bias(out)
            return np.zeros(V, np.float32) if row is None else row

        dec = engine.decoder()
        dec.append(prompt)
        return list(dec.generate(max_tokens=n + 1, stop=(), allowed=hook))

    assert run(1e3) == prompt[s:s + n + 1]
    assert run(0.0) != prompt[s:s + n + 1]  # the same model unbiased does not copy
