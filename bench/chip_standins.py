"""A chip's training code on a CPU, for bench/memory.py's analysis (and bench/collectives.py's, which
builds its step there): two patches, each a context manager restored on exit.

Accelerator code paths: gpt.py and optim.py choose by `jax.default_backend()`; while the
optimizer is built and the step traced, `accelerator_backend(platform)` makes it answer the chip's
platform ("tpu" or "gpu"), so the program analysed is the chip's (XLA still compiles for the CPU).

Attention: the CPU cannot compile the splash or cuDNN kernels, and its einsum path keeps the
(B, H, T, S) probabilities for the backward. So `flash_standin_attention()` patches
`nanocode.gpt.attend` with a custom_vjp of attend's signature whose cheap forward saves exactly
what a fused flash kernel keeps for its backward (q, k, v, the output, the per-row logsumexp in
fp32), made real buffers by an optimization_barrier; a kernel's own scratch lives in on-chip
memory, not HBM.

jax (and nanocode.gpt, which imports it) is imported inside the functions: bench/memory.py imports
this module before it sets XLA_FLAGS (its fake device count), which must happen before jax starts.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def accelerator_backend(platform: str):
    """`jax.default_backend()` answers `platform` inside: gpt.py / optim.py take the code paths the
    chip would (see the module docstring). Restored on exit."""
    import jax
    saved = jax.default_backend
    jax.default_backend = lambda: platform
    try:
        yield
    finally:
        jax.default_backend = saved


def make_flash_standin():
    import jax
    import jax.numpy as jnp

    f32 = jnp.float32

    def forward(q, k, v):
        G = q.shape[2] // k.shape[2]
        out = q + jnp.repeat(k + v, G, axis=2)  # (B, T, H, D): cheap, depends on q, k and v
        lse = jnp.max(q.astype(f32), axis=-1).swapaxes(1, 2)  # (B, H, T) fp32, the per-row logsumexp
        # What a flash kernel's backward reads from HBM, as real buffers (see the module docstring).
        return jax.lax.optimization_barrier((q, k, v, out, lse))

    @jax.custom_vjp
    def flash_standin(q, k, v):
        """Flash-attention-shaped stand-in: q (B, T, H, D), k, v (B, T, K, D) -> (B, T, H, D)."""
        return forward(q, k, v)[3]

    def fwd(q, k, v):
        res = forward(q, k, v)
        return res[3], res

    def bwd(res, d_out):
        q, k, v, out, lse = res
        B, T, H, D = q.shape
        K = k.shape[2]
        delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1)  # (B, T, H), as flash's
        s = d_out.astype(f32) * (delta + lse.swapaxes(1, 2))[..., None]  # (B, T, H, D)
        dkv = s.reshape(B, T, K, H // K, D).sum(axis=3)  # (B, T, K, D)
        return ((s + q).astype(q.dtype), (dkv + k).astype(k.dtype), (dkv * v).astype(v.dtype))

    flash_standin.defvjp(fwd, bwd)
    return flash_standin


@contextlib.contextmanager
def flash_standin_attention():
    """nanocode.gpt.attend -> flash_standin for training's no-cache calls (cached calls, which no
    train step makes, keep the real attention). Restored on exit."""
    import nanocode.gpt as gpt
    real, standin = gpt.attend, make_flash_standin()

    def attend(q, k, v, *, window, impl, q_pos=None, valid_len=None, head_major=False):
        if q_pos is not None or head_major:
            return real(q, k, v, window=window, impl="xla", q_pos=q_pos, valid_len=valid_len,
                        head_major=head_major)
        return standin(q, k, v)

    gpt.attend = attend
    try:
        yield
    finally:
        gpt.attend = real
