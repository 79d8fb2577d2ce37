"""`train sft`: supervised fine-tuning on conversations and agent traces (masked cross-entropy).

Design:
- Start: the params of a checkpoint (`--from`: a checkpoint directory, a run directory, or a run tag
  under $NANOCODE_HOME/runs/<tag>/checkpoints), its config and its tokenizer. The optimizer starts
  fresh; the run goes to $NANOCODE_HOME/runs/<from>-sft unless --run/--run-dir say otherwise.
- Data (`--data SOURCE[*K] ...`): .jsonl files, directories of them, or hub datasets; K repeats a
  source K times per epoch (fractions take a random part). Invalid conversations are dropped and
  counted by rule (train/conversations.py), never fixed.
- Packing: each conversation renders to BOS + turns with the assistant loss mask. Rows hold T+1
  tokens (inputs = row[:-1], targets = row[1:]) and are filled best-fit from a buffer of 1000
  shuffled conversations (the largest one that still fits, again and again); the rest of a row is
  BOS padding with target -1. A conversation is NEVER cut: one longer than T+1 tokens is dropped
  and counted. Targets are -1 wherever the mask is 0, so only what the assistant writes (content,
  tool call, <|assistant_end|>) is supervised. The packing of an epoch is a pure function of
  (seed, epoch), so the loader state is just {"epoch", "row"}.
- Loss: sum of nats over supervised targets and their count (train.base.next_token_loss); the shared
  loop divides the summed gradients by the total count over micro-batches and devices, so every
  supervised token weighs the same however the rows are packed.
- LR: the pretraining optimizer (Muon + AdamW groups, MODEL.md) with every peak lr times
  --lr-scale (default 0.5), decaying linearly to 0 at the last step after --warmup-steps of linear
  warmup (default 0: a trained checkpoint needs none; a random init does, see
  tests/test_sft_tool_calls.py); weight decay 0 (fine-tuning data is small and repeated; decay
  would only pull towards 0).
- Eval every --eval-every steps (and at step 0 and the end): masked val loss on held-out
  conversations (--val, else a seeded split of the data) and greedy samples of held-out prompts in
  the agent format (render_for_completion, generated until <|assistant_end|> or
  <|tool_call_end|>).
"""

from __future__ import annotations

import bisect
import math
import random
import sys
from pathlib import Path

import numpy as np

BUFFER = 1000  # conversations the best-fit packer chooses from


# ---- starting checkpoint -------------------------------------------------------------------------
def run_name_of(spec: str) -> str:
    """The run tag of a --from spec (default run names: <tag>-sft, <tag>-dpo)."""
    from nanocode.common import find_checkpoints
    return find_checkpoints(spec)[1]


def fp32_masters(params, cfg):
    """Float params as training keeps them: fp32 masters, embedding tables in cfg.embed_dtype."""
    import jax
    import jax.numpy as jnp

    def cast(path, x):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        embed = str(getattr(path[0], "key", "")) in ("wte", "value_embeds")
        return x.astype(cfg.embed_dtype if embed else jnp.float32)
    return jax.tree_util.tree_map_with_path(cast, params)


def load_start(spec: str, tokenizer_dir=None, dtype: str | None = None, seq_len: int | None = None,
               remat: str | None = None):
    """(params, cfg, tokenizer, ckpt_dir) of the --from checkpoint (its latest step). Compute dtype:
    `dtype`, else bf16 on GPU/TPU (a checkpoint trained in fp32 fine-tunes in bf16 there), else the
    checkpoint's."""
    import jax
    from nanocode import checkpoint
    from nanocode.common import find_checkpoints, nanocode_home
    from nanocode.tokenizer import Tokenizer

    ckpt_dir, _ = find_checkpoints(spec)
    params, cfg, tok, _ = checkpoint.load_params(ckpt_dir)
    params = fp32_masters(params, cfg)  # an exported bf16 model (the shipped default) trains in fp32
    if tok is not None:
        tokenizer = Tokenizer.from_dict(tok)
    else:
        tokenizer = Tokenizer.load(tokenizer_dir or nanocode_home() / "tokenizer")
    if tokenizer.vocab_size != cfg.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but the model in {ckpt_dir} "
                         f"expects {cfg.vocab_size}; pass the tokenizer it was trained with")
    if dtype or jax.default_backend() in ("gpu", "tpu"):
        cfg = cfg.replace(compute_dtype=dtype or "bfloat16")
    if remat:
        cfg = cfg.replace(remat=remat)
    if seq_len and seq_len > cfg.sequence_len:  # longer context than pretraining: windows follow
        cfg = cfg.replace(sequence_len=seq_len)
    return params, cfg, tokenizer, ckpt_dir


# ---- data ----------------------------------------------------------------------------------------
def load_sources(specs, tokenizer=None, max_tokens=None, log=print):
    """[(valid rows, K)] per --data spec with any; reports what was dropped and why, skips a
    source with no valid row, and fails only when no source has one."""
    from train.conversations import TRIMMED, keep_valid, load_rows, parse_source

    out, skipped = [], []
    for spec in specs:
        source, times = parse_source(spec)
        rows, counts = keep_valid(load_rows(source), tokenizer, max_tokens)
        dropped = {rule: n for rule, n in counts.items() if rule != TRIMMED}
        note = ("; dropped " + ", ".join(f"{n} {rule}" for rule, n in sorted(dropped.items()))
                if dropped else "") + (f"; {counts[TRIMMED]} {TRIMMED}" if TRIMMED in counts else "")
        log(f"data {source}: {len(rows)} rows x {times:g}{note}")
        if rows:
            out.append((rows, times))
        else:  # e.g. one saved session that ended on a rejection: the others still train
            log(f"data {source}: skipped, no valid rows (see `python -m train.conversations {source}`)")
            skipped.append(str(source))
    if not out:
        raise ValueError(f"no data source has a valid row ({', '.join(skipped)}); check them with "
                         f"`python -m train.conversations FILE`")
    return out


def split_val(sources, val_rows: int, seed: int):
    """Hold out up to val_rows rows (spread over the sources in proportion) when there is no --val.
    Returns (train sources, val rows)."""
    total = sum(len(r) for r, _ in sources)
    if total < 2 or val_rows <= 0:
        return sources, []
    n_val = min(val_rows, max(1, total // 20))
    train, val = [], []
    for i, (rows, times) in enumerate(sources):
        k = min(len(rows) - 1, round(n_val * len(rows) / total))
        order = list(range(len(rows)))
        random.Random(seed * 7919 + i).shuffle(order)
        val += [rows[j] for j in order[:k]]
        train.append(([rows[j] for j in sorted(order[k:])], times))
    return train, val


def epoch_order(counts_times, seed: int, epoch: int) -> list[tuple[int, int]]:
    """(source, index) items of one epoch: each source's rows K times (a fraction takes a random
    part), shuffled, all determined by (seed, epoch)."""
    rng = random.Random(f"{seed}/{epoch}")
    items = []
    for s, (n, times) in enumerate(counts_times):
        whole, frac = int(times), times - int(times)
        for _ in range(whole):
            items += [(s, i) for i in range(n)]
        if frac > 0:
            items += [(s, i) for i in rng.sample(range(n), round(frac * n))]
    rng.shuffle(items)
    return items


def best_fit_rows(lengths: list[int], capacity: int, buffer: int = BUFFER) -> list[list[int]]:
    """Pack items (in the given order) into rows of `capacity` tokens: from a buffer of the next
    `buffer` items, put the largest that fits into the current row until none fits, then start a
    new row. Every length must be <= capacity. Returns rows as lists of item positions."""
    rows, pool, nxt, seq = [], [], 0, 0

    def refill():
        nonlocal nxt, seq
        while len(pool) < buffer and nxt < len(lengths):
            bisect.insort(pool, (lengths[nxt], seq, nxt))
            nxt, seq = nxt + 1, seq + 1

    refill()
    while pool:
        row, room = [], capacity
        while pool:
            j = bisect.bisect_right(pool, (room, math.inf, 0)) - 1
            if j < 0:
                break
            n, _, i = pool.pop(j)
            row.append(i)
            room -= n
            refill()
        rows.append(row)
    return rows


class Packer:
    """Rendered conversations -> packed (inputs, targets) rows of T tokens, epoch by epoch."""

    def __init__(self, docs, counts_times, seq_len: int, bos_id: int, seed: int = 0,
                 shuffle: bool = True):
        self.docs = docs  # per source: list of (ids int32, targets-mask int8) already filtered
        self.counts_times, self.T, self.bos, self.seed = counts_times, seq_len, bos_id, seed
        self.shuffle = shuffle
        self._cache = {}

    def epoch_rows(self, epoch: int) -> list[list[tuple[int, int]]]:
        if epoch not in self._cache:
            if self.shuffle:
                items = epoch_order(self.counts_times, self.seed, epoch)
            else:
                items = [(s, i) for s, (n, _) in enumerate(self.counts_times) for i in range(n)]
            lengths = [len(self.docs[s][i][0]) for s, i in items]
            rows = best_fit_rows(lengths, self.T + 1)
            self._cache = {epoch: [[items[k] for k in row] for row in rows]}  # keep one epoch
        return self._cache[epoch]

    def materialize(self, row) -> tuple[np.ndarray, np.ndarray]:
        """One packed row -> (inputs (T,), targets (T,)); BOS padding, -1 where not supervised."""
        ids = np.full(self.T + 1, self.bos, np.int32)
        mask = np.zeros(self.T + 1, np.int8)
        pos = 0
        for s, i in row:
            d_ids, d_mask = self.docs[s][i]
            ids[pos:pos + len(d_ids)] = d_ids
            mask[pos:pos + len(d_ids)] = d_mask
            pos += len(d_ids)
        targets = np.where(mask[1:] == 1, ids[1:], -1).astype(np.int32)
        return ids[:-1].copy(), targets

    def stream(self, state: dict | None):
        """Infinite ((inputs, targets), state-after-this-row) over epochs, from `state`."""
        epoch, r = (int(state["epoch"]), int(state["row"])) if state else (0, 0)
        while True:
            rows = self.epoch_rows(epoch)
            if not rows:
                raise ValueError("no conversations to train on")
            while r < len(rows):
                x = self.materialize(rows[r])
                r += 1
                yield x, {"epoch": epoch, "row": r}
            epoch, r = epoch + 1, 0


def render_docs(rows, tokenizer, seq_len: int):
    """Render conversations; (kept [(ids, mask)], number dropped for being longer than T+1)."""
    from train.conversations import normalize

    kept, too_long = [], 0
    for conv in rows:
        ids, mask = tokenizer.render_conversation(normalize(conv))
        if len(ids) > seq_len + 1:
            too_long += 1
            continue
        kept.append((np.asarray(ids, np.int32), np.asarray(mask, np.int8)))
    return kept, too_long


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
    from train.conversations import normalize

    msgs = normalize(conv)["messages"]
    for k, m in enumerate(msgs):
        if m["role"] == "assistant":
            return {"messages": msgs[:k]} if k else None
    return None


def print_samples(params, cfg, tokenizer, convs, max_new: int, log=print):
    """Greedy agent-format completions of held-out prompts, stopped at <|assistant_end|> or
    <|tool_call_end|>."""
    from nanocode.engine import Engine

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
    import jax

    from train.base import next_token_loss
    from train.loop import batch_sharding

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


def sft_optimizer(cfg, params, steps: int, batch_tokens: int, lr_scale: float,
                  warmup_steps: int = 0):
    """The pretraining optimizer with peak lrs x lr_scale, linear decay to 0 (after an optional
    linear warmup), no wd."""
    from train.optim import ADAMW_GROUPS, build_optimizer, scaled_lrs

    over = scaled_lrs(lr_scale) | {f"{g}_wd": 0.0 for g in ADAMW_GROUPS} | {"matrix_wd": 0.0}
    return build_optimizer(cfg, params, total_steps=steps, batch_tokens=batch_tokens,
                           warmup_steps=warmup_steps, warmdown_frac=1.0, final_lr_frac=0.0, **over)


def batch_geometry(args, T: int, n_dev: int, unit: str = "tokens"):
    """(rows per micro-batch, accum) from --device-batch and --total-batch (tokens for SFT)."""
    rows = args.device_batch * n_dev
    per_micro = rows * T if unit == "tokens" else rows
    total = args.total_batch or per_micro
    if total % per_micro:
        raise ValueError(f"total batch {total:,} {unit} is not a multiple of device batch "
                         f"{args.device_batch} x {n_dev} devices{' x seq ' + str(T) if unit == 'tokens' else ''}"
                         f" = {per_micro:,}; change --total-batch or --device-batch")
    return rows, total // per_micro


def main(args) -> int:
    import jax

    from nanocode.common import enable_compilation_cache, nanocode_home
    from nanocode.config import flops_per_token
    from train import loop
    from train.base import next_token_loss
    from train.loader import check_batch

    if args.multihost:
        loop.init_multihost()
    enable_compilation_cache()
    home = nanocode_home()
    params, cfg, tokenizer, ckpt_dir = load_start(args.from_, args.tokenizer, args.dtype, args.seq_len,
                                                  args.remat)
    T = args.seq_len or cfg.sequence_len
    n_dev = jax.device_count()
    rows, accum = batch_geometry(args, T, n_dev)
    check_batch(rows, jax.process_count(), jax.local_device_count())
    run_dir = Path(args.run_dir) if args.run_dir else home / "runs" / (args.run or f"{run_name_of(args.from_)}-sft")
    print(f"sft from {ckpt_dir}; rows of {T} tokens, {accum} x {rows} rows per step; run dir {run_dir}")

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
    mesh = loop.make_mesh(args.mesh)
    val_loss = make_val_eval(cfg, val_packer, rows, mesh, args.eval_rows)
    sample_convs = (val_rows or [r for r, _ in sources][0])[:args.samples]

    def evaluate(params, step):
        out = {"val_loss": val_loss(params)} if val_loss else {}
        if args.sample_tokens > 0:
            loop.on_one_process(params, lambda p: print_samples(p, cfg, tokenizer, sample_convs,
                                                                args.sample_tokens))
        return out

    optimizer = sft_optimizer(cfg, params, steps, rows * accum * T, args.lr_scale, args.warmup_steps)
    lc = loop.LoopConfig(run_dir=run_dir, total_steps=steps, tokens_per_step=rows * accum * T,
                         flops_per_token=flops_per_token(cfg, T), log_every=args.log_every,
                         eval_every=args.eval_every, save_every=args.save_every, keep=args.keep,
                         resume=args.resume, peak_flops=args.peak_flops, eval_at_start=True,
                         extra_metadata={"stage": "sft", "from": str(ckpt_dir)})
    batches = sft_batches(packer, accum, rows, jax.process_index(), jax.process_count())
    result = loop.run(lc, params=params, optimizer=optimizer, loss=next_token_loss(cfg), mesh=mesh,
                      batches=batches, config=cfg, tokenizer=tokenizer, evaluate=evaluate)
    print("done: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)),
          file=sys.stdout)
    return 0
