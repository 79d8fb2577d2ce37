"""tools/turn_records.py's contract, tested directly on a real git repository: TurnRecords keeps
the turns' metadata in <git dir>/nanocode/turns.json (save/load/store round trip, a corrupt or
missing file reads as empty), the ignored-<id> files, and turns() rebuilds the turns from
refs/nanocode/turns/* plus that file (lost metadata recomputed from the refs, deleted refs named
in Turn.missing), as tools/undo.Snapshots uses it."""

import os
import subprocess

import pytest

from tiny_models import commit_all
from tools.snapshot import GitDir
from tools.turn_records import Turn, TurnRecords
from tools.undo import Snapshots


def git(root, *args) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(proj):
    """(records, first commit, second commit: a.py edited and b.py added) in a real repository."""
    root = proj
    first = git(root, "rev-parse", "HEAD")
    (root / "a.py").write_text("x = 2\n")
    (root / "b.py").write_text("y = 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "second")
    g = GitDir(str(root / ".git"), str(root), shadow=False)
    return TurnRecords(g, g.run), first, git(root, "rev-parse", "HEAD")


def set_ref(records, name, sha):
    records.run("update-ref", f"refs/nanocode/turns/{name}", sha)


def test_load_without_a_file_or_with_a_corrupt_one_is_empty(repo):
    records, _, _ = repo
    empty = {"turns": {}, "last": None}
    assert records.meta_path == os.path.join(records.g.git_dir, "nanocode", "turns.json")
    assert records.load() == empty
    os.makedirs(records.g.meta_dir)
    for garbage in (b"{not json", b"", b"\xff\xfe"):
        with open(records.meta_path, "wb") as f:
            f.write(garbage)
        assert records.load() == empty


def test_save_and_store_round_trip(repo):
    records, first, second = repo
    meta = {"turns": {"1": {"id": 1, "before": first}}, "last": {"tree": "t", "commit": first}}
    records.save(meta)  # makes <git dir>/nanocode
    assert records.load() == meta
    turn = Turn(id=2, before=first, after=second, changed=["a.py"], message="edit", session="s1",
                git=["HEAD"], missing=["refs/nanocode/turns/2-keep"])
    records.store(turn, tree="tree-sha")
    saved = records.load()
    assert saved["turns"]["2"] == {k: v for k, v in vars(turn).items() if k != "missing"}
    assert "missing" not in saved["turns"]["2"]  # computed, never stored
    assert saved["turns"]["1"] == meta["turns"]["1"]
    assert saved["last"] == {"tree": "tree-sha", "commit": second}  # the newest snapshot: after
    records.store(Turn(id=3, before=first), tree="tree-3")
    assert records.load()["last"] == {"tree": "tree-3", "commit": first}  # no after yet: before
    records.store(Turn(id=3, before=first, message="again"))  # no tree: the cache stays
    assert records.load()["last"] == {"tree": "tree-3", "commit": first}
    assert records.load()["turns"]["3"]["message"] == "again"


def test_ignored_files_round_trip_and_a_stale_one_is_removed(repo):
    records, _, _ = repo
    os.makedirs(records.g.meta_dir)
    paths = ["build/", "name with spaces.log", "ünï.txt", "new\nline"]
    records.write_ignored(1, paths)
    assert records.ignored_path(1) == os.path.join(records.g.meta_dir, "ignored-1")
    with open(records.ignored_path(1), "rb") as f:
        assert f.read() == b"".join(os.fsencode(p) + b"\0" for p in paths)
    assert records.ignored(1) == paths
    records.write_ignored(1, [])
    assert not os.path.exists(records.ignored_path(1)) and records.ignored(1) == []
    records.write_ignored(2, [])
    assert not os.path.exists(records.ignored_path(2))  # nothing ignored: no file
    assert records.ignored(7) == []


def test_turns_joins_refs_and_metadata_oldest_first(repo):
    records, first, second = repo
    for tid in (2, 10):  # numeric order, not "10" < "2"
        set_ref(records, f"{tid}-before", first)
        set_ref(records, f"{tid}-after", second)
        records.store(Turn(id=tid, before=first, after=second, changed=["a.py"], message=f"turn {tid}",
                           session="s", undone=tid == 2))
    turns = records.turns()
    assert [t.id for t in turns] == [2, 10]
    assert turns[0] == Turn(id=2, before=first, after=second, changed=["a.py"], message="turn 2",
                            session="s", undone=True)
    assert turns[1].missing == [] and not turns[1].undone


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_turns_are_rebuilt_from_the_refs_when_turns_json_is_lost(repo, damage):
    records, first, second = repo
    set_ref(records, "1-before", first)
    set_ref(records, "1-after", second)
    set_ref(records, "2-before", second)  # begun, never ended
    records.store(Turn(id=1, before=first, after=second, changed=["stale"], message="m"))
    if damage == "missing":
        os.unlink(records.meta_path)
    else:
        with open(records.meta_path, "w") as f:
            f.write('{"turns": {"1": ')
    assert records.turns() == [Turn(id=1, before=first, after=second, changed=["a.py", "b.py"]),
                               Turn(id=2, before=second)]


def test_a_turn_whose_refs_were_deleted_names_them_in_missing(repo):
    records, first, second = repo
    records.store(Turn(id=1, before=first, after=second, changed=["a.py"], git=["HEAD"]))
    set_ref(records, "1-before", first)
    [turn] = records.turns()
    assert (turn.before, turn.after, turn.changed) == (first, second, ["a.py"])  # from turns.json
    assert turn.missing == ["refs/nanocode/turns/1-after", "refs/nanocode/turns/1-keep"]
    set_ref(records, "1-after", second)
    set_ref(records, "1-keep", second)
    assert records.turns()[0].missing == []


def test_refs_win_over_metadata_and_a_turn_without_any_before_is_left_out(repo):
    records, first, second = repo
    records.store(Turn(id=1, before="0" * 40, after="1" * 40, changed=["a.py"]))
    set_ref(records, "1-before", first)
    set_ref(records, "1-after", second)
    set_ref(records, "5-after", second)  # no before anywhere: not a turn
    [turn] = records.turns()
    assert (turn.id, turn.before, turn.after, turn.changed) == (1, first, second, ["a.py"])
    assert records.load()["turns"]["1"]["before"] == "0" * 40  # turns() never rewrites the file


def test_what_snapshots_records_a_fresh_turn_records_reads_back(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("*.log\n")
    (root / "run.log").write_text("log\n")
    commit_all(root)
    snaps = Snapshots(root)
    turn = snaps.begin("edit a.py", session="s1")
    (root / "a.py").write_text("x = 2\n")
    turn = snaps.end(turn)
    g = GitDir(str(root / ".git"), str(root), shadow=False)
    records = TurnRecords(g, g.run)
    assert records.turns() == [turn] and turn.changed == ["a.py"] and turn.session == "s1"
    assert records.ignored(turn.id) == ["run.log"]
    os.unlink(records.meta_path)
    [rebuilt] = records.turns()
    assert (rebuilt.before, rebuilt.after, rebuilt.changed) == (turn.before, turn.after, ["a.py"])
