"""`train dpo`: preference tuning on {"chosen", "rejected"} pairs with the IPO loss.

For a pair, logratio(side) = sum over the side's assistant tokens (the SFT loss mask) of
log p_policy - log p_reference, and with h = logratio(chosen) - logratio(rejected) the IPO loss is
(h - 1/(2 beta))^2: it pulls the margin to a fixed target instead of pushing it to infinity (DPO's
sigmoid loss), so it does not overfit deterministic preferences.

Design:
- The reference is the --from model itself, frozen: its log-probs of every pair (train and val)
  are computed once before training, with the starting params, and ride along in the batches
  ("ref_chosen", "ref_rejected"). It is never in the optimizer, costs no forward pass per step and
  no second copy of the weights during training; on resume it is recomputed from --from, so it
  stays the same model.
- Fixed shapes: a pair is padded (BOS, target -1) to the smallest bucket >= its longer side
  (64, 128, 256, ... up to --seq-len); a step's pairs all come from one bucket, so the step
  compiles once per bucket, not per length. The last step of a bucket is filled with dummy pairs
  of weight 0. Pairs with a side longer than --seq-len + 1 tokens are dropped and counted.
- The shared loop wants (sum, count): the loss returns (sum of weight x IPO loss, number of real
  pairs), so the step's loss is the mean IPO loss over its pairs whatever the micro-batching.
- Metrics (every --eval-every steps, at 0 and the end, on held-out pairs): val_loss (IPO), val_acc
  (policy margin log p(chosen) - log p(rejected) > 0), val_margin (its mean), val_reward_acc (h > 0),
  val_chosen_reward / val_rejected_reward (beta x logratio, means), val_reward_margin.
- Start, data sources and optimizer as in SFT (train/finetune.py; pretraining groups x
  --lr-scale, default 0.1, linear decay to 0, no weight decay).
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from nanocode.common import enable_compilation_cache, nanocode_home
from nanocode.config import flops_per_token
from nanocode.gpt import token_nll
from nanocode.sharding import make_mesh, tree_shardings
from train import loop
from train.conversations import normalize
from train.finetune import batch_geometry, load_sources, load_start, run_name_of, sft_optimizer, split_val
from train.loader import check_batch

MIN_BUCKET = 64


def ipo_loss(logp_chosen, logp_rejected, ref_chosen, ref_rejected, beta: float):
    """Per-pair IPO loss ((logratio_c - logratio_r) - 1/(2 beta))^2 (works on numpy or jax)."""
    h = (logp_chosen - ref_chosen) - (logp_rejected - ref_rejected)
    return (h - 1.0 / (2.0 * beta)) ** 2


def buckets_for(seq_len: int) -> list[int]:
    out, b = [], MIN_BUCKET
    while b < seq_len:
        out.append(b)
        b *= 2
    return out + [seq_len]


def render_pairs(rows, tokenizer, seq_len: int):
    """[(chosen (ids, mask), rejected (ids, mask), bucket)], number dropped as too long."""
    buckets = buckets_for(seq_len)
    kept, too_long = [], 0
    for row in rows:
        sides = [tokenizer.render_conversation(normalize(row[k])) for k in ("chosen", "rejected")]
        n = max(len(ids) for ids, _ in sides) - 1  # inputs are ids[:-1]
        if n > seq_len:
            too_long += 1
            continue
        bucket = next(b for b in buckets if b >= n)
        kept.append(tuple((np.asarray(i, np.int32), np.asarray(m, np.int8)) for i, m in sides) + (bucket,))
    return kept, too_long


def pad_side(ids, mask, L: int, bos: int):
    """(inputs (L,), targets (L,)) with BOS padding and -1 where the mask is 0."""
    full = np.full(L + 1, bos, np.int32)
    m = np.zeros(L + 1, np.int8)
    full[:len(ids)], m[:len(ids)] = ids, mask
    return full[:-1], np.where(m[1:] == 1, full[1:], -1).astype(np.int32)


def plan_epoch(pairs, per_step: int, seed: int, epoch: int, shuffle: bool = True):
    """Steps of one epoch: lists of pair indices (None = weight-0 filler) of one bucket each."""
    rng = random.Random(f"{seed}/{epoch}")
    by_bucket: dict[int, list[int]] = {}
    for i, p in enumerate(pairs):
        by_bucket.setdefault(p[2], []).append(i)
    steps = []
    for b in sorted(by_bucket):
        idx = by_bucket[b]
        if shuffle:
            rng.shuffle(idx)
        for s in range(0, len(idx), per_step):
            chunk = idx[s:s + per_step]
            steps.append(chunk + [None] * (per_step - len(chunk)))
    if shuffle:
        rng.shuffle(steps)
    return steps


def assemble(pairs, refs, chunk, accum: int, bos: int):
    """One step's pairs -> batch dict with leaves (accum, pairs per micro-batch, ...)."""
    L = next(pairs[i][2] for i in chunk if i is not None)
    out = {k: [] for k in ("chosen", "chosen_targets", "rejected", "rejected_targets",
                           "ref_chosen", "ref_rejected", "weight")}
    for i in chunk:
        real = i is not None
        j = i if real else next(k for k in chunk if k is not None)  # filler copies a real pair
        for side, k in (("chosen", 0), ("rejected", 1)):
            x, y = pad_side(*pairs[j][k], L, bos)
            out[side].append(x)
            out[f"{side}_targets"].append(y)
        out["ref_chosen"].append(refs[j][0])
        out["ref_rejected"].append(refs[j][1])
        out["weight"].append(1.0 if real else 0.0)
    n = len(chunk) // accum
    dtypes = {"ref_chosen": np.float32, "ref_rejected": np.float32, "weight": np.float32}
    return {k: np.asarray(v, dtypes.get(k, np.int32)).reshape(accum, n, *np.shape(v[0]))
            for k, v in out.items()}


def seq_logp(params, cfg, x, y):
    """(B,) sum of target log-probs of rows x (B, L) with targets y (-1 = not scored), through
    the chunked head (never the (B, L, V) logits)."""
    return -token_nll(params, cfg, x, y).sum(-1)


def make_logp(cfg, mesh):
    """jitted (params, inputs (B, L), targets (B, L)) -> (B,) sum of target log-probs, replicated
    on every device of `mesh` so every process can read it. Inputs are host arrays (the same on
    every process); call it with the mesh in context (`jax.set_mesh`), as the training loop does."""
    return jax.jit(lambda params, x, y: seq_logp(params, cfg, x, y),
                   out_shardings=NamedSharding(mesh, PartitionSpec()))


def sequence_logps(logp, params, pairs, bos: int, batch: int):
    """[(logp chosen, logp rejected)] for every pair, in fixed-shape batches per bucket."""
    out = [None] * len(pairs)
    for chunk in plan_epoch(pairs, batch, 0, 0, shuffle=False):
        b = assemble(pairs, [(0.0, 0.0)] * len(pairs), chunk, 1, bos)
        x = np.concatenate([b["chosen"][0], b["rejected"][0]])
        y = np.concatenate([b["chosen_targets"][0], b["rejected_targets"][0]])
        lp = np.asarray(logp(params, x, y), np.float64)
        for k, i in enumerate(chunk):
            if i is not None:
                out[i] = (float(lp[k]), float(lp[len(chunk) + k]))
    return out


def ipo_train_loss(cfg, beta: float):
    """(params, micro-batch) -> (sum of weighted IPO losses, number of real pairs)."""
    def loss(params, mb):
        x = jnp.concatenate([mb["chosen"], mb["rejected"]])
        y = jnp.concatenate([mb["chosen_targets"], mb["rejected_targets"]])
        lp = seq_logp(params, cfg, x, y)
        n = mb["chosen"].shape[0]
        per = ipo_loss(lp[:n], lp[n:], mb["ref_chosen"], mb["ref_rejected"], beta)
        return jnp.sum(per * mb["weight"]), jnp.sum(mb["weight"])

    return loss


def preference_metrics(policy, refs, beta: float) -> dict:
    """Held-out metrics from per-pair (policy logp c, r) and (ref logp c, r)."""
    p, r = np.asarray(policy, np.float64), np.asarray(refs, np.float64)
    lr_c, lr_r = p[:, 0] - r[:, 0], p[:, 1] - r[:, 1]
    h = lr_c - lr_r
    return {"val_loss": float(np.mean((h - 1 / (2 * beta)) ** 2)),
            "val_acc": float(np.mean(p[:, 0] > p[:, 1])),
            "val_margin": float(np.mean(p[:, 0] - p[:, 1])),
            "val_reward_acc": float(np.mean(h > 0)),
            "val_reward_margin": float(beta * np.mean(h)),
            "val_chosen_reward": float(beta * np.mean(lr_c)),
            "val_rejected_reward": float(beta * np.mean(lr_r))}


def training_pairs(args, tokenizer, T: int) -> tuple[list, list[int], list]:
    """The pairs of --data and --val (or the --val-pairs held out of --data), rendered to at most
    T + 1 tokens a side (longer pairs are dropped, with a note): (unique training pairs, the
    training pairs as indices into them (SOURCE*K repeats a pair by index, so each reference
    log-prob is computed once), held-out pairs)."""
    def pairs_of(rows, what):
        bad = [i for i, r in enumerate(rows) if not ("chosen" in r and "rejected" in r)]
        if bad:
            raise ValueError(f"{what}: row {bad[0]} is not a preference pair {{\"chosen\", \"rejected\"}}")
        kept, too_long = render_pairs(rows, tokenizer, T)
        if too_long:
            print(f"{what}: dropped {too_long} pair(s) with a side longer than {T + 1} tokens "
                  "(never cut; raise --seq-len to keep them)")
        return kept

    sources = load_sources(args.data)
    val_rows = [row for rows, _ in load_sources(args.val) for row in rows] if args.val else []
    if not args.val:
        sources, val_rows = split_val(sources, args.val_pairs, args.seed)
    unique, index = [], []
    for spec, (rows, times) in zip(args.data, sources):
        new = pairs_of(rows, spec)
        kept = list(range(len(unique), len(unique) + len(new)))
        unique += new
        whole, frac = int(times), times - int(times)
        index += kept * whole + random.Random(args.seed).sample(kept, round(frac * len(kept)))
    if not index:
        raise ValueError(f"no preference pair fits in {T + 1} tokens; raise --seq-len")
    return unique, index, pairs_of(val_rows, "val") if val_rows else []


def pair_batches(train_pairs: list, train_refs: list, per_step: int, accum: int, bos: int, seed: int,
                 local: int):
    """batches(loader_state) for loop.run: epochs of `plan_epoch` over the training pairs, each step
    `assemble`d into (accum, rows, ...) arrays of which this process keeps its `local` rows; the
    loader state is {"epoch", "step"} (the step within the epoch's plan)."""
    def batches(state):
        epoch, s = (int(state["epoch"]), int(state["step"])) if state else (0, 0)
        sl = slice(jax.process_index() * local, (jax.process_index() + 1) * local)
        while True:
            plan = plan_epoch(train_pairs, per_step, seed, epoch)
            while s < len(plan):
                b = assemble(train_pairs, train_refs, plan[s], accum, bos)
                s += 1
                yield {k: v[:, sl] for k, v in b.items()}, {"epoch": epoch, "step": s}
            epoch, s = epoch + 1, 0
    return batches


def main(args) -> int:
    if args.multihost:
        loop.init_multihost()
    enable_compilation_cache()
    if not args.beta > 0:
        raise ValueError(f"--beta must be > 0, got {args.beta}")
    home = nanocode_home()
    params, cfg, tokenizer, ckpt_dir = load_start(args.from_, args.tokenizer, args.dtype, args.seq_len,
                                                  args.remat)
    T = args.seq_len or cfg.sequence_len
    n_dev, bos = jax.device_count(), tokenizer.bos_id
    P, accum = batch_geometry(T, n_dev, device_batch=args.device_batch, total_batch=args.total_batch,
                              unit="pairs")
    local = check_batch(P, jax.process_count(), jax.local_device_count())
    run_dir = Path(args.run_dir) if args.run_dir else home / "runs" / (args.run or f"{run_name_of(args.from_)}-dpo")

    unique, index, val_pairs = training_pairs(args, tokenizer, T)
    train_pairs = [unique[i] for i in index]
    per_step = P * accum
    steps_per_epoch = len(plan_epoch(train_pairs, per_step, args.seed, 0))
    steps = args.steps or max(1, math.ceil(args.epochs * steps_per_epoch))
    mean_len = float(np.mean([p[2] for p in train_pairs]))
    print(f"dpo from {ckpt_dir}: {len(train_pairs)} pairs ({len(val_pairs)} held out), {accum} x {P} "
          f"pairs per step, {steps} steps, beta {args.beta}; run dir {run_dir}")

    mesh = make_mesh(args.mesh)
    ref_params = loop.place(params, tree_shardings(params, mesh))
    logp = make_logp(cfg, mesh)
    with jax.set_mesh(mesh):  # as in the training loop: the model's per-device kernels read it
        unique_refs = sequence_logps(logp, ref_params, unique, bos, max(P, 8))
        val_refs = sequence_logps(logp, ref_params, val_pairs, bos, max(P, 8)) if val_pairs else []
    train_refs = [unique_refs[i] for i in index]
    del ref_params

    def evaluate(params, step):
        if not val_pairs:
            return {}
        policy = sequence_logps(logp, params, val_pairs, bos, max(P, 8))
        return preference_metrics(policy, val_refs, args.beta)

    optimizer = sft_optimizer(cfg, params, steps, int(per_step * 2 * mean_len), args.lr_scale,
                              args.warmup_steps)
    lc = loop.stage_loop_config(args, run_dir=run_dir, total_steps=steps,
                                tokens_per_step=int(per_step * 2 * mean_len),
                                flops_per_token=flops_per_token(cfg, int(mean_len)), eval_at_start=True,
                                extra_metadata={"stage": "dpo", "from": str(ckpt_dir), "beta": args.beta})
    batches = pair_batches(train_pairs, train_refs, per_step, accum, bos, args.seed, local)
    result = loop.run(lc, params=params, optimizer=optimizer, loss=ipo_train_loss(cfg, args.beta),
                      mesh=mesh, batches=batches, config=cfg, tokenizer=tokenizer, evaluate=evaluate)
    print("done: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)),
          file=sys.stdout)
    return 0
