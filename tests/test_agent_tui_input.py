"""The TUI's prompt and approvals (agent/tui_input.py) as people use them, driven by Textual's pilot
on the real tiny engine of tests/tui_pilot.py: y / n answers, approvals that never steal
keystrokes, Ctrl-C at an approval, "always" that says what it allows, Edit diffs numbered in the
file, a small terminal, multi-line paste, @path completion in both faces."""
from agent.tui import NanocodeApp
from agent.tui_input import ApprovalPanel, HistoryInput
from agent.tui_transcript import ToolCard
from nanocode.protocol import REJECTED
from scripted_agent import call, reply
from tiny_models import commit_all
from tui_pilot import approval_text, drive, engine, make, repo, submit, tok, until  # noqa: F401 - fixtures


def test_edit_rejected_with_n(engine, tok, repo):
    agent, script = make(engine, repo, [call(tok, "", "Edit", file_path="a.py",
                                             old_string="x = 1", new_string="x = 2"),
                                        reply(tok, "never")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "set x to 2")
        await until(pilot, lambda: app.asking is not None)
        await pilot.press("n")
        await until(pilot, lambda: app.turns == 1)
        assert app.query_one(ToolCard).result_text == REJECTED
        assert "call rejected; your turn" in app.transcript_text()
        assert app.focused is app.query_one(HistoryInput)
    drive(app, body)
    assert (repo / "a.py").read_text() == "x = 1\n" and script.i == 0


def test_bash_rejected_with_n(engine, tok, repo):
    agent, script = make(engine, repo, [call(tok, "", "Bash", command="rm a.py"),
                                        reply(tok, "never")], mode="accept-edits")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "delete a.py")
        await until(pilot, lambda: app.asking is not None)
        assert "Bash needs approval" in approval_text(app) and "rm a.py" in approval_text(app)
        await pilot.press("n")
        await until(pilot, lambda: app.turns == 1)
        card = app.query_one(ToolCard)
        assert card.header == "Bash rm a.py" and card.result_text == REJECTED
        assert card.has_class("failed") and REJECTED in str(card.title)
        assert "Bash: rejected" in app.transcript_text()
    drive(app, body)
    assert agent.messages[-1] == {"role": "tool_result", "content": REJECTED}  # the model's view
    assert (repo / "a.py").exists() and script.i == 0
    assert agent.meta["approvals"][-1]["answer"] == "no"


def test_approval_never_steals_keystrokes(engine, tok, repo):
    """An approval that appears while the user types waits for Tab: the letters stay in the
    draft (none answers y/n/a), the draft survives the answer, focus comes back to it."""
    agent, script = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                             new_string="x = 2"), reply(tok, "never")],
                         hold=2, mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "set x to 2")
        await until(pilot, script.held.is_set)
        inp = app.query_one(HistoryInput)
        await pilot.press("h", "i")
        script.gate.set()
        await until(pilot, lambda: app.asking is not None)
        panel = app.query_one(ApprovalPanel)
        assert panel.has_class("show") and app.focused is inp
        await pilot.press("y", "a")  # typing goes on: no answer, nothing written
        await pilot.pause(0.2)
        assert inp.value == "hiya" and app.asking is not None
        assert (repo / "a.py").read_text() == "x = 1\n"
        assert "press Tab to answer it" in app.transcript_text()
        await pilot.press("tab")
        assert app.focused is panel
        await pilot.press("escape")  # back to the draft, the approval still waits
        assert app.focused is inp and app.asking is not None
        await pilot.press("tab", "n")
        await until(pilot, lambda: app.turns == 1)
        assert app.focused is inp and inp.value == "hiya" and inp.cursor_position == 4
        assert not inp.selection or inp.selection.is_empty  # focus back did not select the draft
    drive(app, body)
    assert (repo / "a.py").read_text() == "x = 1\n" and agent.meta["approvals"][-1]["answer"] == "no"


def test_ctrl_c_at_an_approval_is_a_cancel_not_a_rejection(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="rm a.py"), reply(tok, "never")],
                    mode="accept-edits")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "delete a.py")
        await until(pilot, lambda: app.asking is not None)
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app.turns == 1)
        assert "Bash: cancelled, not run" in app.transcript_text()
    drive(app, body)
    from nanocode.protocol import CANCELLED
    assert agent.messages[-1] == {"role": "tool_result", "content": CANCELLED}
    assert agent.meta["approvals"][-1]["answer"] == "cancelled"
    assert agent.meta["turns"][-1]["stop_reason"] == "cancelled" and (repo / "a.py").exists()


def test_always_says_what_it_allows(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                        new_string="x = 2"), reply(tok, "done.")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "set x to 2")
        await until(pilot, lambda: app.asking is not None)
        from textual.widgets import Button
        assert "Edit on any file in the project" in str(app.query_one("#always", Button).label)
        await pilot.press("a")
        await until(pilot, lambda: app.turns == 1)
        assert "Edit: allowed, and from now on this session: Edit on any file in the project" \
            in app.transcript_text()
    drive(app, body)
    assert agent.policy.session == ["Edit"] and agent.meta["approvals"][-1]["rule"] == "Edit"


def test_edit_diff_is_numbered_in_the_file(engine, tok, repo):
    (repo / "m.py").write_text("a = 0\nb = 0\nc = 0\nd = 0\nx = 1\ny = 2\n")
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="m.py", old_string="x = 1\ny = 2",
                                        new_string="x = 3\ny = 2"), reply(tok, "done.")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "set x to 3")
        await until(pilot, lambda: app.asking is not None)
        assert "@@ -2,5 +2,5 @@" in approval_text(app)  # lines 2-6 of m.py (3 of context), not 1
        await pilot.press("y")
        await until(pilot, lambda: app.turns == 1)
        assert "@@ -2,5 +2,5 @@" in app.query_one(ToolCard).query_one(".diff").content.code
    drive(app, body)
    assert (repo / "m.py").read_text().endswith("x = 3\ny = 2\n")


VARIANCE = "def variance(xs):\n    m = sum(xs) / len(xs)\n    return sum((x - m) ** 2 for x in xs) / len(xs)\n"
# old_string ends mid-line: the Edit writes new_string glued to the rest of that line
PARTIAL = dict(file_path="stats.py", old_string="    return sum((", new_string="    return sum(values) / len(values)")
WRITTEN = "    return sum(values) / len(values)x - m) ** 2 for x in xs) / len(xs)"


def test_the_approval_diff_is_what_the_edit_writes(engine, tok, repo):
    """An old_string that ends mid-line: the approval shows the line the file will hold (here a
    syntax error), not a whole-line swap of old_string for new_string."""
    (repo / "stats.py").write_text(VARIANCE)
    agent, _ = make(engine, repo, [call(tok, "", "Edit", **PARTIAL), reply(tok, "done.")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "use values")
        await until(pilot, lambda: app.asking is not None)
        shown = approval_text(app)
        assert "+" + WRITTEN in shown and "-    return sum((x - m) ** 2 for x in xs) / len(xs)" in shown
        assert "+    return sum(values) / len(values)\n" not in shown + "\n"
        await pilot.press("y")
        await until(pilot, lambda: app.turns == 1)
        assert "+" + WRITTEN in app.query_one(ToolCard).query_one(".diff").content.code
    drive(app, body)
    assert (repo / "stats.py").read_text().splitlines()[2] == WRITTEN  # what was shown is on disk


def test_the_plain_face_shows_the_same_diff(engine, tok, repo, monkeypatch):
    import io
    import sys

    from agent.repl import Console, run_repl
    (repo / "stats.py").write_text(VARIANCE)
    agent, _ = make(engine, repo, [call(tok, "", "Edit", **PARTIAL), reply(tok, "done.")], mode="ask")
    monkeypatch.setattr(sys, "stdin", io.StringIO("use values\ny\n"))
    out = io.StringIO()
    assert run_repl(agent, "tiny", console=Console(out)) == 0
    assert "  +" + WRITTEN + "\n" in out.getvalue() and "@@ -1,3 +1,3 @@" in out.getvalue()
    assert (repo / "stats.py").read_text().splitlines()[2] == WRITTEN


def test_small_terminal_keeps_the_input_on_screen(engine, tok, repo):
    """70x16 and a long command to approve: the panel scrolls inside itself, the input and the
    status line stay visible; PageUp from the input scrolls the transcript."""
    command = "\n".join(f"echo line {i}" for i in range(40))
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command=command), reply(tok, "no")],
                    mode="accept-edits")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        for i in range(30):
            app.note(f"note {i}")
        await submit(pilot, "run it")
        await until(pilot, lambda: app.asking is not None)
        await pilot.pause()
        inp, status = app.query_one(HistoryInput), app.query_one("#status")
        assert inp.region.height > 0 and inp.region.bottom <= 16, inp.region
        assert status.region.height == 1
        panel, buttons = app.query_one("#approval"), app.query_one("#approval-buttons")
        assert buttons.region.bottom < panel.region.bottom  # the buttons inside its border
        await pilot.press("n")
        await until(pilot, lambda: app.turns == 1)
        t = app.query_one("#transcript")
        await pilot.pause()
        assert app.focused is inp and t.scroll_y == t.max_scroll_y > 0
        await pilot.press("pageup")
        assert t.scroll_y < t.max_scroll_y
    drive(app, body, size=(70, 16))


def test_multiline_paste_keeps_every_line(engine, tok, repo):
    from textual import events
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        await pilot.press("f", "i", "x", ":", "space")
        inp.post_message(events.Paste("Traceback (most recent call last):\r\n  line 2\nValueError\n"))
        await pilot.pause()
        assert inp.value == "fix: [pasted 3 lines #1]"
        inp.post_message(events.Paste("one line"))  # a one-line paste is just text
        await pilot.pause()
        assert inp.value == "fix: [pasted 3 lines #1]one line"
        await pilot.press("enter")
        await until(pilot, lambda: app.turns == 1)
    drive(app, body)
    assert agent.messages[1]["content"] == \
        "fix: Traceback (most recent call last):\n  line 2\nValueError\none line"


def test_at_path_completes_in_both_faces(engine, tok, repo):
    (repo / "src").mkdir()
    (repo / "src" / "parser.py").write_text("def parse():\n    pass\n")
    commit_all(repo)
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        await pilot.press(*"see @src/pa")
        await until(pilot, lambda: inp._suggestion == "see @src/parser.py")
        await pilot.press("tab")
        assert inp.value == "see @src/parser.py" and app.focused is inp
        await pilot.press("enter")
        await until(pilot, lambda: app.turns == 1)
        assert app.query_one(ToolCard).header == "Read src/parser.py"
    drive(app, body)
    from prompt_toolkit.document import Document

    from agent.repl import mention_completer
    got = [c.text for c in mention_completer(repo).get_completions(Document("fix @pars"), None)]
    assert got == ["@src/parser.py"]
