"""What the Textual face (agent/tui/app.py) shows of the conversation: the transcript, a running
turn's events as widgets in it (`LiveTurn`: the reply streamed, one card per tool call, notes; a
reply the driver takes back and resamples is removed again), and the two ways untrusted text
becomes something to show (`plain`, `code_view`).

Everything untrusted goes through agent/display.printable and into a rich Text or Syntax, never a
markup string: no model output, tool result or file reaches the terminal as a control sequence,
and `[bold]` shows as written.
"""
from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Collapsible, Static

from agent.display import call_title, edit_diff, printable, rule_words, summarize
from nanocode.protocol import REJECTED, Approval, Status, Text as TextEvent, ToolCall, ToolResult, TurnEnd


def plain(text, style: str = "") -> Text:
    """`text` escaped, as a Text: never markup, no control or bidi character."""
    return Text(printable(text), style=style)


def code_view(code: str, lexer: str = "diff") -> Syntax:
    """`code` escaped and highlighted (a diff, a Bash command), wrapped, never cut."""
    return Syntax(printable(code), lexer, theme="ansi_dark", background_color="default",
                  word_wrap=True)


class Transcript(VerticalScroll):
    """The conversation as it happens; it follows its end unless the user scrolled up (the app
    calls `keep_end` when the terminal is resized). `last_note` is the text of the last note."""
    last_note = ""

    def add(self, widget):
        self.mount(widget)
        self.call_after_refresh(self.scroll_end, animate=False)
        return widget

    def note(self, text: str, style: str = "dim") -> Static:
        """A status note (escaped, dimmed unless `style` says otherwise)."""
        self.last_note = text
        return self.add(Static(plain(text, style), classes="note"))

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

    def replay(self, messages, undone=None) -> None:
        """A resumed conversation as it looked: requests, replies, cards with their results; after
        each request that /undo undid (`undone`: agent/sessions.undone_requests), a note saying so."""
        card, shown = None, None  # shown: the number of the undone request being replayed
        for i, m in enumerate(messages):
            if m["role"] == "user":
                self._undone_note(shown)
                shown = (undone or {}).get(i)
                self.add(Static(plain("> " + m["content"]), classes="user"))
            elif m["role"] == "assistant":
                if m["content"]:
                    reply = ReplyView()
                    reply.add(m["content"])
                    self.add(reply)
                if m.get("tool_call"):
                    card = ToolCard(m["tool_call"]["name"], m["tool_call"]["args"])
                    self.add(card)
            elif m["role"] == "tool_result" and card is not None:
                card.set_result(m["content"])
                card = None
        self._undone_note(shown)

    def _undone_note(self, request: int | None) -> None:
        if request is not None:
            self.note(f"[request {request} was undone with /undo: its changes were taken back]")


class ReplyView(Static):
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


SAID = {"yes": "allowed once", "no": "rejected", "cancelled": "cancelled, not run"}


class LiveTurn:
    """One running turn's events (agent/loop/driver.py) as widgets in `transcript`: prose streamed
    into a ReplyView, a ToolCard per call (its result filled in), a note per approval and status.

    A step is sampled until it stands: a reply whose call the driver takes back (malformed, a
    repeat, or failed without changing anything; its Status has took_back set) is
    removed again, with its card and approval note, so only replies that count stay on screen;
    one note per step, updated, says that and how often it was resampled."""

    def __init__(self, transcript: Transcript):
        self.transcript = transcript
        self.reply: ReplyView | None = None
        self.cards: dict[int, ToolCard] = {}
        self.attempt: list = []  # the widgets of the step being sampled
        self.ran = False  # the step's call has its result: the next reply starts a new step
        self.retry_note: Static | None = None

    def event(self, ev, diff: str | None = None) -> None:
        """Show `ev`; `diff` is an Edit call's diff, made before the call ran."""
        match ev:
            case TextEvent(text=piece):
                self._next_step()
                if self.reply is None:
                    self.reply = self._add(ReplyView())
                self.reply.add(piece)
                self.transcript.call_after_refresh(self.transcript.scroll_end, animate=False)
                return
            case ToolCall(name=name, args=args, step=step):
                self._next_step()
                self.cards[step] = self._add(ToolCard(name, args, diff))
            case ToolResult(result=result, step=step) if step in self.cards:
                self.cards[step].set_result(result)
                self.ran = True
            case Approval(name=name, answer=answer, rule=rule):
                said = SAID.get(answer, answer) if answer != "always" else \
                    f"allowed, and from now on this session: {rule_words(rule)}"
                self.attempt.append(self.transcript.note(f"{name}: {said}"))
            case Status(text=text, took_back=True):
                self._take_back(f"[{text}]")
            case Status(text=text):
                self.transcript.note(f"[{text}]")
            case TurnEnd(stop_reason="cancelled") if self.transcript.last_note != "[cancelled]":
                self.transcript.note("[cancelled]")  # a cancel after a call has its own note
        self.reply = None  # the next prose is a new reply

    def _add(self, widget):
        self.attempt.append(widget)
        return self.transcript.add(widget)

    def _next_step(self) -> None:
        if self.ran:  # the last step stood: its widgets stay
            self.attempt, self.ran, self.retry_note = [], False, None

    def _take_back(self, note: str) -> None:
        for widget in self.attempt:
            widget.remove()
        self.attempt, self.ran = [], False
        if self.retry_note is not None and self.retry_note.is_attached:
            self.retry_note.update(plain(note, "dim"))
            self.transcript.last_note = note
        else:
            self.retry_note = self.transcript.note(note)
