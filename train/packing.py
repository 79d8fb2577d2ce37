"""Conversations -> packed training rows for `train sft` (masked cross-entropy).

Each conversation renders to BOS + turns with the assistant loss mask. Rows hold T+1 tokens
(inputs = row[:-1], targets = row[1:]) and are filled best-fit from a buffer of BUFFER shuffled
conversations (the largest one that still fits, again and again); the rest of a row is BOS
padding with target -1. A conversation is NEVER cut: one longer than T+1 tokens is dropped and
counted. Targets are -1 wherever the mask is 0, so only what the assistant writes (content, tool
call, <|assistant_end|>) is supervised. The packing of an epoch is a pure function of
(seed, epoch), so a loader's state is just {"epoch", "row"}. The trade: best-fit keeps whole
conversations and wastes little of a row, at the price of an epoch's order being planned (and
held) whole before its first row.
"""

from __future__ import annotations

import bisect
import math
import random

import numpy as np

from train.conversations import normalize

BUFFER = 1000  # conversations the best-fit packer chooses from


def render_docs(rows, tokenizer, seq_len: int):
    """Render conversations; (kept [(ids, mask)], number dropped for being longer than T+1)."""
    kept, too_long = [], 0
    for conv in rows:
        ids, mask = tokenizer.render_conversation(normalize(conv))
        if len(ids) > seq_len + 1:
            too_long += 1
            continue
        kept.append((np.asarray(ids, np.int32), np.asarray(mask, np.int8)))
    return kept, too_long


def replay_docs(data_dir, tokenizer, seq_len: int, tokens: int, code_ratio: float):
    """Pretraining text beside the conversations (replay), so that sft keeps the base's language
    model: documents of the train split of data_dir's code/ and text/ shards (`code_ratio` of the
    tokens from code/), in the shards' order, each BOS + its tokens in pieces of at most T+1
    tokens, every token a target but a piece's first; pieces stop once `tokens` are in:
    [(ids int32, mask int8)]."""
    from train.loader import DocumentReader, data_sources  # the pretraining loader's reader (pyarrow)

    sources, weights = data_sources(data_dir, code_ratio)
    out = []
    for kind, directory in sources.items():
        want, got = round(tokens * weights[kind]), 0
        for _, text in DocumentReader(directory, "train"):
            ids = np.asarray([tokenizer.bos_id] + tokenizer.encode(text), np.int32)
            for i in range(0, len(ids), seq_len + 1):
                if got >= want:
                    break
                piece = ids[i:i + seq_len + 1]
                mask = np.ones(len(piece), np.int8)
                mask[0] = 0  # a piece's first token follows another document in its row
                out.append((piece, mask))
                got += len(piece)
            if got >= want:
                break
    return out


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
