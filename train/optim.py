"""The optimizer: Muon (nanochat's variant) for the block matrices, AdamW
for embeddings, lm_head and scalars, one optax.multi_transform over `param_groups`, and the step
schedules, all pure jnp functions of optax's traced step count (no Python work per step).

Every transformation returns the final delta to ADD to the params (`optax.apply_updates`), i.e.
-lr and weight decay are already in it. States are plain pytrees (fp32 moments whatever the param
dtype), so they shard, donate and save with orbax like the params. Muon's math is written in
PyTorch's (out, in) orientation to read like the spec: each (in, out) kernel is transposed on the
way in and back on the way out (XLA folds the transposes into the matmuls).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from nanocode.config import GPTConfig, param_counts, preset

Schedule = Callable  # step (int or traced int32) -> scalar
B_REF = 2**19  # the batch (tokens) nanochat's learning rates were tuned at
C_REF = 768  # the width AdamW's learning rates were tuned at
POLAR_EXPRESS_COEFFS = (  # (a, b, c) per quintic step, as nanochat's
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


# ---- parameter groups ------------------------------------------------------------------------------
_TOP_LEVEL_GROUP = {"lm_head": "lm_head", "wte": "wte", "value_embeds": "value_embeds",
                    "resid_lambdas": "resid", "x0_lambdas": "x0", "smear_gate": "smear",
                    "smear_lambda": "smear", "backout_lambda": "smear"}


def param_groups(params) -> dict:
    """The params pytree with each leaf replaced by its optimizer group name. Labels come from the
    top-level key only, so a new parameter fails loudly here instead of silently going untrained."""
    def label(path, leaf):
        top = path[0].key
        if top == "blocks":
            if len(leaf.shape) != 2:
                raise ValueError(f"block parameter {jax.tree_util.keystr(path)} is not a matrix")
            return "matrix"
        if top not in _TOP_LEVEL_GROUP:
            raise ValueError(f"parameter {jax.tree_util.keystr(path)} has no optimizer group")
        return _TOP_LEVEL_GROUP[top]
    return jax.tree_util.tree_map_with_path(label, params)


# ---- schedules -------------------------------------------------------------------------------------
def _warmdown_progress(step, total_steps: int, warmdown_frac: float):
    """0 before the warmdown, rising linearly to 1 at step == total_steps."""
    warmdown = max(round(warmdown_frac * total_steps), 1)
    into = jnp.asarray(step, jnp.float32) - (total_steps - warmdown)
    return jnp.clip(into / warmdown, 0.0, 1.0)


def lr_multiplier(step, total_steps: int, warmup_steps: int = 40, warmdown_frac: float = 0.65,
                  final_frac: float = 0.05):
    """nanochat's trapezoid: (step+1)/warmup, flat 1.0, then linear to final_frac at total_steps.
    Written as a min of the ramps so a run too short for both does not jump (nanochat lets the
    warmup branch win; identical whenever warmup ends before warmdown starts)."""
    step = jnp.asarray(step, jnp.float32)
    warm = jnp.minimum((step + 1) / max(warmup_steps, 1), 1.0)
    down = 1.0 - (1.0 - final_frac) * _warmdown_progress(step, total_steps, warmdown_frac)
    return jnp.minimum(warm, down)


def muon_momentum(step, total_steps: int, warmup_steps: int = 400, start: float = 0.85,
                  peak: float = 0.97, end: float = 0.90, warmdown_frac: float = 0.65):
    """start -> peak linearly over warmup_steps, then during the lr warmdown linearly from wherever
    it is back to `end` at total_steps."""
    step = jnp.asarray(step, jnp.float32)
    warm = start + (peak - start) * jnp.minimum(step / max(warmup_steps, 1), 1.0)
    return warm + (end - warm) * _warmdown_progress(step, total_steps, warmdown_frac)


def muon_weight_decay(step, total_steps: int, wd0: float):
    """Cosine from wd0 at step 0 to 0 at total_steps (held at 0 after)."""
    frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(total_steps, 1), 0.0, 1.0)
    return wd0 * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))


# ---- batch and weight-decay scaling ----------------------------------------------------------------
def _data_ratio(cfg: GPTConfig, ratio: float) -> float:
    """D / D_ref: target tokens (ratio * scaling params) of cfg over nanochat d12's, same ratio
    (so the ratio cancels; it stays in the signatures so a per-model ratio can be added later)."""
    return (ratio * param_counts(cfg)["scaling"]) / (ratio * param_counts(preset("d12"))["scaling"])


def auto_total_batch(cfg: GPTConfig, ratio: float = 12.0) -> int:
    """Total batch in tokens: 2^round(log2(2^19 * (D / D_ref)^0.383))."""
    return 2 ** round(math.log2(B_REF * _data_ratio(cfg, ratio) ** 0.383))


def muon_wd(cfg: GPTConfig, batch_tokens: int, ratio: float = 12.0, base: float = 0.28) -> float:
    """Peak Muon weight decay: base * sqrt(B / 2^19) * (D_ref / D)."""
    return base * math.sqrt(batch_tokens / B_REF) / _data_ratio(cfg, ratio)


# ---- Muon ------------------------------------------------------------------------------------------
def _as_schedule(x) -> Schedule:
    return x if callable(x) else (lambda step: jnp.asarray(x, jnp.float32))


def _frob(x):
    """Frobenius norm over the last two axes, fp32, keepdims: (..., 1, 1)."""
    x = x.astype(jnp.float32)
    return jnp.sqrt(jnp.sum(x * x, axis=(-2, -1), keepdims=True))


def polar_express(g, steps: int = 5, dtype=jnp.float32):
    """Approximate the orthogonal polar factor U V^T of g (..., m, n) with 5 fixed quintics instead
    of an SVD: singular values with sigma / ||g||_F >= 1e-3 land in [0.859, 1.141] (the minimax
    band of the coefficients; see tests), directions are kept. Works on the smaller Gram matrix,
    in `dtype` (bf16 on accelerators: each step re-corrects the last one's rounding)."""
    x = (g.astype(jnp.float32) / (_frob(g) * 1.01 + 1e-6)).astype(dtype)
    wide = g.shape[-2] <= g.shape[-1]
    xt = lambda a: jnp.swapaxes(a, -1, -2)
    for a, b, c in POLAR_EXPRESS_COEFFS[:steps]:
        if wide:  # A = X X^T (m, m); X = aX + (bA + cA^2) X
            A = x @ xt(x)
            x = a * x + (b * A + c * (A @ A)) @ x
        else:  # A = X^T X (n, n); X = aX + X (bA + cA^2)
            A = xt(x) @ x
            x = a * x + x @ (b * A + c * (A @ A))
    return x.astype(jnp.float32)


class MuonState(NamedTuple):
    count: jax.Array  # () int32 steps taken
    mu: optax.Updates  # momentum buffers, fp32, shaped like the params (in, out)
    nu: optax.Updates  # NorMuon second moments, fp32, in (out, in) orientation: see _nu_shape


def _nu_shape(m: int, n: int) -> tuple[int, int]:
    """NorMuon state for an (m, n) = (out, in) update: (m, 1) when tall or square, else (1, n)."""
    return (m, 1) if m >= n else (1, n)


def muon(learning_rate: Schedule, momentum: Schedule, weight_decay: Schedule, beta2: float = 0.9,
         ns_steps: int = 5, ns_dtype=None, stack: bool = True) -> optax.GradientTransformation:
    """Muon as nanochat has it ( Polar Express + NorMuon + cautious weight decay) for 2-D (in, out)
    kernels (leading axes, e.g. stacked layers, are batched over). The update needs `params`
    (cautious weight decay reads them) and is the full delta: -lr_eff * (g + wd * p * [g*p >= 0]).
    Costs one fp32 momentum buffer per parameter plus one float per output neuron.
    stack: run same-shaped matrices as one batch (nanochat does the same): a few big matmuls and
    a short compile (d24: 4 groups instead of 156 chains) for a transient stacked copy of the
    group's grads, params and state; the state itself still mirrors the params tree.
    learning_rate, momentum, weight_decay: schedules of the step (or constants)."""
    lr_fn, mom_fn, wd_fn = map(_as_schedule, (learning_rate, momentum, weight_decay))
    if ns_dtype is None:
        ns_dtype = jnp.bfloat16 if jax.default_backend() != "cpu" else jnp.float32
    t = lambda a: jnp.swapaxes(a, -1, -2)  # (.., in, out) <-> (.., out, in)

    def init_fn(params):
        mu = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        nu = jax.tree.map(lambda p: jnp.zeros(p.shape[:-2] + _nu_shape(p.shape[-1], p.shape[-2]),
                                              jnp.float32), params)
        return MuonState(jnp.zeros((), jnp.int32), mu, nu)

    def one(grad, param, mu, nu, lr, mom, wd):
        g, p = t(grad).astype(jnp.float32), t(param).astype(jnp.float32)  # (m, n) = (out, in)
        m, n = g.shape[-2:]
        # 1. Nesterov momentum, nanochat's form: buf = lerp(buf, g, 1 - mom); g = lerp(g, buf, mom),
        #    i.e. buf = mom*buf + (1-mom)*g and g = (1-mom)*g + mom*buf (an EMA, not torch's sum).
        buf = mom * t(mu) + (1.0 - mom) * g  # (m, n)
        g = (1.0 - mom) * g + mom * buf
        # 2. Row equalisation: every output row gets norm ||g||_F / sqrt(m) (zero rows stay zero).
        rows = jnp.sqrt(jnp.sum(g * g, axis=-1, keepdims=True))  # (m, 1)
        g = g * (_frob(g) / math.sqrt(m)) / jnp.maximum(rows, 1e-12)
        # 3. Polar Express orthogonalisation.
        g = polar_express(g, ns_steps, ns_dtype)
        # 4. Renormalise to the Frobenius norm of an exactly semi-orthogonal matrix.
        g = g * (math.sqrt(min(m, n)) / jnp.maximum(_frob(g), 1e-12))
        # 5. NorMuon: EMA of mean(g^2) along the shorter side, i.e. one value per output row for
        #    tall/square matrices and per input column for wide ones (nanochat's red_dim; the spec's
        #    "per output neuron" is the tall case), rsqrt-scale, keep ||g||_F. No bias correction
        #    (nanochat has none; the rescale makes the EMA's overall size irrelevant).
        v = beta2 * nu + (1.0 - beta2) * jnp.mean(g * g, axis=-1 if m >= n else -2, keepdims=True)
        scaled = g * jax.lax.rsqrt(jnp.maximum(v, 1e-10))
        g = scaled * (_frob(g) / jnp.maximum(_frob(scaled), 1e-10))
        # 6-7. Cautious weight decay; the shape factor scales the decay too (lr_eff used for both,
        #      as nanochat). c_fc: m/n = 4 -> x2; GQA's c_k/c_v and narrow ve_gates get 1.
        lr_eff = lr * math.sqrt(max(1.0, m / n))
        mask = (g * p >= 0).astype(jnp.float32)
        delta = -lr_eff * (g + wd * p * mask)
        return t(delta).astype(param.dtype), t(buf), v

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("muon needs params (cautious weight decay)")
        lr, mom, wd = lr_fn(state.count), mom_fn(state.count), wd_fn(state.count)
        grads, treedef = jax.tree.flatten(updates)
        leaves = [grads] + [treedef.flatten_up_to(x) for x in (params, state.mu, state.nu)]
        groups = {}  # leaf indices that share shape and dtypes -> one batched update
        for i, (g, p) in enumerate(zip(grads, leaves[1])):
            groups.setdefault((g.shape, g.dtype, p.dtype) if stack else i, []).append(i)
        out = [None] * len(grads)
        for idx in groups.values():
            stacked = [jnp.stack([x[i] for i in idx]) for x in leaves]  # (k, in, out) ...
            delta, buf, v = one(*stacked, lr, mom, wd)
            for j, i in enumerate(idx):
                out[i] = (delta[j], buf[j], v[j])
        delta, mu, nu = (treedef.unflatten([o[k] for o in out]) for k in range(3))
        return delta, MuonState(optax.safe_increment(state.count), mu, nu)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- AdamW -----------------------------------------------------------------------------------------
class AdamWState(NamedTuple):
    count: jax.Array  # () int32 steps taken
    mu: optax.Updates  # first moments, fp32
    nu: optax.Updates  # second moments, fp32


def adamw(learning_rate: Schedule, b1: float, b2: float, eps: float = 1e-10,
          weight_decay: float = 0.0) -> optax.GradientTransformation:
    """torch.optim.AdamW (decay decoupled, scaled by lr: p -= lr*(m_hat/(sqrt(v_hat)+eps) + wd*p)),
    numerically optax.adamw, but with fp32 moments for bf16 tables: in bf16 a 0.995 EMA of the
    second moment rounds back to itself and stops moving. Costs 8 bytes per parameter."""
    lr_fn = _as_schedule(learning_rate)

    def init_fn(params):
        zeros = lambda p: jnp.zeros(p.shape, jnp.float32)
        return AdamWState(jnp.zeros((), jnp.int32), jax.tree.map(zeros, params),
                          jax.tree.map(zeros, params))

    def update_fn(updates, state, params=None):
        if params is None and weight_decay:
            raise ValueError("adamw with weight decay needs params")
        lr, step = lr_fn(state.count), state.count.astype(jnp.float32) + 1.0
        c1, c2 = 1.0 - b1**step, 1.0 - b2**step  # bias corrections
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)),
                          state.nu, updates)

        def delta(m, v, g, p):
            d = (m / c1) / (jnp.sqrt(v / c2) + eps)
            if weight_decay:
                d = d + weight_decay * p.astype(jnp.float32)
            return (-lr * d).astype(g.dtype)

        ps = params if params is not None else updates
        out = jax.tree.map(delta, mu, nu, updates, ps)
        return out, AdamWState(optax.safe_increment(state.count), mu, nu)

    return optax.GradientTransformation(init_fn, update_fn)


# ---- the whole optimizer ---------------------------------------------------------------------------
@dataclass(frozen=True)
class OptimConfig:
    """The optimizer's hyperparameters; CLI flags map 1:1 to these fields. Learning rates are at C=768, B=2^19."""
    matrix_lr: float = 0.02  # Muon
    lm_head_lr: float = 0.008
    wte_lr: float = 0.3
    value_embeds_lr: float = 0.15
    resid_lr: float = 0.005
    x0_lr: float = 0.5
    smear_lr: float = 0.2  # never rescaled by width or batch
    lm_head_betas: tuple = (0.8, 0.96)
    wte_betas: tuple = (0.8, 0.995)
    value_embeds_betas: tuple = (0.8, 0.995)
    resid_betas: tuple = (0.8, 0.95)
    x0_betas: tuple = (0.96, 0.95)
    smear_betas: tuple = (0.8, 0.95)
    lm_head_wd: float = 0.01
    wte_wd: float = 0.001
    value_embeds_wd: float = 0.01
    resid_wd: float = 0.05
    x0_wd: float = 0.0
    smear_wd: float = 0.0
    adam_eps: float = 1e-10
    matrix_wd: float | None = None  # peak Muon wd; None = muon_wd(cfg, batch_tokens, ratio)
    muon_beta2: float = 0.9
    ns_steps: int = 5
    ns_dtype: str | None = None  # None: bfloat16 on accelerators, float32 on CPU
    momentum_start: float = 0.85
    momentum_peak: float = 0.97
    momentum_end: float = 0.90
    momentum_warmup_steps: int = 400
    warmup_steps: int = 40
    warmdown_frac: float = 0.65
    final_lr_frac: float = 0.05


ADAMW_GROUPS = ("lm_head", "wte", "value_embeds", "resid", "x0", "smear")


def scaled_lrs(scale: float, groups=("matrix", *ADAMW_GROUPS)) -> dict:
    """build_optimizer overrides that multiply the named groups' peak lrs by scale."""
    if scale <= 0:
        raise ValueError(f"learning-rate scale must be > 0, got {scale}")
    return {f"{g}_lr": getattr(OptimConfig(), f"{g}_lr") * scale for g in groups}


def peak_lrs(cfg: GPTConfig, batch_tokens: int, oc: OptimConfig = OptimConfig()) -> dict:
    """Peak lr per group: (C/768)^-0.5 on lm_head/wte/value_embeds, sqrt(B/2^19) on all but
    smear. For logging, and what build_optimizer multiplies by lr_multiplier(step)."""
    width = (cfg.n_embd / C_REF) ** -0.5
    batch = math.sqrt(batch_tokens / B_REF)
    lrs = {"matrix": oc.matrix_lr * batch, "resid": oc.resid_lr * batch, "x0": oc.x0_lr * batch,
           "smear": oc.smear_lr}
    for g in ("lm_head", "wte", "value_embeds"):
        lrs[g] = getattr(oc, f"{g}_lr") * width * batch
    return lrs


def build_optimizer(cfg: GPTConfig, params, *, total_steps: int, batch_tokens: int,
                    ratio: float = 12.0, **overrides) -> optax.GradientTransformation:
    """Muon on "matrix", AdamW on the rest, every lr times lr_multiplier(step); Muon momentum and
    weight decay on their own schedules. overrides: OptimConfig fields. Only groups present in
    params get a (sub)state, so a features-off model has no empty AdamW states to checkpoint."""
    oc = dataclasses.replace(OptimConfig(), **overrides)
    labels = param_groups(params)
    present = set(jax.tree.leaves(labels))
    lrs = peak_lrs(cfg, batch_tokens, oc)
    mult = lambda step: lr_multiplier(step, total_steps, oc.warmup_steps, oc.warmdown_frac,
                                      oc.final_lr_frac)
    schedule = lambda peak: (lambda step: peak * mult(step))
    wd0 = muon_wd(cfg, batch_tokens, ratio) if oc.matrix_wd is None else oc.matrix_wd
    transforms = {
        "matrix": muon(
            schedule(lrs["matrix"]),
            lambda s: muon_momentum(s, total_steps, oc.momentum_warmup_steps, oc.momentum_start,
                                    oc.momentum_peak, oc.momentum_end, oc.warmdown_frac),
            lambda s: muon_weight_decay(s, total_steps, wd0),
            beta2=oc.muon_beta2, ns_steps=oc.ns_steps,
            ns_dtype=None if oc.ns_dtype is None else jnp.dtype(oc.ns_dtype)),
    }
    for g in ADAMW_GROUPS:
        b1, b2 = getattr(oc, f"{g}_betas")
        transforms[g] = adamw(schedule(lrs[g]), b1, b2, oc.adam_eps, getattr(oc, f"{g}_wd"))
    return optax.multi_transform({g: tx for g, tx in transforms.items() if g in present}, labels)
