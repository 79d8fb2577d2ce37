"""The widgets of the Textual face (agent/tui.py): the transcript, the streamed reply, a tool
call's card, the prompt input (history, pasted blocks) and the approval panel. Everything untrusted they show is
escaped (agent/display.py) and never parsed as markup."""
from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import Suggester
from textual.widgets import Button, Collapsible, Input, Static

from rich.console import Group

from agent.display import call_text, call_title, edit_diff, printable, rule_words, summarize
from nanocode.protocol import REJECTED


# ---- rendering helpers (everything untrusted is escaped: agent/display.py) ---------------------
def plain(text, style: str = "") -> Text:
    """`text` escaped, as a Text: never markup, no control or bidi character."""
    return Text(printable(text), style=style)


def code_view(code: str, lexer: str = "diff") -> Syntax:
    """`code` escaped and highlighted (a diff, a Bash command), wrapped, never cut."""
    return Syntax(printable(code), lexer, theme="ansi_dark", background_color="default",
                  word_wrap=True)


def status_line(agent, model_name: str, tps: float | None, state: str) -> str:
    """The status bar: model, mode, sandbox, context used of the model's, tokens/s, state."""
    parts = [model_name or "nanocode"]
    if agent is not None:
        m = agent.sampler
        parts += [f"mode {agent.mode}", "sandbox" if agent.sandbox is not None else "NO SANDBOX",
                  f"context {m.context_used(agent.messages):,}/{m.max_len:,}",
                  f"{tps:.1f} tok/s" if tps else "– tok/s"]
    return " │ ".join(parts + [state])


# ---- widgets ----------------------------------------------------------------------------------
class Transcript(VerticalScroll):
    """The conversation as it happens; it follows its end unless the user scrolled up (the app
    calls `keep_end` when the terminal is resized)."""

    def add(self, widget) -> None:
        self.mount(widget)
        self.call_after_refresh(self.scroll_end, animate=False)

    def page(self, pages: int) -> None:
        self.scroll_relative(y=pages * max(1, self.size.height - 2), animate=False)

    def keep_end(self) -> None:
        if self.scroll_y >= self.max_scroll_y - 1:  # it followed the end: keep it there
            self.call_after_refresh(self.scroll_end, animate=False)

    def text(self) -> str:
        """Plain text of what it shows (for tests and debugging)."""
        out = [str(w.content) for w in self.query(Static) if isinstance(w.content, (str, Text))]
        out += [c.header + "\n" + (c.result_text or "") for c in self.query(ToolCard)]
        return "\n".join(out)

    def replay(self, messages) -> None:
        """A resumed conversation as it looked: requests, replies, cards with their results."""
        card = None
        for m in messages:
            if m["role"] == "user":
                self.add(Static(plain("> " + m["content"]), classes="user"))
            elif m["role"] == "assistant":
                if m["content"]:
                    reply = Reply()
                    reply.add(m["content"])
                    self.add(reply)
                if m.get("tool_call"):
                    card = ToolCard(m["tool_call"]["name"], m["tool_call"]["args"])
                    self.add(card)
            elif m["role"] == "tool_result" and card is not None:
                card.set_result(m["content"])
                card = None


class Reply(Static):
    """The assistant's prose, grown piece by piece."""

    def __init__(self):
        super().__init__("", classes="assistant")
        self.text = ""

    def add(self, piece: str) -> None:
        self.text += piece
        self.update(plain(self.text))


class ToolCard(Collapsible):
    """One tool call: the header, for Edit the diff (`diff`, numbered in the file when made
    before the edit ran; else numbered from 1), and the result (collapsed, except Edit)."""

    def __init__(self, tool: str, args: dict, diff: str | None = None):
        self.tool, self.args, self.header = tool, args, call_title(tool, args)
        diff = edit_diff(args) if diff is None and tool == "Edit" else diff
        kids = [Static(code_view(diff), classes="diff")] if tool == "Edit" else []
        self.result = Static(Text("running…", style="dim"), classes="result")
        self.result_text = None
        super().__init__(*kids, self.result, title=Text(self.header), collapsed=tool != "Edit",
                         classes="tool")

    def set_result(self, result: str) -> None:
        self.result_text = result
        self.result.update(plain(result))
        self.title = Text(f"{self.header}  ⎯ {summarize(result, width=60)}")  # both escaped
        if result.startswith("error:") or result == REJECTED:
            self.add_class("failed")


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
    approval or takes the `@path` completion. A paste of several lines becomes one `[pasted N lines #k]` token in the line
    (Input holds one line) that `expand` turns back into the text on submit. The draft is never
    selected when focus comes back (the next key would replace it)."""
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

    def show(self, box, root) -> None:
        """Ask about `box` (tui.Approval): the call in full (an Edit as its diff, numbered where
        old_string sits in the file now), and an "always" button only where a rule can be made,
        saying what it would store."""
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
