"""`train export-sessions`: real agent sessions (the real loop on a tiny engine, scripted
replies, real tools on a temp git repo, saved by the real SessionStore) become SFT rows and
preference pairs that validate and load into `train sft`; requests taken back with /rewind are
bad turns, paired with the good turn asked in their place."""
import json

from agent import commands
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


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user"]


def export(session, out, capsys):
    """Export one saved session file: (what was said, the SFT rows, the pairs)."""
    assert train_main(["export-sessions", str(session), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    read = lambda name: [json.loads(x) for x in (out / name).read_text().splitlines()]  # noqa: E731
    return said, read("sft.jsonl"), read("preference.jsonl")


def test_a_rewound_request_is_bad_and_pairs_with_the_one_asked_in_its_place(engine, tok, repo, tmp_path,
                                                                             capsys):
    """/rewind 2 over a finished edit, then another request there: the rewound turn never reaches
    sft.jsonl (the row is the conversation as it stands) and is the rejected side of a pair whose
    chosen side is the new turn, on the same prefix (the first turn and the rewound request)."""
    a, _ = make(engine, repo, [call(tok, "", "Read", file_path="a.py"), reply(tok, "x is 1."),
                               edit(tok, "x = 5"), reply(tok, "done: 5."),
                               edit(tok, "x = 2"), reply(tok, "done: 2.")], mode="auto")
    a.conv.store = SessionStore(repo, a.meta["id"])
    a.run_turn("what is x?")
    assert a.run_turn("set x to 5").stop_reason == "done"  # a good turn, until the user takes it back
    assert commands.run("/rewind 2", a, a.root).draft == "set x to 5"
    assert a.run_turn("set x to 2").stop_reason == "done"
    said, rows, pairs = export(a.conv.store.path, tmp_path / "out", capsys)
    assert "1 sessions" in said and "2 good turns, 1 bad turns" in said and "1 pairs" in said, said
    [row] = rows
    assert users(row["messages"]) == ["what is x?", "set x to 2"]
    assert "x = 5" not in json.dumps(rows) and "done: 5." not in json.dumps(rows)
    [pair] = pairs
    chosen, rejected = pair["chosen"]["messages"], pair["rejected"]["messages"]
    assert users(chosen) == users(rejected) == ["what is x?", "set x to 5"]
    assert chosen[:6] == rejected[:6] and chosen[4]["content"] == "x is 1."  # system prompt first
    assert rejected[6]["tool_call"]["args"]["new_string"] == "x = 5" and rejected[-1]["content"] == "done: 5."
    assert chosen[6]["tool_call"]["args"]["new_string"] == "x = 2" and chosen[-1]["content"] == "done: 2."
    assert keep_valid(rows)[1] == {} and keep_valid(pairs)[1] == {}


def test_a_rewind_further_back_changes_the_prefix_so_the_first_gives_no_pair(engine, tok, repo, tmp_path,
                                                                             capsys):
    """Requests "a", "b"; /rewind 2, "b2"; /rewind 1, "a2", "c". "c" now stands where "b" stood,
    but after "a2", not "a": only the second rewind pairs ("a" against "a2"); "a", "b" and "b2"
    were all taken back (bad), none is in sft.jsonl."""
    a, _ = make(engine, repo, [reply(tok, f"ok {i}.") for i in range(5)])
    a.conv.store = SessionStore(repo, a.meta["id"])
    for request, rewind in (("a", None), ("b", None), ("b2", "/rewind 2"), ("a2", "/rewind 1"), ("c", None)):
        if rewind:
            commands.run(rewind, a, a.root)
        assert a.run_turn(request).stop_reason == "done"
    rewinds = a.meta["rewinds"]
    assert [users(r["messages"]) for r in rewinds] == [["b"], ["a", "b2"]]
    assert rewinds[0]["turns"][0]["user_index"] == a.meta["turns"][1]["user_index"]  # "c" at "b"'s place
    said, rows, pairs = export(a.conv.store.path, tmp_path / "out", capsys)
    assert "2 good turns, 3 bad turns" in said, said
    assert [users(r["messages"]) for r in rows] == [["a2", "c"]]
    [pair] = pairs
    assert users(pair["rejected"]["messages"]) == users(pair["chosen"]["messages"]) == ["a"]
    assert pair["rejected"]["messages"][-1]["content"] == "ok 0."
    assert pair["chosen"]["messages"][-1]["content"] == "ok 3."


def test_odd_rewind_entries_are_left_out_not_a_crash(tmp_path, capsys):
    """A session file is untrusted: "rewinds" of other shapes give no pair and no crash."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello."}]
    turn = {"user_index": 0, "stop_reason": "done"}
    odd = [1, "x", {"messages": "m", "turns": []}, {"messages": [5], "turns": [turn]},
           {"messages": [{"role": "assistant", "content": "?"}], "turns": [turn]},
           {"messages": [{"role": "user", "content": "hi"}], "turns": [{"user_index": "0"}]},
           {"messages": messages[:1], "turns": [turn, {"user_index": -3}]}]  # no reply to reject
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"messages": messages, "meta": {"turns": [turn], "rewinds": odd}}))
    said, rows, pairs = export(path, tmp_path / "out", capsys)
    assert [users(r["messages"]) for r in rows] == [["hi"]] and pairs == []
    assert "1 good turns, 2 bad turns" in said, said  # the last entry's two records
