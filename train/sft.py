"""`train sft`: supervised fine-tuning on conversations and agent traces (masked cross-entropy).

Design:
- Start, data and optimizer as every fine-tuning stage has them (train/finetune.py): the params of
  the --from checkpoint, its config and its tokenizer; the optimizer starts fresh; the run goes to
  $NANOCODE_HOME/runs/<from>-sft unless --run/--run-dir say otherwise. `--data SOURCE[*K] ...`
  repeats a source K times per epoch; invalid conversations are dropped and counted, never fixed.
- Packing (train/packing.py): conversations packed best-fit into rows of T+1 tokens, never cut
  (one too long is dropped and counted), only the assistant's tokens supervised; an epoch's rows
  are a pure function of (seed, epoch), so the loader state is just {"epoch", "row"}.
- Loss: sum of nats over supervised targets and their count (train.base.next_token_loss); the shared
  loop divides the summed gradients by the total count over micro-batches and devices, so every
  supervised token weighs the same however the rows are packed.
- LR: the pretraining optimizer (Muon + AdamW groups, train/optim.py) with every peak lr times
  --lr-scale (default 0.5), decaying linearly to 0 at the last step after --warmup-steps of linear
  warmup (default 0: a trained checkpoint needs none; a random init does, see
  tests/test_sft_tool_calls.py); weight decay 0.
- Eval every --eval-every steps (and at step 0 and the end): masked val loss on held-out
  conversations (--val, else a seeded split of the data) and greedy samples of held-out prompts in
  the agent format (render_for_completion, generated until <|assistant_end|> or
  <|tool_call_end|>).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import numpy as np

from nanocode.common import enable_compilation_cache, nanocode_home
from nanocode.config import flops_per_token
from nanocode.engine import Engine
from nanocode.sharding import batch_sharding, make_mesh
from train import loop
from train.base import next_token_loss
from train.conversations import normalize
from train.finetune import (batch_geometry, load_sources, load_start, run_name_of, sft_optimizer, split_val,
                            unpin_special_heads)
from train.loader import check_batch
from train.packing import Packer, render_docs, replay_docs


def sft_batches(packer: Packer, accum: int, rows: int, process_index: int = 0,
                process_count: int = 1):
    """batches(state) for loop.run: ({"inputs", "targets"}: (accum, local rows, T), state). Each
    step takes accum * rows global rows; a process keeps its contiguous share of each micro-batch."""
    local = rows // process_count

    def batches(state):
        stream = packer.stream(state)
        while True:
            got = [next(stream) for _ in range(accum * rows)]
            x = np.stack([g[0][0] for g in got]).reshape(accum, rows, -1)
            y = np.stack([g[0][1] for g in got]).reshape(accum, rows, -1)
            sl = slice(process_index * local, (process_index + 1) * local)
            yield {"inputs": x[:, sl], "targets": y[:, sl]}, got[-1][1]

    return batches


def first_prompt(conv) -> dict | None:
    """The conversation up to (not including) its first assistant message, for sampling."""
    msgs = normalize(conv)["messages"]
    for k, m in enumerate(msgs):
        if m["role"] == "assistant":
            return {"messages": msgs[:k]} if k else None
    return None


def print_samples(params, cfg, tokenizer, convs, max_new: int, log=print):
    """Greedy agent-format completions of held-out prompts, stopped at <|assistant_end|> or
    <|tool_call_end|>."""
    if max_new <= 0:
        return
    engine = Engine(params, cfg, tokenizer)
    for conv in convs:
        prompt = first_prompt(conv)
        if prompt is None:
            continue
        ids = tokenizer.render_for_completion(prompt)
        n = min(max_new, cfg.sequence_len - len(ids))
        if n <= 0:
            continue
        out = engine.generate(ids, max_tokens=n)[0]
        user = prompt["messages"][-1]["content"][-80:].replace("\n", "\\n")
        log(f"  sample: ...{user!r} -> {tokenizer.decode(out)!r}")


def make_val_eval(cfg, packer: Packer | None, rows: int, mesh, max_rows: int):
    """val_loss(params) -> mean nats per supervised token over the held-out rows (fixed set)."""
    if packer is None:
        return None
    packed = [packer.materialize(r) for r in packer.epoch_rows(0)[:max_rows]]
    if not packed:
        return None
    T = packer.T
    while len(packed) % rows:  # pad to whole batches with unsupervised rows
        packed.append((np.full(T, packer.bos, np.int32), np.full(T, -1, np.int32)))
    local = rows // jax.process_count()  # each process feeds its own slice of every batch
    sl = slice(jax.process_index() * local, (jax.process_index() + 1) * local)
    xs = np.stack([p[0] for p in packed]).reshape(-1, rows, T)[:, sl]
    ys = np.stack([p[1] for p in packed]).reshape(-1, rows, T)[:, sl]
    sharding = batch_sharding(mesh)
    loss = next_token_loss(cfg)  # (sum of nats, supervised tokens)
    nats = jax.jit(lambda params, x, y: loss(params, {"inputs": x[0], "targets": y[0]}))

    def val_loss(params):
        total = count = 0.0
        for x, y in zip(xs, ys):
            xa, ya = (jax.make_array_from_process_local_data(sharding, a[None]) for a in (x, y))
            s, n = nats(params, xa, ya)
            total, count = total + float(s), count + float(n)
        return total / max(count, 1.0)

    return val_loss


def main(args) -> int:
    if args.multihost:
        loop.init_multihost()
    enable_compilation_cache()
    home = nanocode_home()
    params, cfg, tokenizer, ckpt_dir = load_start(args.from_, args.tokenizer, args.dtype, args.seq_len,
                                                  args.remat)
    T = args.seq_len or cfg.sequence_len
    n_dev = jax.device_count()
    rows, accum = batch_geometry(T, n_dev, device_batch=args.device_batch, total_batch=args.total_batch)
    check_batch(rows, jax.process_count(), jax.local_device_count())
    run_dir = Path(args.run_dir) if args.run_dir else home / "runs" / (args.run or f"{run_name_of(args.from_)}-sft")
    print(f"sft from {ckpt_dir}; rows of {T} tokens, {accum} x {rows} rows per step; run dir {run_dir}")

    if args.replay and not 0 < args.replay_share < 1:
        raise ValueError(f"--replay-share {args.replay_share} must be between 0 and 1 (0.25: a quarter "
                         "of the supervised tokens are pretraining text)")
    sources = load_sources(args.data)
    val_rows = [row for rows, _ in load_sources(args.val) for row in rows] if args.val else []
    if not args.val:
        sources, val_rows = split_val(sources, args.val_convs, args.seed)
    docs, counts_times = [], []
    for i, (src_rows, times) in enumerate(sources):
        kept, too_long = render_docs(src_rows, tokenizer, T)
        if too_long:
            print(f"data {args.data[i]}: dropped {too_long} conversation(s) longer than {T + 1} "
                  "tokens (never cut; raise --seq-len to keep them)")
        docs.append(kept)
        counts_times.append((len(kept), times))
    if not any(n for n, _ in counts_times):
        raise ValueError(f"no conversation fits in {T + 1} tokens; raise --seq-len")
    if args.replay:  # pretraining text as a share of the supervised tokens (its tokens all are)
        supervised = round(sum(int(m.sum()) * t for d, (_, t) in zip(docs, counts_times) for _, m in d))
        kept = replay_docs(args.replay, tokenizer, T, round(supervised * args.replay_share / (1 - args.replay_share)),
                           args.replay_code_ratio)
        n = sum(len(i) for i, _ in kept)
        print(f"replay {args.replay}: {len(kept)} pieces, {n:,} tokens ({n / (n + supervised):.0%} of the "
              f"{n + supervised:,} supervised tokens)")
        docs.append(kept)
        counts_times.append((len(kept), 1.0))
    packer = Packer(docs, counts_times, T, tokenizer.bos_id, seed=args.seed)
    epoch_rows = len(packer.epoch_rows(0))
    sup = sum(int((packer.materialize(r)[1] >= 0).sum()) for r in packer.epoch_rows(0)[:256])
    steps = args.steps or max(1, math.ceil(args.epochs * epoch_rows / (rows * accum)))
    print(f"epoch: {sum(n * t for n, t in counts_times):.0f} conversations in {epoch_rows} rows "
          f"(~{sup / (min(epoch_rows, 256) * T):.0%} supervised tokens); {steps} steps")

    val_kept, val_long = render_docs(val_rows, tokenizer, T)
    if val_long:
        print(f"val: dropped {val_long} conversation(s) longer than {T + 1} tokens")
    val_packer = (Packer([val_kept], [(len(val_kept), 1.0)], T, tokenizer.bos_id, shuffle=False)
                  if val_kept else None)
    mesh = make_mesh(args.mesh)
    val_loss = make_val_eval(cfg, val_packer, rows, mesh, args.eval_rows)
    sample_convs = (val_rows or [r for r, _ in sources][0])[:args.samples]

    def evaluate(params, step):
        out = {"val_loss": val_loss(params)} if val_loss else {}
        if args.sample_tokens > 0:
            loop.on_one_process(params, lambda p: print_samples(p, cfg, tokenizer, sample_convs,
                                                                args.sample_tokens))
        return out

    if not args.resume:  # (a resumed run restores its own params)
        params = unpin_special_heads(params, cfg, tokenizer, [packer.materialize(r) for r in packer.epoch_rows(0)[:4]])
    optimizer = sft_optimizer(cfg, params, steps, rows * accum * T, args.lr_scale, args.warmup_steps)
    lc = loop.stage_loop_config(args, run_dir=run_dir, total_steps=steps, tokens_per_step=rows * accum * T,
                                flops_per_token=flops_per_token(cfg, T), eval_at_start=True,
                                extra_metadata={"stage": "sft", "from": str(ckpt_dir)})
    batches = sft_batches(packer, accum, rows, jax.process_index(), jax.process_count())
    result = loop.run(lc, params=params, optimizer=optimizer, loss=next_token_loss(cfg), mesh=mesh,
                      batches=batches, config=cfg, tokenizer=tokenizer, evaluate=evaluate)
    print("done: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)),
          file=sys.stdout)
    return 0
