"""Attention for nanocode/gpt.py: causal sliding-window attention with GQA in four
implementations behind one call (`attend`), and the per-device plumbing the fused kernels need
under a mesh (`batch_axes`, `_per_device`).

- einsum: written out by hand, block-causal (CPU: training and, with a KV cache, decoding).
- xla: jax.nn.dot_product_attention's XLA path (GPU fallback, and every impl's cached path).
- cudnn: cuDNN flash attention (GPU, 16-bit compute).
- splash: TPU Pallas splash attention (interpreted elsewhere, for tests); its kernels are imported
  when first built (~0.3 s on top of jax), so the other implementations never load Pallas.
Shapes: B batch, T query tokens, S key positions, H query heads, K kv heads, G = H // K, D head dim.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from nanocode.config import GPTConfig


def attention_mask(q_pos: jax.Array, kv_len: int, window: int, valid_len=None) -> jax.Array:
    """(T, S) bool: query at absolute position p sees keys p - window .. p (and < valid_len)."""
    k_pos = jnp.arange(kv_len)[None, :]  # (1, S)
    q_pos = q_pos[:, None]  # (T, 1)
    mask = (k_pos <= q_pos) & (q_pos - k_pos <= window)
    if valid_len is not None:
        mask &= k_pos < valid_len
    return mask


def _softmax_attend(q, k, v, mask, k_transposed=False):
    """q (B, K, G, T, D); k, v (B, K, S, D) (k (B, K, D, S) if k_transposed); mask (T, S) ->
    (B, K, G, T, D). Batch axes lead, so both products are plain batched matmuls with no layout
    shuffles (XLA:CPU's fast path)."""
    probs = _attention_probs(q, k, mask, k_transposed).astype(v.dtype)
    return jnp.einsum("bkgts,bksd->bkgtd", probs, v)


def _attention_probs(q, k, mask, k_transposed=False):
    """softmax(q k^T / sqrt(D)) over visible keys, fp32: (B, K, G, T, S)."""
    spec = "bkgtd,bkds->bkgts" if k_transposed else "bkgtd,bksd->bkgts"
    scores = jnp.einsum(spec, q, k, preferred_element_type=jnp.float32)
    scores = jnp.where(mask, scores / math.sqrt(q.shape[-1]), -1e30)
    return jax.nn.softmax(scores, axis=-1)


@jax.custom_vjp
def _attend_chunk(q, k, v, mask):
    """`_softmax_attend` (k not transposed) with a hand-written backward, for training's chunks:
    it saves the probabilities and the output and takes the softmax gradient's row term as
    rowsum(dO * O) over D (FlashAttention's delta) instead of autodiff's rowsum(dP * P) over the
    keys, which saves a little of the step on CPU. Same arguments and result."""
    return _softmax_attend(q, k, v, mask)


def _attend_chunk_fwd(q, k, v, mask):
    probs = _attention_probs(q, k, mask)  # (B, K, G, T, S) fp32
    out = jnp.einsum("bkgts,bksd->bkgtd", probs.astype(v.dtype), v)
    return out, (q, k, v, probs, out)


def _attend_chunk_bwd(res, d_out):
    q, k, v, probs, out = res
    f32 = jnp.float32
    dv = jnp.einsum("bkgts,bkgtd->bksd", probs.astype(d_out.dtype), d_out, preferred_element_type=f32)
    d_probs = jnp.einsum("bkgtd,bksd->bkgts", d_out, v, preferred_element_type=f32)
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1, keepdims=True)  # (B, K, G, T, 1)
    d_scores = (probs * (d_probs - delta) / math.sqrt(q.shape[-1])).astype(q.dtype)
    dq = jnp.einsum("bkgts,bksd->bkgtd", d_scores, k, preferred_element_type=f32)
    dk = jnp.einsum("bkgts,bkgtd->bksd", d_scores, q, preferred_element_type=f32)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_attend_chunk.defvjp(_attend_chunk_fwd, _attend_chunk_bwd)


def _attend_einsum(q, k, v, window: int, q_pos=None, valid_len=None, chunk: int = 128,
                   head_major: bool = False):
    """Attention written out by hand, block-causal: without a cache, queries go in chunks of 128
    and each chunk multiplies only the keys it can see (positions s - window .. e), so a causal
    T=512 pass does 10/16 of the full product and a window of 128 about 2/T of it; on CPU that beats
    jax.nn.dot_product_attention, which computes the whole product.
    q (B, T, H, D); k, v (B, S, K, D), or in the KV cache's layout when head_major: k (B, K, D, S),
    v (B, K, S, D) (transposing a 512-slot cache per layer per token cost more than the decode
    math). With a cache: one chunk, absolute q_pos, keys < valid_len."""
    B, T, H, D = q.shape
    K = k.shape[1 if head_major else 2]
    q = q.reshape(B, T, K, H // K, D).transpose(0, 2, 3, 1, 4)  # (B, K, G, T, D)
    if not head_major:
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # (B, K, S, D)
    if q_pos is not None:
        mask = attention_mask(q_pos, v.shape[2], window, valid_len)
        out = _softmax_attend(q, k, v, mask, k_transposed=head_major)
    else:
        outs = []
        for s in range(0, T, chunk):
            e, lo = min(s + chunk, T), max(0, s - window)
            mask = attention_mask(jnp.arange(s, e) - lo, e - lo, window)
            outs.append(_attend_chunk(q[:, :, :, s:e], k[:, :, lo:e], v[:, :, lo:e], mask))
        out = jnp.concatenate(outs, axis=3)
    return out.transpose(0, 3, 1, 2, 4).reshape(B, T, H, D)


# The splash kernel's block sizes (each clipped to the sequence), forward and fused backward.
SPLASH_BLOCKS = dict(block_q=512, block_kv=512, block_kv_compute=512, block_q_dkv=512, block_kv_dkv=512,
                     block_kv_dkv_compute=512)


# Without GQA (as many kv heads as heads): one multi-head kernel per batch row (True) or the MQA
# kernel per (kv head, batch row) with a group of one (False). A lever of bench/accelerator_check.py.
SPLASH_MHA = False


def _splash_kernel(seq_len: int, window: int, n_group: int, interpret: bool, mha: bool = False):
    """A splash-attention kernel with SPLASH_BLOCKS: MQA for one (kv head, batch row) with
    `n_group` query heads, or (`mha`) MHA for one batch row with `n_group` heads."""
    return _splash_kernel_cached(seq_len, window, n_group, interpret, mha,
                                 tuple(sorted(SPLASH_BLOCKS.items())))


@functools.lru_cache(maxsize=64)
def _splash_kernel_cached(seq_len: int, window: int, n_group: int, interpret: bool, mha: bool,
                          blocks: tuple):
    """Built once per shape, window and blocks; the fused backward kernel."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    shape = (seq_len, seq_len)
    one = sm.CausalMask(shape) if window >= seq_len else sm.LocalMask(shape, (window, 0), 0)
    mask = sm.MultiHeadMask([one] * n_group)
    sizes = sk.BlockSizes(**{k: min(b, seq_len) for k, b in blocks}, use_fused_bwd_kernel=True)
    with jax.ensure_compile_time_eval():  # the mask tables are constants, not traced values
        make = sk.make_splash_mha if mha else sk.make_splash_mqa
        return make(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret)


def batch_axes(batch: int) -> tuple[str, ...]:
    """The axes of the mesh in context (`jax.set_mesh`, as train/loop.py sets it) that a batch of
    `batch` rows is split over: every axis whose size still divides it, in mesh order (the training
    batch's ("data", "fsdp")); () without a mesh. For the code that runs per device under
    `shard_map`: Mosaic kernels, which XLA cannot partition, and the chunked head + loss."""
    mesh = jax.sharding.get_abstract_mesh()
    axes, n = [], 1
    for name in () if mesh.empty else mesh.axis_names:
        if batch % (n * mesh.shape[name]) == 0:
            axes.append(name)
            n *= mesh.shape[name]
    return tuple(a for a in axes if mesh.shape[a] > 1)


def _per_device(kernel, q, k, v):
    """kernel(q, k, v) on each device's rows of the batch (shard_map over `batch_axes`, manual over
    every mesh axis), or once without a mesh. For the fused attention kernels: XLA cannot split a
    Mosaic call (splash), and cuDNN's own partitioning rule is a Python callback that jax.export
    cannot serialise, so neither may be left to the partitioner. q (B, T, H, D); k, v (B, T, K, D)."""
    axes = batch_axes(q.shape[0])
    if not axes:
        return kernel(q, k, v)
    spec = P(axes)
    return jax.shard_map(kernel, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)(q, k, v)


def _splash_head_major(q, k, v, window):
    """TPU Pallas splash attention (interpreted elsewhere, for tests). No-cache path only: the
    Mosaic kernel where the program is lowered for TPU (also by jax.export from a CPU), the Pallas
    interpreter elsewhere. q (b, H, T, D); k, v (b, K, T, D): one device's rows -> (b, H, T, D)."""
    b, H, T, D = q.shape
    K = k.shape[1]
    q = q / math.sqrt(D)
    if SPLASH_MHA and K == H:
        return jax.lax.platform_dependent(  # (b, H, T, D)
            q, k, v, tpu=jax.vmap(_splash_kernel(T, window, H, False, mha=True)),
            default=jax.vmap(_splash_kernel(T, window, H, True, mha=True)))
    out = jax.lax.platform_dependent(  # (b, K, G, T, D)
        q.reshape(b, K, H // K, T, D), k, v, tpu=jax.vmap(jax.vmap(_splash_kernel(T, window, H // K, False))),
        default=jax.vmap(jax.vmap(_splash_kernel(T, window, H // K, True))))
    return out.reshape(b, H, T, D)


def _attend_splash(q, k, v, window):
    """`_splash_head_major` for q (b, T, H, D), k, v (b, T, K, D) -> (b, T, H, D)."""
    def swap(x):
        return x.transpose(0, 2, 1, 3)
    return swap(_splash_head_major(swap(q), swap(k), swap(v), window))


def attend_head_major(q, k, v, *, window: int):
    """Training's causal (sliding-window) splash attention on head-major tensors, which the
    projections can produce directly (gpt.HEAD_MAJOR): q (B, H, T, D); k, v (B, K, T, D) -> (B, H, T, D).
    T must be a multiple of 128 (splash's lanes)."""
    return _per_device(functools.partial(_splash_head_major, window=window), q, k, v)


def resolve_attn_impl(cfg: GPTConfig) -> str:
    """`auto`: splash on TPU, cuDNN on GPU for 16-bit compute, the block-causal einsum on CPU."""
    if cfg.attn_impl != "auto":
        return cfg.attn_impl
    backend = jax.default_backend()
    if backend == "tpu":
        return "splash"
    if backend == "gpu" and cfg.compute_dtype in ("bfloat16", "float16"):
        return "cudnn"
    return "xla" if backend == "gpu" else "einsum"


def attend(q, k, v, *, window: int, impl: str, q_pos=None, valid_len=None, head_major=False):
    """Causal (sliding-window) attention with GQA. q (B, T, H, D); k, v (B, S, K, D).
    Without a cache (q_pos None) S == T and every impl runs; with a cache, queries sit at absolute
    positions q_pos and only keys < valid_len exist, which the fused kernels (splash, cuDNN) do not
    express, so they fall back to XLA there (as splash does for T not a multiple of its 128 lanes).
    head_major: k (B, K, D, S) and v (B, K, S, D), the KV cache's layout."""
    cached = q_pos is not None
    if impl == "splash" and q.shape[1] % 128:
        impl = "xla"
    if impl == "einsum":
        return _attend_einsum(q, k, v, window, q_pos, valid_len, head_major=head_major)
    if head_major:
        k, v = k.transpose(0, 3, 1, 2), v.transpose(0, 2, 1, 3)  # (B, S, K, D)
    T, S, D = q.shape[1], k.shape[1], q.shape[-1]
    if cached:  # xla, and the fused kernels' fallback
        mask = attention_mask(q_pos, S, window, valid_len)
        return jax.nn.dot_product_attention(q, k, v, mask=mask[None, None], scale=1 / math.sqrt(D),
                                            implementation="xla")
    if impl == "splash":
        return _per_device(functools.partial(_attend_splash, window=window), q, k, v)
    if impl in ("xla", "cudnn"):
        local = (window, 0) if window < T else None
        kernel = functools.partial(jax.nn.dot_product_attention, scale=1 / math.sqrt(D), is_causal=True,
                                   local_window_size=local, implementation=impl)
        return _per_device(kernel, q, k, v) if impl == "cudnn" else kernel(q, k, v)
    raise ValueError(f"unknown attention implementation {impl!r}")
