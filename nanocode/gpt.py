"""The GPT (nanochat's 2026 architecture) as pure functions over a dict
of arrays. The engine calls `forward`; training's loss (`nll_sum`) and the evals' and DPO's
per-token nats (`token_nll`) run the same trunk (`hidden`, its layers under `lax.scan`) and a
chunked head + cross-entropy that never holds all the logits at once; `loss_fn` is the plain loss
over `forward`'s logits, the reference those are checked against. Attention lives in
nanocode/attention.py; the chunked head + loss kernels and `dense` in nanocode/kernels.py.

Why a plain pytree and not Flax NNX: the parameters are a dict whose paths are the names the
optimizer groups by (`blocks/3/attn/c_q`), the sharding rules match on, orbax saves, and the
nanochat importer maps to, with no graph/state split to keep in sync; and a `jax.jit` of a pure
function has no per-call graph traversal (nnx.jit measured slower here, see docs/BENCHMARKS.md).

Layout: kernels are (in, out) (`x @ w`), the transpose of PyTorch's (out, in). Matrices are fp32
masters cast to `compute_dtype` at use; embedding tables are stored in `embed_dtype`. Logits,
softcap and loss are fp32. Shapes: B batch, T query tokens, S key positions, C model width,
H query heads, K kv heads, D head dim, V padded vocab.

The forward takes an optional KVCache, so cached decoding and chunked prefill run this same code:
keys/values are written at `cache.pos`, rotary phases and masks use absolute positions, and the
smear state (the previous token's normalised embedding) is carried across chunks.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from nanocode.attention import attend, attend_head_major, batch_axes, resolve_attn_impl
from nanocode.config import SMEAR_CHANNELS, VE_GATE_CHANNELS, GPTConfig
from nanocode.kernels import dense, fused_head_nll, head_nll_per_token
from nanocode.sharding import PARAM_LAYOUT

Params = dict


# ---- parameters ------------------------------------------------------------------------------------
def init_params(cfg: GPTConfig, key: jax.Array) -> Params:
    """Init (as nanochat): wte N(0, 0.8); lm_head N(0, 0.001); q, k, v and value embeddings
    U(+-sqrt(3/C)); fc 0.4x that; both output projections zero; gates U(0, 0.02)."""
    C, V, L = cfg.n_embd, cfg.padded_vocab, cfg.n_layer
    f32, emb = jnp.float32, jnp.dtype(cfg.embed_dtype)
    s = math.sqrt(3.0 / C)
    keys = iter(jax.random.split(key, 8 + 8 * L))

    def uniform(shape, lo, hi, dtype=f32):
        return jax.random.uniform(next(keys), shape, f32, lo, hi).astype(dtype)

    def normal(shape, std, dtype=f32):
        return (std * jax.random.normal(next(keys), shape, f32)).astype(dtype)

    blocks = []
    for i in range(L):
        attn = {
            "c_q": uniform((C, cfg.n_head * cfg.head_dim), -s, s),
            "c_k": uniform((C, cfg.kv_dim), -s, s),
            "c_v": uniform((C, cfg.kv_dim), -s, s),
            "c_proj": jnp.zeros((cfg.n_head * cfg.head_dim, C), f32),
        }
        if cfg.has_value_embed(i):
            attn["ve_gate"] = uniform((VE_GATE_CHANNELS, cfg.n_kv_head), 0.0, 0.02)
        mlp = {"c_fc": uniform((C, cfg.mlp_dim), -0.4 * s, 0.4 * s),
               "c_proj": jnp.zeros((cfg.mlp_dim, C), f32)}
        blocks.append({"attn": attn, "mlp": mlp})

    params = {"wte": normal((V, C), 0.8, emb), "blocks": blocks, "lm_head": normal((C, V), 0.001)}
    if cfg.value_embeds:
        params["value_embeds"] = {str(i): uniform((V, cfg.kv_dim), -s, s, emb)
                                  for i in range(L) if cfg.has_value_embed(i)}
    if cfg.lambdas:
        frac = jnp.arange(L, dtype=f32) / max(L - 1, 1)
        params["resid_lambdas"] = 1.15 - 0.10 * frac
        params["x0_lambdas"] = 0.20 - 0.15 * frac
    if cfg.smear:
        params["smear_gate"] = uniform((SMEAR_CHANNELS, 1), 0.0, 0.02)
        params["smear_lambda"] = jnp.zeros((), f32)
    if cfg.backout:
        params["backout_lambda"] = jnp.full((), 0.2, f32)
    return params


# ---- KV cache --------------------------------------------------------------------------------------
class KVCache(NamedTuple):
    """Preallocated keys/values for every layer plus the state chunked prefill needs."""
    k: jax.Array  # (L, B, K, D, S) compute dtype: keys stored transposed and v head-major, so
    v: jax.Array  # (L, B, K, S, D)  both attention matmuls read the cache with no copy
    pos: jax.Array  # () int32: number of tokens already in the cache
    prev_embed: jax.Array  # (B, C) normalised embedding of the last cached token (smear input)


def init_cache(cfg: GPTConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    dtype = jnp.dtype(dtype or cfg.compute_dtype)
    L, K, D = cfg.n_layer, cfg.n_kv_head, cfg.head_dim
    return KVCache(jnp.zeros((L, batch, K, D, max_len), dtype),
                   jnp.zeros((L, batch, K, max_len, D), dtype), jnp.zeros((), jnp.int32),
                   jnp.zeros((batch, cfg.n_embd), dtype))


# ---- building blocks -------------------------------------------------------------------------------
# Whether rmsnorm scales x in fp32 (True) or only takes its statistics in fp32 and scales in x's
# dtype (False: no fp32 copy of a bf16 activation; faster on the TPU, BENCHMARKS). The same in
# fp32 and within bf16 rounding; a lever of bench/accelerator_check.py.
NORM_SCALE_F32 = False


def rmsnorm(x: jax.Array) -> jax.Array:
    """Parameter-free RMSNorm over the last axis, statistics in fp32 (eps as torch's rms_norm)."""
    x32 = x.astype(jnp.float32)
    eps = jnp.finfo(x.dtype).eps
    inv_rms = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)  # (..., 1)
    if NORM_SCALE_F32:
        return (x32 * inv_rms).astype(x.dtype)
    return x * inv_rms.astype(x.dtype)


# Rotary's half swap, per backend: a matmul with a signed permutation (True) or jnp.roll (False).
# The same values (one nonzero per column, exact in any dtype); on the TPU the roll's two 64-lane
# halves are half-empty vector registers and the matmul is the faster step (BENCHMARKS); on CPU
# neither is faster, and the roll stays. A lever of bench/accelerator_check.py.
ROTARY_MATMUL = {"cpu": False, "gpu": False, "tpu": True}


# Whether training's splash attention (no cache) gets q, k, v head-major (B, n, T, D) straight from
# their projections and gives its output to the out-projection as is, per backend (True), or
# (B, T, n, D) with transposes around the kernel (False). The same values; a layout choice
# for XLA's TPU tiles, whose minor dims are (8, 128): a (B, T, 3, 128) tensor pads its heads.
# A lever of bench/accelerator_check.py.
HEAD_MAJOR = {"cpu": False, "gpu": False, "tpu": True}


# The MLP's relu(z)^2 with its own gradient, 2 relu(z) g (True), or relu then a square under
# autodiff (False). The same values; autodiff keeps relu's mask beside relu(z) for the backward
# (on the TPU packed into u32 bits along the batch inside the c_fc matmul's fusion), the own
# gradient keeps relu(z) alone. A lever of bench/accelerator_check.py.
RELU2_VJP = True


def _relu_squared_autodiff(z: jax.Array) -> jax.Array:
    r = jax.nn.relu(z)
    return r * r


def _relu_squared_fwd(z: jax.Array):
    return _relu_squared_autodiff(z), jax.nn.relu(z)  # keeps relu(z) alone (XLA computes it once)


def _relu_squared_bwd(r: jax.Array, g: jax.Array):
    return ((g + g) * r,)  # d(r^2)/dz = 2 r where z > 0, and r = 0 elsewhere


_relu_squared = jax.custom_vjp(_relu_squared_autodiff)
_relu_squared.defvjp(_relu_squared_fwd, _relu_squared_bwd)


def relu_squared(z: jax.Array) -> jax.Array:
    """relu(z)^2, the MLP's activation (RELU2_VJP picks how its gradient is kept)."""
    return (_relu_squared if RELU2_VJP else _relu_squared_autodiff)(z)


def rotary(x: jax.Array, positions: jax.Array, base: float, time_axis: int = 1) -> jax.Array:
    """Half-split rotary embedding (nanochat's sign convention): with x = [x1, x2] halves,
    [x1 cos + x2 sin, x2 cos - x1 sin], written as x * [cos, cos] + roll(x) * [sin, -sin]: on CPU
    its fwd+bwd is several times cheaper than concatenating the two halves; on the TPU the swap is
    a matmul instead (ROTARY_MATMUL), the same values. x: (B, T, n, D), or (B, n, T, D) with
    time_axis 2; positions: (T,)."""
    D = x.shape[-1]
    inv_freq = 1.0 / (base ** (jnp.arange(0, D, 2, dtype=jnp.float32) / D))  # (D/2,)
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq  # (T, D/2)
    cos, sin = jnp.cos(freqs), jnp.sin(freqs)
    phase_shape = [1] * x.ndim  # (1, T, 1, D) or (1, 1, T, D)
    phase_shape[time_axis], phase_shape[-1] = x.shape[time_axis], D
    cos = jnp.concatenate([cos, cos], axis=-1).astype(x.dtype).reshape(phase_shape)
    if ROTARY_MATMUL.get(jax.default_backend(), False):  # [x2, -x1] as x @ a signed permutation
        half = jnp.eye(D // 2, dtype=x.dtype)
        zero = jnp.zeros_like(half)
        swap = jnp.block([[zero, -half], [half, zero]])  # (D, D): x @ swap = [x2, -x1]
        sin = jnp.concatenate([sin, sin], axis=-1).astype(x.dtype).reshape(phase_shape)
        swapped = jnp.matmul(x.reshape(-1, D), swap, precision=jax.lax.Precision.HIGHEST).reshape(x.shape)
        return x * cos + swapped * sin
    sin = jnp.concatenate([sin, -sin], axis=-1).astype(x.dtype).reshape(phase_shape)
    return x * cos + jnp.roll(x, D // 2, axis=-1) * sin  # roll: [x2, x1]


# ---- the model -------------------------------------------------------------------------------------
def forward(params: Params, cfg: GPTConfig, idx: jax.Array, cache: KVCache | None = None,
            n_valid=None, last_only: bool = False,
            kv_len: int | None = None) -> tuple[jax.Array, KVCache | None]:
    """idx (B, T) int -> (logits (B, T, vocab) fp32, updated cache or None).
    With a cache, n_valid (an int or traced scalar <= T) says how many leading tokens of idx are
    real: a prompt padded to a bucket size compiles once per bucket, the cache advances by n_valid,
    and the padding's keys are never attended to (later chunks overwrite them). The cache must have
    room for all T positions (pos + T <= max_len). last_only: logits (B, 1, V) for the last real
    token only (prefill needs no other, and the head over every position is a large share of a
    short chunk's FLOPs).
    kv_len (static): attend to the first kv_len cache slots only (needs pos + T <= kv_len); decode
    reads a 128-slot prefix instead of a 2048-slot cache while the conversation is short."""
    x, cache = hidden(params, cfg, idx, cache, n_valid, kv_len)  # (B, T, C)
    if last_only:
        n_valid = idx.shape[1] if n_valid is None else n_valid
        x = jax.lax.dynamic_slice_in_dim(x, n_valid - 1, 1, axis=1)  # (B, 1, C)
    logits = dense(x, params["lm_head"])[..., : cfg.vocab_size].astype(jnp.float32)  # (B, T, V)
    return cfg.softcap * jnp.tanh(logits / cfg.softcap), cache


def own_rows(rows: jax.Array) -> jax.Array:
    """An embedding lookup's result (B, T, width) laid out as the batch is, over the batch axes of
    the mesh in context (none: unchanged). The tables are split over their width (PARAM_LAYOUT),
    so a lookup yields every device's rows for this device's columns; constrained here, XLA moves
    them to their devices at once (one all-to-all of activations) instead of carrying the width
    split into the reshapes after it (which made it gather whole batches inside the layer loop)."""
    axes = batch_axes(rows.shape[0])
    return jax.lax.with_sharding_constraint(rows, P(axes)) if axes else rows


def layer_period(cfg: GPTConfig) -> int:
    """The smallest p dividing n_layer such that layer i and layer i + p are built alike (same
    attention window, both with or without a value embedding): `hidden` scans over n_layer / p
    groups of p layers. SSSL windows with alternate value embeddings give p = 4 at any depth that
    4 divides (d12, d20, d24); p = n_layer (one group, no real loop) when nothing repeats."""
    kinds = [(w, cfg.has_value_embed(i)) for i, w in enumerate(cfg.window_sizes())]
    L = cfg.n_layer
    return next(p for p in range(1, L + 1)
                if L % p == 0 and all(kinds[i] == kinds[i % p] for i in range(L)))


REMAT = {"block": jax.checkpoint_policies.nothing_saveable,  # keep only each layer's input
         "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}  # keep matmul outputs


def embed(params: Params, cfg: GPTConfig, idx: jax.Array, positions: jax.Array,
          cache: KVCache | None, n_valid) -> tuple[jax.Array, jax.Array]:
    """The trunk's input: idx (B, T) -> (x (B, T, C) in the compute dtype, the next smear state
    (B, C)). x is the normalised token embedding, smeared (cfg.smear) with the previous token's:
    x[t] += lambda * sigmoid(gate(x[t, :24])) * x[t-1], where x[-1] is the cache's carried state
    (zeros without a cache) and the token at absolute position 0 gets nothing. The next smear state
    is the unsmeared embedding of token n_valid - 1 (the last real one)."""
    dt = jnp.dtype(cfg.compute_dtype)
    x = rmsnorm(own_rows(params["wte"][idx]).astype(dt))  # (B, T, C)
    new_prev = jax.lax.dynamic_index_in_dim(x, n_valid - 1, axis=1, keepdims=False)  # (B, C) smear state
    if cfg.smear:
        first_prev = jnp.zeros_like(x[:, :1]) if cache is None else cache.prev_embed[:, None]
        x_prev = jnp.concatenate([first_prev.astype(dt), x[:, :-1]], axis=1)  # (B, T, C)
        gate = jax.nn.sigmoid(dense(x[..., :SMEAR_CHANNELS], params["smear_gate"]))  # (B, T, 1)
        gate = params["smear_lambda"].astype(dt) * gate * (positions > 0)[None, :, None].astype(dt)
        x = x + gate * x_prev
    return x, new_prev


def block(cfg: GPTConfig, j: int, x: jax.Array, w: Params, lam: jax.Array, ve_table: jax.Array | None,
          kv: tuple[jax.Array, jax.Array] | None, i: jax.Array, *, x0: jax.Array, idx: jax.Array,
          positions: jax.Array, cache_pos: jax.Array | None, n_valid, kv_len: int | None):
    """Layer i, position j of its group (j fixes its attention window): x (B, T, C) -> (x, kv).
    w: the layer's weights in the compute dtype; lam: its (resid, x0) lambdas (2,); ve_table: its
    value-embedding table (V, K*D) or None; x0: the trunk's input (`embed`); positions (T,):
    absolute. Without a cache kv is None; with one kv is the whole cache (k (L, B, K, D, S),
    v (L, B, K, S, D)), returned with this layer's keys/values written at cache_pos, and queries
    attend to its first kv_len slots, of which cache_pos + n_valid exist."""
    dt = jnp.dtype(cfg.compute_dtype)
    B, T = idx.shape
    H, K, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    window, impl = cfg.window_sizes()[j], resolve_attn_impl(cfg)
    if cfg.lambdas:
        x = lam[0] * x + lam[1] * x0
    a, xn = w["attn"], rmsnorm(x)
    head_major = kv is None and impl == "splash" and T % 128 == 0 and HEAD_MAJOR.get(jax.default_backend(), False)
    if head_major:  # (B, n, T, D) from the matmul itself
        def project(wt, n):
            return jnp.einsum("btc,cnd->bntd", xn, wt.astype(dt).reshape(-1, n, D))
    else:
        def project(wt, n):
            return dense(xn, wt).reshape(B, T, n, D)
    q, k, v = project(a["c_q"], H), project(a["c_k"], K), project(a["c_v"], K)  # (B, T, n, D) or head-major
    if ve_table is not None:  # v += 3 * sigmoid(gate(x[:12])) * ve[idx], a gate per kv head
        ve = own_rows(ve_table[idx]).astype(dt).reshape(B, T, K, D)
        ve_gate = 3 * jax.nn.sigmoid(dense(xn[..., :VE_GATE_CHANNELS], a["ve_gate"]))  # (B, T, K)
        ve = ve_gate[..., None] * ve  # (B, T, K, D)
        v = v + (ve.transpose(0, 2, 1, 3) if head_major else ve)
    time_axis = 2 if head_major else 1
    q = rmsnorm(rotary(q, positions, cfg.rope_base, time_axis)) * jnp.asarray(cfg.qk_scale, dt)
    k = rmsnorm(rotary(k, positions, cfg.rope_base, time_axis)) * jnp.asarray(cfg.qk_scale, dt)
    if head_major:
        y = attend_head_major(q, k, v, window=window)  # (B, H, T, D)
        x = x + jnp.einsum("bhtd,hdc->btc", y, a["c_proj"].astype(dt).reshape(H, D, -1))
    elif kv is None:
        y = attend(q, k, v, window=window, impl=impl)
    else:
        ck, cv = kv  # (L, B, K, D, S), (L, B, K, S, D): the whole cache, updated in place
        ck = jax.lax.dynamic_update_slice(
            ck, k.transpose(0, 2, 3, 1)[None].astype(ck.dtype), (i, 0, 0, 0, cache_pos))
        cv = jax.lax.dynamic_update_slice(
            cv, v.transpose(0, 2, 1, 3)[None].astype(cv.dtype), (i, 0, 0, cache_pos, 0))
        kk = jax.lax.dynamic_index_in_dim(ck, i, keepdims=False)[..., :kv_len]  # (B, K, D, S')
        vv = jax.lax.dynamic_index_in_dim(cv, i, keepdims=False)[:, :, :kv_len]  # (B, K, S', D)
        y = attend(q, kk.astype(dt), vv.astype(dt), window=window, impl=impl,
                   q_pos=positions, valid_len=cache_pos + n_valid, head_major=True)
        kv = (ck, cv)
    if not head_major:
        x = x + dense(y.reshape(B, T, H * D), a["c_proj"])
    m = w["mlp"]  # MLP: proj(relu(fc(x))^2)
    h = relu_squared(dense(rmsnorm(x), m["c_fc"]))  # (B, T, 4C)
    return x + dense(h, m["c_proj"]), kv


def hidden(params: Params, cfg: GPTConfig, idx: jax.Array, cache: KVCache | None = None,
           n_valid=None, kv_len: int | None = None) -> tuple[jax.Array, KVCache | None]:
    """The trunk of `forward` (same arguments): idx (B, T) -> (normalised last hidden state
    (B, T, C) that the head multiplies, updated cache or None).

    The layers (`block`) run as a `lax.scan` over groups of `layer_period(cfg)` layers, so XLA
    compiles one group whatever the depth. Parameters stay one dict per layer (the names
    checkpoints, the optimizer and the sharding rules use); each step stacks a group position's
    weights over the groups, cast to the compute dtype first (value-embedding tables stay in their
    storage dtype so their scatter-add gradient accumulates in it). The trade: one copy of the
    (sharded) weights per step, for compile time that does not grow with depth. cfg.remat
    recomputes each layer's activations in the backward pass (REMAT): `block` keeps only layer
    inputs, `dots` also keeps matmul outputs."""
    dt = jnp.dtype(cfg.compute_dtype)
    T, L = idx.shape[1], cfg.n_layer
    start = jnp.zeros((), jnp.int32) if cache is None else cache.pos
    positions = start + jnp.arange(T, dtype=jnp.int32)  # (T,) absolute positions
    p = layer_period(cfg)
    G = L // p

    n_valid = T if n_valid is None else n_valid
    x, new_prev = embed(params, cfg, idx, positions, cache, n_valid)  # (B, T, C), (B, C)
    context = dict(x0=x, idx=idx, positions=positions, n_valid=n_valid, kv_len=kv_len,
                   cache_pos=None if cache is None else cache.pos)
    layers = [functools.partial(block, cfg, j, **context) for j in range(p)]
    if cache is None and cfg.remat != "none":
        layers = [jax.checkpoint(f, policy=REMAT[cfg.remat], prevent_cse=False) for f in layers]

    def stacked(trees):  # per-layer pytrees -> one pytree of (G, ...) leaves
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)

    cast = lambda t: jax.tree.map(lambda a: a.astype(dt), t)  # noqa: E731
    weights = [stacked([cast(params["blocks"][i]) for i in range(j, L, p)]) for j in range(p)]
    tables = [stacked([params["value_embeds"][str(i)] for i in range(j, L, p)])
              if cfg.has_value_embed(j) else None for j in range(p)]
    lambdas = (jnp.stack([params["resid_lambdas"], params["x0_lambdas"]], -1).astype(dt).reshape(G, p, 2)
               if cfg.lambdas else jnp.zeros((G, p, 2), dt))
    half_g, half_j = divmod(L // 2, p)  # backout subtracts the residual after layer L // 2

    def group(carry, xs):
        x, x_half, kv = carry
        g, w, lam, ve = xs
        for j in range(p):
            x, kv = layers[j](x, w[j], lam[j], ve[j], kv, g * p + j)
            if cfg.backout and j == half_j:
                x_half = jnp.where(g == half_g, x, x_half)
        return (x, x_half, kv), None

    kv = None if cache is None else (cache.k, cache.v)
    xs = (jnp.arange(G), weights, lambdas, tables)
    (x, x_half, kv), _ = jax.lax.scan(group, (x, jnp.zeros_like(x), kv), xs)

    if cfg.backout:
        x = x - params["backout_lambda"].astype(dt) * x_half
    if cache is not None:
        cache = KVCache(kv[0], kv[1], cache.pos + n_valid, new_prev.astype(cache.prev_embed.dtype))
    return rmsnorm(x), cache


def cross_entropy(logits: jax.Array, targets: jax.Array, reduction: str = "mean") -> jax.Array:
    """Token cross-entropy in fp32; targets == -1 are ignored. reduction: mean | sum | none."""
    valid = targets != -1
    logz = jax.nn.logsumexp(logits, axis=-1)  # (B, T)
    picked = jnp.take_along_axis(logits, jnp.where(valid, targets, 0)[..., None], axis=-1)[..., 0]
    nll = jnp.where(valid, logz - picked, 0.0)  # (B, T)
    if reduction == "none":
        return nll
    if reduction == "sum":
        return nll.sum()
    return nll.sum() / jnp.maximum(valid.sum(), 1)


def nll_sum(params: Params, cfg: GPTConfig, idx: jax.Array, targets: jax.Array) -> jax.Array:
    """Sum of next-token nats over targets != -1: the training loss (train.base.next_token_loss).
    The head and the loss run fused (kernels.fused_head_nll), per device under a mesh: each device's
    rows in chunks, its lm_head gradient summed over devices once, never the (B, T, V) logits."""
    x, _ = hidden(params, cfg, idx)
    axes = batch_axes(idx.shape[0])
    local = lambda x, w, t, sum_axes: jax.lax.psum(fused_head_nll(x, w, t, cfg.softcap, sum_axes), axes)  # noqa: E731
    return _per_device_head(local, params, cfg, x, targets, P())


def token_nll(params: Params, cfg: GPTConfig, idx: jax.Array, targets: jax.Array) -> jax.Array:
    """Next-token nats per position (B, T), 0 where targets == -1, without the (B, T, V) logits:
    the head runs over time chunks that the backward pass recomputes (kernels.head_nll_per_token),
    so this differentiates with any weight per row (DPO's sequence log-probs) at one extra head
    matmul. Per device under a mesh, like `nll_sum`. For evals and DPO; training's sum is `nll_sum`."""
    x, _ = hidden(params, cfg, idx)
    local = lambda x, w, t, sum_axes: head_nll_per_token(x, w, t, cfg.softcap)  # noqa: E731  (b, T, C) -> (b, T)
    return _per_device_head(local, params, cfg, x, targets, P(batch_axes(idx.shape[0])))


def _per_device_head(local, params: Params, cfg: GPTConfig, x: jax.Array, targets: jax.Array, out_spec):
    """local(x, w, targets, sum_axes) on each device's rows (shard_map over the batch axes), or
    once without a mesh; w is lm_head's first vocab_size columns (C, V). lm_head is stored split
    over the vocabulary on `fsdp` (PARAM_LAYOUT); when the batch is split over that axis too, each
    device passes in its own shard and all-gathers it inside, so the weight gradient comes back
    through the gather's transpose, a reduce-scatter to that shard, not a whole (C, V) all-reduce.
    sum_axes: the batch axes the weight gradient is still summed over (a custom VJP sums there)."""
    axes = batch_axes(x.shape[0])
    if not axes:
        return local(x, params["lm_head"][:, : cfg.vocab_size], targets, ())
    split = PARAM_LAYOUT["lm_head"][1]
    split = split if split in axes else None

    def body(x, w, t):
        if split:
            w = jax.lax.all_gather(w, split, axis=1, tiled=True)  # (C, V/n) -> (C, V); transposes to a reduce-scatter
        return local(x, w[:, : cfg.vocab_size], t, tuple(a for a in axes if a != split))
    return jax.shard_map(body, in_specs=(P(axes), P(None, split), P(axes)), out_specs=out_spec)(
        x, params["lm_head"], targets)


def loss_fn(params: Params, cfg: GPTConfig, idx: jax.Array, targets: jax.Array,
            reduction: str = "mean") -> jax.Array:
    """Next-token loss over `forward`'s (B, T, V) logits (per token with reduction="none"): the
    plain reference of `nll_sum` and `token_nll`, for tests and benchmarks."""
    logits, _ = forward(params, cfg, idx)
    return cross_entropy(logits, targets, reduction)
