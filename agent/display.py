"""Untrusted text made safe for a terminal, and how calls and results read on one line.

Everything the faces show (agent/tui.py, agent/repl.py, agent/headless.py) that came from the
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
import re

_CONTROLS = [*(c for c in range(0x20) if c not in (0x09, 0x0A)), 0x7F, *range(0x80, 0xA0)]
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_SHOW = {c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"\\u{c:04x}" for c in _BIDI}
_JSON = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), *_BIDI)}


def printable(text) -> str:
    """`str(text)` with every character a terminal could act on replaced by a visible escape:
    C0 controls except newline and tab (ESC, BEL, CR, backspace, NUL ...), DEL and the C1
    controls U+0080-U+009F (U+009B is CSI to some terminals) as `\\x1b`, `\\x9b`; the bidi
    embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069 as `\\u202e`. Everything
    else is kept. One character maps to one escape and escapes are plain ASCII, so escaping a
    stream piece by piece equals escaping it whole, and escaping twice changes nothing."""
    return str(text).translate(_SHOW)


def printable_json(obj) -> str:
    """`json.dumps(obj, ensure_ascii=False)` with DEL, C1 and bidi characters written as
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
        text = json.dumps(v, ensure_ascii=False) if isinstance(v, str) else str(v)
        parts.append(f"{k}={text if len(text) <= 60 else text[:57] + '...'}")
    out = f"{name}({', '.join(parts)})"
    return printable(out if len(out) <= width else out[:width] + "...")


def call_title(name: str, args: dict) -> str:
    """A call's short title, escaped: `Read path`, `Grep 'pat' path`, `Bash <first line>`."""
    if name in ("Read", "Edit") and "file_path" in args:
        return printable(f"{name} {args['file_path']}")
    if name == "Grep":
        return printable(f"Grep {args.get('pattern', '')!r} {args.get('path', '')}".rstrip())
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


def edit_diff(args: dict, root=None) -> str:
    """Unified diff of an Edit call (old_string -> new_string; a new file when there is none),
    escaped, its context spanning both strings: every line of each is shown, none elided. With
    the project `root`, the hunk is numbered where old_string sits in the file (read now, before
    the edit runs), not from 1."""
    path = printable(args.get("file_path", "?"))
    old = printable(args.get("old_string") or "").splitlines()
    new = printable(args.get("new_string", "")).splitlines()
    lines = list(difflib.unified_diff(old, new, f"a/{path}" if old else "/dev/null", f"b/{path}",
                                      lineterm="", n=max(len(old), len(new))))
    start = _line_of(root, args) if root is not None and old else None
    if start is not None and len(lines) > 2 and lines[2].startswith("@@"):
        lines[2] = re.sub(r"^@@ -1(,?\d*) \+1(,?\d*) @@",
                          lambda m: f"@@ -{start}{m.group(1)} +{start}{m.group(2)} @@", lines[2])
    return "\n".join(lines)


def _line_of(root, args) -> int | None:
    """The 1-based line where the Edit's old_string starts in its file, when it is there once."""
    from tools.workspace import PathOutside, resolve
    try:
        p = resolve(root, args.get("file_path") or "", write=False, allow_outside=False)
        if os.path.getsize(p) > 5 * 2**20:
            return None
        text = open(p, encoding="utf-8", errors="surrogateescape").read().replace("\r\n", "\n")
    except (OSError, ValueError, PathOutside):
        return None
    old = args.get("old_string") or ""
    at = text.find(old)
    return text.count("\n", 0, at) + 1 if at >= 0 and text.find(old, at + 1) < 0 else None
