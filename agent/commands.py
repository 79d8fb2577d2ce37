"""The slash commands: one table (name, arguments, help, handler) that both faces use, the
Textual TUI (agent/tui/app.py) and the --plain REPL (agent/repl.py); `help_text` is generated from it.

A handler takes (agent, root, rest) and returns an `Out`, one of seven classes a face `match`es
on: Note (plain text), Diff (a unified diff, highlighted by the TUI), Cleared (a new conversation:
the TUI also empties its transcript), Prompt (a request to send as if typed: the user's own
commands from markdown files, agent/custom_commands.py), Requests (the requests /rewind can go
back to: the TUI offers them to pick, --plain lists them numbered), Rewound (the conversation
went back: shown anew, the request back in the prompt), Quit. `agent` is None while
the TUI's model loads; a command with `needs_agent` then says so instead of running. `slow`
commands (a KV-cache rebuild) run off the TUI's UI thread; `idle_only` ones wait for no turn to
be running. Keys (Enter, Ctrl-C, Tab ...) are the faces' own and listed under the table.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from agent.custom_commands import custom_commands
from agent.display import printable
from agent.loop.turn_undo import for_user, slash_undo
from agent.model import ModelError, switch_model
from agent.project_notes import write_starter_notes
from agent.sessions import SessionStore, find_session, list_sessions, load_session
from tools.files import read_memory
from tools.project_env import choose
from tools.undo import UndoError


@dataclass(frozen=True)
class Note:
    """Text to show as it is."""
    text: str


@dataclass(frozen=True)
class Diff:
    """A unified diff of the project's files."""
    text: str


@dataclass(frozen=True)
class Cleared:
    """The conversation was replaced by a new one; `text` says so."""
    text: str


@dataclass(frozen=True)
class Prompt:
    """Send `text` as the user's request (a custom command, expanded)."""
    text: str


@dataclass(frozen=True)
class Requests:
    """The requests a rewind can go back to: `items` ((n, the request as typed, the paths its
    turn changed), oldest first) and `text`, the same as a numbered list."""
    text: str
    items: tuple


@dataclass(frozen=True)
class Rewound:
    """The conversation went back to before a request: `text` says what was restored and what
    could not be; `draft` is that request, for the prompt."""
    text: str
    draft: str


@dataclass(frozen=True)
class Quit:
    """Leave the face."""


Out = Note | Diff | Cleared | Prompt | Requests | Rewound | Quit


@dataclass(frozen=True)
class Command:
    name: str
    args: str
    help: str
    run: Callable  # (agent, root, rest) -> Out
    needs_agent: bool = True
    idle_only: bool = False
    slow: bool = False


def _help(agent, root, rest) -> Out:
    return Note(help_text(root))


def _undo(agent, root, rest) -> Out:
    return Note(slash_undo(agent, rest))


def _diff(agent, root, rest) -> Out:
    try:
        d = agent.diff()
    except UndoError as e:
        return Note(for_user(agent, str(e)))
    return Diff(d) if d else Note("the last request changed nothing")


def _clear(agent, root, rest) -> Out:
    agent.clear()
    return Cleared("new conversation")


def _compact(agent, root, rest) -> Out:
    freed = agent.compact()
    return Note(f"compacted: old tool outputs dropped, {freed:,} tokens freed" if freed else
                "nothing to compact: no old tool output is longer than its marker")


def _mode(agent, root, rest) -> Out:
    if rest:
        try:
            agent.set_mode(rest)
        except ValueError as e:
            return Note(str(e))
    return Note(f"mode: {agent.mode}")


def _model(agent, root, rest) -> Out:
    if rest:
        try:
            switch_model(agent, rest)
        except ModelError as e:
            return Note(f"{e}; still using {agent.meta.get('model')}")
    st = agent.sampler.settings
    return Note(f"model {agent.meta.get('model', '(in-memory engine)')}\n{agent.sampler.describe()}; "
                f"temperature {st.temperature}, max {st.max_tokens} tokens per reply, "
                f"max {agent.settings.max_steps} calls per request")


def _memory(agent, root, rest) -> Out:
    mem = read_memory(root)
    if mem is None:
        return Note("no NANOCODE.md or AGENTS.md at the project root")
    return Note(f"{mem[0]} (in the system prompt of new conversations, cut to its share of the "
                f"context):\n{mem[1]}")


def _settings(agent, root, rest) -> Out:
    p = agent.policy
    lines = [f"mode: {p.mode}", f"commands: {agent.sandbox_status}",
             f"python for commands: {choose(root).label}",
             "settings files: " + (", ".join(p.sources) or "none (the defaults)")]
    for kind in ("allow", "ask", "deny", "session"):
        rules = getattr(p, kind)
        lines.append(f"{kind} rules: {', '.join(rules) if rules else '-'}")
    hooks = [f"{h.event}{f'({h.matcher})' if h.matcher else ''}: {h.command} [{h.source}]" for h in p.hooks]
    lines.append("hooks: " + ("; ".join(hooks) or "-"))
    return Note("\n".join(lines))


def _mcp(agent, root, rest) -> Out:
    """/mcp: the servers; /mcp reconnect [NAME|all]: restart the failed ones (or those named),
    their tools in the system prompt from the next turn (agent/mcp_hub.McpHub.reconnect)."""
    if agent.mcp is None:
        return Note('no MCP servers: list them under "mcpServers" in your settings file or in a '
                    ".mcp.json at the project root (Claude Code's format)")
    verb, _, name = rest.partition(" ")
    if not verb:
        return Note(printable(agent.mcp.describe()))
    if verb != "reconnect" or len(name.split()) > 1:
        return Note(f"unknown /mcp argument {printable(rest[:80])!r}: use /mcp, or /mcp reconnect [NAME|all]")
    text = agent.mcp.reconnect(name.strip())
    if not text.startswith(("error:", "no MCP")):
        agent.refresh_system_prompt("the MCP servers were reconnected")
        text += "\ntheir tools are offered from the next turn"
    return Note(printable(text))


def _session(agent, root, rest) -> Out:
    sid, path = agent.meta.get("id"), getattr(agent.conv.store, "path", None)
    if path is None:
        return Note(f"session {sid} (not saved: this run keeps no session file)")
    if not path.exists():
        return Note(f"session {sid}: {path} (saved after its first request)")
    return Note(f"session {sid}: {path}\n{resume_hint(sid)}")


def _resume(agent, root, rest) -> Out:
    if rest:
        try:
            path = find_session(root, rest)
            messages, meta = load_session(path)
        except (OSError, ValueError) as e:
            return Note(str(e))
        if meta.get("id") == agent.meta.get("id"):
            return Note(f"session {rest} is the one in use")
        agent.resume(messages, meta, SessionStore(root, meta.get("id") or path.stem.rsplit("-", 1)[-1], path))
        asked = sum(m["role"] == "user" for m in messages)
        return Cleared(f"resumed session {agent.meta['id']} ({asked} earlier requests)")
    found = list_sessions(root)[-10:]
    if not found:
        return Note("no saved sessions in this project yet")
    lines = []
    for p in reversed(found):
        try:
            msgs, _ = load_session(p)
        except (OSError, ValueError):
            continue
        first = next((m["content"] for m in msgs if m["role"] == "user"), "")
        lines.append(f"{p.stem.rsplit('-', 1)[-1]}  {p.stem[:15]}  "
                     f"{first.splitlines()[0][:60] if first else '(empty)'}")
    return Note("saved sessions, newest first (continue one with /resume ID):\n"
                + "\n".join(lines))


def _mark(verdict: str):
    def run(agent, root, rest) -> Out:
        try:
            n, before = agent.mark(verdict)
        except ValueError as e:
            return Note(str(e))
        was = f", no longer {before}" if before else ""
        return Note(f"turn {n} marked {verdict}{was} (`train export-sessions` "
                   f"{'trains on it' if verdict == 'good' else 'learns to avoid it'})")
    return run


def _rewind(agent, root, rest) -> Out:
    if not rest:
        items = tuple((n, request, _paths(record.get("files_changed")))
                      for n, request, record in agent.conv.requests())
        if not items:
            return Note("nothing to rewind: this conversation has no request yet")
        return Requests("requests of this conversation; /rewind N goes back to just before request N "
                        "(its files as they were, its text back in the prompt):\n" +
                        "\n".join(request_line(*item) for item in items), items)
    if not rest.isdigit():
        return Note(f"/rewind takes a request's number, not {rest!r}; /rewind alone lists them")
    try:
        text, draft = agent.rewind(int(rest))
    except ValueError as e:
        return Note(str(e))
    return Rewound(text, draft)


def _paths(found) -> tuple:
    """A turn record's files_changed as a tuple of paths (a saved session is untrusted)."""
    return tuple(p for p in found if isinstance(p, str)) if isinstance(found, list) else ()


def request_line(n: int, request: str, paths, width: int = 70) -> str:
    """Request n on one line for a list (both faces): its first line cut at `width`, and the
    first paths its turn changed."""
    lines = request.strip().splitlines() or ["(empty)"]
    first = lines[0][:width] + ("…" if len(lines[0]) > width or len(lines) > 1 else "")
    changed = f"  [changed {', '.join(paths[:3])}{' …' if len(paths) > 3 else ''}]" if paths else ""
    return f"{n:>3}. {first}{changed}"


def _rate(tokens: int, seconds: float) -> str:
    return f", {tokens / seconds:,.1f} tok/s" if seconds > 0 else ""


def _usage(agent, root, rest) -> Out:
    from agent.samplers.remote import RemoteSampler  # deferred: it loads numpy
    u = agent.totals
    turns = f"{u['turns']} turn{'s' * (u['turns'] != 1)}"
    lines = [f"usage since nanocode started ({turns}; session {agent.meta.get('id')}):"]
    if isinstance(agent.sampler, RemoteSampler):
        lines.append(f"  as {agent.sampler.base_url} reported it (`usage` of each reply): "
                     f"{u['prompt_tokens']:,} tokens in, {u['completion_tokens']:,} out")
        if u["turns"] and not (u["prompt_tokens"] or u["completion_tokens"]):
            lines.append("  (the server sent no `usage` with its replies, though nanocode asks for it: "
                         "the counts are unknown, not zero)")
        lines.append(f"  waiting on the server: {u['generate_s']:.1f} s"
                     f"{_rate(u['completion_tokens'], u['generate_s'])} (whole requests: its reading included)")
    else:
        lines += [f"  tokens in (read by the model): {u['prompt_tokens']:,} in {u['prefill_s']:.1f} s"
                  f"{_rate(u['prompt_tokens'], u['prefill_s'])}",
                  f"  tokens out (written by the model, resampled ones included): "
                  f"{u['completion_tokens']:,} in {u['generate_s']:.1f} s{_rate(u['completion_tokens'], u['generate_s'])}"]
    lines.append(f"  wall time: {u['seconds']:.1f} s in turns (approvals and tools included), "
                 f"{time.monotonic() - agent.started:.0f} s since start")
    return Note("\n".join(lines))


def _init(agent, root, rest) -> Out:
    return Note(write_starter_notes(root))


def _quit(agent, root, rest) -> Out:
    return Quit()


COMMANDS = [
    Command("/help", "", "this help", _help, needs_agent=False),
    Command("/undo", "[all] [yes] [committed]", "what undoing the last turn of this session "
            "restores; yes does it (all: of any session; committed: also files committed since)",
            _undo, idle_only=True),
    Command("/diff", "", "what the last turn changed", _diff, idle_only=True),
    Command("/clear", "", "start a new conversation", _clear, idle_only=True),
    Command("/compact", "", "drop old tool outputs now (automatic when the context fills)",
            _compact, idle_only=True, slow=True),
    Command("/mode", "[MODE]", "show or set the permission mode: ask, accept-edits, auto, plan",
            _mode),
    Command("/model", "[NAME]", "the model in use and its sampling settings; NAME: go on with "
            "another (a checkpoint directory or run tag; with --base-url, a model the server has)",
            _model, idle_only=True, slow=True),
    Command("/memory", "", "the project memory file (NANOCODE.md or AGENTS.md)", _memory,
            needs_agent=False),
    Command("/init", "", "write a starter AGENTS.md from the project (layout, test command)",
            _init, needs_agent=False),
    Command("/settings", "", "the permission mode, rules and the settings files they came from",
            _settings),
    Command("/good", "", "mark the last turn good: `train export-sessions` trains on it",
            _mark("good"), idle_only=True),
    Command("/bad", "", "mark the last turn bad: exported as the rejected side of a pair",
            _mark("bad"), idle_only=True),
    Command("/mcp", "[reconnect [NAME|all]]", "the MCP servers: running, failed or not approved, and "
            "their tools; reconnect: restart the failed ones (all: every one; NAME: that one)", _mcp,
            idle_only=True, slow=True),
    Command("/session", "", "this session's id and file", _session),
    Command("/rewind", "[N]", "list this conversation's requests; N: go back to just before request "
            "N (files as they were, its text in the prompt; also Esc twice in the TUI)", _rewind,
            idle_only=True),
    Command("/usage", "", "tokens in and out, tok/s and time since nanocode started (with "
            "--base-url, as the server reported them); also /cost", _usage),
    Command("/resume", "[ID]", "list this project's saved sessions; ID: continue that one here",
            _resume, idle_only=True),
    Command("/quit", "", "leave (also /exit, Ctrl-D on an empty prompt, Ctrl-C twice in the TUI)", _quit,
            needs_agent=False),
]
ALIASES = {"/exit": "/quit", "/q": "/quit", "/cost": "/usage"}
BY_NAME = {c.name: c for c in COMMANDS}
KEYS = ("keys: Enter sends, up/down history, Ctrl-C stops the running turn; in the TUI Shift+Enter "
        "or Ctrl+J a new line, Tab completes / and @path (and goes to a waiting approval), Esc "
        "stops the turn (idle, Esc twice: /rewind), Shift+Tab cycles the mode, Ctrl-D on an empty "
        "prompt quits")


def resume_hint(session_id: str) -> str:
    """The line both faces print on leaving a session with turns."""
    return f"resume this session with: nanocode --resume {session_id}"


def custom(root) -> dict:
    """The custom commands of `root`'s project and the user's (agent/custom_commands.py) whose
    names no built-in command or alias takes."""
    return custom_commands(root, BY_NAME.keys() | ALIASES.keys())


def help_text(root=None) -> str:
    """The table, then the custom commands of `root`'s project and the user's, then the keys."""
    rows = [(f"{c.name} {c.args}".strip(), c.help) for c in COMMANDS]
    if root is not None:
        rows += [(f"{c.name} [ARGS]", f"{c.description} ({c.source})") for c in custom(root).values()]
    width = max(len(r[0]) for r in rows) + 2
    return "\n".join(f"{name:<{width}}{text}" for name, text in rows) + "\n" + KEYS


def find(text: str) -> tuple[Command | None, str]:
    """(the command `text` names, the rest of the line); None for an unknown one."""
    name, _, rest = text.strip().partition(" ")
    return BY_NAME.get(ALIASES.get(name, name)), rest.strip()


def run(text: str, agent, root, running: bool = False) -> Out:
    """Run one slash command line as a face would (not `slow` ones on a UI thread)."""
    cmd, rest = find(text)
    if cmd is None:
        name = text.split()[0] if text.split() else text
        if (command := custom(root).get(name)) is not None:
            return Prompt(command.prompt(rest))
        return Note(f"unknown command {name}; /help lists them")
    if cmd.needs_agent and agent is None:
        return Note("the model is still loading; try again in a moment")
    if cmd.idle_only and running:
        return Note(f"a turn is running: Ctrl-C stops it, then {cmd.name}")
    return cmd.run(agent, root, rest)
