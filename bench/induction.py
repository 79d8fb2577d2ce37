"""Can a checkpoint copy? Loss on the second copy of a token sequence vs the first: a model with
induction heads predicts the repeat (second copy far below the first); one without sees two equally
hard halves. Two probes: a random sequence of ordinary tokens (nothing predicts the first copy), and
with --data a natural 100-token stretch of the validation shards (a model that copies gets the
second copy nearly free). Seconds on CPU. The cpu preset's first base showed no induction at all
(docs/BENCHMARKS.md), which is why its SFT'd model could not copy unseen names from a prompt; copy
rows in pretraining (`train base --copy-share`) are the fix.

    python bench/induction.py RUN/base/checkpoints RUN/sft/checkpoints --data RUN/data
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from nanocode import checkpoint  # noqa: E402
from nanocode.gpt import loss_fn  # noqa: E402


def natural_segments(data: str, tokenizer, rows: int, length: int) -> np.ndarray:
    """(rows, length) tokens from the middle of validation rows, text and code half and half."""
    from train.loader import data_sources, packed_batches
    x, _, _ = next(packed_batches(tokenizer, *data_sources(data, 0.5), rows, 2 * length, "val"))
    return x[:, length // 2: length // 2 + length]


def first_and_second(params, cfg, bos: int, seq: np.ndarray) -> tuple[float, float]:
    """Mean nats/token over each copy of BOS + seq + seq, skipping each copy's first 10 tokens."""
    L = seq.shape[1]
    x = np.concatenate([np.full((len(seq), 1), bos, np.int32), seq, seq], axis=1)  # (B, 1 + 2L)
    nll = np.asarray(loss_fn(params, cfg, jnp.asarray(x[:, :-1]), jnp.asarray(x[:, 1:]),
                             reduction="none"))  # (B, 2L)
    return float(nll[:, 10:L].mean()), float(nll[:, L + 10:].mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", nargs="+", help="checkpoints directories (newest step of each)")
    ap.add_argument("--data", help="a data directory (code/ and text/ shards): also probe natural text")
    ap.add_argument("--length", type=int, default=100, help="tokens per copy")
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    for path in args.checkpoint:
        params, cfg = checkpoint.load_params(path, dtype=jnp.float32)[:2]
        tokenizer = checkpoint.load_tokenizer(path)
        bos = tokenizer.bos_id
        probes = {"random": np.random.default_rng(0).integers(0, bos, (args.rows, args.length))}
        if args.data:
            probes["natural"] = natural_segments(args.data, tokenizer, args.rows, args.length)
        for name, seq in probes.items():
            first, second = first_and_second(params, cfg, bos, seq)
            print(f"{path} {name}: first copy {first:.2f} nats/token, second copy {second:.2f}"
                  + (f" (uniform: {np.log(bos):.2f})" if name == "random" else ""))


if __name__ == "__main__":
    main()
