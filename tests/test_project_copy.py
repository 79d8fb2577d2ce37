"""agent/loop/project_copy.py's contract, tested directly on real git repositories: probe() in and
outside git, project_files() (tracked + untracked-not-ignored, SKIP left out, symlinks kept as
links), digest() (content, exec bit, symlink target, None when absent), and make_copy(): a copy
whose `git status` matches the user's and where a commit leaves the user's repository (refs, HEAD,
index, objects) untouched."""

import hashlib
import os
import subprocess

import pytest

from agent.loop.project_copy import digest, make_copy, manifest, probe, project_files, skipped
from tiny_models import commit_all


def git(root, *args) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.rstrip("\n")


def write(root, rel, text="x\n"):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path):
    """A committed project: tracked files, a symlink to a file and one to a directory, a tracked
    .nanocode/ file, and an ignore rule; then on disk an untracked file, ignored files, a
    __pycache__ and a tracked file deleted."""
    root = tmp_path / "proj"
    for rel in ("a.py", "pkg/b.py", "pkg/gone.py", ".nanocode/settings.json"):
        write(root, rel)
    write(root, ".gitignore", "*.log\nbuild/\n")
    os.symlink("a.py", root / "link.py")
    os.symlink("pkg", root / "pkg_link")
    commit_all(root)
    write(root, "new.py")
    write(root, "run.log")
    write(root, "build/out.o")
    write(root, "pkg/__pycache__/b.cpython-311.pyc")
    os.unlink(root / "pkg" / "gone.py")
    return root


def repo_state(root) -> dict:
    """What a copy must never change in the user's repository."""
    dot = root / ".git"
    objects = sorted(os.path.relpath(os.path.join(d, f), dot / "objects")
                     for d, _, files in os.walk(dot / "objects") for f in files)
    return {"refs": git(root, "for-each-ref"), "HEAD": (dot / "HEAD").read_text(), "objects": objects,
            "index": hashlib.sha1((dot / "index").read_bytes()).hexdigest(),
            "status": git(root, "status", "--porcelain")}


def not_skipped(status: str) -> list[str]:
    return [line for line in status.splitlines() if not skipped(line[3:].rstrip("/"))]


def test_probe_in_git_gives_the_top_and_the_facts_a_copy_needs(repo):
    top, facts = probe(str(repo / "pkg"))
    assert top == os.path.realpath(repo)
    dot = os.path.realpath(repo / ".git")
    assert facts == {"objects": os.path.join(dot, "objects"), "index": os.path.join(dot, "index"),
                     "exclude": os.path.join(dot, "info", "exclude"),
                     "head": git(repo, "rev-parse", "HEAD"), "ref": git(repo, "symbolic-ref", "HEAD")}


def test_probe_of_a_repo_without_commits_and_of_a_detached_head(repo, tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q", "-b", "trunk")
    assert probe(str(fresh))[1]["head"] is None and probe(str(fresh))[1]["ref"] == "refs/heads/trunk"
    git(repo, "checkout", "-q", "--detach")
    facts = probe(str(repo))[1]
    assert facts["ref"] is None and facts["head"] == git(repo, "rev-parse", "HEAD")


def test_probe_outside_git_gives_the_root_and_none(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert probe(str(plain)) == (str(plain), None)


def test_project_files_in_git_are_tracked_and_untracked_not_ignored(repo):
    files = project_files(str(repo), True)
    assert sorted(files) == [".gitignore", "a.py", "link.py", "new.py", "pkg/b.py", "pkg_link"]
    assert len(files) == len(set(files))


def test_project_files_outside_git_are_every_file_but_skip_and_links_are_not_followed(tmp_path):
    root = tmp_path / "plain"
    for rel in ("a.py", "sub/b.txt", "run.log", ".git/config", "__pycache__/a.pyc", ".nanocode/s.json",
                "sub/.pytest_cache/v"):
        write(root, rel)
    os.symlink("sub", root / "sub_link")
    os.symlink("missing", root / "dangling")
    assert sorted(project_files(str(root), False)) == ["a.py", "dangling", "run.log", "sub/b.txt", "sub_link"]


def test_digest_compares_content_exec_bit_and_symlink_target(tmp_path):
    f = write(tmp_path, "f.sh", "echo hi\n")
    plain = digest(str(f))
    assert plain == "f:" + hashlib.sha1(b"echo hi\n").hexdigest()
    os.chmod(f, 0o755)
    assert digest(str(f)) == "x:" + plain[2:]
    f.write_text("echo bye\n")
    assert digest(str(f)) not in (plain, "x:" + plain[2:])
    os.symlink("f.sh", tmp_path / "l")
    os.symlink("nowhere", tmp_path / "dangling")
    assert digest(str(tmp_path / "l")) == "l:f.sh" and digest(str(tmp_path / "dangling")) == "l:nowhere"
    assert digest(str(tmp_path / "absent")) is None and digest(str(tmp_path)) is None


def test_make_copy_is_a_working_git_copy_that_never_writes_to_the_users_repo(repo, tmp_path):
    git(repo, "rm", "-q", "--cached", "pkg/gone.py")  # the deletion staged, so the index differs from HEAD
    top, facts = probe(str(repo))
    files = project_files(top, True)
    before = repo_state(repo)
    dest = tmp_path / "copy"
    make_copy(top, facts, files, str(dest))
    assert sorted(os.listdir(dest)) == sorted([".git", ".gitignore", "a.py", "link.py", "new.py", "pkg",
                                                "pkg_link"])
    assert os.readlink(dest / "link.py") == "a.py" and os.readlink(dest / "pkg_link") == "pkg"
    assert not (dest / "run.log").exists() and not (dest / ".nanocode").exists()
    assert manifest(str(dest), True) == manifest(top, True)
    # the user's status (new.py, the staged deletion), but for SKIP: an untracked __pycache__/ is
    # not there, and the tracked .nanocode/ file (not copied) is skip-worktree, not deleted
    status = git(dest, "status", "--porcelain")
    assert ".nanocode" not in status
    assert not_skipped(status) == not_skipped(before["status"]) == ["D  pkg/gone.py", "?? new.py"]
    assert git(dest, "symbolic-ref", "HEAD") == facts["ref"] and git(dest, "rev-parse", "HEAD") == facts["head"]
    write(dest, "a.py", "x = 'changed in the copy'\n")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "a rollout's commit")
    assert git(dest, "status", "--porcelain") == ""
    assert git(dest, "log", "--format=%s", "-2").splitlines() == ["a rollout's commit", "init"]
    assert ".nanocode/settings.json" in git(dest, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    assert repo_state(repo) == before
    assert (repo / "a.py").read_text() == "x\n"


def test_make_copy_of_a_clean_repo_has_a_clean_status(tmp_path):
    root = tmp_path / "clean"
    write(root, "a.py")
    os.symlink("a.py", root / "link.py")
    commit_all(root)
    top, facts = probe(str(root))
    make_copy(top, facts, project_files(top, True), str(tmp_path / "copy"))
    assert git(tmp_path / "copy", "status", "--porcelain") == ""


def test_make_copy_outside_git_copies_the_files_and_makes_no_git(tmp_path):
    root = tmp_path / "plain"
    write(root, "a.py")
    write(root, "sub/run.sh")
    os.chmod(root / "sub" / "run.sh", 0o755)
    os.symlink("sub", root / "sub_link")
    top, facts = probe(str(root))
    make_copy(top, facts, project_files(top, False), str(tmp_path / "copy"))
    assert manifest(str(tmp_path / "copy"), False) == manifest(top, False)
    assert digest(str(tmp_path / "copy" / "sub" / "run.sh")).startswith("x:")
    assert not (tmp_path / "copy" / ".git").exists()
