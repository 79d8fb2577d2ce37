"""Flax NNX vs the plain dict pytree of nanocode/gpt.py: same model, same weights, same optimizer.

Evidence for the representation choice in nanocode/gpt.py. `NNXGPT` below is the no-cache forward
of gpt.py written idiomatically in Flax NNX (nnx.Linear / nnx.Embed / nnx.Param / nnx.List), reusing
gpt.py's `attend`, `rmsnorm`, `rotary`, `cross_entropy` and `resolve_attn_impl`. The pytree weights
are copied into it and the two forwards must agree (max |diff| < 1e-5, fp32) before anything is
timed; the training contenders must also produce the same losses over three AdamW steps.

Contenders (each owns its own copy of the weights and optimizer state):
  pure        jax.jit(step, donate_argnums=(0, 1)) over (params, opt_state, batch)   [gpt.py's way]
  nnx.jit     nnx.jit step over (model, nnx.Optimizer), nnx.value_and_grad          [NNX idiomatic]
  nnx tree    the same step under nnx.jit(graph=False) ("tree mode", flax >= 0.12)
  nnx partial nnx.jit_partial(step, model, optimizer, graph=False) (pre-flattened)
  split/merge nnx.split once; jax.jit(pure fn that nnx.merge()s inside), state donated
Timing: compile = first call (trace + compile + one run), the best of 2 fresh compiles
(jax.clear_caches() between, contender order reversed the second time). Steady state = R rounds; in each round
every contender runs N steps back to back (block_until_ready), in an order rotated per round;
medians over rounds, and ratios against `pure` (ratio of medians, and the median of the
per-round ratios, which cancels most machine-speed drift). Shapes: `cpu-d4` (window "L", B=8,
T=512) training, and a tiny model (2 layers, width 64, B=1) training and single-token inference.

    python bench/nnx_vs_pytree.py                 # full run (~2.5 min on a 2-core CPU)
    python bench/nnx_vs_pytree.py --quick         # smoke run (reduced cpu-d4 shape, 2 rounds)
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from nanocode import gpt  # noqa: E402
from nanocode.config import SMEAR_CHANNELS, VE_GATE_CHANNELS, GPTConfig, preset  # noqa: E402
from nanocode.attention import attend, resolve_attn_impl  # noqa: E402
from nanocode.gpt import cross_entropy, rmsnorm, rotary  # noqa: E402


# ==== the NNX model (counted for the line comparison: from here to END NNX MODEL) ==================
def _uniform(lo, hi):
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, lo, hi)


class NNXAttention(nnx.Module):
    def __init__(self, cfg: GPTConfig, layer: int, window: int, impl: str, *, rngs: nnx.Rngs):
        C, H, K, D = cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_dim
        s, dt = math.sqrt(3.0 / C), jnp.dtype(cfg.compute_dtype)
        lin = lambda i, o, init: nnx.Linear(i, o, use_bias=False, dtype=dt, kernel_init=init,  # noqa: E731
                                            rngs=rngs)
        self.c_q = lin(C, H * D, _uniform(-s, s))
        self.c_k = lin(C, K * D, _uniform(-s, s))
        self.c_v = lin(C, K * D, _uniform(-s, s))
        self.c_proj = lin(H * D, C, nnx.initializers.zeros)
        self.value_embed = self.ve_gate = nnx.data(None)  # set below on value-embedding layers
        if cfg.has_value_embed(layer):
            self.value_embed = nnx.Embed(cfg.padded_vocab, K * D, dtype=dt, param_dtype=cfg.embed_dtype,
                                         embedding_init=_uniform(-s, s), rngs=rngs)
            self.ve_gate = lin(VE_GATE_CHANNELS, K, _uniform(0.0, 0.02))
        self.cfg, self.window, self.impl = cfg, window, impl

    def __call__(self, x, idx, positions):
        cfg, (B, T, _) = self.cfg, x.shape
        H, K, D, dt = cfg.n_head, cfg.n_kv_head, cfg.head_dim, x.dtype
        xn = rmsnorm(x)
        q = self.c_q(xn).reshape(B, T, H, D)
        k = self.c_k(xn).reshape(B, T, K, D)
        v = self.c_v(xn).reshape(B, T, K, D)
        if self.value_embed is not None:
            gate = 3 * jax.nn.sigmoid(self.ve_gate(xn[..., :VE_GATE_CHANNELS]))  # (B, T, K)
            v = v + gate[..., None] * self.value_embed(idx).reshape(B, T, K, D)
        q = rmsnorm(rotary(q, positions, cfg.rope_base)) * jnp.asarray(cfg.qk_scale, dt)
        k = rmsnorm(rotary(k, positions, cfg.rope_base)) * jnp.asarray(cfg.qk_scale, dt)
        y = attend(q, k, v, window=self.window, impl=self.impl)
        return self.c_proj(y.reshape(B, T, H * D))


class NNXMLP(nnx.Module):
    def __init__(self, cfg: GPTConfig, *, rngs: nnx.Rngs):
        s, dt = math.sqrt(3.0 / cfg.n_embd), jnp.dtype(cfg.compute_dtype)
        self.c_fc = nnx.Linear(cfg.n_embd, cfg.mlp_dim, use_bias=False, dtype=dt,
                               kernel_init=_uniform(-0.4 * s, 0.4 * s), rngs=rngs)
        self.c_proj = nnx.Linear(cfg.mlp_dim, cfg.n_embd, use_bias=False, dtype=dt,
                                 kernel_init=nnx.initializers.zeros, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.relu(self.c_fc(rmsnorm(x)))
        return self.c_proj(h * h)


class NNXBlock(nnx.Module):
    def __init__(self, cfg: GPTConfig, layer: int, window: int, impl: str, *, rngs: nnx.Rngs):
        self.attn = NNXAttention(cfg, layer, window, impl, rngs=rngs)
        self.mlp = NNXMLP(cfg, rngs=rngs)
        self.resid_lambda = self.x0_lambda = nnx.data(None)
        if cfg.lambdas:
            frac = layer / max(cfg.n_layer - 1, 1)
            self.resid_lambda = nnx.Param(jnp.asarray(1.15 - 0.10 * frac, jnp.float32))
            self.x0_lambda = nnx.Param(jnp.asarray(0.20 - 0.15 * frac, jnp.float32))

    def __call__(self, x, x0, idx, positions):
        if self.resid_lambda is not None:
            x = self.resid_lambda[...].astype(x.dtype) * x + self.x0_lambda[...].astype(x.dtype) * x0
        x = x + self.attn(x, idx, positions)
        return x + self.mlp(x)


class NNXGPT(nnx.Module):
    def __init__(self, cfg: GPTConfig, *, rngs: nnx.Rngs):
        dt, windows, impl = jnp.dtype(cfg.compute_dtype), cfg.window_sizes(), resolve_attn_impl(cfg)
        self.cfg = cfg
        self.wte = nnx.Embed(cfg.padded_vocab, cfg.n_embd, dtype=dt, param_dtype=cfg.embed_dtype,
                             embedding_init=nnx.initializers.normal(0.8), rngs=rngs)
        self.blocks = nnx.List([NNXBlock(cfg, i, windows[i], impl, rngs=rngs)
                                for i in range(cfg.n_layer)])
        self.lm_head = nnx.Linear(cfg.n_embd, cfg.padded_vocab, use_bias=False, dtype=dt,
                                  kernel_init=nnx.initializers.normal(0.001), rngs=rngs)
        self.smear_gate = self.smear_lambda = self.backout_lambda = nnx.data(None)
        if cfg.smear:
            self.smear_gate = nnx.Linear(SMEAR_CHANNELS, 1, use_bias=False, dtype=dt,
                                         kernel_init=_uniform(0.0, 0.02), rngs=rngs)
            self.smear_lambda = nnx.Param(jnp.zeros((), jnp.float32))
        if cfg.backout:
            self.backout_lambda = nnx.Param(jnp.full((), 0.2, jnp.float32))

    def __call__(self, idx):
        cfg, T = self.cfg, idx.shape[1]
        positions = jnp.arange(T, dtype=jnp.int32)
        x = rmsnorm(self.wte(idx))
        dt = x.dtype
        if self.smear_gate is not None:  # x[t] += lambda * sigmoid(gate(x[t, :24])) * x[t-1]
            x_prev = jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)
            gate = jax.nn.sigmoid(self.smear_gate(x[..., :SMEAR_CHANNELS]))
            gate = self.smear_lambda[...].astype(dt) * gate * (positions > 0)[None, :, None].astype(dt)
            x = x + gate * x_prev
        x0, x_half = x, None
        for i, block in enumerate(self.blocks):
            x = block(x, x0, idx, positions)
            if i == cfg.n_layer // 2:
                x_half = x
        if self.backout_lambda is not None:
            x = x - self.backout_lambda[...].astype(dt) * x_half
        logits = self.lm_head(rmsnorm(x))[..., : cfg.vocab_size].astype(jnp.float32)
        return cfg.softcap * jnp.tanh(logits / cfg.softcap)
# ==== END NNX MODEL =================================================================================

NNX_CLASSES = (NNXAttention, NNXMLP, NNXBlock, NNXGPT)


def load_pytree(model: NNXGPT, params: dict) -> NNXGPT:
    """Copy gpt.py's dict params into the NNX module (both layouts are (in, out) kernels)."""
    copy = jnp.array  # fresh buffers: contenders donate theirs
    model.wte.embedding[...] = copy(params["wte"])
    model.lm_head.kernel[...] = copy(params["lm_head"])
    for i, (blk, p) in enumerate(zip(model.blocks, params["blocks"], strict=True)):
        for name in ("c_q", "c_k", "c_v", "c_proj"):
            getattr(blk.attn, name).kernel[...] = copy(p["attn"][name])
        if blk.attn.ve_gate is not None:
            blk.attn.ve_gate.kernel[...] = copy(p["attn"]["ve_gate"])
            blk.attn.value_embed.embedding[...] = copy(params["value_embeds"][str(i)])
        blk.mlp.c_fc.kernel[...] = copy(p["mlp"]["c_fc"])
        blk.mlp.c_proj.kernel[...] = copy(p["mlp"]["c_proj"])
        if blk.resid_lambda is not None:
            blk.resid_lambda[...] = copy(params["resid_lambdas"][i])
            blk.x0_lambda[...] = copy(params["x0_lambdas"][i])
    if model.smear_gate is not None:
        model.smear_gate.kernel[...] = copy(params["smear_gate"])
        model.smear_lambda[...] = copy(params["smear_lambda"])
    if model.backout_lambda is not None:
        model.backout_lambda[...] = copy(params["backout_lambda"])
    n_nnx = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    n_tree = sum(x.size for x in jax.tree.leaves(params))
    assert n_nnx == n_tree, f"parameter count mismatch: nnx {n_nnx} vs pytree {n_tree}"
    return model


def make_params(cfg: GPTConfig, seed: int = 0) -> dict:
    """gpt.init_params, then a small perturbation of every leaf so that no path is inert (the zero
    output projections and zero smear lambda would otherwise hide mistakes in the agreement check)."""
    params = gpt.init_params(cfg, jax.random.PRNGKey(seed))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    leaves = [x + (0.02 * jax.random.normal(k, x.shape, jnp.float32)).astype(x.dtype)
              for x, k in zip(leaves, keys)]
    return jax.tree.unflatten(tree, leaves)


def new_model(cfg, params):
    return load_pytree(NNXGPT(cfg, rngs=nnx.Rngs(0)), params)


# ---- contenders: each is a zero-argument callable that runs one step and returns an array -----------
def tx():
    return optax.adamw(1e-3, weight_decay=0.01)


def nnx_loss(model, idx, tgt):
    return cross_entropy(model(idx), tgt)


def nnx_train_step(model, optimizer, idx, tgt):
    loss, grads = nnx.value_and_grad(nnx_loss)(model, idx, tgt)
    optimizer.update(model, grads)
    return loss


def train_contenders(cfg, params, idx, tgt, variants):
    out = {}
    if "pure" in variants:
        opt = tx()

        def pure_step(p, s, idx, tgt):
            loss, grads = jax.value_and_grad(gpt.loss_fn)(p, cfg, idx, tgt)
            updates, s = opt.update(grads, s, p)
            return optax.apply_updates(p, updates), s, loss

        pstep = jax.jit(pure_step, donate_argnums=(0, 1))
        p = jax.tree.map(jnp.array, params)
        box = {"p": p, "s": opt.init(p)}

        def run_pure():
            box["p"], box["s"], loss = pstep(box["p"], box["s"], idx, tgt)
            return loss
        out["pure"] = run_pure
    if "nnx.jit" in variants:
        model = new_model(cfg, params)
        optimizer = nnx.Optimizer(model, tx(), wrt=nnx.Param)
        step = nnx.jit(nnx_train_step)
        out["nnx.jit"] = lambda: step(model, optimizer, idx, tgt)
    if "nnx tree" in variants:
        model_t = new_model(cfg, params)
        optimizer_t = nnx.Optimizer(model_t, tx(), wrt=nnx.Param)
        step_t = nnx.jit(nnx_train_step, graph=False)
        out["nnx tree"] = lambda: step_t(model_t, optimizer_t, idx, tgt)
    if "nnx partial" in variants:
        model_p = new_model(cfg, params)
        optimizer_p = nnx.Optimizer(model_p, tx(), wrt=nnx.Param)
        step_p = nnx.jit_partial(nnx_train_step, model_p, optimizer_p, graph=False)
        out["nnx partial"] = lambda: step_p(idx, tgt)
    if "split/merge" in variants:
        model_s = new_model(cfg, params)
        graphdef, state = nnx.split((model_s, nnx.Optimizer(model_s, tx(), wrt=nnx.Param)))

        def merged_step(state, idx, tgt):
            m, o = nnx.merge(graphdef, state)
            loss = nnx_train_step(m, o, idx, tgt)
            return nnx.state((m, o)), loss

        step_s = jax.jit(merged_step, donate_argnums=0)
        sbox = {"s": state}

        def run_split():
            sbox["s"], loss = step_s(sbox["s"], idx, tgt)
            return loss
        out["split/merge"] = run_split
    return out


def infer_contenders(cfg, params, idx, variants):
    out = {}
    if "pure" in variants:
        f = jax.jit(lambda p, idx: gpt.forward(p, cfg, idx)[0])
        out["pure"] = lambda: f(params, idx)
    if "nnx.jit" in variants:
        model = new_model(cfg, params)
        g = nnx.jit(lambda m, idx: m(idx))
        out["nnx.jit"] = lambda: g(model, idx)
    if "nnx tree" in variants:
        model_t = new_model(cfg, params)
        gt = nnx.jit(lambda m, idx: m(idx), graph=False)
        out["nnx tree"] = lambda: gt(model_t, idx)
    if "nnx partial" in variants:
        model_p = new_model(cfg, params)
        gp = nnx.jit_partial(lambda m, idx: m(idx), model_p, graph=False)
        out["nnx partial"] = lambda: gp(idx)
    if "split/merge" in variants:
        graphdef, state = nnx.split(new_model(cfg, params))
        h = jax.jit(lambda s, idx: nnx.merge(graphdef, s)(idx))
        out["split/merge"] = lambda: h(state, idx)
    return out


# ---- measurement -----------------------------------------------------------------------------------
def measure(contenders: dict, rounds: int, steps: int, label: str, compiles: int = 2) -> dict:
    names = list(contenders)
    res = {n: {"compiles": [], "times": []} for n in names}
    for c in range(compiles):  # compile = first call after jax.clear_caches(); order alternates
        jax.clear_caches()
        for n in (names if c % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            jax.block_until_ready(contenders[n]())
            res[n]["compiles"].append(time.perf_counter() - t0)
    for n in names:
        res[n]["compile"] = min(res[n]["compiles"])
        jax.block_until_ready(contenders[n]())  # one warm call
    print(f"  [{label}] compile (s): "
          + ", ".join(f"{n} {'/'.join(f'{t:.2f}' for t in res[n]['compiles'])}" for n in names))
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            fn = contenders[n]
            t0 = time.perf_counter()
            for _ in range(steps):
                jax.block_until_ready(fn())
            res[n]["times"].append((time.perf_counter() - t0) / steps)
        print(f"  [{label}] round {r + 1}/{rounds}: "
              + ", ".join(f"{n} {fmt_t(res[n]['times'][-1])}" for n in names), flush=True)
    base = res["pure"]["times"]
    for n in names:
        t = res[n]["times"]
        res[n]["median"] = statistics.median(t)
        res[n]["ratio"] = res[n]["median"] / statistics.median(base)
        res[n]["paired"] = statistics.median(a / b for a, b in zip(t, base))
    return res


def fmt_t(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s >= 1e-2 else f"{s * 1e6:.0f} us"


def check_forward(cfg, params, idx):
    ref, _ = jax.jit(lambda p, i: gpt.forward(p, cfg, i))(params, idx)
    got = nnx.jit(lambda m, i: m(i))(new_model(cfg, params), idx)
    diff = float(jnp.max(jnp.abs(ref - got)))
    print(f"forward agreement {cfg.n_layer}L/{cfg.n_embd}: max |diff| = {diff:.2e} "
          f"(logit scale {float(jnp.max(jnp.abs(ref))):.2f})", flush=True)
    if not diff < 1e-5:
        sys.exit(f"ABORT: NNX and pytree forwards disagree (max |diff| {diff:.3e} >= 1e-5)")
    return diff


def check_training(cfg, params, idx, tgt, variants):
    """Three AdamW steps per contender must give the same losses (so the updates agree too)."""
    cs = train_contenders(cfg, params, idx, tgt, variants)
    losses = {n: [float(c()) for _ in range(3)] for n, c in cs.items()}
    worst = max(abs(a - b) for n in losses for a, b in zip(losses[n], losses["pure"]))
    print(f"training agreement (3 AdamW steps, tiny): max |loss diff| = {worst:.2e}; "
          f"pure losses {[round(x, 5) for x in losses['pure']]}", flush=True)
    if not worst < 1e-5:
        sys.exit(f"ABORT: training steps disagree: {losses}")
    return worst


def code_lines(src: str) -> int:
    """Lines of code: not blank, not a comment, not inside a docstring."""
    n, in_doc = 0, False
    for line in src.splitlines():
        s = line.strip()
        if in_doc:
            in_doc = not (s.endswith('"""') or s.endswith("'''"))
            continue
        if s.startswith(('"""', "'''")):
            in_doc = not (len(s) > 3 and (s.endswith('"""') or s.endswith("'''")))
            continue
        if s and not s.startswith("#"):
            n += 1
    return n


def line_counts() -> dict:
    here = open(os.path.abspath(__file__)).read()
    nnx_src = here.split("# ==== the NNX model", 1)[1].split("# ==== END NNX MODEL", 1)[0]
    fwd = inspect.getsource(gpt.forward)
    return {
        "nnx": code_lines(nnx_src),
        "nnx_load": code_lines(inspect.getsource(load_pytree)),
        "pytree": code_lines(inspect.getsource(gpt.init_params)) + code_lines(fwd),
        "pytree_cache": sum("cache" in ln for ln in fwd.splitlines()[1:] if ln.strip()
                            and not ln.strip().startswith(("#", '"""'))),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (medians over these)")
    ap.add_argument("--steps", type=int, default=2, help="cpu-d4 training steps per contender per round")
    ap.add_argument("--small-steps", type=int, default=60,
                    help="tiny-model training / inference calls per contender per round")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 rounds, few steps, cpu-d4 cut to B=2, T=128")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps, args.small_steps = 2, 1, 10
    t_start = time.perf_counter()
    all_variants = ["pure", "nnx.jit", "nnx tree", "nnx partial", "split/merge"]
    big_variants = ["pure", "nnx.jit", "split/merge"]  # per-call overhead is noise at this size

    big = preset("cpu-d4", window_pattern="L")
    bB, bT = (2, 128) if args.quick else (8, 512)
    tiny = GPTConfig(n_layer=2, n_embd=64, n_head=1, n_kv_head=1, head_dim=64, vocab_size=8192,
                     sequence_len=512, window_pattern="L")
    tB, tT = 1, 64

    def batch(cfg, B, T, seed):
        toks = jax.random.randint(jax.random.PRNGKey(seed), (B, T + 1), 0, cfg.vocab_size)
        return toks[:, :-1], toks[:, 1:]

    print(f"jax {jax.__version__} ({jax.default_backend()}), flax {flax.__version__}, "
          f"optax {optax.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs; "
          f"load avg {os.getloadavg()}", flush=True)
    big_params, tiny_params = make_params(big), make_params(tiny)
    bidx, btgt = batch(big, bB, bT, 1)
    tidx, ttgt = batch(tiny, tB, tT, 2)
    one = jnp.array([[7]], jnp.int32)
    check_forward(big, big_params, bidx)
    check_forward(tiny, tiny_params, tidx)
    check_forward(tiny, tiny_params, one)
    check_training(tiny, tiny_params, tidx, ttgt, all_variants)

    results = {}
    print(f"cpu-d4 training step, B={bB} T={bT}", flush=True)
    results[f"train cpu-d4 (B={bB}, T={bT})"] = measure(
        train_contenders(big, big_params, bidx, btgt, big_variants), args.rounds, args.steps, "cpu-d4")
    print(f"tiny training step, B={tB} T={tT}", flush=True)
    results[f"train tiny (2L/64, B={tB}, T={tT})"] = measure(
        train_contenders(tiny, tiny_params, tidx, ttgt, all_variants), args.rounds,
        args.small_steps, "tiny train")
    print("tiny single-token forward, B=1 T=1", flush=True)
    results["infer tiny (2L/64, B=1, T=1)"] = measure(
        infer_contenders(tiny, tiny_params, one, all_variants), args.rounds, args.small_steps * 5,
        "tiny infer")

    lc = line_counts()
    cmd = "python bench/nnx_vs_pytree.py" + "".join(f" {a}" for a in sys.argv[1:])
    lines = [
        f"Command: `{cmd}` (rounds={args.rounds}, steps={args.steps}, small-steps={args.small_steps},"
        f" inference calls/round={args.small_steps * 5})",
        "",
        "| shape | contender | compile, best of 2 (s) | median step | vs pure (ratio of medians) "
        "| vs pure (median per-round ratio) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for shape, res in results.items():
        for n, r in res.items():
            lines.append(f"| {shape} | {n} | {r['compile']:.2f} | {fmt_t(r['median'])} | "
                         f"{r['ratio']:.2f}x | {r['paired']:.2f}x |")
    lines += [
        "",
        f"Code lines (non-blank, non-comment, no docstrings): NNX model classes {lc['nnx']} "
        f"(+{lc['nnx_load']} for `load_pytree`, the pytree->NNX weight copy) vs gpt.py "
        f"`init_params` + `forward` {lc['pytree']}, of which {lc['pytree_cache']} lines of "
        "`forward` handle the KV cache the NNX version omits.",
        f"Total script time {time.perf_counter() - t_start:.0f} s; load avg at end {os.getloadavg()}.",
    ]
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
