"""`train synth`: offline agentic rollouts (SFT conversations, preference pairs, eval tasks).

Trade-offs: every rollout builds a real throwaway project on disk and runs the real tools (pytest
and git included), so data is exact but costs ~0.5-1 s per conversation; worker processes
parallelise it. Projects live at a fixed path (/tmp/nanocode-synth/<seed>/<name>, wiped before
use and removed after) so the working directory in prompts and tool output is the same on every
run: two runs with the same seed write identical files, except timings that tools print
(pytest's "in 0.03s"). Two concurrent runs with the same seeds would collide on those paths.
The tasks, their oracle and the seed ranges are tasks (the package `tasks`); held-out
words and requests (tasks/names.py HELDOUT_WORDS, tasks/requests.py's held-out grammar),
the EVAL_ONLY_FAMILIES and the real world's eval-side source packages never reach train/val
data; eval_tasks.jsonl uses only them. Each finished conversation is appended to
<out>/partial.jsonl as it comes, so a run that is killed (a chunk of chip time ending) resumes
after what it kept when rerun with the same settings; --n may grow between runs. --real-ratio
draws that share of task conversations from the real world (tasks/real_projects.py: projects of
real standard-library code); each --real-source adds a package root's modules to its training side
(train/real_sources.py; archives unpacked below <workdir>/real-sources). No heavy imports at
module level: the CLI imports this module.

The tasks' checks and test runs while building go through tools/checks.py, as a model's would:
where no OS sandbox starts, synth runs only with --unsandboxed (train/v5e.sh passes that choice on
the chip's host), and stats.json records "unsandboxed".

Outputs in --out: train.jsonl / val.jsonl ({"id", "family", "world", "messages"} per line),
preference_train.jsonl / preference_val.jsonl ({"id", "family", "flaw", "chosen", "rejected"}),
eval_tasks.jsonl ({"id", "family", "seed", "heldout", "project", "prompt", "check"}; rebuild with
tasks.make_task(family, seed, heldout=True)) and stats.json (counts, and the shares of grounded arguments
from train/oracle_audit.py).
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import time

from tqdm import tqdm

from nanocode.protocol import system_prompt
from tasks import (
    EVAL_ONLY_FAMILIES, FAMILIES, HELDOUT_WORDS, TRAIN_FAMILIES, WORLD_FAMILIES, attempt_seeds,
    code_conversation, eval_seed, make_task, pool_stats, shows_flaw, world_of)
from tools.checks import gate_or_exit
from train.corpus import DataError
from train.oracle_audit import audit, shares_line
from train.real_sources import resolve_real_sources

__all__ = ["main", "generate_one", "is_val"]

PARTIAL = "partial.jsonl"  # each finished job's result as it comes: a killed run resumes after them


def is_val(cid: str, fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha1(cid.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def generate_one(job: tuple) -> tuple[dict, dict | None]:
    """One conversation (and maybe its preference pair) for index i of a run; a job ends with
    the package roots' tuple only when there are any (so the resume header is as before)."""
    seed, i, families, code_ratio, pref_ratio, base, real_ratio, *more = job
    sources = tuple(more[0]) if more else ()
    rng = random.Random(f"synth:{seed}:{i}")
    cseed, cid = seed * 10**6 + i, f"{seed}-{i}"
    if rng.random() < code_ratio:
        system = system_prompt(os.path.join(base, str(cseed), "scratch"))
        conv = code_conversation(rng, system, HELDOUT_WORDS)
        return {"id": cid, "family": "code", "world": "code", "messages": conv["messages"]}, None
    family = rng.choice(families)
    world = world_of(family, real_ratio > 0 and rng.random() < real_ratio)
    aseeds = attempt_seeds(cseed)
    for aseed in aseeds:  # a rare project where the family cannot apply: next project
        try:
            task = make_task(family, aseed, False, base, world, sources)
            chosen, pair = task.rollout(), None
            if rng.random() < pref_ratio:  # each flawed replay needs the untouched project again
                for flaw in rng.sample(task.flaws, len(task.flaws)):
                    rejected = make_task(family, aseed, False, base, world, sources).rollout(flaw)
                    if shows_flaw(flaw, chosen, rejected):
                        pair = {"id": cid, "family": family, "world": world, "flaw": flaw, "chosen": chosen,
                                "rejected": rejected}
                        break
            return {"id": cid, "family": family, "world": world, "messages": chosen["messages"]}, pair
        except Exception as e:  # noqa: BLE001 - retried with another project, recorded at the end
            if aseed == aseeds[-1]:  # kept in its place (resume counts positions), left out of the data
                return {"id": cid, "family": family, "world": world, "failed": f"{type(e).__name__}: {e}"}, None
        finally:
            shutil.rmtree(os.path.join(base, str(aseed)), ignore_errors=True)


def eval_task_record(family: str, seed: int, base: str) -> dict:
    task = make_task(family, seed, True, base)
    shutil.rmtree(os.path.join(base, str(seed)), ignore_errors=True)
    return {"id": f"eval-{family}-{seed}", "family": family, "seed": seed, "heldout": True,
            "project": task.project.name, "prompt": task.prompt, "check": task.desc}


def _done_so_far(out: str, settings: tuple) -> list:
    """The results an interrupted run of the same settings (everything but --n and --workers)
    kept in <out>/PARTIAL, in job order; a partial file of other settings is started afresh. A
    torn last line (the run was killed mid-write) is dropped."""
    path = os.path.join(out, PARTIAL)
    head = json.dumps(list(settings))
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        lines = []
    results = []
    if lines and lines[0] == head:
        for line in lines[1:]:
            try:
                results.append(tuple(json.loads(line)))
            except ValueError:
                break
    with open(path, "w", encoding="utf-8") as f:  # without a torn tail: appends continue a clean file
        f.write(head + "\n" + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in results))
    return results


def _write(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _real_sources(args) -> tuple[tuple[str, ...] | None, dict]:
    """(the package roots of --real-source, what they add); (None, {}) after printing the error
    when a path or the settings are wrong."""
    if not args.real_source:
        return (), {}
    if args.real_ratio == 0:
        print("error: --real-source needs --real-ratio above 0 (the share of task conversations on real code)")
        return None, {}
    try:
        sources = resolve_real_sources(args.real_source, os.path.join(args.workdir, "real-sources"))
    except DataError as e:
        print(f"error: {e}")
        return None, {}
    stats = pool_stats(sources)
    if not stats["with_candidates"]:
        print(f"error: no liftable pure-Python function under --real-source {' '.join(args.real_source)}: name the "
              "folder you would put on sys.path (a site-packages, a checkout's src/), a wheel or an sdist")
        return None, {}
    skipped = ", ".join(f"{n} {why}" for why, n in stats["skipped"].items()) or "none"
    print(f"synth: --real-source adds {stats['modules']} modules of {stats['packages']} packages "
          f"({stats['with_candidates']} with functions to lift; packages skipped: {skipped})")
    return sources, stats


def main(args) -> int:
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in TRAIN_FAMILIES]
    if bad:
        print(f"error: not a training family: {', '.join(bad)} (choose from {', '.join(TRAIN_FAMILIES)}; "
              f"eval-only: {', '.join(EVAL_ONLY_FAMILIES)})")
        return 2
    os.makedirs(args.out, exist_ok=True)
    if not 0 <= args.real_ratio <= 1:
        print(f"error: --real-ratio must be between 0 and 1, not {args.real_ratio}")
        return 2
    sources, real_stats = _real_sources(args)
    if sources is None:
        return 2
    # our oracle's edits, but the same checks as a model's: one rule
    unsandboxed = gate_or_exit("train synth", args.unsandboxed)
    jobs = [(args.seed, i, families, args.code_ratio, args.pref_ratio, args.workdir, args.real_ratio)
            + ((sources,) if sources else ()) for i in range(args.n)]
    t0 = time.time()
    results = _done_so_far(args.out, jobs[0][:1] + jobs[0][2:] if jobs else ())
    if results:
        print(f"synth: resuming after {len(results)} conversation(s) kept in {os.path.join(args.out, PARTIAL)}")
    results = results[:args.n]
    kept = len(results)
    bar = tqdm(total=args.n, initial=len(results), unit="conv", dynamic_ncols=True, desc="synth")
    with open(os.path.join(args.out, PARTIAL), "a", encoding="utf-8") as partial:
        def keep(res):
            results.append(res)
            partial.write(json.dumps(res, ensure_ascii=False) + "\n")
            partial.flush()
            bar.update()
        todo = jobs[len(results):]
        deadline = t0 + args.minutes * 60 if args.minutes > 0 else float("inf")
        if args.workers > 1 and todo:
            # fork is fast, but unsafe once jax (multithreaded) is loaded in this process (tests)
            ctx = mp.get_context("spawn" if "jax" in sys.modules else "fork")
            with ctx.Pool(args.workers) as pool:  # leaving the block terminates the workers
                for res in pool.imap(generate_one, todo):
                    keep(res)
                    if time.time() > deadline:
                        break
        else:
            for job in todo:
                keep(generate_one(job))
                if time.time() > deadline:
                    break
    bar.close()
    if len(results) < args.n:
        print(f"synth: --minutes {args.minutes:g} ran out after {len(results)} of {args.n} conversations; "
              "writing those (rerun with the same settings to add more)")
    out = {"train": [], "val": [], "preference_train": [], "preference_val": []}
    stats = {"seed": args.seed, "n": len(results), "families": families, "real_ratio": args.real_ratio,
             "unsandboxed": unsandboxed,
             "worlds": {}, "train": {}, "val": {},
             "preference_train": {}, "preference_val": {}, "flaws": {}, "eval_tasks": {}}
    if sources:
        stats["real_sources"] = real_stats
    failed = [conv for conv, _ in results if "failed" in conv]
    if failed:  # a task whose every project failed: a bug to fix, not a reason to lose the run
        stats["failed"] = {f: sum(c["family"] == f for c in failed) for f in sorted({c["family"] for c in failed})}
        print(f"synth: warning: {len(failed)} of {len(results)} jobs built no task on any of their "
              f"{len(attempt_seeds(0))} projects and were left out ({stats['failed']}); the first: "
              f"{failed[0]['id']} ({failed[0]['world']}): {failed[0]['failed']}", file=sys.stderr)
    for conv, pair in results:
        if "failed" in conv:
            continue
        split = "val" if is_val(conv["id"], args.val_fraction) else "train"
        out[split].append(conv)
        stats["worlds"][conv["world"]] = stats["worlds"].get(conv["world"], 0) + 1
        stats[split][conv["family"]] = stats[split].get(conv["family"], 0) + 1
        if pair:
            out["preference_" + split].append(pair)
            stats["preference_" + split][pair["family"]] = stats["preference_" + split].get(pair["family"], 0) + 1
            stats["flaws"][pair["flaw"]] = stats["flaws"].get(pair["flaw"], 0) + 1
    for name, rows in out.items():
        _write(os.path.join(args.out, name + ".jsonl"), rows)
    generated = WORLD_FAMILIES["generated"]  # the suite eval_tasks.jsonl lists: generated projects
    evals = [eval_task_record(generated[j % len(generated)],
                              eval_seed(j // len(generated), list(FAMILIES).index(generated[j % len(generated)])),
                              args.workdir) for j in range(args.n_eval)]
    for e in evals:
        stats["eval_tasks"][e["family"]] = stats["eval_tasks"].get(e["family"], 0) + 1
    _write(os.path.join(args.out, "eval_tasks.jsonl"), evals)
    grounded = audit(out["train"] + out["val"])
    stats["grounded"] = grounded["counts"]
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    dt = time.time() - t0
    print(f"wrote {len(out['train'])} train, {len(out['val'])} val conversations, "
          f"{len(out['preference_train']) + len(out['preference_val'])} preference pairs, {len(evals)} eval tasks "
          f"to {args.out} in {dt:.1f}s ({(len(results) - kept) / max(dt, 1e-9):.2f} conv/s made here)\n{shares_line(grounded)}")
    return 0


if __name__ == "__main__":  # the arguments are train/cli.py's
    from train.cli import main as cli_main
    raise SystemExit(cli_main(["synth", *sys.argv[1:]]))
