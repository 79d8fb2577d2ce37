"""The GPU proving run: one script, under 8 minutes on one H200, writing every number to one JSON.

Sections, each recorded with status "ok" | "error" | "skipped" (a failing section keeps its
error and traceback, and the script goes on to the next), in this order: jax (the version and
the jax functions the code relies on), train (below; with a 3-step jax.profiler trace
summarised), engine, numerics, then the host side (bench/accelerator_host.py): loader (tokens/s of
one core against what the measured step consumes), save (a d20-size state through the
background checkpoint writer), and last, if time remains, train_d20 (the d20 step, with the
optimizer's share of a step timed apart: the same step with optax.identity()).

1. train: the real train step, train.loop.make_train_step(train.base.next_token_loss(cfg),
   train.optim.build_optimizer(...)), jitted with donation and shardings exactly as
   train.loop.run does, on a 1-device mesh (make_mesh / tree_shardings / batch_sharding), for
   d12 (286M params) in bf16 with cuDNN attention at device batch 16 x 2048. Reports lower and
   compile time, median / min / mean step time over --steps timed steps after --warmup steps,
   tokens/s, MFU (nanocode.config.flops_per_token over train.loop.peak_flops()), peak memory
   (device.memory_stats()["peak_bytes_in_use"], plus the compiled step's memory_analysis()),
   and XLA's own flop count of the step as a cross-check of the formula. If cuDNN attention
   fails there, the same step is retried with XLA attention as section "train_xla".
2. engine: nanocode.engine.Engine in bf16: Engine.prefill of a --prefill-len prompt (tokens/s),
   and the decode that Engine.generate runs (Engine.decode, the fused lax.while_loop decoder) of
   --decode-tokens new tokens after that prompt at batch 1 and batch 8 (Engine has batched
   generate, so batch 8 is 8 equal-length prompts, not a hand-driven decode step). The prefill
   is timed separately from the decode; compiles are done by a warm-up round first.
3. numerics: nanocode.gpt.attend (jax.nn.dot_product_attention underneath) with impl "cudnn"
   and "xla" on the same bf16 q, k, v (d12's head shapes), causal and sliding window: max abs
   error of the output and of dq, dk, dv (vjp of a fixed random cotangent) against an f32 XLA
   reference at matmul precision "highest" on the same values.

Impls and dtypes follow jax.default_backend() and are recorded: gpu -> bf16 + cudnn (numerics:
cudnn and xla), tpu -> bf16 + splash, cpu -> float32 + the block-causal einsum (numerics: einsum
and xla, all in f32). --tiny runs the three sections at cpu-d2 / seq 128 in well under a minute
on a CPU (tests/test_accelerator_check.py does). A global budget (--budget-s, default 450 s)
skips a section when less time is left than it needs. The JSON is rewritten after every
section, so a run killed by a timeout still leaves what it had.

On the GPU machine (its own jax/optax; this project not installed), from the repository root:

    PYTHONPATH=. python bench/accelerator_check.py --out $OUT/accelerator_check.json

Imports: the model sections use only jax, numpy, optax and this repo's
nanocode.{config,gpt,engine,sharding} and train.{loop,base,optim} (train/loop.py imports
checkpointing, orbax, only inside `run`); the JSON lists which of textual, datasets, tiktoken,
orbax, tqdm were imported by the end of those sections (it should be none). The host sections
import what they test (orbax, pyarrow, the tokenizer's packages); where one is missing, that
section records the error.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

FORBIDDEN = ("textual", "datasets", "tiktoken", "orbax", "tqdm")  # (jax itself imports etils)

# Per-shape sizes. "need_s": the least time a section needs (compiles included) to be started.
SHAPES = {
    "d12": dict(preset="d12", seq_len=2048, rows=16, warmup=2, steps=10,
                prefill_len=1024, decode_tokens=256, prefill_repeats=3,
                attn_shape=(2, 2048, 6, 128), short_window=512,
                profile_steps=3, loader_s=10, save_preset="d20",
                big=dict(preset="d20", seq_len=2048, rows=8, warmup=2, steps=5),
                need_s={"jax": 1, "train": 150, "train_xla": 150, "engine": 90, "numerics": 30,
                        "loader": 45, "save": 60, "train_d20": 150}),
    # the v5e speedrun's shape (train/speedrun.py): d6 at vocab 8,192, 32 rows, no recomputation
    "v5e": dict(preset="d6", vocab_size=8192, seq_len=2048, rows=32, remat="none", warmup=2, steps=10,
                prefill_len=1024, decode_tokens=256, prefill_repeats=3,
                attn_shape=(2, 2048, 3, 128), short_window=512,
                profile_steps=3, loader_s=10, save_preset="d12",
                big=dict(preset="d12", seq_len=2048, rows=16, remat="block", warmup=2, steps=5),
                need_s={"jax": 1, "train": 90, "train_xla": 90, "engine": 60, "numerics": 30,
                        "loader": 45, "save": 40, "train_d20": 120}),
    "tiny": dict(preset="cpu-d2", seq_len=128, rows=4, warmup=1, steps=3,
                 prefill_len=64, decode_tokens=32, prefill_repeats=2,
                 attn_shape=(1, 256, 2, 64), short_window=64,
                 profile_steps=2, loader_s=2, save_preset="cpu-d2",
                 big=dict(preset="cpu-d2", seq_len=128, rows=2, warmup=2, steps=3),
                 need_s={"jax": 0, "train": 5, "train_xla": 5, "engine": 5, "numerics": 2,
                         "loader": 2, "save": 2, "train_d20": 5}),
}

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--shape", choices=sorted(SHAPES), default="d12")
ap.add_argument("--tiny", action="store_true", help="same as --shape tiny")
ap.add_argument("--out", default="accelerator_check.json")
ap.add_argument("--budget-s", type=float, default=470.0, help="whole-run time budget")
ap.add_argument("--rows", type=int, help="device batch rows (default by shape)")
ap.add_argument("--steps", type=int, help="timed train steps (default by shape)")
ap.add_argument("--remat", choices=["none", "block", "dots"], help="what the train sections' backward recomputes: none | block | dots "
                "(default: none, as config.preset builds it)")
ap.add_argument("--big-rows", type=int, help="device batch rows of the d20 section (default by shape)")
ap.add_argument("--dtype", help="compute dtype (default: float32 on CPU, else bfloat16)")
ap.add_argument("--attn", help="train attention impl (default: cudnn on GPU, splash on TPU, "
                "einsum on CPU)")
ap.add_argument("--sections", help="comma-separated sections to run (default: all; e.g. train,train_d20 "
                "for the steps alone)")
ap.add_argument("--lever", action="append", default=[], metavar="MODULE.NAME=VALUE",
                help="set a module constant before the run, to A/B a performance lever in one run "
                "(e.g. nanocode.kernels.HEAD_CHUNK_ROWS=8192); repeatable, recorded in the report")
args = ap.parse_args()
S = dict(SHAPES["tiny" if args.tiny else args.shape])
S["rows"] = args.rows or S["rows"]
S["steps"] = args.steps or S["steps"]
S["big"] = {**S["big"], "rows": args.big_rows or S["big"]["rows"]}
T0 = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import accelerator_host  # noqa: E402  (bench/accelerator_host.py: the host-side sections)

from nanocode.config import flops_per_token, param_counts, preset  # noqa: E402
from nanocode.engine import Engine  # noqa: E402
from nanocode.attention import attend, resolve_attn_impl  # noqa: E402
from nanocode.gpt import init_params  # noqa: E402
from nanocode.sharding import batch_sharding, make_mesh, tree_shardings  # noqa: E402
from train.base import next_token_loss  # noqa: E402
from train.loop import make_train_step, peak_flops  # noqa: E402
from train.optim import build_optimizer  # noqa: E402

LEVERS = {}
for lever in args.lever:
    target, _, value = lever.partition("=")
    module, _, name = target.rpartition(".")
    if not hasattr(importlib.import_module(module), name):
        sys.exit(f"--lever {lever}: {module} has no {name} (the lever must name an existing constant)")
    setattr(sys.modules[module], name, ast.literal_eval(value))
    LEVERS[target] = ast.literal_eval(value)

BACKEND = jax.default_backend()
DEVICE = jax.devices()[0]
DTYPE = args.dtype or ("float32" if BACKEND == "cpu" else "bfloat16")
ATTN = args.attn or {"gpu": "cudnn", "tpu": "splash"}.get(BACKEND, "einsum")
NUMERICS_IMPLS = {"gpu": ["cudnn", "xla"], "tpu": ["splash", "xla"]}.get(BACKEND, ["einsum", "xla"])

report = {
    "script": "bench/accelerator_check.py",
    "argv": sys.argv[1:],
    "shape_name": "tiny" if args.tiny else args.shape,
    "jax_version": jax.__version__,
    "python": platform.python_version(),
    "backend": BACKEND,
    "device_kind": DEVICE.device_kind,
    "device_count": jax.device_count(),
    "compute_dtype": DTYPE,
    "attn_impl": ATTN,
    "budget_s": args.budget_s,
    "levers": LEVERS,
    "sizes": {k: v for k, v in S.items() if k != "need_s"},
    "sections": {},
    "host_sections_started": False,
}


def elapsed() -> float:
    return time.perf_counter() - T0


def write_report():
    report["elapsed_s"] = round(elapsed(), 2)
    if not report["host_sections_started"]:  # what the model sections imported (the host ones import more)
        report["forbidden_modules_imported"] = sorted(m for m in FORBIDDEN if m in sys.modules)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")


def section(name, fn, *fn_args):
    """Run one section under the budget; record its result dict, or its error, and go on."""
    need = S["need_s"][name]
    left = args.budget_s - elapsed()
    if args.sections and name.removesuffix("_xla") not in args.sections.split(","):
        rec = {"status": "skipped", "reason": "not in --sections"}
    elif left < need:
        rec = {"status": "skipped", "reason": f"{left:.0f} s of the budget left, needs ~{need} s"}
    else:
        t, cpu = time.perf_counter(), time.process_time()
        try:
            rec = {"status": "ok", **fn(*fn_args)}
        except Exception as e:  # noqa: BLE001 - the point is to record it and go on
            rec = {"status": "error", "error": f"{type(e).__name__}: {e}"[:4000],
                   "traceback": traceback.format_exc()[-6000:]}
        rec["section_s"] = round(time.perf_counter() - t, 2)
        rec["section_cpu_s"] = round(time.process_time() - cpu, 2)  # host CPU time, all threads
    report["sections"][name] = rec
    write_report()
    print(f"[{elapsed():6.1f} s] {name}: {rec['status']}"
          + (f" ({rec.get('error') or rec.get('reason')})" if rec["status"] != "ok" else ""),
          flush=True)
    return rec


def mib(n) -> float | None:
    return None if n is None else round(n / 2**20, 1)


def device_peak_bytes():
    try:
        stats = DEVICE.memory_stats()
    except Exception:  # noqa: BLE001 - not every backend has it
        stats = None
    return (stats or {}).get("peak_bytes_in_use")


# ---- 1. the real train step ---------------------------------------------------------------------
def overrides(shape: dict) -> dict:
    """The shape's config fields beyond its preset (the v5e shape's vocabulary)."""
    return {"vocab_size": shape["vocab_size"]} if "vocab_size" in shape else {}


def train_section(attn_impl: str, shape: dict | None = None, profile_steps: int = 0,
                  optimizer_share: bool = False) -> dict:
    """The step of `shape` (default: the run's), timed; then, optionally, `profile_steps` more
    steps under jax.profiler (summarised) and the same step with optax.identity() in place of the
    optimizer, timed the same way (the optimizer's share = 1 - its median / the step's)."""
    shape = shape or S
    remat = args.remat or shape.get("remat")
    cfg = preset(shape["preset"], sequence_len=shape["seq_len"], compute_dtype=DTYPE, attn_impl=attn_impl,
                 **({"remat": remat} if remat else {}), **overrides(shape))
    T, rows = cfg.sequence_len, shape["rows"]
    mesh = make_mesh("", devices=jax.devices()[:1])  # 1 device: data=1, fsdp=1
    params = init_params(cfg, jax.random.PRNGKey(0))
    optimizer = build_optimizer(cfg, params, total_steps=1000, batch_tokens=rows * T)
    # exactly train.loop.run's placement and jit
    p_shard = tree_shardings(params, mesh)
    params = jax.device_put(params, p_shard)
    o_shard = tree_shardings(jax.eval_shape(optimizer.init, params), mesh)
    opt_state = jax.jit(optimizer.init, out_shardings=o_shard)(params)

    def jitted(opt, o_shard):
        return jax.jit(make_train_step(next_token_loss(cfg), opt), donate_argnums=0,
                       in_shardings=((p_shard, o_shard), batch_sharding(mesh)),
                       out_shardings=((p_shard, o_shard), None))
    step_fn = jitted(optimizer, o_shard)
    bs = batch_sharding(mesh)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(2):
        tokens = rng.integers(0, cfg.vocab_size, (1, rows, T + 1), dtype=np.int32)  # (accum, rows, T+1)
        host = {"inputs": tokens[..., :-1], "targets": tokens[..., 1:]}  # (1, rows, T) each
        batches.append(jax.tree.map(lambda x: jax.make_array_from_process_local_data(bs, x), host))
    state = (params, opt_state)

    # AOT lower + compile of that same jit: the executable run()'s first call would build, with
    # compile time measured apart from the first step's run; the steps call it directly
    t = time.perf_counter()
    lowered = step_fn.lower(state, batches[0])
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

    def timed(compiled, state, losses):
        """(state, step times): the warm-up steps, then the timed ones (fewer near the budget's end)."""
        times = []
        for i in range(shape["warmup"] - 1 + shape["steps"]):
            if elapsed() > args.budget_s - 10 and len(times) >= 2:
                break  # the budget is near: keep what we have
            t = time.perf_counter()
            state, m = compiled(state, batches[(i + 1) % 2])
            jax.block_until_ready((state, m))
            if i >= shape["warmup"] - 1:
                times.append(time.perf_counter() - t)
            losses.append(float(m["loss"]))
        return state, times

    losses = []
    t = time.perf_counter()
    state, m = compiled(state, batches[0])
    jax.block_until_ready((state, m))
    first_step_s = time.perf_counter() - t
    losses.append(float(m["loss"]))
    state, times = timed(compiled, state, losses)
    peak_bytes = device_peak_bytes()
    extra = {}
    if profile_steps:
        with tempfile.TemporaryDirectory(prefix="nanocode-profile-") as trace_dir:
            with jax.profiler.trace(trace_dir):
                t = time.perf_counter()
                for i in range(profile_steps):
                    state, m = compiled(state, batches[i % 2])
                jax.block_until_ready((state, m))
                wall_ms = 1000 * (time.perf_counter() - t)
            hlo = compiled.as_text()
            summary = accelerator_host.profile_summary(trace_dir, kinds=accelerator_host.hlo_op_kinds(hlo),
                                                       labels=accelerator_host.hlo_op_labels(hlo))
            # busy / wall: the device's share of the profiled steps' wall time (the rest: waits on the host)
            extra["profile"] = {"steps": profile_steps, "wall_ms": round(wall_ms, 3),
                                "device_busy_share": round(summary["busy_ms"] / wall_ms, 4)
                                if summary["lanes"] == "device ops" else None, **summary}
    if optimizer_share:
        plain = optax.identity()
        plain_state = (state[0], plain.init(state[0]))  # identity's state is empty
        plain_step = jitted(plain, tree_shardings(plain_state[1], mesh)).lower(plain_state, batches[0]).compile()
        del compiled
        plain_state, m = plain_step(plain_state, batches[0])  # donates the params
        _, plain_times = timed(plain_step, plain_state, [])
        share = 1 - statistics.median(plain_times) / statistics.median(times)
        extra["optimizer_share"] = {"step_s_without_optimizer": statistics.median(plain_times),
                                    "share_of_step": share, "method": "the same step with optax.identity()"}
    del state

    sizes = {k: getattr(mem, f"{k}_size_in_bytes", None) if mem else None
             for k in ("argument", "output", "alias", "temp", "generated_code")}
    try:
        analysed = sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"]
    except TypeError:
        analysed = None
    tokens_per_step = rows * T
    fpt = flops_per_token(cfg, T)
    peak = peak_flops(DEVICE)
    med = statistics.median(times)
    tok_s = tokens_per_step / med
    return {
        "config": cfg.to_dict(),
        "attn_impl_resolved": resolve_attn_impl(cfg),
        "params": param_counts(cfg)["total"],
        "batch_shape": [1, rows, T],  # (accum, rows, T)
        "tokens_per_step": tokens_per_step,
        "lower_s": round(lower_s, 3),
        "compile_s": round(compile_s, 3),
        "first_step_s": round(first_step_s, 4),
        "warmup_steps": shape["warmup"],
        "timed_steps": len(times),
        "step_s_median": med,
        "step_s_min": min(times),
        "step_s_mean": statistics.fmean(times),
        "step_s_all": [round(x, 5) for x in times],
        "tokens_per_s": tok_s,
        "flops_per_token": fpt,
        "peak_flops": peak,
        "peak_flops_source": "measured f32 matmul (CPU)" if DEVICE.platform == "cpu"
        else "train.loop.PEAK_FLOPS table",
        "mfu": tok_s * fpt / peak,
        "xla_flops_per_step": xla_flops,  # XLA's cost analysis: custom calls (cuDNN) may count 0
        "formula_flops_per_step": fpt * tokens_per_step,
        "losses": losses,
        "loss_finite": all(math.isfinite(x) for x in losses),
        "peak_memory_mib": mib(peak_bytes if peak_bytes is not None else analysed),
        "peak_memory_source": "device.memory_stats()['peak_bytes_in_use']" if peak_bytes is not None
        else "compiled.memory_analysis(): argument + output - alias + temp",
        "memory_analysis_mib": {k: mib(v) for k, v in sizes.items()},
        **extra,
    }


# ---- 2. the inference engine: prefill, decode at batch 1 and 8 ---------------------------------
def engine_section() -> dict:
    cfg = preset(S["preset"], sequence_len=S["seq_len"], compute_dtype=DTYPE, attn_impl=ATTN, **overrides(S))
    params = init_params(cfg, jax.random.PRNGKey(1))
    engine = Engine(params, cfg, max_len=cfg.sequence_len,
                    dtype=None if DTYPE == "float32" else DTYPE)
    P, N = S["prefill_len"], S["decode_tokens"]
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
        for _ in range(S["prefill_repeats"]):
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


def numerics_section() -> dict:
    B, T, H, D = S["attn_shape"]
    dt = jnp.dtype(DTYPE)
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

    out = {"shape_BTHD": [B, T, H, D], "dtype": DTYPE, "impls": NUMERICS_IMPLS,
           "reference": "reference_attention: plain softmax attention in float32 on the same "
                        "values, einsums at Precision.HIGHEST"}
    errors = []
    for case, window in (("causal", T), ("sliding", S["short_window"])):
        f32 = [x.astype(jnp.float32) for x in (q, k, v, ct)]
        ref = jax.block_until_ready(
            fwd_bwd(lambda q, k, v: reference_attention(q, k, v, window))(*f32))
        rec = {"window": window, "ref_max_abs": {n: float(jnp.max(jnp.abs(r))) for n, r in zip(names, ref)}}
        got = {}
        for impl in NUMERICS_IMPLS:
            try:
                got[impl] = jax.block_until_ready(fwd_bwd(
                    lambda q, k, v, impl=impl: attend(q, k, v, window=window, impl=impl))(q, k, v, ct))
                rec[impl] = max_err(got[impl], ref)
            except Exception as e:  # noqa: BLE001 - one impl failing is a result too
                rec[impl] = {"error": f"{type(e).__name__}: {e}"[:2000]}
                errors.append(f"{case}/{impl}: {rec[impl]['error']}")
        a, b = NUMERICS_IMPLS
        if a in got and b in got:  # the two impls against each other on the same inputs
            rec[f"{a}_vs_{b}"] = max_err(got[a], got[b])
        out[case] = rec
    if errors:  # the section fails, but keeps what it measured
        raise RuntimeError("; ".join(errors) + " | measured: " + json.dumps(out)[:3000])
    out["max_abs_err"] = max(out[c][i][n] for c in ("causal", "sliding") for i in NUMERICS_IMPLS
                             for n in names)
    return out


# ---- 4. a d20-size state through the background checkpoint writer --------------------------------
def save_section() -> dict:
    cfg = preset(S["save_preset"], compute_dtype=DTYPE)
    params = init_params(cfg, jax.random.PRNGKey(2))
    optimizer = build_optimizer(cfg, params, total_steps=1000, batch_tokens=2048)
    return {"preset": S["save_preset"], **accelerator_host.save_rate(params, optimizer.init(params), cfg)}


# ---- run ----------------------------------------------------------------------------------------
print(f"accelerator check: {report['shape_name']} on {BACKEND} ({DEVICE.device_kind}), "
      f"jax {jax.__version__}, {DTYPE}, attention {ATTN}, budget {args.budget_s:.0f} s", flush=True)
section("jax", accelerator_host.jax_api)
train = section("train", train_section, ATTN, S, S["profile_steps"])
if train["status"] == "error" and ATTN != "xla" and BACKEND != "cpu":
    train = section("train_xla", train_section, "xla", S, S["profile_steps"])
section("engine", engine_section)
section("numerics", numerics_section)
report["host_sections_started"] = True
loader = section("loader", accelerator_host.loader_rate, S["seq_len"], S["loader_s"])
if loader["status"] == "ok" and train["status"] == "ok":
    loader["chips_fed_per_core"] = loader["tokens_per_cpu_s"] / train["tokens_per_s"]
section("save", save_section)
section("train_d20", train_section, ATTN, S["big"], 0, True)
write_report()
for name, rec in report["sections"].items():
    if rec["status"] == "ok" and name.startswith("train"):
        print(f"  {name}: compile {rec['compile_s']:.1f} s, step {1000 * rec['step_s_median']:.1f} ms, "
              f"{rec['tokens_per_s']:,.0f} tok/s, MFU {rec['mfu']:.1%}, peak {rec['peak_memory_mib']} MiB")
    if rec["status"] == "ok" and name == "engine":
        for B in (1, 8):
            e = rec[f"batch{B}"]
            print(f"  engine batch {B}: prefill {e['prefill_tokens_per_s']:,.0f} tok/s, decode "
                  f"{e['decode_tokens_per_s']:,.0f} tok/s ({e['decode_ms_per_step']:.2f} ms/step)")
    if rec["status"] == "ok" and "profile" in rec:
        top = rec["profile"]["top"][:3]
        print(f"  profile of {rec['profile']['steps']} steps: busy {rec['profile']['busy_ms']:.1f} ms; top: "
              + ", ".join(f"{t['name'][:40]} {t['share']:.0%}" for t in top))
    if rec["status"] == "ok" and "optimizer_share" in rec:
        print(f"  {name}: the optimizer is {rec['optimizer_share']['share_of_step']:.0%} of a step")
    if rec["status"] == "ok" and name == "loader":
        print(f"  loader: {rec['tokens_per_cpu_s']:,.0f} tokens per CPU-second at seq {rec['seq_len']}")
    if rec["status"] == "ok" and name == "save":
        print(f"  save of {rec['state_gib']} GiB ({rec['preset']}): the loop waits {rec['blocked_s']:.1f} s, "
              f"the write takes {rec['write_s']:.1f} s ({rec['gib_per_s']} GiB/s)")
    if rec["status"] == "ok" and name == "numerics":
        print(f"  numerics: max abs error {rec['max_abs_err']:.3g} ({', '.join(rec['impls'])} vs the f32 reference)")
print(f"wrote {args.out} in {elapsed():.1f} s", flush=True)
