"""Pretraining batches: documents read by row group, tokenized, packed best-fit into BOS-aligned rows.

Reading. A directory's split is a fixed global list of row groups (shard order, then row-group
order; train = all shards but the last, val = the last). Process p of P reads row groups p, p+P, ...
of it, so P processes together read every row group exactly once per epoch, disjointly. Train loops
forever (the epoch is in the state); val is read once.

Cropping. A document longer than a row only ever gives a row its first tokens (see Packing), so
its text is cut at CROP_CHARS_PER_TOKEN x (T+1) characters before it is tokenized: code files run to
tens of thousands of tokens, and tokenizing them whole was most of the loader's work. The cut leaves
more than a row's worth of tokens at any bytes/token a BPE reaches on code or prose (3-5), so such a
document stays a crop candidate; only its token count as the best-fit order sees it changes.

Packing. Every document gets BOS prepended. Each source keeps a buffer of at
least `buffer_docs` tokenized documents; a row of T+1 tokens takes the largest buffered document that
fits the space left, and when none fits it takes the shortest and crops it to fill the row exactly
(the rest of that document is dropped, as in nanochat). Rows are full (no padding) and start with
BOS; inputs are row[:-1], targets row[1:]. With several sources (e.g. text 0.8, code 0.2) the
source of each row is drawn from an RNG seeded by (seed, process, batch number).

Copy and span rows (`copy_share`, `span_share`, off by default; train/copy_rows.py says why and
what they are). With copy_share p a row is, with probability p, a copy row (BOS and a random run
repeated); with span_share q a natural row gets, with probability q, made-up names planted twice,
up to ~1,800 tokens apart. Which rows, and their tokens, come from an RNG seeded by (seed,
process, batch number, 1), and copy rows read no documents: a pure function of the state, so
resume stays exact.

Resume. The state yielded with each batch is small JSON: per source the epoch, the next row group to
read and the buffer as document references (shard, row group, rows) with their token counts, in
insertion order, plus the batch counter and a tokenizer fingerprint. Restoring re-reads the
referenced texts and tokenizes each when it is first used (its stored length places it in the
best-fit order until then), and since every choice above is a function of that state, the batches
that follow are bitwise those of an uninterrupted run.

Why pyarrow and not `datasets` here: exact resume needs random access to a document by (shard, row
group, row) and striding needs row groups as the unit; pyarrow.parquet gives both directly, and lets
every read error name its file. `datasets` streaming (`hf_dataset`) is the convenient sequential view
of the same shards, for inspection and evals; its own resume/sharding (state_dict,
split_dataset_by_node) works per shard or per example, cannot re-read a buffer, and would not keep
these guarantees. So `datasets` (~2.4 s) is imported inside hf_dataset only.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from train.copy_rows import copy_row, plant_spans
from train.shards import DataError, list_shards, open_shard, read_row_group

STATE_FORMAT = "nanocode-loader/2"  # /2: lengths are of the cropped texts
CROP_CHARS_PER_TOKEN = 8


def check_batch(global_batch: int, process_count: int = 1, local_devices: int = 1) -> int:
    """The per-process batch for a global batch; ValueError when it does not divide evenly."""
    if global_batch < 1:
        raise ValueError(f"batch size must be >= 1, got {global_batch}")
    if global_batch % process_count:
        raise ValueError(f"global batch {global_batch} does not divide over {process_count} processes: "
                         f"use a multiple of {process_count}")
    per_process = global_batch // process_count
    if per_process % local_devices:
        raise ValueError(f"per-process batch {per_process} (global {global_batch} / {process_count} processes) "
                         f"does not divide over {local_devices} local devices: use a global batch that is a "
                         f"multiple of {process_count * local_devices}")
    return per_process


def data_sources(data_dir: str | os.PathLike, code_ratio: float = 0.2) -> tuple[dict[str, str], dict[str, float]]:
    """(sources, weights) for the code/ and text/ shard directories under data_dir that exist."""
    root = Path(data_dir)
    have = {k: str(root / k) for k in ("text", "code") if any((root / k).glob("shard_*.parquet"))}
    if not have:
        raise DataError(f"no shards under {root}/code or {root}/text: run `train data local` first")
    weights = {"text": 1.0 - code_ratio, "code": code_ratio}
    sources = {k: d for k, d in have.items() if weights[k] > 0}
    if not sources:
        raise DataError(f"code ratio {code_ratio} selects no source among {sorted(have)} under {root}")
    return sources, {k: weights[k] for k in sources}


def hf_dataset(directory: str | os.PathLike, split: str = "train"):
    """The split's shards as a `datasets` IterableDataset (local parquet, streaming): one pass, in order."""
    import datasets

    files = [str(f) for f in list_shards(directory, split)]
    return datasets.load_dataset("parquet", data_files={split: files}, split=split, streaming=True)


class DocumentReader:
    """A split of a shard directory, as this process's stride of its global row-group list."""

    def __init__(self, directory: str | os.PathLike, split: str = "train", process_index: int = 0,
                 process_count: int = 1):
        if not 0 <= process_index < process_count:
            raise ValueError(f"process_index {process_index} is not in [0, {process_count})")
        self.directory, self.split = Path(directory), split
        self.files = list_shards(directory, split, validate=False)
        self._open: dict[int, tuple] = {}  # a few open files (a hub corpus has ~1800 shards: not all at once)
        groups, listing = [], []
        for i, f in enumerate(self.files):  # every footer is read here, so a bad shard fails now, by name
            pf, _ = self._pf(i)
            groups.append(pf.metadata.num_row_groups)
            listing.append(f"{f.name} {pf.metadata.num_rows} {f.stat().st_size}")
        self.units = [(i, rg) for i, n in enumerate(groups) for rg in range(n)]
        self.mine = self.units[process_index::process_count]
        if not self.mine:
            raise DataError(f"split {split!r} of {self.directory} has {len(self.units)} row group(s), none for "
                            f"process {process_index} of {process_count}: rebuild with a smaller --row-group")
        text = f"{split}\n{process_index}/{process_count}\n" + "\n".join(listing)
        self.digest = hashlib.sha1(text.encode()).hexdigest()[:16]

    def _pf(self, shard: int):
        if shard not in self._open:
            if len(self._open) >= 4:
                oldest = next(iter(self._open))
                self._open.pop(oldest)[0].close()
            self._open[shard] = open_shard(self.files[shard])
        return self._open[shard]

    def read(self, shard: int, row_group: int) -> list[str]:
        pf, column = self._pf(shard)
        return read_row_group(pf, column, row_group, self.files[shard])

    def __iter__(self) -> Iterator[tuple[tuple[int, int, int], str]]:
        """One pass: ((shard, row_group, row), text) over this process's row groups."""
        for shard, rg in self.mine:
            for row, text in enumerate(self.read(shard, rg)):
                yield (shard, rg, row), text


class _Stream:
    """One source: its reader, read position and best-fit buffer."""

    def __init__(self, tokenizer, reader: DocumentReader, buffer_docs: int, loop: bool, crop_chars: int):
        self.tok, self.reader, self.buffer_docs, self.loop = tokenizer, reader, buffer_docs, loop
        self.crop_chars = crop_chars
        self.epoch, self.pos, self.uid = 0, 0, 0
        # uid -> (ref, tokens without BOS, or the text when restored and not yet re-tokenized)
        self.docs: dict[int, tuple[tuple[int, int, int], np.ndarray | str]] = {}
        self.keys: list[tuple[int, int]] = []  # sorted (length with BOS, uid)
        self.dropped = 0  # tokens cut off cropped documents (not in the state; diagnostics only)

    def _insert(self, ref: tuple[int, int, int], doc: np.ndarray | str, length: int) -> None:
        self.docs[self.uid] = (ref, doc)
        bisect.insort(self.keys, (length, self.uid))
        self.uid += 1

    def _refill(self) -> None:
        empty_units = 0
        while len(self.docs) < self.buffer_docs:
            if self.pos == len(self.reader.mine):
                if not self.loop:
                    return
                self.epoch, self.pos = self.epoch + 1, 0
            shard, rg = self.reader.mine[self.pos]
            texts = self._read(shard, rg)
            self.pos += 1
            for row, ids in enumerate(self.tok.encode_batch(texts)):
                self._insert((shard, rg, row), np.asarray(ids, dtype=np.int32), len(ids) + 1)
            empty_units = 0 if texts else empty_units + 1
            if empty_units > len(self.reader.mine):
                raise DataError(f"split {self.reader.split!r} of {self.reader.directory} has no documents")

    def _read(self, shard: int, row_group: int) -> list[str]:
        """A row group's texts, each cut to what a row can use (see Cropping)."""
        return [t[:self.crop_chars] for t in self.reader.read(shard, row_group)]

    def fill(self, row: np.ndarray, bos: int) -> bool:
        """Fill row (T+1 tokens) best-fit from the buffer; False when a finite split runs out."""
        pos, size = 0, len(row)
        while pos < size:
            self._refill()
            if not self.keys:
                return False
            space = size - pos
            i = bisect.bisect_right(self.keys, (space, 1 << 62)) - 1
            crop = i < 0
            length, uid = self.keys.pop(0 if crop else i)
            ref, tokens = self.docs.pop(uid)
            if isinstance(tokens, str):  # restored from a state: tokenize now that it is used
                tokens = np.asarray(self.tok.encode(tokens), dtype=np.int32)
                if len(tokens) + 1 != length:
                    raise DataError(f"document {ref} of {self.reader.directory} has {len(tokens) + 1} tokens, "
                                    f"the loader state says {length}: the shards or tokenizer changed")
            n = space if crop else length
            self.dropped += length - n
            row[pos] = bos
            row[pos + 1:pos + n] = tokens[:n - 1]
            pos += n
        return True

    def state(self) -> dict:
        lengths = {uid: length for length, uid in self.keys}
        runs: list[list] = []
        for uid in sorted(self.docs):
            shard, rg, row = self.docs[uid][0]
            if not (runs and runs[-1][0] == shard and runs[-1][1] == rg):
                runs.append([shard, rg, [], []])
            runs[-1][2].append(row)
            runs[-1][3].append(lengths[uid])
        return {"digest": self.reader.digest, "epoch": self.epoch, "pos": self.pos, "buffer": runs}

    def restore(self, s: dict, name: str) -> None:
        """Rebuild the buffer from references: texts are read now (cheap), tokenized when first used
        (a buffer that has been packed from a while holds the longest documents: tens of MB)."""
        if s.get("digest") != self.reader.digest:
            raise DataError(f"loader state for source {name!r} was made on other shards than those in "
                            f"{self.reader.directory} (or another process split): cannot resume exactly")
        self.epoch, self.pos = int(s["epoch"]), int(s["pos"])
        cache: dict[tuple[int, int], list[str]] = {}
        for shard, rg, rows, lengths in s["buffer"]:
            if (shard, rg) not in cache:
                cache[shard, rg] = self._read(shard, rg)
            for row, length in zip(rows, lengths):
                self._insert((shard, rg, row), cache[shard, rg][row], int(length))


def _fingerprint(tokenizer) -> str:
    to_dict = getattr(tokenizer, "to_dict", None)
    blob = json.dumps(to_dict(), sort_keys=True) if to_dict else repr(tokenizer.bos_id)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def packed_batches(tokenizer, sources: dict[str, str | os.PathLike], weights: dict[str, float] | None,
                   batch_size: int, seq_len: int, split: str = "train", process_index: int = 0,
                   process_count: int = 1, buffer_docs: int = 1000, seed: int = 0,
                   state: dict | None = None, copy_share: float = 0.0,
                   span_share: float = 0.0) -> Iterator[tuple[np.ndarray, np.ndarray, dict]]:
    """An iterator of (inputs int32 (B, T), targets int32 (B, T), state) for this process, endless
    for train. Shards are listed and checked, and a state is restored, here rather than at the first
    batch, so bad data or a mismatched state fails at the call.

    sources: name -> shard directory (e.g. {"text": .../data/text, "code": .../data/code}); weights:
    name -> row probability (None = equal; names with weight 0 are not opened). batch_size is this
    process's batch (see check_batch). state: a state yielded earlier, to continue right after it.
    copy_share, span_share: the share of rows that are copy rows, and of the other rows that get
    planted names (see the module docstring).
    Val ends when a source runs out (the partial batch is dropped).
    """
    if batch_size < 1 or seq_len < 1 or buffer_docs < 1:
        raise ValueError(f"batch_size, seq_len and buffer_docs must be >= 1 (got {batch_size}, {seq_len}, {buffer_docs})")
    for name, share in (("copy_share", copy_share), ("span_share", span_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {share}")
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    weights = dict(weights) if weights is not None else {name: 1.0 for name in sources}
    unknown = sorted(set(weights) - set(sources))
    if unknown or any(w < 0 for w in weights.values()):
        raise ValueError(f"weights must be >= 0 and name given sources {sorted(sources)}, got {weights}")
    names = sorted(n for n in sources if weights.get(n, 0) > 0)
    if not names:
        raise ValueError(f"no source has a positive weight: {weights}")
    probs = np.array([weights[n] for n in names], dtype=np.float64)
    probs /= probs.sum()
    streams = {n: _Stream(tokenizer, DocumentReader(sources[n], split, process_index, process_count),
                          buffer_docs, loop=split == "train", crop_chars=CROP_CHARS_PER_TOKEN * (seq_len + 1))
               for n in names}
    config = {"format": STATE_FORMAT, "split": split, "seed": seed, "batch_size": batch_size, "seq_len": seq_len,
              "process_index": process_index, "process_count": process_count, "buffer_docs": buffer_docs,
              "weights": {n: float(p) for n, p in zip(names, probs)}, "tokenizer": _fingerprint(tokenizer)}
    for name, share in (("copy_share", copy_share), ("span_share", span_share)):
        if share:  # only when on, so states saved before these rows existed still match
            config[name] = share
    batches = 0
    if state is not None:
        differ = {k: (state.get(k), v) for k, v in config.items() if state.get(k) != v}
        if differ or set(state.get("sources", {})) != set(names):
            raise DataError(f"the loader state does not match this loader ((state, now): {differ or names}): "
                            f"cannot resume exactly")
        for n in names:
            streams[n].restore(state["sources"][n], n)
        batches = int(state["batches"])
    return _batches(streams, names, probs, config, batches, tokenizer.bos_id, tokenizer.encode)


def _batches(streams, names, probs, config, batches, bos, encode):
    batch_size, seq_len, seed, process = (config[k] for k in ("batch_size", "seq_len", "seed", "process_index"))
    copy_share, span_share = config.get("copy_share", 0.0), config.get("span_share", 0.0)
    while True:
        choice = np.random.default_rng([seed, process, batches]).choice(len(names), size=batch_size, p=probs)
        copy_rng = np.random.default_rng([seed, process, batches, 1])
        rows = np.empty((batch_size, seq_len + 1), dtype=np.int32)
        for b in range(batch_size):
            if copy_share and copy_rng.random() < copy_share:
                copy_row(rows[b], bos, copy_rng)
            elif not streams[names[choice[b]]].fill(rows[b], bos):
                return
            elif span_share and copy_rng.random() < span_share:
                plant_spans(rows[b], copy_rng, encode)
        batches += 1
        state = {**config, "batches": batches, "sources": {n: streams[n].state() for n in names}}
        yield np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:]), state

