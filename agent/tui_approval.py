"""The approval panel of the Textual face (agent/tui.py): the call the policy asks about, in
full, and the choices that answer it.

When an approval is pending the panel takes the keys (focus), as in Claude Code: y yes, n no,
a always (only where a rule can be made, saying what it would allow), Esc stops the turn (the
app's binding: a cancel, not a rejection), Tab goes to the draft in the prompt and back (the
draft is kept as it is, and gets the focus back, cursor in place, once the approval is
answered). An approval that appears while the user is typing does not take a keystroke meant
for the draft: until the typing has paused for GUARD_S seconds (`armed`), printable keys and
Backspace go on into the draft and no key answers. Armed, only the panel's own keys act on it
(y, n, a where "always" is offered, Tab, the scroll keys; Esc and Ctrl-C are the app's); every
other printable key and Backspace goes into the draft (type-ahead is never lost), and Enter does
nothing (it neither answers nor sends the draft).

The choices are one wrapped line of text (each clickable), so every choice shows however narrow
the terminal; the call above them scrolls inside the panel (up/down, page up/down, the wheel),
sized so the panel takes at most half the screen. Everything shown is escaped
(agent/tui_transcript.plain / code_view).
"""
from __future__ import annotations

import threading
import time

from rich.console import Group
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from agent.display import call_text, edit_diff, printable, rule_words
from agent.tui_transcript import code_view, plain

GUARD_S = 0.8  # a pause in typing this long before a key may answer a new approval


class PendingApproval:
    """A call the turn's worker thread waits on: `done` is set once `answer` is in ("no" until
    the user says otherwise). `always` is the session rule an "always" would add ("" when none
    can be made, and then the choice is not offered)."""

    def __init__(self, name, args, reason, always=""):
        self.name, self.args, self.reason, self.always = name, args, reason, always
        self.answer, self.done = "no", threading.Event()


def choices_text(always: str, draft: bool) -> Text:
    """The choices, each a click target, and how else to answer: one Text that wraps."""
    out = Text()
    labels = [("[y]es", "yes"), ("[n]o", "no")]
    if always:
        labels.append((f"[a]lways this session: {rule_words(always)}", "always"))
    for label, answer in labels:
        out.append(printable(label), Style(bold=True, meta={"@click": f"answer('{answer}')"}))
        out.append("   ")
    out.append("Esc: stop the turn · Tab: " + ("your draft (kept)" if draft else "the prompt"),
               style="dim")
    return out


class Choices(Static):
    """The clickable choices line."""

    def action_answer(self, answer: str) -> None:
        self.app.answer_approval(answer)


class ApprovalPanel(Vertical, can_focus=True):
    """The call in full and its choices; y / n / a answer once `armed` (see the module doc)."""
    BINDINGS = [Binding("y", "answer('yes')", "yes"), Binding("n", "answer('no')", "no"),
                Binding("a", "answer('always')", "always"),
                Binding("tab", "app.focus_prompt", "the draft", show=False),
                *(Binding(k, f"scroll_by({n})", show=False) for k, n in
                  (("up", -1), ("down", 1), ("pageup", -10), ("pagedown", 10)))]

    choices = Text()

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="approval-scroll"):
            yield Static(id="approval-text")
        yield Choices(id="approval-choices")

    def show(self, box: PendingApproval, root, draft: bool = False) -> None:
        """Ask about `box`: the call in full (an Edit as its diff, numbered where old_string sits
        in the file now), and the choices (always only where a rule can be made)."""
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
        self.choices = choices_text(box.always, draft)
        self.query_one("#approval-choices", Static).update(self.choices)
        self.fit()
        self.query_one("#approval-scroll").scroll_home(animate=False)
        self.add_class("show")

    def fit(self) -> None:
        """Size the call's scroll so the panel (border, call, a blank line, choices) takes at
        most half the screen and the choices are never cut."""
        width, height = self.app.size
        lines = len(self.choices.wrap(self.app.console, max(1, width - 4)))
        self.query_one("#approval-scroll").styles.max_height = max(2, height // 2 - 3 - lines)

    def on_resize(self, event) -> None:
        self.fit()

    @property
    def armed(self) -> bool:
        """No typing in the prompt for GUARD_S seconds: a key now is meant for the approval."""
        return time.monotonic() - self.app.query_one("#prompt").typed_at >= GUARD_S

    def on_key(self, event) -> None:
        if not (event.is_printable or event.key == "backspace"):
            return  # Tab, the scroll keys, Esc, Ctrl-C: the bindings'
        box = self.app.asking
        answers = {"y", "n"} | ({"a"} if box is not None and box.always else set())
        if not self.armed or event.key not in answers:
            event.stop()  # for the draft: no binding sees it
            event.prevent_default()
            self.app.query_one("#prompt").type_key(event.character if event.is_printable else None)

    def action_answer(self, answer: str) -> None:
        self.app.answer_approval(answer)

    def action_scroll_by(self, lines: int) -> None:
        self.query_one("#approval-scroll").scroll_relative(y=lines, animate=False)
