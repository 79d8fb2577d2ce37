"""Conversation data for SFT and DPO: loading (local JSONL or the Hugging Face hub) and validation.

Schema (shared/spec/AGENT_INTERFACE.md): one conversation per line,
`{"messages": [{"role": "system"|"user"|"assistant"|"tool_result", "content": str,
"tool_call": {"name": str, "args": {str: str|int}}?}]}`; extra top-level keys (the agent's saved
sessions carry "meta") are allowed and ignored. Preference rows are `{"chosen": conv, "rejected": conv}`.

Loading: local .jsonl files (or directories of them) go through `datasets.load_dataset("json")`;
when Arrow cannot unify the rows' types (e.g. sessions whose "meta" differ in shape) the file is
read line by line with `json` instead. Hub names (owner/name) go through `datasets.load_dataset`
too; offline that is a clear error naming the dataset and saying to pass local files. Rows coming
out of Arrow have absent struct fields filled with None (a tool_call of None, args that another
row had): `normalize` drops those. smol-smoltalk style rows ({"messages": [{"role", "content"}]})
already fit; only role and content are kept.

Validation (`validate`, `validate_file`; also `python -m train.conversations FILE...`): one problem
per string, `FILE:LINE: rule: detail` for files. Rules:
  json      the line is not JSON (or not an object)
  schema    messages list, known roles, str content, tool_call shape, system only first
  order     optional system, then user; user -> assistant; assistant with tool_call -> tool_result;
            tool_result only after an assistant tool call, then assistant (or user: a rejected
            call, a repeated call or the step limit hand control back); plain assistant -> user
            or end;
            at least one assistant message; ends with an assistant message
  tool      known tool name, known argument names, required arguments present (tools/dispatch.py)
  result    a tool_result after Read/Edit/Grep/Bash looks like that tool's output format, an
            `error: ...` line, or exactly `rejected by user`
  length    rendered length <= max_tokens (only when a tokenizer and max_tokens are given)
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from collections.abc import Iterable

from nanocode.tokenizer import ROLES
from tools.dispatch import INT_ARGS, TOOL_ARGS, check_call

_NUMBERED = re.compile(r"^\s*\d+→")
_GREP_LINE = re.compile(r"^.+?(:\d+:|-\d+-)")
_REJECTED = "rejected by user"


# ---- normalisation -------------------------------------------------------------------------------
def normalize(conv: dict) -> dict:
    """A conversation as the renderer wants it: None fields (Arrow's fill for absent struct
    fields) dropped, only role/content/tool_call kept per message, top-level keys other than
    messages dropped. Does not validate."""
    out = []
    for msg in conv.get("messages") or []:
        if not isinstance(msg, dict):
            out.append(msg)
            continue
        m = {"role": msg.get("role"), "content": msg.get("content")}
        tc = msg.get("tool_call")
        if tc is not None:
            args = tc.get("args") if isinstance(tc, dict) else None
            if isinstance(args, dict):
                args = {k: v for k, v in args.items() if v is not None}
            m["tool_call"] = {"name": tc.get("name"), "args": args} if isinstance(tc, dict) else tc
        out.append(m)
    return {"messages": out}


# ---- validation ----------------------------------------------------------------------------------
def _check_result(tool: str, content: str) -> str | None:
    """Why `content` does not look like `tool`'s result, or None if it does."""
    if content == _REJECTED:
        return None
    if content.startswith("error: ") and tool != "Bash":  # Bash output is whatever the command printed
        return None if "\n" not in content else "an error result must be one line"
    lines = content.split("\n")
    if tool == "Read":
        if content == "(empty file)" or all(_NUMBERED.match(l) for l in lines):
            return None
        return "Read results are numbered lines `    n→text`, `(empty file)` or an error line"
    if tool == "Edit":
        if lines[0].strip() and not _NUMBERED.match(lines[0]) and all(
                _NUMBERED.match(l) or l.lstrip().startswith(("...", "…")) for l in lines[1:]):
            return None
        return "Edit results are the path, then numbered lines, or an error line"
    if tool == "Grep":
        if content == "no matches found" or all(
                _GREP_LINE.match(l) or l == "--" or l.startswith("... (") for l in lines):
            return None
        return "Grep results are `path:line:text` / `path-line-text` lines or `no matches found`"
    if tool == "Bash":
        return None if content else "an empty Bash result should be `(no output)`"
    return None


def _check_call(tc, where: str) -> list[str]:
    if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
        return [f"schema: {where}: tool_call must be {{\"name\": str, \"args\": {{...}}}}"]
    args = tc.get("args")
    if not isinstance(args, dict):
        return [f"schema: {where}: tool_call args must be an object"]
    problems = []
    for k, v in args.items():
        if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, int) and k not in INT_ARGS):
            kind = "a string or an integer" if k in INT_ARGS else "a string"
            problems.append(f"schema: {where}: argument {k!r} must be {kind}")
    err = check_call(tc["name"], args)  # the agent's own check: unknown tool / argument, missing
    if err:
        valid = f" (tools: {', '.join(TOOL_ARGS)})" if err == "error: unknown tool" else ""
        problems.append(f"tool: {where}: {tc['name']}: {err.removeprefix('error: ')}{valid}")
    return problems


def validate(conv, tokenizer=None, max_tokens: int | None = None) -> list[str]:
    """Problems with one conversation as `rule: detail` strings ([] = valid). Checks schema, role
    order, tool names/arguments, tool result formats, and (given a tokenizer and max_tokens) that
    the rendered conversation fits in max_tokens."""
    if not isinstance(conv, dict):
        return [f"schema: a conversation must be an object, got {type(conv).__name__}"]
    messages = conv.get("messages")
    if not isinstance(messages, list) or not messages:
        return ['schema: a conversation needs "messages": a non-empty list']
    problems: list[str] = []
    for i, m in enumerate(messages):
        where = f"message {i}"
        if not isinstance(m, dict):
            problems.append(f"schema: {where}: must be an object")
            continue
        if m.get("role") not in ROLES:
            problems.append(f"schema: {where}: unknown role {m.get('role')!r} (roles: {', '.join(ROLES)})")
        if not isinstance(m.get("content"), str):
            problems.append(f"schema: {where}: content must be a string")
        if m.get("tool_call") is not None:
            if m.get("role") != "assistant":
                problems.append(f"schema: {where}: only assistant messages may have a tool_call")
            else:
                problems += _check_call(m["tool_call"], where)
        if m.get("role") == "system" and i != 0:
            problems.append(f"schema: {where}: a system message is only allowed first")
    if any(p.startswith("schema: ") for p in problems):
        return problems  # order checks on a broken schema would only add noise
    # role order
    roles = [m["role"] for m in messages]
    start = 1 if roles[0] == "system" else 0
    if start >= len(roles) or roles[start] != "user":
        problems.append(f"order: message {start}: the conversation must start with a user message "
                        "(after an optional system message)")
    for i in range(start, len(roles)):
        role, prev = roles[i], messages[i - 1] if i > start else None
        if prev is None:
            continue
        prole, called = prev["role"], prev.get("tool_call") is not None
        if role == "tool_result" and not (prole == "assistant" and called):
            problems.append(f"order: message {i}: a tool_result must follow an assistant tool call")
        elif prole == "assistant" and called and role != "tool_result":
            problems.append(f"order: message {i}: an assistant tool call must be followed by its "
                            f"tool_result, got {role}")
        elif prole == "user" and role != "assistant":
            problems.append(f"order: message {i}: a user message must be followed by an assistant "
                            f"message, got {role}")
        elif prole == "assistant" and not called and role != "user":
            problems.append(f"order: message {i}: a plain assistant reply must be followed by a user "
                            f"message or the end, got {role}")
        elif prole == "tool_result" and role not in ("assistant", "user"):
            problems.append(f"order: message {i}: a tool_result must be followed by an assistant "
                            f"message (or a user message when control went back to the user), "
                            f"got {role}")
        if role == "tool_result" and prole == "assistant" and called:
            why = _check_result(prev["tool_call"]["name"], messages[i]["content"])
            if why:
                snippet = messages[i]["content"][:60].replace("\n", "\\n")
                problems.append(f"result: message {i}: {why}; got {snippet!r}")
    if "assistant" not in roles:
        problems.append("order: the conversation has no assistant message")
    elif roles[-1] != "assistant" or messages[-1].get("tool_call") is not None:
        problems.append(f"order: message {len(roles) - 1}: the conversation must end with an "
                        f"assistant reply (not {roles[-1]}{' with a tool call' if roles[-1] == 'assistant' else ''})")
    if tokenizer is not None and max_tokens is not None and not problems:
        n = len(tokenizer.render_conversation(normalize(conv))[0])
        if n > max_tokens:
            problems.append(f"length: renders to {n} tokens, more than {max_tokens}")
    return problems


def validate_row(row, tokenizer=None, max_tokens: int | None = None) -> list[str]:
    """A conversation, or a preference row {"chosen", "rejected"} (both sides validated)."""
    if isinstance(row, dict) and ("chosen" in row or "rejected" in row):
        problems = []
        for side in ("chosen", "rejected"):
            if side not in row:
                problems.append(f"schema: preference row has no {side!r}")
                continue
            problems += [f"{p.split(': ', 1)[0]}: {side}: {p.split(': ', 1)[1]}"
                         for p in validate(row[side], tokenizer, max_tokens)]
        return problems
    return validate(row, tokenizer, max_tokens)


def validate_file(path, tokenizer=None, max_tokens: int | None = None) -> list[str]:
    """Every problem in a JSONL file as `FILE:LINE: rule: detail` (conversations or preference
    rows, blank lines skipped)."""
    problems = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{path}:{n}: json: {e}")
                continue
            if not isinstance(row, dict):
                problems.append(f"{path}:{n}: json: a line must be a JSON object")
                continue
            problems += [f"{path}:{n}: {p}" for p in validate_row(row, tokenizer, max_tokens)]
    return problems


# ---- loading -------------------------------------------------------------------------------------
def parse_source(spec: str) -> tuple[str, float]:
    """"SOURCE" or "SOURCE*K" -> (source, K). K (a float > 0) is how many times the source is seen
    per epoch: *3 repeats it 3 times, *0.5 takes a random half, *2.5 two copies plus a half."""
    source, star, k = spec.rpartition("*")
    if not star:
        return spec, 1.0
    try:
        times = float(k)
    except ValueError:
        raise ValueError(f"bad data spec {spec!r}: use SOURCE or SOURCE*K with K a number, e.g. "
                         "data.jsonl*2 or data.jsonl*0.5") from None
    if not times > 0:
        raise ValueError(f"bad data spec {spec!r}: K must be > 0")
    return source, times


def _local_files(source: str) -> list[str] | None:
    if os.path.isdir(source):
        files = sorted(glob.glob(os.path.join(source, "**", "*.jsonl"), recursive=True))
        if not files:
            raise FileNotFoundError(f"no .jsonl files under {source}")
        return files
    if os.path.isfile(source):
        return [source]
    if any(c in source for c in "*?["):
        files = sorted(glob.glob(source))
        return files or None
    return None


def _read_jsonl(path: str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: json: {e}; check the file with "
                                     f"`python -m train.conversations {path}`") from None
    return rows


def _load_local(path: str) -> list[dict]:
    import datasets
    datasets.disable_progress_bars()
    try:
        return list(datasets.load_dataset("json", data_files=path, split="train"))
    except Exception:  # noqa: BLE001 - Arrow could not unify the rows: read them as plain JSON
        return _read_jsonl(path)


def _load_hub(name: str, split: str = "train") -> list[dict]:
    import datasets
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as e:  # noqa: BLE001 - offline, unknown name, no such split ...
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"could not load the hub dataset {name!r} ({type(e).__name__}: {msg}); "
                         "offline or no access? download it elsewhere, or pass local .jsonl files "
                         "(--data path/to/file.jsonl)") from e
    return list(ds)


def _to_conv(row: dict) -> dict:
    """Hub rows -> the schema: keeps messages (smol-smoltalk has role/content only) and
    preference pairs; Arrow's None fills are dropped."""
    if "chosen" in row and "rejected" in row:
        return {"chosen": normalize(row["chosen"]), "rejected": normalize(row["rejected"])}
    return normalize(row)


def load_rows(source: str, split: str = "train") -> list[dict]:
    """Rows (conversations or preference pairs) from a .jsonl file, a directory of them, a glob,
    or a hub dataset name (owner/name)."""
    files = _local_files(source)
    if files is not None:
        return [_to_conv(r) for f in files for r in _load_local(f)]
    if re.fullmatch(r"[\w.-]+/[\w.-]+", source) and not source.endswith(".jsonl"):
        return [_to_conv(r) for r in _load_hub(source, split)]
    raise FileNotFoundError(f"data source {source!r} is neither a file, a directory of .jsonl "
                            "files, nor a hub dataset name (owner/name)")


def keep_valid(rows: Iterable[dict], tokenizer=None, max_tokens=None) -> tuple[list[dict], dict]:
    """(valid rows, {rule: count of dropped rows}) - a bad row is dropped and counted, never fixed."""
    good, dropped = [], {}
    for row in rows:
        problems = validate_row(row, tokenizer, max_tokens)
        if problems:
            rule = problems[0].split(":", 1)[0]
            dropped[rule] = dropped.get(rule, 0) + 1
        else:
            good.append(row)
    return good, dropped


def main(argv: list[str] | None = None) -> int:
    """`python -m train.conversations FILE...`: print every problem, exit 1 if there are any."""
    files = sys.argv[1:] if argv is None else argv
    if not files:
        print("usage: python -m train.conversations FILE.jsonl...", file=sys.stderr)
        return 2
    n = 0
    for path in files:
        for p in validate_file(path):
            print(p)
            n += 1
    print(f"{n} problem(s) in {len(files)} file(s)", file=sys.stderr)
    return 1 if n else 0


if __name__ == "__main__":
    raise SystemExit(main())
