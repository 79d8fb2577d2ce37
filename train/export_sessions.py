"""`train export-sessions`: the agent's saved sessions (agent/sessions.py) as training data.

    train export-sessions [SESSIONS...] --out DIR     # default: ./.nanocode/sessions
    train sft --from default --data DIR/sft.jsonl ...
    train dpo --from my-sft --data DIR/preference.jsonl ...

Each user turn of a session is judged from its record (meta["turns"]): good when it ended with
an answer ("done") and the user neither undid it nor marked it /bad (a /good mark makes any
turn good); bad when it was rejected, cancelled, undone, marked /bad, or stopped on the step
limit, a repeated call, a cut reply or a full context.
- sft.jsonl: one row per session, the conversation up to the end of its last good turn before
  the first bad one (the loss covers every assistant message of a row, so nothing after a bad
  turn can be kept). A session whose first turn is bad gives no row.
- preference.jsonl: for a bad turn followed by a good one, a pair on the bad turn's prefix
  (everything up to and including its request): rejected = what the model did in the bad turn
  (up to the rejected or cancelled call, whose result is dropped), chosen = what it did in the
  next, good turn. Trade-off: the user usually re-asked in other words, so the chosen side
  answers a neighbouring request; that is the signal a session has.
Every row is validated (train/conversations.py) before it is written; bad ones are counted.
"""
from __future__ import annotations

import json
from pathlib import Path

GOOD_STOPS = ("done",)


def turn_spans(messages: list[dict], meta: dict) -> list[tuple[int, int, dict]]:
    """(start, end, record) per recorded turn: messages[start] is its request, messages[start:end]
    the turn (request, calls, results, answer)."""
    records = meta.get("turns") or []
    starts = [r.get("user_index") for r in records]
    if not all(isinstance(s, int) and 0 <= s < len(messages) for s in starts):
        return []
    ends = starts[1:] + [len(messages)]
    return [(s, e, r) for s, e, r in zip(starts, ends, records) if s < e]


def is_good(record: dict) -> bool:
    if record.get("mark"):
        return record["mark"] == "good"
    return record.get("stop_reason") in GOOD_STOPS and not record.get("undone")


def _steps(messages: list[dict]) -> list[dict]:
    """A turn's model part ready for a side of a pair: up to its last assistant message (a
    rejected or cancelled call's result is not the model's and is dropped)."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return messages[:last + 1]


def export_session(messages: list[dict], meta: dict) -> tuple[dict | None, list[dict]]:
    """(the SFT row or None, the preference pairs) of one saved session."""
    spans = turn_spans(messages, meta)
    good_end = None
    for start, end, record in spans:
        if not is_good(record):
            break
        good_end = end
    row = {"messages": messages[:good_end]} if good_end else None
    pairs = []
    for (start, end, record), (nstart, nend, nrecord) in zip(spans, spans[1:]):
        if is_good(record) or not is_good(nrecord):
            continue
        prefix = messages[:start + 1]
        rejected, chosen = _steps(messages[start + 1:end]), _steps(messages[nstart + 1:nend])
        if rejected and chosen:
            pairs.append({"chosen": {"messages": prefix + chosen},
                          "rejected": {"messages": prefix + rejected}})
    return row, pairs


def session_files(specs: list[str]) -> list[Path]:
    out = []
    for spec in specs or [".nanocode/sessions"]:
        p = Path(spec)
        if p.is_dir():
            out += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{spec}: no such session file or folder (sessions are saved "
                                    "under <project>/.nanocode/sessions/)")
    return out


def main(args) -> int:
    from agent.sessions import load_session
    from train.conversations import validate_row

    files = session_files(args.sessions)
    counts = {"sessions": 0, "unreadable": 0, "good turns": 0, "bad turns": 0, "sft rows": 0,
              "pairs": 0, "invalid rows": 0}
    rows, pairs = [], []
    for path in files:
        try:
            messages, meta = load_session(path)
        except (OSError, ValueError) as e:
            print(f"skipped {path}: {e}")
            counts["unreadable"] += 1
            continue
        counts["sessions"] += 1
        for _, _, record in turn_spans(messages, meta):
            counts["good turns" if is_good(record) else "bad turns"] += 1
        row, found = export_session(messages, meta)
        for r, out in [(row, rows)] + [(p, pairs) for p in found]:
            if r is None:
                continue
            if validate_row(r):
                counts["invalid rows"] += 1
            else:
                out.append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, items in (("sft.jsonl", rows), ("preference.jsonl", pairs)):
        with open(out / name, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in items)
    counts["sft rows"], counts["pairs"] = len(rows), len(pairs)
    print(", ".join(f"{v} {k}" for k, v in counts.items()) + f" -> {out}/sft.jsonl, "
          f"{out}/preference.jsonl")
    if not rows and not pairs:
        print("nothing to train on yet: mark turns with /good, or finish requests with an answer")
    return 0
