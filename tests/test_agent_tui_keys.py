"""The TUI prompt's keys (agent/tui/input.py, agent/tui/complete.py, agent/tui/app.py) as people use
them, driven by Textual's pilot on the real tiny engine of tests/tui_pilot.py: Tab completes and
cycles `@path` candidates and never leaves the prompt; `/` lists the commands with their help,
filtered as you type (Tab / Enter take one, up/down choose, Esc hides); Shift+Enter and Ctrl+J
insert newlines and Enter sends every line; Esc stops a running turn; Ctrl-D on an empty prompt
quits; Shift+Tab cycles the permission mode, shown in the status line; a custom command is listed
and sends its request."""
from agent.tui.app import NanocodeApp
from agent.tui.complete import CompletionList
from agent.tui.input import HistoryInput
from agent.tui.transcript import ReplyView
from scripted_agent import reply
from tiny_models import commit_all
from tui_pilot import drive, engine, make, screen_text, submit, tok, until  # noqa: F401 - fixtures


def test_tab_cycles_candidates_and_never_leaves_the_prompt(engine, tok, repo):
    (repo / "src").mkdir()
    for name in ("parser.py", "printer.py"):
        (repo / "src" / name).write_text("pass\n")
    commit_all(repo)
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp, listing = app.query_one(HistoryInput), app.query_one(CompletionList)
        await pilot.press(*"see @src/p")
        await until(pilot, lambda: listing.has_class("show"))
        shown = screen_text(app, listing)
        assert "@src/parser.py" in shown and "@src/printer.py" in shown  # the candidates
        await pilot.press("tab")
        first = inp.value
        assert first in ("see @src/parser.py", "see @src/printer.py") and app.focused is inp
        await pilot.press("tab")  # again: the other one
        assert {first, inp.value} == {"see @src/parser.py", "see @src/printer.py"}
        assert app.focused is inp
        await pilot.press("tab")
        assert inp.value == first and app.focused is inp
        await pilot.press("space", "x")  # what is typed next lands in the prompt
        assert inp.value == first + " x"
        await pilot.press("tab", "tab", "tab")  # nothing to complete: Tab does nothing
        assert app.focused is inp and inp.value == first + " x"
        await pilot.press("y")
        assert inp.value == first + " xy"
        await pilot.pause()
        assert not listing.has_class("show")
    drive(app, body)


def test_slash_lists_the_commands_as_you_type(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent, model_name="tiny")

    async def body(pilot):
        inp, listing = app.query_one(HistoryInput), app.query_one(CompletionList)
        await pilot.press("/")
        await until(pilot, lambda: listing.has_class("show"))
        shown = screen_text(app, listing)
        assert "/help this help" in shown and "/undo" in shown
        await pilot.press("m", "o", "d")
        await pilot.pause()
        shown = screen_text(app, listing)
        assert "/mode [MODE] show or set the permission mode" in shown and "/model" in shown
        assert "/undo" not in shown and "/memory" not in shown
        await pilot.press("down", "enter")  # choose the second; Enter takes it, sends nothing
        assert inp.value == "/model" and not app.query(".user")
        await pilot.press("enter")  # a whole command: Enter sends it
        await until(pilot, lambda: "temperature" in app.transcript_text())
        assert [str(w.content) for w in app.query(".user")] == ["/model"]  # echoed
        await pilot.press("/", "h", "e", "tab")
        assert inp.value == "/help"
        await pilot.pause()
        assert not listing.has_class("show")  # nothing else to pick
        inp.value = ""
        await pilot.press("/")
        await until(pilot, lambda: listing.has_class("show"))
        await pilot.press("escape")  # hides the list, keeps the text
        await pilot.pause()
        assert not listing.has_class("show") and inp.value == "/" and app.is_running
    drive(app, body)


def test_shift_enter_and_ctrl_j_insert_newlines(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        one_line = inp.region.height
        await pilot.press("a", "shift+enter", "b", "ctrl+j", "c")
        await pilot.pause()
        assert inp.value == "a\nb\nc" and inp.region.height == one_line + 2  # it grew
        await pilot.press("up")  # inside the text: the cursor moves, no history
        assert inp.value == "a\nb\nc" and inp.cursor_location == (1, 1)
        await pilot.press("enter")  # sends all three lines
        await until(pilot, lambda: app.turns == 1)
        assert "> a\nb\nc" in app.transcript_text()
        await pilot.press("up")  # an empty prompt: the history
        assert inp.value == "a\nb\nc"
    drive(app, body)
    assert agent.messages[1]["content"] == "a\nb\nc"


def test_esc_stops_a_running_turn(engine, tok, repo):
    agent, script = make(engine, repo, [reply(tok, "let me look. " * 40)], hold=3, max_tokens=800)
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "go")
        await until(pilot, script.held.is_set)
        assert "working… (Esc stops)" in str(app.query_one("#status").content)
        await pilot.press("escape")
        assert app.cancel.is_set() and app.is_running
        script.gate.set()
        await until(pilot, lambda: app.turns == 1)
        assert "[cancelled]" in app.transcript_text()
        assert len(app.query_one(ReplyView).text) < len("let me look. " * 40)
        await pilot.press("escape")  # idle: nothing happens
        assert app.is_running
    drive(app, body)
    assert agent.meta["turns"][-1]["stop_reason"] == "cancelled"


def test_ctrl_d_on_an_empty_prompt_quits(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        await pilot.press("a", "b", "left", "ctrl+d")  # with text: deletes forward
        assert inp.value == "a" and app.is_running
        await pilot.press("backspace", "ctrl+d")
        await until(pilot, lambda: not app.is_running, timeout=15)
    drive(app, body)
    assert app.return_code == 0


def test_shift_tab_cycles_the_permission_mode(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "ok.")], mode="ask")
    app = NanocodeApp(agent=agent, model_name="tiny")

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        seen = []
        for _ in range(4):
            await pilot.press("shift+tab")
            status = str(app.query_one("#status").content)
            seen.append(agent.mode)
            assert f"mode {agent.mode}" in status and app.focused is inp
        assert seen == ["accept-edits", "auto", "plan", "ask"]
        await pilot.press("shift+tab", "shift+tab", "shift+tab")
        await submit(pilot, "hi")  # the next turn runs in the mode shown
        await until(pilot, lambda: app.turns == 1)
    drive(app, body)
    assert agent.mode == "plan" and agent.meta["mode"] == "plan"


def test_a_custom_command_is_listed_and_sends_its_request(engine, tok, repo):
    """A project's `.nanocode/commands/review.md` (agent/custom_commands.py) is listed under `/`
    with its description and, typed, sends its text as the request."""
    (repo / ".nanocode" / "commands").mkdir(parents=True)
    (repo / ".nanocode" / "commands" / "review.md").write_text(
        "---\ndescription: review a file for bugs\n---\nreview $ARGUMENTS for bugs")
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        listing = app.query_one(CompletionList)
        await pilot.press("/", "r", "e")
        await until(pilot, lambda: listing.has_class("show"))
        assert "/review [ARGS] review a file for bugs" in screen_text(app, listing)
        assert "/resume" in screen_text(app, listing)
        await submit(pilot, "/review a.py")
        await until(pilot, lambda: app.turns == 1)
        assert [str(w.content) for w in app.query(".user")] == ["/review a.py",
                                                                "> review a.py for bugs"]
    drive(app, body)
    assert agent.messages[1]["content"] == "review a.py for bugs"
