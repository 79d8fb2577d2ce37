"""The TUI's approvals (agent/tui/approval.py) and prompt (agent/tui/input.py) as people use them,
driven by Textual's pilot on the real tiny engine of tests/tui_pilot.py: y / n answers, an
approval that takes the keys but keeps the draft (and lets typing under way go on into it), Esc
or Ctrl-C at an approval, "always" that says what it allows, Edit diffs numbered in the file, a
small or narrow terminal (the state and every choice stay visible), multi-line paste, @path
completion in both faces. Completion and the other keys: test_agent_tui_keys.py."""
import pytest

from agent.tui import approval as tui_approval
from agent.tui.app import NanocodeApp
from agent.tui.input import ApprovalPanel, HistoryInput
from agent.tui.transcript import ToolCard
from nanocode.protocol import REJECTED
from scripted_agent import call, reply
from tiny_models import commit_all
from tui_pilot import approval_text, drive, engine, make, screen_text, submit, tok, until  # noqa: F401 - fixtures


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
        assert "Edit: rejected" in app.transcript_text()
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


EDIT = dict(file_path="a.py", old_string="x = 1", new_string="x = 2")


def test_approval_takes_the_keys_and_keeps_the_draft(engine, tok, repo):
    """A draft in the prompt: the approval still takes the keys (y answers it, no letter goes
    into the draft), says how to get back to the draft, and the draft comes back intact."""
    agent, script = make(engine, repo, [call(tok, "", "Edit", **EDIT), reply(tok, "done.")],
                         hold=2, mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        await submit(pilot, "set x to 2")
        await until(pilot, script.held.is_set)
        inp.value = "and then"  # a draft, written a while before the approval comes
        inp.cursor_position = 3
        script.gate.set()
        await until(pilot, lambda: app.asking is not None)
        panel = app.query_one(ApprovalPanel)
        assert app.focused is panel
        await pilot.pause()
        shown = screen_text(app, panel)
        assert "Tab: your draft (kept)" in shown and "[y]es" in shown
        await pilot.press("y")
        await until(pilot, lambda: app.turns == 1)
        assert agent.meta["approvals"][-1]["answer"] == "yes"
        assert app.focused is inp and inp.value == "and then" and inp.cursor_position == 3
    drive(app, body)
    assert (repo / "a.py").read_text() == "x = 2\n"


def test_typing_under_way_goes_on_into_the_draft(engine, tok, repo, monkeypatch):
    """An approval that appears mid-word: keys typed before a pause go on into the draft (none
    answers y / n / a); once the typing has paused, the keys answer; Tab goes to the draft and
    back; the draft survives the answer, focus back at its end, nothing selected."""
    monkeypatch.setattr(tui_approval, "GUARD_S", 5.0)  # a busy CPU: 5 s between keys is typing
    agent, script = make(engine, repo, [call(tok, "", "Edit", **EDIT), reply(tok, "never")],
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
        assert app.focused is panel and not panel.armed
        await pilot.press("y", "a", "backspace", "a")  # typing goes on: no answer
        await pilot.pause(0.2)
        assert inp.value == "hiya" and app.asking is not None
        assert (repo / "a.py").read_text() == "x = 1\n"
        await until(pilot, lambda: panel.armed, timeout=10)
        await pilot.press("tab")  # to the draft; the approval still waits
        assert app.focused is inp and app.asking is not None
        await pilot.press("tab")
        assert app.focused is panel
        await pilot.press("n")
        await until(pilot, lambda: app.turns == 1)
        assert app.focused is inp and inp.value == "hiya" and inp.cursor_position == 4
        assert inp.selection.is_empty  # focus back did not select the draft
    drive(app, body)
    assert (repo / "a.py").read_text() == "x = 1\n" and agent.meta["approvals"][-1]["answer"] == "no"


@pytest.mark.parametrize("key", ["ctrl+c", "escape"])
def test_ctrl_c_or_esc_at_an_approval_is_a_cancel_not_a_rejection(engine, tok, repo, key):
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command="rm a.py"), reply(tok, "never")],
                    mode="accept-edits")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "delete a.py")
        await until(pilot, lambda: app.asking is not None)
        await pilot.press(key)
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
        await pilot.pause()
        choices = screen_text(app, app.query_one("#approval-choices"))
        assert "[a]lways this session: Edit on any file in the project" in choices
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
        panel, choices = app.query_one("#approval"), app.query_one("#approval-choices")
        assert choices.region.bottom < panel.region.bottom  # the choices inside its border
        await pilot.press("n")
        await until(pilot, lambda: app.turns == 1)
        t = app.query_one("#transcript")
        await pilot.pause()
        assert app.focused is inp and t.scroll_y == t.max_scroll_y > 0
        await pilot.press("pageup")
        assert t.scroll_y < t.max_scroll_y
    drive(app, body, size=(70, 16))


@pytest.mark.parametrize("size", [(120, 30), (70, 16)])
def test_narrow_terminal_keeps_the_state_and_every_choice(engine, tok, repo, size):
    """The status line drops lesser fields, never the state; the approval's choices wrap, so
    each one is on screen whole, a long "always" too."""
    command = "ls src && grep -rn main . && wc -l a.py && head -n 3 a.py"
    rules = "Bash(ls*), Bash(grep -rn main .), Bash(wc -l a.py), Bash(head -n 3 a.py)"
    agent, _ = make(engine, repo, [call(tok, "", "Bash", command=command), reply(tok, "no")],
                    mode="accept-edits")
    assert agent.policy.always("Bash", {"command": command}, store=False) == rules
    app = NanocodeApp(agent=agent, model_name="tiny")

    async def body(pilot):
        await submit(pilot, "look around")
        await until(pilot, lambda: app.asking is not None)
        await pilot.pause()
        status = screen_text(app, app.query_one("#status"))
        assert status.endswith("waiting for your approval") and "mode accept-edits" in status
        panel = screen_text(app, app.query_one("#approval"))
        for want in ("[y]es", "[n]o", f"[a]lways this session: {rules}", "Esc: stop the turn"):
            assert want in panel, (want, panel)
        await pilot.press("n")
        await until(pilot, lambda: app.turns == 1)
        assert screen_text(app, app.query_one("#status")).endswith("ready")
    drive(app, body, size=size)


def test_multiline_paste_keeps_every_line(engine, tok, repo):
    """A paste keeps its lines in the prompt, which grows; a long one shows as one token, and
    what is sent has every line."""
    from textual import events
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)
    long = "".join(f"frame {i}\n" for i in range(30))

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        one_line = inp.region.height
        await pilot.press("f", "i", "x", ":", "space")
        inp.post_message(events.Paste("Traceback (most recent call last):\r\n  line 2\nValueError\n"))
        await pilot.pause()
        assert inp.value == "fix: Traceback (most recent call last):\n  line 2\nValueError\n"
        assert inp.region.height >= one_line + 3  # the prompt grew to show the lines
        inp.post_message(events.Paste("one line"))  # a one-line paste is just text
        inp.post_message(events.Paste(long))
        await pilot.pause()
        assert inp.value.endswith("ValueError\none line[pasted 30 lines #1]")
        await pilot.press("enter")
        await until(pilot, lambda: app.turns == 1)
    drive(app, body)
    assert agent.messages[1]["content"] == \
        "fix: Traceback (most recent call last):\n  line 2\nValueError\none line" + long.strip()


def test_at_path_completes_in_both_faces(engine, tok, repo):
    (repo / "src").mkdir()
    (repo / "src" / "parser.py").write_text("def parse():\n    pass\n")
    commit_all(repo)
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        await pilot.press(*"see @src/pa")
        await until(pilot, lambda: inp.suggestion == "rser.py")  # shown after the cursor
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
