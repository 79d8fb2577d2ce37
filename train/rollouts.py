"""`train rollouts`: on-policy data. The current model runs through the real agent loop, headless
and grounded (as `evals agent` runs it), on fresh training tasks; each rollout is scored by its
task's hidden check, which is legitimate on training tasks and never done on eval seeds.

What comes out, in --out:
- sft.jsonl: the resolved rollouts as SFT rows (rejection-sampling fine-tuning: the model's own
  successful behaviour, in its own words, as training targets), those that end on the model's own
  answer (not the step limit) with no tool output compacted away. A rollout that edited the
  project's tests (or conftest, pytest config, interpreter hooks) unasked is never resolved
  (harness.resolved), so it never becomes a row; it may be a pair's rejected side, never chosen.
- preference.jsonl: for each task whose rollouts all failed, a pair at the first step where the
  model departs from the oracle: both sides share the model's own context up to that step; chosen
  is the oracle's step (its tool call, or its answer), rejected the model's. A departure is an
  action that none of 8 variants of the oracle (other prose seeds, so other phrasings and other
  legitimate choices, such as reading before answering) would take there (`same_action`: another
  tool, file, symbol or command; answering instead of calling; another answer); the prose of a
  thought does not count. Pairs have {"flaw": "on_policy"} and feed `train dpo` beside the synth pairs.
- tasks/<id>.json: one record per task (resolved, steps, stop reasons, seconds), written whole
  (rename) when the task ends. A rerun with the same --out skips the tasks that have a record, so a
  killed run resumes where it stopped; sft.jsonl, preference.jsonl and summary.json are rebuilt
  from the records each time.

The hidden checks run the project as the model (or a server) left it: through tools/checks.py,
in the OS sandbox, or where none starts only with --unsandboxed (else exit status 2, one line);
summary.json records "unsandboxed".

Tasks: task i has family TRAIN_FAMILIES[i % F] and seed ROLLOUT_SEED0 + --seed * 10**6 + i, with
training names and phrasings, on real standard-library code (the real world's training packages)
for about --real-ratio of them (drawn per seed, among the families that have a real form): a seed range that `train synth` (seed * 10**6 + i) and the eval
suite (EVAL_SEED0 and up) never use (tasks/seeds.py). Building a task, the headless agent,
its turns and the hidden check are tasks' (build_task, task_agent, drive, resolved), the
same path `evals agent` scores with. Rollout k of a task (--samples) runs greedy for k = 0 and at
--temperature with seed task seed + k otherwise, each on a freshly built project under --workdir
(the synth path, so prompts and tool output look like the SFT data). Worker processes (spawn, one
engine each) run tasks in parallel; the bar shows rate, ETA and resolves.

A server as the teacher (--base-url URL [--model NAME]): any OpenAI-compatible server (a capable
model behind vLLM, llama.cpp, Ollama, a vendor's API) rolls out instead of our engine, each
worker on a RemoteSampler (agent/samplers/remote.py, its key handling unchanged: $NANOCODE_API_KEY) made
by agent/model.load_sampler for the model the parent found (--model, else the first the server
lists). Everything else is as for our model: the same tasks, the same verdict (the hidden check,
the tests as they were before the change, never a tampered rollout), resolved rollouts as SFT
rows (`train sft` trains on them: the calls arrive in our conversation schema), failures as a
pair's rejected side. A server that cannot be reached at the start is a one-line error, exit
status 6 (the model server failed, as `nanocode -p --base-url` says it; a URL that is no http(s)
URL is a usage error, 2). A rollout whose turn the server broke off (stop reason model_error) is
no failure of the teacher: it is never a pair's rejected side, and a task whose every rollout
ended so is not recorded, so a rerun with the same --out retries it. summary.json's "model" says
which model rolled out ("<url> <model>" for a server, with "base_url"); every task record says it
too, and a rerun into an --out that holds another model's rollouts is refused.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shlex
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from agent.model import AgentOptions, ModelError, PoolModel, load_sampler
from agent.run_options import settings
from agent.samplers.remote import base_url_error
from nanocode.common import find_checkpoints
from nanocode.protocol import DROPPED
from tasks import (
    EVAL_SEED0, ROLLOUT_SEED0, TRAIN_FAMILIES, OracleRollout, attempt_seeds, build_task, drive, pattern_symbol,
    resolved, setup_env, task_agent, world_of)
from tools.checks import gate_or_exit
from tools.sandbox import unattended_warning

_worker = PoolModel()  # the worker's model (our engine or the teacher's server), set by _init


# ---- pairs -------------------------------------------------------------------------------------------

def _operands(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return [w for w in words if not w.startswith("-")]


def same_action(a: dict | None, b: dict | None) -> bool:
    """Whether two tool calls (or two answers: None) do the same thing: Read the same file, Edit the
    same text the same way, Grep for the same symbol, run a command whose operands (flags aside)
    are the other's or start them (`pytest -q` is `pytest tests`). The oracle's arbitrary choices
    (which regex, which flags) are then no departure."""
    if a is None or b is None:
        return a is b
    x, y = a.get("args") or {}, b.get("args") or {}
    if a["name"] != b["name"] or not isinstance(x, dict):
        return False
    if a["name"] == "Read":
        return os.path.normpath(str(x.get("file_path"))) == os.path.normpath(str(y.get("file_path")))
    if a["name"] == "Grep":
        return pattern_symbol(str(x.get("pattern", ""))) == pattern_symbol(str(y.get("pattern", "")))
    if a["name"] == "Bash":  # `pytest -q` is `pytest -q tests` where the tests live there
        mine, theirs = _operands(str(x.get("command", ""))), _operands(str(y.get("command", "")))
        short, long = sorted((mine, theirs), key=len)
        return long[:len(short)] == short and bool(short)
    return x == y


class _Diverged(Exception):
    pass


def oracle_variants(task, model: list[dict], n: int = 8) -> list[tuple[int, dict]]:
    """For each of n oracle variants (the task's policy with other prose seeds: other phrasings,
    and the choices a policy draws, such as whether to Read before answering), (k, message): the
    first assistant step k at which it would not do what the model did, and its message there
    (k = len of the model's steps when it agrees all the way). Each call the variant makes gets the
    result the model got for that step, so nothing runs: the training families' policies depend
    only on the task's metadata and on those results."""
    steps = [(m, nxt) for m, nxt in zip(model, model[1:] + [None]) if m["role"] == "assistant"]

    class Replay(OracleRollout):
        def __init__(self, variant):
            super().__init__(task)
            if variant:
                self.rng = random.Random(f"{task.family}:{task.seed}:prose:{variant}")
            self.k = 0

        def _step(self, message: dict) -> str:
            k, self.k = self.k, self.k + 1
            if k >= len(steps):
                raise _Diverged(k, message)
            mine, result = steps[k]
            if message.get("tool_call") is None:  # an answer: the model's differs unless equal
                if mine.get("tool_call") is None and mine["content"].strip() == message["content"].strip():
                    raise _Diverged(len(steps), message)
                raise _Diverged(k, message)
            if not same_action(message["tool_call"], mine.get("tool_call")):
                raise _Diverged(k, message)
            return result["content"] if result and result["role"] == "tool_result" else ""

        def call(self, thought, name, args):
            return self._step({"role": "assistant", "content": thought, "tool_call": {"name": name, "args": dict(args)}})
        reject = call

        def user(self, text):
            pass

        def done(self, text):
            self._step({"role": "assistant", "content": text})

    out = []
    for v in range(n):
        try:
            task.policy(Replay(v))
            out.append((len(steps), {}))
        except _Diverged as e:
            out.append(e.args)
    return out


def departure_pair(task, model: list[dict], n_variants: int = 8) -> dict | None:
    """{"chosen", "rejected"} at the first step of the model's that no oracle variant takes (see
    oracle_variants; chosen = the step of a variant that agreed longest), or None when some variant
    does everything the model did."""
    variants = oracle_variants(task, model, n_variants)
    k, chosen = max(variants, key=lambda v: v[0])
    positions = [i for i, m in enumerate(model) if m["role"] == "assistant"]
    if k >= len(positions) or not chosen:
        return None
    i = positions[k]
    return {"chosen": {"messages": model[:i] + [chosen]}, "rejected": {"messages": model[:i + 1]}}


def clean(messages: list[dict]) -> list[dict]:
    """The transcript as training rows hold it: role, content and tool_call only."""
    return [{k: m[k] for k in ("role", "content", "tool_call") if k in m} for m in messages]


# ---- one task -----------------------------------------------------------------------------------------

def _init(model: str | None, server=None) -> None:
    """Per worker: the environment the tools expect, and the model (agent/model.PoolModel): our
    engine on checkpoint `model`, or with `server` (AgentOptions naming base_url and the model) a
    RemoteSampler on that server."""
    global _worker
    setup_env()
    _worker = PoolModel.load(model, None, server)


def run_task(job: tuple) -> dict:
    """Every sample of one task; returns its record (with the rows and pair it produced)."""
    _worker.check()
    family, seed, world, opts = job
    tid = f"rollout-{family}-{seed}"
    t0 = time.perf_counter()
    rec = {"id": tid, "family": family, "world": world, "seed": seed, "model": opts.get("model"),
           "samples": []}
    rows, failed = [], None
    base = opts["workdir"]
    try:
        for k in range(opts["samples"]):
            task = build_task(family, seed, False, base, world)
            temperature = 0.0 if k == 0 else opts["temperature"]
            sampling = replace(opts["sampling"], temperature=temperature, seed=seed + k)
            agent = task_agent(_worker.sampler(task.root, sampling), task, task.root, opts["turn"])
            turns = drive(agent, task)
            calls = [c for t in turns for c in t.tool_calls]
            verdict = resolved(task, turns[-1].answer, calls)
            ok = verdict.resolved and agent.messages[0]["content"] == task.system
            tampered = list(verdict.tampered)
            stops = [t.stop_reason for t in turns]
            broken = "model_error" in stops  # the server failed: no verdict on the model
            rec["samples"].append({"resolved": ok, "steps": len(calls), "stops": stops,
                                   "tampered": tampered})
            messages = clean(agent.messages)
            # a row must read as a whole turn: ended by the model's own answer, nothing compacted
            whole = turns[-1].stop_reason == "done" and not any(m["content"].startswith(DROPPED) for m in messages)
            if ok and whole and all(messages != r["messages"] for r in rows):
                rows.append({"id": f"{tid}-{k}", "family": family, "world": world, "messages": messages})
            elif not ok and not broken and failed is None:
                failed = messages
        rec["resolved"] = any(x["resolved"] for x in rec["samples"])
        if failed is not None and not rows:
            pair = departure_pair(task, failed)
            if pair:
                rec["pair"] = {"id": tid, "family": family, "world": world, "flaw": "on_policy", **pair}
    except Exception as e:  # noqa: BLE001 - one broken task must not end the run; it is reported
        rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
        rec["resolved"] = False
    finally:
        for aseed in attempt_seeds(seed):
            shutil.rmtree(os.path.join(base, str(aseed)), ignore_errors=True)
    rec["rows"] = rows
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


# ---- command -----------------------------------------------------------------------------------------

def task_world(family: str, seed: int, real_ratio: float) -> str:
    """"real" for about real_ratio of the tasks whose family has a real-code form, drawn per seed."""
    return world_of(family, random.Random(f"rollout-world:{seed}").random() < real_ratio)


def _write_jsonl(path: Path, rows) -> int:
    tmp = path.with_name(f".{path.name}.tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def run_jobs(jobs, todo, args, server, tasks_dir: Path) -> list[str]:
    """Run the `todo` jobs (of `jobs`) on --workers processes with a progress bar, writing each
    task's record as it ends; returns the ids not recorded (the server failed every rollout).
    Raises ModelError when a worker cannot load the model or reach the server."""
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc="rollouts", unit="task",
               file=sys.stderr, dynamic_ncols=True)
    solved, unrecorded = [0], []

    def done(rec):
        bar.update()
        if rec["samples"] and all("model_error" in x["stops"] for x in rec["samples"]):
            unrecorded.append(rec["id"])  # the server failed every rollout: a rerun retries it
            return
        tmp = tasks_dir / f".{rec['id']}.json.tmp"
        tmp.write_text(json.dumps(rec, ensure_ascii=False))
        os.replace(tmp, tasks_dir / f"{rec['id']}.json")
        solved[0] += rec["resolved"]
        bar.set_postfix(resolved=solved[0])
    try:
        if args.workers <= 1 or len(todo) <= 1:
            _init(args.model, server)
            for job in todo:
                done(run_task(job))
        elif todo:
            with mp.get_context("spawn").Pool(args.workers, initializer=_init,
                                              initargs=(args.model, server)) as pool:
                for rec in pool.imap_unordered(run_task, todo):
                    done(rec)
    finally:
        bar.close()
    return unrecorded


def write_outputs(out: Path, records: list[dict], args, label: str, unsandboxed: bool, t0: float) -> dict:
    """sft.jsonl and preference.jsonl from every task's record, and the summary (returned and
    written as summary.json): resolved, rows, pairs, errors and tampering, per family and world."""
    n_rows = _write_jsonl(out / "sft.jsonl", (r for rec in records for r in rec["rows"]))
    n_pairs = _write_jsonl(out / "preference.jsonl", (rec["pair"] for rec in records if "pair" in rec))
    by_family = {}
    for rec in records:
        fam = by_family.setdefault(rec["family"], {"tasks": 0, "resolved": 0, "pairs": 0})
        fam["tasks"] += 1
        fam["resolved"] += rec["resolved"]
        fam["pairs"] += "pair" in rec
    worlds = {}
    for rec in records:
        w = worlds.setdefault(rec.get("world", "generated"), {"tasks": 0, "resolved": 0})
        w["tasks"] += 1
        w["resolved"] += rec["resolved"]
    summary = {"model": label, "base_url": args.base_url, "unsandboxed": unsandboxed, "tasks": len(records),
               "resolved": sum(r["resolved"] for r in records),
               "sft_rows": n_rows, "pairs": n_pairs, "errors": sum("error" in r for r in records),
               "tampered_samples": sum(bool(x.get("tampered")) for r in records for x in r["samples"]),
               "samples": args.samples, "seed": args.seed, "real_ratio": args.real_ratio,
               "families": by_family, "worlds": worlds,
               "seconds": round(time.perf_counter() - t0, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def usage_problem(args) -> str | None:
    """What is wrong with the flags, in one line, or None."""
    if args.n < 1 or args.samples < 1 or args.max_steps < 1 or args.seed < 0:
        return "--n, --samples and --max-steps must be >= 1 and --seed >= 0"
    if not 0 <= args.real_ratio <= 1:
        return f"--real-ratio must be between 0 and 1, not {args.real_ratio}"
    if args.base_url is None and args.model is None:
        return ("train rollouts needs --model (a checkpoint dir, run dir or run tag) or "
                "--base-url URL (a server as the teacher)")
    if args.context is not None and (args.base_url is None or args.context < 64):
        return "--context goes with --base-url and is at least 64 tokens"
    if args.base_url is not None:
        return base_url_error(args.base_url)
    return None


def main(args) -> int:
    if (problem := usage_problem(args)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # the hidden checks run the project as the model (or a server) left it
    unsandboxed = gate_or_exit("train rollouts", args.unsandboxed)
    server = None
    if args.base_url is not None:  # asked now: a wrong URL or model fails here, in one line
        try:
            remote, label = load_sampler(AgentOptions(model=args.model, base_url=args.base_url,
                                                      context=args.context), None, None)
        except ModelError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.code  # 6: the model server failed
        server = AgentOptions(model=remote.model, base_url=args.base_url, context=args.context)
    else:
        try:
            find_checkpoints(args.model)
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        label = args.model
    seed0 = ROLLOUT_SEED0 + args.seed * 10**6
    assert seed0 + args.n < EVAL_SEED0
    out, tasks_dir = Path(args.out), Path(args.out) / "tasks"
    tasks_dir.mkdir(parents=True, exist_ok=True)
    sampling, turn = settings(args, "train rollouts")
    opts = {"samples": args.samples, "temperature": args.temperature, "workdir": args.workdir,
            "model": label, "sampling": sampling, "turn": turn}
    jobs = [(family, seed0 + i, task_world(family, seed0 + i, args.real_ratio), opts)
            for i in range(args.n) for family in [TRAIN_FAMILIES[i % len(TRAIN_FAMILIES)]]]
    others = {json.loads(p.read_text()).get("model") for p in tasks_dir.glob("*.json")}
    others -= {label, None}  # records from before they named their model count as this one's
    if others:
        print(f"error: {out} holds rollouts of {', '.join(sorted(others))}, not {label}; give each "
              "model its own --out", file=sys.stderr)
        return 2
    if warning := unattended_warning():  # rollouts without commands teach the model to avoid them
        print(f"warning: {warning}", file=sys.stderr)
    todo = [j for j in jobs if not (tasks_dir / f"rollout-{j[0]}-{j[1]}.json").exists()]
    if len(todo) < len(jobs):
        print(f"resuming: {len(jobs) - len(todo)} of {len(jobs)} tasks done already")
    t0 = time.perf_counter()
    try:
        unrecorded = run_jobs(jobs, todo, args, server, tasks_dir)
    except ModelError as e:  # a worker could not reach the server
        print(f"error: {e}", file=sys.stderr)
        return 6
    records = [json.loads((tasks_dir / f"rollout-{f}-{s}.json").read_text()) for f, s, _, _ in jobs
               if (tasks_dir / f"rollout-{f}-{s}.json").exists()]
    summary = write_outputs(out, records, args, label, unsandboxed, t0)
    n_rows, n_pairs = summary["sft_rows"], summary["pairs"]
    print(f"{summary['resolved']}/{len(records)} tasks resolved: {n_rows} sft rows, {n_pairs} preference "
          f"pairs ({summary['errors']} errors, {summary['tampered_samples']} samples edited the tests) "
          f"in {summary['seconds']} s -> {out}")
    for rec in records:
        if "error" in rec:
            print(f"warning: {rec['id']} did not run: {rec['error']}", file=sys.stderr)
    if unrecorded:
        print(f"warning: {len(unrecorded)} task(s) not recorded: the model server failed in every "
              "rollout (stop reason model_error); check the server and rerun with the same --out "
              "to retry them", file=sys.stderr)
    return 0
