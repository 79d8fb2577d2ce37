"""`train base`: pretrain a GPT on packed text+code rows with next-token cross-entropy.

Top to bottom: pick the model from a preset (vocab from the tokenizer), size the batch (auto from
the scaling rule, train/optim.auto_total_batch, unless given) and the step count (ratio x scaling params tokens unless
given), build the optimizer (Muon + AdamW groups), then hand batches and the loss to the shared
loop (train/loop.py), which does sharding, logging, eval, checkpoints and resume. Val bits per byte
are measured on code and text separately, on the same held-out rows every time.

The tokenizer, the loader and the fine-tuning start are imported inside the functions that use
them (tiktoken, tqdm, orbax): bench/accelerator_check.py imports this module for next_token_loss on
a machine with only jax, numpy and optax.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from nanocode.common import enable_compilation_cache, nanocode_home
from nanocode.config import flops_per_token, param_counts, preset
from nanocode.engine import Engine
from nanocode.gpt import init_params, nll_sum, token_nll
from nanocode.sharding import batch_sharding, make_mesh
from train import loop
from train.optim import ADAMW_GROUPS, auto_total_batch, build_optimizer, scaled_lrs

SAMPLE_PROMPTS = ["def fibonacci(n):", "The meaning of"]


def next_token_loss(cfg):
    """(params, {"inputs", "targets"}) -> (sum of token nats, token count)."""
    def loss(params, mb):
        nll = nll_sum(params, cfg, mb["inputs"], mb["targets"])
        return nll, jnp.sum(mb["targets"] != -1).astype(jnp.float32)
    return loss


def accumulate(batches, accum: int):
    """Group (inputs, targets, state) batches into ({"inputs", "targets"}: (accum, rows, T), state)."""
    while True:
        group = [next(batches) for _ in range(accum)]
        yield ({"inputs": np.stack([g[0] for g in group]), "targets": np.stack([g[1] for g in group])},
               group[-1][2])


def make_evaluator(cfg, tokenizer, sources: dict, rows: int, seq_len: int, n_batches: int, mesh):
    """evaluate(params, step) -> {"val_bpb_<source>": ...} over the first n_batches val batches of
    each source, plus a greedy sample of each prompt (printed, not returned)."""
    from train.loader import packed_batches

    token_bytes = jnp.asarray(tokenizer.token_bytes())  # (V,)
    sharding = batch_sharding(mesh)

    @jax.jit
    def nats_and_bytes(params, inputs, targets):  # (1, rows, T) each
        nll = token_nll(params, cfg, inputs[0], targets[0])  # (rows, T)
        nbytes = token_bytes[jnp.maximum(targets[0], 0)] * (targets[0] >= 0)
        return jnp.sum(jnp.where(nbytes > 0, nll, 0.0)), jnp.sum(nbytes)

    def evaluate(params, step):
        out = {}
        for name, directory in sources.items():
            stream = packed_batches(tokenizer, {name: directory}, None, rows, seq_len, split="val",
                                    process_index=jax.process_index(),
                                    process_count=jax.process_count())
            nats = nbytes = 0.0
            for _, (x, y, _) in zip(range(n_batches), stream):
                xs, ys = (jax.make_array_from_process_local_data(sharding, a[None]) for a in (x, y))
                n, b = nats_and_bytes(params, xs, ys)
                nats, nbytes = nats + float(n), nbytes + float(b)
            if nbytes:
                out[f"val_bpb_{name}"] = nats / (math.log(2) * nbytes)
        def samples(params):
            for prompt in SAMPLE_PROMPTS:
                ids = greedy(params, cfg, [tokenizer.bos_id] + tokenizer.encode(prompt), 24)
                print(f"  sample: {prompt!r} -> {tokenizer.decode(ids)!r}")
        loop.on_one_process(params, samples)
        return out

    return evaluate


def greedy(params, cfg, prompt: list[int], n_new: int) -> list[int]:
    """Greedy continuation of n_new tokens (no stop tokens) by the inference engine's fused loop."""
    n_new = max(0, min(n_new, cfg.sequence_len - len(prompt)))
    if n_new == 0:
        return []
    return Engine(params, cfg).generate(prompt, max_tokens=n_new, stop=())[0]


def default_compute_dtype() -> str:
    """bf16 compute on GPU/TPU (fp32 master weights and optimizer state stay fp32, as nanochat's),
    fp32 on CPU, where bf16 matmuls are emulated and slower."""
    return "bfloat16" if jax.default_backend() in ("gpu", "tpu") else "float32"


def model_config(preset_name: str, vocab_size: int, *, depth: int | None = None, seq_len: int | None = None,
                 dtype: str | None = None, attn: str | None = None, remat: str | None = None,
                 window_pattern: str | None = None):
    """The GPTConfig `train base` trains for its --preset/--depth/--seq-len/--dtype/--attn/--remat/
    --window-pattern (None: the preset's; dtype None: default_compute_dtype()); also what
    bench/memory.py compiles."""
    overrides = {k: v for k, v in dict(depth=depth, sequence_len=seq_len,
                                       compute_dtype=dtype or default_compute_dtype(),
                                       attn_impl=attn, remat=remat,
                                       window_pattern=window_pattern).items() if v is not None}
    return preset(preset_name, vocab_size=vocab_size, **overrides)


def main(args) -> int:
    from nanocode.tokenizer import Tokenizer
    from train.loader import check_batch, data_sources, packed_batches

    if args.multihost:
        loop.init_multihost()
    enable_compilation_cache()
    home = nanocode_home()
    start = None
    try:
        if args.from_:  # continued pretraining, e.g. a last phase at a longer context
            from train.finetune import load_start
            start, cfg, tokenizer, ckpt_dir = load_start(args.from_, args.tokenizer, args.dtype, args.seq_len,
                                                         args.remat)
            print(f"starting from {ckpt_dir} (its config; --preset/--depth/--window-pattern are ignored)")
        else:
            tokenizer = Tokenizer.load(Path(args.tokenizer or home / "tokenizer"))
            cfg = model_config(args.preset, tokenizer.vocab_size, depth=args.depth, seq_len=args.seq_len,
                               dtype=args.dtype, attn=args.attn, remat=args.remat,
                               window_pattern=args.window_pattern)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    T, n_dev = cfg.sequence_len, jax.device_count()
    total_batch = args.total_batch or auto_total_batch(cfg, args.ratio)
    rows = args.device_batch * n_dev
    if total_batch % (rows * T):
        print(f"error: total batch {total_batch:,} tokens is not a multiple of device batch "
              f"{args.device_batch} x {n_dev} devices x seq {T} = {rows * T:,}; change "
              "--total-batch or --device-batch", file=sys.stderr)
        return 2
    accum = total_batch // (rows * T)
    local_rows = check_batch(rows, jax.process_count(), jax.local_device_count())
    counts = param_counts(cfg)
    steps = args.steps or max(1, round(args.ratio * counts["scaling"] / total_batch))
    sources, weights = data_sources(args.data or home / "data", args.code_ratio)
    mesh = make_mesh(args.mesh)
    run_dir = Path(args.run_dir) if args.run_dir else home / "runs" / (args.run or args.preset)
    print(f"model {args.preset}: {counts['total']:,} params ({counts['scaling']:,} scaling), "
          f"{flops_per_token(cfg, T):.3g} FLOPs/token; batch {total_batch:,} tokens = {accum} x "
          f"{rows} rows x {T}; {steps} steps = {steps * total_batch / 1e6:.1f}M tokens; mesh "
          f"{dict(mesh.shape)}; run dir {run_dir}")

    params = start if start is not None else init_params(cfg, jax.random.PRNGKey(args.seed))
    # --lr-scale: every peak lr but the smear's (fixed) times the flag
    scaled = scaled_lrs(args.lr_scale, [g for g in ("matrix", *ADAMW_GROUPS) if g != "smear"])
    optimizer = build_optimizer(cfg, params, total_steps=steps, batch_tokens=total_batch,
                                ratio=args.ratio, **scaled)

    def batches(state):
        stream = packed_batches(tokenizer, sources, weights, local_rows, T, "train",
                                jax.process_index(), jax.process_count(), seed=args.seed,
                                state=state, copy_share=args.copy_share, span_share=args.span_share)
        return accumulate(stream, accum)

    evaluate = make_evaluator(cfg, tokenizer, sources, local_rows, T, args.eval_batches, mesh)
    lc = loop.stage_loop_config(args, run_dir=run_dir, total_steps=steps, tokens_per_step=total_batch,
                                flops_per_token=flops_per_token(cfg, T),
                                extra_metadata={"stage": "base", "preset": args.preset, "from": args.from_})
    result = loop.run(lc, params=params, optimizer=optimizer, loss=next_token_loss(cfg), mesh=mesh,
                      batches=batches, config=cfg, tokenizer=tokenizer, evaluate=evaluate)
    print("done: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)))
    return 0

