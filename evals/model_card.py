"""The model card of a speedrun (`<run>/model/MODEL_CARD.md`): the model's shape and size, the
recipe (each stage's commands and minutes from the speedrun's `.done` markers), the eval results
from `<run>/model/evals/*.json` and the base model's last validation numbers. The eval tables are
evals/report.py's (one definition of each table for the report and the card), so the card shows
the same numbers in the same form as `evals report`. Run as `python -m evals.model_card RUN_DIR`
(train/speedrun.py's report stage).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from evals.report import agent_families_table, details, scores
from nanocode.checkpoint import latest_step, load_params
from nanocode.config import GPTConfig, param_counts
from train.speedrun import STAGES


def suite_title(split: str) -> str:
    """What an agent result's split holds, for a table's title."""
    world = "real code" if split.startswith("real") else "generated projects"
    tasks = "training-distribution tasks" if split.endswith("train") else "held-out tasks"
    return f"Agentic suite, {tasks} on {world} (`--split {split}`)"


def eval_tables(evals_dir: Path) -> list[str]:
    """Markdown for the model card: the agentic suite per family, then the headline scores of every
    other eval, read from the summary JSONs the `evals` commands wrote (one per eval)."""
    found, suites = {}, {}
    for f in sorted(evals_dir.glob("*.json")):
        d = json.loads(f.read_text())
        if isinstance(d, dict) and d.get("eval") == "agent":
            suites[d.get("split", "eval")] = d
        elif isinstance(d, dict) and "eval" in d:
            found[d["eval"]] = d
    lines = []
    for split in sorted(suites, key=lambda s: (s != "eval", s)):  # the generated suite first
        lines += [f"{suite_title(split)}:", ""] + agent_families_table(suites[split]) + [""]
    other = [f"| {name} | {scores(d)} | {details(d) or '-'} |" for name, d in found.items()]
    if other:
        lines += ["| eval | scores | details |", "|---|---|---|"] + other + [""]
    return lines


def write_card(run: str) -> int:
    """model/MODEL_CARD.md: the recipe (commands and times of every stage), the model, the evals."""
    run_dir = Path(run)
    model = run_dir / "model"
    _, cfg, tok, meta = load_params(model / "checkpoints", latest_step(model / "checkpoints"))
    cfg = GPTConfig.from_dict(cfg) if isinstance(cfg, dict) else cfg
    counts = param_counts(cfg)
    preset = (run_dir / "preset").read_text().strip() if (run_dir / "preset").exists() else run_dir.name
    lines = ["# nanocode default model", "",
             f"A {counts['total'] / 1e6:.1f}M-parameter nanocode GPT (depth {cfg.n_layer}, width {cfg.n_embd}, "
             f"{cfg.n_head} heads of {cfg.head_dim}, vocab {cfg.vocab_size}, context {cfg.sequence_len}), "
             "trained from scratch on real Python sources and docs (the recipe's data stage), then "
             "fine-tuned on offline synthetic agent rollouts (`train synth`)"
             + (" and preference-tuned (IPO)" if (run_dir / "dpo.done").exists() else "")
             + f". Params only, bf16; exported from `{meta.get('exported_from', '?')}`.", "",
             "It is small: it knows the tool format and the shape of the synthetic tasks, not Python at "
             "large. Train a bigger one with `train speedrun --preset d12|d20|d24` (README).", "",
             "## Recipe", "", f"    train speedrun --preset {preset} --run-dir RUN    # RUN = "
             f"$NANOCODE_HOME/speedrun/{run_dir.name}", "", "| stage | minutes | command |",
             "|---|---|---|"]
    for s in STAGES:
        f = run_dir / f"{s}.done"
        if f.exists():
            d = json.loads(f.read_text())
            cmds = "<br>".join(f"`{c.replace(str(run_dir), '$RUN')}`" for c in d["commands"])
            minutes = "-" if d.get("seconds") is None else f"{d['seconds'] / 60:.1f}"  # made elsewhere
            lines.append(f"| {s} | {minutes} | {cmds} |")
    lines += ["", "## Evals", "", "From the JSON files in evals/ beside this card, written by the `evals` "
              "commands of the recipe.", ""] + eval_tables(model / "evals")
    for phase in ("base", "base_long"):
        metrics = run_dir / phase / "metrics.jsonl"
        base_val = [json.loads(ln) for ln in open(metrics) if "val_bpb" in ln] if metrics.exists() else []
        if base_val:
            v = base_val[-1]
            lines += [f"The base model before fine-tuning ({phase}, step {v['step']}): val "
                      + ", ".join(f"{k.removeprefix('val_')} {x:.3f}" for k, x in v.items() if k != "step"), ""]
    if (run_dir / "NOTES.md").exists():  # what happened during this particular run
        lines += ["## Run notes", "", (run_dir / "NOTES.md").read_text().strip(), ""]
    (model / "MODEL_CARD.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {model / 'MODEL_CARD.md'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m evals.model_card RUN_DIR")
    raise SystemExit(write_card(sys.argv[1]))
