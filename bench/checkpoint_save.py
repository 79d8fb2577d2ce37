"""How long a training checkpoint holds the loop up: nanocode.checkpoint.save (synchronous, what
a save cost before background saves) against AsyncSaver.save (the loop waits for the copy to host
memory only) and its whole write (AsyncSaver.wait: what a SIGTERM save waits for), on a state of
--gib GiB of float32 arrays in --dir, median of --repeats, in the same run.

    python bench/checkpoint_save.py --gib 2 --dir /tmp/ckpt-bench

The write rate (GiB/s of the whole write) is what decides whether a SIGTERM save fits a
preemption notice: a d24 state (params and optimizer state, 13.9 GB) at that rate.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from nanocode import checkpoint
from nanocode.config import preset

D24_STATE_BYTES = 13.9e9  # d24's params and optimizer state, fp32, all chips together


def state(gib: float):
    """{"w0": ..., }: float32 arrays of 64 MiB (random, so nothing compresses) summing to `gib`."""
    n = max(1, round(gib * 16))
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    return {f"w{i}": jax.random.normal(k, (4096, 4096), jnp.float32) for i, k in enumerate(keys)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--dir", default="/tmp/nanocode-checkpoint-bench")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    params, cfg = state(args.gib), preset("cpu-d2")
    jax.block_until_ready(params)
    gib = sum(x.nbytes for x in params.values()) / 2**30
    root = Path(args.dir)
    sync, blocked, whole = [], [], []
    for r in range(args.repeats):
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        checkpoint.save(root / "sync", r, params, config=cfg)
        sync.append(time.perf_counter() - t)
        with checkpoint.AsyncSaver(root / "async") as saver:
            t = time.perf_counter()
            saver.save(r, params, config=cfg)
            blocked.append(time.perf_counter() - t)
            saver.wait()
            whole.append(time.perf_counter() - t)
    shutil.rmtree(root, ignore_errors=True)
    s, b, w = (statistics.median(x) for x in (sync, blocked, whole))
    print(f"state {gib:.2f} GiB, medians of {args.repeats}, {jax.devices()[0].platform}, dir {root}")
    print(f"  save (synchronous)        {s:7.2f} s   {gib / s:5.2f} GiB/s")
    print(f"  AsyncSaver.save, blocked  {b:7.2f} s   ({b / s:.0%} of the synchronous save)")
    print(f"  AsyncSaver, whole write   {w:7.2f} s   {gib / w:5.2f} GiB/s")
    print(f"  d24's state (13.9 GB) at that rate: ~{D24_STATE_BYTES / 2**30 / (gib / w):.0f} s to write")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
