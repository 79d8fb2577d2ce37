"""Export a run's model as the agent loads it: the newest checkpoint as params only, in bf16, with
its tokenizer and config, into a run directory of its own (`<dst>/checkpoints/<step>`, what
`--model` and `evals report` expect). It refuses to overwrite an export. Run as
`python -m train.export_model SRC DST` (train/speedrun.py's export stage); the model card is
evals/model_card.py's.
"""
from __future__ import annotations

import sys
from pathlib import Path


def export(src: str, dst: str) -> int:
    """The newest checkpoint of `src` as params only, in bf16, with its tokenizer and config: what
    the agent loads (half the bytes of fp32, no optimizer state; the engine computes in the
    config's dtype)."""
    import jax.numpy as jnp

    from nanocode import checkpoint
    from nanocode.common import find_checkpoints
    ckpt, _ = find_checkpoints(src)
    step = checkpoint.latest_step(ckpt)
    params, cfg, tok, meta = checkpoint.load_params(ckpt, step, dtype=jnp.bfloat16)
    out = Path(dst) / "checkpoints"  # a run directory, as `evals report` and `--model` expect
    if checkpoint.latest_step(out) is not None:
        raise ValueError(f"{out} already holds a checkpoint; delete it to export again")
    checkpoint.save(out, step, params, config=cfg, tokenizer=tok,
                    metadata={**(meta or {}), "stage": "export", "from": str(ckpt), "dtype": "bfloat16",
                              "exported_from": str(ckpt / str(step))})
    size = sum(f.stat().st_size for f in (out / str(step)).rglob("*") if f.is_file())
    print(f"exported {ckpt / str(step)} -> {out / str(step)} (bf16 params + tokenizer, {size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m train.export_model SRC DST")
    raise SystemExit(export(*sys.argv[1:]))
