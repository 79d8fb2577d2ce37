"""Compile time of the real train step at accelerator model shapes, on this CPU.

The step is train/loop.py's (`make_train_step` over train.base.next_token_loss and the
Muon + AdamW optimizer, jitted with donation on a one-device mesh), lowered from abstract arguments
(no weights are allocated) and compiled by XLA:CPU. What it shows: how compile time grows with
depth. A layer loop unrolled in Python hands XLA one copy of every layer; a `lax.scan` over
stacked layers hands it one. Attention is `xla` so the block-causal einsum's unrolled query chunks
do not blur the depth effect; micro-batch 1 x seq (compile time hardly depends on the batch).

    python bench/compile_time.py                       # d12 d20 d24, bf16, seq 2048
    python bench/compile_time.py --presets d12 --repeats 3
    PYTHONPATH=/path/to/other/checkout python bench/compile_time.py   # the same on other code

Prints one line per preset (lower and compile seconds, median over --repeats) and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp

from nanocode import sharding
from nanocode.config import preset
from nanocode.gpt import init_params
from train import loop
from train.base import next_token_loss
from train.optim import build_optimizer


def step_times(name: str, seq_len: int, remat: str | None) -> tuple[float, float]:
    overrides = {"remat": remat} if remat else {}
    cfg = preset(name, sequence_len=seq_len, compute_dtype="bfloat16", attn_impl="xla", **overrides)
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    optimizer = build_optimizer(cfg, params, total_steps=1000, batch_tokens=seq_len)
    mesh = sharding.make_mesh("")
    p_shard = sharding.tree_shardings(params, mesh)
    o_shard = sharding.tree_shardings(jax.eval_shape(optimizer.init, params), mesh)
    step = jax.jit(loop.make_train_step(next_token_loss(cfg), optimizer), donate_argnums=0,
                   in_shardings=((p_shard, o_shard), sharding.batch_sharding(mesh)),
                   out_shardings=((p_shard, o_shard), None))
    state = (params, jax.eval_shape(optimizer.init, params))
    tokens = jax.ShapeDtypeStruct((1, 1, seq_len), jnp.int32)  # (accum, rows, T)
    t0 = time.perf_counter()
    lowered = step.lower(state, {"inputs": tokens, "targets": tokens})
    t1 = time.perf_counter()
    lowered.compile()
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["d12", "d20", "d24"])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=1, help="compiles per preset (median reported)")
    ap.add_argument("--remat", choices=["none", "block", "dots"], help="remat policy (default: the preset's)")
    args = ap.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)  # time XLA, not a cache hit
    rows = []
    for name in args.presets:
        runs = [step_times(name, args.seq_len, args.remat) for _ in range(args.repeats)]
        lower = statistics.median(r[0] for r in runs)
        comp = statistics.median(r[1] for r in runs)
        rows.append({"preset": name, "lower_s": round(lower, 2), "compile_s": round(comp, 2)})
        print(f"{name}: lower {lower:.1f} s, compile {comp:.1f} s (median of {args.repeats})", flush=True)
    print(json.dumps({"jax": jax.__version__, "seq_len": args.seq_len, "rows": rows}))


if __name__ == "__main__":
    main()
