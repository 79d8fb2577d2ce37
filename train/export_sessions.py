"""`train export-sessions`: the agent's saved sessions (agent/sessions.py) as training data.

    train export-sessions [SESSIONS...] --out DIR     # default: ./.nanocode/sessions, the agent's own
    train sft --from default --data DIR/sft.jsonl ...
    train dpo --from my-sft --data DIR/preference.jsonl ...

Each user turn of a session is judged from its record (meta["turns"]): good when it ended with
an answer ("done") and the user neither undid it, rewound it nor marked it /bad (a /good mark
makes any turn good); bad when it was rejected, cancelled, undone, rewound, marked /bad, or
stopped on the step limit, a repeated call, a cut reply or a full context. Rewound turns (those
/rewind took out: meta["rewinds"], agent/loop/conversation.py) are not in the session's
messages: the turns after a rewind were sampled without them.
- sft.jsonl: one row per session, the conversation up to the end of its last good turn before
  the first bad one (the loss covers every assistant message of a row, so nothing after a bad
  turn can be kept). A session whose first turn is bad gives no row. A rewound turn is never
  in a row.
- preference.jsonl: for a bad turn followed by a good one, a pair on the bad turn's prefix
  (everything up to and including its request): rejected = what the model did in the bad turn
  (up to the rejected or cancelled call, whose result is dropped), chosen = what it did in the
  next, good turn. The same for a rewound request and the turn the user asked in its place:
  rejected = the first turn a rewind took out, chosen = the good turn now at its place in the
  session, when no later rewind went back further (the prefix is then still the same).
  Trade-off: the user usually re-asked in other words, so the chosen side answers a
  neighbouring request; that is the signal a session has.
Every row is validated (train/conversations.py) before it is written; bad ones are counted.

Which files (session files are untrusted input: a cloned repository can ship .nanocode/sessions):
- By default only sessions this user's agent saved: files in ./.nanocode/sessions whose current
  bytes are the ones agent/sessions.py recorded in its manifest for that path; the others are
  skipped and counted, with their names (a planted file, or one edited since it was saved).
- Files and folders named on the command line are the user's choice: exported without the
  manifest check. Trade-off: a session saved by another tool, or one whose manifest entry was
  lost, is exported only when named.
- Either way each file is read as agent/sessions.read_session reads it: a symlink (the file,
  the folder named, or for a relative name any folder on the way, e.g. .nanocode), a FIFO or a
  device named *.jsonl, or a file over agent/sessions.MAX_SESSION_BYTES is skipped with a
  warning naming it; so is one that does not parse (bad JSON, too deeply nested, the wrong
  shape). The rest are exported.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from agent.sessions import is_recorded, manifest_path, parse_session, read_manifest, read_session
from train.conversations import validate_row

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


def rewound_turns(meta: dict) -> list[tuple[int, list[dict], list[dict]]]:
    """(cut, messages, records) per meta["rewinds"] entry, oldest first: what one /rewind took
    out, messages[0] being the first cut turn's request, which stood at transcript index `cut`
    (its record's user_index). Entries of another shape (an untrusted file) are left out."""
    out = []
    for entry in meta.get("rewinds") or []:
        messages, records = (entry.get("messages"), entry.get("turns")) if isinstance(entry, dict) \
            else (None, None)
        if not (isinstance(messages, list) and messages and isinstance(records, list) and records
                and all(isinstance(r, dict) for r in records)
                and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)):
            continue
        cut = records[0].get("user_index")
        if type(cut) is int and cut >= 0 and messages[0]["role"] == "user":
            out.append((cut, messages, records))
    return out


def is_good(record: dict, rewound: bool = False) -> bool:
    """The verdict on one turn (the module docstring); `rewound`: /rewind took it out."""
    if record.get("mark"):
        return record["mark"] == "good"
    return record.get("stop_reason") in GOOD_STOPS and not record.get("undone") and not rewound


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
    return row, pairs + _rewind_pairs(messages, meta, spans)


def _rewind_pairs(messages: list[dict], meta: dict, spans) -> list[dict]:
    """A pair per rewind whose first cut turn was bad and whose place holds a good turn now,
    on a prefix no later rewind changed (the module docstring)."""
    now = {start: (end, record) for start, end, record in spans}
    rewinds, pairs = rewound_turns(meta), []
    for k, (cut, cut_off, records) in enumerate(rewinds):
        later_cuts = [c for c, _, _ in rewinds[k + 1:]]
        if cut not in now or any(c < cut for c in later_cuts) or is_good(records[0], rewound=True):
            continue
        end, record = now[cut]
        nxt = records[1].get("user_index") if len(records) > 1 else None
        turn = cut_off[:nxt - cut] if type(nxt) is int and nxt > cut else cut_off
        rejected, chosen = _steps(turn[1:]), _steps(messages[cut + 1:end])
        if is_good(record) and rejected and chosen:
            prefix = messages[:cut] + turn[:1]
            pairs.append({"chosen": {"messages": prefix + chosen},
                          "rejected": {"messages": prefix + rejected}})
    return pairs


def _first_link(path: Path) -> Path | None:
    """The first symlink among `path` and, when it is relative, its parents below the current folder."""
    chain = [path] + ([] if path.is_absolute() else [p for p in path.parents if p != Path(".")])
    return next((p for p in reversed(chain) if p.is_symlink()), None)


def session_files(specs: list[str]) -> tuple[list[Path], list[str]]:
    """(the *.jsonl files the specs name, warnings for the symlinks left out); no specs: the
    default folder. FileNotFoundError for a name that does not exist."""
    files, warnings = [], []
    for spec in specs or [".nanocode/sessions"]:
        p = Path(spec)
        if link := _first_link(p):
            warnings.append(f"skipped {spec}: {link} is a symlink (links are not followed; "
                            "name the real file or folder)")
        elif p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif os.path.lexists(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"{spec}: no such session file or folder (sessions are saved "
                                    "under <project>/.nanocode/sessions/)")
    return files, warnings


def _export_file(path: Path, manifest: dict | None):
    """(a verdict per turn, rewound ones included: is_good; its valid SFT rows, its valid pairs,
    how many rows were invalid), or None when a manifest is given and does not record these
    bytes for this path. OSError, ValueError
    or RecursionError (a structure just under json's depth limit walked deeper) for a file that
    is not a saved session."""
    data = read_session(path)
    if manifest is not None and not is_recorded(path, data, manifest):
        return None
    messages, meta = parse_session(data, path)
    row, found = export_session(messages, meta)
    made = [("sft", r) for r in [row] if r is not None] + [("pair", p) for p in found]
    valid = [(kind, r) for kind, r in made if not validate_row(r)]
    verdicts = [is_good(r) for _, _, r in turn_spans(messages, meta)] + \
        [is_good(r, rewound=True) for _, _, records in rewound_turns(meta) for r in records]
    return (verdicts, [r for kind, r in valid if kind == "sft"], [r for kind, r in valid if kind == "pair"],
            len(made) - len(valid))


def main(args) -> int:
    files, warnings = session_files(args.sessions)
    for w in warnings:
        print(w)
    manifest = None if args.sessions else read_manifest()
    counts = {"sessions": 0, "unreadable": 0, "good turns": 0, "bad turns": 0, "sft rows": 0,
              "pairs": 0, "invalid rows": 0}
    rows, pairs, not_ours = [], [], []
    for path in files:
        try:
            found = _export_file(path, manifest)
        except (OSError, ValueError, RecursionError) as e:
            print(f"skipped {path}: {e or type(e).__name__}")
            counts["unreadable"] += 1
            continue
        if found is None:
            not_ours.append(str(path))
            continue
        verdicts, good_rows, good_pairs, invalid = found
        counts["sessions"] += 1
        counts["invalid rows"] += invalid
        counts["good turns"] += sum(verdicts)
        counts["bad turns"] += len(verdicts) - sum(verdicts)
        rows += good_rows
        pairs += good_pairs
    if not_ours:
        print(f"skipped {len(not_ours)} session file(s) this user's agent did not save (or that "
              f"changed since; not in {manifest_path()}): {', '.join(not_ours)}; name them on the "
              "command line to export them anyway")
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
