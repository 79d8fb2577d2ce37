"""@-mentions: `@path` in a request pins that project file into the turn, and both faces
complete project paths after an `@`.

`mentioned(text, root)` lists the files a request names this way: a word starting with `@`
whose rest is a regular file inside the project (so `@property`, `a@b.com` or a path outside
the project pin nothing). The loop pins each as a Read step the model did not have to take (its
call and result in the conversation, the result cut to its share of the context like any
other), which is the form the model was trained to read a file in. `complete(word, files)` gives
the completions of an `@` word among the project's files (tools.closest.project_paths: git's
list, else a walk).
"""
from __future__ import annotations

import os
import re

from tools.closest import project_paths
from tools.workspace import PathOutside, is_inside, resolve

MENTION = re.compile(r"(?<!\S)@([^\s@]+)")
MAX_PINS = 4  # files one request may pin (each takes a result's share of the context)
MAX_COMPLETIONS = 20


def mentioned(text: str, root) -> list[str]:
    """The project files `text` @-mentions, as written (trailing punctuation dropped), once each."""
    out = []
    for m in MENTION.finditer(text):
        path = m.group(1).rstrip(".,;:!?)'\"")
        try:
            full = resolve(root, path, write=False, allow_outside=False)
        except (PathOutside, ValueError, OSError):
            continue
        if os.path.isfile(full) and is_inside(root, full) and path not in out:
            out.append(path)
    return out[:MAX_PINS]


def complete(word: str, files: list[str]) -> list[str]:
    """`@` + each project file the `@word` could be: prefix matches first, then files whose name
    starts with it, at most MAX_COMPLETIONS. A name that is not UTF-8 is not offered (no
    prompt or terminal can hold it; Glob and Bash still reach the file)."""
    if not word.startswith("@"):
        return []
    q = word[1:]
    files = [f for f in files if _is_text(f)]
    first = [f for f in files if f.startswith(q)]
    named = [f for f in files if os.path.basename(f).startswith(q) and f not in first]
    return ["@" + f for f in (first + named)[:MAX_COMPLETIONS]]


def _is_text(name: str) -> bool:
    """A name a prompt can hold: not one whose bytes are not UTF-8 (os.fsdecode's surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def project_files(root) -> list[str]:
    return project_paths(os.fspath(root))
