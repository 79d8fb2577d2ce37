"""`train`: every stage from raw data to an agent-ready checkpoint. Heavy imports happen per command."""

from __future__ import annotations

import argparse
import sys

STAGES = {
    "data": "prepare the pretraining and fine-tuning data shards",
    "tokenizer": "train the BPE tokenizer (rustbpe) and save it",
    "base": "pretrain the base model (next-token cross-entropy)",
    "sft": "supervised fine-tuning on conversations and agent traces (masked cross-entropy)",
    "dpo": "preference tuning on chosen/rejected pairs (IPO)",
    "speedrun": "the whole pipeline, data to agent-ready checkpoint, in one command",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train", description="Train nanocode: data, tokenizer, base, sft, dpo, or all of it."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    stages = {name: sub.add_parser(name, help=text, description=text) for name, text in STAGES.items()}
    add_data_args(stages["data"])
    add_tokenizer_args(stages["tokenizer"])
    add_base_args(stages["base"])
    imp = sub.add_parser(
        "import-nanochat",
        help="convert a nanochat (PyTorch) checkpoint into a nanocode checkpoint",
        description="Convert a nanochat (PyTorch) checkpoint into a nanocode checkpoint. "
        "Needs torch: pip install -e '.[nanochat]'.",
    )
    imp.add_argument("path", metavar="PATH", help="nanochat checkpoint directory")
    imp.add_argument(
        "--out", metavar="DIR", help="output checkpoint directory (default: under $NANOCODE_HOME/base/)"
    )
    imp.add_argument("--step", metavar="N", type=int, help="step to import (default: the latest)")
    imp.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32",
        help="dtype of the imported parameters (default: float32)",
    )
    return p


def add_data_args(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    local = actions.add_parser(
        "local", help="build parquet shards from local source trees (offline)",
        description="Build parquet shards (one file = one document, last shard = validation) from local "
        "trees. Defaults: code = the Python standard library and site-packages (.py), text = site-packages "
        "and /usr/share/doc (.md, .rst, .txt).",
    )
    local.add_argument("--kind", choices=["code", "text", "both"], default="both", help="default: both")
    local.add_argument("--src", metavar="DIR", nargs="+", help="source trees instead of the defaults")
    local.add_argument("--out", metavar="DIR", help="data directory (default: $NANOCODE_HOME/data); "
                       "shards go to DIR/code and DIR/text")
    local.add_argument("--docs-per-shard", metavar="N", type=int, default=8192, help="default: 8192")
    local.add_argument("--row-group", metavar="N", type=int, default=1024, help="documents per row group (default: 1024)")
    dl = actions.add_parser(
        "download", help="download FineWeb-Edu or Stack v2 Python shards from the Hugging Face hub",
        description="Download hub parquet shards by index (plus the dataset's last shard, for validation): "
        "fineweb -> DIR/text, stack -> DIR/code. Resumable; complete files are skipped.",
    )
    dl.add_argument("--kind", choices=["fineweb", "stack"], required=True)
    dl.add_argument("--shards", metavar="N", type=int, required=True, help="number of training shards")
    dl.add_argument("--out", metavar="DIR", help="data directory (default: $NANOCODE_HOME/data)")


def add_tokenizer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="DIR", help="data directory with code/ and/or text/ shards "
                   "(default: $NANOCODE_HOME/data)")
    p.add_argument("--vocab-size", metavar="N", type=int, default=8192, help="default: 8192")
    p.add_argument("--max-chars", metavar="N", type=int, default=50_000_000,
                   help="characters of training text to learn from (default: 50,000,000)")
    p.add_argument("--code-ratio", metavar="R", type=float, default=0.2,
                   help="share of the characters taken from code (default: 0.2, as in pretraining)")
    p.add_argument("--doc-cap", metavar="N", type=int, default=10_000,
                   help="characters taken from one document at most (default: 10,000)")
    p.add_argument("--out", metavar="DIR", help="where tokenizer.json goes (default: $NANOCODE_HOME/tokenizer)")


def add_base_args(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--preset", default="cpu-d4", help="model preset, e.g. cpu-d2..cpu-d8, d12, d20, d24 (default: cpu-d4)")
    a("--depth", type=int, help="override the preset's depth (width follows it)")
    a("--seq-len", type=int, help="override the preset's sequence length")
    a("--window-pattern", help="attention windows tiled over layers, e.g. SSSL or L (full)")
    a("--dtype", choices=["float32", "bfloat16"], help="compute dtype (default: the preset's, float32)")
    a("--attn", choices=["auto", "xla", "einsum", "cudnn", "splash"], help="attention implementation")
    a("--data", metavar="DIR", help="data directory with code/ and text/ shards (default: $NANOCODE_HOME/data)")
    a("--code-ratio", type=float, default=0.2, help="share of rows drawn from code (default: 0.2)")
    a("--tokenizer", metavar="DIR", help="tokenizer directory (default: $NANOCODE_HOME/tokenizer)")
    a("--device-batch", type=int, default=8, help="rows per device per micro-step (default: 8)")
    a("--total-batch", type=int, default=0, help="tokens per optimizer step; 0 = auto from the scaling rule")
    a("--steps", type=int, default=0, help="optimizer steps; 0 = ratio x scaling params tokens")
    a("--ratio", type=float, default=12.0, help="tokens per scaling parameter (default: 12)")
    a("--mesh", default="", help="device mesh, e.g. 'data=2,fsdp=4' (default: all devices data-parallel)")
    a("--run", help="run name under $NANOCODE_HOME/runs (default: the preset)")
    a("--run-dir", metavar="DIR", help="explicit run directory (overrides --run)")
    a("--resume", action="store_true", help="continue the run from its latest checkpoint")
    a("--log-every", type=int, default=10)
    a("--eval-every", type=int, default=250, help="val bits per byte and samples every N steps")
    a("--eval-batches", type=int, default=8, help="val batches per source per eval")
    a("--save-every", type=int, default=500, help="checkpoint every N steps (and at the end, and on SIGTERM)")
    a("--keep", type=int, default=3, help="checkpoints kept")
    a("--seed", type=int, default=0)
    a("--peak-flops", type=float, help="per-device peak FLOP/s for MFU (default: table, or measured on CPU)")
    a("--multihost", action="store_true", help="call jax.distributed.initialize() (TPU pods, multi-node GPU)")


COMMANDS = {"data": "train.shards", "tokenizer": "train.tokenizer", "base": "train.base",
            "import-nanochat": "train.import_nanochat"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in COMMANDS:
        from nanocode.common import not_yet

        return not_yet(f"`train {args.command}`", "train --help")
    import importlib

    try:
        module = importlib.import_module(COMMANDS[args.command])
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        print(f"train {args.command}: needs torch; pip install -e '.[nanochat]'", file=sys.stderr)
        return 2
    try:
        return module.main(args) or 0
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        print(f"train {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
