"""The TUI tests' world (tests/test_agent_tui.py, tests/test_agent_tui_input.py): a real tiny
engine on its own small vocabulary (the project is conftest's `repo`), a scripted model whose generation a `gate`
can hold after a few tokens (so a test knows a turn is still running while it types or presses
Ctrl-C), and the pilot helpers that drive a Textual app from a plain asyncio loop and read what
the terminal shows."""
import asyncio
import threading
import time

import pytest

from agent.tui.input import HistoryInput
from agent_builder import new_agent
from nanocode.engine import Engine
from nanocode.protocol import system_prompt
from tiny_models import next_token_mask, random_params, tiny, tiny_tokenizer

TEXTS = [system_prompt("{cwd}")] * 3 + ["def main():\n    return 1\n" * 20,
                        "let me look. done: it returns 1. rejected by user error x = 2\n" * 5]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 400)


@pytest.fixture(scope="module")
def engine(tok):
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=1024)
    return Engine(random_params(cfg), cfg, tok, buckets=(64, 256, 1024))



class GatedScript:
    """extra_mask allowing only the next scripted token (one list per generation). With `hold`
    set, generation blocks after `hold` tokens of a reply until `gate` is set."""

    def __init__(self, V, replies, hold=None):
        self.V, self.replies, self.i, self.hold = V, replies, -1, hold
        self.gate, self.held = threading.Event(), threading.Event()

    def __call__(self, out):
        if not out:
            self.i += 1
        if self.hold is not None and len(out) == self.hold:
            self.held.set()
            self.gate.wait(30)
        return next_token_mask(self.replies[min(self.i, len(self.replies) - 1)], out, self.V)


def make(engine, repo, replies, hold=None, **kw):
    script = GatedScript(engine.cfg.vocab_size, replies, hold)
    return new_agent(engine, repo, extra_mask=script, **kw), script


def drive(app, body, size=(100, 40)):
    """Run `body(pilot)` inside app.run_test (a plain asyncio loop: no pytest plugin needed)."""
    async def main():
        async with app.run_test(size=size) as pilot:
            await body(pilot)
    asyncio.run(main())


async def until(pilot, cond, timeout=120.0):  # a first turn compiles: slow on a busy CPU
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        await pilot.pause(0.02)


async def submit(pilot, text):
    pilot.app.query_one(HistoryInput).value = text
    await pilot.press("enter")


def approval_text(app):
    """The approval panel's head and call, syntax-highlighted parts included."""
    shown = app.query_one("#approval-text").content
    return "\n".join(str(r.code if hasattr(r, "code") else r) for r in
                     (app.query_one("#approval-head").content, shown))


def screen_text(app, widget=None) -> str:
    """What the terminal shows now (the text of every segment the compositor would send); with
    `widget`, only the cells inside its content region (no border, no padding), its rows joined
    by one space and every run of spaces squeezed to one (so a wrapped phrase reads as one)."""
    lines = ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]
    if widget is None:
        return "\n".join(lines)
    r = widget.content_region
    return " ".join(" ".join(line[r.x:r.right].split()) for line in lines[r.y:r.bottom]).strip()
