"""Tests for tools/undo.py: per-turn snapshots, diff, undo and auto-commit on real temporary repos.

Every undo scenario asserts exact restoration of the work tree (bytes, exec bit, symlinks, empty
directories) and that the user's HEAD, index file bytes, staged entries, stash and refs are
exactly as before."""
import os
import subprocess

import pytest

from repo_state import tree_state
from tools.undo import Snapshots, UndoError


def git(d, *args, check=True):
    r = subprocess.run(["git", *args], cwd=d, capture_output=True, text=True, check=check)
    return r.stdout


def write(d, rel, text, exe=False):
    p = os.path.join(d, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)
    if exe:
        os.chmod(p, 0o755)


def read(d, rel):
    with open(os.path.join(d, rel)) as f:
        return f.read()


def git_state(d):
    """Everything of the user's git state that snapshots must never change."""
    idx = os.path.join(d, ".git", "index")
    index = open(idx, "rb").read() if os.path.exists(idx) else None
    return (index, git(d, "rev-parse", "-q", "--verify", "HEAD", check=False), git(d, "ls-files", "-s"),
            git(d, "stash", "list"), git(d, "branch", "-a"),
            git(d, "for-each-ref", "refs/heads", "refs/tags", "refs/stash", "refs/remotes"))


def init(d, commit=True):
    os.makedirs(d, exist_ok=True)
    git(d, "init", "-q", "-b", "main")
    git(d, "config", "user.name", "Tester")
    git(d, "config", "user.email", "tester@example.com")
    git(d, "config", "commit.gpgsign", "false")
    write(d, "a.py", "x = 1\ny = 2\n")
    write(d, "b.txt", "hello\n")
    write(d, "sub/c.py", "def f():\n    return 1\n")
    write(d, "run.sh", "#!/bin/sh\necho hi\n", exe=True)
    write(d, ".gitignore", "*.log\nbuild/\n")
    os.symlink("a.py", os.path.join(d, "link.py"))
    if commit:
        git(d, "add", "-A")
        git(d, "commit", "-q", "-m", "init")
    return d


@pytest.fixture(autouse=True)
def nanocode_home(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))


@pytest.fixture
def repo(tmp_path):
    return init(str(tmp_path / "proj"))


def roundtrip(d, change, expect, message="turn"):
    """begin, change, end, undo; asserts Turn.changed, exact restoration and untouched git state."""
    ws0, gs0 = tree_state(d), git_state(d)
    cp = Snapshots(d)
    t = cp.begin(message)
    change(d)
    t = cp.end(t)
    assert t.changed == expect
    assert git_state(d) == gs0
    assert cp.undo() == expect
    assert tree_state(d) == ws0
    assert git_state(d) == gs0
    assert cp.turns()[-1].undone
    return cp, t


# ------------------------------------------------------------------ the numbered scenarios

def test_1_edit_tracked(repo):
    roundtrip(repo, lambda d: write(d, "a.py", "x = 100\n"), ["a.py"])


def test_2_create_file(repo):
    roundtrip(repo, lambda d: write(d, "new.py", "print(1)\n"), ["new.py"])


def test_3_delete_tracked(repo):
    roundtrip(repo, lambda d: os.unlink(os.path.join(d, "b.txt")), ["b.txt"])


def test_4_rename(repo):
    roundtrip(repo, lambda d: os.rename(os.path.join(d, "b.txt"), os.path.join(d, "sub", "b2.txt")),
              ["b.txt", "sub/b2.txt"])


def test_5_chmod(repo):
    def change(d):
        os.chmod(os.path.join(d, "a.py"), 0o755)
        os.chmod(os.path.join(d, "run.sh"), 0o644)
    roundtrip(repo, change, ["a.py", "run.sh"])
    assert not os.stat(os.path.join(repo, "a.py")).st_mode & 0o111
    assert os.stat(os.path.join(repo, "run.sh")).st_mode & 0o100


def test_6_edit_in_subdir(repo):
    roundtrip(repo, lambda d: write(d, "sub/c.py", "def f():\n    return 2\n"), ["sub/c.py"])


def test_7_shell_commands(repo):
    def change(d):
        subprocess.run("sed -i 's/x = 1/x = 9/' a.py && echo more >> b.txt && rm sub/c.py && "
                       "mkdir -p d/e && echo x > d/e/f.txt && chmod +x b.txt", shell=True, cwd=d, check=True)
    roundtrip(repo, change, ["a.py", "b.txt", "d/e/f.txt", "sub/c.py"])
    assert not os.path.exists(os.path.join(repo, "d"))


def test_8_mixed_turn_with_symlinks(repo):
    def change(d):
        write(d, "a.py", "changed\n")
        write(d, "docs/new.md", "# new\n")
        os.unlink(os.path.join(d, "run.sh"))
        os.chmod(os.path.join(d, "b.txt"), 0o755)
        os.unlink(os.path.join(d, "link.py"))
        os.symlink("b.txt", os.path.join(d, "link.py"))
        os.symlink("sub", os.path.join(d, "sublink"))
    roundtrip(repo, change, ["a.py", "b.txt", "docs/new.md", "link.py", "run.sh", "sublink"])
    assert os.readlink(os.path.join(repo, "link.py")) == "a.py"


def test_9_new_directory_tree(repo):
    def change(d):
        for rel in ["tree/a/b/c.txt", "tree/a/d.txt", "tree/x.txt", "sub/deep/er/y.py"]:
            write(d, rel, rel + "\n")
    roundtrip(repo, change, ["sub/deep/er/y.py", "tree/a/b/c.txt", "tree/a/d.txt", "tree/x.txt"])
    assert not os.path.exists(os.path.join(repo, "tree"))
    assert not os.path.exists(os.path.join(repo, "sub", "deep"))
    assert os.path.isdir(os.path.join(repo, "sub"))


def test_10_user_edited_in_between_refuses(repo):
    cp = Snapshots(repo)
    t = cp.begin()
    write(repo, "a.py", "agent\n")
    write(repo, "b.txt", "agent\n")
    cp.end(t)
    write(repo, "a.py", "user edit after the turn\n")
    ws, gs = tree_state(repo), git_state(repo)
    with pytest.raises(UndoError, match=r"a\.py") as e:
        cp.undo()
    assert "b.txt" not in str(e.value) and "commit or discard" in str(e.value)
    assert tree_state(repo) == ws and git_state(repo) == gs
    assert not cp.turns()[-1].undone
    write(repo, "a.py", "agent\n")  # the user reverts their edit: now undo works
    assert cp.undo() == ["a.py", "b.txt"]
    assert read(repo, "a.py") == "x = 1\ny = 2\n"


def test_11_non_git_project_uses_shadow(tmp_path):
    d = str(tmp_path / "plain")
    write(d, "main.py", "print('a')\n")
    write(d, "pkg/mod.py", "v = 1\n")
    write(d, ".gitignore", "*.log\n")
    write(d, "keep.log", "log\n")
    write(d, ".nanocode/state.json", "{}\n")
    ws0 = tree_state(d)
    cp = Snapshots(d)
    assert cp.shadow and cp.git_dir.startswith(str(tmp_path / "home" / "shadow"))
    t = cp.begin()
    write(d, "main.py", "print('b')\n")
    write(d, "new/x.py", "1\n")
    write(d, "run.log", "ignored\n")
    write(d, ".nanocode/state.json", "{1}\n")
    t = cp.end(t)
    assert t.changed == ["main.py", "new/x.py"]
    assert "+print('b')" in cp.diff()
    assert cp.undo() == ["main.py", "new/x.py"]
    ws = tree_state(d)
    assert ws.pop("run.log") == ("file", b"ignored\n", False)  # ignored: never touched
    assert ws.pop(".nanocode/state.json")[1] == b"{1}\n"
    ws0.pop(".nanocode/state.json")
    assert ws == ws0
    assert not os.path.exists(os.path.join(d, ".git"))
    assert [x.id for x in Snapshots(d).turns()] == [1]  # same shadow found again


def test_12_repo_without_commits(tmp_path):
    d = init(str(tmp_path / "fresh"), commit=False)
    git(d, "add", "a.py")  # staged only
    def change(d):
        write(d, "a.py", "new\n")
        os.unlink(os.path.join(d, "b.txt"))
        write(d, "c.txt", "c\n")
    roundtrip(d, change, ["a.py", "b.txt", "c.txt"])
    assert git(d, "rev-parse", "-q", "--verify", "HEAD", check=False) == ""


# ------------------------------------------------------------------ more behaviour

def test_staged_changes_and_stash_preserved(repo):
    write(repo, "a.py", "stashed\n")
    git(repo, "stash", "-q")
    write(repo, "b.txt", "staged\n")
    git(repo, "add", "b.txt")
    write(repo, "b.txt", "staged then edited\n")
    def change(d):
        write(d, "b.txt", "agent\n")
        write(d, "a.py", "agent\n")
    roundtrip(repo, change, ["a.py", "b.txt"])
    assert "b.txt" in git(repo, "diff", "--cached", "--name-only")
    assert len(git(repo, "stash", "list").splitlines()) == 1


def test_ignored_files_untouched_and_big_untracked_skipped(repo):
    write(repo, "old.log", "before\n")
    write(repo, "build/out.o", "obj\n")
    with open(os.path.join(repo, "big.bin"), "wb") as f:
        f.truncate(21 * 1024 * 1024)  # sparse: over the 20 MB limit
    cp = Snapshots(repo)
    t = cp.begin()
    assert t.skipped == ["big.bin"]
    write(repo, "old.log", "during\n")
    write(repo, "new.log", "new\n")
    write(repo, "build/out2.o", "obj\n")
    write(repo, "a.py", "edit\n")
    t = cp.end(t)
    assert t.changed == ["a.py"]
    assert cp.undo() == ["a.py"]
    assert read(repo, "old.log") == "during\n" and read(repo, "new.log") == "new\n"
    assert os.path.exists(os.path.join(repo, "build", "out2.o"))
    assert os.path.getsize(os.path.join(repo, "big.bin")) == 21 * 1024 * 1024


def test_undo_twice_reverse_order(repo):
    ws0, gs0 = tree_state(repo), git_state(repo)
    cp = Snapshots(repo)
    t1 = cp.begin("one")
    write(repo, "a.py", "one\n")
    cp.end(t1)
    ws1 = tree_state(repo)
    t2 = cp.begin("two")
    write(repo, "a.py", "two\n")
    write(repo, "two.txt", "2\n")
    cp.end(t2)
    with pytest.raises(UndoError, match="later turn"):
        cp.undo(1)  # a.py moved on in turn 2
    assert cp.undo() == ["a.py", "two.txt"]
    assert tree_state(repo) == ws1
    assert cp.undo() == ["a.py"]
    assert tree_state(repo) == ws0 and git_state(repo) == gs0
    with pytest.raises(UndoError, match="nothing has been recorded"):
        cp.undo()
    with pytest.raises(UndoError, match="already undone"):
        cp.undo(1)


def test_restart_can_undo(repo):
    ws0 = tree_state(repo)
    cp = Snapshots(repo)
    t = cp.end(cp.begin("edit a"))  # empty turn: nothing changed
    assert t.changed == [] and cp.diff() == ""
    t = cp.begin("edit a")
    write(repo, "a.py", "edited\n")
    t = cp.end(t)
    again = Snapshots(repo)
    assert [(x.id, x.message, x.changed) for x in again.turns()] == [(1, "edit a", []), (2, "edit a", ["a.py"])]
    assert again.undo() == ["a.py"]
    assert tree_state(repo) == ws0
    assert Snapshots(repo).turns()[-1].undone
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/nanocode")
    assert refs.split() == [f"refs/nanocode/turns/{t}-{k}" for t in (1, 2) for k in ("after", "before", "keep")]
    assert git(repo, "log", "--oneline").count("\n") == 1
    assert git(repo, "log", "--oneline", "--exclude=refs/nanocode/*", "--all").count("\n") == 1


def test_begin_reuses_snapshot_when_nothing_changed(repo):
    cp = Snapshots(repo)
    t1 = cp.end(cp.begin())
    t2 = cp.begin()
    assert t1.before == t1.after == t2.before


def test_diff_shows_changed_lines(repo):
    cp = Snapshots(repo)
    t = cp.begin()
    write(repo, "a.py", "x = 1\ny = 3\n")
    write(repo, "n.txt", "brand new\n")
    cp.end(t)
    d = cp.diff()
    assert "-y = 2" in d and "+y = 3" in d and "+brand new" in d and "a/n.txt" not in d.split("+++")[0]
    assert d == cp.diff(t)


def test_spaces_and_unicode_names(repo):
    write(repo, "ü b.txt", "original\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "unicode")
    def change(d):
        write(d, "ü b.txt", "changed\n")
        write(d, "dir with space/héllo wörld.txt", "new\n")
        write(d, "tab\tand\nnewline.txt", "odd\n")
    roundtrip(repo, change, ["dir with space/héllo wörld.txt", "tab\tand\nnewline.txt", "ü b.txt"])


def test_dirty_untouched_file_kept(repo):
    write(repo, "sub/c.py", "user's own work in progress\n")
    write(repo, "notes.txt", "user's untracked notes\n")
    roundtrip(repo, lambda d: write(d, "a.py", "agent\n"), ["a.py"])
    assert read(repo, "sub/c.py") == "user's own work in progress\n"
    assert read(repo, "notes.txt") == "user's untracked notes\n"


def test_undo_never_writes_through_symlink_outside(repo, tmp_path):
    outside = str(tmp_path / "outside")
    os.makedirs(outside)
    cp = Snapshots(repo)
    t = cp.begin()
    os.unlink(os.path.join(repo, "sub", "c.py"))
    cp.end(t)
    # the user swaps sub/ (not a changed path) for a symlink leaving the project
    os.rename(os.path.join(repo, "sub"), os.path.join(tmp_path, "moved"))
    os.symlink(outside, os.path.join(repo, "sub"))
    with pytest.raises(UndoError, match="symlink"):
        cp.undo()
    assert os.listdir(outside) == []


