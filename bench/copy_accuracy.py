"""Copying names from the request, measured in two parts.

    python bench/copy_accuracy.py                       # both parts, defaults (about 1 minute)
    python bench/copy_accuracy.py --part tokenizer --names 3000 --train-mb 8
    python bench/copy_accuracy.py --part model --per-family 10 --turns [--world W] [--no-ground]

tokenizer: is a name the same token sequence wherever the agent writes it? Names are top-level
function and class names of the standard library with an inner `_` or a CamelCase hump (ast scan
of os.path.dirname(os.__file__), site-packages and tests left out), --names of them chosen by a
hash. Each is encoded inside the contexts of CONTEXTS (after a space, a backtick, a `"` of JSON
args, a `'` of a Python string, `/` and `.` of paths and modules, `(`, a line start); its token
sequence is the ids of the tokens that overlap its characters, so a token it shares with the
context (` parse`, `.par`) makes the sequence differ. Reported per tokenizer: the share of names
whose sequence is the same in every context, pairwise shares against the space and the backtick
contexts, the share whose tokens start and end on the name's boundaries in every context
(`aligned`), and bytes per token on held-out code and prose (the compression cost). Tokenizers:
the shipped one (trained on more and other text, so its compression is not strictly held out)
and, all trained by nanocode.tokenizer.train_tokenizer at the shipped vocabulary on the same
text (stdlib .py files and the docs `train data local` reads, train/shards.find_files order,
each file cut at 10,000 characters, --train-mb MB of each), every pattern of PATTERNS: the
GPT-4 split the shipped tokenizer uses and candidates where a word never absorbs the punctuation before
it. The held-out samples are the files that follow the training ones in that order.

model: the shipped model's replies on task prompts (tasks.build_task on `evals agent`'s task
seeds of the split that --world and --trained-names select; held-out names by default; --world
is passed as world=... only when given, and the families default to the world's), run by the
real headless agent (tasks.task_agent with an EngineSampler, as `evals agent` runs it; grounding
on unless --no-ground): its first step (thought and tool call, the tool runs) or, with --turns,
whole turns (tasks.drive, --max-steps calls). Each transcript is scored by
evals/copying.copy_report against project_symbols(task.root) before the run; the table gives,
per channel, the share of attempts at a requested name that are exact (evals/copying.py defines
exact, garbled and the shares), --show prints garbled attempts, and the last line sorts the
garbles by where they leave the name (garble_kind).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.run_options import add_options, settings  # noqa: E402
from agent.samplers.engine import EngineSampler  # noqa: E402
from evals.agent import task_jobs  # noqa: E402
from evals.copying import CHANNELS, channels, copy_report, project_symbols, summarize  # noqa: E402
from nanocode.checkpoint import load_tokenizer  # noqa: E402
from nanocode.common import enable_compilation_cache  # noqa: E402
from nanocode.load import load_engine  # noqa: E402
from nanocode.tokenizer import COMPOUND_SPLIT_PATTERN, CONTRACTION, SPLIT_PATTERN, train_tokenizer  # noqa: E402
from tasks import SPLITS, WORLD_FAMILIES, build_task, drive, setup_env, task_agent  # noqa: E402
from train.shards import default_sources, find_files  # noqa: E402

# A name's neighbours in what the agent reads and writes: (text before it, text after it).
CONTEXTS = {
    "space": ("let me read ", " first"),
    "backtick": ("let me read `", "` first"),
    "dquote": ('{"pattern": "', '"}'),
    "squote": ("key = '", "'"),
    "slash": ("src/", ".py"),
    "dot": ("import pkg.", "\n"),
    "paren": ("print(", ")"),
    "line_start": ("x = 1\n", " = 2\n"),
}

# Candidate split patterns: GPT-4's (what the shipped tokenizer used) and ones where a word never
# absorbs the punctuation before it; compound_alone is COMPOUND_SPLIT_PATTERN. The contraction alternative
# needs a non-word character after it in the candidates, so `'stats'` is not `'s` + `tats`.
SPACES = r"|\s*[\r\n]|\s+(?!\S)|\s+"
PATTERNS = {
    # GPT-4's split: a word takes one non-letter before it (` parse`, `.par`, `_he`)
    "gpt4": SPLIT_PATTERN,
    # letters alone; a space, `_` and punctuation are their own pre-tokens
    "letters_alone": CONTRACTION + r"|\p{L}+|\p{N}{1,2}|[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+",
    # a word may take one space before it, never punctuation (same after `, ", /, ., (, a line start)
    "space_prefix": CONTRACTION + r"| ?\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*" + SPACES,
    # a whole identifier (letters, digits, `_`) is one pre-token; spaces and punctuation alone
    "identifier": CONTRACTION + r"|[\p{L}_][\p{L}\p{N}_]*|\p{N}{1,2}|[^\s\p{L}\p{N}_]++[\r\n]*|\s*[\r\n]|\s+",
    # a compound identifier is one pre-token with nothing before it; any other word is as in
    # space_prefix (takes one space, never punctuation), so prose compresses as there
    "compound_alone": COMPOUND_SPLIT_PATTERN,
}

DOC_CAP = 10_000  # characters per file, as `train tokenizer` caps a document
HELDOUT_CHARS = 1_000_000  # per source, for bytes per token
DEFAULT_MODEL = "nanocode/default_model/checkpoints"


# ---- part 1: the tokenizer ----------------------------------------------------------------------

def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def is_compound(name: str) -> bool:
    """COMPOUND's test: an inner `_` or a case hump (moving_average, AbaloneTracker, HTTPServer)."""
    return "_" in name.strip("_") or re.search(r"[a-z][A-Z]|[A-Z][A-Z][a-z]", name) is not None


def stdlib_names(limit: int) -> tuple[list[str], list[str]]:
    """Public (no leading `_`) top-level def/class names and module names of the stdlib, unique,
    chosen and ordered by a hash: (up to `limit` compound names, up to `limit` one-word lowercase
    names such as `dirname` or `shutil`)."""
    root = os.path.dirname(os.__file__)
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
    names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            names.add(f[:-3])
            try:
                tree = ast.parse(Path(dirpath, f).read_text("utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            names.update(node.name for node in tree.body
                         if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    names = sorted((n for n in names if not n.startswith("_")), key=_hash)
    compound = [n for n in names if is_compound(n)]
    words = [n for n in names if n.isalpha() and n.islower() and len(n) >= 3]
    return compound[:limit], words[:limit]


def _read(files, chars: int) -> list[str]:
    """Documents from (key, path) pairs, each cut at DOC_CAP, until `chars` characters."""
    out, total = [], 0
    for _, path in files:
        try:
            text = path.read_text("utf-8")[:DOC_CAP]
        except (OSError, UnicodeDecodeError):
            continue
        if text.strip():
            out.append(text)
            total += len(text)
        if total >= chars:
            break
    return out


def corpora(train_chars: int) -> dict[str, list[str]]:
    """train (code + text), heldout_code, heldout_text: the files after the training ones."""
    code = find_files([Path(sysconfig.get_paths()["stdlib"])], "code")
    text = find_files(default_sources("text"), "text")
    out = {}
    for kind, files in (("code", code), ("text", text)):
        docs = _read(files, train_chars + HELDOUT_CHARS)
        split, total = 0, 0
        while split < len(docs) and total < train_chars:
            total += len(docs[split])
            split += 1
        out[f"train_{kind}"], out[f"heldout_{kind}"] = docs[:split], docs[split:]
    return out


def name_tokens(tok, name: str, before: str, after: str) -> tuple[tuple[int, ...], bool]:
    """The ids of the tokens of before + name + after that overlap the name's bytes, and whether
    they start and end exactly on the name's boundaries."""
    ids = tok.encode(before + name + after)
    start = len(before.encode())
    end = start + len(name.encode())
    out, pos, aligned = [], 0, True
    for i in ids:
        n = len(tok.id_to_bytes(i))
        if pos < end and pos + n > start:
            out.append(i)
            aligned &= pos >= start and pos + n <= end
        pos += n
    return tuple(out), aligned


def consistency(tok, names: list[str]) -> dict:
    """Shares of names: the same sequence in every context, pairwise against the space and the
    backtick contexts, and aligned on the name's boundaries in every context; the mean tokens
    per name (backtick context)."""
    seqs = {c: [] for c in CONTEXTS}
    all_same = aligned = 0
    for name in names:
        row, ok = {}, True
        for c, (before, after) in CONTEXTS.items():
            row[c], on_bounds = name_tokens(tok, name, before, after)
            seqs[c].append(row[c])
            ok &= on_bounds
        all_same += len(set(row.values())) == 1
        aligned += ok
    n = len(names)
    pair = lambda a, b: round(sum(x == y for x, y in zip(seqs[a], seqs[b])) / n, 4)  # noqa: E731
    return {"all_contexts": round(all_same / n, 4), "aligned": round(aligned / n, 4),
            "tokens_per_name": round(sum(map(len, seqs["backtick"])) / n, 2),
            "vs_space": {c: pair("space", c) for c in CONTEXTS if c != "space"},
            "vs_backtick": {c: pair("backtick", c) for c in CONTEXTS if c != "backtick"}}


def bytes_per_token(tok, docs: list[str]) -> float:
    ids = tok.encode_batch(docs)
    return round(sum(len(d.encode()) for d in docs) / max(1, sum(map(len, ids))), 3)


def tokenizer_part(args) -> dict:
    t0 = time.time()
    compound, words = stdlib_names(args.names)
    data = corpora(int(args.train_mb * 1_000_000))
    train = data["train_code"] + data["train_text"]
    shipped = load_tokenizer(args.checkpoint)
    tokenizers = {"shipped": shipped}
    for label, pattern in PATTERNS.items():
        tokenizers[label] = train_tokenizer(train, shipped.vocab_size, pattern=pattern)
    print(f"tokenizer: {len(compound)} compound and {len(words)} one-word stdlib names, vocab "
          f"{shipped.vocab_size}, trained on {sum(map(len, train)) / 1e6:.1f}M chars ({len(train)} "
          f"files), held out {sum(map(len, data['heldout_code'])) / 1e6:.1f}M code + "
          f"{sum(map(len, data['heldout_text'])) / 1e6:.1f}M prose chars")
    print("compound names with the same tokens: `all` in every context, `aligned` no token shared "
          "with the context, sp~X / bt~X the space / backtick context against X")
    vs_bt = [c for c in CONTEXTS if c not in ("space", "backtick")]
    print(f"{'tokenizer':<14} {'code':>5} {'prose':>5} | {'all':>6} {'aligned':>7} {'sp~bt':>6} "
          + " ".join(f"{'bt~' + c[:5]:>8}" for c in vs_bt) + f" | {'tok/name':>8} | {'words all':>9} {'sp~bt':>6}")
    results = {}
    for label, tok in tokenizers.items():
        r = {"code_bytes_per_token": bytes_per_token(tok, data["heldout_code"]),
             "prose_bytes_per_token": bytes_per_token(tok, data["heldout_text"]),
             "compound": consistency(tok, compound), "words": consistency(tok, words)}
        results[label] = r
        c, w = r["compound"], r["words"]
        print(f"{label:<14} {r['code_bytes_per_token']:>5.2f} {r['prose_bytes_per_token']:>5.2f} | "
              f"{c['all_contexts']:>6.1%} {c['aligned']:>7.1%} {c['vs_space']['backtick']:>6.1%} "
              + " ".join(f"{c['vs_backtick'][x]:>8.1%}" for x in vs_bt)
              + f" | {c['tokens_per_name']:>8.2f} | {w['all_contexts']:>9.1%} {w['vs_space']['backtick']:>6.1%}")
    print("code / prose: bytes per token on held-out files (higher = shorter sequences); tok/name: "
          "tokens per compound name; words: the one-word names")
    for label, tok in tokenizers.items():
        shown = {c: "|".join(tok.id_to_token(i) for i in name_tokens(tok, "moving_average", *CONTEXTS[c])[0])
                 for c in ("space", "backtick", "squote", "dot")}
        print(f"  {label:<14} moving_average: " + "  ".join(f"{c}={v!r}" for c, v in shown.items()))
    print(f"({time.time() - t0:.0f} s)")
    return {"compound": len(compound), "words": len(words), "results": results}


# ---- part 2: the model ------------------------------------------------------------------------------

GARBLE_KINDS = ("truncated", "first word kept", "first word changed")


def garble_kind(name: str, garble: str) -> str:
    """Where a garble leaves the name: cut short (a proper prefix), wrong after an intact first
    word, or wrong within the first word, the part a context-dependent split changes."""
    if name.startswith(garble):
        return "truncated"
    first = re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", name.strip("_"))[0]
    return "first word kept" if garble.startswith(first) else "first word changed"


def run_agent(engine, task, sampling, turn, whole_turns: bool) -> list[dict]:
    """The headless agent on `task` (evals agent's): its first step, or its whole turns."""
    agent = task_agent(EngineSampler(engine, task.root, sampling), task, task.root, turn)
    if whole_turns:
        drive(agent, task)
    else:
        agent.run_turn(task.prompt, approve=None)
    return agent.messages


def print_copy_table(s: dict) -> None:
    print(f"{'channel':<9} {'exact':>6} {'garbled':>8} {'only':>5} {'share':>7}")
    for c in (*CHANNELS, "overall"):
        r = s[c]
        share = "-" if r["share"] is None else f"{r['share']:.1%}"
        garbled = r.get("garbled", r["garbled_only"])  # overall pools garbled_only only
        print(f"{c:<9} {r['exact']:>6} {garbled:>8} {r['garbled_only']:>5} {share:>7}")
    names_share = "-" if s["names_share"] is None else f"{s['names_share']:.1%}"
    print(f"names exact somewhere / attempted: {s['exact_any']}/{s['attempted']} ({names_share})")


def model_part(args) -> dict:
    setup_env()
    enable_compilation_cache()
    t0 = time.time()
    engine = load_engine(args.checkpoint)
    heldout, world = not args.trained_names, args.world or "generated"
    split = next(name for name, key in SPLITS.items() if key == (world, heldout))
    families = args.families.split(",") if args.families else WORLD_FAMILIES[world]
    sampling, turn = settings(args, "bench copy_accuracy")
    turn = turn if args.turns else replace(turn, max_steps=1)  # the first step only
    world_kw = {"world": args.world} if args.world else {}
    base = tempfile.mkdtemp(prefix="nanocode-copy-")
    reports, garbles, skipped = [], [], []
    try:
        for family, seed in task_jobs(families, args.per_family, args.seed, split=split):
            try:
                task = build_task(family, seed, heldout, base, **world_kw)
            except Exception as e:  # noqa: BLE001 - a task that cannot be built is skipped and listed
                skipped.append(f"{family} seed {seed}: {type(e).__name__}: {e}")
                continue
            symbols = project_symbols(task.root)  # before the agent changes anything
            messages = run_agent(engine, task, sampling, turn, args.turns)
            reports.append(copy_report(task.prompt, messages, symbols))
            texts = channels(messages)
            for row in reports[-1]["names_list"]:
                for c, garble in row["garbles"].items():
                    garbles.append((row["name"], garble))
                    if len(garbles) <= args.show:
                        print(f"  {family} {row['name']!r} garbled as {garble!r} in {c}: {texts[c][:120]!r}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    s = summarize(reports)
    mode = f"whole turns (<= {args.max_steps} calls)" if args.turns else "first step"
    print(f"model: {len(reports)} tasks ({world} world, {'held-out' if heldout else 'training'} names), "
          f"{mode}, grounding {'on' if args.ground else 'off'}; {s['names']} requested names, "
          f"{s['attempted']} written or attempted")
    print_copy_table(s)
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    where = [garble_kind(name, garble) for name, garble in garbles]
    print(f"garbled (name, channel) pairs: {len(garbles)}: "
          + ", ".join(f"{k} {where.count(k)}" for k in GARBLE_KINDS) + f" ({time.time() - t0:.0f} s)")
    return {**s, "garbles": dict(zip(GARBLE_KINDS, map(where.count, GARBLE_KINDS)))}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("tokenizer", "model", "both"), default="both")
    ap.add_argument("--checkpoint", default=DEFAULT_MODEL, help="checkpoints directory (newest step)")
    ap.add_argument("--names", type=int, default=3000, help="stdlib names to encode")
    ap.add_argument("--train-mb", type=float, default=4.0,
                    help="MB of code and of prose each tokenizer is trained on")
    ap.add_argument("--families", default="", help="comma-separated task families (default: the world's)")
    ap.add_argument("--per-family", type=int, default=3, help="tasks per family")
    ap.add_argument("--seed", type=int, default=0, help="offset of the task seeds (evals agent's, its split)")
    ap.add_argument("--trained-names", action="store_true",
                    help="training names and phrasings, not held-out ones")
    ap.add_argument("--world", default=None,
                    help="tasks.build_task's world (generated, real), passed only when given")
    ap.add_argument("--turns", action="store_true", help="whole turns instead of the first step")
    add_options(ap, "bench copy_accuracy")  # --max-tokens --max-steps (with --turns) --no-ground
    ap.add_argument("--show", type=int, default=10, help="garbled attempts to print")
    return ap


def main() -> None:
    args = build_parser().parse_args()
    if args.part in ("tokenizer", "both"):
        tokenizer_part(args)
    if args.part in ("model", "both"):
        model_part(args)


if __name__ == "__main__":
    main()
