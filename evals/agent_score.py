"""How an `evals agent` run is scored: one task's verdict and dense metrics, the audits of its
transcript, a group's summary and the printed table (evals/agent.py runs the tasks).

- Scoring: resolved = task.check(root, final answer) on the final state; a check that raises (a
  model's edit made pytest hang past its timeout) is a failure. user_rejects also needs the
  refusal to have happened: its check alone passes any non-empty answer that changed nothing.
  A run that changed the project's tests, conftest.py, pytest config or interpreter hooks beyond
  what the task asks (tasks.harness.resolved, tools/test_guard.py) is never resolved: the
  record's `tampered` lists those files, and each group counts such tasks (`tamper` column).
- Metrics beside the resolve rate (per family; trained, eval-only and all):
  valid-tool-call rate = valid calls / tool-call attempts, where an attempt is every call the loop
  counted as a step (TurnResult.tool_calls; a malformed call is there as name "?" with an `error:`
  result) and valid = nanocode.protocol.check_call accepts it (known tool, known argument names,
  required ones present) and the tool did not answer `error: invalid argument` (wrong type);
  first-call-correct rate = tasks whose first tool call has the oracle's first tool and target
  (Read/Edit: the same file, relative to the root; Grep: the pattern contains the symbol of the
  oracle's pattern, its longest word after escapes and def/class are removed; Bash: the same
  program, `python -m X` as X) / tasks, a task with no call counting as wrong; the oracle's first
  call is its policy run up to that call (no tool runs). recover_error's oracle starts with the
  user's wrong path, so there the reference is that call. mean steps = tool calls per task;
  edits applied = Edit calls that applied (result not `error:`) / Edit calls that ran (a refused
  one is the user's decision, not a failed edit; user_rejects refuses every Edit). Copying:
  each record's `copy` (evals/copying.copy_report: the request's project names, before the run,
  against what the model wrote in thoughts, tool arguments and answers, exact or garbled) and
  the summary's `copy` (per channel and overall, the share of attempts at a requested name that
  are exact).
- Audits of a model's run (`audit`, evals/reply_audit.py), counted per group beside the verdict:
  looping_replies, repeating_answers (final answers that say a phrase three times in a row, the
  model issue's audit), invented_spans (answer spans found nowhere the model could read them),
  question_edits (Edits that ran in a task whose request is a question), and the stop reasons.
"""
from __future__ import annotations

import os
import re
import shlex
from collections import Counter

from agent.loop.request_kind import is_question
from evals.copying import summarize as copy_summary
from evals.reply_audit import invented_spans, looping_replies, repeating_answers
from nanocode.protocol import REJECTED, check_call
from tasks import EVAL_ONLY_FAMILIES, TRAIN_FAMILIES, pattern_symbol, resolved, snapshot

# ---- metrics of one task -------------------------------------------------------------------------

def _rel(root: str, path) -> str:
    return os.path.normpath(os.path.relpath(os.path.join(root, str(path)), root))


def _program(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if len(words) >= 3 and re.fullmatch(r"python3?", words[0]) and words[1] == "-m":
        return words[2]
    return words[0] if words else ""


def same_target(call: dict, ref: dict, root: str) -> bool:
    """Whether `call` uses the tool of `ref` (the oracle's) on the same target (docstring)."""
    name, a, b = ref["name"], call.get("args") or {}, ref["args"]
    if call.get("name") != name or not isinstance(a, dict):
        return False
    try:
        if name in ("Read", "Edit"):
            return _rel(root, a["file_path"]) == _rel(root, b["file_path"])
        if name == "Grep":
            return pattern_symbol(b["pattern"]) in str(a["pattern"])
        return _program(str(a["command"])) == _program(b["command"])
    except (KeyError, TypeError, ValueError):
        return False


def valid_call(call: dict) -> bool:
    return (check_call(call["name"], call["args"]) is None
            and not str(call["result"]).startswith("error: invalid argument"))


def oracle_calls(messages: list[dict]) -> list[dict]:
    """[{"name", "args", "result"}] of a conversation written by the oracle (never compacted)."""
    return [{"name": m["tool_call"]["name"], "args": m["tool_call"]["args"], "result": nxt["content"]}
            for m, nxt in zip(messages, messages[1:])
            if m["role"] == "assistant" and m.get("tool_call") and nxt["role"] == "tool_result"]


def score(task, answer: str, calls: list[dict], ref: dict | None, root: str | None = None) -> dict:
    """Resolution and the dense metrics of one finished task, its project at `root` (default:
    task.root; a best-of rollout's copy otherwise)."""
    root = root or task.root
    verdict = resolved(task, answer, calls, root)
    edits = [c for c in calls if c["name"] == "Edit" and c["result"] != REJECTED]
    applied = [c for c in edits if not str(c["result"]).startswith("error")]
    first = calls[0] if calls else None
    return {"resolved": verdict.resolved, "steps": len(calls), "valid_calls": sum(map(valid_call, calls)),
            "edit_calls": len(edits), "edits_applied": len(applied),
            "first_call": first and {"name": first["name"], "args": first["args"]},
            "oracle_first_call": ref,
            "first_call_correct": bool(first and ref and same_target(first, ref, root)), "tampered": list(verdict.tampered),
            **({"check_error": verdict.check_error} if verdict.check_error else {})}


def audit(task, messages: list[dict], calls: list[dict], root: str) -> dict:
    """What the transcript shows beyond the verdict (evals/reply_audit.py): replies that loop,
    answers that repeat a phrase, answer spans found nowhere the model could read them, and Edits
    that ran although the request was a question (agent/loop/request_kind.py)."""
    edits = [c for c in calls if c["name"] == "Edit" and not str(c["result"]).startswith(("error", REJECTED))]
    return {"looping_replies": looping_replies(messages), "repeating_answers": repeating_answers(messages),
            "invented_spans": invented_spans(messages, snapshot(root)),
            "question_edits": len(edits) if is_question(task.prompt) else 0}


# ---- summary ----------------------------------------------------------------------------------------

def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def metrics(records: list[dict], at_1: bool = False) -> dict:
    """A group's metrics; at_1 (--best-of runs) adds pass@1, rollout 0's, beside best-of-N."""
    n = len(records)
    total = lambda key: sum(r[key] for r in records)  # noqa: E731
    out = {"tasks": n, "resolved": total("resolved"), "resolve_rate": _ratio(total("resolved"), n),
           "valid_tool_call_rate": _ratio(total("valid_calls"), total("steps")),
           "first_call_correct_rate": _ratio(total("first_call_correct"), n),
           "mean_steps": _ratio(total("steps"), n),
           "edits_applied_rate": _ratio(total("edits_applied"), total("edit_calls")),
           "tool_calls": total("steps"), "edit_calls": total("edit_calls"),
           "tampered": sum(bool(r.get("tampered")) for r in records),
           "looping_replies": sum(r.get("looping_replies", 0) for r in records),
           "repeating_answers": sum(r.get("repeating_answers", 0) for r in records),
           "invented_spans": sum(len(r.get("invented_spans", [])) for r in records),
           "question_edits": sum(r.get("question_edits", 0) for r in records),
           "grounding_fallbacks": sum(bool(r.get("grounding_notes")) for r in records),
           "stop_reasons": dict(Counter(s for r in records for s in r.get("stop_reasons", [])))}
    if at_1:  # a task that did not run resolved neither
        first = sum(bool(r.get("at_1", {}).get("resolved")) for r in records)
        out.update(resolved_at_1=first, pass_at_1_rate=_ratio(first, n))
    return out


def summarize(records: list[dict]) -> dict:
    trained, eval_only = list(TRAIN_FAMILIES), list(EVAL_ONLY_FAMILIES)
    at_1 = any("at_1" in r for r in records)  # a --best-of run: every group reports pass@1
    fams = [f for f in trained + eval_only if any(r["family"] == f for r in records)]
    by = {f: metrics([r for r in records if r["family"] == f], at_1) for f in fams}
    group = lambda names: metrics([r for r in records if r["family"] in names], at_1)  # noqa: E731
    return {"overall": metrics(records, at_1), "trained_families": group(trained),
            "eval_only_families": group(eval_only), "families": by,
            "copy": copy_summary([r["copy"] for r in records if "copy" in r]),
            "errors": sum("error" in r for r in records),
            "system_prompt_mismatches": sum(r.get("system_prompt_ok") is False for r in records)}


def _fmt(v, pct: bool = True) -> str:
    return "-" if v is None else (f"{100 * v:.1f}%" if pct else f"{v:.2f}")


def print_table(summary: dict) -> None:
    """One row per family and group; with --best-of the rate is best-of-N and `@1` is pass@1."""
    trained, eval_only = list(TRAIN_FAMILIES), list(EVAL_ONLY_FAMILIES)
    at_1 = "pass_at_1_rate" in summary["overall"]
    print(f"{'family':<18} {'tasks':>5} {'resolved':>9} {'rate':>7} " + (f"{'@1':>7} " if at_1 else "")
          + f"{'valid':>7} {'1st ok':>7} {'steps':>6} {'edits':>7} {'tamper':>6}")

    def row(name, m):
        print(f"{name:<18} {m['tasks']:>5} {m['resolved']:>9} {_fmt(m['resolve_rate']):>7} "
              + (f"{_fmt(m.get('pass_at_1_rate')):>7} " if at_1 else "")
              + f"{_fmt(m['valid_tool_call_rate']):>7} {_fmt(m['first_call_correct_rate']):>7} "
              f"{_fmt(m['mean_steps'], False):>6} {_fmt(m['edits_applied_rate']):>7} {m['tampered']:>6}")
    for title, names, key in (("trained families", trained, "trained_families"),
                              ("eval-only families", eval_only, "eval_only_families")):
        shown = [f for f in names if f in summary["families"]]
        if shown:
            print(f"-- {title}")
            for f in shown:
                row(f, summary["families"][f])
            row(f"= {title.split()[0]}", summary[key])
    row("= all", summary["overall"])
    copy = summary.get("copy")
    if copy and copy["overall"]["share"] is not None:
        print(f"names from the request written exactly: {_fmt(copy['overall']['share'])} of attempts "
              f"(thought {_fmt(copy['thought']['share'])}, args {_fmt(copy['args']['share'])}, "
              f"answer {_fmt(copy['answer']['share'])})")
    o = summary["overall"]
    if summary.get("policy") == "model":  # a model's run (the baselines write no answers of their own)
        print(f"answers repeating a phrase: {o['repeating_answers']}; replies that loop: "
              f"{o['looping_replies']}; invented answer spans: {o['invented_spans']}")
    fallbacks = summary["overall"].get("grounding_fallbacks")
    if fallbacks:
        print(f"warning: {fallbacks} task(s) ran with a grounding fallback (paths as free text); "
              "their grounding_notes in the .jsonl say why")
