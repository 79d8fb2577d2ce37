"""Run a code-generation eval end to end: sample n completions per problem with the engine, execute
each in the sandbox, score pass@k, save per-problem JSONL + a summary JSON, print a table.

Trade-offs and numbers:
- One Engine.generate call per problem (and per --batch rows): the prompt is prefilled once and its
  KV cache broadcast to the n sample rows. Prompts of different problems have different lengths
  and the engine batches only equal-length prompts, so problems are not batched together.
- Execution overlaps generation: each problem's programs go to a thread pool (--workers, default
  the core count) as soon as they are sampled. On the 2-core box HumanEval's 164 canonical
  solutions take ~16 s to execute (the harness-validity run, no model).
- Text stop strings are applied after generation (the engine stops on token ids only), so a base
  model decodes up to --max-tokens per sample even when the function ended early.

The engine (jax) is imported inside run_model: `evals agent` uses this module's helpers with no jax
for a server or the baselines, and --canonical / --stubs runs check the harness without a model.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from evals import sandbox, tasks
from evals.passk import mean_pass_at_k
from nanocode.common import ModelError, resolve_model  # noqa: F401 - shared with the agent
from nanocode.common import enable_compilation_cache, nanocode_home
from nanocode.load import load_model
from tools.checks import gate_or_exit


def out_dir(out: str | None, tag: str) -> Path:
    """--out, else $NANOCODE_HOME/evals/<tag>."""
    return Path(out).expanduser() if out else nanocode_home() / "evals" / tag


def write_results(dest: Path, name: str, records: list[dict], summary: dict) -> Path:
    """<dest>/<name>.jsonl (one record per problem/task) and <name>.json (the summary that reports
    and model cards read); returns the summary's path."""
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / f"{name}.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    path = dest / f"{name}.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path


def _bar(total: int, desc: str, quiet: bool):
    return tqdm(total=total, desc=desc, unit="problem", disable=quiet, file=sys.stderr,
                dynamic_ncols=True)


@dataclass(frozen=True)
class CompletionSampling:
    """How run_model samples: n completions per problem (--n, --temperature, --top-k, --top-p,
    --max-tokens, --seed)."""
    n: int = 1
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int = 0


def run_reference(problems: list[tasks.Problem], limits: sandbox.Limits, *, stubs: bool = False,
                  workers: int = 0, quiet: bool = False) -> tuple[list[dict], dict]:
    """--canonical / --stubs: the harness-validity run, no model."""
    which = "stubs" if stubs else "canonical"
    bar = _bar(len(problems), which, quiet)
    results = sandbox.run_many([tasks.program(p, tasks.reference(p, stubs)) for p in problems],
                               limits, workers, on_done=lambda i, r: bar.update())
    bar.close()
    rows = [{"task_id": p.task_id, "n": 1, "c": int(r.status == "passed"),
             "samples": [_sample_row(tasks.reference(p, stubs), r)]}
            for p, r in zip(problems, results)]
    return rows, {"model": which, "mode": which, "n": 1}


def _sample_row(solution: str, r: sandbox.Result, text: str | None = None) -> dict:
    row = {"status": r.status, "seconds": r.seconds, "stderr_tail": r.stderr[-500:]}
    if text is not None:
        row["completion"] = text
    row["solution"] = solution
    return row


def run_model(problems: list[tasks.Problem], model: str, limits: sandbox.Limits,
              sampling: CompletionSampling, *, step: int | None = None, mode: str = "auto",
              batch: int = 0, workers: int = 0, desc: str = "sample+run",
              quiet: bool = False) -> tuple[list[dict], dict]:
    """Sample sampling.n completions per problem (batch rows per generate call, 0: n) and execute
    them, `workers` programs at a time (0: core count)."""
    enable_compilation_cache()
    from nanocode.engine import Engine

    params, cfg, tok, meta, ckpt, tag, step = load_model(model, step)
    engine = Engine(params, cfg, tok)
    stage = (meta or {}).get("stage", "base")
    mode = mode if mode != "auto" else ("completion" if stage == "base" else "chat")
    stops = list(engine.stop_ids) + ([tok.bos_id] if mode == "completion" else [])
    batch = max(1, batch or sampling.n)

    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1)
    try:
        rows = _sample_and_run(problems, engine, tok, mode, stops, batch, pool, sampling, limits, desc, quiet)
    finally:
        pool.shutdown(cancel_futures=True)  # an error or Ctrl-C leaves no queued programs
    info = {"model": tag, "checkpoint": str(ckpt), "step": int(step), "stage": stage, "mode": mode,
            "n": sampling.n, "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "max_tokens": sampling.max_tokens, "seed": sampling.seed}
    return rows, info


def _sample_and_run(problems, engine, tok, mode, stops, batch, pool, sampling, limits, desc, quiet):
    sandbox.isolation()
    pending = []  # (problem index, [(text, solution, future)])
    bar = _bar(len(problems), desc, quiet)
    for pi, p in enumerate(problems):
        if mode == "chat":
            ids = tok.render_for_completion(tasks.chat_conversation(p))
        else:
            ids = [tok.bos_id] + tok.encode(tasks.completion_prompt(p))
        room = engine.max_len - len(ids)
        samples = []
        if room < 1:
            over = sandbox.Result("failed", None, 0.0, "", "prompt longer than the model's context", "")
            samples = [("", "", over)] * sampling.n
        else:
            budget = min(sampling.max_tokens, room)
            for start in range(0, sampling.n, batch):
                k = min(batch, sampling.n - start)
                outs = engine.generate(ids, n=k, max_tokens=budget, stop=stops,
                                       temperature=sampling.temperature, top_k=sampling.top_k,
                                       top_p=sampling.top_p, seed=sampling.seed + 1000003 * pi + start)
                for out in outs:
                    text = tok.decode([t for t in out if t not in stops])
                    sol = tasks.solution_from_completion(p, text, mode)
                    samples.append((text, sol, pool.submit(sandbox.run_program, tasks.program(p, sol),
                                                           limits)))
        pending.append((pi, samples))
        bar.update()
    bar.close()
    rows = []
    for pi, samples in pending:
        res = [(t, s, f if isinstance(f, sandbox.Result) else f.result()) for t, s, f in samples]
        rows.append({"task_id": problems[pi].task_id, "n": len(res),
                     "c": sum(r.status == "passed" for _, _, r in res),
                     "samples": [_sample_row(s, r, t) for t, s, r in res]})
    return rows


def _missing() -> str | None:
    """None where the programs run in namespaces (sandbox.isolation), else why not."""
    iso = sandbox.isolation()
    return None if iso["mode"] == "ns" else iso["note"] or "no namespaces"


def main(args) -> int:
    t0 = time.perf_counter()
    reference = args.canonical or args.stubs
    if not reference and not args.model:
        print(f"error: evals {args.task} needs --model PATH|TAG (or --canonical / --stubs to check "
              "the harness without a model)", file=sys.stderr)
        return 2
    if args.n < 1 or any(k < 1 for k in args.k):
        print("error: --n and --k must be >= 1", file=sys.stderr)
        return 2
    if args.n > 1 and args.temperature == 0 and not reference:
        print(f"error: --n {args.n} at temperature 0 gives {args.n} identical greedy samples "
              "(pass@k would equal pass@1); pass --temperature 0.8 or so", file=sys.stderr)
        return 2
    # the programs are a model's code (the references too run in the same harness)
    unsandboxed = gate_or_exit(f"evals {args.task}", args.unsandboxed, _missing)
    try:
        problems = tasks.load_task(args.task, args.data, args.limit)
        limits = sandbox.Limits(timeout=args.timeout, memory_mb=args.memory_mb)
        if reference:
            rows, info = run_reference(problems, limits, stubs=args.stubs, workers=args.workers,
                                       quiet=args.quiet)
        else:
            sampling = CompletionSampling(n=args.n, temperature=args.temperature, top_k=args.top_k,
                                          top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed)
            rows, info = run_model(problems, args.model, limits, sampling, step=args.step, mode=args.mode,
                                   batch=args.batch, workers=args.workers, desc=f"{args.task} sample+run",
                                   quiet=args.quiet)
    except (tasks.TaskError, ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ks = [k for k in args.k if k <= min(r["n"] for r in rows)]
    scores = mean_pass_at_k([(r["n"], r["c"]) for r in rows], ks)
    statuses = Counter(s["status"] for r in rows for s in r["samples"])
    iso = sandbox.isolation()
    summary = {"eval": args.task, **info, "problems": len(rows), "solved": sum(r["c"] > 0 for r in rows),
               **scores, "k": ks, "statuses": dict(statuses), "data": args.data or "default",
               "limit": args.limit, "timeout_s": args.timeout, "memory_mb": args.memory_mb,
               "isolation": iso, "unsandboxed": unsandboxed, "seconds": round(time.perf_counter() - t0, 1)}
    dest = out_dir(args.out, "reference" if reference else info["model"])
    name = args.task + (f"_{info['mode']}" if reference else f"_step{info['step']}")
    write_results(dest, name, rows, summary)
    print(f"{'eval':<14} {'model':<16} {'mode':<10} {'n':>4} {'solved':>9} "
          + " ".join(f"{k:>9}" for k in scores))
    print(f"{args.task:<14} {str(info['model'])[:16]:<16} {info['mode']:<10} {info['n']:>4} "
          f"{summary['solved']:>4}/{len(rows):<4} " + " ".join(f"{v:>9.4f}" for v in scores.values()))
    print(f"isolation: {iso['name']} (network blocked: {iso['network_blocked']}, read-only fs: "
          f"{iso['readonly_fs']}, cgroups: {','.join(iso['cgroups']) or 'none'}); statuses "
          f"{dict(statuses)}; {summary['seconds']} s; wrote {dest / (name + '.json')}")
    return 0
