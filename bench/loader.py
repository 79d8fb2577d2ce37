"""The pretraining loader's throughput on one core: tokens it emits per CPU-second, with long
documents cut before tokenizing (train/loader.py, Cropping) against tokenizing them whole, in the
same run, alternating, median of --repeats.

    python bench/loader.py --data RUN/data --tokenizer RUN/tokenizer [--seq-len 2048] [--seconds 10]

Prints, per source (code, text, the 0.8/0.2 mix the presets use): tokens emitted per CPU-second and
tokens tokenized per token emitted, for both settings, and their ratio. What a preset needs is its
tokens/s at the MFU it aims for (docs/BENCHMARKS.md puts the two side by side); the loader runs on
a background thread (train/loop.prefetched), one per host, so a host's cores beyond one are spare.
"""
from __future__ import annotations

import argparse
import statistics
import time

import train.loader as loader
from nanocode.tokenizer import Tokenizer
from train.loader import data_sources, packed_batches

NO_CROP = 10**9  # chars per token: no document is ever cut


class Counting:
    """The tokenizer, counting the tokens it produces."""

    def __init__(self, tok):
        self.tok, self.tokens = tok, 0

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def encode_batch(self, texts):
        out = self.tok.encode_batch(texts, num_threads=1)  # one core: the number is per core
        self.tokens += sum(map(len, out))
        return out


def measure(tok, sources, weights, seq_len: int, seconds: float, crop: int) -> tuple[float, float]:
    """(tokens emitted per CPU-second, tokens tokenized per token emitted) over `seconds` of CPU."""
    loader.CROP_CHARS_PER_TOKEN = crop
    counting = Counting(tok)
    it = packed_batches(counting, sources, weights, 8, seq_len, buffer_docs=1000)
    next(it)  # the first fill of the buffer is start-up, not steady state
    counting.tokens, emitted, t0 = 0, 0, time.process_time()
    while time.process_time() - t0 < seconds:
        x, _, _ = next(it)
        emitted += x.size
    return emitted / (time.process_time() - t0), counting.tokens / emitted


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a `train data` output folder (code/ and text/)")
    ap.add_argument("--tokenizer", required=True, help="a `train tokenizer` output folder")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--seconds", type=float, default=10.0, help="CPU seconds per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    tok = Tokenizer.load(args.tokenizer)
    cropped = loader.CROP_CHARS_PER_TOKEN
    print(f"seq_len {args.seq_len}, {args.seconds:.0f} CPU-s x {args.repeats}, medians; one core")
    print(f"{'source':<6} {'setting':<22} {'tok/s emitted':>14} {'tokenized/emitted':>18}")
    for name, ratio in (("code", 1.0), ("text", 0.0), ("mix", 0.2)):
        sources, weights = data_sources(args.data, ratio)
        runs = {"whole documents": [], f"cut at {cropped} x (T+1)": []}
        for _ in range(args.repeats):
            for (label, got), crop in zip(runs.items(), (NO_CROP, cropped)):
                got.append(measure(tok, sources, weights, args.seq_len, args.seconds, crop))
        rates = {}
        for label, got in runs.items():
            rates[label] = statistics.median(r for r, _ in got)
            waste = statistics.median(w for _, w in got)
            print(f"{name:<6} {label:<22} {rates[label]:>14,.0f} {waste:>18.2f}")
        before, after = rates.values()
        print(f"{name:<6} {'ratio (cut / whole)':<22} {after / before:>14.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
