"""/rewind (agent/loop/driver.Agent.rewind, agent/loop/conversation.py, agent/loop/turn_undo.py, agent/commands.py):
going back to just before an earlier request puts the conversation and the files back as they
were there, on a real git project with a scripted model on the real tiny engine.

- the plain face through a real pipe: `/rewind` lists the requests numbered, `/rewind 2` over
  three turns (two Edits and a Bash command) restores a.py and removes the file the command
  made, says that commands' other effects stay, offers the request's text again, and the next
  request goes on from there; the session file holds the rewound conversation and, under
  "rewinds", what was taken out; a resumed session shows the rewound one;
- the rule for a file changed since: the user's version is kept (that turn is not undone) and
  the report and the model's next message name it; an older turn whose files are untouched is
  still restored;
- an Edit of an ignored file is named as left as it is; an /undo note and a mode switch the cut
  request carried are told again; bad numbers say what exists and change nothing.
"""
import io
import os
import sys

from agent import commands
from agent.loop.driver import Agent
from agent.repl import Console, run_repl
from agent.sessions import SessionStore, load_session
from nanocode.protocol import mode_note
from scripted_agent import call, make, reply
from tiny_models import commit_all


def edit(tok, path, old, new):
    return call(tok, "", "Edit", file_path=path, old_string=old, new_string=new)


def piped_console(lines, monkeypatch):
    """The REPL's own Console, reading `lines` from a real pipe (no terminal: plain input)."""
    r, w = os.pipe()
    os.write(w, "".join(line + "\n" for line in lines).encode())
    os.close(w)
    monkeypatch.setattr(sys, "stdin", os.fdopen(r))
    return Console(out=io.StringIO(), color=False)


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user"]


def test_plain_rewind_over_three_turns(engine, tok, repo, monkeypatch):
    replies = [edit(tok, "a.py", "x = 1", "x = 2"), reply(tok, "done."),
               call(tok, "", "Bash", command="echo hi > notes.txt"), reply(tok, "done."),
               edit(tok, "a.py", "x = 2", "x = 3"), reply(tok, "done."),
               edit(tok, "a.py", "x = 2", "x = 5"), reply(tok, "done.")]
    agent, script = make(engine, repo, replies, mode="auto", sandbox=False)  # no sandbox: Bash asks
    agent.conv.store = SessionStore(repo, agent.meta["id"])
    con = piped_console(["set x to 2", "add notes", "y", "set x to 3", "/rewind", "/rewind 2",
                         "set x to 5", "/quit"], monkeypatch)
    assert run_repl(agent, "tiny", console=con) == 0
    out = con.out.getvalue()
    assert ("  1. set x to 2  [changed a.py]\n  2. add notes  [changed notes.txt]\n"
            "  3. set x to 3  [changed a.py]\n") in out
    said = out[out.index("rewound to before request 2"):]
    assert said.startswith("rewound to before request 2: 2 requests taken out of the conversation")
    assert "files restored: a.py" in said and "removed (the rewound turns created them): notes.txt" in said
    assert "commands ran in the rewound turns" in said and "is not undone" in said
    assert "the request, to send again or change: add notes" in said
    # after the rewind the files were as they were before request 2 (then "set x to 5" ran)
    assert not (repo / "notes.txt").exists() and (repo / "a.py").read_text() == "x = 5\n"
    assert users(agent.messages) == ["set x to 2", "set x to 5"]
    assert all(script.identity)  # the model saw exactly the rewound conversation
    messages, meta = load_session(agent.conv.store.path)
    assert users(messages) == ["set x to 2", "set x to 5"]
    [entry] = meta["rewinds"]
    assert entry["to_request"] == 2 and users(entry["messages"]) == ["add notes", "set x to 3"]
    assert [t["request"] for t in entry["turns"]] == ["add notes", "set x to 3"]
    assert [a["name"] for a in entry["approvals"]] == ["Bash"] and meta["approvals"] == []
    assert [t["request"] for t in meta["turns"]] == ["set x to 2", "set x to 5"]
    resumed = Agent(agent.sampler, repo, agent.policy, agent.settings, messages, meta)
    assert [(n, text) for n, text, _ in resumed.conv.requests()] == [(1, "set x to 2"), (2, "set x to 5")]


def test_a_file_you_changed_since_is_kept_and_named(engine, tok, repo):
    """Rule: a turn whose files changed since it (here by the user) is not undone; the user's
    version stays, the report and the model's next message name it. Turn 1, untouched, is."""
    (repo / "b.py").write_text("y = 1\n")
    commit_all(repo)
    agent, _ = make(engine, repo, [edit(tok, "a.py", "x = 1", "x = 2"), reply(tok, "done."),
                                   edit(tok, "b.py", "y = 1", "y = 2"), reply(tok, "done."),
                                   reply(tok, "ok.")], mode="auto")
    agent.run_turn("set x to 2")
    agent.run_turn("set y to 2")
    (repo / "b.py").write_text("y = 99  # mine\n")  # the user's own work, not committed
    out = commands.run("/rewind 1", agent, agent.root)
    assert isinstance(out, commands.Rewound) and out.draft == "set x to 2"
    assert (repo / "b.py").read_text() == "y = 99  # mine\n"  # never written over
    assert (repo / "a.py").read_text() == "x = 1\n"  # turn 1 undone
    assert "files restored: a.py" in out.text
    assert "request 2's changes left as they are now (b.py): cannot undo turn 2: b.py changed since the " \
           "turn (by you or a later turn)" in out.text
    assert users(agent.messages) == [] and agent.meta["turns"] == []
    agent.run_turn("hello")
    note = users(agent.messages)[0]
    assert "were not put back and may differ from what you saw: b.py" in note and note.endswith("hello")


def test_ignored_edits_mode_and_undo_notes_and_bad_numbers(engine, tok, repo):
    (repo / ".gitignore").write_text("*.env\n")
    commit_all(repo)
    (repo / "local.env").write_text("KEY=1\n")
    agent, _ = make(engine, repo, [edit(tok, "a.py", "x = 1", "x = 2"), reply(tok, "done."),
                                   edit(tok, "local.env", "KEY=1", "KEY=2"), reply(tok, "done."),
                                   reply(tok, "ok.")], mode="auto", ground=False)  # ignored: no grounded path
    agent.run_turn("set x to 2")
    assert "undid request 1" in commands.run("/undo yes", agent, agent.root).text
    agent.run_turn("bump the key")
    first = users(agent.messages)[1]
    assert first.startswith("[the user undid an earlier request's changes") and first.endswith("bump the key")
    assert (repo / "local.env").read_text() == "KEY=2\n"
    for bad, says in (("/rewind 3", "no request 3 to rewind to (this conversation has 1 to 2)"),
                      ("/rewind x", "/rewind takes a request's number, not 'x'")):
        assert says in commands.run(bad, agent, agent.root).text
    assert len(agent.meta["turns"]) == 2
    out = commands.run("/rewind 2", agent, agent.root)
    assert out.draft == "bump the key"
    assert "left as they are (no snapshot holds them: ignored, too big or outside the project): local.env" in out.text
    assert (repo / "local.env").read_text() == "KEY=2\n"
    agent.run_turn("again")  # the undo note the cut request carried is told again
    again = users(agent.messages)[1]
    assert again.startswith("[the user undid an earlier request's changes") and "local.env" in again \
        and again.endswith("again")
    assert commands.run("/rewind 9", agent, agent.root).text.startswith("no request 9")


def test_listing_a_mode_switch_told_again_and_nothing_to_rewind(engine, tok, repo):
    """The list shows each request's first line; a request that carried a mode switch, rewound,
    leaves the model told the mode it had before, so the next request carries the switch again;
    a turn that changed nothing touches no file."""
    agent, _ = make(engine, repo, [reply(tok, "ok.")] * 3, mode="plan")
    assert commands.run("/rewind", agent, agent.root).text == \
        "nothing to rewind: this conversation has no request yet"
    agent.run_turn("look at\nthese two lines")
    agent.set_mode("auto")
    agent.run_turn("and now")
    assert users(agent.messages)[1] == f"{mode_note('auto')}\nand now"
    out = commands.run("/rewind", agent, agent.root)
    assert isinstance(out, commands.Requests) and "  1. look at…\n  2. and now" in out.text
    assert out.items == ((1, "look at\nthese two lines", ()), (2, "and now", ()))
    out = commands.run("/rewind 2", agent, agent.root)
    assert out.text.splitlines() == ["rewound to before request 2: 1 request taken out of the "
                                     "conversation (kept in the session file under \"rewinds\")"]
    assert not agent.undo_log.made  # no turn changed a file: no git ran
    agent.run_turn("again")
    assert users(agent.messages) == ["look at\nthese two lines", f"{mode_note('auto')}\nagain"]


def test_a_saved_session_with_odd_records_neither_crashes_nor_misleads(engine, tok, repo):
    """A session file is untrusted (a cloned repository can ship one): records whose fields have
    the wrong types are listed and rewound without a crash, an unknown mode is not adopted, and
    records that do not point at requests offer nothing to rewind."""
    agent, _ = make(engine, repo, [reply(tok, "ok.")])
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "ok."}]
    odd = {"user_index": 1, "request": 7, "files_changed": 5, "notes": "abc", "mode_before": "evil",
           "checkpoint": "x", "steps": 0, "stop_reason": "done"}
    agent.resume(messages, {"id": "odd1", "mode": "ask", "approvals": [{"turn": "x"}], "turns": [odd]}, None)
    listed = commands.run("/rewind", agent, agent.root)
    assert listed.items == ((1, "hi", ()),)
    out = commands.run("/rewind 1", agent, agent.root)
    assert out.draft == "hi" and agent.meta["mode"] == "ask" and agent.undo_log.notes == []
    assert [m["role"] for m in agent.messages] == ["system"] and agent.meta["approvals"] == [{"turn": "x"}]
    agent.resume(messages, {"id": "odd2", "approvals": [], "turns": [dict(odd, user_index=2)]}, None)
    assert commands.run("/rewind", agent, agent.root).text.startswith("nothing to rewind")
