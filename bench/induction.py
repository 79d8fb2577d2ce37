"""Can a checkpoint copy? Two measures.

1. Loss on the second copy of a token sequence vs the first: a model with induction heads predicts
   the repeat (second copy far below the first); one without sees two equally hard halves. Probes:
   a random sequence of ordinary tokens, and with --data a natural 100-token stretch of the
   validation shards.
2. Copy accuracy by distance (what an agent needs: a name from a tool result, written again
   hundreds of tokens later): a made-up backticked name (train/copy_rows.span_text, a seed
   training never uses) is planted in a 2,048-token row of natural text (--data; random tokens
   without it), then again `distance` tokens later. Reported: the share of the name's tokens after
   its first that greedy decoding gets right at the second mention ("copy"), and the same at a
   row where the first mention was left out ("cold": what guessing alone gets). A model whose
   context is shorter than the row runs at 2,048, as SFT extends it (windows follow).

Seconds to a minute on CPU. The numbers: docs/BENCHMARKS.md.

    python bench/induction.py RUN/base/checkpoints RUN/sft/checkpoints --data RUN/data
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from nanocode import checkpoint  # noqa: E402
from nanocode.gpt import forward, loss_fn  # noqa: E402
from train.copy_rows import span_text  # noqa: E402
from train.loader import data_sources, packed_batches  # noqa: E402


def natural_segments(data: str, tokenizer, rows: int, length: int) -> np.ndarray:
    """(rows, length) tokens from the middle of validation rows, text and code half and half."""
    x, _, _ = next(packed_batches(tokenizer, *data_sources(data, 0.5), rows, 2 * length, "val"))
    return x[:, length // 2: length // 2 + length]


def first_and_second(params, cfg, bos: int, seq: np.ndarray) -> tuple[float, float]:
    """Mean nats/token over each copy of BOS + seq + seq, skipping each copy's first 10 tokens."""
    L = seq.shape[1]
    x = np.concatenate([np.full((len(seq), 1), bos, np.int32), seq, seq], axis=1)  # (B, 1 + 2L)
    nll = np.asarray(loss_fn(params, cfg, jnp.asarray(x[:, :-1]), jnp.asarray(x[:, 1:]),
                             reduction="none"))  # (B, 2L)
    return float(nll[:, 10:L].mean()), float(nll[:, L + 10:].mean())


def filler_rows(data: str | None, tokenizer, rows: int, length: int) -> np.ndarray:
    """(rows, length) tokens of natural validation text (BOS first), or random tokens without data."""
    if data:
        x, _, _ = next(packed_batches(tokenizer, *data_sources(data, 0.5), rows, length, "val"))
        return x
    x = np.random.default_rng(1).integers(0, tokenizer.bos_id, (rows, length))
    x[:, 0] = tokenizer.bos_id
    return x


def copy_at_distance(params, cfg, tokenizer, filler: np.ndarray, distance: int, first: int = 64) -> tuple[float, float]:
    """(copy, cold) top-1 accuracy over each planted name's tokens after its first, at its second
    mention `distance` tokens after the first (see the module docstring)."""
    rng = np.random.default_rng(12345 + distance)
    names = [np.asarray(tokenizer.encode(f" `{span_text(rng)}`")) for _ in range(len(filler))]
    planted, cold = filler.copy(), filler.copy()
    for b, ids in enumerate(names):
        planted[b, first:first + len(ids)] = ids
        for row in (planted, cold):
            row[b, first + distance:first + distance + len(ids)] = ids
    scores = []
    for x in (planted, cold):
        pred = np.asarray(forward(params, cfg, jnp.asarray(x))[0].argmax(-1))  # (B, T): next-token guesses
        right = [pred[b, first + distance + i - 1] == ids[i] for b, ids in enumerate(names) for i in range(1, len(ids))]
        scores.append(float(np.mean(right)))
    return scores[0], scores[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", nargs="+", help="checkpoints directories (newest step of each)")
    ap.add_argument("--data", help="a data directory (code/ and text/ shards): also probe natural text")
    ap.add_argument("--length", type=int, default=100, help="tokens per copy")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--distances", default="100,400,1000,1800",
                    help="comma-separated distances in tokens for the copy-accuracy table")
    args = ap.parse_args()
    distances = [int(d) for d in args.distances.split(",") if d]
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
        row_len = 2048
        long_cfg = cfg.replace(sequence_len=row_len) if cfg.sequence_len < row_len else cfg
        filler = filler_rows(args.data, tokenizer, args.rows, row_len)
        for d in distances:
            copy, cold = copy_at_distance(params, long_cfg, tokenizer, filler, d)
            print(f"{path} name copied at distance {d:>4}: {100 * copy:5.1f}% of its tokens right "
                  f"(cold, no first mention: {100 * cold:5.1f}%)")


if __name__ == "__main__":
    main()
