"""Copying names from the request: when the model writes a project name the user named, is it
the name, character for character, or a garbled attempt at it? Pure functions over a transcript
and a project on disk (no model, no jax), so a benchmark or an eval sums them over tasks.

The names of a request (request_names) are its tokens that are symbols of the project
(project_symbols). Each is looked for in what the assistant writes, by channel (channels:
thought, args, answer), among the channel's tokens of its kind (a path, a dotted module name,
an identifier): exact when it occurs there as a whole token, garbled when a candidate there is an
attempt at it (is_garble). copy_report counts per request; summarize pools reports into shares.

The trade-off: the rules favour precision over recall. A garble far from the name (two words
swapped, a third of the characters wrong from the first one on) is no attempt here, and a short
name (a 5-letter module) has little room between "garbled" and "another word".
"""
from __future__ import annotations

import ast
import builtins
import keyword
import os
import re

CHANNELS = ("thought", "args", "answer")
REGEX_CLASS, REGEX_QUOTE = re.compile(r"\\[A-Za-z]"), re.compile(r"\\(?=\W)")  # `\b`, `\w`; `\(`, `\.`
LANGUAGE_WORDS = frozenset(keyword.kwlist) | frozenset(dir(builtins))
IDENT = re.compile(r"[A-Za-z_]\w*")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
PATHLIKE = re.compile(r"[\w./-]+")
CODE_SPAN = re.compile(r"`+([^`]+)`+")
CODE_LOOKING = re.compile(r"_|\d|.[A-Z]")
WORD_BOUNDARY = re.compile(r"(?<=[A-Za-z0-9])_+(?=[A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z])")


# ---- symbols and the request's names ------------------------------------------------------------

def project_symbols(root: str) -> set[str]:
    """For every .py file under root (tests too; dot directories and __pycache__ skipped): its
    relative path (`pkg/mod.py`), its module name (`mod`; a package's __init__.py gives the
    package's name), its dotted module name (`pkg.mod`) and the name of every def and class in
    it, nested ones included. A file that does not parse gives its path and module names only."""
    symbols: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            parts = rel[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            symbols.add(rel)
            if parts:
                symbols.update((parts[-1], ".".join(parts)))
            try:
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            symbols.update(node.name for node in ast.walk(tree)
                           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    return symbols


def _request_tokens(request: str) -> list[str]:
    out = []
    for token in PATHLIKE.findall(request):
        token = token.rstrip(".,:;").removeprefix("./")
        if token:
            out.append(token)
    return out


def request_names(request: str, symbols: set[str]) -> list[str]:
    """The symbols the request names, in order of first appearance, each once: its path-like
    tokens (letters, digits, `_ . / -`; trailing `.,:;` and a leading `./` dropped) that are
    symbols; a token that is not one is split at `/` and `.` and its parts that are symbols count
    (`mathx.py` names the module `mathx`)."""
    names: list[str] = []
    for token in _request_tokens(request):
        for candidate in [token] if token in symbols else re.split(r"[/.]", token):
            if candidate in symbols and candidate not in names:
                names.append(candidate)
    return names


# ---- one name in one channel ----------------------------------------------------------------------

def _kind(name: str) -> str:
    """A path (has `/` or ends in `.py`), a dotted module name (has `.`), else an identifier."""
    if "/" in name or name.endswith(".py"):
        return "path"
    return "dotted" if "." in name else "ident"


def _exact(name: str, text: str) -> bool:
    """`name` as a whole token: no letter, digit or `_` right before or after it; a path may follow
    `/` (an absolute path `/root/pkg/mod.py` copies `pkg/mod.py`) but no word character, `.` or
    `-`, and is followed by no word character, `/` or `-`."""
    if _kind(name) == "path":
        pattern = rf"(?<![\w.-]){re.escape(name)}(?![\w/-])"
    else:
        pattern = rf"(?<!\w){re.escape(name)}(?!\w)"
    return re.search(pattern, text) is not None


def _candidates(kind: str, text: str) -> list[str]:
    if kind == "ident":
        return IDENT.findall(text)
    if kind == "dotted":
        return DOTTED.findall(text)
    paths = (t.rstrip(".,:;").removeprefix("./") for t in PATHLIKE.findall(text))
    return [p for p in paths if "/" in p or p.endswith(".py")]


def _prose_candidates(kind: str, text: str) -> list[str]:
    """Candidates of prose that look like code: everything inside backticks, and elsewhere the
    identifiers with `_`, a digit or an inner capital (paths and dotted names always look so)."""
    spans = CODE_SPAN.findall(text)
    outside = _candidates(kind, CODE_SPAN.sub(" ", text))
    return ([c for s in spans for c in _candidates(kind, s)]
            + [c for c in outside if kind != "ident" or CODE_LOOKING.search(c)])


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions and substitutions cost 1)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def word_runs(name: str) -> set[str]:
    """The runs of at least 2 consecutive words of `name` short of the whole name, as written in
    it (words split at `_` and case changes: parse_header_line -> parse_header, header_line)."""
    bounds = [0] + [m.start() for m in WORD_BOUNDARY.finditer(name)] + [len(name)]
    spans = list(zip(bounds, bounds[1:]))
    runs = {name[spans[i][0]:spans[j - 1][1]].strip("_") for i in range(len(spans))
            for j in range(i + 2, len(spans) + 1)}
    return runs - {name.strip("_")}


def is_garble(candidate: str, name: str) -> bool:
    """Whether `candidate` (already known not to be another symbol, a keyword, a builtin or a
    token of the request) is a garbled attempt at `name`: at least 3 characters, != name, with
    1. the same first 2 characters and a normalized edit distance (Levenshtein / the longer
       length) <= 0.5: `movng_average` for `moving_average`;
    2. a normalized edit distance <= 1/3, whatever the start: `slotllib` for `axolotllib`;
    3. a fragment: a proper prefix of the name (`moving` of `def moving\\(`), or a run of at
       least 2 of its words short of the whole name (words split at `_` and case changes:
       `header_line` of `parse_header_line`); a single inner word (`average`) is an ordinary
       word. copy_report counts a candidate only against the request's name nearest to it."""
    if candidate == name or len(candidate) < 3:
        return False
    if name.startswith(candidate) or candidate in word_runs(name):
        return True
    longer = max(len(candidate), len(name))
    if abs(len(candidate) - len(name)) > longer / 2:  # the distance is at least the length gap
        return False
    distance = _distance(candidate, name)
    return distance <= 1 / 3 or (candidate[:2] == name[:2] and distance <= 0.5)


def _distance(a: str, b: str) -> float:
    return edit_distance(a, b) / max(len(a), len(b), 1)


def _first_garble(name: str, candidates: list[str], excluded: set[str], others: list[str]) -> str | None:
    """The first candidate that garbles `name` and no nearer name of `others` (`isarn_totals`
    garbles `yarn_totals`, not also `test_yarn_totals`); a path candidate is cut to the name's
    number of `/` components first (`/root/pkg/mdo.py` -> `pkg/mdo.py`)."""
    depth = name.count("/") + 1
    for c in candidates:
        if _kind(name) == "path":
            c = "/".join(c.split("/")[-depth:])
        if c in excluded or c in LANGUAGE_WORDS or not is_garble(c, name):
            continue
        if not any(_distance(c, o) < _distance(c, name) for o in others):
            return c
    return None


# ---- a transcript ---------------------------------------------------------------------------------

def channels(messages: list[dict]) -> dict[str, str]:
    """The assistant's writing by channel: thought = the content of assistant messages that carry
    a tool call; args = every argument value of every tool call, as text (a Grep pattern's regex
    escapes `\\b`, `\\w`, the backslash of `\\(` removed); answer = the content of assistant
    messages without a tool call."""
    out = {c: [] for c in CHANNELS}
    for m in messages:
        if m.get("role") != "assistant":
            continue
        call = m.get("tool_call")
        if call:
            out["thought"].append(m.get("content") or "")
            args = call.get("args") or {}
            values = [str(v) for v in (args.values() if isinstance(args, dict) else [args])]
            # a Grep pattern's escapes are not part of a name: `\bmean\(` writes `mean`
            out["args"].extend(REGEX_QUOTE.sub("", REGEX_CLASS.sub(" ", v)) if call.get("name") == "Grep" else v
                               for v in values)
        else:
            out["answer"].append(m.get("content") or "")
    return {c: "\n".join(parts) for c, parts in out.items()}


def copy_report(request: str, messages: list[dict], symbols: set[str]) -> dict:
    """Counts for the names of `request` in the assistant's writing of `messages`:
    {"names": n, "<channel>": {"exact", "garbled", "garbled_only"} for thought, args and answer,
    "exact_any", "attempted", "names_list": [{"name", "<channel>": "exact"|"garbled"|None,
    "garbles": {channel: the first garbled candidate}}]} (a channel both exact and garbled says
    "exact" and still lists its garble). garbled_only: garbled and not exact (a channel that also
    writes the name has copied it); exact_any: names exact in some channel; attempted: exact or
    garbled in some channel. In prose (thought, answer) only candidates that look like code count
    (_prose_candidates: "the moving average" is English); in args every candidate counts."""
    names = request_names(request, symbols)
    texts = channels(messages)
    excluded = symbols | set(_request_tokens(request)) | set(IDENT.findall(request))
    report: dict = {"names": len(names), "exact_any": 0, "attempted": 0, "names_list": []}
    for c in CHANNELS:
        report[c] = {"exact": 0, "garbled": 0, "garbled_only": 0}
    for name in names:
        row: dict = {"name": name, "garbles": {}}
        for c in CHANNELS:
            text, kind = texts[c], _kind(name)
            exact = _exact(name, text)
            cands = _candidates(kind, text) if c == "args" else _prose_candidates(kind, text)
            garble = _first_garble(name, cands, excluded, [o for o in names if o != name])
            if garble is not None:
                row["garbles"][c] = garble
            report[c]["exact"] += exact
            report[c]["garbled"] += garble is not None
            report[c]["garbled_only"] += garble is not None and not exact
            row[c] = "exact" if exact else "garbled" if garble is not None else None
        report["exact_any"] += any(row[c] == "exact" for c in CHANNELS)
        report["attempted"] += any(row[c] is not None for c in CHANNELS)
        report["names_list"].append(row)
    return report


def _share(exact: int, garbled_only: int) -> float | None:
    return round(exact / (exact + garbled_only), 4) if exact + garbled_only else None


def summarize(reports: list[dict]) -> dict:
    """Sums of copy_report dicts, and the shares of attempts that are exact: per channel, pooled
    over the channels ("overall") and per name ("names_share" = exact_any / attempted)."""
    out: dict = {"reports": len(reports), "names": sum(r["names"] for r in reports)}
    for c in CHANNELS:
        sums = {k: sum(r[c][k] for r in reports) for k in ("exact", "garbled", "garbled_only")}
        out[c] = {**sums, "share": _share(sums["exact"], sums["garbled_only"])}
    exact = sum(out[c]["exact"] for c in CHANNELS)
    garbled_only = sum(out[c]["garbled_only"] for c in CHANNELS)
    out["overall"] = {"exact": exact, "garbled_only": garbled_only, "share": _share(exact, garbled_only)}
    out["exact_any"] = sum(r["exact_any"] for r in reports)
    out["attempted"] = sum(r["attempted"] for r in reports)
    out["names_share"] = (round(out["exact_any"] / out["attempted"], 4) if out["attempted"] else None)
    return out
