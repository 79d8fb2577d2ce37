"""The approval panel of the Textual face (agent/tui/app.py): the call the policy asks about, in
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
the terminal. Above them, under the line that says what asks, the call (an Edit as its diff,
made by agent/display.edit_diff as /diff shows it) gets the rows the screen has to give: all
but the status line's and the prompt's, and a few for the transcript from 19 rows up (`fit`;
below, a call that does not fit hides the transcript until the answer). When it is cut, the
panel's bottom border says how many lines are below and how to see them: it scrolls inside the
panel (up/down, page up/down, the wheel) and Ctrl+E expands the panel to the whole screen and
back. Everything shown is escaped (agent/tui/transcript.plain / code_view).
"""
from __future__ import annotations

import threading
import time

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from agent.display import call_text, edit_diff, printable, rule_words
from agent.tui.transcript import code_view, plain

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
                Binding("ctrl+e", "expand", "expand", show=False),
                *(Binding(k, f"scroll_by({n})", show=False) for k, n in
                  (("up", -1), ("down", 1), ("pageup", -10), ("pagedown", 10)))]
    ALLOW_MAXIMIZE = True  # Ctrl+E

    head, body, choices = Text(), Text(), Text()

    def compose(self) -> ComposeResult:
        yield Static(id="approval-head")
        with VerticalScroll(id="approval-scroll"):
            yield Static(id="approval-text")
        yield Choices(id="approval-choices")

    def on_mount(self) -> None:
        scroll = self.query_one("#approval-scroll")
        for name in ("scroll_y", "virtual_size", "size"):
            self.watch(scroll, name, self._say_cut, init=False)

    def show(self, box: PendingApproval, root, draft: bool = False) -> None:
        """Ask about `box`: the call in full (an Edit as its diff, numbered where old_string sits
        in the file now), and the choices (always only where a rule can be made)."""
        self.head = Text.assemble(plain(f"{box.name} ", "bold"), "needs approval: ",
                                  plain(box.reason, "italic"))
        if box.name == "Edit":
            self.body = code_view(edit_diff(box.args, root))
        elif box.name == "Bash":
            self.body = code_view(str(box.args.get("command", "")), "bash")
        else:
            self.body = plain(call_text(box.args))
        self.query_one("#approval-head", Static).update(self.head)
        self.query_one("#approval-text", Static).update(self.body)
        self.choices = choices_text(box.always, draft)
        self.query_one("#approval-choices", Static).update(self.choices)
        self.add_class("show")
        self.fit()
        self.query_one("#approval-scroll").scroll_home(animate=False)

    def hide(self) -> None:
        if self.screen.maximized is self:
            self.screen.minimize()
        self.remove_class("show")
        self.app.query_one("#transcript").display = True

    def fit(self) -> None:
        """Size the call's scroll to the rows left by the panel's border, head and choices (never
        cut), the status line, the prompt and a third of the rows above 16 for the transcript;
        when that is none and the call would be cut, the transcript's last row too (it is
        hidden until the answer). Expanded: the panel's own rows only."""
        width, height = self.app.size
        room = height - 2 - self._rows(self.head, width - 4) - self._rows(self.choices, width - 4)
        if self.screen.maximized is not self:
            room -= 1 + self.app.query_one("#prompt").outer_size.height
            keep = max(0, (height - 16) // 3)
            hide = keep == 0 and self.has_class("show") and self._rows(self.body, width - 6) > room - 1
            self.app.query_one("#transcript").display = not hide
            room -= 0 if hide else max(1, keep)  # a shown transcript takes at least a row
        self.query_one("#approval-scroll").styles.max_height = max(2, room)
        self.call_after_refresh(self._say_cut)

    def _rows(self, renderable, width: int) -> int:
        """The rows `renderable` takes at `width` columns."""
        console = self.app.console
        return len(console.render_lines(renderable, console.options.update_width(max(1, width)), pad=False))

    def _say_cut(self, *_) -> None:
        """The panel's bottom border says how many lines of the call are below the view, and
        how to see them."""
        scroll = self.query_one("#approval-scroll")
        below = round(scroll.max_scroll_y - scroll.scroll_y)
        self.border_subtitle = Text(f"… {below} more lines (↓ PgDn scroll · Ctrl+E expands)") \
            if below > 0 else None

    def on_resize(self, event) -> None:
        self.fit()

    def action_expand(self) -> None:
        """Ctrl+E: the panel on the whole screen, or back."""
        if self.screen.maximized is self:
            self.screen.minimize()
        else:
            self.screen.maximize(self, container=False)
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
