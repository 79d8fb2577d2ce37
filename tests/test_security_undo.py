"""Adversarial tests: what a model's Bash command can destroy in a project, and what /undo brings
back. Every attack is executed in a real git repository under tmp_path and judged on disk.

Part 1: commands that destroy what undo cannot restore (ignored files such as .env and
data/db.sqlite; refs, the stash and undo's own refs/nanocode). CONTROL runs each with plain bash
and shows the damage; the contained case shows the policy asks in auto, accept-edits and ask mode
(an allow-all rule present), and that running only what it allows destroys nothing.
Part 2: undo across type changes (file, directory, symlink in each direction), nested .nanocode
folders, the user's index, stash and refs, and undo's refs gone missing."""
import hashlib
import os
import shutil
import subprocess

import pytest

from agent.loop.turn_undo import TurnUndo, slash_undo
from repo_state import tree_state
from tools.permissions import Policy
from tools.undo import Snapshots, UndoError

MODES = ("auto", "accept-edits", "ask")


def git(d, *args, check=True):
    r = subprocess.run(["git", *args], cwd=d, capture_output=True, check=check)
    return r.stdout.decode()


def write(root, rel, data, exe=False):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    if exe:
        os.chmod(p, 0o755)


def bash(root, command):
    subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, timeout=60)


def git_state(d):
    """The user's refs (undo's own aside), HEAD, stash list and index entries."""
    refs = git(d, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    return ("\n".join(r for r in refs if not r.startswith("refs/nanocode/")),
            git(d, "symbolic-ref", "-q", "HEAD", check=False), git(d, "stash", "list"), git(d, "ls-files", "-s"))


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    gc = tmp_path / "gitconfig"
    gc.write_text("[user]\n\tname = Tester\n\temail = tester@example.com\n[gc]\n\tauto = 0\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gc))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def make_repo(root):
    """A repo with tracked files, ignored .env and data/db.sqlite, a side branch x, two stash
    entries and a staged change."""
    os.makedirs(root)
    git(root, "init", "-q", "-b", "main")
    write(root, ".gitignore", ".env\ndata/\n")
    write(root, "a.py", "x = 1\n")
    write(root, "run.sh", "#!/bin/sh\n", exe=True)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "one")
    write(root, "a.py", "x = 2\n")
    git(root, "commit", "-qam", "two")
    git(root, "branch", "x", "HEAD~1")
    git(root, "checkout", "-q", "x")
    write(root, "side.py", "only on x\n")
    git(root, "add", "side.py")
    git(root, "commit", "-qm", "side")
    git(root, "checkout", "-q", "main")
    for n in (1, 2):
        write(root, "a.py", f"stashed {n}\n")
        git(root, "stash", "-q", "-m", f"wip {n}")
    write(root, "a.py", "staged\n")
    git(root, "add", "a.py")
    write(root, "a.py", "staged, then edited\n")
    write(root, ".env", "SECRET=hunter2\n")
    write(root, "data/db.sqlite", b"SQLite format 3\x00" + bytes(range(256)))
    return root


@pytest.fixture
def repo(tmp_path):
    return make_repo(str(tmp_path / "proj"))


def objects_alive(d, shas):
    return all(subprocess.run(["git", "cat-file", "-e", s], cwd=d).returncode == 0 for s in shas)


def damage_state(d):
    """What the attacks destroy: the work tree, refs, stash, index, and the objects they name."""
    refs = git(d, "for-each-ref", "--format=%(refname) %(objectname)")  # undo's refs/nanocode too
    shas = [line.split()[1] for line in refs.splitlines()] + git(d, "log", "-g", "--format=%H", "refs/stash",
                                                                 check=False).split()
    return tree_state(d), refs, git_state(d), objects_alive(d, shas)


# ------------------------------------------------------------------ part 1: commands that must ask

IGNORED_ATTACKS = [
    "rm .env", "rm -f data/db.sqlite", "rm data/*", "rm .e*", "unlink .env", "cd data && rm db.sqlite",
    "cp /dev/null .env", "cp /dev/null data/db.sqlite", "cp a.py .env", "cp -f run.sh data/db.sqlite",
    "mv a.py .env", "mv .env notes.txt", "mv data/db.sqlite old.sqlite", "mv data store", "install a.py .env",
    "truncate -s 0 .env", ": > .env", "echo x > data/db.sqlite", "cat a.py > .env", "tee .env < a.py",
    "sed -i d .env", 'F=.env; rm "$F"']
GIT_ATTACKS = [
    "git checkout HEAD ./", "git checkout HEAD :/", "git checkout HEAD~1 a.py", "git rm -rf .", "git rm -f a.py",
    "git update-ref -d refs/stash", "git update-ref -d refs/heads/x", "git update-ref refs/heads/main HEAD~1",
    "git stash drop && git reflog expire --expire=now --all && git gc --prune=now",
    "git branch -D x && git reflog expire --expire=now --all && git gc --prune=now",
    "git update-ref -d refs/stash && git prune", "git branch -f x main",
    "git update-ref -d refs/nanocode/turns/1-before", "rm -rf .git/refs/nanocode",
    "git for-each-ref --format='delete %(refname)' refs/nanocode | git update-ref --stdin",
    "git for-each-ref --format='delete %(refname)' | git update-ref --stdin"]
FORK_BOMBS = [":(){ :|:& };:", "bomb(){ bomb | bomb & }; bomb", "b(){ b|b& };b",
              "python3 -c 'import os\nwhile True: os.fork()'", "perl -e 'fork while fork'",
              # spelt as a loop that starts itself ($0), and its cousins through exec and functions
              "while :; do $0 & done", 'while true; do bash "$0" & done', "for ((;;)); do ${0} & done",
              "exec $0 & exec $0", "f(){ f & f; }; f", "until false; do sleep 9 & done"]


def armed(tmp_path):
    """A fresh repo with one recorded turn (so refs/nanocode exists) and its pre-attack state."""
    root = make_repo(str(tmp_path / "proj"))
    s = Snapshots(root)
    s.end(s.begin("setup"))
    return root, damage_state(root)


@pytest.mark.parametrize("command", IGNORED_ATTACKS + GIT_ATTACKS)
def test_control_the_attack_destroys_data(tmp_path, command):
    root, before = armed(tmp_path)
    bash(root, command)
    assert damage_state(root) != before


@pytest.mark.parametrize("command", IGNORED_ATTACKS + GIT_ATTACKS + FORK_BOMBS)
def test_attack_asks_in_every_mode_and_destroys_nothing_unasked(tmp_path, command):
    root, before = armed(tmp_path)
    decisions = {}
    for mode in MODES:
        decisions[mode] = Policy(root=root, mode=mode, allow=["Bash"], home=tmp_path / "home").check(
            "Bash", {"command": command})
        if decisions[mode].action == "allow" and command not in FORK_BOMBS:
            bash(root, command)  # what runs without a question
    assert damage_state(root) == before
    assert all(d.action == "ask" and d.reason.startswith("destructive") for d in decisions.values()), decisions


def test_control_undo_cannot_bring_back_ignored_files(repo):
    s = Snapshots(repo)
    t = s.begin()
    bash(repo, "rm .env && cp /dev/null data/db.sqlite")
    s.end(t)
    with pytest.raises(UndoError, match="nothing has been recorded"):
        s.undo()  # the turn changed nothing undo can see
    assert not os.path.exists(os.path.join(repo, ".env"))
    assert os.path.getsize(os.path.join(repo, "data/db.sqlite")) == 0


@pytest.mark.parametrize("command", ["rm a.py", "rm b.txt", "cp a.py b.py", "mv a.py docs/", "echo x > notes.txt",
                                     "git checkout main", "git checkout -b feat HEAD~1", "git rm --cached a.py",
                                     "git tag v1", "git gc", "rm build/x.o"])
def test_restorable_everyday_commands_stay_allowed_in_a_repo(repo, tmp_path, command):
    write(repo, "docs/x.md", "x\n")
    write(repo, "build/x.o", "o\n")
    d = Policy(root=repo, mode="auto", home=tmp_path / "home").check("Bash", {"command": command})
    assert d.action == "allow", d


# ------------------------------------------------------------------ part 2: type changes

TYPE_CHANGES = {  # name: (set-up before the turn, the turn's command)
    "file->dir": ("echo f > t", "rm t && mkdir -p t/u && echo in > t/u/v && echo x > t/w"),
    "dir->file": ("mkdir t && echo 1 > t/a && echo 2 > t/b && chmod +x t/b", "rm -r t && echo f > t"),
    "dir->symlink": ("mkdir t && echo 1 > t/a", "mkdir e && echo 9 > e/a && rm -r t && ln -s e t"),
    "dir->symlink-out": ("mkdir t && echo 1 > t/a", "rm -r t && ln -s / t"),
    "symlink->dir": ("ln -s a.py t", "rm t && mkdir t && echo z > t/a.py"),
    "file->symlink": ("printf 'x\\n' > t && chmod +x t", "rm t && ln -s a.py t"),
    "symlink->file": ("ln -s run.sh t", "rm t && echo real > t"),
    "dir->file->dir": ("mkdir t && echo 1 > t/a", "rm -r t && echo f > t && rm t && mkdir t && echo 2 > t/b"),
}


@pytest.mark.parametrize("name", TYPE_CHANGES)
@pytest.mark.parametrize("tracked", [True, False])
def test_type_changes_are_undone_exactly(repo, name, tracked):
    setup, change = TYPE_CHANGES[name]
    bash(repo, setup)
    if tracked:
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "t")
    before, gs = tree_state(repo), git_state(repo)
    s = Snapshots(repo)
    t = s.begin()
    bash(repo, change)
    assert s.end(t).changed
    s.undo()
    assert tree_state(repo) == before and git_state(repo) == gs


def test_type_change_undo_refuses_before_changing_anything(repo):
    bash(repo, "echo f > t && git add t && git commit -qm t")
    s = Snapshots(repo)
    turn = s.begin()
    bash(repo, "rm t && mkdir t && echo in > t/new.py")
    s.end(turn)
    write(repo, "t/notes.txt", "the user's, written after the turn\n")
    now = tree_state(repo)
    with pytest.raises(UndoError, match=r"t is now a directory holding t/notes\.txt.*nothing was changed"):
        s.undo()
    assert tree_state(repo) == now


# ------------------------------------------------------------------ nested .nanocode folders

def test_nested_nanocode_folders_are_user_files(repo):
    write(repo, "docs/.nanocode/notes.md", "tracked notes\n")
    git(repo, "add", "docs")
    git(repo, "commit", "-qm", "docs")
    write(repo, ".nanocode/settings.json", '{"mode": "ask"}\n')
    before = tree_state(repo)
    s = Snapshots(repo)
    t = s.begin()
    write(repo, "docs/.nanocode/notes.md", "overwritten by the model\n")
    write(repo, "pkg/.nanocode/new.md", "new\n")
    write(repo, ".nanocode/settings.json", '{"mode": "auto"}\n')  # nanocode's own: not a user file
    assert s.end(t).changed == ["docs/.nanocode/notes.md", "pkg/.nanocode/new.md"]
    s.undo()
    after = tree_state(repo)
    assert after.pop(".nanocode/settings.json")[1] == b'{"mode": "auto"}\n'
    before.pop(".nanocode/settings.json")
    assert after == before


def test_nested_nanocode_in_a_plain_folder_and_a_subdirectory_root(tmp_path, repo):
    plain = str(tmp_path / "plain")
    write(plain, "docs/.nanocode/notes.md", "notes\n")
    s = Snapshots(plain)
    t = s.begin()
    os.unlink(os.path.join(plain, "docs/.nanocode/notes.md"))
    assert s.end(t).changed == ["docs/.nanocode/notes.md"]
    s.undo()
    assert open(os.path.join(plain, "docs/.nanocode/notes.md")).read() == "notes\n"
    sub = os.path.join(repo, "pkg")
    write(sub, ".nanocode/settings.json", "{}\n")  # the project root is pkg/: its .nanocode is nanocode's
    s = Snapshots(sub)
    t = s.begin()
    write(sub, ".nanocode/settings.json", '{"x": 1}\n')
    write(repo, "lib/.nanocode/n.md", "user file\n")
    assert s.end(t).changed == ["lib/.nanocode/n.md"]


# ------------------------------------------------------------------ the user's index, stash and refs

GIT_TURNS = {
    "drop-branch-reset-add-gc": "git stash drop && git branch -D x && git reset -q HEAD~1 && git add -A && "
                                "git reflog expire --expire=now --all && git gc -q --prune=now",
    "update-ref-stash-gc": "git update-ref -d refs/stash && git reflog expire --expire=now --all && "
                           "git gc -q --prune=now",
    "reset-hard": "git reset -q --hard && git reflog expire --expire=now --all && git gc -q --prune=now",
    "stash-clear-new-branch": "git stash clear && git checkout -q -b y && git stash -q && git tag -a v1 -m v1",
    "commit": "git commit -qm model && git update-ref -d refs/heads/x && git gc -q --prune=now",
}


@pytest.mark.parametrize("name", GIT_TURNS)
def test_turn_that_rewrites_git_state_is_undone(repo, name):
    before, gs = tree_state(repo), git_state(repo)
    index = open(os.path.join(repo, ".git", "index"), "rb").read()
    kept = [line.split()[1] for line in gs[0].splitlines()] + git(repo, "log", "-g", "--format=%H", "refs/stash").split()
    s = Snapshots(repo)
    t = s.begin()
    bash(repo, GIT_TURNS[name])
    t = s.end(t)
    assert t.git and git_state(repo) != gs
    plan = s.plan()
    assert plan.git == t.git and "restore git" in plan.describe()
    s.undo(allow_committed=True)
    assert git_state(repo) == gs and tree_state(repo) == before and objects_alive(repo, kept)
    if "index" in t.git:  # else only git's caches in it may differ (a commit writes its cache-tree)
        assert open(os.path.join(repo, ".git", "index"), "rb").read() == index
    assert git(repo, "stash", "show", "-p", "stash@{1}").count("stashed 1") == 1
    assert git(repo, "show", "x:side.py") == "only on x\n"


def test_control_without_undo_gc_loses_the_objects(repo):
    stash = git(repo, "log", "-g", "--format=%H", "refs/stash").split()
    bash(repo, GIT_TURNS["update-ref-stash-gc"])
    assert not objects_alive(repo, stash)


def test_git_state_changed_since_the_turn_refuses(repo):
    s = Snapshots(repo)
    t = s.begin()
    bash(repo, "git branch -D x && git stash drop")
    s.end(t)
    git(repo, "branch", "x", "HEAD")  # the user makes x again
    now, files = git_state(repo), tree_state(repo)
    with pytest.raises(UndoError, match=r"refs/heads/x changed since the turn"):
        s.undo()
    assert git_state(repo) == now and tree_state(repo) == files


def test_git_only_turn_is_told_through_slash_undo(repo):
    gs = git_state(repo)
    agent = TurnUndo(repo)
    agent.begin("drop", "sess")
    bash(repo, "git stash drop")
    turn = agent.end()
    assert (turn.changed, turn.id, turn.skipped) == ([], 1, [])
    assert "restore git stash" in slash_undo(_Agent(agent), "")
    assert slash_undo(_Agent(agent), "yes") == "undid the request 'drop' (session sess): put back git's stash"
    assert git_state(repo) == gs


class _Agent:
    """The two calls slash_undo makes on an agent, on top of a TurnUndo."""

    def __init__(self, undo):
        self.u = self.undo_log = undo

    def undo_plan(self, all_sessions=False):
        return self.u.plan(None if all_sessions else "sess")

    def undo(self, turn, allow_committed=False):
        return self.u.undo("sess", turn, allow_committed)


# ------------------------------------------------------------------ undo's refs gone missing

@pytest.mark.parametrize("ref", ["1-after", "1-before", "1-keep"])
def test_missing_refs_give_a_clear_error(repo, ref):
    agent = TurnUndo(repo)
    agent.begin("edit", "sess")
    bash(repo, "echo changed > run.sh && git branch -D x")
    agent.end()
    git(repo, "update-ref", "-d", f"refs/nanocode/turns/{ref}")
    files, gs = tree_state(repo), git_state(repo)
    text = slash_undo(_Agent(agent), "yes")
    assert f"refs/nanocode/turns/{ref} missing" in text and "cannot be undone" in text
    assert tree_state(repo) == files and git_state(repo) == gs
    with pytest.raises(UndoError, match="missing"):
        Snapshots(repo).undo(1)


def test_all_undo_refs_and_objects_gone(repo):
    s = Snapshots(repo)
    t = s.begin()
    bash(repo, "git stash drop")
    s.end(t)
    bash(repo, "git for-each-ref --format='delete %(refname)' refs/nanocode | git update-ref --stdin && "
               "git reflog expire --expire=now --all && git gc -q --prune=now")
    shutil.rmtree(os.path.join(repo, ".git", "nanocode"))
    digest = hashlib.sha1(repr(git_state(repo)).encode()).hexdigest()
    with pytest.raises(UndoError, match="nothing has been recorded"):
        Snapshots(repo).undo()
    assert hashlib.sha1(repr(git_state(repo)).encode()).hexdigest() == digest
