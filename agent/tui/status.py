"""The status line of the Textual face (agent/tui/app.py): model, permission mode, the Python
environment of the model's commands (tools/project_env.py), sandbox, context used of the
model's, tokens/s of the last reply, and the state (loading, ready, working, waiting for your
approval).

It fits its width: the state always shows; when the line is too long the lesser fields go
first (tokens/s, then the Python environment, "sandbox", the model's name, the context; the mode
and a missing sandbox, a warning, go last), and the order of those left stays the same.
`next_mode` is the mode that Shift+Tab switches to.
"""
from __future__ import annotations

from nanocode.protocol import MODES
from tools.project_env import choose

SEP = " │ "


def next_mode(mode: str) -> str:
    """ask -> accept-edits -> auto -> plan -> ask (protocol.MODES, in order)."""
    return MODES[(MODES.index(mode) + 1) % len(MODES)] if mode in MODES else MODES[0]


def status_fields(agent, model_name: str, tps: float | None) -> list[tuple[int, str]]:
    """(rank, text) for each field, in display order; the lowest rank is dropped first."""
    fields = [(3, model_name or "nanocode")]
    if agent is not None:
        m = agent.sampler
        sandbox = (2, "sandbox") if agent.sandbox is not None else (5, "NO SANDBOX")
        fields += [(6, f"mode {agent.mode}"), (1, choose(agent.root).short), sandbox,
                   (4, f"context {m.context_used(agent.messages):,}/{m.max_len:,}"),
                   (0, f"{tps:.1f} tok/s" if tps else "– tok/s")]
    return fields


def status_line(agent, model_name: str, tps: float | None, state: str,
                width: int | None = None) -> str:
    """The line, at most `width` characters when given (the state is cut only when it alone
    does not fit)."""
    fields = status_fields(agent, model_name, tps)
    line = SEP.join([text for _, text in fields] + [state])
    while width is not None and len(line) > width and fields:
        fields.remove(min(fields, key=lambda f: f[0]))
        line = SEP.join([text for _, text in fields] + [state])
    if width is not None and len(line) > width:
        line = line[:width - 1] + "…" if width > 0 else ""
    return line
