"""Can a checkpoint copy? Loss on the second copy of a random token sequence vs the first: a model
with induction heads predicts the repeat (second copy far below the first); one without sees two
equally random halves. Seconds on CPU; the cpu default model's base shows no induction at all
(docs/BENCHMARKS.md), which is why it cannot copy unseen names from a prompt.

    python bench/induction.py ~/.cache/nanocode/speedrun/cpu/base/checkpoints
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from nanocode import checkpoint  # noqa: E402
from nanocode.gpt import loss_fn  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", nargs="+", help="checkpoints directories (newest step of each)")
    ap.add_argument("--length", type=int, default=100, help="tokens per copy")
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    L = args.length
    for path in args.checkpoint:
        params, cfg = checkpoint.load_params(path, dtype=jnp.float32)[:2]
        seq = np.random.default_rng(0).integers(300, cfg.vocab_size, (args.rows, L))  # past bytes/specials
        x = np.concatenate([np.zeros((args.rows, 1), np.int32), seq, seq], axis=1)  # (B, 1 + 2L)
        nll = np.asarray(loss_fn(params, cfg, jnp.asarray(x[:, :-1]), jnp.asarray(x[:, 1:]),
                                 reduction="none"))  # (B, 2L)
        first, second = nll[:, 10:L].mean(), nll[:, L + 10:].mean()  # skip each copy's first 10
        print(f"{path}: first copy {first:.2f} nats/token, second copy {second:.2f} "
              f"(uniform: {np.log(cfg.vocab_size):.2f})")


if __name__ == "__main__":
    main()
