"""Untrusted text made safe for a terminal, and how calls and results read on one line.

Everything the faces show (agent/tui/app.py, agent/repl.py, agent/headless.py) that came from the
model, a tool, a file or a session (prose, call arguments, results, diffs, error messages) goes
through `printable` before a terminal sees it; a file the model reads, or a Bash `printf
'\\033[2J'`, then shows what it holds instead of clearing the screen, retitling the terminal,
writing the clipboard (OSC 52) or reordering the text around it.

Markup is not handled here: the Textual face wraps the result in `rich.text.Text` or `Syntax`
(never a markup string), so `[bold]`, `[link=...]` or `[@click=...]` shows literally; the REPL
and headless mode write plain text.
"""
from __future__ import annotations

import difflib
import json
import os

from tools.files import EditMismatch, edited_text
from tools.workspace import PathOutside, resolve

_CONTROLS = [*(c for c in range(0x20) if c not in (0x09, 0x0A)), 0x7F, *range(0x80, 0xA0)]
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_SURROGATES = range(0xD800, 0xE000)  # a file name that is not UTF-8 (os.fsdecode's \udcXX)
_SHOW = {c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"\\u{c:04x}" for c in (*_BIDI, *_SURROGATES)}
_JSON = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), *_BIDI, *_SURROGATES)}


def printable(text) -> str:
    """`str(text)` with every character a terminal could act on replaced by a visible escape:
    C0 controls except newline and tab (ESC, BEL, CR, backspace, NUL ...), DEL and the C1
    controls U+0080-U+009F (U+009B is CSI to some terminals) as `\\x1b`, `\\x9b`; the bidi
    embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069 as `\\u202e`, and lone
    surrogates (a non-UTF-8 file name's bytes, which no terminal can be sent) as `\\udce9`. Everything
    else is kept. One character maps to one escape and escapes are plain ASCII, so escaping a
    stream piece by piece equals escaping it whole, and escaping twice changes nothing."""
    return str(text).translate(_SHOW)


def printable_json(obj) -> str:
    """`json.dumps(obj, ensure_ascii=False)` with DEL, C1, bidi and surrogate characters written as
    `\\u` escapes too (json.dumps escapes C0 itself): any JSON parser reads the same value,
    and no character of the line is one a terminal acts on."""
    return json.dumps(obj, ensure_ascii=False).translate(_JSON)


def rule_words(rules: str) -> str:
    """Session rules (tools.permissions.Policy.always: "Edit", "Bash(git status:*)",
    "Read(/x/**)", joined by ", ") as the faces say them, escaped: "Edit" is every edit to any
    file of the project, which its name alone does not tell."""
    words = ["Edit on any file in the project" if r == "Edit" else r
             for r in (rules.split(", ") if rules else [])]
    return printable(", ".join(words))


CALL_MARK, RESULT_MARK = "• ", "  └ "  # a call's line and its result's, in --plain and -p progress


def usage_line(res) -> str:
    """A turn's usage on one line (a nanocode.protocol.TurnResult): tokens read and written,
    the decode rate, the whole turn's seconds."""
    u, tps = res.usage, res.tokens_per_second
    rate = f", {tps:.1f} tok/s" if tps else ""
    return (f"{u['prompt_tokens']:,} tokens in, {u['completion_tokens']:,} out{rate}, "
            f"{u['seconds']:.1f} s")


def summarize(result: str, width: int = 100) -> str:
    """The first line of `result` (escaped, cut at `width`) and how many lines follow."""
    lines = printable(result).splitlines() or [""]
    first = lines[0] if len(lines[0]) <= width else lines[0][:width] + "..."
    return first + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


def format_call(name, args, width: int = 100) -> str:
    """`Name(key=value, ...)` on one line, escaped: each value cut at 60 characters, the whole at
    `width`. A progress line, never an approval (those show `call_text`)."""
    parts = []
    for k, v in args.items():
        text = quoted(v) if isinstance(v, str) else str(v)
        parts.append(f"{k}={text if len(text) <= 60 else text[:57] + '...'}")
    out = f"{name}({', '.join(parts)})"
    return printable(out if len(out) <= width else out[:width] + "...")


def quoted(value: str) -> str:
    """A string argument on one line, as written: in double quotes, a newline shown as \\n, a
    backslash kept single (a Grep pattern `def f\\(` reads as the model wrote it, not as JSON)."""
    return '"' + value.replace("\n", "\\n") + '"'


def call_title(name: str, args: dict) -> str:
    """A call's short title, escaped: `Read path`, `Grep 'pat' path`, `Bash <first line>`."""
    if name in ("Read", "Edit") and "file_path" in args:
        return printable(f"{name} {args['file_path']}")
    if name == "Grep":
        return printable(f"Grep {quoted(str(args.get('pattern', '')))} {args.get('path', '')}".rstrip())
    if name == "Bash":
        lines = printable(args.get("command", "")).splitlines() or [""]
        cut = len(lines[0]) > 80 or len(lines) > 1
        return f"Bash {lines[0][:80]}" + ("…" if cut else "")
    return format_call(name, args, width=90)


def call_text(args: dict) -> str:
    """Every argument of a call in full, escaped, never cut: `key: value` lines, the further
    lines of a multi-line value indented. What an approval shows."""
    lines = []
    for k, v in args.items():
        first, *rest = printable(v).split("\n")
        lines += [f"  {k}: {first}", *(f"    {ln}" for ln in rest)]
    return "\n".join(lines)


def unified_diff(before: str, after: str, old_name: str, new_name: str, context: int = 3) -> str:
    """The unified diff of two texts as git writes it (what /diff shows): lines split at \\n only,
    and a last line with no newline followed by `\\ No newline at end of file`. Not escaped."""
    def lines(text: str) -> list[str]:
        out = [line + "\n" for line in text.split("\n")]
        out[-1] = out[-1][:-1]  # the text after the last newline ("" when it ends in one)
        return out if out[-1] else out[:-1]
    out = []
    for line in difflib.unified_diff(lines(before), lines(after), old_name, new_name, n=context):
        out += [line[:-1]] if line.endswith("\n") else [line, "\\ No newline at end of file"]
    return "\n".join(out)


def edit_diff(args: dict, root=None) -> str:
    """Unified diff of an Edit call, escaped. With the project `root` and a file that old_string
    is in once, it is the file before and after the edit (tools.files.edited_text, what the Edit
    will write), 3 lines of context, numbered in the file, as /diff will show it once written
    (unified_diff): an old_string that ends mid-line shows the whole line it leaves. A new file
    is its whole text. Otherwise (no root, an edit that will fail) it is old_string ->
    new_string, every line of each, numbered from 1."""
    path = printable(args.get("file_path", "?"))
    old_s, new_s = args.get("old_string") or "", args.get("new_string", "")
    new_s = new_s if isinstance(new_s, str) else ""
    before_after = _file_edit(root, args.get("file_path"), old_s, new_s) if root is not None and old_s else None
    if before_after is not None:
        before, after = (printable(t) for t in before_after)
        return unified_diff(before, after, f"a/{path}", f"b/{path}")
    if not old_s:  # a new file: its whole text, its last line as written
        return unified_diff("", printable(new_s), "/dev/null", f"b/{path}")
    old, new = (printable(t).removesuffix("\n") + "\n" if t else "" for t in (old_s, new_s))  # no file end
    return unified_diff(old, new, f"a/{path}", f"b/{path}", context=max(old.count("\n"), new.count("\n")))


def _file_edit(root, file_path, old: str, new) -> tuple[str, str] | None:
    """(the file's text now, its text after the Edit), both with \\n line ends, or None when the
    file cannot be read or the Edit will not apply."""
    if not isinstance(file_path, str) or not isinstance(old, str) or not isinstance(new, str):
        return None
    try:
        p = resolve(root, file_path, write=False, allow_outside=False)
        if not os.path.isfile(p) or os.path.getsize(p) > 5 * 2**20:  # a FIFO would block
            return None
        data = open(p, "rb").read()
    except (OSError, ValueError, PathOutside):
        return None
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")
    try:
        after = edited_text(text, old, new)[0]
    except EditMismatch:
        return None
    return text.replace("\r\n", "\n"), after
