"""The TUI's rewind (agent/tui/app.py, agent/tui/rewind.py) and type-ahead at an approval
(agent/tui/approval.py), driven by Textual's pilot on the real tiny engine of tests/tui_pilot.py
in a real git project: Esc twice on an idle prompt lists the requests, newest selected; picking
one puts the files and the transcript back to before it and its text in the prompt (the draft
that was there goes to the history) and the session resumed later shows the rewound
conversation; /rewind opens the same list and Esc closes it with nothing changed; /usage shows
the counted tokens. Keys typed while an approval waits go to the draft,
except the approval's own (y / n answer it; Enter does nothing)."""
from agent.sessions import SessionStore, load_session
from agent.tui import approval as tui_approval
from agent.tui.app import NanocodeApp
from agent.tui.approval import ApprovalPanel
from agent.tui.input import HistoryInput
from agent.tui.rewind import RewindScreen
from scripted_agent import call, reply
from tui_pilot import drive, engine, make, screen_text, submit, tok, until  # noqa: F401 - fixtures


def edit(tok, old, new):
    return call(tok, "", "Edit", file_path="a.py", old_string=old, new_string=new)


def test_esc_twice_rewinds_files_transcript_and_draft(engine, tok, repo):
    agent, _ = make(engine, repo, [edit(tok, "x = 1", "x = 2"), reply(tok, "done."),
                                   edit(tok, "x = 2", "x = 3"), reply(tok, "done.")], mode="auto")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        await submit(pilot, "set x to 2")
        await until(pilot, lambda: app.turns == 1)
        await submit(pilot, "set x to 3")
        await until(pilot, lambda: app.turns == 2)
        assert (repo / "a.py").read_text() == "x = 3\n"
        await submit(pilot, "/rewind")  # the same list; Esc closes it, nothing changes
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RewindScreen))
        assert (repo / "a.py").read_text() == "x = 3\n" and len(agent.meta["turns"]) == 2
        inp.value = "half-typed"
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        shown = screen_text(app)
        assert "1. set x to 2 [changed a.py]" in " ".join(shown.split())
        assert "2. set x to 3 [changed a.py]" in " ".join(shown.split())
        await pilot.press("enter")  # the newest is selected: back to before "set x to 3"
        await until(pilot, lambda: not isinstance(app.screen, RewindScreen))
        await pilot.pause()
        assert (repo / "a.py").read_text() == "x = 2\n"
        text = app.transcript_text()
        assert "> set x to 2" in text and "> set x to 3" not in text
        assert "rewound to before request 2" in text and "files restored: a.py" in text
        assert inp.value == "set x to 3" and app.focused is inp
        assert inp.sent[-1] == "half-typed"  # the draft it replaced: up brings it back
        await submit(pilot, "/usage")
        await until(pilot, lambda: "usage since nanocode started" in app.transcript_text())
        u = agent.totals
        assert f"{u['completion_tokens']:,} in {u['generate_s']:.1f} s" in app.transcript_text()
    agent.conv.store = SessionStore(repo, agent.meta["id"])
    drive(app, body)
    assert [t["request"] for t in agent.meta["turns"]] == ["set x to 2"]
    messages, meta = load_session(agent.conv.store.path)  # resumed: the rewound conversation
    again, _ = make(engine, repo, [reply(tok, "ok.")], messages=messages, meta=meta)
    resumed = NanocodeApp(agent=again)

    async def shown(pilot):
        await until(pilot, lambda: "continuing session" in resumed.transcript_text())
        text = resumed.transcript_text()
        assert "> set x to 2" in text and "set x to 3" not in text
    drive(resumed, shown)


def test_keys_typed_at_an_approval_go_to_the_draft(engine, tok, repo, monkeypatch):
    """An approval waiting with no typing under way (armed): a letter that does not answer it
    lands in the draft (it used to be dropped), and so does what follows; Backspace edits the
    draft; Enter neither answers nor sends; once typing pauses, y answers."""
    monkeypatch.setattr(tui_approval, "GUARD_S", 0.3)
    agent, _ = make(engine, repo, [edit(tok, "x = 1", "x = 2"), reply(tok, "done.")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        inp, panel = app.query_one(HistoryInput), app.query_one(ApprovalPanel)
        await submit(pilot, "set x to 2")
        await until(pilot, lambda: app.asking is not None)
        await until(pilot, lambda: panel.armed, timeout=10)
        assert app.focused is panel
        await pilot.press("h", "e", "l", "l", "o", "space", "w", "backspace")
        await until(pilot, lambda: panel.armed, timeout=10)
        await pilot.press("enter", "t", "enter")
        await pilot.pause(0.1)
        assert inp.value == "hello t" and app.asking is not None
        assert [str(w.content) for w in app.query(".user")] == ["> set x to 2"]  # nothing sent
        assert (repo / "a.py").read_text() == "x = 1\n"
        await until(pilot, lambda: panel.armed, timeout=10)
        await pilot.press("y")
        await until(pilot, lambda: app.turns == 1)
        assert app.focused is inp and inp.value == "hello t"
    drive(app, body)
    assert (repo / "a.py").read_text() == "x = 2\n" and agent.meta["approvals"][-1]["answer"] == "yes"
