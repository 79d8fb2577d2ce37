"""`evals agent`: the agentic task suite. Held-out tasks from the task families (tasks: held-out
names and phrasings; TRAIN_FAMILIES plus the EVAL_ONLY_FAMILIES never trained on; --split real:
projects of real standard-library code from source packages training never sees), each run by the
real agent loop headless in its own fresh temp git repo with a step limit, scored by the task's
hidden check. Building a task, the headless agent, its turns and the verdict are tasks'
(build_task, task_agent, drive, resolved), shared with `train rollouts`.

Trade-offs and numbers:
- Tasks: task i of family k (k = its index in tasks.FAMILIES) has seed
  EVAL_SEED0 + --seed + i * FAMILY_SLOTS + k (tasks.eval_seed), so with --seed 0 they are train
  synth's eval_tasks.jsonl, and a family's tasks depend neither on which other families run nor
  on how many exist. Jobs interleave the families, so --limit keeps a mix. --split train draws
  seed --seed + i * FAMILY_SLOTS + k with training names and phrasings instead (heldout=False):
  the split for choosing settings, never for reporting; --split real / real-train are the same
  two on real code (tasks.SPLITS; add_parameter has no real tasks, fix_bug_across only real
  ones). Each task is built under a base named by a hash of its task id (`task_base`: the path is
  in the system prompt the model reads, so a random one made greedy runs differ), never the
  shared /tmp/nanocode-synth; a base another live run holds gets a suffix, so parallel runs
  cannot collide; it is removed after scoring.
- Headless as `nanocode -p`: Agent.run_turn with nobody to approve, mode auto (Edit and Bash run,
  destructive commands are asked about and so rejected), a Policy with no settings files (the
  user's own settings never change a score), no undo snapshots. user_rejects runs in mode ask
  (Edit/Bash are refused, as the user does in that family); when the turn ends refused, the
  task's follow-up is sent as a second turn. --max-steps counts tool calls per turn. Each run
  checks that the agent's system prompt equals task.system (train/inference identity).
- Scoring and metrics: evals/agent_score.py (the hidden check on the final state, tampering,
  the dense metrics, audits of the transcript, the summary's groups and the table).
- Parallel across tasks: --workers spawned processes (spawn, since jax is threaded), each loading
  the engine once; --workers 1 runs in-process. The oracle takes ~0.1 s (answer-only families) to
  ~3 s (those that run pytest twice) per task on one core, most of it pytest: 5 tasks per family
  (55) take 78 s with the oracle and 18 s doing nothing, 2 workers on a shared 2-core box.
- Baselines (no model): --policy oracle replays task.rollout() and must resolve 100%; --policy
  nothing answers "" with no tool calls and must resolve 0%.
- --best-of N (agent/loop/best_of.py): N rollouts per task, each in its own copy of the task's project
  (rollout 0 at --temperature with the task seed, the others at --best-of-temperature with seed +
  i), the verifier picks one (the project's tests for a change, agreement for a question; never
  the hidden check; a rollout that tampered with the tests is never picked), and the hidden check
  scores the pick in its copy (rollout 0 when every rollout tampered, so nothing was picked). The record's usual keys
  describe the pick; `at_1` holds the same metrics for rollout 0 (pass@1) and `best_of` every
  rollout's summary. Summary groups then add resolved_at_1 and pass_at_1_rate beside resolve_rate
  (best-of-N). Each check runs pytest again in the copy, so a task costs N rollouts + N verifier
  runs + 2 checks. The system prompt check compares with task.system at the copy's path.
- --no-ground, --retries, --copy-bias, --no-whole-names, --no-loop-guard, --no-question-guard
  set the agent's settings (agent/settings.py: grounded grammar, resampling of failed calls, copy
  bias, whole names in Grep patterns and backticked prose, the loop mask, a question's Edit
  asking); every setting is recorded in the summary, so paired runs are one flag apart.
A server as the model (--base-url URL [--model NAME]): the same tasks, checks, metrics and
result JSON for any OpenAI-compatible server (vLLM, llama.cpp, Ollama, `nanocode serve`, a
vendor's API), so a server, the default model and a checkpoint of one's own compare side by side
(`evals compare`). The agent of each task runs on a RemoteSampler (agent/samplers/remote.py, its key
handling unchanged: $NANOCODE_API_KEY), made once per worker by agent/model.load_sampler with the
model the parent found (--model, else the first the server lists), forked per run. The server is
asked for its models before any task runs: a bad URL is exit status 2, a server that cannot be
reached or lacks the model exit status 6 (the model server failed, as `nanocode -p --base-url`
says it), each a one-line error. The flags that set our engine (--step, --no-ground,
--no-whole-names, --no-loop-guard, --copy-bias) are a usage error with --base-url (exit 2): a
server samples its own way (agent/samplers/remote.py checks loops and calls after the fact). The summary
has the keys of a checkpoint run: model "<url> <model>", base_url, checkpoint and step None, and
None for the engine-only settings (ENGINE_ONLY). A turn the server failed (stop reason
model_error) scores as unresolved, and the run warns with their count.

A checkpoint's model loads jax and orbax (~3.5 s): nanocode.checkpoint is imported inside model_under_test
for it, so a server (--base-url) and the baselines run without them, in every worker process.

Checks (every policy's: the project as it was left) run model-written code, so they run through
tools/checks.py: in the OS sandbox, or where none starts only with --unsandboxed (else exit
status 2, one line); the summary records "unsandboxed".

Outputs (under $NANOCODE_HOME/evals/<model tag>/, `reference/` for the baselines, or --out):
agent_step<N>.json (agent_server.json under evals/<the server's model name, sanitized>/ with
--base-url; agent_oracle.json / agent_nothing.json; agent_<split>_step<N>.json for the
splits other than eval, so one --out holds the generated and the real suite) summary, the .jsonl of
per-task records beside it and <name>_transcripts/<task id>.jsonl (one line: {"messages", "meta"},
the session file format; with --best-of the pick's). Runs of one step that differ only in flags
(--best-of, --no-ground ...) write the same names: give each its own --out.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from agent.loop.best_of import BestOfOptions, best_of
from agent.model import AgentOptions, PoolModel, load_sampler
from agent.run_options import COMMANDS, FLAGS, default, settings
from agent.samplers.remote import base_url_error
from evals.agent_score import audit, oracle_calls, print_table, score, summarize
from evals.codegen import ModelError, out_dir, resolve_model, write_results
from evals.copying import copy_report, project_symbols
from tasks import (
    EVAL_ONLY_FAMILIES, FAMILIES, SPLITS, TRAIN_FAMILIES, WORLD_FAMILIES, build_task, drive, eval_seed,
    oracle_first_call, setup_env, task_agent)
from tools.checks import gate_or_exit
from tools.sandbox import bash_sandbox, unattended_warning

# SamplerSettings' fields only our engine applies (a server samples its own way): None in a
# --base-url run's summary
ENGINE_ONLY = ("top_k", "constrain", "ground", "names", "loop_guard", "copy_bias")

_worker = PoolModel()  # the worker's model, loaded once per process by _init


# ---- tasks ------------------------------------------------------------------------------------

def task_jobs(families: list[str], per_family: int, seed: int = 0, limit: int | None = None,
              split: str = "eval"):
    """[(family, task seed)], the families interleaved; seeds as the docstring says."""
    slots = list(FAMILIES)
    jobs = [(f, eval_seed(i, slots.index(f), seed, SPLITS[split][1]))
            for i in range(per_family) for f in families]
    return jobs[:limit] if limit is not None else jobs


# ---- running one task ------------------------------------------------------------------------------

def _init(model: str | None, step: int | None, server=None) -> None:
    """Per worker: the environment the tools expect, and the model (agent/model.PoolModel): the
    engine of checkpoint `model` at `step` (policy model), or with `server` (AgentOptions naming
    base_url and the model) a RemoteSampler on that server, or none (oracle policies)."""
    global _worker
    setup_env()
    _worker = PoolModel.load(model, step, server)


def make_agent(task, opts: dict, root: str, temperature: float, seed: int):
    """The headless Agent of one run of `task` in `root` (the task's project or a copy of it):
    opts' settings at this temperature and seed, on the worker's server (--base-url) or engine."""
    sampling = replace(opts["sampling"], temperature=temperature, seed=seed)
    return task_agent(_worker.sampler(root, sampling), task, root, opts["turn"])


@dataclass
class Run:
    """What a policy did on a task: the transcript, the final answer, the calls ({"name", "args",
    "result"}), each turn's stop reason, the folder its project ended in, and fields the record
    adds (a best-of run's `at_1` and `best_of`)."""
    messages: list[dict]
    meta: dict
    answer: str
    calls: list[dict]
    stops: list[str]
    root: str
    extra: dict = field(default_factory=dict)


def run_model(task, opts: dict) -> Run:
    """The real loop, headless."""
    agent = make_agent(task, opts, task.root, opts["sampling"].temperature, task.seed)
    turns = drive(agent, task)
    g = getattr(agent.sampler, "grounding", None)  # a remote sampler has none
    extra = {"grounding_notes": list(g.notes)} if g is not None and g.notes else {}
    return Run(agent.messages, agent.meta, turns[-1].answer, [c for t in turns for c in t.tool_calls],
               [t.stop_reason for t in turns], task.root, extra)


def run_best_of(task, opts: dict, ref: dict | None, workdir: str) -> Run:
    """--best-of, copies under `workdir`: the pick's run (root: its copy), with `at_1` (rollout 0
    scored in its copy) and `best_of` as extra fields."""
    best = BestOfOptions(opts["best_of"], seed=task.seed, temperature=opts["sampling"].temperature,
                         sample_temperature=opts["best_of_temperature"], apply=False,
                         tests_allowed=task.tests_allowed, tests_view=task.tests_view)
    res = best_of(lambda root, t, s: make_agent(task, opts, root, t, s), task.root, task.prompt, best,
                  drive=lambda agent, _: drive(agent, task), workdir=workdir)
    r0 = res.rollouts[0]
    pick = res.rollouts[res.pick] if res.pick is not None else r0  # every rollout tampered
    calls = lambda r: [c for t in r.turns for c in t.tool_calls]  # noqa: E731
    at_1 = score(task, r0.result.answer, calls(r0), ref, r0.root)
    del at_1["oracle_first_call"]
    return Run(pick.messages, {**pick.meta, "best_of": {"n": opts["best_of"], "pick": res.pick}},
               pick.result.answer, calls(pick), [t.stop_reason for t in pick.turns], pick.root,
               {"at_1": {**at_1, "stop_reasons": [t.stop_reason for t in r0.turns]},
                "best_of": res.to_dict()})


def task_base(tid: str) -> str:
    """A fresh directory $TMPDIR/nanocode-evals-agent-<hash of the task id>: the same path in
    every run, since the project's path is in the system prompt (a random one made greedy runs
    differ; a hash says nothing of the task's family). One that a live run holds gets `.2`,
    `.3` ...; one a dead run left is removed and reused."""
    name = os.path.join(tempfile.gettempdir(), "nanocode-evals-agent-" + hashlib.sha1(tid.encode()).hexdigest()[:8])
    for k in range(1, 1000):
        base = name if k == 1 else f"{name}.{k}"  # mkdir never follows a planted link
        try:
            os.mkdir(base)
        except FileExistsError:
            if not _left_behind(base):
                continue
            shutil.rmtree(base, ignore_errors=True)
            try:
                os.mkdir(base)
            except FileExistsError:  # another run took it meanwhile
                continue
        with open(os.path.join(base, ".pid"), "w") as f:  # beside the project, not in it
            f.write(str(os.getpid()))
        return os.path.realpath(base)
    raise RuntimeError(f"no free task directory for {tid}: {name} .. {name}.999 are all held")


def _left_behind(base: str) -> bool:
    """Whether no live run holds `base`: its pid file names a process that is gone, or it has
    none and is over a minute old (a run writes its pid file right after the mkdir)."""
    try:
        with open(os.path.join(base, ".pid")) as f:
            os.kill(int(f.read()), 0)
        return False
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        try:
            return time.time() - os.stat(base).st_mtime > 60
        except OSError:
            return False


def run_task(job: tuple) -> dict:
    """One task end to end in a fresh temp dir: build, run the policy, score, save the transcript."""
    _worker.check()
    family, seed, policy, opts, transcripts = job
    split = opts.get("split", "eval")
    world, heldout = SPLITS[split]
    tid = f"{split}-{family}-{seed}"
    rec = {"id": tid, "family": family, "seed": seed}
    base = task_base(tid)
    t0 = time.perf_counter()
    try:
        task = build_task(family, seed, heldout, base, world)
        system, ref = task.system, oracle_first_call(task)
        symbols = project_symbols(task.root)  # before the run: a name the model creates is no copy
        rec.update(prompt=task.prompt, check=task.desc)
        meta = {"cwd": task.root}
        if policy == "oracle":
            messages = task.rollout()["messages"]
            run = Run(messages, meta, messages[-1]["content"], oracle_calls(messages), ["done"], task.root)
        elif policy == "nothing":
            messages = [{"role": "system", "content": system}, {"role": "user", "content": task.prompt},
                        {"role": "assistant", "content": ""}]
            run = Run(messages, meta, "", [], ["done"], task.root)
        elif opts.get("best_of", 1) > 1:
            run = run_best_of(task, opts, ref, os.path.join(base, "best_of"))
        else:
            run = run_model(task, opts)
        if policy == "model":
            rec.update(audit(task, run.messages, run.calls, run.root))
        rec["copy"] = copy_report(task.prompt, run.messages, symbols)
        rec.update(score(task, run.answer, run.calls, ref, run.root), answer=run.answer,
                   stop_reasons=run.stops,
                   system_prompt_ok=run.messages[0]["content"] == system.replace(task.root, run.root),
                   **run.extra)
        with open(Path(transcripts) / f"{tid}.jsonl", "w", encoding="utf-8") as f:
            f.write(json.dumps({"messages": run.messages, "meta": {**run.meta, "task": tid, "policy": policy}},
                               ensure_ascii=False) + "\n")
    except Exception as e:  # noqa: BLE001 - one broken task must not end the run; it is reported
        rec.update(resolved=False, steps=0, valid_calls=0, edit_calls=0, edits_applied=0,
                   first_call_correct=False, tampered=[], error=f"{type(e).__name__}: {e}".splitlines()[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


def run_all(jobs: list[tuple], workers: int, model: str | None, step: int | None, on_done,
            server=None) -> list[dict]:
    """Run the jobs in `workers` spawned processes (1: in this one), each _init(model, step,
    server); results in job order."""
    if workers <= 1:
        _init(model, step, server)
        out = []
        try:
            for job in jobs:
                out.append(run_task(job))
                on_done(out[-1])
        finally:
            _init(None, None)  # the model goes with the run: a later run in this process starts clean
        return out
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init,
                             initargs=(model, step, server)) as pool:
        futures = {pool.submit(run_task, job): i for i, job in enumerate(jobs)}
        out = [None] * len(jobs)
        for fut in as_completed(futures):
            out[futures[fut]] = fut.result()
            on_done(out[futures[fut]])
    return out


# ---- command ------------------------------------------------------------------------------------

def split_suffix(split: str) -> str:
    """The part of a result's name that tells its split: none for the default held-out suite."""
    return "" if split == "eval" else "_" + split.replace("-", "_")


def usage_problem(args) -> str | None:
    """What is wrong with the numbers and the model flags, in one line, or None."""
    if args.per_family < 1 or args.max_steps < 1 or args.max_tokens < 1 or args.best_of < 1:
        return "--per-family, --max-steps, --max-tokens and --best-of must be >= 1"
    if args.retries < 0 or args.best_of_temperature <= 0:
        return "--retries must be >= 0 and --best-of-temperature > 0"
    if args.best_of > 1 and args.policy != "model":
        return "--best-of needs --policy model (the baselines are deterministic)"
    if args.context is not None and (args.base_url is None or args.context < 64):
        return "--context goes with --base-url and is at least 64 tokens"
    if args.base_url is None:
        return None
    engine_flags = ["--step"] * (args.step is not None) + [
        FLAGS[f].name for f in ENGINE_ONLY if f in COMMANDS["evals agent"]
        and getattr(args, f) != default("evals agent", f)]
    if args.policy != "model":
        return f"--base-url goes with --policy model, not {args.policy}"
    if engine_flags:
        return (f"{', '.join(engine_flags)} set our engine (a checkpoint's step, its grammar, "
                "its sampling); a server behind --base-url samples its own way: drop them, "
                "or score a checkpoint with --model")
    return base_url_error(args.base_url)


def task_families(args) -> tuple[list[str], str | None]:
    """The families to run (--families, else all of the split's world) and what is wrong with
    --families (None: nothing)."""
    trained, eval_only = list(TRAIN_FAMILIES), list(EVAL_ONLY_FAMILIES)
    world = SPLITS[args.split][0]
    known = [f for f in trained + eval_only if f in WORLD_FAMILIES[world]]
    families = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else known
    bad = [f for f in families if f not in known]
    if not bad:
        return families, None
    return families, (f"unknown task family {', '.join(bad)} in the {world} world (trained: "
                      f"{', '.join(f for f in trained if f in known)}; eval-only: "
                      f"{', '.join(f for f in eval_only if f in known)})")


def model_under_test(args, sampling, turn):
    """What runs the tasks: (the summary's fields on it, checkpoint, step, server options, results
    folder, results name); a server is asked now, so a wrong URL or model fails here in one line.
    Raises ModelError, whose code is the exit status."""
    info: dict = {}
    model = step = server = None
    chosen = {**asdict(sampling), **asdict(turn)}
    del chosen["seed"]  # each task samples with its own seed; "seed" is the tasks' (below)
    if args.base_url is not None:
        remote, label = load_sampler(AgentOptions(model=args.model, base_url=args.base_url,
                                                  context=args.context), None, None)
        server = AgentOptions(model=remote.model, base_url=args.base_url, context=args.context)
        info.update(model=label, base_url=args.base_url, checkpoint=None, step=None,
                    **{**chosen, **dict.fromkeys(ENGINE_ONLY)})
        tag = re.sub(r"[^A-Za-z0-9._-]+", "_", remote.model).strip("._") or "server"
        dest, name = out_dir(args.out, tag), f"agent{split_suffix(args.split)}_server"
    elif args.policy == "model":  # no --model: the default model, as `nanocode` runs it
        from nanocode.checkpoint import latest_step
        try:
            ckpt, tag = resolve_model(args.model)
        except ModelError as e:
            raise ModelError(str(e), 2) from e
        step = args.step if args.step is not None else latest_step(ckpt)
        if step is None:
            raise ModelError(f"no complete checkpoint in {ckpt}; train one with `train base` and `train sft`", 2)
        model = str(ckpt)
        info.update(model=tag, base_url=None, checkpoint=model, step=int(step), **chosen)
        dest, name = out_dir(args.out, tag), f"agent{split_suffix(args.split)}_step{step}"
    else:
        info["model"] = args.policy
        dest, name = out_dir(args.out, "reference"), f"agent{split_suffix(args.split)}_{args.policy}"
    return info, model, step, server, dest, name


def main(args) -> int:
    t0 = time.perf_counter()
    families, problem = task_families(args)
    if problem is None:
        problem = usage_problem(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # every policy's check runs the project as it was left (a server's edits with --base-url)
    unsandboxed = gate_or_exit("evals agent", args.unsandboxed)
    sampling, turn = settings(args, "evals agent")
    try:
        fields, model, step, server, dest, name = model_under_test(args, sampling, turn)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code  # 6: the model server failed; 2: no such model or checkpoint
    info = {"policy": args.policy, "unsandboxed": unsandboxed, **fields}
    if args.policy == "model":  # the baselines run their calls directly; the model's need approval
        info["best_of"] = args.best_of
        if args.best_of > 1:
            info["best_of_temperature"] = args.best_of_temperature
        info["sandbox_found"] = bash_sandbox()["name"]  # ("sandbox": the setting); compare reads it
        if warning := unattended_warning():
            print(f"warning: {warning}", file=sys.stderr)
    jobs = task_jobs(families, args.per_family, args.seed, args.limit, args.split)
    transcripts = dest / f"{name}_transcripts"
    transcripts.mkdir(parents=True, exist_ok=True)
    opts = {"sampling": sampling, "turn": turn, "best_of": args.best_of,
            "best_of_temperature": args.best_of_temperature, "split": args.split}
    workers = max(1, min(args.workers or min(2, os.cpu_count() or 1), len(jobs)))
    bar = tqdm(total=len(jobs), desc=f"agent {args.policy}", unit="task", disable=args.quiet,
               file=sys.stderr, dynamic_ncols=True)
    solved = [0]

    def on_done(rec):
        solved[0] += rec["resolved"]
        bar.update()
        bar.set_postfix(resolved=f"{solved[0]}/{bar.n}")
    try:
        records = run_all([(f, s, args.policy, opts, str(transcripts)) for f, s in jobs], workers,
                          model, step, on_done, server)
    except ModelError as e:  # a worker could not load the checkpoint, or reach the server
        print(f"error: {e}", file=sys.stderr)
        return 6 if server is not None else 2  # (its code does not cross a process boundary)
    finally:
        bar.close()
    summary = {"eval": "agent", **info, **summarize(records), "per_family": args.per_family,
               "limit": args.limit, "seed": args.seed, "split": args.split, "workers": workers,
               "task_families": families, "seconds": round(time.perf_counter() - t0, 1)}
    write_results(dest, name, records, summary)
    print_table(summary)
    for r in records:
        if "error" in r:
            print(f"warning: {r['id']} did not run: {r['error']}", file=sys.stderr)
    if failed := summary["overall"]["stop_reasons"].get("model_error"):
        print(f"warning: {failed} turn(s) ended because the model server failed (stop reason "
              "model_error) and count as unresolved; check the server and run again",
              file=sys.stderr)
    if summary["system_prompt_mismatches"]:
        print(f"warning: {summary['system_prompt_mismatches']} task(s) ran with a system prompt "
              "other than the task's (train/inference mismatch)", file=sys.stderr)
    print(f"{len(records)} tasks, {workers} worker(s), {summary['seconds']} s; "
          f"wrote {dest / (name + '.json')}")
    return 0
