"""The model: parameter arithmetic against nanochat's numbers, causality and agreement of every
attention implementation that runs on CPU, the KV-cache path, and that a tiny model can learn."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nanocode.config import GPTConfig, flops_per_token, kv_bytes_per_token, param_counts, preset
from nanocode.attention import attend, resolve_attn_impl
from nanocode.gpt import cross_entropy, forward, init_cache, init_params, loss_fn, nll_sum
from tiny_models import random_params, tiny

CPU_IMPLS = ["xla", "einsum", "splash"]  # splash runs in Pallas interpret mode off-TPU


fwd = jax.jit(forward, static_argnums=1)


# ---- arithmetic ------------------------------------------------------------------------------------
def test_param_counts_match_nanochat_d12():
    c = param_counts(preset("d12"))
    assert c["wte"] == 25_165_824
    assert c["value_embeds"] == 150_994_944
    assert c["lm_head"] == 25_165_824
    assert c["transformer_matrices"] == 84_935_088
    assert c["scalars"] == 50
    assert c["total"] == 286_261_730
    assert c["scaling"] == 110_100_912


def test_d24_and_flops_and_kv_bytes():
    d24 = preset("d24")
    assert abs(param_counts(d24)["total"] / 1.384e9 - 1) < 1e-3
    assert abs(param_counts(d24)["scaling"] / 729.8e6 - 1) < 1e-3
    assert abs(flops_per_token(preset("d12")) / 7.6e8 - 1) < 0.01
    assert abs(flops_per_token(d24) / 4.8e9 - 1) < 0.01
    assert kv_bytes_per_token(d24) == 144 * 1024
    assert preset("d12").window_sizes() == [512, 512, 512, 2048] * 3


def test_presets_shapes():
    assert (preset("cpu-d4").n_embd, preset("cpu-d4").head_dim, preset("cpu-d4").padded_vocab) == (256, 64, 8192)
    v1 = preset("nanocode-v1")
    assert (v1.n_embd, v1.head_dim, v1.value_embeds, v1.smear, v1.backout, v1.lambdas) == (2048, 256, False, False, False, False)
    assert set(v1.window_sizes()) == {v1.sequence_len}
    assert abs(param_counts(preset("nanocode-v1-d20"))["total"] / 477e6 - 1) < 0.01
    with pytest.raises(ValueError, match="unknown preset"):
        preset("d13")
    with pytest.raises(ValueError, match="n_kv_head"):
        tiny(n_kv_head=3)


@pytest.mark.parametrize("kw", [{}, dict(n_layer=3, n_kv_head=4, vocab_size=250),
                                dict(value_embeds=False, lambdas=False, smear=False, backout=False)])
def test_counted_params_equal_initialised(kw):
    cfg = tiny(**kw)
    params = init_params(cfg, jax.random.PRNGKey(0))
    assert sum(x.size for x in jax.tree.leaves(params)) == param_counts(cfg)["total"]
    assert params["wte"].shape == (cfg.padded_vocab, cfg.n_embd)


# ---- attention -------------------------------------------------------------------------------------
@pytest.mark.parametrize("window", [8, 64])
def test_attention_impls_agree_and_respect_window(window):
    B, T, H, K, D = 2, 128, 4, 2, 16
    q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (B, T, n, D)) for i, n in enumerate([H, K, K]))
    ref = attend(q, k, v, window=window, impl="einsum")
    for impl in CPU_IMPLS:
        out = attend(q, k, v, window=window, impl=impl)
        np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5, err_msg=impl)
        # a key just outside the window of query t never matters; one just inside does
        t = T - 1
        k2 = k.at[:, t - window - 1].add(3.0)
        out2 = attend(q, k2, v, window=window, impl=impl)
        np.testing.assert_array_equal(out2[:, t], out[:, t])
        k3 = k.at[:, t - window].add(3.0)
        assert not np.allclose(attend(q, k3, v, window=window, impl=impl)[:, t], out[:, t])


@pytest.mark.parametrize("impl", CPU_IMPLS)
@pytest.mark.parametrize("pattern", ["SSSL", "L"])
def test_causality(impl, pattern):
    """Changing token t never changes logits before t, and does change logits at t."""
    cfg = tiny(attn_impl=impl, window_pattern=pattern)
    params = random_params(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(2), (2, cfg.sequence_len), 0, cfg.vocab_size)
    base, _ = fwd(params, cfg, idx)
    for t in (1, 100, 200):
        changed, _ = fwd(params, cfg, idx.at[:, t].set((idx[:, t] + 1) % cfg.vocab_size))
        np.testing.assert_array_equal(changed[:, :t], base[:, :t])
        assert not np.allclose(changed[:, t], base[:, t])


def test_model_impls_agree_fp32():
    cfg = tiny()
    params = random_params(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(3), (2, cfg.sequence_len), 0, cfg.vocab_size)
    ref, _ = fwd(params, cfg.replace(attn_impl="einsum"), idx)
    for impl in ("xla", "splash"):
        out, _ = fwd(params, cfg.replace(attn_impl=impl), idx)
        np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5, err_msg=impl)


@pytest.mark.parametrize("pattern", ["SSSL", pytest.param("L", marks=pytest.mark.slow)])
def test_einsum_attention_backward_matches_autodiff(pattern):
    """The einsum impl's hand-written chunk backward (attention._attend_chunk) gives the gradients that
    autodiff of jax.nn.dot_product_attention gives: GQA (4 query heads, 2 kv heads), windows."""
    cfg = tiny(window_pattern=pattern)
    params = random_params(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(4), (2, cfg.sequence_len + 1), 0, cfg.vocab_size)

    def grads(impl):
        return jax.grad(loss_fn)(params, cfg.replace(attn_impl=impl), idx[:, :-1], idx[:, 1:])
    ref = jax.tree_util.tree_leaves_with_path(grads("xla"))
    for (path, r), g in zip(ref, jax.tree.leaves(grads("einsum"))):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * float(jnp.abs(r).max()) + 1e-8,
                                   err_msg=jax.tree_util.keystr(path))


def test_auto_impl_on_cpu_is_the_block_causal_einsum():
    assert resolve_attn_impl(tiny()) == "einsum"
    assert resolve_attn_impl(tiny(attn_impl="xla")) == "xla"


# ---- KV cache --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{}, dict(window_pattern="L", n_kv_head=4), pytest.param(
    dict(value_embeds=False, smear=False, lambdas=False, backout=False), marks=pytest.mark.slow)])
def test_chunked_prefill_with_cache_matches_full_forward(kw):
    cfg = tiny(**kw)
    params = random_params(cfg)
    T = 200
    idx = jax.random.randint(jax.random.PRNGKey(4), (2, T), 0, cfg.vocab_size)
    full, _ = fwd(params, cfg, idx)
    cache = init_cache(cfg, batch=2, max_len=cfg.sequence_len)
    pieces, start = [], 0
    for size in (37, 1, 90, 1, 1, 70):  # arbitrary splits, single-token decodes among them
        logits, cache = fwd(params, cfg, idx[:, start:start + size], cache)
        pieces.append(logits)
        start += size
    assert start == T and int(cache.pos) == T
    np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, atol=1e-5, rtol=1e-5)


# ---- loss and learning -----------------------------------------------------------------------------
def test_cross_entropy_ignore_index_and_reductions():
    logits = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 11))
    targets = jnp.array([[1, 2, -1, 4, 5], [-1, -1, 3, 3, 0]])
    per_token = cross_entropy(logits, targets, "none")
    assert per_token.shape == (2, 5)
    assert float(per_token[0, 2]) == 0.0 and float(per_token[1, 0]) == 0.0
    expected = -jax.nn.log_softmax(logits)[0, 0, 1]
    np.testing.assert_allclose(per_token[0, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(cross_entropy(logits, targets), per_token.sum() / 7, rtol=1e-6)


@pytest.mark.parametrize("B, T", [pytest.param(4, 256, marks=pytest.mark.slow), (3, 33)])  # two chunks of 128 (slow); one odd chunk
def test_fused_head_loss_matches_forward_logits(B, T):
    """nll_sum (on CPU: the chunked head + loss with its own gradient) gives the loss and every
    gradient of cross_entropy over forward's logits, with ignored targets and a padded vocab."""
    cfg = tiny(vocab_size=300, sequence_len=256)
    assert cfg.padded_vocab > cfg.vocab_size
    params = random_params(cfg, scale=0.2)
    tokens = jax.random.randint(jax.random.PRNGKey(3), (B, T + 1), 0, cfg.vocab_size)
    x, y = tokens[:, :-1], tokens[:, 1:].at[0, :7].set(-1)
    ref, ref_grads = jax.value_and_grad(lambda p: loss_fn(p, cfg, x, y, "sum"))(params)
    out, grads = jax.jit(jax.value_and_grad(lambda p: nll_sum(p, cfg, x, y)))(params)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    np.testing.assert_allclose(nll_sum(params, cfg, x, y), ref, rtol=1e-5)  # the no-grad path
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        r = ref_grads
        for k in path:
            r = r[k.key if hasattr(k, "key") else k.idx]
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5 * float(jnp.abs(r).max()) + 1e-7,
                                   err_msg=jax.tree_util.keystr(path))
    assert float(jnp.abs(grads["lm_head"][:, cfg.vocab_size:]).max()) == 0.0


def test_bf16_compute_is_close_to_fp32():
    cfg = tiny()
    params = random_params(cfg, scale=0.2)
    idx = jax.random.randint(jax.random.PRNGKey(5), (2, 64), 0, cfg.vocab_size)
    ref, _ = fwd(params, cfg, idx)
    out, _ = fwd(params, cfg.replace(compute_dtype="bfloat16", embed_dtype="bfloat16"),
                 idx)
    assert out.dtype == jnp.float32
    assert float(jnp.mean(jnp.abs(out - ref))) < 0.1 * float(jnp.mean(jnp.abs(ref)))


def test_tiny_model_overfits_a_fixed_batch():
    cfg = GPTConfig(n_layer=2, n_embd=64, n_head=2, n_kv_head=2, head_dim=32, vocab_size=128,
                    sequence_len=32)
    params = init_params(cfg, jax.random.PRNGKey(0))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (4, cfg.sequence_len + 1), 0, cfg.vocab_size)
    x, y = tokens[:, :-1], tokens[:, 1:]
    opt = optax.adamw(3e-3, b1=0.9, b2=0.95, weight_decay=0.0)
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(params, cfg, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(300):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    assert losses[0] > 4.0, losses[0]  # ~ln(128) at init
    assert min(losses[-10:]) < 0.1, losses[-10:]


def test_padded_chunks_with_n_valid_match_full_forward():
    """Chunks padded to a bucket size (garbage after n_valid) give the same logits and cache
    position as unpadded ones: what lets the engine compile once per bucket."""
    cfg = tiny()
    params = random_params(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(6), (1, 60), 0, cfg.vocab_size)
    full, _ = fwd(params, cfg, idx)
    step = jax.jit(forward, static_argnums=1)
    cache = init_cache(cfg, batch=1, max_len=128)
    start, pieces = 0, []
    for size in (23, 1, 36):
        chunk = jnp.full((1, 40), 7, jnp.int32).at[:, :size].set(idx[:, start:start + size])
        logits, cache = step(params, cfg, chunk, cache, jnp.int32(size))
        pieces.append(logits[:, :size])
        start += size
    assert int(cache.pos) == 60
    np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, atol=1e-5, rtol=1e-5)
