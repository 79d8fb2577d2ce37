"""Every attention implementation that runs on CPU (nanocode/attention.py): they agree with each
other, respect the sliding window, keep the model causal, and the einsum implementation's
hand-written backward equals autodiff."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanocode.attention import attend, resolve_attn_impl
from nanocode.gpt import forward, loss_fn
from tiny_models import random_params, tiny

CPU_IMPLS = ["xla", "einsum", "splash"]  # splash runs in Pallas interpret mode off-TPU


fwd = jax.jit(forward, static_argnums=1)


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


def test_splash_mha_lever_matches_einsum_with_gradients(monkeypatch):
    """attention.SPLASH_MHA (the multi-head kernel when there is no GQA, a chip lever): the same
    outputs and q/k/v gradients as the einsum impl, causal and windowed (Pallas interpret mode)."""
    import nanocode.attention as attention
    monkeypatch.setattr(attention, "SPLASH_MHA", True)
    B, T, H, D = 2, 128, 2, 16
    q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (B, T, H, D)) for i in range(3))
    for window in (T, 32):
        def loss(impl, q, k, v):
            return jnp.sum(jnp.sin(attend(q, k, v, window=window, impl=impl)))
        ref = jax.value_and_grad(loss, argnums=(1, 2, 3))("einsum", q, k, v)
        got = jax.value_and_grad(loss, argnums=(1, 2, 3))("splash", q, k, v)
        for r, g in zip(jax.tree.leaves(ref), jax.tree.leaves(got)):
            np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4)


def test_head_major_lever_matches_the_default_layout_with_gradients(monkeypatch):
    """gpt.HEAD_MAJOR (q, k, v head-major from their projections into splash, a chip lever): the
    same loss and parameter gradients as the (B, T, H, D) layout, with GQA, value embeddings and
    windows (Pallas interpret mode)."""
    import nanocode.gpt as gpt
    cfg = tiny(attn_impl="splash")
    assert cfg.n_kv_head < cfg.n_head and cfg.sequence_len % 128 == 0
    params = random_params(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(5), (2, cfg.sequence_len + 1), 0, cfg.vocab_size)

    def value_and_grads(head_major):
        monkeypatch.setattr(gpt, "HEAD_MAJOR", {"cpu": head_major})
        return jax.jit(jax.value_and_grad(loss_fn), static_argnums=1)(params, cfg, idx[:, :-1], idx[:, 1:])
    ref, got = value_and_grads(False), value_and_grads(True)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    for (path, r), g in zip(jax.tree_util.tree_leaves_with_path(ref[1]), jax.tree.leaves(got[1])):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * float(jnp.abs(r).max()) + 1e-8,
                                   err_msg=jax.tree_util.keystr(path))
