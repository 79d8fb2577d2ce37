"""`train speedrun --preset NAME`: data -> tokenizer -> base -> synth -> sft -> dpo -> export ->
evals -> report in one command, each stage a plain `train ...` / `evals ...` command a reader could
type (printed before it runs).

Trade-offs:
- Every stage runs as its own subprocess: the commands are exactly what a user would run by hand,
  memory is returned between stages, and inference stages get the XLA:CPU runtime flag the agent
  uses (it must be set before jax is imported, which a training stage in the same process would
  already have done). The price is ~5-10 s of imports per stage.
- Progress is a file per stage: `<run>/<stage>.done` (the command, wall time) is written when the
  stage exits 0, and a rerun skips it. A training stage that was interrupted restarts with
  `--resume` from its newest checkpoint, so `--resume` after a kill redoes at most the steps since
  the last save. A stage whose inputs changed is not detected: delete its .done to redo it.
- The cpu preset is sized for this kind of machine: ~1.3 h on 2 idle cores (base ~28 min, synth
  ~13, sft ~22, dpo ~5, evals ~7), depth 4, width 256, vocab 4096 (7.3M params, 11.6 MB in bf16).
  Its base trains 1,200 small steps (4,096 tokens) at 6x MODEL.md's batch-scaled lrs with half the
  rows copy rows (train/loader.py): the first cpu base (300 steps of 16,384 tokens, plain data)
  never learned to copy, and a model that cannot copy cannot use names from its prompt.
  Accelerator presets (d12, d20, d24) follow nanochat/nanocode sizing; their expected times are the
  reference TPU v6e-8 runs of ../shared/spec/MODEL.md (see the README for flags and costs).

Layout of a run (default $NANOCODE_HOME/speedrun/<preset>): data/ tokenizer/ base/ synth/ sft/ dpo/
model/ (checkpoints/<step>: the exported bf16 params-only checkpoint; MODEL_CARD.md; evals/*.json)
report/ and logs/<stage>.log. Ship a model by copying model/ to nanocode/default_model/.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

STAGES = ("data", "tokenizer", "base", "synth", "sft", "dpo", "export", "evals", "report")

# Flags that matter on TPU (overlap of collectives with compute; from MaxText's v6e recipes) and
# GPU (latency-hiding scheduler). Set only when the variable is not already set by the user.
TPU_ENV = {"LIBTPU_INIT_ARGS": " ".join([
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
])}
GPU_ENV = {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"}

PRESETS = {
    "cpu": dict(
        about="tiny model on this CPU (~1.3 h on 2 cores); the shipped default model",
        data=[["data", "local"]],
        tokenizer=["--vocab-size", "4096", "--max-chars", "20000000"],
        base=["--preset", "cpu-d4", "--steps", "1200", "--total-batch", "4096", "--device-batch", "8",
              "--lr-scale", "6", "--copy-share", "0.5", "--eval-every", "300", "--eval-batches", "4",
              "--save-every", "300"],
        synth=["--n", "3000", "--n-eval", "100", "--code-ratio", "0.1", "--workers", "2"],
        sft=["--seq-len", "2048", "--device-batch", "2", "--steps", "700", "--lr-scale", "5",
             "--eval-every", "200", "--save-every", "200", "--sample-tokens", "0"],
        dpo=["--device-batch", "4", "--steps", "30", "--eval-every", "15", "--save-every", "30"],
        evals=[["bpb", "--batches", "4"],
               ["humaneval", "--n", "10", "--temperature", "0.8", "--max-tokens", "256"],
               ["agent", "--per-family", "6", "--max-steps", "10"]],  # the agent's 1024-token replies
    ),
}
# FineWeb-Edu shards hold ~250M chars (~53M tokens at 32k vocab): enough for 80% of ratio 12 x the
# scaling params (d12 1.3B tokens, d20 5.2B, d24 8.8B) plus ~20%; code gets a quarter as many shards.
for _depth, _shards, _hours in ((12, 24, "0.15"), (20, 96, "1.4"), (24, 160, "9.3")):
    PRESETS[f"d{_depth}"] = dict(
        about=f"d{_depth} on a TPU v6e-8 (reference run: {_hours} h; GPUs: same command)",
        data=[["data", "download", "--kind", "fineweb", "--shards", str(_shards)],
              ["data", "download", "--kind", "stack", "--shards", str(max(8, _shards // 4))]],
        tokenizer=["--vocab-size", "32768", "--max-chars", "2000000000"],
        base=["--preset", f"d{_depth}", "--device-batch", "16" if _depth < 24 else "8",
              "--mesh", "data=1,fsdp=-1", "--save-every", "1000"]
        + (["--seq-len", "4096"] if _depth == 24 else []),
        synth=["--n", "100000", "--n-eval", "300"],
        sft=["--device-batch", "8", "--epochs", "2", "--save-every", "1000"],
        dpo=["--device-batch", "8", "--epochs", "1"],
        evals=[["bpb"], ["core"], ["humaneval", "--n", "100", "--temperature", "0.8"],
               ["mbpp", "--n", "10", "--temperature", "0.8"],
               ["agent", "--per-family", "30", "--max-steps", "25"]],
    )


def add_speedrun_args(p) -> None:
    p.add_argument("--preset", required=True, choices=sorted(PRESETS),
                   help="; ".join(f"{k}: {v['about']}" for k, v in PRESETS.items()))
    p.add_argument("--run-dir", metavar="DIR",
                   help="where everything goes (default: $NANOCODE_HOME/speedrun/<preset>)")
    p.add_argument("--resume", action="store_true",
                   help="continue a run directory that already exists (done stages are skipped)")
    p.add_argument("--only", metavar="STAGE[,STAGE]", help=f"run just these stages ({', '.join(STAGES)})")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    p.add_argument("--multihost", action="store_true",
                   help="pass --multihost to the training stages (run the same command on every TPU worker)")


def _tool(name: str) -> list[str]:
    """`train ...` or `evals ...` through this interpreter (works without the scripts on PATH)."""
    return [sys.executable, "-m", f"{name}.cli"]


def stage_commands(stage: str, p: dict, run: Path, multihost: bool = False) -> list[list[str]]:
    """The command lines of one stage (most stages have one; data and evals may have several)."""
    R, host = str(run), ["--multihost"] if multihost else []
    train, evals = _tool("train"), _tool("evals")
    resume = lambda d: ["--resume"] if any((run / d / "checkpoints").glob("[0-9]*")) else []  # noqa: E731
    model = str(run / "model")
    if stage == "data":
        return [train + c + ["--out", f"{R}/data"] for c in p["data"]]
    if stage == "tokenizer":
        return [train + ["tokenizer", "--data", f"{R}/data", "--out", f"{R}/tokenizer"] + p["tokenizer"]]
    if stage == "base":
        return [train + ["base", "--tokenizer", f"{R}/tokenizer", "--data", f"{R}/data", "--run-dir",
                         f"{R}/base"] + p["base"] + host + resume("base")]
    if stage == "synth":
        return [train + ["synth", "--out", f"{R}/synth"] + p["synth"]]
    if stage == "sft":
        return [train + ["sft", "--from", f"{R}/base", "--data", f"{R}/synth/train.jsonl", "--val",
                         f"{R}/synth/val.jsonl", "--run-dir", f"{R}/sft"] + p["sft"] + host + resume("sft")]
    if stage == "dpo":
        return [train + ["dpo", "--from", f"{R}/sft", "--data", f"{R}/synth/preference_train.jsonl",
                         "--val", f"{R}/synth/preference_val.jsonl", "--run-dir", f"{R}/dpo"]
                + p["dpo"] + host + resume("dpo")]
    if stage == "export":
        return [[sys.executable, "-m", "train.speedrun", "export", f"{R}/dpo", model]]
    if stage == "evals":
        extra = {"bpb": ["--data", f"{R}/data"]}
        return [evals + [c[0], "--model", model, "--out", f"{model}/evals"] + c[1:] + extra.get(c[0], [])
                for c in p["evals"]]
    if stage == "report":
        return [evals + ["report", "--model", model, "--out", f"{R}/report"],
                [sys.executable, "-m", "train.speedrun", "card", R]]
    raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")


def shown_command(cmd: list[str]) -> str:
    """`python -m train.cli base ...` as the user would type it: `train base ...`."""
    if cmd[:2] == [sys.executable, "-m"]:
        cmd = [cmd[2].removesuffix(".cli")] + cmd[3:] if cmd[2].endswith(".cli") else ["python"] + cmd[1:]
    return shlex.join(cmd)


def run_stage(stage: str, cmds: list[list[str]], run: Path, env: dict) -> int:
    """Run a stage's commands, output to the terminal and logs/<stage>.log; .done on success."""
    (run / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(run / "logs" / f"{stage}.log", "a") as log:
        for cmd in cmds:
            shown = shown_command(cmd)
            print(f"\n=== {stage}: {shown}", flush=True)
            log.write(f"\n$ {shown}\n")
            log.flush()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env={**os.environ, **env}, bufsize=0)
            for chunk in iter(lambda: proc.stdout.read(4096), b""):
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                log.write(chunk.decode("utf-8", "replace"))
            if proc.wait() != 0:
                print(f"\nspeedrun: stage {stage} failed (exit {proc.returncode}); log: "
                      f"{run / 'logs' / (stage + '.log')}; fix it and rerun with --resume",
                      file=sys.stderr)
                return proc.returncode or 1
    seconds = time.time() - t0
    (run / f"{stage}.done").write_text(json.dumps(
        {"commands": [shown_command(c) for c in cmds], "seconds": round(seconds, 1)}, indent=1) + "\n")
    print(f"=== {stage} done in {seconds / 60:.1f} min", flush=True)
    return 0


def main(args) -> int:
    from nanocode.common import nanocode_home
    p = PRESETS[args.preset]
    run = (Path(args.run_dir).expanduser() if args.run_dir else nanocode_home() / "speedrun" / args.preset).resolve()
    stages = STAGES
    if args.only:
        stages = tuple(s.strip() for s in args.only.split(","))
        bad = [s for s in stages if s not in STAGES]
        if bad:
            raise ValueError(f"--only: unknown stage(s) {', '.join(bad)}; stages: {', '.join(STAGES)}")
    if args.dry_run:
        for s in stages:
            for c in stage_commands(s, p, run, args.multihost):
                print(f"{s}: {shown_command(c)}")
        return 0
    if run.exists() and any(run.iterdir()) and not args.resume:
        raise ValueError(f"{run} already holds a run; add --resume to continue it (done stages are "
                         "skipped), or pass another --run-dir")
    run.mkdir(parents=True, exist_ok=True)
    (run / "preset").write_text(args.preset + "\n")  # for the model card's recipe line
    env = {k: v for k, v in _platform_env().items() if k not in os.environ}
    t0 = time.time()
    for s in stages:
        if (run / f"{s}.done").exists():
            print(f"=== {s}: done already (delete {run / (s + '.done')} to redo it)")
            continue
        rc = run_stage(s, stage_commands(s, p, run, args.multihost), run, env)
        if rc:
            return rc
    if args.only:
        print(f"\nspeedrun {args.preset}: {', '.join(stages)} done in {(time.time() - t0) / 60:.1f} min")
        return 0
    print(f"\nspeedrun {args.preset}: finished in {(time.time() - t0) / 60:.1f} min; model: "
          f"{run / 'model'}; report: {run / 'report' / 'report.md'}\n"
          f"try it: nanocode --model {run / 'model'}")
    return 0


def _platform_env() -> dict:
    """TPU or GPU flags by what is installed (no jax import: just look for the runtime packages)."""
    import importlib.util
    if importlib.util.find_spec("libtpu"):
        return TPU_ENV
    if importlib.util.find_spec("jax_cuda13_plugin") or importlib.util.find_spec("jax_cuda12_plugin"):
        return GPU_ENV
    return {}


# ---- the two steps that are not `train`/`evals` commands ------------------------------------------
def export(src: str, dst: str) -> int:
    """The newest checkpoint of `src` as params only, in bf16, with its tokenizer and config: what
    the agent loads (half the bytes of fp32, no optimizer state; the engine computes in the
    config's dtype)."""
    import jax.numpy as jnp

    from nanocode import checkpoint
    from nanocode.common import find_checkpoints
    ckpt, _ = find_checkpoints(src)
    step = checkpoint.latest_step(ckpt)
    params, cfg, tok, meta = checkpoint.load_params(ckpt, step, dtype=jnp.bfloat16)
    out = Path(dst) / "checkpoints"  # a run directory, as `evals report` and `--model` expect
    if checkpoint.latest_step(out) is not None:
        raise ValueError(f"{out} already holds a checkpoint; delete it to export again")
    checkpoint.save(out, step, params, config=cfg, tokenizer=tok,
                    metadata={**(meta or {}), "stage": "export", "from": str(ckpt), "dtype": "bfloat16",
                              "exported_from": str(ckpt / str(step))})
    size = sum(f.stat().st_size for f in (out / str(step)).rglob("*") if f.is_file())
    print(f"exported {ckpt / str(step)} -> {out / str(step)} (bf16 params + tokenizer, {size / 1e6:.1f} MB)")
    return 0


def eval_tables(evals_dir: Path) -> list[str]:
    """Markdown for the model card and the README: the agentic suite per family, then HumanEval
    pass@k and bits per byte, read from the summary JSONs the `evals` commands wrote."""
    found = {}
    for f in sorted(evals_dir.glob("*.json")):
        d = json.loads(f.read_text())
        found[d.get("eval", f.stem)] = d
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    lines = []
    if "agent" in found:
        a = found["agent"]
        lines += ["| agentic suite (held-out tasks) | resolved | valid tool calls | first call right | mean steps |",
                  "|---|---|---|---|---|"]
        rows = [(f"{name}", m) for name, m in a["families"].items()]
        rows += [("**trained families**", a["trained_families"]), ("**eval-only families**",
                 a["eval_only_families"]), ("**all**", a["overall"])]
        for name, m in rows:
            lines.append(f"| {name} | {m['resolved']}/{m['tasks']} ({pct(m['resolve_rate'])}) | "
                         f"{pct(m['valid_tool_call_rate'])} | {pct(m['first_call_correct_rate'])} | "
                         f"{m['mean_steps'] or 0:.1f} |")
        lines.append("")
    other = []
    for name in ("humaneval", "mbpp", "humanevalplus", "mbppplus"):
        if name in found:
            d = found[name]
            ks = ", ".join(f"{k} {100 * d[k]:.1f}%" for k in d if k.startswith("pass@"))
            other.append(f"| {name} (n={d.get('n')}, temperature {d.get('temperature')}) | {ks} |")
    if "bpb" in found:
        d = found["bpb"]
        shown = ", ".join(f"{k.removeprefix('bpb_')} {d[k]:.3f}" for k in ("bpb_code", "bpb_text") if k in d)
        other.append(f"| bits per byte, held-out (rows of {d.get('seq_len')}) | {shown} |")
    if "core" in found:
        d = found["core"]
        key = "core" if "core" in d else "core_subset"
        other.append(f"| {d.get('metric', key)} | {d.get(key, 0):.4f} |")
    if other:
        lines += ["| eval | result |", "|---|---|"] + other + [""]
    return lines


def write_card(run: str) -> int:
    """model/MODEL_CARD.md: the recipe (commands and times of every stage), the model, the evals."""
    from nanocode.checkpoint import latest_step, load_params
    from nanocode.config import GPTConfig, param_counts
    run_dir = Path(run)
    model = run_dir / "model"
    _, cfg, tok, meta = load_params(model / "checkpoints", latest_step(model / "checkpoints"))
    cfg = GPTConfig.from_dict(cfg) if isinstance(cfg, dict) else cfg
    counts = param_counts(cfg)
    preset = (run_dir / "preset").read_text().strip() if (run_dir / "preset").exists() else run_dir.name
    lines = ["# nanocode default model", "",
             f"A {counts['total'] / 1e6:.1f}M-parameter nanocode GPT (depth {cfg.n_layer}, width {cfg.n_embd}, "
             f"{cfg.n_head} heads of {cfg.head_dim}, vocab {cfg.vocab_size}, context {cfg.sequence_len}), "
             "trained from scratch on this machine's own Python sources and docs, then fine-tuned on "
             "offline synthetic agent rollouts (`train synth`) and preference-tuned (IPO). Params only, "
             f"bf16; exported from `{meta.get('exported_from', '?')}`.", "",
             "It is a toy: it knows the tool format and the shape of the synthetic tasks, not Python at "
             "large. Train a bigger one with `train speedrun --preset d12|d20|d24` (README).", "",
             "## Recipe", "", f"    train speedrun --preset {preset} --run-dir RUN    # RUN = "
             f"$NANOCODE_HOME/speedrun/{run_dir.name}", "", "| stage | minutes | command |",
             "|---|---|---|"]
    for s in STAGES:
        f = run_dir / f"{s}.done"
        if f.exists():
            d = json.loads(f.read_text())
            cmds = "<br>".join(f"`{c.replace(str(run_dir), '$RUN')}`" for c in d["commands"])
            lines.append(f"| {s} | {d['seconds'] / 60:.1f} | {cmds} |")
    lines += ["", "## Evals", "", "From the JSON files in evals/ beside this card, written by the `evals` "
              "commands of the recipe.", ""] + eval_tables(model / "evals")
    base_val = [json.loads(ln) for ln in open(run_dir / "base" / "metrics.jsonl") if "val_bpb" in ln] \
        if (run_dir / "base" / "metrics.jsonl").exists() else []
    if base_val:
        v = base_val[-1]
        lines += [f"The base model before fine-tuning (step {v['step']}, rows of its 512-token context): val "
                  + ", ".join(f"{k.removeprefix('val_')} {x:.3f}" for k, x in v.items() if k != "step"), ""]
    if (run_dir / "NOTES.md").exists():  # what happened during this particular run
        lines += ["## Run notes", "", (run_dir / "NOTES.md").read_text().strip(), ""]
    (model / "MODEL_CARD.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {model / 'MODEL_CARD.md'}")
    return 0


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or [""]
    if command == "export" and len(rest) == 2:
        raise SystemExit(export(*rest))
    if command == "card" and len(rest) == 1:
        raise SystemExit(write_card(*rest))
    raise SystemExit("usage: python -m train.speedrun export SRC DST | card RUN_DIR")
