"""`evals`: each eval loads a checkpoint, runs, prints a table and writes a JSON result beside it."""

from __future__ import annotations

import argparse

EVALS = {
    "humaneval": "HumanEval pass@k: sampled completions run in a sandbox",
    "bpb": "bits per byte on held-out shards (tokenizer-independent loss)",
    "agent": "the agentic task suite: generated repo tasks run headless, scored by hidden checks",
    "core": "CORE (DCLM) of the base model; offline only a subset of its tasks",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evals", description="Evaluate a nanocode checkpoint.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, text in EVALS.items():
        sub.add_parser(name, help=text, description=text)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from nanocode.common import not_yet

    return not_yet(f"`evals {args.command}`", "evals --help")


if __name__ == "__main__":
    raise SystemExit(main())
