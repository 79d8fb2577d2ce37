"""Training throughput: tokens/s, step time, MFU and time to first step of our real train step
(train/loop.py's step with the Muon + AdamW optimizer) for a preset, and, in the same run, a
PyTorch model with nanochat's math (tests/nanochat_reference.py, torch AdamW, causal SDPA) as the
reference. Rounds alternate ours / torch; the table reports medians and the ratio.

    python bench/train_throughput.py --preset cpu-d4 --window-pattern L --device-batch 8 --devices 2

--devices N forces N CPU devices (data parallel over the cores); it must be set before jax starts,
so the script re-executes itself with XLA_FLAGS when needed: jax, numpy and the model code are
imported inside the functions, so the process that re-executes never loads them; torch too, for
the reference only (--no-torch runs without it).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from nanocode.config import flops_per_token, preset  # noqa: E402


def ours(args):
    """A closure running one of our train steps; returns (first_step_s, step_fn)."""
    import jax
    import numpy as np

    from nanocode.gpt import init_params
    from nanocode.sharding import batch_sharding, make_mesh, tree_shardings
    from train.base import next_token_loss
    from train.loop import make_train_step
    from train.optim import build_optimizer

    cfg = preset(args.preset, window_pattern=args.window_pattern, compute_dtype=args.dtype,
                 **({"sequence_len": args.seq_len} if args.seq_len else {}))
    T, rows = cfg.sequence_len, args.device_batch * jax.device_count()
    mesh = make_mesh("")
    params = init_params(cfg, jax.random.PRNGKey(0))
    if args.optimizer == "muon":
        opt = build_optimizer(cfg, params, total_steps=1000, batch_tokens=rows * T)
    else:  # like for like with the torch reference
        import optax
        opt = optax.adamw(1e-3, eps=1e-10)
    p_shard = tree_shardings(params, mesh)
    o_shard = tree_shardings(jax.eval_shape(opt.init, params), mesh)
    state = (jax.device_put(params, p_shard), jax.jit(opt.init, out_shardings=o_shard)(params))
    step = jax.jit(make_train_step(next_token_loss(cfg), opt), donate_argnums=0,
                   in_shardings=((p_shard, o_shard), batch_sharding(mesh)),
                   out_shardings=((p_shard, o_shard), None))
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, rows, T + 1), dtype=np.int32)
    batch = jax.device_put({"inputs": tokens[..., :-1], "targets": tokens[..., 1:]}, batch_sharding(mesh))
    holder = [state]

    def run():
        holder[0], m = step(holder[0], batch)
        m["loss"].block_until_ready()

    t = time.perf_counter()
    run()
    return time.perf_counter() - t, run, cfg, flops_per_token(cfg, T), rows * T


def reference(cfg, rows, compile_: bool):
    """The same model in torch (nanochat's math) with torch AdamW, one step per call; torch.compile
    of the forward+loss as nanochat's trainer does when compile_."""
    import torch
    from nanochat_reference import nanochat_forward, nanochat_state_dict

    mc = dict(sequence_len=cfg.sequence_len, vocab_size=cfg.vocab_size, n_layer=cfg.n_layer,
              n_head=cfg.n_head, n_kv_head=cfg.n_kv_head, n_embd=cfg.n_embd, window_pattern=cfg.window_pattern)
    sd = nanochat_state_dict(mc)
    for v in sd.values():
        v.requires_grad_(True)
    opt = torch.optim.AdamW(list(sd.values()), lr=1e-3, eps=1e-10)
    x = torch.randint(0, cfg.vocab_size, (rows, cfg.sequence_len + 1))

    def loss_fn(sd, x):
        logits = nanochat_forward(sd, mc, x[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())

    loss_fn = torch.compile(loss_fn, dynamic=False) if compile_ else loss_fn

    def run():
        loss_fn(sd, x).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = time.perf_counter()
    run()
    return time.perf_counter() - t, run


def timed(run, steps):
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu-d4")
    ap.add_argument("--window-pattern", default="L")
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--device-batch", type=int, default=8, help="rows per device")
    ap.add_argument("--devices", type=int, default=1, help="forced CPU devices")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="steps per round per contender")
    ap.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw",
                    help="adamw: like for like with the torch reference; muon: our real recipe")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="our compute dtype (params and optimizer state stay float32)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-compile", action="store_true", help="torch.compile the reference (as nanochat)")
    args = ap.parse_args()
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    if args.devices > 1 and flag not in os.environ.get("XLA_FLAGS", ""):
        env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()}
        raise SystemExit(subprocess.call([sys.executable, *sys.argv], env=env))

    import jax

    from train.loop import peak_flops

    first, run, cfg, fpt, tokens = ours(args)
    ref_first, ref_run = (None, None) if args.no_torch else reference(cfg, tokens // cfg.sequence_len,
                                                                            args.torch_compile)
    peak = peak_flops() * jax.device_count()  # the machine's measured f32 matmul rate
    mine, theirs = [], []
    for _ in range(args.rounds):
        mine.append(timed(run, args.steps))
        if ref_run:
            theirs.append(timed(ref_run, args.steps))
    step = statistics.median(mine)
    print(f"\n{args.preset}, {args.optimizer} (window {args.window_pattern}, seq {cfg.sequence_len}, {tokens // cfg.sequence_len} rows, "
          f"{jax.device_count()} device(s)); measured peak {peak / 1e9:.0f} GFLOP/s; "
          f"medians of {args.rounds} rounds x {args.steps} steps\n")
    print("| contender | time to first step | step | tokens/s | MFU |")
    print("|---|---|---|---|---|")
    print(f"| nanocode (JAX) | {first:.1f} s | {step * 1000:.0f} ms | {tokens / step:,.0f} | "
          f"{tokens / step * fpt / peak:.1%} |")
    if ref_run:
        ref_step = statistics.median(theirs)
        name = "torch.compile reference" if args.torch_compile else "torch eager reference"
        print(f"| {name} | {ref_first:.1f} s | {ref_step * 1000:.0f} ms | {tokens / ref_step:,.0f} | "
              f"{tokens / ref_step * fpt / peak:.1%} |")
        print(f"\nratio nanocode / torch tokens/s: {ref_step / step:.2f}x")


if __name__ == "__main__":
    main()
