"""The model side of bench/accelerator_check.py's proving run (its docstring says what each
measures and why): the real train step timed, the inference engine's prefill and decode, and
attention numerics against an f32 reference. Each `*_section` function is one section of that
run, returns its JSON record and raises on failure (the runner records the error and goes on).

These import only jax, numpy, optax and this repo's lean model modules: the run checks that
none of its FORBIDDEN packages (orbax, tqdm, tiktoken ...) is loaded by the end of them.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import accelerator_host  # bench/accelerator_host.py: the profile's summary

from nanocode.attention import attend, resolve_attn_impl
from nanocode.config import flops_per_token, param_counts, preset
from nanocode.engine import Engine
from nanocode.gpt import init_params
from nanocode.sharding import batch_sharding, make_mesh, tree_shardings
from train.base import next_token_loss
from train.loop import make_train_step, peak_flops
from train.optim import build_optimizer


def mib(n) -> float | None:
    return None if n is None else round(n / 2**20, 1)


def device_peak_bytes():
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - not every backend has it
        stats = None
    return (stats or {}).get("peak_bytes_in_use")


def overrides(shape: dict) -> dict:
    """The shape's config fields beyond its preset (the v5e shape's vocabulary)."""
    return {"vocab_size": shape["vocab_size"]} if "vocab_size" in shape else {}


# ---- 1. the real train step ---------------------------------------------------------------------
def train_section(shape: dict, attn_impl: str, dtype: str, remat: str | None, deadline: float,
                  profile_steps: int = 0, optimizer_share: bool = False) -> dict:
    """The step of `shape`, timed (fewer timed steps once time.perf_counter() passes `deadline`);
    then, optionally, `profile_steps` more steps under jax.profiler (summarised) and the same step
    with optax.identity() in place of the optimizer, timed the same way (the optimizer's share =
    1 - its median / the step's). `remat` (the --remat flag) overrides the shape's."""
    remat = remat or shape.get("remat")
    cfg = preset(shape["preset"], sequence_len=shape["seq_len"], compute_dtype=dtype, attn_impl=attn_impl,
                 **({"remat": remat} if remat else {}), **overrides(shape))
    rows, accum = shape["rows"], shape.get("accum", 1)
    step_fn, state, batches, jit_with = placed_train_step(cfg, rows, accum)
    compiled, aot = compile_ahead(step_fn, state, batches[0])

    losses = []
    t = time.perf_counter()
    state, m = compiled(state, batches[0])
    jax.block_until_ready((state, m))
    first_step_s = time.perf_counter() - t
    losses.append(float(m["loss"]))
    state, times = timed_steps(compiled, state, batches, shape, deadline, losses)
    peak_bytes = device_peak_bytes()
    extra = {}
    if profile_steps:
        state, extra["profile"] = profiled_steps(compiled, state, batches, profile_steps)
    if optimizer_share:
        plain = optax.identity()
        plain_state = (state[0], plain.init(state[0]))  # identity's state is empty
        plain_step = jit_with(plain, plain_state[1]).lower(plain_state, batches[0]).compile()
        del compiled
        plain_state, m = plain_step(plain_state, batches[0])  # donates the params
        _, plain_times = timed_steps(plain_step, plain_state, batches, shape, deadline, [])
        share = 1 - statistics.median(plain_times) / statistics.median(times)
        extra["optimizer_share"] = {"step_s_without_optimizer": statistics.median(plain_times),
                                    "share_of_step": share, "method": "the same step with optax.identity()"}
    del state
    return {**train_record(cfg, rows, accum, aot, first_step_s, times, losses, peak_bytes, shape["warmup"]),
            **extra}


def placed_train_step(cfg, rows: int, accum: int = 1):
    """Exactly train.loop.run's placement and jit, on a 1-device mesh (data=1, fsdp=1):
    (the jitted step, its state (params, optimizer state), two batches of (accum, rows, T) inputs
    and targets (one update of accum micro-batches), jit_with(optimizer, its state) -> the same
    step jitted for another optimizer)."""
    T = cfg.sequence_len
    mesh = make_mesh("", devices=jax.devices()[:1])
    params = init_params(cfg, jax.random.PRNGKey(0))
    optimizer = build_optimizer(cfg, params, total_steps=1000, batch_tokens=accum * rows * T)
    p_shard = tree_shardings(params, mesh)
    params = jax.device_put(params, p_shard)
    o_shard = tree_shardings(jax.eval_shape(optimizer.init, params), mesh)
    opt_state = jax.jit(optimizer.init, out_shardings=o_shard)(params)
    bs = batch_sharding(mesh)

    def jitted(opt, o_shard):
        return jax.jit(make_train_step(next_token_loss(cfg), opt), donate_argnums=0,
                       in_shardings=((p_shard, o_shard), bs), out_shardings=((p_shard, o_shard), None))
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(2):
        tokens = rng.integers(0, cfg.vocab_size, (accum, rows, T + 1), dtype=np.int32)  # (accum, rows, T+1)
        host = {"inputs": tokens[..., :-1], "targets": tokens[..., 1:]}  # (accum, rows, T) each
        batches.append(jax.tree.map(lambda x: jax.make_array_from_process_local_data(bs, x), host))
    return (jitted(optimizer, o_shard), (params, opt_state), batches,
            lambda opt, opt_state: jitted(opt, tree_shardings(opt_state, mesh)))


def compile_ahead(step_fn, state, batch):
    """AOT lower + compile of the jitted step: the executable train.loop.run's first call would
    build, with compile time measured apart from the first step's run; the steps call it
    directly. (compiled, {lower_s, compile_s, memory: memory_analysis() or None, xla_flops})."""
    t = time.perf_counter()
    lowered = step_fn.lower(state, batch)
    lower_s = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t
    try:
        mem = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend has it
        mem = None
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        xla_flops = float(cost.get("flops", float("nan")))
    except Exception:  # noqa: BLE001
        xla_flops = None
    return compiled, {"lower_s": lower_s, "compile_s": compile_s, "memory": mem, "xla_flops": xla_flops}


def timed_steps(compiled, state, batches, shape: dict, deadline: float, losses: list):
    """(state, step times): the shape's warm-up steps but the first (already run), then its timed
    ones (at least 2, fewer than asked once past `deadline`); appends each step's loss to `losses`."""
    times = []
    for i in range(shape["warmup"] - 1 + shape["steps"]):
        if time.perf_counter() > deadline and len(times) >= 2:
            break  # the budget is near: keep what we have
        t = time.perf_counter()
        state, m = compiled(state, batches[(i + 1) % 2])
        jax.block_until_ready((state, m))
        if i >= shape["warmup"] - 1:
            times.append(time.perf_counter() - t)
        losses.append(float(m["loss"]))
    return state, times


def profiled_steps(compiled, state, batches, steps: int):
    """(state, profile record): `steps` steps under jax.profiler, the trace summarised by op name
    and kind (accelerator_host.profile_summary), with the device's busy share of their wall time."""
    with tempfile.TemporaryDirectory(prefix="nanocode-profile-") as trace_dir:
        with jax.profiler.trace(trace_dir):
            t = time.perf_counter()
            for i in range(steps):
                state, m = compiled(state, batches[i % 2])
            jax.block_until_ready((state, m))
            wall_ms = 1000 * (time.perf_counter() - t)
        hlo = compiled.as_text()
        summary = accelerator_host.profile_summary(trace_dir, kinds=accelerator_host.hlo_op_kinds(hlo),
                                                   labels=accelerator_host.hlo_op_labels(hlo))
    # busy / wall: the device's share of the profiled steps' wall time (the rest: waits on the host)
    return state, {"steps": steps, "wall_ms": round(wall_ms, 3),
                   "device_busy_share": round(summary["busy_ms"] / wall_ms, 4)
                   if summary["lanes"] == "device ops" else None, **summary}


def train_record(cfg, rows: int, accum: int, aot: dict, first_step_s: float, times: list, losses: list,
                 peak_bytes, warmup: int) -> dict:
    """The train section's JSON record from what it measured: times, throughput, MFU, memory."""
    mem = aot["memory"]
    sizes = {k: getattr(mem, f"{k}_size_in_bytes", None) if mem else None
             for k in ("argument", "output", "alias", "temp", "generated_code")}
    try:
        analysed = sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"]
    except TypeError:
        analysed = None
    T = cfg.sequence_len
    tokens_per_step = accum * rows * T
    fpt = flops_per_token(cfg, T)
    device = jax.devices()[0]
    peak = peak_flops(device)
    med = statistics.median(times)
    tok_s = tokens_per_step / med
    return {
        "config": cfg.to_dict(),
        "attn_impl_resolved": resolve_attn_impl(cfg),
        "params": param_counts(cfg)["total"],
        "batch_shape": [accum, rows, T],  # (accum, rows, T)
        "tokens_per_step": tokens_per_step,
        "lower_s": round(aot["lower_s"], 3),
        "compile_s": round(aot["compile_s"], 3),
        "first_step_s": round(first_step_s, 4),
        "warmup_steps": warmup,
        "timed_steps": len(times),
        "step_s_median": med,
        "step_s_min": min(times),
        "step_s_mean": statistics.fmean(times),
        "step_s_all": [round(x, 5) for x in times],
        "tokens_per_s": tok_s,
        "flops_per_token": fpt,
        "peak_flops": peak,
        "peak_flops_source": "measured f32 matmul (CPU)" if device.platform == "cpu"
        else "train.loop.PEAK_FLOPS table",
        "mfu": tok_s * fpt / peak,
        "xla_flops_per_step": aot["xla_flops"],  # XLA's cost analysis: custom calls (cuDNN) may count 0
        "formula_flops_per_step": fpt * tokens_per_step,
        "losses": losses,
        "loss_finite": all(math.isfinite(x) for x in losses),
        "peak_memory_mib": mib(peak_bytes if peak_bytes is not None else analysed),
        "peak_memory_source": "device.memory_stats()['peak_bytes_in_use']" if peak_bytes is not None
        else "compiled.memory_analysis(): argument + output - alias + temp",
        "memory_analysis_mib": {k: mib(v) for k, v in sizes.items()},
    }


# ---- 2. the inference engine: prefill, decode at batch 1 and 8 ---------------------------------
def engine_section(shape: dict, attn_impl: str, dtype: str) -> dict:
    """Engine.prefill of a prompt of the shape's prefill_len, then Engine.decode of its
    decode_tokens, at batch 1 and 8: tokens/s of each, after a compiling warm-up round."""
    cfg = preset(shape["preset"], sequence_len=shape["seq_len"], compute_dtype=dtype, attn_impl=attn_impl,
                 **overrides(shape))
    params = init_params(cfg, jax.random.PRNGKey(1))
    engine = Engine(params, cfg, max_len=cfg.sequence_len,
                    dtype=None if dtype == "float32" else dtype)
    P, N = shape["prefill_len"], shape["decode_tokens"]
    rng = np.random.default_rng(1)
    out = {"method": "Engine.prefill, then Engine.decode (the fused while_loop that "
                     "Engine.generate runs; batch 8 = 8 equal-length prompts), stop=()",
           "engine_dtype": engine.cfg.compute_dtype, "max_len": engine.max_len,
           "buckets": list(engine.buckets), "prefill_len": P, "decode_tokens": N,
           "attn_impl_cached": "xla (fused kernels do not take a KV cache; gpt.attend falls back)"}
    for B in (1, 8):
        ids = rng.integers(0, cfg.vocab_size, (B, P), dtype=np.int32)  # (B, P)

        def prefilled():
            cache = engine.new_cache(B)  # k (L, B, K, D, max_len), v (L, B, K, max_len, D)
            jax.block_until_ready(cache)
            t = time.perf_counter()
            logits, cache = engine.prefill(cache, ids, 0)  # logits (B, V)
            jax.block_until_ready((logits, cache))
            return logits, cache, time.perf_counter() - t

        t = time.perf_counter()
        logits, cache, _ = prefilled()
        engine.decode(cache, logits, P, N, stops=())  # warm-up: compiles prefill and decode
        warm_s = time.perf_counter() - t
        prefill_s, decode_s = [], []
        for _ in range(shape["prefill_repeats"]):
            logits, cache, dt = prefilled()
            prefill_s.append(dt)
        for _ in range(2):
            logits, cache, _ = prefilled()
            t = time.perf_counter()
            rows = engine.decode(cache, logits, P, N, stops=())  # B lists of N ids (host sync)
            decode_s.append(time.perf_counter() - t)
            if [len(r) for r in rows] != [N] * B:
                raise AssertionError(f"decode returned lengths {[len(r) for r in rows]}, "
                                     f"expected {N} each")
        p, d = statistics.median(prefill_s), statistics.median(decode_s)
        out[f"batch{B}"] = {
            "warmup_compile_s": round(warm_s, 3),
            "prefill_s": p, "prefill_tokens_per_s": B * P / p,
            "decode_s": d, "decode_ms_per_step": 1000 * d / N, "decode_tokens_per_s": B * N / d,
        }
    out["peak_mib_in_use_process"] = mib(device_peak_bytes())
    return out


# ---- 3. attention numerics: fused vs XLA vs an f32 reference ------------------------------------
def reference_attention(q, k, v, window):
    """Plain softmax attention in f32, written from the mask's definition (a query at i sees keys
    i - window .. i), independent of gpt.attend. q, k, v (B, T, H, D) -> (B, T, H, D)."""
    T, D = q.shape[1], q.shape[-1]
    hi = jax.lax.Precision.HIGHEST  # no TF32 / bf16 passes for the f32 reference on GPU
    scores = jnp.einsum("bthd,bshd->bhts", q, k, precision=hi) / math.sqrt(D)  # (B, H, T, S)
    i, j = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
    scores = jnp.where((j <= i) & (i - j <= window), scores, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v, precision=hi)


def numerics_section(shape: dict, dtype: str, impls: list[str]) -> dict:
    """Max abs error of the output and of dq, dk, dv of each of the two attention `impls` against
    reference_attention in f32, causal and at the shape's short window; raises (keeping what it
    measured) if an impl fails."""
    B, T, H, D = shape["attn_shape"]
    dt = jnp.dtype(dtype)
    kq, kk, kv, kc = jax.random.split(jax.random.PRNGKey(2), 4)
    q, k, v, ct = (jax.random.normal(key, (B, T, H, D), jnp.float32).astype(dt)  # (B, T, H, D)
                   for key in (kq, kk, kv, kc))
    names = ("out", "dq", "dk", "dv")

    def fwd_bwd(fn):  # -> jitted (q, k, v, ct) -> (out, dq, dk, dv), each (B, T, H, D)
        def f(q, k, v, ct):
            o, vjp = jax.vjp(fn, q, k, v)
            return (o, *vjp(ct))
        return jax.jit(f)

    def max_err(got, ref):
        return {n: float(jnp.max(jnp.abs(g.astype(jnp.float32) - r.astype(jnp.float32))))
                for n, g, r in zip(names, got, ref)}

    out = {"shape_BTHD": [B, T, H, D], "dtype": dtype, "impls": impls,
           "reference": "reference_attention: plain softmax attention in float32 on the same "
                        "values, einsums at Precision.HIGHEST"}
    errors = []
    for case, window in (("causal", T), ("sliding", shape["short_window"])):
        f32 = [x.astype(jnp.float32) for x in (q, k, v, ct)]
        ref = jax.block_until_ready(
            fwd_bwd(lambda q, k, v: reference_attention(q, k, v, window))(*f32))
        rec = {"window": window, "ref_max_abs": {n: float(jnp.max(jnp.abs(r))) for n, r in zip(names, ref)}}
        got = {}
        for impl in impls:
            try:
                got[impl] = jax.block_until_ready(fwd_bwd(
                    lambda q, k, v, impl=impl: attend(q, k, v, window=window, impl=impl))(q, k, v, ct))
                rec[impl] = max_err(got[impl], ref)
            except Exception as e:  # noqa: BLE001 - one impl failing is a result too
                rec[impl] = {"error": f"{type(e).__name__}: {e}"[:2000]}
                errors.append(f"{case}/{impl}: {rec[impl]['error']}")
        a, b = impls
        if a in got and b in got:  # the two impls against each other on the same inputs
            rec[f"{a}_vs_{b}"] = max_err(got[a], got[b])
        out[case] = rec
    if errors:  # the section fails, but keeps what it measured
        raise RuntimeError("; ".join(errors) + " | measured: " + json.dumps(out)[:3000])
    out["max_abs_err"] = max(out[c][i][n] for c in ("causal", "sliding") for i in impls
                             for n in names)
    return out
