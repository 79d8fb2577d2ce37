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
    for name, text in STAGES.items():
        sub.add_parser(name, help=text, description=text)
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


def import_nanochat(args: argparse.Namespace) -> int:
    import importlib

    try:
        importer = importlib.import_module("train.import_nanochat")
    except ModuleNotFoundError as e:
        if e.name == "train.import_nanochat":
            print("train import-nanochat: train/import_nanochat.py is missing from this "
                  "install", file=sys.stderr)
            return 2
        if e.name == "torch":
            print("train import-nanochat: needs torch; pip install -e '.[nanochat]'",
                  file=sys.stderr)
            return 2
        raise
    try:
        status = importer.main(args)
    except (FileNotFoundError, NotADirectoryError) as e:
        print(f"train import-nanochat: error: {e}", file=sys.stderr)
        return 2
    return status or 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "import-nanochat":
        return import_nanochat(args)
    from nanocode.common import not_yet

    return not_yet(f"`train {args.command}`", "train --help")


if __name__ == "__main__":
    raise SystemExit(main())
