"""The default model's shape, chosen by measurement: for each candidate shape, the real train step
(train.loop.make_train_step over train.base.next_token_loss with the Muon + AdamW optimizer,
jitted with donation and one-device shardings as train.loop.run does) on random tokens, then the
numbers the choice needs: parameters (total and scaling), the bf16 checkpoint's size, compile
time, median step time, tokens/s, MFU (the formula's flops, train.loop.peak_flops), peak memory,
and what a pretraining budget buys (tokens in --minutes, tokens per scaling parameter).

    PYTHONPATH=. python bench/shape_sweep.py --out sweep.json              # on the chip
    python bench/shape_sweep.py --tiny --out /tmp/sweep.json               # on a CPU, seconds

A candidate is `name:key=value,...` over train.base's knobs: depth, head_dim, vocab, seq, rows,
remat, ve (value embeddings 0/1), window (pattern). A candidate that does not fit (out of memory)
or fails is recorded with its error and the sweep goes on; the JSON is rewritten after each one,
so a run cut by a timeout keeps what it measured. Decode speed on the user's CPU is the other half
of the choice (bench/infer.py on the VM).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import jax  # noqa: E402
import numpy as np  # noqa: E402

from nanocode.config import flops_per_token, param_counts, preset  # noqa: E402
from nanocode.gpt import init_params  # noqa: E402
from nanocode.sharding import batch_sharding, make_mesh, tree_shardings  # noqa: E402
from train.base import next_token_loss  # noqa: E402
from train.loop import make_train_step, peak_flops  # noqa: E402
from train.optim import build_optimizer  # noqa: E402

# The v5e preset's shape first, then one change each (docs/BENCHMARKS.md, "The default model's shape")
CANDIDATES = [
    "d6:depth=6,rows=32",
    "d6-48rows:depth=6,rows=48",
    "d6-hd64:depth=6,head_dim=64,rows=32",
    "d6-seq4096:depth=6,seq=4096,rows=16",
    "d6-noVE:depth=6,ve=0,rows=32",
]
TINY = ["a:depth=2,head_dim=64,vocab=512,seq=128,rows=2", "b:depth=2,head_dim=64,vocab=512,seq=128,rows=4,ve=0"]
DEFAULTS = dict(depth=6, head_dim=128, vocab=8192, seq=2048, rows=32, remat="none", ve=1, window="SSSL")


def parse(spec: str) -> tuple[str, dict]:
    """'name:key=value,...' -> (name, knobs over DEFAULTS); ValueError naming a bad key."""
    name, _, rest = spec.partition(":")
    knobs = dict(DEFAULTS)
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in DEFAULTS:
            raise ValueError(f"{spec}: unknown knob {key!r} (knobs: {', '.join(DEFAULTS)})")
        knobs[key] = type(DEFAULTS[key])(value)
    return name, knobs


def measure(knobs: dict, steps: int, minutes: float, dtype: str, attn: str) -> dict:
    cfg = preset(f"d{knobs['depth']}", head_dim=knobs["head_dim"], vocab_size=knobs["vocab"],
                 sequence_len=knobs["seq"], value_embeds=bool(knobs["ve"]), window_pattern=knobs["window"],
                 compute_dtype=dtype, remat=knobs["remat"], attn_impl=attn)
    counts = param_counts(cfg)
    rows, T = knobs["rows"], cfg.sequence_len
    mesh = make_mesh("")
    params = init_params(cfg, jax.random.PRNGKey(0))
    opt = build_optimizer(cfg, params, total_steps=1000, batch_tokens=rows * T)
    p_shard = tree_shardings(params, mesh)
    o_shard = tree_shardings(jax.eval_shape(opt.init, params), mesh)
    state = (jax.device_put(params, p_shard), jax.jit(opt.init, out_shardings=o_shard)(params))
    del params
    step = jax.jit(make_train_step(next_token_loss(cfg), opt), donate_argnums=0,
                   in_shardings=((p_shard, o_shard), batch_sharding(mesh)), out_shardings=((p_shard, o_shard), None))
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, rows, T + 1), dtype=np.int32)
    batch = jax.device_put({"inputs": tokens[..., :-1], "targets": tokens[..., 1:]}, batch_sharding(mesh))
    t = time.perf_counter()
    with jax.set_mesh(mesh):
        compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - t
    times = []
    with jax.set_mesh(mesh):
        for i in range(steps + 2):  # two warm-up steps
            t = time.perf_counter()
            state, m = compiled(state, batch)
            m["loss"].block_until_ready()
            if i >= 2:
                times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    tok_s = rows * T / step_s
    fpt = flops_per_token(cfg, T)
    stats = jax.devices()[0].memory_stats() or {}
    budget_tokens = tok_s * minutes * 60
    out = {"knobs": knobs, "params_total": counts["total"], "params_scaling": counts["scaling"],
           "ckpt_bf16_mb": round(counts["total"] * 2 / 1e6, 1), "compile_s": round(compile_s, 1),
           "step_ms": round(step_s * 1e3, 2), "tokens_per_s": round(tok_s), "mfu": round(tok_s * fpt / peak_flops(), 4),
           "peak_gib": round(stats.get("peak_bytes_in_use", 0) / 2**30, 2), "loss": float(m["loss"]),
           f"tokens_in_{minutes:g}_min": round(budget_tokens), "tokens_per_scaling_param": round(budget_tokens / counts["scaling"], 1)}
    del state, compiled
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidates", nargs="*", help="name:key=value,... (default: the v5e preset's shape and its neighbours)")
    ap.add_argument("--tiny", action="store_true", help="two tiny shapes, seconds on a CPU (the test's run)")
    ap.add_argument("--steps", type=int, default=15, help="timed steps per shape (default 15)")
    ap.add_argument("--minutes", type=float, default=12.0, help="pretraining minutes the budget columns assume")
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop starting shapes after this long")
    ap.add_argument("--out", default="shape_sweep.json")
    args = ap.parse_args()

    backend = jax.default_backend()
    dtype, attn = ("bfloat16", "splash") if backend == "tpu" else ("bfloat16", "auto") if backend == "gpu" \
        else ("float32", "auto")
    specs = args.candidates or (TINY if args.tiny else CANDIDATES)
    record = {"device": jax.devices()[0].device_kind, "backend": backend, "jax": jax.__version__,
              "dtype": dtype, "attn": attn, "date": time.strftime("%Y-%m-%d"), "shapes": {}}
    t0 = time.time()
    for spec in specs:
        name, knobs = parse(spec)
        if time.time() - t0 > args.budget_s:
            record["shapes"][name] = {"knobs": knobs, "status": "skipped: budget"}
            continue
        try:
            r = {"status": "ok", **measure(knobs, args.steps, args.minutes, dtype, attn)}
        except Exception as e:  # noqa: BLE001 - an OOM or a failing shape is recorded, the sweep goes on
            r = {"knobs": knobs, "status": "error", "error": f"{type(e).__name__}: {str(e)[:400]}",
                 "traceback": traceback.format_exc()[-2000:]}
        record["shapes"][name] = r
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
        if r["status"] == "ok":
            print(f"{name:>18}: {r['params_total'] / 1e6:6.1f}M ({r['params_scaling'] / 1e6:.1f}M scaling, "
                  f"{r['ckpt_bf16_mb']} MB bf16) {r['tokens_per_s']:>9,} tok/s  MFU {r['mfu']:.1%}  "
                  f"compile {r['compile_s']} s  peak {r['peak_gib']} GiB  "
                  f"{r['tokens_per_scaling_param']} tok/param in {args.minutes:g} min", flush=True)
        else:
            print(f"{name:>18}: {r['status']}: {r.get('error', '')[:200]}", flush=True)
    print(f"sweep: {len(specs)} shapes in {time.time() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
