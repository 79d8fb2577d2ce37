"""`nanocode`: the full-screen face of the loop (Textual). Only renders agent/loop/driver.Agent events.

Layout: the transcript (user messages and slash commands as typed, the assistant's prose
streamed as it is written, one card per tool call: a Collapsible titled like `Edit src/app.py`
holding the result, and for Edit a highlighted diff of the change; status notes dimmed; a reply
the driver takes back and resamples is removed again), an approval panel when the policy asks
(agent/tui/approval.py: the whole call, y yes / n no / a always for this session; it takes the
keys, and the ones that do not answer it go on into the draft), a status line that fits its width (agent/tui/status.py: model,
mode, context used/total, tokens/s of the last reply, and always the state), the prompt
(agent/tui/input.py: multi-line, Enter sends, Shift+Enter or Ctrl+J a newline, up/down history)
and under it the completions (agent/tui/complete.py: `/` commands, `@path` files; Tab cycles).

Keys: Esc or Ctrl-C stops a running turn (its cancel Event: generation or a running command
stops; at an approval it is a cancel, not a rejection); idle, Esc twice within ESC_TWICE_S opens
the rewind picker (agent/tui/rewind.py, as /rewind does; the request picked comes back to the
prompt, a draft there goes to the history), Ctrl-C clears the prompt and twice within 2 s quits,
as does Ctrl-D on an empty prompt, /quit or Ctrl-Q. Shift+Tab cycles the
permission mode (ask -> accept-edits -> auto -> plan -> ask), shown in the status line.

Threads: the model loads on a loader thread (`run` takes a ready Agent or a zero-argument loader
returning one, e.g. `Loader`), so the input works at once; prompts typed meanwhile wait for it.
Each turn runs `Agent.run_turn` on a worker thread; events come back with `post_message` (thread
safe, non-blocking, in order); `approve` blocks the worker on a threading.Event until the user
answers. /compact also runs on a worker (it rebuilds the KV cache: a prefill). A resumed session
is replayed into the transcript.

The widgets live beside it in agent/tui/: transcript.py (the transcript, a turn's events as
widgets, the tool cards), input.py (the prompt), complete.py (its completions), approval.py (the
approval panel), status.py (the status line), rewind.py (the rewind picker) and app.tcss (the
layout). Every string shown goes in as a Text or Syntax made by transcript.py's `plain` /
`code_view` (escaped by agent/display.printable, never parsed as
markup): no model output, tool result or file reaches the terminal as a control sequence, and
`[bold]` shows as written.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static

from agent import commands
from agent.display import edit_diff, usage_line
from agent.model import ModelError, build_agent
from agent.sessions import resume_note, undone_requests
from agent.tui.approval import ApprovalPanel, PendingApproval
from agent.tui.complete import CompletionList
from agent.tui.input import HistoryInput
from agent.tui.rewind import RewindScreen
from agent.tui.status import next_mode, status_line
from agent.tui.transcript import LiveTurn, Transcript, code_view, plain
from nanocode import __version__
from nanocode.protocol import Event, ToolCall

PLACEHOLDER = "ask nanocode… (/ commands, @path pins a file, Shift+Enter newline)"
ESC_TWICE_S = 1.0  # Esc, then Esc again this soon on an idle prompt: the rewind picker


# ---- loading ----------------------------------------------------------------------------------
class LoadError(Exception):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def model_label(model) -> str:
    """The status line's name for a model path (its run's name for a checkpoints folder), or a
    server's model name; "" for none."""
    if not model:
        return ""
    d = Path(model)
    return d.parent.name if d.name == "checkpoints" else d.name


class Loader:
    """Builds the Agent as cli.main does for the other faces, but on the TUI's loader thread
    (jax is imported there). Failures are LoadError with the CLI's one-line message and code."""

    def __init__(self, options, root, model_dir, messages=None, meta=None, store=None):
        self.options, self.root, self.model_dir = options, root, model_dir
        self.messages, self.meta, self.store = messages, meta, store
        # --base-url: the status names the server's model once loaded
        self.name = (options.model or "") if model_dir is None else model_label(model_dir)

    def __call__(self):
        try:
            return build_agent(self.options, self.root, self.model_dir, self.messages, self.meta,
                               self.store)
        except ModelError as e:
            raise LoadError(f"error: {e}", e.code) from None


def load_in_background(loader, done) -> None:
    """loader() (a Loader, or any callable returning an Agent) on a thread of its own; then
    done(agent, None, 0) or done(None, the one-line error, its exit code)."""
    def load():
        try:
            done(loader(), None, 0)
        except LoadError as e:
            done(None, str(e), e.code)
        except Exception as e:  # noqa: BLE001 - shown in the transcript, not a traceback
            done(None, f"error: cannot load the model: {e}", 1)
    threading.Thread(target=load, daemon=True, name="nanocode-load").start()


# ---- messages from the worker threads ---------------------------------------------------------
class Call(Message):
    """Run `fn(*args)` on the UI thread; posted from worker threads (post_message is thread
    safe and, unlike call_from_thread, does not wait)."""

    def __init__(self, fn, *args):
        super().__init__()
        self.fn, self.args = fn, args


# ---- the app ----------------------------------------------------------------------------------
class NanocodeApp(App):
    TITLE = "nanocode"
    CSS_PATH = "app.tcss"  # the layout, beside this file
    BINDINGS = [Binding("ctrl+c", "interrupt", "stop / quit", priority=True, show=False),
                Binding("shift+tab", "cycle_mode", "mode", priority=True, show=False),
                Binding("escape", "stop", "stop the turn", show=False)]
    ESCAPE_TO_MINIMIZE = False

    def __init__(self, agent=None, loader=None, model_name: str = "", root=None):
        super().__init__()
        self.agent, self.loader = agent, loader
        self.model_name = model_name or (agent.meta.get("model", "") if agent else "")
        self.root = root or getattr(agent or loader, "root", None) or os.getcwd()
        self.pending: list[str] = []  # prompts waiting for the model or for the running turn
        self.running = False
        self.cancel = threading.Event()
        self.asking: PendingApproval | None = None
        self.tps: float | None = None
        self.load_error: str | None = None
        self.exit_code = 0
        self.turns = 0  # finished turns (tests wait on it)
        self.live: LiveTurn | None = None  # the running turn's widgets
        self._ctrl_c_at = self._esc_at = 0.0

    def compose(self) -> ComposeResult:
        yield Transcript(id="transcript")
        yield ApprovalPanel(id="approval")
        yield Static(id="status")
        yield HistoryInput(root=self.root, id="prompt", placeholder=PLACEHOLDER)
        yield CompletionList(id="completions")

    def on_mount(self) -> None:
        self.note(f"nanocode {__version__} in {self.root}. /help for commands; Esc stops a turn; "
                  "Shift+Tab changes the mode; Ctrl-D quits")
        if self.agent is None and self.loader is not None:
            self.query_one(HistoryInput).placeholder = "loading model… (type away: prompts wait)"
            load_in_background(self.loader, lambda *done: self.later(self.loaded, *done))
        elif self.agent is not None:
            self._model_ready()
        self.query_one(HistoryInput).focus()
        self.refresh_status()
        self.set_interval(0.5, self.refresh_status)

    # ---- transcript ---------------------------------------------------------------------------
    def add(self, widget) -> None:
        self.query_one(Transcript).add(widget)

    def note(self, text: str, style: str = "dim") -> None:
        self.query_one(Transcript).note(text, style)

    def transcript_text(self) -> str:
        """Plain text of the transcript (for tests and debugging)."""
        return self.query_one(Transcript).text()

    def refresh_status(self) -> None:
        a = self.agent
        state = ((self.load_error and "model failed to load" or "loading model…") if a is None else
                 "waiting for your approval" if self.asking else
                 "working… (Esc stops)" if self.running else "ready")
        for status in self.query("#status"):  # none left while the app shuts down
            status.update(plain(status_line(a, self.model_name, self.tps, state,
                                            status.size.width or None)))

    # ---- loading ------------------------------------------------------------------------------
    def loaded(self, agent, error, code) -> None:
        if error:
            self.load_error, self.exit_code = error, code
            self.query_one(HistoryInput).placeholder = "no model: /quit to leave"
            self.note(error + "\n(/quit to leave)", style="bold red")
        else:
            self.agent = agent
            self.model_name = self.model_name or agent.meta.get("model", "")
            self._model_ready()
        self.refresh_status()

    def _model_ready(self) -> None:
        self.query_one(HistoryInput).placeholder = PLACEHOLDER
        a = self.agent
        if a.sandbox is None:
            self.note(f"warning: {a.sandbox_status}", style="bold red")
        if a.messages:
            shown = a.conv.transcript()  # as it happened: the turns the context dropped too
            self.note(resume_note(shown, a.meta))
            self.query_one(Transcript).replay(shown, undone_requests(shown, a.meta))
        self._next()

    # ---- input ------------------------------------------------------------------------------
    def on_history_input_submitted(self, event: HistoryInput.Submitted) -> None:
        if event.typed.startswith("/"):
            self.add(Static(plain(event.typed), classes="user"))
            self.slash(event.typed)
            return
        self.request(event.text)

    def request(self, text: str) -> None:
        """Send `text` to the model: now, or after the running turn or the loading model."""
        if self.load_error:
            self.add(Static(plain("> " + text), classes="user"))
            self.note("no model: " + self.load_error)
            return
        self.pending.append(text)
        if self.agent is None or self.running:  # shown in the transcript when it starts
            waits = "the model to load" if self.agent is None else "the current turn"
            self.note(f"queued ({len(self.pending)}), runs after {waits}: {text.splitlines()[0][:60]}")
        self._next()

    def on_history_input_completions(self, event: HistoryInput.Completions) -> None:
        self.query_one(CompletionList).show(event.completion, event.word)

    def _next(self) -> None:
        if self.agent is None or self.running or not self.pending:
            return
        text = self.pending.pop(0)
        self.add(Static(plain("> " + text), classes="user"))
        self.running, self.cancel = True, threading.Event()
        self.live = LiveTurn(self.query_one(Transcript))
        threading.Thread(target=self._turn, args=(self.agent, text, self.cancel), daemon=True,
                         name="nanocode-turn").start()
        self.refresh_status()

    # ---- the worker thread --------------------------------------------------------------------
    def _turn(self, agent, text: str, cancel: threading.Event) -> None:
        res, error = None, None
        try:
            res = agent.run_turn(text, approve=lambda n, a, d: self._approve(n, a, d, cancel),
                                 on_event=self._on_event, cancel=cancel)
        except Exception as e:  # noqa: BLE001 - the session survives a crashed turn
            error = f"error: the turn crashed: {type(e).__name__}: {e}"
        self.later(self.turn_done, res, error)

    def _on_event(self, ev: Event) -> None:
        """On the worker, before the call runs: an Edit's diff is made here, so it is numbered
        where old_string still is in the file."""
        is_edit = isinstance(ev, ToolCall) and ev.name == "Edit"
        self.later(self.agent_event, ev, edit_diff(ev.args, self.root) if is_edit else None)

    def _approve(self, name, args, decision, cancel) -> str:
        box = PendingApproval(name, args, decision.reason, getattr(decision, "always", ""))
        self.later(self.ask_approval, box)
        while not box.done.wait(0.05):
            if cancel.is_set():
                return "cancelled"
        return box.answer

    # ---- events from the worker ---------------------------------------------------------------
    def later(self, fn, *args) -> None:
        self.post_message(Call(fn, *args))

    def on_call(self, msg: Call) -> None:
        msg.fn(*msg.args)

    def agent_event(self, ev: Event, diff: str | None = None) -> None:
        if self.live is not None:
            self.live.event(ev, diff)
        self.refresh_status()

    def ask_approval(self, box: PendingApproval) -> None:
        self.asking = box
        if self.cancel.is_set() or not self.running:
            box.done.set()
            self.asking = None
            return
        panel = self.query_one(ApprovalPanel)
        panel.show(box, self.root, draft=bool(self.query_one(HistoryInput).value.strip()))
        panel.focus()  # the keys answer it; typing under way goes on into the draft meanwhile
        self.refresh_status()

    def action_focus_approval(self) -> None:
        if self.asking is not None:
            self.query_one(ApprovalPanel).focus()

    def action_focus_prompt(self) -> None:
        self.query_one(HistoryInput).focus()

    def action_page_transcript(self, pages: int) -> None:
        self.query_one(Transcript).page(pages)

    def on_resize(self, event) -> None:
        self.query_one(Transcript).keep_end()
        self.query_one(ApprovalPanel).fit()
        self.call_after_refresh(self.refresh_status)

    def answer_approval(self, answer: str) -> None:
        if answer == "always" and self.asking is not None and not self.asking.always:
            return  # no rule to store: the choice is not offered
        box, self.asking = self.asking, None
        self.query_one(ApprovalPanel).hide()
        self.query_one(HistoryInput).focus()  # the draft as it was, the cursor where it was
        if box is not None:
            box.answer = answer
            box.done.set()
        self.refresh_status()

    def turn_done(self, res, error) -> None:
        """A turn ended: its usage under it (as --plain prints it), or the crash."""
        self.running = False
        if self.asking is not None:
            self.answer_approval("cancelled")
        if res is not None:
            self.tps = res.tokens_per_second or self.tps  # sampling time only: no approvals, tools
            self.note(f"[{usage_line(res)}]")
        if error:
            self.note(error, style="bold red")
        self.turns += 1
        self.refresh_status()
        self._next()

    # ---- keys ---------------------------------------------------------------------------------
    def action_interrupt(self) -> None:
        if self.running:
            self.cancel.set()
            self.pending.clear()
            if self.asking is not None:
                self.answer_approval("cancelled")
            self.note("stopping…")
            self._ctrl_c_at = 0.0
            return
        prompt = self.query_one(HistoryInput)
        if prompt.value:
            prompt.value = ""
            return
        now = time.monotonic()
        if now - self._ctrl_c_at < 2.0:
            self.shutdown()
        else:
            self._ctrl_c_at = now
            self.note("press Ctrl-C again to quit")

    def action_stop(self) -> None:
        """Esc: stop a running turn, as Ctrl-C does; idle, twice in a row: /rewind's picker."""
        last, self._esc_at = self._esc_at, 0.0
        if self.running:
            if not self.cancel.is_set():
                self.action_interrupt()
        elif time.monotonic() - last < ESC_TWICE_S:
            self.slash("/rewind")
        else:
            self._esc_at = time.monotonic()

    def action_cycle_mode(self) -> None:
        """Shift+Tab: the next permission mode (agent/tui/status.next_mode), in the status line."""
        if self.agent is None:
            self.note("the model is still loading; the mode can change once it is ready")
            return
        self.agent.set_mode(next_mode(self.agent.mode))
        self.refresh_status()

    async def action_quit(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        self.cancel.set()
        if self.asking is not None:
            self.answer_approval("cancelled")
        self.exit(return_code=self.exit_code)

    # ---- slash commands -----------------------------------------------------------------------
    def slash(self, text: str) -> None:
        """A slash command from the shared table (agent/commands.py); slow ones on a worker."""
        cmd, _ = commands.find(text)
        if cmd is not None and cmd.slow and self.agent is not None and not self.running:
            self.running = True  # the KV-cache rebuild is a prefill: off the UI thread
            threading.Thread(target=self._slow_command, args=(text,), daemon=True).start()
        else:
            self.show(commands.run(text, self.agent, self.root, self.running))
        self.refresh_status()

    def _slow_command(self, text: str) -> None:  # on a worker thread
        try:
            out = commands.run(text, self.agent, self.root)
        except Exception as e:  # noqa: BLE001 - shown, the session goes on
            out = commands.Note(f"error: {text.split()[0]} failed: {type(e).__name__}: {e}")
        self.later(self._slow_done, out)

    def _slow_done(self, out) -> None:
        self.running = False
        self.model_name = model_label(self.agent.meta.get("model")) or self.model_name  # /model
        self.show(out)
        self.refresh_status()
        self._next()

    def show(self, out: commands.Out) -> None:
        """Render a command's output: a note, a highlighted diff, a cleared transcript, or quit."""
        match out:
            case commands.Quit():
                self.shutdown()
            case commands.Diff(text=diff):
                self.add(Static(code_view(diff), classes="diff"))
            case commands.Cleared(text=text):
                self.query_one(Transcript).remove_children()
                self.note(text)
            case commands.Note(text=text):
                self.note(text, style="" if "\n" in text else "dim")
            case commands.Prompt(text=text):  # a custom command: its request, as if typed
                self.request(text)
            case commands.Requests(items=items):
                self.push_screen(RewindScreen(items), self._rewind_picked)
            case commands.Rewound(text=text, draft=draft):
                transcript, prompt = self.query_one(Transcript), self.query_one(HistoryInput)
                transcript.remove_children()
                transcript.replay(self.agent.messages)
                self.note(text, style="")
                if prompt.value.strip() and prompt.value != draft:
                    prompt.remember(prompt.value)  # the draft it replaces: up brings it back
                    self.note("your draft went to the prompt's history (up brings it back)")
                prompt.value = draft
                prompt.focus()

    def _rewind_picked(self, n: int | None) -> None:
        """The rewind picker closed: with a request's number, go back to before it."""
        if n is not None:
            self.slash(f"/rewind {n}")


def run(agent, args=None) -> int:
    """The TUI on `agent`: a ready agent.driver.Agent, or a zero-argument callable returning one
    (run on a loader thread; raise LoadError to fail with a message). Returns the exit status."""
    ready = hasattr(agent, "run_turn")
    name = model_label(agent.meta.get("model")) if ready else getattr(agent, "name", "")
    app = NanocodeApp(agent=agent if ready else None, loader=None if ready else agent,
                      model_name=name or str(getattr(args, "model", "") or ""))
    app.run()
    if app.agent is not None and app.agent.meta.get("turns"):
        print(commands.resume_hint(app.agent.meta["id"]))
    return app.return_code or 0
