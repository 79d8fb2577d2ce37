"""`train`: every stage from raw data to an agent-ready checkpoint. Heavy imports happen per command.

Convention (the same in evals/cli.py): every `train` command's arguments are defined here, one
add_<command>_args(p) per command, and nowhere else. A command's module (COMMANDS) has
`main(args) -> int`, the only function of it that reads the argparse Namespace: it hands plain
values to the library functions it calls (e.g. train.base.model_config,
train.finetune.batch_geometry). This module stays light at import: `train --help` imports neither
jax nor numpy; a constant an argument needs (speedrun presets, task families) comes from a light
module (tasks, train.speedrun: no jax, no numpy at import).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from agent.run_options import add_options
from nanocode.common import nanocode_home
from tasks import BASE, TRAIN_FAMILIES
from tools.checks import add_flag
from train import speedrun

STAGES = {
    "data": "prepare the pretraining and fine-tuning data shards",
    "tokenizer": "train the BPE tokenizer (rustbpe) and save it",
    "base": "pretrain the base model (next-token cross-entropy)",
    "synth": "generate agentic tool-use rollouts, preference pairs and eval tasks (offline)",
    "sft": "supervised fine-tuning on conversations and agent traces (masked cross-entropy)",
    "rollouts": "run the model (or a server as the teacher) on fresh training tasks: resolved rollouts "
                "for SFT, pairs where it departs from the oracle",
    "dpo": "preference tuning on chosen/rejected pairs (IPO)",
    "export": "a run's newest checkpoint as the agent loads it: bf16 params, tokenizer and config",
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
    add_synth_args(stages["synth"])
    add_sft_args(stages["sft"])
    add_rollouts_args(stages["rollouts"])
    add_dpo_args(stages["dpo"])
    add_export_args(stages["export"])
    add_speedrun_args(stages["speedrun"])
    add_import_nanochat_args(sub.add_parser(
        "import-nanochat",
        help="convert a nanochat (PyTorch) checkpoint into a nanocode checkpoint",
        description="Convert a nanochat (PyTorch) checkpoint into a nanocode checkpoint. "
        "Needs torch: pip install -e '.[nanochat]'.",
    ))
    text = "the agent's saved sessions as SFT rows and preference pairs (good and bad turns)"
    add_export_sessions_args(sub.add_parser("export-sessions", help=text, description=text))
    return p


def add_data_args(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    local = actions.add_parser(
        "local", help="build parquet shards from local source trees and package archives (offline)",
        description="Build parquet shards (one file = one document, last shard = validation) from local "
        "trees and the wheels/sdists in them, dropping duplicates, near duplicates, generated, minified "
        "and licence-only files (train/corpus.py). Defaults: code = the Python standard library and "
        "site-packages (.py), text = site-packages and /usr/share/doc (.md, .rst, .txt).",
    )
    local.add_argument("--kind", choices=["code", "text", "both"], default="both", help="default: both")
    local.add_argument("--src", metavar="PATH", nargs="+", help="source trees instead of the defaults: "
                       "directories (a pip cache, a wheelhouse, a package index: the .whl, .zip, .tar.gz, "
                       ".tgz, .tar.bz2 and .tar.xz archives in them are read too) or archives")
    local.add_argument("--out", metavar="DIR", help="data directory (default: $NANOCODE_HOME/data); "
                       "shards go to DIR/code and DIR/text")
    local.add_argument("--exclude", metavar="GLOB", nargs="+",
                       help="leave out files whose path below their source tree or archive root matches (e.g. "
                       "'json/*' 'calendar.py'): keeps the code an eval split asks about out of pretraining")
    local.add_argument("--docs-per-shard", metavar="N", type=int, default=8192, help="default: 8192")
    local.add_argument("--row-group", metavar="N", type=int, default=1024, help="documents per row group (default: 1024)")
    local.add_argument("--workers", metavar="N", type=int, help="processes reading and filtering the "
                       "sources (default: min(8, CPUs)); the shards are the same for any N")
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
    p.add_argument("--split", choices=("gpt4", "compound"), default="gpt4",
                   help="pre-tokenizer split (nanocode/tokenizer.py SPLIT_PATTERNS): gpt4 (default), or "
                   "compound: a compound identifier is the same tokens wherever it is written")
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
    a("--dtype", choices=["float32", "bfloat16"], help="compute dtype (default: bfloat16 on GPU/TPU, "
      "float32 on CPU; weights and optimizer state are float32 either way)")
    a("--attn", choices=["auto", "xla", "einsum", "cudnn", "splash"], help="attention implementation")
    a("--remat", choices=["none", "block", "dots"], help="recompute activations in the backward pass: "
      "none, block (keep only each layer's input) or dots (keep matmul outputs); default: the preset's")
    a("--data", metavar="DIR", help="data directory with code/ and text/ shards (default: $NANOCODE_HOME/data)")
    a("--code-ratio", type=float, default=0.2, help="share of rows drawn from code (default: 0.2)")
    a("--copy-share", type=float, default=0.0, help="share of training rows that are a random run "
      "of tokens repeated, so a tiny model learns to copy (see train/loader.py; default: 0)")
    a("--span-share", type=float, default=0.0, help="share of natural rows in which made-up names are "
      "planted twice, up to ~1,800 tokens apart, so the model learns to copy at long range "
      "(train/copy_rows.py; default: 0)")
    a("--from", dest="from_", metavar="TAG|DIR", help="continue pretraining from this checkpoint (its "
      "config, e.g. with a longer --seq-len) instead of a fresh model; the optimizer starts fresh")
    a("--tokenizer", metavar="DIR", help="tokenizer directory (default: $NANOCODE_HOME/tokenizer)")
    a("--device-batch", type=int, default=8, help="rows per device per micro-step (default: 8)")
    a("--total-batch", type=int, default=0, help="tokens per optimizer step; 0 = auto from the scaling rule")
    a("--steps", type=int, default=0, help="optimizer steps; 0 = ratio x scaling params tokens")
    a("--ratio", type=float, default=12.0, help="tokens per scaling parameter (default: 12)")
    a("--lr-scale", type=float, default=1.0, help="peak learning rates x this (the scaling rule "
      "scales them by sqrt(batch / 2^19), tiny at a CPU run's batch; default: 1)")
    a("--eval-every", type=int, default=250, help="val bits per byte and samples every N steps")
    a("--eval-batches", type=int, default=8, help="val batches per source per eval")
    _add_run_args(p, default_run="the preset")


def _step_range(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition(":")
    if not (sep and start.isdigit() and stop.isdigit() and int(start) < int(stop)):
        raise argparse.ArgumentTypeError(f"{text!r} is not START:STOP with START < STOP (steps, e.g. 10:13)")
    return int(start), int(stop)


def _add_run_args(p: argparse.ArgumentParser, default_run: str) -> None:
    """Flags every training stage (base, sft, dpo) shares, with one meaning and one default: where
    the run lives, how it logs and checkpoints, the devices it runs on."""
    a = p.add_argument
    a("--run", help=f"run name under $NANOCODE_HOME/runs (default: {default_run})")
    a("--run-dir", metavar="DIR", help="explicit run directory (overrides --run)")
    a("--resume", action="store_true", help="continue the run from its latest checkpoint")
    a("--log-every", type=int, default=10, help="a log line every N steps (default: 10)")
    a("--save-every", type=int, default=500, help="checkpoint every N steps (and at the end, and on SIGTERM)")
    a("--save-minutes", type=float, default=0, metavar="M", help="also checkpoint once M minutes of wall "
      "time have passed since the last save (default: 0, off); saves are written in the background")
    a("--keep", type=int, default=3, help="checkpoints kept")
    a("--seed", type=int, default=0, help="random seed (default: 0)")
    a("--mesh", default="", help="device mesh, e.g. 'data=2,fsdp=4' (default: all devices data-parallel)")
    a("--peak-flops", type=float, help="per-device peak FLOP/s for MFU (default: table, or measured on CPU)")
    a("--profile", metavar="START:STOP", type=_step_range, help="write a jax.profiler trace of steps "
      "START..STOP-1 to <run dir>/profile (TensorBoard's profile plugin, or the trace.json.gz in "
      "Perfetto); e.g. 10:13 (after the compile)")
    a("--multihost", action="store_true", help="call jax.distributed.initialize() (TPU pods, multi-node GPU)")


def add_synth_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", default=str(nanocode_home() / "synth"),
                   help="output directory (default: $NANOCODE_HOME/synth)")
    p.add_argument("--n", type=int, default=2000, help="conversations to generate (default: 2000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--families", default=",".join(TRAIN_FAMILIES),
                   help="comma-separated task families (default: all training families)")
    p.add_argument("--code-ratio", type=float, default=0.15,
                   help="share of tool-free code-writing conversations from the stdlib (default: 0.15)")
    p.add_argument("--real-ratio", type=float, default=0.0,
                   help="share of task conversations on real standard-library code (the real world's "
                   "training modules) instead of generated projects (default: 0.0)")
    p.add_argument("--real-source", metavar="PATH", action="append", default=[],
                   help="a folder of pure-Python packages (a site-packages, a checkout's import root) or "
                   "a wheel/sdist whose functions join the real world's training side (repeatable; "
                   "archives are unpacked below --workdir; never on the eval side)")
    p.add_argument("--pref-ratio", type=float, default=0.5,
                   help="share of task conversations that also get a rejected rollout (default: 0.5)")
    p.add_argument("--val-fraction", type=float, default=0.05, help="validation share (default: 0.05)")
    p.add_argument("--n-eval", type=int, default=100, help="held-out eval tasks to write (default: 100)")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="worker processes (default: min(8, cpus))")
    p.add_argument("--minutes", type=float, default=0, metavar="M",
                   help="time budget: after M minutes write the conversations finished so far (a rerun "
                   "with the same settings resumes after them; default: 0, no limit)")
    p.add_argument("--workdir", default=BASE, help=f"where projects are built (default: {BASE})")
    add_flag(p)


def _add_finetune_args(p: argparse.ArgumentParser, stage: str, lr_scale: float, batch_unit: str,
                       device_batch: int) -> None:
    """Flags sft and dpo share."""
    a = p.add_argument
    a("--from", dest="from_", metavar="TAG|DIR", required=True,
      help="starting checkpoint: a checkpoint directory, a run directory, or a run tag under "
      "$NANOCODE_HOME/runs/<tag>/checkpoints (its latest step)")
    a("--data", metavar="SOURCE[*K]", nargs="+", required=True,
      help="training data: .jsonl files, directories of .jsonl files, or hub datasets (owner/name, "
      "needs network). SOURCE*K sees a source K times per epoch: data.jsonl*3 repeats it, "
      "data.jsonl*0.5 takes a random half")
    a("--val", metavar="FILE", nargs="+", help="held-out data (default: a seeded split of --data)")
    a("--tokenizer", metavar="DIR", help="tokenizer, if the checkpoint has none "
      "(default: $NANOCODE_HOME/tokenizer)")
    a("--seq-len", type=int, help="row length in tokens (default: the model's); longer "
      "conversations are dropped and counted, never cut")
    a("--dtype", choices=["float32", "bfloat16"], help="compute dtype (default: bfloat16 on GPU/TPU, "
      "else the checkpoint's)")
    a("--remat", choices=["none", "block", "dots"], help="activation recomputation (default: the checkpoint's)")
    a("--device-batch", type=int, default=device_batch,
      help=f"{batch_unit} per device per micro-step (default: {device_batch})")
    a("--total-batch", type=int, default=0, help=f"{batch_unit} per optimizer step "
      "(a multiple of device batch x devices; 0 = one micro-step)")
    a("--epochs", type=float, default=1.0, help="passes over the data (default: 1)")
    a("--steps", type=int, default=0, help="optimizer steps (0 = from --epochs)")
    a("--lr-scale", type=float, default=lr_scale,
      help=f"peak learning rates = pretraining's x this, decaying linearly to 0 (default: {lr_scale})")
    a("--warmup-steps", type=int, default=0, help="steps of linear LR warmup (default: 0, right from a "
      "trained checkpoint; from a random init use ~10%% of the steps)")
    a("--eval-every", type=int, default=100, help="val metrics every N steps (and at 0 and the end)")
    _add_run_args(p, default_run=f"<from>-{stage}")


def add_sft_args(p: argparse.ArgumentParser) -> None:
    _add_finetune_args(p, "sft", lr_scale=0.5, batch_unit="tokens", device_batch=8)
    a = p.add_argument
    a("--val-convs", type=int, default=200,
      help="conversations held out for val loss when --val is not given (at most 5%% of the data)")
    a("--eval-rows", type=int, default=64, help="packed val rows scored per eval")
    a("--samples", type=int, default=2, help="held-out prompts sampled per eval")
    a("--sample-tokens", type=int, default=64, help="tokens generated per sample (0 = no samples)")
    a("--replay", metavar="DATA_DIR", help="pretraining shards (code/ and text/, as `train data` "
      "writes them) replayed beside the conversations, so the model keeps its language model")
    a("--replay-share", type=float, default=0.25, help="with --replay: its share of the supervised "
      "tokens (default: 0.25)")
    a("--replay-code-ratio", type=float, default=0.7, help="with --replay: the share of its tokens "
      "from code/ (default: 0.7, the v5e preset's pretraining ratio)")


def add_rollouts_args(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--model", help="the model to roll out: checkpoint dir, run dir or run tag; with --base-url, "
      "the server's model name (default: the first it lists)")
    a("--base-url", metavar="URL", help="a server as the teacher: any OpenAI-compatible API root "
      "(e.g. http://127.0.0.1:8000/v1; key: $NANOCODE_API_KEY) rolls out instead of a checkpoint; "
      "exit status 6 when it cannot be reached")
    a("--context", type=int, metavar="TOKENS", help="with --base-url: the model's context when the "
      "server does not say it (default 8192)")
    a("--out", required=True, metavar="DIR", help="output directory (rerun with the same one to resume)")
    a("--n", type=int, default=200, help="tasks (default 200), the training families interleaved")
    a("--seed", type=int, default=0, help="which draw of tasks: a new seed for each round (default 0)")
    a("--samples", type=int, default=1, help="rollouts per task: the first greedy, the others at "
      "--temperature (default 1)")
    a("--temperature", type=float, default=0.8, help="temperature of rollouts 2.. (default 0.8)")
    add_options(p, "train rollouts")  # --max-tokens --max-steps --retries
    a("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes (default min(2, cpus))")
    a("--workdir", default=BASE, help=f"where projects are built (default: {BASE})")
    a("--real-ratio", type=float, default=0.0, help="share of tasks on real standard-library code (the real "
      "world's training packages; default 0)")
    add_flag(p)


def add_dpo_args(p: argparse.ArgumentParser) -> None:
    _add_finetune_args(p, "dpo", lr_scale=0.1, batch_unit="pairs", device_batch=4)
    a = p.add_argument
    a("--beta", type=float, default=0.1,
      help="IPO strength: the loss pulls the chosen-minus-rejected log-ratio to 1/(2 beta) (default: 0.1)")
    a("--val-pairs", type=int, default=200,
      help="pairs held out for val metrics when --val is not given (at most 5%% of the data)")


def add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_", metavar="TAG|DIR", required=True,
                   help="the run to export (its newest checkpoint): a checkpoint directory, a run "
                   "directory, or a run tag under $NANOCODE_HOME/runs")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="a new run directory: the export goes to DIR/checkpoints/<step>, what --model "
                   "and `evals report` load (refused if DIR already holds a checkpoint)")


def add_speedrun_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", required=True, choices=sorted(speedrun.PRESETS),
                   help="; ".join(f"{k}: {v['about']}" for k, v in speedrun.PRESETS.items()))
    p.add_argument("--run-dir", metavar="DIR",
                   help="where everything goes (default: $NANOCODE_HOME/speedrun/<preset>)")
    p.add_argument("--resume", action="store_true",
                   help="continue a run directory that already exists (done stages are skipped)")
    p.add_argument("--only", metavar="STAGE[,STAGE]",
                   help=f"run just these stages ({', '.join(speedrun.STAGES)})")
    p.add_argument("--src", metavar="PATH", nargs="+", help="the data stage's sources (`train data local "
                   "--src`: trees, wheels, sdists, folders of them, e.g. a pip cache or a wheelhouse; "
                   "default: the standard library and site-packages)")
    p.add_argument("--extra", metavar="STAGE=ARGS", action="append", default=[],
                   help="append ARGS to a training, synth or tokenizer stage's command; a flag given again "
                   "wins (repeatable; e.g. --extra 'base=--steps 8600'; pass the same on --resume)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    p.add_argument("--multihost", action="store_true",
                   help="run the same command on every worker (run dir on shared storage): the training "
                   "stages get --multihost and run on every process, the other stages on process 0 only")
    p.add_argument("--wait-timeout", metavar="MIN", type=float, default=24 * 60,
                   help="with --multihost: how long another process waits for process 0 to finish a "
                   "stage it runs alone before giving up (minutes; default: 1440 = 24 h)")


def add_import_nanochat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="nanochat checkpoint directory")
    p.add_argument(
        "--out", metavar="DIR", help="output checkpoint directory (default: under $NANOCODE_HOME/base/)"
    )
    p.add_argument("--step", metavar="N", type=int, help="step to import (default: the latest)")
    p.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32",
        help="dtype of the imported parameters (default: float32)",
    )


def add_export_sessions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sessions", nargs="*", metavar="SESSION",
                   help="session files or folders of them (default: the sessions this agent saved in "
                        "./.nanocode/sessions; files a clone brought along are skipped)")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="folder for sft.jsonl and preference.jsonl")


COMMANDS = {"data": "train.shards", "tokenizer": "train.tokenizer", "base": "train.base",
            "synth": "train.synth", "sft": "train.sft", "rollouts": "train.rollouts", "dpo": "train.dpo",
            "export": "train.export_model", "speedrun": "train.speedrun",
            "import-nanochat": "train.import_nanochat", "export-sessions": "train.export_sessions"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command])  # import-nanochat's main asks for torch
    try:
        return module.main(args) or 0
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        print(f"train {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
