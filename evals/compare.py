"""`evals compare A B`: two `evals agent` runs on the same tasks, side by side, paired per task.

A and B are result files (`<dir>/agent_stepN.json`, or agent_server.json from an
`evals agent --base-url` run, with its records `.jsonl` and its `_transcripts/` beside it), so a
server, the default model and a checkpoint of one's own compare on the same tasks. Reported per family and overall: resolved A -> B, edits applied,
calls to nonexistent paths (Read / Edit / Grep whose result says the path is not there, counted
from the transcripts), tasks whose run edited the tests unasked (`tampered`), stop reasons, and
McNemar's exact test on the tasks whose outcome differs (b = resolved only in A, c = only in B;
two-sided binomial p at 1/2). Paired tasks are matched by id; a task in only one run is left out
and counted. Trade-off: the exact test is conservative at small b + c, which is the honest choice
for 20 tasks per family.
"""
from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

MISSING_PATH = ("error: file not found", "error: no such file or directory", "error: path not found")


def load_run(path: Path) -> tuple[dict, dict[str, dict]]:
    """(summary, records by task id) of one `evals agent` result file; ValueError names the fix."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("agent_*.json"))
        if len(found) != 1:
            raise ValueError(f"{path} holds {len(found)} agent result files; name one of them")
        path = found[0]
    records_path = path.with_suffix(".jsonl")
    if not path.is_file() or not records_path.is_file():
        raise ValueError(f"{path}: not an `evals agent` result (needs {path.name} and {records_path.name})")
    summary = json.loads(path.read_text())
    records = {}
    for line in records_path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            records[r["id"]] = r
    transcripts = path.parent / f"{path.stem}_transcripts"
    for tid, r in records.items():
        r["missing_path_calls"] = missing_path_calls(transcripts / f"{tid}.jsonl")
    return summary, records


def missing_path_calls(transcript: Path) -> int | None:
    """Read / Edit / Grep calls in a saved transcript whose result says the path does not exist."""
    if not transcript.is_file():
        return None
    messages = json.loads(transcript.read_text().splitlines()[0])["messages"]
    n = 0
    for m, nxt in zip(messages, messages[1:]):
        call = m.get("tool_call") or {}
        if call.get("name") in ("Read", "Edit", "Grep") and nxt["role"] == "tool_result" \
                and nxt["content"].startswith(MISSING_PATH):
            n += 1
    return n


def mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b vs c discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(a: dict[str, dict], b: dict[str, dict], families: list[str] | None = None) -> dict:
    """Per-family and overall paired numbers for the task ids both runs have."""
    ids = [i for i in a if i in b]
    fams = families or sorted({a[i]["family"] for i in ids})
    rows = {}
    for fam in fams + ["all"]:
        sel = [i for i in ids if fam == "all" or a[i]["family"] == fam]
        if not sel:
            continue
        ra = [bool(a[i]["resolved"]) for i in sel]
        rb = [bool(b[i]["resolved"]) for i in sel]
        only_a = sum(x and not y for x, y in zip(ra, rb))
        only_b = sum(y and not x for x, y in zip(ra, rb))
        rows[fam] = {
            "tasks": len(sel), "resolved_a": sum(ra), "resolved_b": sum(rb),
            "only_a": only_a, "only_b": only_b, "p": round(mcnemar(only_a, only_b), 4),
            "edits_a": _edits(a, sel), "edits_b": _edits(b, sel),
            "missing_a": _sum(a, sel, "missing_path_calls"), "missing_b": _sum(b, sel, "missing_path_calls"),
            "steps_a": _sum(a, sel, "steps"), "steps_b": _sum(b, sel, "steps"),
            "tampered_a": _tampered(a, sel), "tampered_b": _tampered(b, sel),
        }
    stops = {k: Counter(s for i in ids for s in run[i].get("stop_reasons", [])) for k, run in (("a", a), ("b", b))}
    return {"rows": rows, "unpaired": len(set(a) ^ set(b)), "stop_reasons": {k: dict(v) for k, v in stops.items()}}


def _sum(run: dict, ids: list[str], key: str) -> int:
    return sum(run[i].get(key) or 0 for i in ids)


def _tampered(run: dict, ids: list[str]) -> int:
    """Tasks whose run edited the tests unasked (records before the test guard have no field)."""
    return sum(bool(run[i].get("tampered")) for i in ids)


def _edits(run: dict, ids: list[str]) -> str:
    applied, calls = _sum(run, ids, "edits_applied"), _sum(run, ids, "edit_calls")
    return f"{applied}/{calls}"


def print_table(result: dict, name_a: str, name_b: str) -> None:
    print(f"A = {name_a}\nB = {name_b}")
    print(f"{'family':<16} {'tasks':>5} {'resolved A -> B':>16} {'only A/B':>9} {'p':>7} "
          f"{'edits applied A -> B':>21} {'missing paths':>14} {'steps':>10} {'tampered':>9}")
    for fam, r in result["rows"].items():
        print(f"{fam:<16} {r['tasks']:>5} {r['resolved_a']:>7} -> {r['resolved_b']:<6} "
              f"{r['only_a']:>4}/{r['only_b']:<4} {r['p']:>7.3f} {r['edits_a']:>10} -> {r['edits_b']:<8} "
              f"{r['missing_a']:>5} -> {r['missing_b']:<5} {r['steps_a']:>4}->{r['steps_b']:<4} "
              f"{r['tampered_a']:>3} -> {r['tampered_b']:<3}")
    for k in ("a", "b"):
        print(f"stop reasons {k.upper()}: {result['stop_reasons'][k]}")
    if result["unpaired"]:
        print(f"warning: {result['unpaired']} task(s) in only one run were left out", file=sys.stderr)


def main(args) -> int:
    try:
        (sa, a), (sb, b) = load_run(args.a), load_run(args.b)
    except (ValueError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    families = [f for f in sa.get("task_families", []) if f in sb.get("task_families", [])] or None
    result = paired(a, b, families)
    print_table(result, str(args.a), str(args.b))
    found = sa.get("sandbox_found"), sb.get("sandbox_found")
    if None not in found and found[0] != found[1]:
        print(f"warning: A ran its commands with sandbox {found[0]!r}, B with {found[1]!r}; "
              "without one every command is refused, so the pairs measure the machines, not the "
              "models: run both on one machine", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps({"a": str(args.a), "b": str(args.b), **result}, indent=1) + "\n")
    return 0
