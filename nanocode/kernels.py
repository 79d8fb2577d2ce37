"""The head + loss kernels of nanocode/gpt.py, written for XLA:CPU speed, and `dense`, the matmul
form every layer uses. Pure functions, jit-friendly, the same math on every backend.

- `dense`: x (..., in) @ w (in, out) as one 2-D matmul (XLA:CPU's backward of a 3-D dot_general is
  slower than of the same product flattened).
- `fused_head_nll`: sum of next-token nats of softcap(x @ w) with its own gradient (custom VJP),
  over time chunks: never the (B, T, V) logits, one pass over each chunk's logits instead of
  several through memory. Training's loss (`gpt.nll_sum`).
- `head_nll_per_token`: the same nats per position, each chunk recomputed in the backward pass
  (jax.checkpoint), so it differentiates with any weight per row. Evals and DPO (`gpt.token_nll`).

Both losses run on one device's rows; `gpt.nll_sum` and `gpt.token_nll` put them under
`shard_map` when a mesh splits the batch (left to XLA, the weight gradient summed over the batch
would be all-reduced chunk by chunk). Shapes: B batch, T tokens, C model width, V vocab; ct the
tokens per sequence in one chunk.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def dense(x: jax.Array, w: jax.Array) -> jax.Array:
    """x (..., in) @ w (in, out) as one 2-D matmul: XLA:CPU's backward of a 3-D dot_general is
    much slower than of the same product flattened to (B*T, in)."""
    return (x.reshape(-1, x.shape[-1]) @ w.astype(x.dtype)).reshape(*x.shape[:-1], w.shape[-1])


# Rows (batch rows x tokens) in one chunk of the head + loss, per backend: 512 keeps a chunk's
# (rows, V) fp32 logits in XLA:CPU's caches; an accelerator pays a loop iteration per chunk.
HEAD_CHUNK_ROWS = {"cpu": 512, "gpu": 512, "tpu": 512}


def _time_chunks(B: int, T: int) -> int:
    """Tokens per sequence in one chunk of the head + loss: T halved until B x chunk <= the
    backend's HEAD_CHUNK_ROWS."""
    rows = HEAD_CHUNK_ROWS.get(jax.default_backend(), 512)
    ct = T
    while ct % 2 == 0 and B * ct > rows:
        ct //= 2
    return ct


def _chunked(x: jax.Array, ct: int) -> jax.Array:
    """(B, T, ...) -> (T // ct, B, ct, ...): chunks along time, so a batch sharding survives."""
    return x.reshape(x.shape[0], x.shape[1] // ct, ct, *x.shape[2:]).swapaxes(0, 1)


def _chunk_nats(xc, w, tc, softcap):
    """One chunk's nats: xc (B, ct, C), tc (B, ct) -> (B, ct), 0 where tc == -1."""
    z = softcap * jnp.tanh(dense(xc, w).astype(jnp.float32) / softcap)  # (B, ct, V)
    valid = tc != -1
    picked = jnp.take_along_axis(z, jnp.where(valid, tc, 0)[..., None], axis=-1)[..., 0]
    return jnp.where(valid, jax.nn.logsumexp(z, axis=-1) - picked, 0.0)


def head_nll_per_token(x: jax.Array, w: jax.Array, targets: jax.Array, softcap: float) -> jax.Array:
    """Next-token nats of softcap(x @ w) per position, 0 where targets == -1, over time chunks that
    the backward pass recomputes (jax.checkpoint): one extra head matmul, never the logits.
    x (B, T, C), w (C, V), targets (B, T) -> (B, T)."""
    ct = _time_chunks(*targets.shape)
    chunk = jax.checkpoint(lambda xc, tc: _chunk_nats(xc, w, tc, softcap))
    nats = jax.lax.map(lambda c: chunk(*c), (_chunked(x, ct), _chunked(targets, ct)))  # (T/ct, B, ct)
    return nats.swapaxes(0, 1).reshape(targets.shape)


def _chunk_nll(xc, w, tc, softcap):
    """One chunk: xc (B, ct, C), tc (B, ct) -> (sum of nats, d nats / d logits (B, ct, V))."""
    t = jnp.tanh(dense(xc, w).astype(jnp.float32) / softcap)  # (B, ct, V)
    z = softcap * t
    logz = jax.nn.logsumexp(z, axis=-1)  # (B, ct)
    valid = tc != -1
    target = jnp.where(valid, tc, 0)
    picked = jnp.take_along_axis(z, target[..., None], axis=-1)[..., 0]
    dz = jnp.exp(z - logz[..., None]) - jax.nn.one_hot(target, z.shape[-1], dtype=z.dtype)
    return (jnp.where(valid, logz - picked, 0.0).sum(),
            jnp.where(valid[..., None], dz * (1 - t * t), 0.0))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def fused_head_nll(x: jax.Array, w: jax.Array, targets: jax.Array, softcap: float,
                   reduce_axes: tuple[str, ...] = ()) -> jax.Array:
    """sum(cross_entropy(softcap(x @ w), targets)) without the (B, T, V) logits: a scan over time
    chunks of ~512 tokens computes each chunk's logits, loss and, under grad, its logit gradient and
    the two gradient matmuls while the chunk is still in cache. The trade: 3 small matmuls per chunk
    instead of 3 big ones, for one pass over the logits instead of ~6 through memory. The
    gradient matmuls run in x's dtype (bf16 on accelerators) with fp32 accumulation. Under a mesh
    it must run per device (`gpt.nll_sum` does that): left to XLA, the weight gradient summed over
    the batch would be all-reduced chunk by chunk; there `reduce_axes` names the mesh axes the rows
    are split over, and the weight gradient is summed over them once, in the backward pass.
    x (B, T, C), w (C, V), targets (B, T) with -1 ignored."""
    ct = _time_chunks(*targets.shape)

    def body(total, chunk):
        xc, tc = chunk
        return total + _chunk_nll(xc, w, tc, softcap)[0], None  # XLA drops the unused gradient
    zero = _zeros_like(x, ())
    return jax.lax.scan(body, zero, (_chunked(x, ct), _chunked(targets, ct)))[0]


def _zeros_like(ref, shape):
    """fp32 zeros of `shape` that vary over the manual mesh axes `ref` varies over: under
    shard_map a scan carry must have its body's type (zeros summed with per-device values).
    lax.full_like carries the type over, so no field of jax's abstract values is read."""
    return jax.lax.full_like(ref, 0, jnp.float32, shape)


def _fused_head_nll_fwd(x, w, targets, softcap, reduce_axes):
    ct = _time_chunks(*targets.shape)

    def body(carry, chunk):
        total, dw = carry
        xc, tc = chunk
        nll, dlogits = _chunk_nll(xc, w, tc, softcap)  # (B, ct, V) fp32
        dlogits = dlogits.reshape(-1, dlogits.shape[-1]).astype(x.dtype)  # (B * ct, V): 2-D, see `dense`
        dw = dw + jnp.dot(xc.reshape(-1, xc.shape[-1]).T, dlogits, preferred_element_type=f32)
        dxc = jnp.dot(dlogits, w_t, preferred_element_type=f32)  # (B * ct, C)
        return (total + nll, dw), dxc.reshape(*xc.shape[:2], -1)
    f32 = jnp.float32
    w_t = w.astype(x.dtype).T  # (V, C), transposed once rather than in every chunk
    zero = (_zeros_like(x, ()), _zeros_like(x, w.shape))
    (total, dw), dx = jax.lax.scan(body, zero, (_chunked(x, ct), _chunked(targets, ct)))
    dx = dx.swapaxes(0, 1).reshape(x.shape)  # (B, T, C)
    return total, (dx.astype(x.dtype), dw.astype(w.dtype))


def _fused_head_nll_bwd(softcap, reduce_axes, grads, g):
    dx, dw = grads
    dw_g = (g * dw).astype(dw.dtype)
    if reduce_axes:  # this device's rows' share: summed over the devices once
        dw_g = jax.lax.psum(dw_g, reduce_axes)
    return (g * dx).astype(dx.dtype), dw_g, None


fused_head_nll.defvjp(_fused_head_nll_fwd, _fused_head_nll_bwd)
