"""What the Textual face (agent/tui.py) shows of the conversation: the transcript, the reply
streamed into it, one card per tool call, and the two ways untrusted text becomes something to
show (`plain`, `code_view`).

Everything untrusted goes through agent/display.printable and into a rich Text or Syntax, never a
markup string: no model output, tool result or file reaches the terminal as a control sequence,
and `[bold]` shows as written.
"""
from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Collapsible, Static

from agent.display import call_title, edit_diff, printable, summarize
from nanocode.protocol import REJECTED


def plain(text, style: str = "") -> Text:
    """`text` escaped, as a Text: never markup, no control or bidi character."""
    return Text(printable(text), style=style)


def code_view(code: str, lexer: str = "diff") -> Syntax:
    """`code` escaped and highlighted (a diff, a Bash command), wrapped, never cut."""
    return Syntax(printable(code), lexer, theme="ansi_dark", background_color="default",
                  word_wrap=True)


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
                    reply = ReplyView()
                    reply.add(m["content"])
                    self.add(reply)
                if m.get("tool_call"):
                    card = ToolCard(m["tool_call"]["name"], m["tool_call"]["args"])
                    self.add(card)
            elif m["role"] == "tool_result" and card is not None:
                card.set_result(m["content"])
                card = None


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
