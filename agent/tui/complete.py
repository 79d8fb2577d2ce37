"""Completion in the Textual prompt (agent/tui/input.py): what the word before the cursor could
become, and the list under the prompt that shows it.

Two kinds of words complete:
- a slash command typed at the very start of the prompt (`/mo` -> /mode, /model), from the
  shared table agent/commands.COMMANDS, each shown with its arguments and one-line help, then
  the user's own commands (agent/custom_commands.py, read again at each new `/`);
- an `@path` anywhere in the prompt (`@src/pa` -> @src/parser.py), a project file
  (agent/loop/mentions.complete; the file list is read once and again after a miss).

`find` returns a `Completion` (the word's place, the candidates, which one is selected) or None;
what the keys do with it is the prompt's: Tab puts the selected candidate in and, pressed again,
the next one (cycling); Enter puts it in when the word is not a candidate already; up/down move
the selection; Esc hides the list. The list shows only while there is something else to pick.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from agent import commands
from agent.display import printable
from agent.loop.mentions import complete, project_files

SHOWN = 8  # candidates listed at once; the list says how many more there are


@dataclass
class Completion:
    """The word on document row `row`, from column `start` to `end` (the cursor when it was
    typed), and what it could become: `items` as (candidate, help) with `index` selected."""
    row: int
    start: int
    end: int
    word: str
    items: list[tuple[str, str]]
    index: int = 0

    @property
    def selected(self) -> str:
        return self.items[self.index][0]

    def holds_a_candidate(self, word: str) -> bool:
        return any(word == text for text, _ in self.items)

    def visible(self, word: str) -> bool:
        """Something to pick besides `word` (the word as the prompt holds it now)."""
        return bool(self.items) and not (len(self.items) == 1 and self.items[0][0] == word)

    def move(self, step: int) -> None:
        self.index = (self.index + step) % len(self.items)


class ProjectFiles:
    """The project's files for `@path` completion: listed once (git's list, cheap) and again
    after a word that matches none (a file made since)."""

    def __init__(self, root):
        self.root, self.files = root, None

    def complete(self, word: str) -> list[str]:
        if self.files is None:
            self.files = project_files(self.root)
        found = complete(word, self.files)
        if not found:
            self.files = None
        return found


class SlashCommands:
    """The built-in commands and the custom ones of the project at `root` (None: built-ins
    only), as (name, help); the custom ones are read again when a new command is begun."""

    def __init__(self, root):
        self.root, self.custom = root, []

    def items(self, word: str) -> list[tuple[str, str]]:
        """The commands whose name starts with `word`, an exact name first."""
        if word == "/" and self.root is not None:
            self.custom = [(c.name, f"[ARGS]  {c.description}") for c in commands.custom(self.root).values()]
        found = [(c.name, f"{c.args}  {c.help}".strip()) for c in commands.COMMANDS] + self.custom
        return sorted([item for item in found if item[0].startswith(word)],
                      key=lambda item: item[0] != word)


def find(line: str, row: int, col: int, slash: SlashCommands,
         files: ProjectFiles | None) -> Completion | None:
    """What the word ending at column `col` of document row `row` (whose text is `line`) could
    become; None when it is not a completable word or nothing matches."""
    before = line[:col]
    start = max(before.rfind(" "), before.rfind("\t")) + 1
    word = before[start:]
    if row == 0 and start == 0 and word.startswith("/"):
        items = slash.items(word)
    elif word.startswith("@") and files is not None:
        items = [(path, "") for path in files.complete(word)]
    else:
        return None
    return Completion(row, start, col, word, items) if items else None


class CompletionList(Static):
    """The candidates under the prompt, the selected one highlighted, with the keys that take
    them; hidden when there is nothing to pick."""

    def show(self, completion: Completion | None, word: str = "") -> None:
        if completion is None or not completion.visible(word):
            self.remove_class("show")
            return
        items, index = completion.items, completion.index
        first = min(max(0, index - SHOWN + 1), max(0, len(items) - SHOWN))
        width = max(len(text) for text, _ in items) + 2
        out = Text()
        for i, (text, help_) in enumerate(items[first:first + SHOWN], first):
            line = Text(printable(text).ljust(width), style="reverse" if i == index else "bold")
            if help_:
                line.append(printable(help_), style="dim")
            out.append_text(line)
            out.append("\n")
        more = len(items) - SHOWN
        out.append((f"({more} more) " if more > 0 else "") +
                   "Tab: take / next · Enter: take · up/down: choose · Esc: hide", style="dim")
        self.update(out)
        self.add_class("show")
