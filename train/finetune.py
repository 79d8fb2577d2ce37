"""What the fine-tuning stages (`train sft`, `train dpo`) share, and `train base --from` too: the
starting checkpoint, the data sources and their held-out split, the optimizer and the batch
geometry.

- Start (`--from`: a checkpoint directory, a run directory, or a run tag under
  $NANOCODE_HOME/runs/<tag>/checkpoints): its latest params as fp32 masters (embedding tables in
  the config's embed dtype), its config and its tokenizer. Compute dtype: --dtype, else bf16 on
  GPU/TPU, else the checkpoint's; a longer --seq-len raises the config's context.
- Data (`--data SOURCE[*K] ...`): .jsonl files, directories of them, or hub datasets; K repeats a
  source K times per epoch (fractions take a random part). Invalid rows are dropped and counted by
  rule (train/conversations.py), never fixed; a source with no valid row is skipped. Without --val,
  a seeded split holds out rows from every source in proportion.
- Optimizer: the pretraining one (Muon + AdamW groups) with every peak lr times --lr-scale,
  decaying linearly to 0 at the last step after optional linear warmup; weight decay 0
  (fine-tuning data is small and repeated; decay would only pull towards 0).
"""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np

from nanocode import checkpoint
from nanocode.common import find_checkpoints, nanocode_home
from nanocode.gpt import forward
from nanocode.protocol import SPECIAL_TOKENS
from nanocode.tokenizer import Tokenizer
from train.conversations import TRIMMED, keep_valid, load_rows, parse_source
from train.optim import ADAMW_GROUPS, build_optimizer, scaled_lrs


# ---- starting checkpoint -------------------------------------------------------------------------
PINNED = 0.9  # a head logit below -PINNED x softcap sits where tanh's slope is under 0.19


def unpin_special_heads(params, cfg, tokenizer, rows, log=print):
    """params with the head columns of pinned special tokens set to the ordinary tokens' mean.

    A base never sees the chat tokens (<|tool_call_start|>, <|assistant_end|>, ...) as targets, so
    a long pretraining pushes their head logits to the softcap's floor, where tanh is flat and
    fine-tuning's gradient cannot lift them: the d6 base of 2026-12-06 had <|tool_call_start|> at
    -14.91 of -15, still at -14.98 after 110 and after 300 SFT updates, and its models never called
    a tool. A special token whose median logit at its target positions in `rows` ((inputs, targets)
    pairs, -1 where unsupervised) is below -PINNED x softcap starts from the ordinary tokens' mean
    column instead: a logit in the live range, no knowledge lost (it had none). A start whose
    special tokens are trained (an SFT checkpoint) is returned unchanged."""
    specials = {tokenizer.encode_special(n): n for n in SPECIAL_TOKENS}
    seen: dict[int, list[float]] = {}
    for inputs, targets in rows:
        logits = np.asarray(forward(params, cfg, jnp.asarray(inputs)[None])[0][0], np.float32)  # (T, V)
        for t in np.flatnonzero(np.isin(targets, list(specials))):
            seen.setdefault(int(targets[t]), []).append(float(logits[t, targets[t]]))
    pinned = sorted(i for i, v in seen.items() if np.median(v) < -PINNED * cfg.softcap)
    if not pinned:
        return params
    head = params["lm_head"]  # (C, padded V)
    ordinary = np.setdiff1d(np.arange(tokenizer.vocab_size), list(specials))
    mean = jnp.mean(head[:, ordinary].astype(jnp.float32), axis=1, keepdims=True)  # (C, 1)
    head = head.at[:, np.array(pinned)].set(jnp.broadcast_to(mean, (head.shape[0], len(pinned))).astype(head.dtype))
    log(f"{len(pinned)} special token(s) had head logits pinned at the softcap's floor "
        f"({', '.join(specials[i] for i in pinned)}): they start from the ordinary tokens' mean head column")
    return {**params, "lm_head": head}


def run_name_of(spec: str) -> str:
    """The run tag of a --from spec (default run names: <tag>-sft, <tag>-dpo)."""
    return find_checkpoints(spec)[1]


def fp32_masters(params, cfg):
    """Float params as training keeps them: fp32 masters, embedding tables in cfg.embed_dtype."""
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


# ---- data sources --------------------------------------------------------------------------------
def load_sources(specs, tokenizer=None, max_tokens=None, log=print):
    """[(valid rows, K)] per --data spec with any; reports what was dropped and why, skips a
    source with no valid row, and fails only when no source has one."""
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


# ---- optimizer and batch -------------------------------------------------------------------------
def sft_optimizer(cfg, params, steps: int, batch_tokens: int, lr_scale: float,
                  warmup_steps: int = 0):
    """The pretraining optimizer with peak lrs x lr_scale, linear decay to 0 (after an optional
    linear warmup), no wd."""
    over = scaled_lrs(lr_scale) | {f"{g}_wd": 0.0 for g in ADAMW_GROUPS} | {"matrix_wd": 0.0}
    return build_optimizer(cfg, params, total_steps=steps, batch_tokens=batch_tokens,
                           warmup_steps=warmup_steps, warmdown_frac=1.0, final_lr_frac=0.0, **over)


def batch_geometry(T: int, n_dev: int, *, device_batch: int, total_batch: int = 0, unit: str = "tokens"):
    """(rows per micro-batch, accum) from --device-batch (rows per device per micro-step) and
    --total-batch (`unit` per optimizer step: tokens for SFT, pairs for DPO; 0 = one micro-step)."""
    rows = device_batch * n_dev
    per_micro = rows * T if unit == "tokens" else rows
    total = total_batch or per_micro
    if total % per_micro:
        raise ValueError(f"total batch {total:,} {unit} is not a multiple of device batch "
                         f"{device_batch} x {n_dev} devices{' x seq ' + str(T) if unit == 'tokens' else ''}"
                         f" = {per_micro:,}; change --total-batch or --device-batch")
    return rows, total // per_micro
