"""tools/git_state.py on its own, in real temporary git repositories: what state() records (refs,
symbolic or detached HEAD, the stash list, the index entries and not their stat data), what end()
lists, the keep refs that carry a turn's objects through `git gc --prune=now`, the keep commit
reused while nothing changed, a restore that puts refs, HEAD, stash and index bytes back and
never touches the work tree (a dirty file, an untracked one, an ignored one), and the refusals
(moved on since, record gone, objects pruned, another git holding index.lock).

The turns are driven the way tools/undo.py drives them (begin's update-ref lines applied, end,
refusal, restore); the user's and the turn's git commands are real `git` processes."""
import json
import os
import subprocess

import pytest

from repo_state import tree_state
from tools.git_state import GitState, git_changes
from tools.snapshot import GitDir, GitError

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def git(root, *args, check=True) -> str:
    r = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                        "-c", "tag.gpgsign=false", "-C", str(root), *args], capture_output=True, text=True)
    assert r.returncode == 0 or not check, (args, r.stderr)
    return r.stdout.strip()


def commit(root, name, text, message):
    (root / name).write_text(text)
    git(root, "add", name)
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    """main (2 commits), a branch `feature`, an annotated tag v1 and a light one, two stash
    entries (one with a non-ASCII message), a .gitignore for *.log."""
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "add", ".gitignore")
    commit(root, "a.py", "x = 1\n", "first")
    commit(root, "a.py", "x = 2\n", "second")
    git(root, "tag", "-a", "v1", "-m", "release one")
    git(root, "tag", "light")
    git(root, "branch", "feature")
    for message in ("first stash", "zweite Änderung"):
        (root / "a.py").write_text(f"x = '{message}'\n")
        git(root, "stash", "push", "-q", "-m", message)
    return root


def git_state(root) -> GitState:
    """A GitState for the repo at root, its turns.json a real file in the meta dir (as undo's)."""
    g = GitDir(str(root / ".git"), str(root), shadow=False)
    os.makedirs(g.meta_dir, exist_ok=True)
    path = os.path.join(g.meta_dir, "turns.json")

    def load():
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def save(meta):
        with open(path, "w") as f:
            json.dump(meta, f)
    return GitState(g, load, save)


def begin(gs, tid) -> list[str]:
    """gs.begin(tid) with its keep refs made, as Snapshots.begin makes them."""
    lines = gs.begin(tid)
    gs.g.run("update-ref", "--stdin", input="".join(lines).encode())
    return lines


def stash_list(root) -> str:
    return git(root, "stash", "list", "--format=%H %gs")


def index_bytes(root) -> bytes | None:
    try:
        return (root / ".git" / "index").read_bytes()
    except FileNotFoundError:
        return None


def gc_now(root):
    git(root, "reflog", "expire", "--expire=now", "--all")
    git(root, "gc", "-q", "--prune=now")


def exists(root, sha) -> bool:
    return subprocess.run(["git", "-C", str(root), "cat-file", "-e", sha]).returncode == 0


def test_git_changes_lists_refs_then_head_stash_index():
    before = {"refs": {"refs/heads/a": ["1", "commit"], "refs/heads/b": ["2", "commit"],
                       "refs/stash": ["3", "commit"]}, "head": "ref: refs/heads/a", "stash": [["3", "m"]],
              "index": "i"}
    after = {"refs": {"refs/heads/b": ["4", "commit"], "refs/heads/c": ["5", "commit"],
                      "refs/stash": ["6", "commit"]}, "head": "5", "stash": [["6", "n"]], "index": "j"}
    assert git_changes(before, after) == ["refs/heads/a", "refs/heads/b", "refs/heads/c", "HEAD", "stash",
                                          "index"]
    assert git_changes(before, before) == []


def test_state_records_refs_head_stash_and_index(repo):
    git(repo, "update-ref", "refs/nanocode/turns/9-keep", "HEAD")  # nanocode's own refs are no state
    s = git_state(repo).state()
    head = git(repo, "rev-parse", "HEAD")
    assert s["refs"]["refs/heads/main"] == [head, "commit"]
    assert s["refs"]["refs/heads/feature"] == [head, "commit"]
    assert s["refs"]["refs/tags/v1"] == [git(repo, "rev-parse", "v1"), "tag"]  # the tag object itself
    assert s["refs"]["refs/tags/light"] == [head, "commit"]
    assert not [n for n in s["refs"] if n.startswith("refs/nanocode/")]
    assert s["head"] == "ref: refs/heads/main"
    assert [" ".join(e) for e in s["stash"]] == stash_list(repo).splitlines()
    assert s["stash"][0][1] == "On main: zweite Änderung"  # newest first, non-ASCII kept
    git(repo, "checkout", "-q", "--detach")
    assert git_state(repo).state()["head"] == head


def test_a_stat_refresh_is_no_index_change(repo):
    gs = git_state(repo)
    before, raw = gs.state(), index_bytes(repo)
    st = os.stat(repo / "a.py")
    os.utime(repo / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    git(repo, "status", "--short")  # git rewrites the index with the new stat data
    assert index_bytes(repo) != raw
    assert gs.state() == before
    git(repo, "add", ".gitignore", "-f", "a.py")  # a.py's content is unchanged: still no change
    assert gs.state()["index"] == before["index"]
    (repo / "b.py").write_text("y = 1\n")
    git(repo, "add", "b.py")
    assert gs.state()["index"] != before["index"]


def test_end_lists_what_the_turn_changed(repo):
    gs = git_state(repo)
    begin(gs, 1)
    assert gs.end(1) == []
    begin(gs, 2)
    git(repo, "checkout", "-q", "-b", "topic")
    commit(repo, "c.py", "z = 3\n", "on topic")
    git(repo, "branch", "-D", "feature")
    git(repo, "stash", "drop", "-q")
    (repo / "d.py").write_text("w = 4\n")
    git(repo, "add", "d.py")
    assert gs.end(2) == ["refs/heads/feature", "refs/heads/topic", "HEAD", "stash", "index"]
    assert gs.end(3) == []  # no record of turn 3


def test_undo_puts_back_refs_head_stash_and_index_and_leaves_the_work_tree(repo):
    (repo / "a.py").write_text("x = 'dirty, not staged'\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "debug.log").write_text("ignored, must not be lost\n")
    gs = git_state(repo)
    begin(gs, 1)
    before, before_index, before_stash = gs.state(), index_bytes(repo), stash_list(repo)

    git(repo, "branch", "-D", "feature")
    git(repo, "tag", "-d", "v1")
    git(repo, "tag", "-f", "light", "HEAD~1")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD~1")
    git(repo, "stash", "drop", "-q", "stash@{1}")
    git(repo, "add", "notes.txt")
    git(repo, "checkout", "-q", "--detach")
    git(repo, "commit", "-q", "--allow-empty", "-m", "detached work")
    what = gs.end(1)
    assert what == ["refs/heads/feature", "refs/remotes/origin/main", "refs/tags/light", "refs/tags/v1",
                    "HEAD", "stash", "index"]
    files = tree_state(repo)

    assert gs.refusal(1, what) is None
    gs.restore(1, what)
    assert gs.state() == before
    assert index_bytes(repo) == before_index
    assert stash_list(repo) == before_stash
    assert git(repo, "cat-file", "-t", "v1") == "tag"
    assert git(repo, "stash", "show", "-p", "stash@{1}").count("first stash") == 1
    assert tree_state(repo) == files  # the work tree, dirty, untracked and ignored files, untouched
    assert (repo / "debug.log").read_text() == "ignored, must not be lost\n"


def test_keep_refs_carry_the_turns_objects_through_gc(repo):
    git(repo, "checkout", "-q", "-b", "doomed")
    doomed = commit(repo, "only_here.py", "z = 1\n", "only on doomed")
    git(repo, "checkout", "-q", "main")
    (repo / "staged.py").write_text("blob only in the index\n")
    git(repo, "add", "staged.py")
    staged = git(repo, "rev-parse", ":staged.py")
    tag, stashes = git(repo, "rev-parse", "v1"), [e.split()[0] for e in stash_list(repo).splitlines()]
    gs = git_state(repo)
    lines = begin(gs, 1)
    assert lines[0].startswith("update refs/nanocode/turns/1-keep ")
    assert lines[1:] == [f"update refs/nanocode/turns/1-keep-0 {tag}\n"]  # the annotated tag's object
    before = gs.state()

    git(repo, "branch", "-D", "doomed")
    git(repo, "tag", "-d", "v1")
    git(repo, "stash", "clear")
    git(repo, "rm", "-q", "--cached", "staged.py")
    (repo / "staged.py").unlink()
    what = gs.end(1)
    gc_now(repo)
    assert all(exists(repo, sha) for sha in [doomed, tag, staged, *stashes])

    assert gs.refusal(1, what) is None
    gs.restore(1, what)
    assert gs.state() == before
    assert git(repo, "show", ":staged.py") == "blob only in the index"


def test_without_keep_refs_pruned_objects_are_a_refusal(repo):
    git(repo, "checkout", "-q", "-b", "doomed")
    doomed = commit(repo, "only_here.py", "z = 1\n", "only on doomed")
    git(repo, "checkout", "-q", "main")
    gs = git_state(repo)
    begin(gs, 1)
    git(repo, "branch", "-D", "doomed")
    what = gs.end(1)
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/nanocode/").split():
        git(repo, "update-ref", "-d", ref)
    gc_now(repo)
    assert not exists(repo, doomed)
    assert "are gone" in gs.refusal(1, what)


def test_the_keep_commit_is_reused_while_the_state_is_unchanged(repo, monkeypatch):
    gs = git_state(repo)
    first = begin(gs, 1)[0].split()[-1]
    ran, run = [], gs.g.run
    monkeypatch.setattr(gs.g, "run", lambda *a, **kw: ran.append(a[0]) or run(*a, **kw))
    assert begin(gs, 2)[0].split()[-1] == first
    assert "commit-tree" not in ran and "write-tree" not in ran  # reused, not made again
    parents = git(repo, "rev-list", "--parents", "-n1", first).split()[1:]
    s = gs.state()
    want = {sha for sha, kind in s["refs"].values() if kind == "commit"} | {sha for sha, _ in s["stash"]}
    assert set(parents) == want
    assert git(repo, "rev-parse", f"{first}^{{tree}}") == git(repo, "write-tree")  # the index's tree
    git(repo, "branch", "another", "HEAD~1")
    assert begin(gs, 3)[0].split()[-1] != first


def test_a_conflicted_index_is_kept_and_put_back(repo):
    git(repo, "checkout", "-q", "feature")
    commit(repo, "a.py", "x = 'feature'\n", "feature side")
    git(repo, "checkout", "-q", "main")
    commit(repo, "a.py", "x = 'main'\n", "main side")
    git(repo, "merge", "-q", "feature", check=False)
    assert git(repo, "ls-files", "-u")  # conflict stages in the index
    gs = git_state(repo)
    keep = begin(gs, 1)[0].split()[-1]
    assert git(repo, "rev-parse", f"{keep}^{{tree}}") == EMPTY_TREE
    before_index = index_bytes(repo)
    (repo / "a.py").write_text("x = 'resolved'\n")
    git(repo, "add", "a.py")
    what = gs.end(1)
    assert what == ["index"]
    assert gs.refusal(1, what) is None
    gs.restore(1, what)
    assert index_bytes(repo) == before_index and git(repo, "ls-files", "-u")
    assert (repo / "a.py").read_text() == "x = 'resolved'\n"  # the work tree is not the index's


def test_a_repo_without_an_index_gets_it_removed_again(tmp_path):
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    gs = git_state(root)
    begin(gs, 1)
    before = gs.state()
    assert before["head"] == "ref: refs/heads/main" and before["refs"] == {}
    commit(root, "a.py", "x = 1\n", "first")
    what = gs.end(1)
    assert what == ["refs/heads/main", "index"]
    gs.restore(1, what)
    assert index_bytes(root) is None and gs.state() == before
    assert (root / "a.py").read_text() == "x = 1\n"


def test_refusal_when_the_user_moved_on(repo):
    gs = git_state(repo)
    begin(gs, 1)
    git(repo, "branch", "topic")
    what = gs.end(1)
    assert what == ["refs/heads/topic"]
    git(repo, "branch", "unrelated")  # a part the turn did not touch: no obstacle
    assert gs.refusal(1, what) is None
    git(repo, "branch", "-f", "topic", "HEAD~1")
    why = gs.refusal(1, what)
    assert "refs/heads/topic" in why and "changed since the turn" in why
    assert git(repo, "rev-parse", "topic") == git(repo, "rev-parse", "HEAD~1")  # nothing was changed


def test_refusal_when_the_record_is_gone(repo):
    gs = git_state(repo)
    begin(gs, 1)
    (repo / "new.py").write_text("n = 1\n")
    git(repo, "add", "new.py")
    git(repo, "branch", "topic")
    what = gs.end(1)
    assert gs.refusal(1, what) is None
    index_copy = repo / ".git" / "nanocode" / "index-1"
    index_copy.unlink()
    assert "is missing" in gs.refusal(1, what)
    assert gs.refusal(1, ["refs/heads/topic"]) is None  # the refs alone need no index copy
    (repo / ".git" / "nanocode" / "git-1.json").unlink()
    assert "is missing" in gs.refusal(1, ["refs/heads/topic"])


def test_restore_waits_for_another_gits_index_lock(repo):
    gs = git_state(repo)
    begin(gs, 1)
    (repo / "new.py").write_text("n = 1\n")
    git(repo, "add", "new.py")
    what = gs.end(1)
    after = index_bytes(repo)
    lock = repo / ".git" / "index.lock"
    lock.write_bytes(b"another git's")
    with pytest.raises(GitError, match="index.lock exists"):
        gs.restore(1, what)
    assert index_bytes(repo) == after and lock.read_bytes() == b"another git's"


def test_a_ref_name_that_is_not_utf8_is_recorded_and_put_back(repo):
    """Git allows any bytes >= 0x80 in a ref name: state() must not fail on one (every edit of a
    turn would be refused: no snapshot), and restore puts back exactly those bytes."""
    name = b"refs/heads/caf\xe9"
    subprocess.run([b"git", b"-C", bytes(repo), b"update-ref", name, b"HEAD"], check=True)
    subprocess.run([b"git", b"-C", bytes(repo), b"symbolic-ref", b"HEAD", name], check=True)
    gs = git_state(repo)
    begin(gs, 1)
    before = gs.state()
    assert os.fsdecode(name) in before["refs"] and before["head"] == "ref: " + os.fsdecode(name)
    subprocess.run([b"git", b"-C", bytes(repo), b"update-ref", b"-d", name], check=True)
    git(repo, "checkout", "-q", "main")
    what = gs.end(1)
    assert what == [os.fsdecode(name), "HEAD"]
    assert gs.refusal(1, what) is None
    gs.restore(1, what)
    assert gs.state() == before
    refs = subprocess.run([b"git", b"-C", bytes(repo), b"for-each-ref", b"--format=%(refname)"],
                          capture_output=True, check=True).stdout.split()
    assert name in refs
