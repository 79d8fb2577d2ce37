"""`train tokenizer`: learn the BPE vocabulary (rustbpe) on the train shards and report its compression.

Reads up to --max-chars characters from the train split of <data>/code and <data>/text (whichever
exist), a --code-ratio share from code and the rest from text, filling from the other source when
one runs out; each document contributes at most --doc-cap characters (nanochat's 10,000) so a few
huge files do not dominate the merges. Then it prints bytes per token on a sample of each source's
validation shard (text the tokenizer never saw) and writes <out>/tokenizer.json.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from nanocode.common import nanocode_home
from nanocode.tokenizer import MIN_VOCAB_SIZE, SPECIAL_TOKENS, SPLIT_PATTERNS, train_tokenizer
from train.loader import DocumentReader
from train.shards import DataError, default_data_dir

SAMPLE_CHARS = 2_000_000  # per source, for the bytes/token table


def _sources(data: Path) -> dict[str, Path]:
    found = {k: data / k for k in ("code", "text") if any((data / k).glob("shard_*.parquet"))}
    if not found:
        raise DataError(f"no shards under {data}/code or {data}/text: run `train data local` first "
                        f"(or `train data download`), or pass --data")
    return found


def corpus(data: Path, max_chars: int, code_ratio: float, doc_cap: int, counts: dict[str, int]) -> Iterator[str]:
    """Documents (capped at doc_cap chars) from the train splits, mixed to code_ratio of max_chars.

    The next document comes from the source furthest below its share; a source that runs out leaves
    the rest of the budget to the other. counts[name] accumulates the characters taken.
    """
    share = {"code": code_ratio, "text": 1.0 - code_ratio}
    iters = {k: iter(DocumentReader(d, "train")) for k, d in _sources(data).items() if share[k] > 0}
    if not iters:
        raise DataError(f"--code-ratio {code_ratio} selects no source among those under {data}")
    for k in iters:
        counts.setdefault(k, 0)
    total = 0
    while iters and total < max_chars:
        k = min(iters, key=lambda name: (counts[name] / share[name], name))
        try:
            _, text = next(iters[k])
        except StopIteration:
            del iters[k]
            continue
        text = text[: min(doc_cap, max_chars - total)]
        counts[k] += len(text)
        total += len(text)
        yield text


def compression(tok, directory: Path, max_chars: int = SAMPLE_CHARS) -> tuple[int, int, int]:
    """(docs, UTF-8 bytes, tokens) over the first max_chars characters of a validation shard."""
    texts, n = [], 0
    for _, text in DocumentReader(directory, "val"):
        texts.append(text[: max_chars - n])
        n += len(texts[-1])
        if n >= max_chars:
            break
    nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    return len(texts), nbytes, sum(map(len, tok.encode_batch(texts)))


def main(args) -> int:
    def fail(msg: str) -> int:
        print(f"train tokenizer: error: {msg}", file=sys.stderr)
        return 2

    if args.vocab_size < MIN_VOCAB_SIZE:
        return fail(f"--vocab-size must be at least {MIN_VOCAB_SIZE} (256 byte tokens + {len(SPECIAL_TOKENS)} "
                    f"special tokens), got {args.vocab_size}")
    if args.max_chars < 1 or args.doc_cap < 1 or not 0.0 <= args.code_ratio <= 1.0:
        return fail("--max-chars and --doc-cap must be >= 1 and --code-ratio in [0, 1]")
    data = Path(args.data) if args.data else default_data_dir()
    out = Path(args.out) if args.out else nanocode_home() / "tokenizer"
    counts: dict[str, int] = {}
    t0 = time.time()
    try:
        texts = corpus(data, args.max_chars, args.code_ratio, args.doc_cap, counts)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tok = train_tokenizer(texts, args.vocab_size, SPLIT_PATTERNS[args.split])
        seconds = time.time() - t0
        for w in caught:
            print(f"train tokenizer: warning: {w.message}", file=sys.stderr)
        rows = [(k, *compression(tok, d)) for k, d in _sources(data).items()]
    except DataError as e:
        return fail(str(e))
    except ValueError as e:  # train_tokenizer's own checks
        return fail(str(e))
    path = tok.save(out)
    mix = ", ".join(f"{k} {n / 1e6:.2f} M" for k, n in sorted(counts.items()))
    print(f"trained a {tok.vocab_size}-token vocabulary on {sum(counts.values()) / 1e6:.2f} M chars ({mix}) "
          f"in {seconds:.1f} s -> {path}")
    print(f"{'val sample':<11}{'docs':>7}{'bytes':>13}{'tokens':>12}{'bytes/token':>13}")
    for name, docs, nbytes, ntok in rows:
        print(f"{name:<11}{docs:>7,}{nbytes:>13,}{ntok:>12,}{nbytes / max(ntok, 1):>13.2f}")
    return 0
