"""`nanocode --plain`: the line-based face of the loop (prompt-toolkit when stdin is a terminal,
plain input() otherwise, so it can be driven through a pipe).

The reply streams as it is written; tool calls and a short summary of each result are shown
dimmed, and after each turn its usage (tokens read and written, tok/s, seconds); a call that needs approval asks `[y]es / [n]o / [a]lways`. Ctrl-C during a turn stops
generation or the running command (the conversation survives); at the prompt it clears the line;
Ctrl-D or /quit leaves. Slash commands: agent/commands.py, the same table as the TUI's; `/rewind`
lists the requests numbered and `/rewind N` goes back to before one (its text is offered again).

Through a pipe (stdin not a terminal) an approval reads exactly one line as its answer: y / n / a
(yes, no, always, in any case); anything else is taken as no, and says so, never asked again, so
the lines after it stay the next requests. The end of input at an approval is a no, and the
REPL then leaves as at the prompt. At a terminal an unrecognised answer is asked again, and
Ctrl-D cancels the turn. prompt_toolkit is imported inside the functions that use it (~0.3 s):
`nanocode -p` and a piped REPL never load it.

Safe output: Console.write and Console.dim pass every string through agent/display.printable,
so nothing the model, a tool or a file produced can drive the terminal (its only escapes are its
own dim colouring). An approval shows the whole call: a Bash command in full (the terminal wraps
it), an Edit as the diff of its file before and after (what it will write), any other call's arguments in full.
"""
from __future__ import annotations

import signal
import sys
import threading

from agent import commands
from agent.commands import resume_hint
from agent.display import (
    CALL_MARK, RESULT_MARK, call_text, edit_diff, format_call, printable, rule_words, summarize, usage_line)
from agent.loop.mentions import complete, project_files
from agent.sessions import resume_note
from nanocode import __version__
from nanocode.protocol import Approval, Event, Status, Text, ToolCall, ToolResult

DIM, RESET = "\033[2m", "\033[0m"


class Console:
    """The terminal: lines read with prompt-toolkit (or stdin), text written escaped."""

    def __init__(self, out=None, color: bool | None = None, root=None):
        self.out = out or sys.stdout
        self.color = self.out.isatty() if color is None else color
        self.reader, self.draft = None, ""
        self.piped = not sys.stdin.isatty()  # approvals read one line each (module docstring)
        if not self.piped:
            try:
                from prompt_toolkit import PromptSession
                self.reader = PromptSession(completer=mention_completer(root) if root else None,
                                            complete_while_typing=True)
            except Exception:  # noqa: BLE001 - no terminal features: fall back to input()
                self.reader = None

    def ask(self, prompt: str) -> str:
        if self.reader is not None:
            draft, self.draft = self.draft, ""
            return self.reader.prompt(prompt, default=draft)
        self.out.write(prompt)
        self.out.flush()
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    def offer(self, draft: str) -> None:
        """/rewind: `draft` goes into the next prompt's line to send again or change (a terminal),
        or is shown (stdin cannot be prefilled)."""
        if self.reader is None:
            self.dim(f"the request, to send again or change: {draft}")
        self.draft = draft

    def write(self, text: str) -> None:
        self.out.write(printable(text))
        self.out.flush()

    def dim(self, text: str) -> None:
        text = printable(text)
        self.out.write((DIM + text + RESET if self.color else text) + "\n")
        self.out.flush()


def mention_completer(root):
    """prompt-toolkit completions of the `@path` word before the cursor (agent/loop/mentions.py)."""
    from prompt_toolkit.completion import Completer, Completion


    class Mentions(Completer):
        files = None

        def get_completions(self, document, complete_event):
            word = document.get_word_before_cursor(WORD=True)
            if len(word) < 2 or not word.startswith("@"):
                return
            if self.files is None:
                self.files = project_files(root)
            found = complete(word, self.files)
            if not found:
                self.files = None  # a new file since: list again next time
            for c in found:
                yield Completion(c, start_position=-len(word))
    return Mentions()


def run_repl(agent, model_name: str = "", console: Console | None = None) -> int:
    con = console or Console(root=agent.root)
    con.dim(f"nanocode {__version__} | model {model_name} | mode {agent.mode} | {agent.root}")
    if agent.sandbox is not None:
        con.dim(agent.sandbox_status)
    else:
        con.write(f"warning: {agent.sandbox_status}\n")
    con.dim("/help for commands; Ctrl-C stops a turn; Ctrl-D quits")
    if agent.messages:
        con.dim(resume_note(agent.conv.transcript(), agent.meta))
    state = {"open": False}

    def on_event(ev: Event):
        if state["open"] and not isinstance(ev, Text):  # the streamed reply ends: close its line
            con.write("\n")
            state["open"] = False
        match ev:
            case Text(text=piece):
                con.write(piece)
                state["open"] = True
            case ToolCall(name=name, args=args):
                con.dim(f"{CALL_MARK}{format_call(name, args)}")
            case ToolResult(result=result):
                con.dim(f"{RESULT_MARK}{summarize(result)}")
            case Status(text=text):
                con.dim(f"[{text}]")
            case Approval(rule=rule) if rule:
                con.dim(f"  allowed from now on this session: {rule_words(rule)}")

    def approve(name, args, decision):
        if state["open"]:
            con.write("\n")
            state["open"] = False
        return ask_approval(con, agent.root, name, args, decision)

    while True:
        try:
            text = con.ask("> ")
        except KeyboardInterrupt:
            continue
        except EOFError:
            con.write("\n")
            return _leave(agent, con)
        text = text.strip()
        if not text:
            continue
        if text.startswith("/"):
            out = slash(agent, text, con)
            if out is True:
                return _leave(agent, con)
            if out is None:
                continue
            con.dim(f"{text.split()[0]}: {out.splitlines()[0][:80]}")
            text = out
        cancel = threading.Event()
        main = threading.current_thread() is threading.main_thread()
        old = signal.getsignal(signal.SIGINT) if main else None
        if main:
            signal.signal(signal.SIGINT, lambda *a: cancel.set())
        try:
            res = agent.run_turn(text, approve=approve, on_event=on_event, cancel=cancel)
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        if state["open"]:
            con.write("\n")
            state["open"] = False
        con.dim(f"[{usage_line(res)}]")


def ask_approval(con: Console, root, name: str, args: dict, decision) -> str:
    """Show the call in full and read the answer: "yes", "no", "always" or "cancelled" (Ctrl-C;
    Ctrl-D at a terminal). Through a pipe, one line and no second try (module docstring)."""
    con.write(f"{name} needs approval ({decision.reason}):\n")
    if name == "Edit":
        rest = {k: v for k, v in args.items() if k not in ("old_string", "new_string")}
        con.write(call_text(rest) + "\n")
        con.write("".join(f"  {ln}\n" for ln in edit_diff(args, root).splitlines()))
    else:
        con.write(call_text(args) + "\n")
    rule = getattr(decision, "always", "")
    choices = f"[y]es / [n]o / [a]lways this session: {rule_words(rule)}" if rule \
        else "[y]es / [n]o"
    piped = getattr(con, "piped", False)
    while True:
        try:
            line = con.ask(f"allow? {choices}: ")
        except EOFError:
            if not piped:  # Ctrl-D at a terminal: as Ctrl-C
                return "cancelled"
            con.write("(end of input: rejected)\n")
            return "no"
        except KeyboardInterrupt:
            return "cancelled"  # not a verdict on the call: the turn stops, nothing recorded as "no"
        answer = line.strip().lower()
        if piped:
            con.write(line + "\n")  # the pipe does not echo: the answer on its prompt's line
        if answer in ("y", "yes", "n", "no") or (rule and answer in ("a", "always")):
            return {"y": "yes", "n": "no", "a": "always"}.get(answer, answer)
        if piped:  # the next line is the next request, not another try
            con.write(f"{line.strip()!r} is not an answer ({'y / n / a' if rule else 'y / n'}): "
                      "taken as no\n")
            return "no"


def _leave(agent, con) -> int:
    """Quit: say how to come back to a conversation that has turns."""
    if agent.meta.get("turns"):
        con.dim(resume_hint(agent.meta["id"]))
    return 0


def slash(agent, text: str, con):
    """Run one slash command (agent/commands.py, the table both faces share): True to quit, a
    request to send (a custom command's prompt), else None."""
    match commands.run(text, agent, agent.root):
        case commands.Quit():
            return True
        case commands.Prompt(text=request):
            return request
        case commands.Note(text=shown) | commands.Diff(text=shown) | commands.Cleared(text=shown) | \
                commands.Requests(text=shown):
            con.write(shown + "\n")
        case commands.Rewound(text=shown, draft=draft):
            con.write(shown + "\n")
            con.offer(draft)
    return None
