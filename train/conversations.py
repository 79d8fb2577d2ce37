"""Conversation data for SFT and DPO: loading (local JSONL or the Hugging Face hub) and validation.

Schema (the agent's, nanocode/protocol.py): one conversation per line,
`{"messages": [{"role": "system"|"user"|"assistant"|"tool_result", "content": str,
"tool_call": {"name": str, "args": {str: str|int}}?}]}`; extra top-level keys (the agent's saved
sessions carry "meta") are allowed and ignored. Preference rows are `{"chosen": conv, "rejected": conv}`.

load_rows reads local files or a hub dataset, falling back to reading row by row where Arrow
cannot unify the rows' types; normalize and keep_valid bring the original nanocode datasets and
Arrow's filled-in fields into the schema. validate / validate_file (also `python -m
train.conversations FILE...`) check rows as written, one problem per string (`FILE:LINE: rule:
detail` for files).

`datasets` (~2.4 s to import) is imported where rows are loaded through it, and may be missing (a
bare accelerator host reads plain JSON lines): validation, normalize and `train export-sessions`
never import it.
"""

from __future__ import annotations

import glob
import json
import os
import posixpath
import re
import sys
from collections.abc import Iterable

from nanocode.protocol import DROPPED, INT_ARGS, REJECTED, TOOL_ARGS, canonical_args, check_call
from nanocode.tokenizer import ROLES
from train.hub_rows import hub_rows, is_schema_error, read_jsonl

_NUMBERED = re.compile(r"^\s*\d+→")
_GREP_LINE = re.compile(r"^.+?(:\d+:|-\d+-)")
_NOTE = re.compile(r"^(\[.*\]|\(.*\))$")  # a tool's or the agent's note line: [...] or (...)


# ---- normalisation -------------------------------------------------------------------------------
def normalize(conv: dict) -> dict:
    """A conversation as the renderer wants it: None fields (Arrow's fill for absent struct
    fields) dropped, only role/content/tool_call kept per message, top-level keys other than
    messages dropped. Does not validate; idempotent.

    It also re-spells what other publishers of this schema (the original nanocode datasets) wrote
    differently, without adding anything the row does not say:
      - tool_call args stored as a JSON string (a flattened export) are parsed back into an object,
        and put in the tools' wire order (Edit: file_path, old_string, new_string), the order the
        agent's grammar admits;
      - an Edit result that is only numbered lines (the original datasets print the edited file
        without its path) gets the call's own file_path as its first line, which is our Edit
        format (a relative path in the normal form our tool prints, `./a.py` -> `a.py`); without
        a file_path string the result is left as it is (and fails validation): no path is made up;
      - an empty Bash result becomes `(no output)`, what our Bash tool prints for no output.

    Rows out of Arrow have absent struct fields filled with None (a tool_call of None, args that
    another row had): dropped. smol-smoltalk style rows already fit; only role and content are
    kept. The original nanocode datasets (smohammadi/nanocode-tulu-selfoss-evol, -long-context
    and their -preference versions) use this schema with private top-level keys (dropped) and
    differences that would otherwise drop their rows: Edit results are numbered lines without the
    path line (the call's own file_path is added), Bash results may be empty (`(no output)` is
    written), and some rows stop on a tool_result (keep_valid cuts them after the last plain
    assistant reply and counts them under TRIMMED).
    """
    out, call = [], None  # call: the tool call that the next message (a tool_result) answers
    for msg in conv.get("messages") or []:
        if not isinstance(msg, dict):
            out.append(msg)
            call = None
            continue
        m = {"role": msg.get("role"), "content": msg.get("content")}
        tc = msg.get("tool_call")
        if tc is not None:
            args = _json_object(tc.get("args")) if isinstance(tc, dict) else None
            if isinstance(args, dict):
                args = canonical_args(tc.get("name"), {k: v for k, v in args.items() if v is not None})
            m["tool_call"] = {"name": tc.get("name"), "args": args} if isinstance(tc, dict) else tc
        if m["role"] == "tool_result" and isinstance(m["content"], str) and call is not None:
            m["content"] = _as_our_result(call, m["content"])
        tc = m.get("tool_call")
        call = tc if m["role"] == "assistant" and isinstance(tc, dict) else None
        out.append(m)
    return {"messages": out}


def _json_object(value):
    """`value`, or the object a JSON string `value` spells."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        return parsed if isinstance(parsed, dict) else value
    return value


def _as_our_result(call: dict, content: str) -> str:
    """`content` of a result to `call` in our format where another format says the same thing."""
    name, args = call.get("name"), call.get("args")
    if name == "Bash" and content == "":
        return "(no output)"
    if name == "Edit" and isinstance(args, dict):
        path = args.get("file_path")
        lines = content.split("\n")
        numbered = _NUMBERED.match(lines[0]) and all(
            _NUMBERED.match(l) or l.lstrip().startswith(("...", "…")) for l in lines[1:])
        if numbered and isinstance(path, str) and path.strip() and "\n" not in path:
            shown = path if posixpath.isabs(path) else posixpath.normpath(path)
            return shown + "\n" + content
    return content


# ---- validation ----------------------------------------------------------------------------------
def _check_result(tool: str, content: str) -> str | None:
    """Why `content` does not look like `tool`'s result, or None if it does."""
    if content == REJECTED or content.startswith(DROPPED):  # a dropped output: any tool's
        return None
    if content.startswith("error: ") and tool != "Bash":  # Bash output is whatever the command printed
        return None if "\n" not in content else "an error result must be one line"
    lines = content.split("\n")
    if tool == "Read":  # a last `[...]` line: Read's own truncation or the agent's context cut
        if content == "(empty file)" or all(_NUMBERED.match(l) for l in lines[:-1]) and (
                _NUMBERED.match(lines[-1]) or _NOTE.match(lines[-1]) and len(lines) > 1):
            return None
        return "Read results are numbered lines `    n→text`, `(empty file)` or an error line"
    if tool == "Edit":
        if lines[0].strip() and not _NUMBERED.match(lines[0]) and all(
                _NUMBERED.match(l) or l.lstrip().startswith(("...", "…")) for l in lines[1:]):
            return None
        return "Edit results are the path, then numbered lines, or an error line"
    if tool == "Grep":
        if lines[0].startswith("no matches found") and all(_NOTE.match(l) for l in lines[1:]) or all(
                _GREP_LINE.match(l) or l == "--" or l.startswith("... (") or _NOTE.match(l)
                for l in lines):
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


def validate(conv, tokenizer=None, max_tokens: int | None = None, end_on_call: bool = False) -> list[str]:
    """Problems with one conversation as `rule: detail` strings ([] = valid). Checks schema, role
    order, tool names/arguments, tool result formats, and (given a tokenizer and max_tokens) that
    the rendered conversation fits in max_tokens. end_on_call: it may end on an assistant tool call
    (a preference pair between two next steps, as `train rollouts` writes).

    Rules:
      json      the line is not JSON (or not an object)
      schema    messages list, known roles, str content, tool_call shape, system only first
      order     optional system, then user; user -> assistant; assistant with tool_call ->
                tool_result; tool_result only after an assistant tool call, then assistant (or
                user: a rejected call, a repeated call or the step limit hand control back);
                plain assistant -> user or end; at least one assistant message; ends with a plain
                assistant reply (or, with end_on_call, an assistant tool call)
      tool      known tool name, known argument names, required arguments present
      result    a tool_result after Read/Edit/Grep/Bash looks like that tool's output format (a
                note line in brackets or parentheses allowed), an `error: ...` line, or exactly
                `rejected by user`
      length    rendered length <= max_tokens (only when a tokenizer and max_tokens are given)
    """
    if not isinstance(conv, dict):
        return [f"schema: a conversation must be an object, got {type(conv).__name__}"]
    messages = conv.get("messages")
    if not isinstance(messages, list) or not messages:
        return ['schema: a conversation needs "messages": a non-empty list']
    problems = _schema_problems(messages)
    if any(p.startswith("schema: ") for p in problems):
        return problems  # order checks on a broken schema would only add noise
    problems += _order_problems(messages, end_on_call)
    if tokenizer is not None and max_tokens is not None and not problems:
        n = len(tokenizer.render_conversation(normalize(conv))[0])
        if n > max_tokens:
            problems.append(f"length: renders to {n} tokens, more than {max_tokens}")
    return problems


def _schema_problems(messages: list) -> list[str]:
    """`validate`'s schema and tool rules over a non-empty message list."""
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
    return problems


def _order_problems(messages: list[dict], end_on_call: bool) -> list[str]:
    """`validate`'s order and result rules over messages that passed the schema rule."""
    problems: list[str] = []
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
    elif roles[-1] != "assistant" or (messages[-1].get("tool_call") is not None and not end_on_call):
        problems.append(f"order: message {len(roles) - 1}: the conversation must end with an "
                        f"assistant reply (not {roles[-1]}{' with a tool call' if roles[-1] == 'assistant' else ''})")
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
                         for p in validate(row[side], tokenizer, max_tokens, end_on_call=True)]
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


def _load_local(path: str) -> list[dict]:
    try:
        import datasets
    except ModuleNotFoundError:  # a bare accelerator host: plain JSON lines, as on a schema clash
        return read_jsonl(path)
    datasets.disable_progress_bars()
    try:
        return list(datasets.load_dataset("json", data_files=path, split="train"))
    except Exception:  # noqa: BLE001 - Arrow could not unify the rows: read them as plain JSON
        return read_jsonl(path)


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0]}" if str(e) else type(e).__name__


def _load_hub(name: str, split: str = "train") -> list[dict]:
    """Rows of a hub dataset through `datasets.load_dataset`; when that fails on a cast/schema
    error (rows whose `args` structs differ), through train.hub_rows, which reads the split's data
    files one by one without unifying their schemas."""
    import datasets
    try:
        return list(datasets.load_dataset(name, split=split))
    except Exception as e:  # noqa: BLE001 - offline, unknown name, no such split, schema ...
        if not is_schema_error(e):
            raise ValueError(f"could not load the hub dataset {name!r} ({_first_line(e)}); offline "
                             "or no access? download it elsewhere, or pass local .jsonl files "
                             "(--data path/to/file.jsonl)") from e
        cast_error = e
    try:
        return hub_rows(name, split)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"could not load the hub dataset {name!r}: `datasets` could not unify its "
                         f"rows' types ({_first_line(cast_error)}) and reading its data files one "
                         f"by one failed too ({_first_line(e)}); download them elsewhere and pass "
                         "the local .jsonl files (--data path/to/file.jsonl)") from e


def _to_conv(row: dict) -> dict:
    """Loaded rows -> the schema: keeps messages (smol-smoltalk has role/content only) and
    preference pairs, each conversation through `normalize`; other top-level keys (a pair's
    _source or prompt, say) are dropped."""
    if "chosen" in row and "rejected" in row:
        return {"chosen": normalize(row["chosen"]), "rejected": normalize(row["rejected"])}
    return normalize(row)


def load_rows(source: str, split: str = "train") -> list[dict]:
    """Rows (conversations or preference pairs) from a .jsonl file, a directory of them, a glob,
    or a hub dataset name (owner/name).

    Local .jsonl files go through `datasets.load_dataset("json")`; when Arrow cannot unify the
    rows' types (sessions whose "meta" differ in shape) the file is read line by line instead. Hub
    names go through `datasets.load_dataset` too; on a cast/schema error (tool-call `args` structs
    that differ) the split's data files are read one by one (train/hub_rows.py); offline is a
    clear error naming the dataset and saying to pass local files.
    """
    files = _local_files(source)
    if files is not None:
        return [_to_conv(r) for f in files for r in _load_local(f)]
    if re.fullmatch(r"[\w.-]+/[\w.-]+", source) and not source.endswith(".jsonl"):
        return [_to_conv(r) for r in _load_hub(source, split)]
    raise FileNotFoundError(f"data source {source!r} is neither a file, a directory of .jsonl "
                            "files, nor a hub dataset name (owner/name)")


TRIMMED = "trailing tool turns trimmed (rows kept)"  # keep_valid's count of rows it trimmed


def trim_trailing_tools(conv):
    """`conv` cut after its last plain assistant reply when it ends on a tool_result, else None.
    What is cut is an unfinished last step (its tool calls and results, and the user turn that
    asked for it): the original nanocode datasets have rows that stop there. The supervised part
    up to that reply stays as it was. None too when there is no plain reply to cut back to."""
    msgs = conv.get("messages") if isinstance(conv, dict) else None
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict) \
            or msgs[-1].get("role") != "tool_result":
        return None
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_call") is None:
            return {**conv, "messages": msgs[:i + 1]}
    return None


def _trimmed_row(row):
    """A conversation or preference row with trim_trailing_tools applied to it (to each side of a
    pair), or None when nothing was cut."""
    if isinstance(row, dict) and ("chosen" in row or "rejected" in row):
        sides = {k: trim_trailing_tools(row[k]) for k in ("chosen", "rejected") if k in row}
        if all(v is None for v in sides.values()):
            return None
        return {**row, **{k: v for k, v in sides.items() if v is not None}}
    return trim_trailing_tools(row)


def keep_valid(rows: Iterable[dict], tokenizer=None, max_tokens=None) -> tuple[list[dict], dict]:
    """(valid rows, {rule: count}). A bad row is dropped and counted under the rule of its first
    problem, with one exception: a row that ends on a tool_result and is valid once cut after its
    last plain assistant reply (trim_trailing_tools, on each side of a pair) is kept cut, and
    counted under TRIMMED. Nothing else is fixed here."""
    good, counts = [], {}
    for row in rows:
        problems = validate_row(row, tokenizer, max_tokens)
        if problems:
            trimmed = _trimmed_row(row)
            if trimmed is not None and not validate_row(trimmed, tokenizer, max_tokens):
                good.append(trimmed)
                counts[TRIMMED] = counts.get(TRIMMED, 0) + 1
                continue
            rule = problems[0].split(":", 1)[0]
            counts[rule] = counts.get(rule, 0) + 1
        else:
            good.append(row)
    return good, counts


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
