"""The model (nanocode/gpt.py): the KV-cache path equals the full forward, the loss and its
gradients, bf16 compute, and that a tiny model can learn. Parameter arithmetic is
tests/test_config.py's, the attention implementations tests/test_attention.py's."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nanocode.config import GPTConfig
from nanocode.gpt import cross_entropy, forward, init_cache, init_params, loss_fn, nll_sum
from tiny_models import random_params, tiny

fwd = jax.jit(forward, static_argnums=1)


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


def test_rmsnorm_scale_lever_agrees_within_bf16_rounding(monkeypatch):
    """gpt.NORM_SCALE_F32 = False (statistics in fp32, the product in bf16; a chip lever) gives
    rmsnorm's fp32-product result within bf16 rounding, values and gradients; in fp32 the same."""
    import nanocode.gpt as gpt
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 128)) * 3.0

    def run(scale_f32, dtype):
        monkeypatch.setattr(gpt, "NORM_SCALE_F32", scale_f32)
        f = lambda x: gpt.rmsnorm(x.astype(dtype))  # noqa: E731
        y, vjp = jax.vjp(f, x)
        return y.astype(jnp.float32), vjp(jnp.cos(y).astype(dtype))[0]
    for dtype, tol in ((jnp.float32, 1e-6), (jnp.bfloat16, 2e-2)):
        (y1, g1), (y2, g2) = run(True, dtype), run(False, dtype)
        np.testing.assert_allclose(y2, y1, atol=tol, rtol=tol)
        np.testing.assert_allclose(g2, g1, atol=tol * 4, rtol=tol * 4)
        assert float(jnp.max(jnp.abs(y1))) > 1.0  # normalised values, not zeros


def test_relu_squared_lever_is_exact(monkeypatch):
    """gpt.RELU2_VJP (relu(z)^2 with its own gradient, which keeps no mask for the backward) gives
    autodiff's values and gradients exactly, in fp32 and bf16, zeros and negatives included."""
    import nanocode.gpt as gpt
    for dtype in (jnp.float32, jnp.bfloat16):
        z = (jax.random.normal(jax.random.PRNGKey(0), (4, 64, 96)) * 3).astype(dtype)
        z = z.at[0, 0, :8].set(0)
        g = jax.random.normal(jax.random.PRNGKey(1), z.shape).astype(dtype)
        out = {}
        for lever in (False, True):
            monkeypatch.setattr(gpt, "RELU2_VJP", lever)
            y, vjp = jax.vjp(gpt.relu_squared, z)
            out[lever] = (y, vjp(g)[0])
        for a, b in zip(out[False], out[True]):
            np.testing.assert_array_equal(np.asarray(b, np.float32), np.asarray(a, np.float32))
        assert float(jnp.min(out[True][1])) < 0 < float(jnp.max(out[True][1]))  # gradients of both signs


def test_rotary_matmul_lever_is_exact(monkeypatch):
    """gpt.ROTARY_MATMUL (the half swap as a signed-permutation matmul; the TPU's default) gives
    the roll's values and gradients exactly, in fp32 and bf16."""
    import nanocode.gpt as gpt
    positions = jnp.arange(16) + 5
    for dtype in (jnp.float32, jnp.bfloat16):
        x = (jax.random.normal(jax.random.PRNGKey(0), (2, 16, 3, 64)) * 3).astype(dtype)
        out = {}
        for lever in (False, True):
            monkeypatch.setattr(gpt, "ROTARY_MATMUL", {jax.default_backend(): lever})
            y, vjp = jax.vjp(lambda x: gpt.rotary(x, positions, 10000.0), x)  # noqa: B023
            out[lever] = (y, vjp(jnp.cos(y))[0])
        for a, b in zip(out[False], out[True]):
            np.testing.assert_array_equal(np.asarray(b, np.float32), np.asarray(a, np.float32))
        assert not np.allclose(np.asarray(out[True][0], np.float32), np.asarray(x, np.float32))  # it rotated
