"""The Textual TUI's flow (agent/tui/app.py), driven by Textual's pilot on a REAL tiny engine (random
weights, real tokenizer, real tools in a temp git repo): a prompt streams its reply, tool cards
fill in, a reply taken back and resampled leaves the screen, slash commands (echoed), a resumed
session, Ctrl-C mid-turn, queued prompts, the model loading behind a live input. The engine, the
project and the scripted model (tests/tui_pilot.py) can hold a turn mid-reply so a test knows it
is still running while it types or presses Ctrl-C. The prompt and approvals:
test_agent_tui_input.py; completion and keys: test_agent_tui_keys.py."""

import threading

import pytest

from agent.loop.driver import Agent
from agent.sessions import SessionStore, find_session, load_session
from agent.tui.app import NanocodeApp
from agent.tui.input import ApprovalPanel, HistoryInput
from agent.tui.transcript import ReplyView, ToolCard
from nanocode.protocol import DROPPED
from scripted_agent import call, reply
from tiny_models import random_params, tiny
from tui_pilot import approval_text, drive, engine, make, submit, tok, until  # noqa: F401 - fixtures


def test_prompt_streams_text_and_history(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "let me look. done: it returns 1.")])
    app = NanocodeApp(agent=agent, model_name="tiny")

    async def body(pilot):
        await submit(pilot, "what is x?")
        await until(pilot, lambda: app.turns == 1)
        replies = list(app.query(ReplyView))
        assert [r.text for r in replies] == ["let me look. done: it returns 1."]
        assert "> what is x?" in app.transcript_text()
        status = str(app.query_one("#status").content)
        assert "tiny" in status and "mode ask" in status and "tok/s" in status
        assert f"context {len(agent.sampler.cache.ids):,}/1,024" in status
        inp = app.query_one(HistoryInput)  # up recalls the last prompt, down the draft
        await pilot.press("d", "r", "up")
        assert inp.value == "what is x?"
        await pilot.press("down")
        assert inp.value == "dr"
    drive(app, body, size=(120, 40))  # wide enough for every field, whatever the venv is called
    assert agent.messages[-1] == {"role": "assistant", "content": "let me look. done: it returns 1."}


def test_edit_approved_with_y_then_undo(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "fixing.", "Edit", file_path="a.py",
                                        old_string="x = 1", new_string="x = 2"),
                                   reply(tok, "done: x is 2.")], mode="ask")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "set x to 2")
        panel = app.query_one(ApprovalPanel)
        await until(pilot, lambda: panel.has_class("show"))
        assert app.focused is panel
        text = approval_text(app)
        assert "Edit needs approval" in text and "a.py" in text and "+x = 2" in text
        assert "waiting for your approval" in str(app.query_one("#status").content)
        assert " │ sandbox │ " in str(app.query_one("#status").content)
        await pilot.press("y")
        await until(pilot, lambda: app.turns == 1)
        assert not panel.has_class("show")
        assert (repo / "a.py").read_text() == "x = 2\n"
        card = app.query_one(ToolCard)
        assert card.header == "Edit a.py" and card.result_text.startswith("a.py")
        diff = card.query_one(".diff").content
        assert "-x = 1" in diff.code and "+x = 2" in diff.code
        assert "Edit: allowed once" in app.transcript_text()
        await submit(pilot, "/undo")  # shows the plan, changes nothing
        await pilot.pause()
        assert (repo / "a.py").read_text() == "x = 2\n"
        assert "/undo would undo request 1: restore a.py. Type /undo yes" in app.transcript_text()
        await submit(pilot, "/undo yes")
        await pilot.pause()
        assert (repo / "a.py").read_text() == "x = 1\n"
        assert "undid request 1: restored a.py" in app.transcript_text()
    drive(app, body)


def test_a_resampled_reply_leaves_the_screen(engine, tok, repo):
    """Replies the driver takes back and resamples are removed from the transcript: a repeat of
    an earlier call (taken back before it runs: its prose goes) and a call that failed without
    changing anything (taken back after it ran: its prose and its card go). One note, updated,
    says the step was resampled."""
    rd = call(tok, "let me look.", "Read", file_path="a.py")
    past_the_end = call(tok, "let me look again.", "Read", file_path="a.py", offset=50)
    agent, _ = make(engine, repo, [rd, rd, past_the_end, reply(tok, "done: x is 1.")], retries=2)
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "what is x?")
        await until(pilot, lambda: app.turns == 1)
        assert [r.text for r in app.query(ReplyView)] == ["let me look.", "done: x is 1."]
        assert [c.header for c in app.query(ToolCard)] == ["Read a.py"]
        text = app.transcript_text()
        assert "[a failed call: resampling (2 of 2)]" in text
        assert "resampling (1 of 2)" not in text and "past the end" not in text
    drive(app, body)
    assert agent.meta["turns"][-1]["stop_reason"] == "done"
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant", "tool_result",
                                                   "assistant"]


def test_read_card_then_edit_and_diff(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "let me look.", "Read", file_path="a.py"),
                                   call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                        new_string="x = 2"),
                                   reply(tok, "done: x is 2.")], mode="accept-edits")
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "set x to 2")
        await until(pilot, lambda: app.turns == 1)
        read, edit = app.query(ToolCard)
        assert read.header == "Read a.py" and read.collapsed  # output collapsed under its title
        assert read.result_text.startswith("    1→x = 1") and "1→x = 1" in str(read.title)
        assert not edit.collapsed and "+x = 2" in edit.query_one(".diff").content.code
        assert agent.messages[3]["content"] == read.result_text  # the model got the Read
        await submit(pilot, "/diff")  # the turn's diff, from the undo snapshot
        await pilot.pause()
        shown = app.query_one("#transcript").children[-1].content.code
        assert "a/a.py" in shown and "-x = 1" in shown and "+x = 2" in shown
    drive(app, body)


def resumed(engine, repo, replies):
    """A second agent going on with the session the first stored in `repo`, scripted to `replies`:
    (agent, the stored messages, their meta, the session file)."""
    path = find_session(repo)
    messages, meta = load_session(path)
    agent, _ = make(engine, repo, replies, messages=messages, meta=meta,
                    store=SessionStore(repo, meta["id"], path))
    return agent, messages, meta, path


def test_resumed_session_shows_history_and_continues(engine, tok, repo):
    first, _ = make(engine, repo, [call(tok, "let me look.", "Read", file_path="a.py"),
                                   reply(tok, "x is 1.")])
    first.conv.store = SessionStore(repo, first.meta["id"])
    first.run_turn("what is x?")
    agent, messages, meta, path = resumed(engine, repo, [reply(tok, "still 1.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        text = app.transcript_text()
        assert f"continuing session {meta['id']} (1 earlier requests)" in text
        assert "> what is x?" in text
        assert [r.text for r in app.query(ReplyView)] == ["let me look.", "x is 1."]
        card = app.query_one(ToolCard)
        assert card.header == "Read a.py" and card.result_text.startswith("    1→x = 1")
        await submit(pilot, "and now?")
        await until(pilot, lambda: app.turns == 1)
        assert app.query(ReplyView)[-1].text == "still 1."
    drive(app, body)
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant", "tool_result",
                                                   "assistant", "user", "assistant"]
    assert agent.messages[:5] == messages and agent.sampler.cache.ids == agent.sampler.rendered_ids(agent.messages)
    assert load_session(path)[0] == agent.messages  # the same file goes on


def test_a_resumed_session_shows_an_undone_request_as_undone(engine, tok, repo):
    """Request 1 edits a.py and /undo takes it back, request 2 only reads: resumed, the
    transcript says after request 1 that it was undone (it showed the edit as if it stood), and
    nothing after request 2."""
    first, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                        new_string="x = 2"), reply(tok, "done."),
                                   reply(tok, "x is 1.")], mode="auto")
    first.conv.store = SessionStore(repo, first.meta["id"])
    first.run_turn("set x to 2")
    first.undo()
    first.run_turn("what is x now?")
    agent, _, meta, _ = resumed(engine, repo, [reply(tok, "ok")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await pilot.pause()
        text = app.transcript_text()
        note = "[request 1 was undone with /undo: its changes were taken back]"
        assert f"continuing session {meta['id']} (2 earlier requests; request 1 undone with /undo)" in text
        assert text.index("> set x to 2") < text.index(note) < text.index("what is x now?")
        assert text.count("was undone with /undo") == 1
    drive(app, body)


def test_compact_drops_old_outputs(engine, tok, repo):
    (repo / "b.py").write_text("def main():\n    return 1\n" * 3)
    rd = call(tok, "", "Read", file_path="b.py")
    agent, _ = make(engine, repo, [rd, reply(tok, "ok."), rd, reply(tok, "ok.")])
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        for i, text in enumerate(("read b", "again")):
            await submit(pilot, text)
            await until(pilot, lambda: app.turns == i + 1)
        n = len(agent.sampler.cache.ids)
        await submit(pilot, "/compact")
        await until(pilot, lambda: "compacted" in app.transcript_text())
        freed = n - len(agent.sampler.cache.ids)
        assert freed > 0 and f"{freed:,} tokens freed" in app.transcript_text()
        outs = [m["content"] for m in agent.messages if m["role"] == "tool_result"]
        assert outs[0].startswith(DROPPED) and not outs[1].startswith(DROPPED)  # a digest stays
        app.refresh_status()
        assert f"context {len(agent.sampler.cache.ids):,}/" in str(app.query_one("#status").content)
    drive(app, body)


def test_slash_commands(engine, tok, repo):
    (repo / "NANOCODE.md").write_text("use tabs\n")
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    agent.conv.store = SessionStore(repo, agent.meta["id"])
    app = NanocodeApp(agent=agent, model_name="tiny")

    async def body(pilot):
        for cmd in ("/mode plan", "/help", "/memory", "/model", "/compact", "/resume", "/nope",
                    "/mode nope"):
            await submit(pilot, cmd)
        await pilot.pause()
        assert agent.mode == "plan" and "mode plan" in str(app.query_one("#status").content)
        await until(pilot, lambda: "nothing to compact" in app.transcript_text())
        echoed = [str(w.content) for w in app.query(".user")]
        assert echoed == ["/mode plan", "/help", "/memory", "/model", "/compact", "/resume",
                          "/nope", "/mode nope"]  # each command as typed, like a message
        text = app.transcript_text()
        for want in ("mode: plan", "/undo", "NANOCODE.md", "use tabs", "4 layers",
                     "no saved sessions", "unknown command /nope", "unknown mode 'nope'"):
            assert want in text, want
        await submit(pilot, "hello")  # a turn saves the session; /resume lists it
        await until(pilot, lambda: app.turns == 1)
        sid = agent.meta["id"]
        await submit(pilot, "/resume")
        await pilot.pause()
        assert f"{sid}" in app.transcript_text() and "hello" in app.transcript_text()
        await submit(pilot, "/clear")
        await pilot.pause()
        assert agent.messages == [] and agent.meta["id"] != sid
        assert "> hello" not in app.transcript_text()
        await submit(pilot, "/quit")
        await until(pilot, lambda: not app.is_running)
    drive(app, body)


def test_ctrl_c_cancels_a_turn_and_input_stays_live(engine, tok, repo):
    long = reply(tok, "let me look. " * 40)
    agent, script = make(engine, repo, [long, reply(tok, "ok.")], hold=3, max_tokens=800)
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "go")
        await until(pilot, script.held.is_set)  # the worker is blocked mid-reply
        await until(pilot, lambda: app.query(ReplyView) and app.query_one(ReplyView).text)
        assert app.running and "working" in str(app.query_one("#status").content)
        await pilot.press("a", "b", "c")  # the UI is live while the turn runs
        assert app.query_one(HistoryInput).value == "abc"
        app.query_one(HistoryInput).value = ""
        await pilot.press("ctrl+c")
        assert app.cancel.is_set() and app.is_running
        script.gate.set()
        await until(pilot, lambda: app.turns == 1)
        assert agent.meta["turns"][-1]["stop_reason"] == "cancelled"
        assert "[cancelled]" in app.transcript_text()
        assert len(app.query_one(ReplyView).text) < len("let me look. " * 40)
        script.hold = None
        await submit(pilot, "again")  # the session survives
        await until(pilot, lambda: app.turns == 2)
        assert app.query(ReplyView)[-1].text == "ok."
        await pilot.press("ctrl+c")  # idle: twice quits
        assert app.is_running
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.is_running)
    drive(app, body)
    assert app.return_code == 0


def test_queued_prompts_show_in_the_order_they_run(engine, tok, repo):
    agent, script = make(engine, repo, [reply(tok, "first reply."), reply(tok, "second reply.")],
                         hold=2)
    app = NanocodeApp(agent=agent)

    async def body(pilot):
        await submit(pilot, "one")
        await until(pilot, script.held.is_set)
        await submit(pilot, "two")
        await pilot.pause()
        assert "queued (1), runs after the current turn: two" in app.transcript_text()
        script.gate.set()
        await until(pilot, lambda: app.turns == 2)
        order = [str(w.content) if not isinstance(w, ReplyView) else w.text
                 for w in app.query_one("#transcript").children
                 if isinstance(w, ReplyView) or "user" in w.classes]
        assert order == ["> one", "first reply.", "> two", "second reply."]
    drive(app, body)


def test_prompt_waits_for_the_loading_model(engine, tok, repo):
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    go = threading.Event()

    def loader():
        go.wait(30)
        return agent

    app = NanocodeApp(loader=loader, model_name="tiny")

    async def body(pilot):
        inp = app.query_one(HistoryInput)
        assert "loading model" in inp.placeholder
        assert "loading model" in str(app.query_one("#status").content)
        await submit(pilot, "hi")
        await pilot.pause()
        assert app.pending == ["hi"] and "runs after the model to load: hi" in app.transcript_text()
        await submit(pilot, "/mode plan")
        await pilot.pause()
        assert "still loading" in app.transcript_text()
        go.set()
        await until(pilot, lambda: app.turns == 1)
        assert app.agent is agent and app.query_one(ReplyView).text == "ok."
        assert agent.messages[1]["content"] == "hi"
    drive(app, body)


def test_load_failure_is_shown(repo):
    from agent.tui.app import LoadError

    def loader():
        raise LoadError("error: cannot load the model at /x: nope", 2)

    app = NanocodeApp(loader=loader)

    async def body(pilot):
        await until(pilot, lambda: app.load_error is not None)
        await submit(pilot, "hi")
        await pilot.pause()
        assert "cannot load the model" in app.transcript_text() and app.pending == []
        assert "no model" in app.query_one(HistoryInput).placeholder
        assert "model failed to load" in str(app.query_one("#status").content)
        await submit(pilot, "/quit")
        await until(pilot, lambda: not app.is_running)
    drive(app, body)
    assert app.return_code == 2


def test_cli_hands_the_tui_a_loader(tok, repo, tmp_path, monkeypatch):
    """`nanocode` (no -p, no --plain) starts the TUI before loading the model; the Loader builds
    the Agent as the other faces get it (mode, sampling flags, model path, session store)."""
    from agent import cli
    from agent.tui import app as tui
    from nanocode.checkpoint import save
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=256)
    ckpt = tmp_path / "run" / "checkpoints"
    save(ckpt, 1, random_params(cfg), config=cfg, tokenizer=tok)
    got = {}
    monkeypatch.setattr(tui, "run", lambda loader, args: got.setdefault("loader", loader) and 7)
    monkeypatch.setattr(cli, "terminal_problem", lambda *a: None)  # pytest's stdin is no tty
    assert cli.main(["--model", str(ckpt), "--cwd", str(repo), "--mode", "plan",
                     "--max-tokens", "9"]) == 7
    loader = got["loader"]
    assert isinstance(loader, tui.Loader) and loader.name == "run"
    agent = loader()
    assert isinstance(agent, Agent) and agent.mode == "plan" and agent.sampler.settings.max_tokens == 9
    assert agent.meta["model"] == str(loader.model_dir) and agent.conv.store is not None
    bad = tui.Loader(loader.options, repo, tmp_path / "nothing")
    with pytest.raises(tui.LoadError, match="no checkpoint for"):
        bad()


def test_usage_under_each_turn_and_how_to_resume_on_exit(engine, tok, repo, monkeypatch, capsys):
    """Each finished turn leaves its usage under it (tokens in and out, tok/s, seconds: the line
    --plain prints), and leaving the app prints how to resume the session, only once it has turns."""
    import re

    from agent.tui import app as tui
    agent, _ = make(engine, repo, [reply(tok, "done: it returns 1.")])

    async def body(pilot):
        await submit(pilot, "what is x?")
        await until(pilot, lambda: pilot.app.turns == 1)
        lines = pilot.app.transcript_text().splitlines()
        usage = [line for line in lines if re.fullmatch(r"\[[\d,]+ tokens in, \d+ out, [\d.]+ tok/s, [\d.]+ s\]",
                                                        line.strip())]
        assert len(usage) == 1 and lines.index(usage[0]) > lines.index("> what is x?")
        await pilot.press("ctrl+d")
    monkeypatch.setattr(tui.NanocodeApp, "run", lambda app: drive(app, body))
    assert tui.run(agent) == 0
    assert capsys.readouterr().out == f"resume this session with: nanocode --resume {agent.meta['id']}\n"

    idle, _ = make(engine, repo, [reply(tok, "unused")])
    monkeypatch.setattr(tui.NanocodeApp, "run", lambda app: drive(app, lambda pilot: pilot.pause(0.01)))
    assert tui.run(idle) == 0 and capsys.readouterr().out == ""
