"""Custom slash commands: a markdown file is a prompt the user runs by name.

`.nanocode/commands/review.md` in the project (or `commands/review.md` in the user settings
folder, $NANOCODE_HOME or ~/.config/nanocode) makes `/review`: typing `/review src/app.py` sends
the file's text as the request, with `$ARGUMENTS` replaced by what follows the name (appended on
a line of its own when the text has no `$ARGUMENTS`). A project command overrides a user one of
the same name; neither can shadow a built-in command (agent/commands.COMMANDS). An optional
front matter gives the line /help shows:

    ---
    description: review a file for bugs
    ---
    Review $ARGUMENTS for bugs and say what you would change.

The text only becomes a request: the model still asks before every edit or command, so a
project's command file (untrusted, like the rest of a cloned repository) can say no more than
the user could type. Files are read through the workspace guard (a link out of the project is
skipped), at most MAX_BYTES each; names are letters, digits, `-` and `_`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tools.workspace import PathOutside, is_regular, open_inside, user_settings_dir

MAX_BYTES = 64 * 1024
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class CustomCommand:
    name: str  # "/review"
    description: str
    body: str
    source: str  # the file it came from

    def prompt(self, arguments: str) -> str:
        """The request this command sends with `arguments` (the rest of the line)."""
        if "$ARGUMENTS" in self.body:
            return self.body.replace("$ARGUMENTS", arguments)
        return self.body + (f"\n\n{arguments}" if arguments else "")


def _parse(name: str, text: str, source: str) -> CustomCommand:
    """Front matter (`---` lines, `description: ...`) then the body; the description defaults
    to the body's first line."""
    description, body = "", text.strip()
    if body.startswith("---\n"):
        head, sep, rest = body[4:].partition("\n---")
        if sep:
            body = rest.lstrip("-").strip()
            for line in head.splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "description":
                    description = value.strip()
    first = body.splitlines()[0] if body else ""
    return CustomCommand("/" + name, description or first[:70], body, source)


def _read_folder(folder: Path, root) -> dict[str, CustomCommand]:
    found: dict[str, CustomCommand] = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for file in names:
        stem, ext = os.path.splitext(file)
        if ext != ".md" or not NAME.fullmatch(stem):
            continue
        try:
            fd, _ = open_inside(root, os.path.join(folder, file))
        except (PathOutside, ValueError, OSError):
            continue
        if not is_regular(fd):  # a folder or a FIFO named like a command (fdopen refuses a folder)
            os.close(fd)
            continue
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) <= MAX_BYTES and data.strip():
            found["/" + stem] = _parse(stem, data.decode("utf-8", "replace"), str(folder / file))
    return found


def custom_commands(root, reserved) -> dict[str, CustomCommand]:
    """The user's commands, then the project's over them; never one of the `reserved` names (the
    built-in commands and their aliases: agent/commands.custom)."""
    user = user_settings_dir()
    found = {**_read_folder(user / "commands", user),
             **_read_folder(Path(root) / ".nanocode" / "commands", root)}
    return {k: v for k, v in sorted(found.items()) if k not in reserved}
