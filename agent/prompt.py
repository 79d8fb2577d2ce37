"""The system prompt: identity, style, the four tools with one example call each, the working
directory, and the project's memory file. Training data (`train synth`) and the agent render the
same text, so the model sees at inference exactly what it was trained on. Kept short (~330 tokens
with a 4k-vocab tokenizer): a small model's context is precious and every turn re-reads it.
"""
from __future__ import annotations

import os
from pathlib import Path

MEMORY_FILES = ("NANOCODE.md", "AGENTS.md")
MEMORY_CHARS = 4000  # ~1,000 tokens: cut memory beyond this (the marker says so)

PROMPT = """\
you are nanocode, a coding agent working in the user's project.
style: lowercase prose, brief. think out loud in a sentence before acting. read before you edit; \
make small, precise edits; say plainly when unsure; do only what was asked. when done, say what \
changed and why. no flattery, never ask "anything else?".
tools (one call per message):
- Read(file_path, offset?, limit?): numbered lines of a file. e.g. Read(file_path="src/app.py")
- Edit(file_path, old_string?, new_string): replace the unique old_string; no old_string creates \
the file. e.g. Edit(file_path="src/app.py", old_string="return a", new_string="return a + b")
- Grep(pattern, path?, -A?, -B?): regex search in every text file under path. \
e.g. Grep(pattern="def main", path="src")
- Bash(command): run a shell command in the project root. e.g. Bash(command="python -m pytest -q")
working directory: {cwd}"""


def read_memory(root) -> tuple[str, str] | None:
    """(file name, text) of the project's memory file, cut to MEMORY_CHARS, or None."""
    for name in MEMORY_FILES:
        path = Path(root) / name
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
            if len(text) > MEMORY_CHARS:
                text = text[:MEMORY_CHARS] + f"\n[... {name} cut at {MEMORY_CHARS} characters]"
            return name, text
    return None


def system_prompt(cwd: str, memory: tuple[str, str] | None = None) -> str:
    """The system message for a project shown at `cwd`, with its memory file appended."""
    text = PROMPT.format(cwd=os.fspath(cwd))
    if memory:
        name, body = memory
        text += f"\n\nproject notes ({name}):\n{body}"
    return text
