"""/init: a starter AGENTS.md for the project, the memory file every new conversation's system
prompt carries (tools.files.read_memory).

What it holds is read off the project, not written by the model: its name and the README's first
paragraph, the top-level layout (folders with their file counts, the main files), the commands to
run the tests (pytest when there are Python tests, `npm test` when package.json has a test
script, `make test` when the Makefile has the target) and the languages by file count. Trade-off:
a small model summarising a repository would guess; these lines are facts the user then edits
(conventions, what not to touch). It never overwrites a memory file: /init on a project that has
one says so. The file is created through the workspace guard (O_EXCL, no link followed).
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

from nanocode.protocol import MEMORY_FILES
from tools.closest import project_paths
from tools.workspace import PathOutside, is_regular, open_inside

LANGUAGES = {".py": "Python", ".js": "JavaScript", ".ts": "TypeScript", ".go": "Go", ".rs": "Rust",
             ".java": "Java", ".c": "C", ".cc": "C++", ".cpp": "C++", ".rb": "Ruby", ".sh": "shell"}
MAX_LISTED = 12
TITLE = re.compile(r"\A[^\n]*\n[=\-~^*+#]{3,}[ \t]*(?:\n|\Z)")  # a line underlined: Markdown setext, reST


def _read(root: Path, name: str, limit: int = 64 * 1024) -> str:
    try:
        fd, _ = open_inside(root, name)
    except (PathOutside, ValueError, OSError):
        return ""
    if not is_regular(fd):  # a folder (os.fdopen refuses one), a FIFO, a device: nothing to read
        os.close(fd)
        return ""
    with os.fdopen(fd, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def _project_name(root: Path) -> str:
    m = re.search(r'(?m)^name\s*=\s*"([^"]+)"', _read(root, "pyproject.toml"))
    if m:
        return m.group(1)
    try:
        return str(json.loads(_read(root, "package.json") or "{}").get("name") or root.name)
    except (ValueError, AttributeError):
        return root.name


def _readme_paragraph(root: Path) -> str:
    for name in ("README.md", "README.rst", "README.txt", "README"):
        text = _read(root, name)
        paragraphs = [q for p in re.split(r"\n\s*\n", text) if (q := TITLE.sub("", p.strip()).strip())
                      and not q.startswith(("#", "=", "[![", "<"))]
        if paragraphs:
            p = " ".join(paragraphs[0].split())
            return p if len(p) <= 300 else p[:297] + "..."
    return ""


def _test_commands(root: Path, files: list[str]) -> list[str]:
    out = []
    if any(re.search(r"(^|/)(test_[^/]*|[^/]*_test)\.py$", f) for f in files):
        out.append("python -m pytest -q")
    try:
        if "test" in (json.loads(_read(root, "package.json") or "{}").get("scripts") or {}):
            out.append("npm test")
    except (ValueError, AttributeError):
        pass
    if re.search(r"(?m)^test\s*:", _read(root, "Makefile")):
        out.append("make test")
    return out


def starter_notes(root) -> str:
    """The text /init writes (module docstring)."""
    root = Path(root)
    files = project_paths(os.fspath(root))
    folders = Counter(f.split("/", 1)[0] for f in files if "/" in f)
    top = sorted(f for f in files if "/" not in f)
    languages = Counter(LANGUAGES[ext] for f in files if (ext := os.path.splitext(f)[1]) in LANGUAGES)
    lines = ["# AGENTS.md", "", "Notes for coding agents in this project (nanocode puts this file in "
             "its system prompt; edit it: conventions, what not to touch).", "",
             f"## {_project_name(root)}"]
    if about := _readme_paragraph(root):
        lines += ["", about]
    lines += ["", "## Layout"]
    lines += [f"- {d}/ ({n} files)" for d, n in folders.most_common(MAX_LISTED)]
    lines += [f"- {f}" for f in top[:MAX_LISTED]]
    if tests := _test_commands(root, files):
        lines += ["", "## Commands", *(f"- run the tests: `{c}`" for c in tests)]
    if languages:
        lines += ["", "## Languages", "- " + ", ".join(f"{lang} ({n} files)" for lang, n in languages.most_common(4))]
    return "\n".join(lines) + "\n"


def write_starter_notes(root) -> str:
    """Create AGENTS.md from starter_notes; the message to show. Never overwrites."""
    if existing := [n for n in MEMORY_FILES if os.path.lexists(os.path.join(root, n))]:
        return f"{existing[0]} exists already: edit it (/init never overwrites a memory file)"
    text = starter_notes(root)
    try:
        fd, path = open_inside(root, "AGENTS.md", os.O_WRONLY | os.O_CREAT | os.O_EXCL, write=True)
    except (PathOutside, ValueError, OSError) as e:
        return f"could not create AGENTS.md: {e}"
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return (f"wrote {path} ({len(text.splitlines())} lines): new conversations read it; edit it to "
            "add your conventions\n\n" + text)
