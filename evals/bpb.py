"""`evals bpb`: bits per byte of a checkpoint on the held-out (val) code and text shards.

Reuses train/base.py's make_evaluator (the exact number `train base` logs as val_bpb_<source>), so
the two can be compared directly. Bits per byte divide by UTF-8 bytes, not tokens, so models with
different tokenizers compare; special tokens (BOS) carry 0 bytes and are not scored. Trade-off:
only the first --batches x --rows x --seq-len tokens of each source are scored (the same rows
every time), a cheap and stable estimate rather than the whole split. It also prints two greedy
samples (make_evaluator does).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax

from evals.codegen import ModelError, out_dir
from nanocode.common import enable_compilation_cache, nanocode_home
from nanocode.load import load_model
from nanocode.sharding import make_mesh, tree_shardings
from train.base import make_evaluator
from train.loader import data_sources
from train.loop import place
from train.shards import DataError


def main(args) -> int:
    enable_compilation_cache()
    t0 = time.perf_counter()
    try:
        params, cfg, tok, _, ckpt, tag, step = load_model(args.model, args.step)
        data = Path(args.data).expanduser() if args.data else nanocode_home() / "data"
        sources, _ = data_sources(data, 0.5)
    except (ModelError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seq_len = min(args.seq_len or cfg.sequence_len, cfg.sequence_len)
    mesh = make_mesh()  # every device takes rows; the params are replicated on each
    evaluate = make_evaluator(cfg, tok, sources, args.rows, seq_len, args.batches, mesh)
    with jax.set_mesh(mesh):  # as in training: the fused attention kernels run per device
        scores = evaluate(place(params, tree_shardings(params, mesh)), step)
    if not scores:
        print(f"error: no val rows in {data} (each source needs >= {args.rows} rows of "
              f"{seq_len} tokens); lower --rows/--seq-len or make more val data", file=sys.stderr)
        return 2
    summary = {"eval": "bpb", "model": tag, "checkpoint": str(ckpt), "step": int(step),
               **{k.removeprefix("val_"): v for k, v in scores.items()}, "data": str(data),
               "rows": args.rows, "seq_len": seq_len, "batches": args.batches,
               "seconds": round(time.perf_counter() - t0, 1)}
    dest = out_dir(args.out, tag)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"bpb_step{step}.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{'model':<16} {'step':>7} " + " ".join(f"{k.removeprefix('val_'):>12}" for k in scores))
    print(f"{tag[:16]:<16} {step:>7} " + " ".join(f"{v:>12.4f}" for v in scores.values()))
    print(f"wrote {path}")
    return 0
