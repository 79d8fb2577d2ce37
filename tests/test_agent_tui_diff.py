"""The approval's diff in a small terminal (agent/tui/approval.py), driven by Textual's pilot on
the real tiny engine of tests/tui_pilot.py at 70x16: the diff gets the rows the screen has to
give, a line says how much of it is cut and how to see it, Ctrl+E expands the panel to the
whole screen; and the approval shows the same diff /diff shows afterwards, a last line without
a newline included (agent/display.unified_diff)."""
from agent.tui.app import NanocodeApp
from agent.tui.approval import ApprovalPanel
from scripted_agent import call, reply
from tiny_models import commit_all
from tui_pilot import approval_text, drive, engine, make, screen_text, submit, tok, until  # noqa: F401 - fixtures

LONG = "".join(f"y{i} = {i}\n" for i in range(30))  # a.py's first line becomes 30


def test_a_long_diff_gets_the_room_and_says_what_is_cut(engine, tok, repo):
    (repo / "m.py").write_text("a = 1\nb = 2\nc = 3")  # no newline at its end
    commit_all(repo)
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="m.py", old_string="a = 1",
                                        new_string=LONG), reply(tok, "done.")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "grow m.py")
        await until(pilot, lambda: app.asking is not None)
        await pilot.pause()
        panel, scroll = app.query_one(ApprovalPanel), app.query_one("#approval-scroll")
        assert scroll.region.height >= 7, scroll.region  # it was 1 to 3 rows at this size
        assert app.query_one("#prompt").region.bottom <= 16 and app.query_one("#status").region.height == 1
        shown = screen_text(app)  # the cut is said on the panel's bottom border
        below = round(scroll.max_scroll_y - scroll.scroll_y)
        assert f"… {below} more lines (↓ PgDn scroll · Ctrl+E expands)" in shown and below > 20, shown
        assert "[y]es" in shown and "[n]o" in shown
        await pilot.press("pagedown")
        await pilot.pause()
        now = round(scroll.max_scroll_y - scroll.scroll_y)
        assert now < below and f"… {now} more lines" in screen_text(app)
        await pilot.press("ctrl+e")  # expanded: the panel takes the whole screen
        await pilot.pause()
        assert scroll.region.height >= 11 and "[y]es" in screen_text(app, panel)
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert 7 <= scroll.region.height < 11 and app.query_one("#prompt").region.bottom <= 16
        diff = approval_text(app)
        await pilot.press("y")
        await until(pilot, lambda: app.turns == 1)
        await submit(pilot, "/diff")
        await pilot.pause()
        shown_after = app.query(".diff").last().content.code
        # one rendering: the approval's hunk is /diff's, git's "\ No newline at end of file" too
        assert diff[diff.index("@@"):] == shown_after[shown_after.index("@@"):].rstrip("\n")
        assert diff.endswith(" c = 3\n\\ No newline at end of file")
    drive(app, body, size=(70, 16))
    assert (repo / "m.py").read_text() == LONG + "\nb = 2\nc = 3"
