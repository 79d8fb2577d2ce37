"""`train export-sessions`: real agent sessions (the real loop on a tiny engine, scripted
replies, real tools on a temp git repo, saved by the real SessionStore) become SFT rows and
preference pairs that validate and load into `train sft`."""
import json

from agent.sessions import SessionStore, list_sessions
from scripted_agent import call, make, reply
from train.cli import main as train_main
from train.conversations import keep_valid


def edit(tok, new):
    return call(tok, "", "Edit", file_path="a.py", old_string="x = 1", new_string=new)


def test_sessions_become_rows_and_pairs(engine, tok, repo, tmp_path, capsys):
    # session 1: a good turn (marked /good), a rejected edit, then an accepted one
    a, _ = make(engine, repo, [call(tok, "", "Read", file_path="a.py"), reply(tok, "x is 1."),
                               edit(tok, "x = 5"), edit(tok, "x = 2"), reply(tok, "done.")],
                mode="ask")
    a.conv.store = SessionStore(repo, a.meta["id"])
    a.run_turn("what is x?")
    assert a.mark("good") == (1, None)
    assert a.run_turn("set x to 2", approve=lambda *x: "no").stop_reason == "rejected"
    assert a.run_turn("no: 2, please", approve=lambda *x: "yes").stop_reason == "done"
    # session 2: cancelled at its first approval: nothing to train on
    b, _ = make(engine, repo, [edit(tok, "x = 9"), reply(tok, "?")], mode="ask")
    b.conv.store = SessionStore(repo, b.meta["id"] + "b")

    def ctrl_c(*args):
        raise KeyboardInterrupt
    assert b.run_turn("set x to 9", approve=ctrl_c).stop_reason == "cancelled"
    # session 3: a turn the user undid, then a good one
    (repo / "a.py").write_text("x = 1\n")
    c, _ = make(engine, repo, [edit(tok, "x = 7"), reply(tok, "done."), reply(tok, "ok then.")],
                mode="auto")
    c.conv.store = SessionStore(repo, c.meta["id"] + "c")
    c.run_turn("set x to 7")
    c.undo()
    assert c.meta["turns"][0]["undone"] is True
    c.run_turn("just tell me x")
    assert len(list_sessions(repo)) == 3

    out = tmp_path / "export"
    assert train_main(["export-sessions", str(repo / ".nanocode" / "sessions"), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "3 sessions" in said and "3 good turns, 3 bad turns" in said, said
    rows = [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]
    pairs = [json.loads(x) for x in (out / "preference.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and [m["content"] for m in rows[0]["messages"] if m["role"] == "user"] \
        == ["what is x?"]  # session 1 up to its good turn; sessions 2 and 3 start bad
    assert len(pairs) == 2  # session files sort by time and a random id: find each by content
    first, = [p for p in pairs if p["rejected"]["messages"][-1].get("tool_call")]
    undone, = [p for p in pairs if p is not first]
    assert first["rejected"]["messages"][-1]["tool_call"]["args"]["new_string"] == "x = 5"
    assert first["chosen"]["messages"][-1]["content"] == "done."
    assert first["chosen"]["messages"][:4] == first["rejected"]["messages"][:4]
    assert undone["rejected"]["messages"][-1]["content"] == "done."  # the undone turn
    assert undone["chosen"]["messages"][-1]["content"] == "ok then."
    # every row is valid training data as written
    assert keep_valid(rows)[1] == {} and keep_valid(pairs)[1] == {}
