"""`evals report`: one markdown file for a run and the stages linked to it, with its training
curves as PNGs and a table of every eval result found for its checkpoints.

What it reads (stdlib only; nothing is loaded through jax or orbax):
- Stages: the run named by --model, the runs it was fine-tuned from (each checkpoint's
  run_metadata records `stage` and the `from` checkpoint directory) and the runs under
  $NANOCODE_HOME/runs fine-tuned from any of those, so `--model d12-sft` also reports d12 and
  d12-sft-dpo. Ordered base, sft, dpo.
- Curves: each run's metrics.jsonl as train/loop.py writes it: a {step, loss} row per step, a
  {step, loss, tok_per_s, mfu, eta_s} row per log interval and a {step, val_...} row per eval; a
  step logged twice (a resumed run repeats the steps after its last checkpoint) keeps its last
  value, and an unparsable line (a crash mid-write) is skipped.
- Evals: every JSON with an "eval" key under $NANOCODE_HOME/evals/<run tag>/ (where the evals
  write by default), <run>/evals/ and <run>/checkpoints/. The table shows each result's headline
  numbers (pass@k, bpb_*, CORE or CORE-subset, rates and accuracies); a CORE result also gets
  its per-task table and an agent result its per-family table. The model card of a speedrun
  renders its evals with these same functions (`scores`, `details`, `agent_families_table`).

Plots need matplotlib (the optional `report` extra, drawn on the Agg canvas, no display): ~1 s
per stage (a 2,000-step run, 4 panels) on the shared 2-core box. Without it the markdown is still
written, tables complete, with a line saying how to get the plots (load_figure imports matplotlib).
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

from nanocode.common import nanocode_home

STAGE_ORDER = {"base": 0, "sft": 1, "dpo": 2}
HEADLINE = re.compile(r"^(pass@\d+|bpb_\w+|core|core_subset|\w*rate\w*|\w*acc\w*|score|mean_steps)$")
AGENT_COLUMNS = ("tasks", "resolved", "resolve_rate", "valid_tool_call_rate", "first_call_correct_rate",
                 "mean_steps", "edits_applied_rate")
NOT_SCORES = {"step", "seconds", "n", "limit", "rows", "seq_len", "batches", "temperature", "top_k",
              "top_p", "max_tokens", "seed", "timeout_s", "memory_mb", "batch_tokens", "sequences",
              "problems", "solved", "tasks_in_core", "workers"}
PLOTS_HINT = "Plots need matplotlib: `pip install 'nanocode[report]'`."


class RunError(ValueError):
    """--model names no run; the message says where it looked."""


# ---- finding runs -----------------------------------------------------------------------------
def resolve_run(spec: str, home: Path) -> Path:
    """--model DIR|TAG -> the run directory (holding metrics.jsonl and/or checkpoints/)."""
    p = Path(spec).expanduser()
    if p.is_dir():
        if p.name.isdigit():  # a step folder
            p = p.parent
        if p.name == "checkpoints":
            p = p.parent
        if (p / "metrics.jsonl").is_file() or (p / "checkpoints").is_dir():
            return p
    runs = home / "runs"
    if "/" not in spec and (runs / spec).is_dir():
        return runs / spec
    known = sorted(d.name for d in runs.iterdir() if d.is_dir()) if runs.is_dir() else []
    raise RunError(f"no run for {spec!r} (looked for metrics.jsonl or checkpoints/ in {p} and "
                   f"{runs / spec}); pass a run dir or a run tag under {runs} "
                   f"(known: {', '.join(known) or 'none'})")


def checkpoint_steps(run: Path) -> list[int]:
    """Committed checkpoint steps (orbax writes commit_success.txt last)."""
    d = run / "checkpoints"
    if not d.is_dir():
        return []
    return sorted(int(s.name) for s in d.iterdir() if s.name.isdigit() and (s / "commit_success.txt").is_file())


def run_metadata(run: Path) -> dict:
    """The run_metadata JSON of the latest committed checkpoint ({} when there is none)."""
    steps = checkpoint_steps(run)
    if not steps:
        return {}
    try:
        return json.loads((run / "checkpoints" / str(steps[-1]) / "run_metadata" / "metadata").read_text())
    except (OSError, ValueError):
        return {}


def parent_run(meta: dict) -> Path | None:
    src = meta.get("from")
    if not src:
        return None
    p = Path(src)
    if p.name.isdigit():
        p = p.parent
    return p.parent if p.name == "checkpoints" else p


def stage_chain(run: Path, home: Path) -> list[tuple[Path, dict]]:
    """The run, its ancestors (via `from`) and the runs under home/runs descended from any of them,
    as (run dir, metadata), ordered base -> sft -> dpo."""
    found = {run.resolve(): run_metadata(run)}
    cur = found[run.resolve()]
    while (up := parent_run(cur)) is not None and up.resolve() not in found and up.is_dir():
        cur = found[up.resolve()] = run_metadata(up)
    others = [d for d in (home / "runs").iterdir() if d.is_dir()] if (home / "runs").is_dir() else []
    grew = True
    while grew:
        grew = False
        for d in others:
            meta = run_metadata(d)
            up = parent_run(meta)
            if d.resolve() not in found and up is not None and up.resolve() in found:
                found[d.resolve()] = meta
                grew = True
    return sorted(found.items(), key=lambda kv: (STAGE_ORDER.get(kv[1].get("stage"), 3), kv[0].name))


# ---- reading results --------------------------------------------------------------------------
def read_metrics(run: Path) -> dict[str, dict[int, float]]:
    """metrics.jsonl -> {series name: {step: value}} (a repeated step keeps its last value)."""
    series: dict[str, dict[int, float]] = {}
    path = run / "metrics.jsonl"
    if not path.is_file():
        return series
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            continue
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                series.setdefault(k, {})[step] = float(v)
    return series


def find_evals(runs: list[Path], home: Path) -> list[tuple[Path, dict]]:
    """Every eval JSON (a dict with an "eval" key) for these runs, deduplicated by path."""
    seen, out = set(), []
    for run in runs:
        for d in (home / "evals" / run.name, run / "evals", run / "checkpoints"):
            for f in sorted(d.glob("*.json")) if d.is_dir() else []:
                if f.resolve() in seen:
                    continue
                seen.add(f.resolve())
                try:
                    data = json.loads(f.read_text())
                except (OSError, ValueError):
                    continue
                if isinstance(data, dict) and "eval" in data:
                    out.append((f, data))
    return out


def scores(result: dict) -> str:
    """The headline numbers of one eval result, e.g. "pass@1 0.0610, pass@10 0.1520" (the agent
    suite keeps its totals under "overall")."""
    flat = {**result, **(result.get("overall") if isinstance(result.get("overall"), dict) else {})}
    nums = {k: v for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    keys = [k for k in nums if HEADLINE.match(k)] or [k for k in nums if k not in NOT_SCORES]
    parts = []
    for k in keys:
        name = result.get("metric", k) if k in ("core", "core_subset") else k
        parts.append(f"{name} {nums[k]:.4f}" if isinstance(nums[k], float) else f"{name} {nums[k]}")
    return ", ".join(parts) or "-"


def details(result: dict) -> str:
    bits = []
    if "solved" in result and "problems" in result:
        bits.append(f"solved {result['solved']}/{result['problems']}")
    for k in ("mode", "n", "limit"):
        if result.get(k) is not None:
            bits.append(f"{k} {result[k]}")
    return ", ".join(bits)


# ---- plots ------------------------------------------------------------------------------------
def load_figure():
    """matplotlib's Figure class, or None when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def plot_run(Figure, name: str, stage: str, series: dict, path: Path) -> bool:
    """train loss, every val_* series and tokens/s of one run as a grid of panels in one PNG."""
    panels = [(k, t) for k, t in [("loss", "train loss")] if k in series]
    panels += [(k, k) for k in sorted(series) if k.startswith("val_")]
    panels += [(k, t) for k, t in [("tok_per_s", "tokens/s")] if k in series]
    if not panels:
        return False
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.5 * cols, 3.2 * rows), layout="constrained")
    fig.suptitle(f"{stage}: {name}")
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        steps = sorted(series[key])
        ax.plot(steps, [series[key][s] for s in steps], marker="o" if len(steps) < 30 else None,
                markersize=3, linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.savefig(path, dpi=100)
    return True


# ---- the markdown -----------------------------------------------------------------------------
def _last(s: dict[int, float] | None) -> float | None:
    return s[max(s)] if s else None


def _where(f: Path, home: Path) -> str:
    return f"$NANOCODE_HOME/{f.relative_to(home)}" if f.is_relative_to(home) else str(f)


def _fmt(x, spec=".4f") -> str:
    return "-" if x is None else format(x, spec)


def stage_row(run: Path, meta: dict, series: dict) -> str:
    steps = checkpoint_steps(run)
    last_step = max((max(s) for s in series.values()), default=None)
    vals = ", ".join(f"{k} {_last(series[k]):.4f}" for k in sorted(series) if k.startswith("val_"))
    tok = series.get("tok_per_s")
    return (f"| {meta.get('stage', '?')} | {run.name} | {_fmt(last_step, 'd')} | "
            f"{_fmt(_last(series.get('loss')))} | {vals or '-'} | "
            f"{_fmt(statistics.median(tok.values()) if tok else None, ',.0f')} | "
            f"{', '.join(map(str, steps)) or '-'} |")


def core_tasks_table(result: dict) -> list[str]:
    lines = ["| task | type | shots | examples | accuracy | centered |", "|---|---|---:|---:|---:|---:|"]
    for label, r in result.get("tasks", {}).items():
        lines.append(f"| {label} | {r.get('type', '?')} | {r.get('num_fewshot', '?')} | "
                     f"{r.get('examples', '?')} | {_fmt(r.get('accuracy'))} | {_fmt(r.get('centered'))} |")
    return lines


def agent_families_table(result: dict) -> list[str]:
    """The agent suite's AGENT_COLUMNS per family, then the trained and eval-only families' totals
    (when the result has them) and all tasks'; for the report and the model card."""
    lines = ["| family | " + " | ".join(AGENT_COLUMNS) + " |", "|---|" + "---:|" * len(AGENT_COLUMNS)]
    totals = [(name, result[key]) for name, key in (("trained families", "trained_families"),
                                                    ("eval-only families", "eval_only_families"))
              if isinstance(result.get(key), dict)]
    for name, m in [*result.get("families", {}).items(), *totals, ("all", result.get("overall", {}))]:
        cells = [_fmt(m.get(c), ".4g") if isinstance(m.get(c), (int, float)) else "-" for c in AGENT_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def build_report(run: Path, home: Path, out: Path) -> tuple[Path, int, bool]:
    """Write out/report.md (and PNGs); -> (path, number of eval results, whether plots were drawn)."""
    chain = stage_chain(run, home)
    out.mkdir(parents=True, exist_ok=True)
    Figure = load_figure()
    md = [f"# Report: {run.name}", "",
          f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')} from {run}.", "",
          "## Stages", "",
          "| stage | run | last step | train loss | last val | median tokens/s | checkpoints |",
          "|---|---|---:|---:|---|---:|---|"]
    curves = []
    for d, meta in chain:
        series = read_metrics(d)
        md.append(stage_row(d, meta, series))
        if Figure is not None:
            png = out / f"curves_{d.name}.png"
            if plot_run(Figure, d.name, meta.get("stage", "?"), series, png):
                curves.append(f"### {meta.get('stage', '?')}: {d.name}\n\n![{d.name}]({png.name})\n")
            else:
                curves.append(f"### {meta.get('stage', '?')}: {d.name}\n\nNo metrics.jsonl rows in {d}.\n")
    md += ["", "## Training curves", ""]
    md += curves if Figure is not None else [PLOTS_HINT, ""]
    evals = find_evals([d for d, _ in chain], home)
    order = {d.name: i for i, (d, _) in enumerate(chain)}
    evals.sort(key=lambda fr: (order.get(str(fr[1].get("model")), len(order)), str(fr[1]["eval"]),
                               fr[1].get("step") or 0))
    md += ["## Evals", ""]
    if evals:
        md += ["| eval | model | step | scores | details | seconds | file |",
               "|---|---|---:|---|---|---:|---|"]
        for f, r in evals:
            md.append(f"| {r['eval']} | {r.get('model', '?')} | {r.get('step', '-')} | {scores(r)} | "
                      f"{details(r) or '-'} | {r.get('seconds', '-')} | {_where(f, home)} |")
        for f, r in evals:
            title = f"{r.get('model', '?')} step {r.get('step', '?')}"
            if r["eval"] == "core" and r.get("tasks"):
                md += ["", f"### {r.get('metric', 'CORE')}: {title}", ""] + core_tasks_table(r)
            if r["eval"] == "agent" and r.get("families"):
                md += ["", f"### agent suite per family, split {r.get('split', 'eval')}: {title}", ""] \
                    + agent_families_table(r)
    else:
        md.append(f"No eval results found (looked in {home / 'evals'}/<run>/, <run>/evals/ and "
                  "<run>/checkpoints/); run e.g. `evals bpb --model TAG`.")
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    return path, len(evals), Figure is not None


def main(args) -> int:
    home = nanocode_home()
    try:
        run = resolve_run(args.model, home)
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out).expanduser() if args.out else run / "report"
    path, n_evals, plotted = build_report(run, home, out)
    print(f"wrote {path} ({n_evals} eval results" + (", curves as PNG)" if plotted else ")"))
    if not plotted:
        print(PLOTS_HINT, file=sys.stderr)
    return 0
