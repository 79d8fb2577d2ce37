"""nanocode/kernels.py against plain jnp: `dense` is x @ w; `fused_head_nll` (the training loss,
its own custom VJP) and `head_nll_per_token` (the evals' and DPO's per-token nats, recomputed
chunks) give the same nats and the same gradients as log_softmax cross-entropy over the full
softcapped logits, with ignored (-1) targets, over one chunk or several, and under shard_map with
`reduce_axes`. Small random inputs; the softcap is reached (logits about twice its size)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from nanocode.kernels import dense, fused_head_nll, head_nll_per_token

SOFTCAP = 15.0
C, V = 16, 37


def reference_nats(x, w, targets, softcap=SOFTCAP):
    """-log_softmax(softcap * tanh(x @ w / softcap))[target] per position, 0 where target == -1.
    x (B, T, C), w (C, V), targets (B, T) -> (B, T), all in fp32."""
    logits = jnp.einsum("btc,cv->btv", x.astype(jnp.float32), w.astype(jnp.float32))
    logp = jax.nn.log_softmax(softcap * jnp.tanh(logits / softcap), axis=-1)  # (B, T, V)
    valid = targets != -1
    picked = jnp.take_along_axis(logp, jnp.where(valid, targets, 0)[..., None], axis=-1)[..., 0]
    return jnp.where(valid, -picked, 0.0)


def inputs(B, T, seed=0, ignored=0.25):
    """x (B, T, C), w (C, V) with logits of std ~ 2 * SOFTCAP, targets (B, T) with a share -1.
    Drawn with numpy: no program to compile."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, C), np.float32)
    w = rng.standard_normal((C, V), np.float32) * np.float32(2 * SOFTCAP / np.sqrt(C))
    targets = np.where(rng.random((B, T)) < ignored, -1, rng.integers(0, V, (B, T))).astype(np.int32)
    return jnp.asarray(x), jnp.asarray(w), jnp.asarray(targets)


def close(got, want, rtol=1e-4):
    """Equal to rtol of the largest magnitude: fp32 sums in another order differ by that much."""
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.abs(want).max()))


# (B, T): one chunk; two chunks (B * T over a chunk's 512 rows: T halved); an odd T, which cannot
# be halved (one chunk however many rows)
SHAPES = [(2, 8), (4, 256), (80, 7)]


def test_dense_is_the_plain_matmul_in_x_dtype():
    x, w, _ = inputs(2, 5)
    close(jax.jit(dense)(x, w), np.einsum("btc,cv->btv", x, w), 1e-5)
    assert jax.eval_shape(dense, x[0], w).shape == (5, V)  # any number of leading axes
    low = jax.eval_shape(dense, x.astype(jnp.bfloat16), w)  # w is cast to x's dtype
    assert low.dtype == jnp.bfloat16 and low.shape == (2, 5, V)


@pytest.mark.parametrize("B,T", SHAPES)
def test_fused_head_nll_sum_and_gradients_match_the_reference(B, T):
    x, w, targets = inputs(B, T)
    scale = 2.5  # an upstream cotangent other than 1 reaches both gradients
    want, want_grads = jax.jit(jax.value_and_grad(
        lambda x, w: scale * reference_nats(x, w, targets).sum(), argnums=(0, 1)))(x, w)
    got, grads = jax.jit(jax.value_and_grad(
        lambda x, w: scale * fused_head_nll(x, w, targets, SOFTCAP), argnums=(0, 1)))(x, w)
    close(got, want, 1e-5)
    close(jax.jit(fused_head_nll, static_argnums=3)(x, w, targets, SOFTCAP), want / scale, 1e-5)
    for g, r in zip(grads, want_grads):
        close(g, r)


@pytest.mark.parametrize("B,T", SHAPES)
def test_head_nll_per_token_and_its_weighted_gradient_match_the_reference(B, T):
    x, w, targets = inputs(B, T, seed=1)
    close(jax.jit(head_nll_per_token, static_argnums=3)(x, w, targets, SOFTCAP),
          jax.jit(reference_nats)(x, w, targets), 1e-5)
    weights = jnp.asarray(np.random.default_rng(2).standard_normal((B, T), np.float32))  # any
    want = jax.jit(jax.grad(lambda x, w: (weights * reference_nats(x, w, targets)).sum(),
                            argnums=(0, 1)))(x, w)
    got = jax.jit(jax.grad(lambda x, w: (weights * head_nll_per_token(x, w, targets, SOFTCAP)).sum(),
                           argnums=(0, 1)))(x, w)
    for g, r in zip(got, want):
        close(g, r)


def test_every_target_ignored_is_zero_loss_and_zero_gradient():
    x, w, targets = inputs(2, 8, ignored=1.0)
    assert (targets == -1).all()
    loss, grads = jax.jit(jax.value_and_grad(lambda x, w: fused_head_nll(x, w, targets, SOFTCAP),
                                             argnums=(0, 1)))(x, w)
    assert float(loss) == 0.0 and all(not np.any(g) for g in grads)
    assert not np.any(jax.jit(head_nll_per_token, static_argnums=3)(x, w, targets, SOFTCAP))


def test_gradients_come_back_in_each_inputs_dtype():
    x, w, targets = inputs(2, 8)
    dx, dw = jax.jit(jax.grad(lambda x, w: fused_head_nll(x, w, targets, SOFTCAP), argnums=(0, 1)))(
        x.astype(jnp.bfloat16), w)
    assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.float32
    want_dw = jax.jit(jax.grad(lambda w: reference_nats(x, w, targets).sum()))(w)
    close(dw, want_dw, 5e-2)  # bf16 matmuls: a coarse match, the same gradient


def test_under_shard_map_with_reduce_axes_the_weight_gradient_is_summed_once():
    """As gpt.nll_sum runs it: per device over the batch axis, the loss psummed, the weight
    gradient psummed by the kernel's backward pass (on however many devices this process has)."""
    x, w, targets = inputs(len(jax.devices()) * 2, 8)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    local = lambda x, w, t: jax.lax.psum(fused_head_nll(x, w, t, SOFTCAP, ("data",)), "data")  # noqa: E731
    sharded = jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P(), P("data")), out_specs=P())
    got, grads = jax.jit(jax.value_and_grad(lambda x, w: sharded(x, w, targets), argnums=(0, 1)))(x, w)
    want, want_grads = jax.jit(jax.value_and_grad(lambda x, w: reference_nats(x, w, targets).sum(),
                                                  argnums=(0, 1)))(x, w)
    close(got, want, 1e-5)
    for g, r in zip(grads, want_grads):
        close(g, r)
