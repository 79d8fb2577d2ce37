"""The conversation validator (one broken example per rule, reported as FILE:LINE: rule: detail)
and loading (local JSONL through datasets, sessions with "meta", hub errors offline), and the
original nanocode datasets' rows (tests/data/original_nanocode): pathless Edit results, rows that
stop on a tool_result, hub files whose args structs differ, their preference pairs."""

import json
from pathlib import Path

import pytest

from train.conversations import (TRIMMED, keep_valid, load_rows, normalize, trim_trailing_tools,
                                 validate, validate_file, validate_row)

ORIGINAL = Path(__file__).parent / "data" / "original_nanocode"

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


def test_local_jsonl_loads_the_same_without_the_datasets_package(tmp_path, monkeypatch):
    """An accelerator host may lack `datasets`: local .jsonl rows then load as plain JSON lines,
    the same rows after normalising as through Arrow."""
    import sys
    path = tmp_path / "rows.jsonl"
    rows = [GOOD[2], GOOD[10], GOOD[6], GOOD[0]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with_arrow = load_rows(str(path))
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ModuleNotFoundError
    assert load_rows(str(path)) == with_arrow == [normalize(r) for r in rows]


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


# ---- the original nanocode datasets ----------------------------------------------------------------
def original(name):
    """Rows of a fixture file as written (no loader in between)."""
    return [json.loads(line) for line in (ORIGINAL / name).read_text().splitlines() if line.strip()]


def test_original_edit_results_get_the_calls_own_path():
    raw = original("all_train.jsonl")  # tulu (Edit only) and evol (Grep, Read, Edit)
    assert [validate(r)[0].split(":")[0] for r in raw] == ["result", "result"]  # as written: dropped
    loaded = load_rows(str(ORIGINAL / "all_train.jsonl"))
    tulu, evol = loaded
    assert tulu["messages"][2]["content"] == "is_prime.py\n" + raw[0]["messages"][2]["content"]
    assert tulu["messages"][2]["content"].split("\n")[:2] == ["is_prime.py", "    1→def is_prime(n):"]
    # "./stats.py" is shown the way our Edit tool prints it; the Grep and Read results are untouched
    assert evol["messages"][6]["content"] == "stats.py\n" + raw[1]["messages"][6]["content"]
    for i in (2, 4):
        assert evol["messages"][i]["content"] == raw[1]["messages"][i]["content"]
    assert evol["messages"][5]["tool_call"] == raw[1]["messages"][5]["tool_call"]
    assert all(set(r) == {"messages"} for r in loaded)  # _source, _original_code ... dropped
    assert keep_valid(loaded) == (loaded, {})
    assert [normalize(r) for r in loaded] == loaded  # idempotent: the renderer normalizes again
    # no path to take, none made up: the result stays as it was and the row is dropped
    no_path = {"messages": [U, *call("Edit", "    1→x", new_string="x"), A]}
    assert normalize(no_path)["messages"][2]["content"] == "    1→x"
    assert keep_valid([normalize(no_path)]) == ([], {"tool": 1})
    ours = {"messages": [U, *call("Edit", "a.py\n    1→x", file_path="a.py", new_string="x"), A]}
    assert normalize(ours) == ours


def test_original_rows_that_stop_on_a_tool_result_are_trimmed():
    raw = original("rollouts_train.jsonl")  # long-context: one complete, one stopping on Bash's result
    assert validate(raw[1]) == ["order: message 6: the conversation must end with an assistant reply "
                                "(not tool_result)"]
    loaded = load_rows(str(ORIGINAL / "rollouts_train.jsonl"))
    good, counts = keep_valid(loaded)
    assert counts == {TRIMMED: 1}
    assert good[0] == loaded[0]  # complete rows are left alone ...
    assert good[0]["messages"][6] == {"role": "tool_result", "content": "(no output)"}  # was ""
    assert good[1]["messages"] == raw[1]["messages"][:4]  # ... the other is cut after its last reply
    assert good[1]["messages"][-1]["content"].startswith("they're parsed in src/cli.py")
    # nothing to cut back to, or a problem before the cut: dropped under its own rule, not trimmed
    only_call = {"messages": [U, *call("Bash", "ok", command="ls")]}
    bad_first = {"messages": [U, *call("Delete", "x", file_path="a"), A, U,
                              *call("Bash", "ok", command="ls")]}
    assert trim_trailing_tools(only_call) is None
    assert trim_trailing_tools({"messages": [U, A]}) is None  # ends on a reply: nothing to trim
    assert keep_valid([only_call, bad_first]) == ([], {"order": 1, "tool": 1})


def test_original_preference_pairs_load():
    from nanocode.tokenizer import train_tokenizer
    from train.dpo import render_pairs

    rows = (load_rows(str(ORIGINAL / "all.pref_train.jsonl"))
            + load_rows(str(ORIGINAL / "preference_rollouts_train.jsonl")))
    assert all(set(r) == {"chosen", "rejected"} for r in rows)  # _source, prompt, id ... dropped
    good, counts = keep_valid(rows)
    assert counts == {TRIMMED: 1} and len(good) == 2
    tulu, long = good
    for side in ("chosen", "rejected"):  # both sides get the path line; the rest is as written
        assert tulu[side]["messages"][2]["content"].startswith("is_prime.py\n    1→def is_prime(n):")
    assert tulu["rejected"]["messages"][1]["content"].startswith("Here is a function that checks")
    assert tulu["rejected"]["messages"][3] == {"role": "assistant", "content": ""}
    raw = original("preference_rollouts_train.jsonl")[0]
    assert long["chosen"] == rows[1]["chosen"] and len(long["chosen"]["messages"]) == 13
    assert long["rejected"]["messages"] == raw["rejected"]["messages"][:4]  # stopped on a tool_result
    tok = train_tokenizer(iter([json.dumps(r) for r in good] * 5), 300)
    kept, too_long = render_pairs(good, tok, seq_len=8192)
    assert len(kept) == 2 and too_long == 0


def test_hub_rows_whose_args_structs_differ_are_read_file_by_file(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub
    import pyarrow as pa
    import pyarrow.parquet as pq

    from train.hub_rows import is_schema_error, split_files

    tulu, evol = original("all_train.jsonl")
    long_done = original("rollouts_train.jsonl")[0]

    def args_as_json(m):  # what a flattened export writes
        return {**m, "tool_call": {**m["tool_call"], "args": json.dumps(m["tool_call"]["args"])}}

    flat = {**evol, "messages": [args_as_json(m) if "tool_call" in m else m for m in evol["messages"]]}
    files = {"data/train-00000-of-00003.parquet": [tulu],
             "data/train-00001-of-00003.parquet": [long_done],
             "data/train-00002-of-00003.parquet": [flat],
             "data/test-00000-of-00001.parquet": [GOOD[0]]}
    for name, rows in files.items():
        (tmp_path / "data").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / name)
    train = [str(tmp_path / n) for n in sorted(files) if "train" in n]
    test = [str(tmp_path / n) for n in files if "test" in n]
    real_load = datasets.load_dataset
    with pytest.raises(Exception) as e:  # what `datasets` does with them
        real_load("parquet", data_files=train, split="train", cache_dir=str(tmp_path / "cache"))
    assert is_schema_error(e.value)

    def load_dataset(name, split):
        return real_load("parquet", data_files={"train": train, "test": test}, split=split,
                         cache_dir=str(tmp_path / "cache"))

    def list_repo_files(repo_id, repo_type):
        assert (repo_id, repo_type) == ("smohammadi/nanocode-long-context", "dataset")
        return [".gitattributes", "README.md", *files]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", list_repo_files)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo_id, filename, repo_type: str(tmp_path / filename))
    loaded = load_rows("smohammadi/nanocode-long-context")
    assert loaded == [normalize(tulu), normalize(long_done), normalize(evol)]  # test file: not train
    assert loaded[1]["messages"][1]["tool_call"]["args"] == {"file_path": "src/config.py"}  # no Nones
    assert loaded[2]["messages"][5]["tool_call"]["args"] == evol["messages"][5]["tool_call"]["args"]
    assert keep_valid(loaded) == (loaded, {})
    # the hub's file-name convention for splits, on the original datasets' names
    names = [".gitattributes", "README.md", "all.pref_train.jsonl", "all.pref_test.jsonl"]
    assert split_files(names, "train") == ["all.pref_train.jsonl"]
    assert split_files(names, "test") == ["all.pref_test.jsonl"]
    assert split_files(["rows.jsonl", "README.md"], "train") == ["rows.jsonl"]
    with pytest.raises(ValueError, match="no 'validation' data files"):
        split_files(names, "validation")

    def offline(repo_id, repo_type):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(huggingface_hub, "list_repo_files", offline)
    with pytest.raises(ValueError, match="one by one failed too .ConnectionError"):
        load_rows("smohammadi/nanocode-long-context")
