"""`train export --from RUN --out DIR`: a run's model as the agent loads it. The newest checkpoint
as params only, in bf16, with its tokenizer and config, into a run directory of its own
(`DIR/checkpoints/<step>`, what `--model` and `evals report` expect). Trade-off: half the bytes of
fp32 and no optimizer state, so an export is for inference and evals, not for resuming training
(the engine computes in the config's dtype either way). It refuses to overwrite an export. The
speedrun's export stage runs it; the model card beside it is evals/model_card.py's.
"""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp

from nanocode import checkpoint
from nanocode.common import find_checkpoints


def export(src: str, dst: str) -> int:
    """The newest checkpoint of `src` (a checkpoint directory, run directory or run tag) saved as
    bf16 params with its tokenizer and config under `dst`/checkpoints/<step>; the metadata names
    where it came from (`exported_from`). Raises FileNotFoundError when `src` has no checkpoint
    and ValueError when `dst` already holds one."""
    ckpt, _ = find_checkpoints(src)
    step = checkpoint.latest_step(ckpt)
    out = Path(dst) / "checkpoints"  # a run directory, as `evals report` and `--model` expect
    if checkpoint.latest_step(out) is not None:
        raise ValueError(f"{out} already holds a checkpoint; delete it to export again")
    params, cfg, tok, meta = checkpoint.load_params(ckpt, step, dtype=jnp.bfloat16)
    checkpoint.save(out, step, params, config=cfg, tokenizer=tok,
                    metadata={**(meta or {}), "stage": "export", "from": str(ckpt), "dtype": "bfloat16",
                              "exported_from": str(ckpt / str(step))})
    size = sum(f.stat().st_size for f in (out / str(step)).rglob("*") if f.is_file())
    print(f"exported {ckpt / str(step)} -> {out / str(step)} (bf16 params + tokenizer, {size / 1e6:.1f} MB)")
    return 0


def main(args) -> int:
    return export(args.from_, args.out)
