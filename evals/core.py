"""`evals core`: the DCLM CORE metric (22 in-context tasks) as nanochat computes it, in JAX.

The eval bundle is a directory: core.yaml (`icl_tasks`: label, dataset_uri, num_fewshot,
icl_task_type, continuation_delimiter), eval_data/<dataset_uri> (JSONL) and eval_meta_data.csv
(`Eval Task`, `Random baseline` in percent). Each task's rows are shuffled with Random(1337) and
cut to --limit; example i gets num_fewshot others drawn with Random(1234 + i). Scoring uses the
mean loss of the continuation tokens: multiple_choice (one context, several continuations) and
schema (several contexts, one continuation) pick the lowest-loss row; language_modeling is right
only when the greedy prediction reproduces every continuation token. Accuracy per task, centered
(acc - 0.01 b) / (1 - 0.01 b) against its random baseline b, CORE = mean centered accuracy.
Rows longer than the model's context keep their last sequence_len tokens, as nanochat does.

Trade-offs and numbers:
- One deviation from nanochat: few-shot examples come from the task's whole shuffled pool, not
  from the --limit cut, so a limited run scores exactly the first N examples of a full run (and a
  tiny task still has shots to draw). Without --limit the prompts are nanochat's.
- Rows from every task are scored together: grouped by length into power-of-two buckets (>= 32,
  <= sequence_len; at most 2x padding), --batch-tokens per batch (default 4096: 512 MB of fp32
  logits at a 32k vocab), a partial last batch padded to a power of two. So one compile per
  (length bucket, batch rows) pair actually used, whatever the prompt lengths; nanochat instead
  runs one forward per example.
- Offline only the tasks present in a bundle can run. A result over fewer than the 22 CORE tasks is
  written as "CORE-subset (k/22 tasks)" under the key core_subset, never as core; the packaged
  evals/data/core_tiny bundle (`--bundle tiny`, hand-written examples for 6 of the labels) is such
  a subset and only checks the pipeline.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
import sys
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import yaml
from tqdm import tqdm

from evals.codegen import ModelError, out_dir, write_results
from nanocode.common import enable_compilation_cache, nanocode_home
from nanocode.gpt import forward
from nanocode.load import load_model

EVAL_BUNDLE_URL = "https://karpathy-public.s3.us-west-2.amazonaws.com/eval_bundle.zip"
TINY_BUNDLE = Path(__file__).parent / "data" / "core_tiny"
TASK_TYPES = ("multiple_choice", "schema", "language_modeling")
CORE_TASKS = (  # the 22 labels of DCLM's CORE ("low variance") aggregate
    "hellaswag_zeroshot", "jeopardy", "bigbench_qa_wikidata", "arc_easy", "arc_challenge", "copa",
    "commonsense_qa", "piqa", "openbook_qa", "lambada_openai", "hellaswag", "winograd",
    "winogrande", "bigbench_dyck_languages", "agi_eval_lsat_ar", "bigbench_cs_algorithms",
    "bigbench_operators", "bigbench_repeat_copy_logic", "squad", "coqa", "boolq",
    "bigbench_language_identification")
SHUFFLE_SEED, FEWSHOT_SEED = 1337, 1234


class BundleError(ValueError):
    """The eval bundle is missing or malformed; the message names the file and the fix."""


@dataclass
class IclTask:
    """One in-context task of the bundle (a core.yaml `icl_tasks` entry and its baseline)."""
    label: str
    task_type: str
    dataset_uri: str
    num_fewshot: int
    delimiter: str
    baseline: float  # random-guess accuracy in percent


@dataclass
class Example:
    task: int  # index into the task list
    idx: int  # position in the task's shuffled data
    gold: int | None  # None for language_modeling
    rows: list[int] = field(default_factory=list)  # indices into the flat row list


# ---- the bundle -------------------------------------------------------------------------------
def resolve_bundle(spec: str | None, quiet: bool = False) -> Path:
    """--bundle DIR | tiny | (none: $NANOCODE_HOME/eval_bundle, downloaded when missing)."""
    if spec == "tiny":
        return TINY_BUNDLE
    if spec:
        p = Path(spec).expanduser()
        for d in (p, p / "eval_bundle"):
            if (d / "core.yaml").is_file():
                return d
        raise BundleError(f"no core.yaml in {p}; pass --bundle DIR holding core.yaml, "
                          "eval_meta_data.csv and eval_data/ (or --bundle tiny for the test subset)")
    dest = nanocode_home() / "eval_bundle"
    if not (dest / "core.yaml").is_file():
        download_bundle(dest, quiet)
    return dest


def download_bundle(dest: Path, quiet: bool = False) -> None:
    """Fetch nanochat's eval_bundle.zip (~25 MB) and unpack its eval_bundle/ folder to dest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"downloading the CORE eval bundle from {EVAL_BUNDLE_URL} to {dest}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        archive = Path(tmp) / "eval_bundle.zip"
        try:
            with urllib.request.urlopen(EVAL_BUNDLE_URL, timeout=60) as r, open(archive, "wb") as f:
                shutil.copyfileobj(r, f)
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        except (OSError, zipfile.BadZipFile) as e:
            raise BundleError(f"no CORE eval bundle at {dest} and downloading {EVAL_BUNDLE_URL} "
                              f"failed ({e}); offline, pass --bundle DIR (a copy of eval_bundle/), "
                              "or --bundle tiny for the packaged test subset") from None
        found = [p.parent for p in Path(tmp).rglob("core.yaml")]
        if not found:
            raise BundleError(f"{EVAL_BUNDLE_URL} holds no core.yaml; pass --bundle DIR")
        shutil.move(str(found[0]), str(dest))


def load_tasks(bundle: Path) -> list[IclTask]:
    try:
        config = yaml.safe_load((bundle / "core.yaml").read_text(encoding="utf-8"))
        with open(bundle / "eval_meta_data.csv", encoding="utf-8", newline="") as f:
            baselines = {r["Eval Task"]: float(r["Random baseline"]) for r in csv.DictReader(f)}
    except (OSError, yaml.YAMLError, KeyError, ValueError) as e:
        raise BundleError(f"cannot read the eval bundle in {bundle} ({type(e).__name__}: {e}); it "
                          "needs core.yaml (icl_tasks) and eval_meta_data.csv (Eval Task, "
                          "Random baseline)") from None
    tasks = []
    for t in (config or {}).get("icl_tasks") or []:
        label, kind, uri = t.get("label"), t.get("icl_task_type"), t.get("dataset_uri")
        if not label or not uri:
            raise BundleError(f"{bundle}/core.yaml: every task needs a label and a dataset_uri ({t})")
        if kind not in TASK_TYPES:
            raise BundleError(f"{bundle}/core.yaml: task {label!r} has icl_task_type {kind!r}; "
                              f"expected one of {', '.join(TASK_TYPES)}")
        if label not in baselines:
            raise BundleError(f"{bundle}/eval_meta_data.csv has no Random baseline for {label!r}")
        shots = t.get("num_fewshot", 0)
        tasks.append(IclTask(label, kind, uri, int(shots[0] if isinstance(shots, list) else shots),
                             t.get("continuation_delimiter", " "), baselines[label]))
    if not tasks:
        raise BundleError(f"{bundle}/core.yaml lists no icl_tasks")
    return tasks


def load_data(bundle: Path, task: IclTask) -> list[dict]:
    """The task's rows, shuffled with Random(1337) as nanochat does."""
    path = bundle / "eval_data" / task.dataset_uri
    try:
        data = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise BundleError(f"cannot read {path} for task {task.label} ({e})") from None
    random.Random(SHUFFLE_SEED).shuffle(data)
    return data


# ---- prompts ----------------------------------------------------------------------------------
def render(task: IclTask, item: dict, shots: list[dict]) -> list[str]:
    """nanochat's Jinja templates spelled out: each shot then a blank line, then the item.
    multiple_choice: one prompt per choice; schema: one per context option; language_modeling:
    [prompt without the continuation (stripped), prompt with it]."""
    d = task.delimiter
    if task.task_type == "multiple_choice":
        head = "".join(f"{s['query']}{d}{s['choices'][s['gold']]}\n\n" for s in shots)
        return [f"{head}{item['query']}{d}{c}" for c in item["choices"]]
    if task.task_type == "schema":
        head = "".join(f"{s['context_options'][s['gold']]}{d}{s['continuation']}\n\n" for s in shots)
        return [f"{head}{c}{d}{item['continuation']}" for c in item["context_options"]]
    head = "".join(f"{s['context'].strip()}{d}{s['continuation']}\n\n" for s in shots)
    prompt = f"{head}{item['context'].strip()}{d}"
    return [prompt.strip(), prompt + item["continuation"]]


def common_length(seqs: list[list[int]], from_end: bool = False) -> int:
    """Length of the prefix (or suffix) all token sequences share."""
    n = min(len(s) for s in seqs)
    for i in range(n):
        j = -1 - i if from_end else i
        if any(s[j] != seqs[0][j] for s in seqs):
            return i
    return n


def spans(task_type: str, toks: list[list[int]]) -> list[tuple[list[int], int, int]]:
    """(tokens, start, end) rows: tokens[start:end] is the scored continuation."""
    if task_type == "multiple_choice":  # shared context, continuations differ
        start = common_length(toks)
        return [(t, start, len(t)) for t in toks]
    if task_type == "schema":  # contexts differ, shared continuation
        k = common_length(toks, from_end=True)
        return [(t, len(t) - k, len(t)) for t in toks]
    without, with_ = toks  # language_modeling: only the prompt with the continuation is run
    return [(with_, min(common_length([without, with_]), len(with_) - 1), len(with_))]


def fewshot_indices(i: int, n: int, k: int) -> list[int]:
    """nanochat's Random(1234 + i).sample(all indices but i, k), without building that list."""
    return [j + (j >= i) for j in random.Random(FEWSHOT_SEED + i).sample(range(n - 1), min(k, n - 1))]


def build(tasks: list[IclTask], datas: list[list[dict]], tok, limit: int | None, max_len: int):
    """-> (examples, rows of (int32 tokens, start, end)). Rows longer than max_len keep their
    last max_len tokens. int32 arrays, not lists: the full bundle is tens of millions of tokens
    (10-shot hellaswag alone is 40k rows of ~1k) and a list spends ~36 bytes per token."""
    examples, texts, kinds = [], [], []
    for ti, (task, data) in enumerate(zip(tasks, datas)):
        for i in range(min(len(data), limit) if limit is not None else len(data)):
            shots = fewshot_indices(i, len(data), task.num_fewshot)
            prompts = render(task, data[i], [data[j] for j in shots])
            gold = None if task.task_type == "language_modeling" else int(data[i]["gold"])
            examples.append(Example(ti, i, gold))
            texts.append(prompts)
            kinds.append(task.task_type)
    flat = tok.encode_batch([p for ps in texts for p in ps])
    rows, at = [], 0
    for ex, prompts, kind in zip(examples, texts, kinds):
        toks = [[tok.bos_id] + t for t in flat[at:at + len(prompts)]]
        at += len(prompts)
        for t, s, e in spans(kind, toks):
            cut = max(0, len(t) - max_len)
            ex.rows.append(len(rows))
            rows.append((np.asarray(t[cut:], np.int32), max(1, s - cut), e - cut))
    return examples, rows


# ---- scoring ----------------------------------------------------------------------------------
def make_row_scorer(params, cfg):
    """(ids (B, T), starts (B,), ends (B,)) -> (mean loss of tokens start..end-1, whether greedy
    decoding predicts all of them), as numpy. One compile per (B, T)."""
    @jax.jit
    def score(params, ids, starts, ends):
        logits, _ = forward(params, cfg, ids)  # (B, T, V) fp32
        targets = jnp.roll(ids, -1, axis=1)  # position t predicts token t + 1
        nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
        t = jnp.arange(ids.shape[1])[None]
        span = (t >= starts[:, None] - 1) & (t < ends[:, None] - 1)
        mean = jnp.where(span, nll, 0.0).sum(1) / jnp.maximum(span.sum(1), 1)
        match = jnp.all(~span | (jnp.argmax(logits, -1) == targets), axis=1)
        return mean, match

    def run(ids, starts, ends):
        mean, match = score(params, ids, starts, ends)
        return np.asarray(mean), np.asarray(match)

    return run


def length_bucket(n: int, max_len: int) -> int:
    b = 32
    while b < n:
        b *= 2
    return min(b, max_len)


def score_rows(rows, scorer, pad_id: int, max_len: int, batch_tokens: int, bar=None):
    """All rows through scorer in length-bucketed batches -> (mean losses, greedy matches).
    bar (tqdm) advances by real tokens, so its ETA holds while batches get longer."""
    losses, matches = np.zeros(len(rows), np.float64), np.zeros(len(rows), bool)
    buckets: dict[int, list[int]] = {}
    for i, (t, _, _) in enumerate(rows):
        buckets.setdefault(length_bucket(len(t), max_len), []).append(i)
    for T, members in sorted(buckets.items()):
        full = 1 << max(0, (max(1, batch_tokens // T)).bit_length() - 1)  # rows per batch, 2^k
        for at in range(0, len(members), full):
            part = members[at:at + full]
            B = min(full, 1 << (len(part) - 1).bit_length())
            ids = np.full((B, T), pad_id, np.int32)
            se = np.tile(np.array([[1, 2]], np.int32), (B, 1))  # padding rows: a dummy span
            for r, i in enumerate(part):
                t, s, e = rows[i]
                ids[r, :len(t)], se[r] = t, (s, e)
            mean, match = scorer(ids, se[:, 0], se[:, 1])
            losses[part], matches[part] = mean[:len(part)], match[:len(part)]
            if bar is not None:
                bar.update(sum(len(rows[i][0]) for i in part))
    return losses, matches


def judge(task_type: str, gold, losses, matches) -> tuple[int | None, bool]:
    """(predicted index, correct) of one example from its rows' mean losses / greedy matches.
    Ties go to the first row (nanochat's list.index(min))."""
    if task_type == "language_modeling":
        return None, bool(matches[0])
    losses = [float(x) for x in losses]
    pred = losses.index(min(losses))
    return pred, pred == gold


def centered(accuracy: float, baseline_pct: float) -> float:
    """(acc - b) / (1 - b) with b the random baseline as a fraction: 0 = chance, 1 = perfect."""
    b = 0.01 * baseline_pct
    return (accuracy - b) / (1.0 - b)


def metric_name(labels, limit: int | None = None) -> str:
    """"CORE" only over exactly the 22 tasks; anything else is "CORE-subset (k/22 tasks)"."""
    k = len(set(labels) & set(CORE_TASKS))
    extra = len(set(labels) - set(CORE_TASKS))
    if k == len(CORE_TASKS) and not extra:
        name = "CORE"
    else:
        name = f"CORE-subset ({k}/{len(CORE_TASKS)} tasks" + (f" + {extra} others" if extra else "") + ")"
    return name + (f", first {limit} examples/task" if limit else "")


def summarize(tasks: list[IclTask], examples: list[Example], losses, matches):
    """-> (per-task results, per-example records, CORE value)."""
    per_task = {t.label: {"type": t.task_type, "num_fewshot": t.num_fewshot, "examples": 0,
                          "correct": 0, "random_baseline": t.baseline} for t in tasks}
    records = []
    for ex in examples:
        task = tasks[ex.task]
        pred, ok = judge(task.task_type, ex.gold, losses[ex.rows], matches[ex.rows])
        res = per_task[task.label]
        res["examples"] += 1
        res["correct"] += ok
        records.append({"task": task.label, "idx": ex.idx, "gold": ex.gold, "pred": pred,
                        "correct": ok, "losses": [round(float(x), 5) for x in losses[ex.rows]]})
    for res in per_task.values():
        res["accuracy"] = res["correct"] / max(res["examples"], 1)
        res["centered"] = centered(res["accuracy"], res["random_baseline"])
    core = sum(r["centered"] for r in per_task.values()) / len(per_task)
    return per_task, records, core


# ---- the command ------------------------------------------------------------------------------
def main(args) -> int:
    t0 = time.perf_counter()
    try:
        bundle = resolve_bundle(args.bundle, args.quiet)
        tasks = load_tasks(bundle)
        datas = [load_data(bundle, t) for t in tasks]
        enable_compilation_cache()
        params, cfg, tok, _, ckpt, tag, step = load_model(args.model, args.step)
    except (BundleError, ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    examples, rows = build(tasks, datas, tok, args.limit, cfg.sequence_len)
    bar = tqdm(total=sum(len(t) for t, _, _ in rows), desc=f"core ({len(rows)} sequences)",
               unit="tok", unit_scale=True, disable=args.quiet, file=sys.stderr, dynamic_ncols=True)
    losses, matches = score_rows(rows, make_row_scorer(params, cfg), tok.bos_id, cfg.sequence_len,
                                 args.batch_tokens, bar)
    bar.close()
    per_task, records, core = summarize(tasks, examples, losses, matches)
    name = metric_name(per_task, args.limit)
    full = not name.startswith("CORE-subset")
    summary = {"eval": "core", "model": tag, "checkpoint": str(ckpt), "step": int(step),
               "metric": name, ("core" if full else "core_subset"): core,
               "tasks_in_core": sum(label in CORE_TASKS for label in per_task),
               "missing": [label for label in CORE_TASKS if label not in per_task],
               "tasks": per_task, "bundle": str(bundle), "limit": args.limit,
               "sequences": len(rows), "batch_tokens": args.batch_tokens,
               "seconds": round(time.perf_counter() - t0, 1)}
    dest = out_dir(args.out, tag)
    path = write_results(dest, f"core_step{step}", records, summary)
    print(f"{'task':<34} {'type':<18} {'shots':>5} {'n':>6} {'accuracy':>9} {'centered':>9}")
    for label, r in per_task.items():
        print(f"{label:<34} {r['type']:<18} {r['num_fewshot']:>5} {r['examples']:>6} "
              f"{r['accuracy']:>9.4f} {r['centered']:>9.4f}")
    print(f"{name}: {core:.4f} ({tag} step {step}; {len(rows)} sequences, {summary['seconds']} s); "
          f"wrote {path}")
    return 0
