"""The rewind picker of the Textual face (agent/tui/app.py): Esc twice on an idle prompt, or /rewind,
lists the conversation's requests (agent/commands.Requests), newest last and selected; Enter (or a
click) picks one and the app runs `/rewind N` (agent/loop/driver.Agent.rewind: the conversation back
to just before it, its files as they were, its text back in the prompt); Esc closes it and
nothing changes. Every label is escaped (agent/tui/transcript.plain).
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from agent.commands import request_line
from agent.tui.transcript import plain


class RewindScreen(ModalScreen[int | None]):
    """Pick a request to go back to: dismissed with its number, or None (Esc)."""
    BINDINGS = [Binding("escape", "dismiss(None)", "close", show=False)]
    DEFAULT_CSS = """
    RewindScreen { align: center bottom; }
    #rewind { height: auto; max-height: 80%; border: round $accent; padding: 0 1; }
    #rewind-list { height: auto; max-height: 20; }
    """

    def __init__(self, items):
        super().__init__()
        self.items = items  # ((n, the request as typed, the paths its turn changed), ...)

    def compose(self) -> ComposeResult:
        with Vertical(id="rewind"):
            yield Static(plain("Rewind: the conversation goes back to just before the request you "
                               "pick, the files its turn and later ones changed go back as they were, "
                               "and its text comes back to the prompt. Enter picks, Esc closes.", "bold"))
            yield OptionList(*(Option(plain(request_line(*item)), id=str(item[0])) for item in self.items),
                             id="rewind-list")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = len(self.items) - 1
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id))
