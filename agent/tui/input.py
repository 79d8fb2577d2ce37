"""What the user types in the Textual face (agent/tui/app.py): the prompt.

The prompt is a multi-line text area that grows with its text (up to a few lines, then it
scrolls). Keys:
- Enter sends (posts `HistoryInput.Submitted`); Shift+Enter or Ctrl+J inserts a newline;
- a paste keeps its lines; one of more than FOLD_LINES lines shows as a `[pasted N lines #k]`
  token that `unfold` turns back into the text on send;
- up/down: on the first / last line they walk the history (the draft comes back at the end),
  elsewhere they move the cursor; page up/down scroll the transcript;
- Tab completes (agent/tui/complete.py: `/command` at the start, `@path` anywhere): it puts the
  selected candidate in, and pressed again the next one; with nothing to complete it does
  nothing: Tab never moves the focus out of the prompt, except to a waiting approval;
- with the candidate list showing, up/down choose, Enter takes a candidate when the word is not
  one already, Esc hides the list (else Esc is the app's: it stops a running turn);
- Ctrl-D on an empty prompt quits (as in a shell); otherwise it deletes forward.
`typed_at` is when a key last typed into the draft (an approval waits for a pause,
agent/tui/approval.py). `value` and `cursor_position` read and set the text and the cursor as a
one-line Input's would.

The approval panel lives in agent/tui/approval.py (ApprovalPanel and PendingApproval are
importable from here too).
"""
from __future__ import annotations

import time

from textual.actions import SkipAction
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from agent.tui.approval import ApprovalPanel, PendingApproval  # noqa: F401 - importable here
from agent.tui.complete import Completion, ProjectFiles, SlashCommands, find

FOLD_LINES = 12  # a paste of more lines shows as one token in the prompt


class HistoryInput(TextArea):
    """The prompt (see the module doc)."""
    BINDINGS = [Binding("up", "up", show=False), Binding("down", "down", show=False),
                Binding("pageup", "app.page_transcript(-1)", show=False),
                Binding("pagedown", "app.page_transcript(1)", show=False),
                Binding("tab", "tab", show=False), Binding("escape", "escape", show=False),
                Binding("ctrl+d", "eof", show=False)]

    class Submitted(Message):
        """Enter: `typed` as the prompt showed it (stripped), `text` with the pastes put back."""

        def __init__(self, prompt: HistoryInput, typed: str, text: str):
            super().__init__()
            self.prompt, self.typed, self.text = prompt, typed, text

    class Completions(Message):
        """The candidates changed: `completion` (None: none) and the word as it stands."""

        def __init__(self, completion: Completion | None, word: str):
            super().__init__()
            self.completion, self.word = completion, word

    def __init__(self, root=None, placeholder: str = "", **kw):
        self.sent: list[str] = []  # the prompts sent, oldest first (TextArea's `history` is undo)
        self.pos, self.draft = 0, ""
        self.pastes: dict[str, str] = {}  # token -> the pasted text
        self.files = ProjectFiles(root) if root else None
        self.slash = SlashCommands(root)
        self.completion: Completion | None = None
        self.typed_at = 0.0
        self._putting = False  # a candidate going in: the completion stays as it is
        self._hidden = False  # Esc hid the list: until the next edit
        super().__init__(soft_wrap=True, tab_behavior="focus", highlight_cursor_line=False,
                         placeholder=placeholder, **kw)

    # ---- the text as a one-line Input would have it ---------------------------------------------
    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    @property
    def cursor_position(self) -> int:
        row, col = self.cursor_location
        return sum(len(line) + 1 for line in self.document.lines[:row]) + col

    @cursor_position.setter
    def cursor_position(self, offset: int) -> None:
        row = 0
        lines = self.document.lines
        while row < len(lines) - 1 and offset > len(lines[row]):
            offset -= len(lines[row]) + 1
            row += 1
        self.move_cursor((row, min(offset, len(lines[row]))))

    # ---- keys -------------------------------------------------------------------------------------
    async def _on_key(self, event) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()  # not TextArea's newline
            self.action_enter()
        elif event.key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            self.type_key("\n")
        elif event.is_printable:
            self.typed_at = time.monotonic()

    def type_key(self, text: str | None) -> None:
        """Type `text` at the cursor (None: Backspace), as a key would (approval hand-off)."""
        self.typed_at = time.monotonic()
        if text is None:
            self.action_delete_left()
        else:
            self.move_cursor(self.replace(text, *self.selection,
                                          maintain_selection_offset=False).end_location)

    async def _on_paste(self, event) -> None:
        event.prevent_default()  # not TextArea's: the lines are normalized (and long ones folded)
        event.stop()
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        n = len(text.strip("\n").splitlines())
        if n > FOLD_LINES:
            token = f"[pasted {n} lines #{len(self.pastes) + 1}]"
            self.pastes[token] = text
            text = token
        self.type_key(text)

    def action_enter(self) -> None:
        c = self.completion
        if c is not None and not self._hidden and not c.holds_a_candidate(self._word(c)):
            self._put(c)
            return
        typed, text = self.text.strip(), self.unfold(self.text).strip()
        self.value = ""
        if typed:
            self.remember(typed)
            self.post_message(self.Submitted(self, typed, text))

    def action_tab(self) -> None:
        if self.app.asking is not None:
            self.app.action_focus_approval()
            return
        c = self.completion
        if c is None:
            return  # nothing to complete: the focus stays here
        if self._word(c) == c.selected:  # it is in already: the next one
            c.move(1)
        self._put(c)

    def action_up(self) -> None:
        if self._listing():
            self._choose(-1)
        elif self.cursor_at_first_line:
            self.action_history(-1)
        else:
            self.action_cursor_up()

    def action_down(self) -> None:
        if self._listing():
            self._choose(1)
        elif self.cursor_at_last_line:
            self.action_history(1)
        else:
            self.action_cursor_down()

    def action_escape(self) -> None:
        if not self._listing():
            raise SkipAction()  # the app's Esc: stop a running turn
        self._hidden = True
        self._announce()

    async def action_eof(self) -> None:
        if self.text:
            self.action_delete_right()
        else:
            await self.app.action_quit()

    # ---- completion ---------------------------------------------------------------------------
    def update_suggestion(self) -> None:
        """After every edit (TextArea's hook): complete the word before the cursor anew."""
        if not self._putting:
            self._hidden = False
        self._complete()

    def watch_selection(self) -> None:
        self._complete()  # the cursor moved: another word

    def _complete(self) -> None:
        if self._putting:
            return
        row, col = self.cursor_location
        line = self.document[row]
        self.completion = find(line, row, col, self.slash, self.files)
        self._announce()

    def _word(self, c: Completion) -> str:
        return self.document[c.row][c.start:c.end]

    def _listing(self) -> bool:
        c = self.completion
        return c is not None and not self._hidden and c.visible(self._word(c))

    def _choose(self, step: int) -> None:
        self.completion.move(step)
        self._announce()

    def _put(self, c: Completion) -> None:
        """Replace the word with the selected candidate; the candidates stay (Tab cycles)."""
        self._putting = True
        try:
            self.replace(c.selected, (c.row, c.start), (c.row, c.end))
            c.end = c.start + len(c.selected)
            self.move_cursor((c.row, c.end))
        finally:
            self._putting = False
        self._announce()

    def _announce(self) -> None:
        """Show the selected candidate's rest after the cursor and tell the list."""
        c = None if self._hidden else self.completion
        word = self._word(c) if c else ""
        at_end = c is not None and self.cursor_location == (c.row, c.end) and \
            c.end == len(self.document[c.row])
        self.suggestion = c.selected[len(word):] if at_end and c.selected.startswith(word) else ""
        self.post_message(self.Completions(c, word))

    # ---- history and pastes -------------------------------------------------------------------
    def unfold(self, text: str) -> str:
        """`text` with each paste token replaced by what was pasted."""
        for token, pasted in self.pastes.items():
            text = text.replace(token, pasted)
        return text

    def remember(self, text: str) -> None:
        if not self.sent or self.sent[-1] != text:
            self.sent.append(text)
        self.pos = len(self.sent)

    def action_history(self, step: int) -> None:
        if not self.sent:
            return
        if self.pos == len(self.sent):
            self.draft = self.value
        self.pos = max(0, min(len(self.sent), self.pos + step))
        self.value = self.sent[self.pos] if self.pos < len(self.sent) else self.draft
