"""What the user types and answers in the Textual face (agent/tui.py): the prompt (history,
pasted blocks, `@path` completion) and the approval panel with the question it shows.

The panel shows the call in full, escaped (agent/tui_transcript.plain / code_view); it takes
y / n / a only while it has focus, so an approval that appears mid-typing never takes a
keystroke meant for the prompt (Tab goes to it, Esc comes back).
"""
from __future__ import annotations

import threading

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import Suggester
from textual.widgets import Button, Input, Static

from agent.display import call_text, edit_diff, rule_words
from agent.tui_transcript import code_view, plain


class MentionSuggester(Suggester):
    """Completes the `@path` word being typed with a project file (agent/mentions.py), shown
    inline; Tab or Right takes it. The file list is read once per prompt face (cheap: git's
    list) and again after a miss."""

    def __init__(self, root):
        super().__init__(use_cache=False, case_sensitive=True)
        self.root, self.files = root, None

    async def get_suggestion(self, value: str) -> str | None:
        from agent.mentions import complete, project_files
        word = value.rsplit(" ", 1)[-1]
        if len(word) < 2 or not word.startswith("@"):
            return None
        if self.files is None:
            self.files = project_files(self.root)
        found = complete(word, self.files)
        if not found:
            self.files = None  # a new file since: list again next time
            return None
        return value[:len(value) - len(word)] + found[0]


class HistoryInput(Input):
    """The prompt: up/down history, page up/down scroll the transcript, Tab answers a waiting
    approval or takes the `@path` completion. A paste of several lines becomes one
    `[pasted N lines #k]` token in the line (Input holds one line) that `expand` turns back into
    the text on submit. The draft is never selected when focus comes back (the next key would
    replace it)."""
    BINDINGS = [Binding("up", "history(-1)", show=False), Binding("down", "history(1)", show=False),
                Binding("pageup", "app.page_transcript(-1)", show=False),
                Binding("pagedown", "app.page_transcript(1)", show=False),
                Binding("tab", "tab", show=False)]

    def __init__(self, root=None, **kw):
        super().__init__(select_on_focus=False, suggester=MentionSuggester(root) if root else None, **kw)
        self.history: list[str] = []
        self.pos, self.draft = 0, ""
        self.pastes: dict[str, str] = {}  # token -> the pasted text

    def _on_paste(self, event) -> None:
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text.strip("\n"):
            return  # one line: Input's own handler (Textual runs each class's _on_paste)
        event.prevent_default()  # not Input's: it would keep the first line only
        event.stop()
        token = f"[pasted {len(text.strip(chr(10)).splitlines())} lines #{len(self.pastes) + 1}]"
        self.pastes[token] = text
        self.insert_text_at_cursor(token)

    def action_tab(self) -> None:
        if self.app.asking is not None:
            self.app.action_focus_approval()
        elif self._suggestion and self._suggestion != self.value:  # the @path completion
            self.value = self._suggestion
            self.cursor_position = len(self.value)
        else:
            self.screen.focus_next()

    def expand(self, text: str) -> str:
        """`text` with each paste token replaced by what was pasted."""
        for token, pasted in self.pastes.items():
            text = text.replace(token, pasted)
        return text

    def remember(self, text: str) -> None:
        if not self.history or self.history[-1] != text:
            self.history.append(text)
        self.pos = len(self.history)

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        if self.pos == len(self.history):
            self.draft = self.value
        self.pos = max(0, min(len(self.history), self.pos + step))
        self.value = self.history[self.pos] if self.pos < len(self.history) else self.draft
        self.cursor_position = len(self.value)


class PendingApproval:
    """A call the turn's worker thread waits on: `done` is set once `answer` is in ("no" until
    the user says otherwise). `always` is the session rule an "always" would add ("" when none
    can be made, and then the choice is not offered)."""

    def __init__(self, name, args, reason, always=""):
        self.name, self.args, self.reason, self.always = name, args, reason, always
        self.answer, self.done = "no", threading.Event()


class ApprovalPanel(Vertical, can_focus=True):
    """The call in full (a long one scrolls: up/down, page up/down, the wheel) and y / n / a;
    Esc goes back to the prompt without answering (Tab there comes back)."""
    BINDINGS = [Binding("y", "answer('yes')", "yes"), Binding("n", "answer('no')", "no"),
                Binding("a", "answer('always')", "always"),
                Binding("escape", "app.focus_prompt", "back to the prompt", show=False),
                *(Binding(k, f"scroll_by({n})", show=False) for k, n in
                  (("up", -1), ("down", 1), ("pageup", -10), ("pagedown", 10)))]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="approval-scroll"):
            yield Static(id="approval-text")
        with Horizontal(id="approval-buttons"):
            yield Button(Text("[y]es"), id="yes", variant="success", compact=True)
            yield Button(Text("[n]o"), id="no", variant="error", compact=True)
            yield Button(Text("[a]lways for this session"), id="always", compact=True)

    def show(self, box: PendingApproval, root) -> None:
        """Ask about `box`: the call in full (an Edit as its diff, numbered where old_string sits
        in the file now), and an "always" button only where a rule can be made, saying what it
        would store."""
        head = Text.assemble(plain(f"{box.name} ", "bold"), "needs approval: ",
                             plain(box.reason, "italic"))
        if box.name == "Edit":
            body = Group(head, plain(f"file: {box.args.get('file_path')}"),
                         code_view(edit_diff(box.args, root)))
        elif box.name == "Bash":
            body = Group(head, code_view(str(box.args.get("command", "")), "bash"))
        else:
            body = Group(head, plain(call_text(box.args)))
        self.query_one("#approval-text", Static).update(body)
        button = self.query_one("#always", Button)
        button.label = Text(f"[a]lways this session: {rule_words(box.always)}")
        button.display = bool(box.always)
        self.query_one("#approval-scroll").scroll_home(animate=False)
        self.add_class("show")

    def action_answer(self, answer: str) -> None:
        self.app.answer_approval(answer)

    def action_scroll_by(self, lines: int) -> None:
        self.query_one("#approval-scroll").scroll_relative(y=lines, animate=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.app.answer_approval(event.button.id)
