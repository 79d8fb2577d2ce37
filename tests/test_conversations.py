"""The conversation validator (one broken example per rule, reported as FILE:LINE: rule: detail)
and loading (local JSONL through datasets, sessions with "meta", hub errors offline)."""

import json

import pytest

from train.conversations import load_rows, normalize, validate, validate_file, validate_row

U = {"role": "user", "content": "fix the bug in a.py"}
A = {"role": "assistant", "content": "done: a.py now returns early."}


def call(name, result, **args):
    return [{"role": "assistant", "content": "let me look.", "tool_call": {"name": name, "args": args}},
            {"role": "tool_result", "content": result}]


GOOD = [
    {"messages": [U, A]},
    {"messages": [{"role": "system", "content": "you are nanocode."}, U, A, U, A]},
    {"messages": [U, *call("Read", "    1→def f():\n    2→    return 1", file_path="a.py", offset=0, limit=50), A]},
    {"messages": [U, *call("Read", "(empty file)", file_path="a.py"), A]},
    {"messages": [U, *call("Read", "error: file not found", file_path="b.py"), A]},
    {"messages": [U, *call("Edit", "a.py\n    1→def f():\n    2→    return 2", file_path="a.py",
                           old_string="return 1", new_string="return 2"), A]},
    {"messages": [U, *call("Grep", "a.py:1:def f():\na.py-2-    return 1", pattern="def", **{"-A": 1}), A]},
    {"messages": [U, *call("Grep", "no matches found", pattern="zzz", path="."), A]},
    {"messages": [U, *call("Bash", "ok\n(exit code 1)", command="make test"), A]},
    {"messages": [U, *call("Bash", "rejected by user", command="rm -rf build"), U, A]},
    {"messages": [U, A], "meta": {"cwd": "/tmp/x", "model": "d20"}},
    # Bash output is whatever the command printed, even when it starts like an error line
    {"messages": [U, *call("Bash", "error: bad input\n(exit code 2)", command="./check.sh"), A]},
]

BROKEN = {  # rule -> a conversation breaking it
    "schema": [{"messages": [U, {"role": "robot", "content": "hi"}]},
               {"messages": [U, {"role": "assistant", "content": 3}]},
               {"messages": []},
               {"messages": [U, {"role": "assistant", "content": "", "tool_call": {"name": "Bash"}}]},
               {"messages": [U, A, {"role": "system", "content": "late"}, U, A]}],
    "order": [{"messages": [A]},
              {"messages": [U, U, A]},
              {"messages": [U]},
              {"messages": [U, A, A]},
              {"messages": [U, {"role": "tool_result", "content": "x"}, A]},
              {"messages": [U, call("Bash", "x", command="ls")[0], A]},
              {"messages": [U, *call("Bash", "x", command="ls")]}],
    "tool": [{"messages": [U, *call("Delete", "x", file_path="a"), A]},
             {"messages": [U, *call("Read", "(empty file)", path="a"), A]},
             {"messages": [U, *call("Edit", "a\n    1→x", file_path="a"), A]}],
    "result": [{"messages": [U, *call("Read", "def f():\n    return 1", file_path="a.py"), A]},
               {"messages": [U, *call("Grep", "found it somewhere", pattern="x"), A]},
               {"messages": [U, *call("Edit", "    1→x", file_path="a", new_string="x"), A]},
               {"messages": [U, *call("Bash", "", command="true"), A]},
               {"messages": [U, *call("Read", "error: one\ntwo", file_path="a"), A]}],
}


@pytest.mark.parametrize("conv", GOOD)
def test_good_conversations_pass(conv):
    assert validate(conv) == []


@pytest.mark.parametrize("rule, conv", [(r, c) for r, cs in BROKEN.items() for c in cs])
def test_each_rule_is_caught_with_its_line(rule, conv, tmp_path):
    problems = validate(conv)
    assert problems and any(p.startswith(f"{rule}: ") for p in problems), problems
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(GOOD[0]) + "\n\n" + json.dumps(GOOD[2]) + "\n" + json.dumps(conv) + "\n")
    found = validate_file(path)
    assert found and all(p.startswith(f"{path}:4: ") for p in found), found  # blank line 2 counts
    assert any(p.startswith(f"{path}:4: {rule}: ") for p in found)


def test_json_errors_name_the_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(GOOD[0]) + "\n{not json\n[1, 2]\n")
    found = validate_file(path)
    assert found[0].startswith(f"{path}:2: json: ") and found[1].startswith(f"{path}:3: json: ")
    assert len(found) == 2


def test_length_rule_needs_a_tokenizer():
    from nanocode.tokenizer import train_tokenizer

    tok = train_tokenizer(iter(["fix the bug in a.py done returns early"] * 10), 280)
    long = {"messages": [U, A]}
    n = len(tok.render_conversation(long)[0])
    assert validate(long, tok, max_tokens=n) == []
    problems = validate(long, tok, max_tokens=n - 1)
    assert problems == [f"length: renders to {n} tokens, more than {n - 1}"]


def test_preference_rows_check_both_sides(tmp_path):
    good = {"chosen": GOOD[0], "rejected": GOOD[1]}
    assert validate_row(good) == []
    bad = {"chosen": GOOD[0], "rejected": BROKEN["order"][0]}
    assert [p.split(": ")[:2] for p in validate_row(bad)] == [["order", "rejected"]]
    assert validate_row({"chosen": GOOD[0]}) == ["schema: preference row has no 'rejected'"]
    path = tmp_path / "pref.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    assert validate_file(path)[0].startswith(f"{path}:2: order: rejected: message 0")


def test_load_local_jsonl_and_sessions_with_meta(tmp_path):
    path = tmp_path / "session.jsonl"
    rows = [GOOD[2], GOOD[10], GOOD[6], {"messages": [U, A], "meta": [1, "mixed"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_rows(str(path))
    assert loaded == [normalize(r) for r in rows]
    assert loaded[0]["messages"][1]["tool_call"]["args"] == {"file_path": "a.py", "offset": 0, "limit": 50}
    assert "tool_call" not in loaded[1]["messages"][1]  # Arrow's None fill is dropped
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.jsonl").write_text(json.dumps(GOOD[0]) + "\n")
    assert len(load_rows(str(tmp_path))) == 5  # a directory: every .jsonl under it


def test_smoltalk_rows_map_to_the_schema(monkeypatch):
    import datasets

    rows = [{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"}], "source": "smol"}]
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split: rows)
    loaded = load_rows("HuggingFaceTB/smol-smoltalk")
    assert loaded == [{"messages": rows[0]["messages"]}]
    assert validate(loaded[0]) == []


def test_hub_offline_is_a_clear_error(monkeypatch):
    import datasets

    def offline(name, split):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError) as e:
        load_rows("smohammadi/nanocode-long-context")
    assert "smohammadi/nanocode-long-context" in str(e.value) and "local .jsonl" in str(e.value)
    with pytest.raises(FileNotFoundError, match="neither a file"):
        load_rows("no_such_file.jsonl")
