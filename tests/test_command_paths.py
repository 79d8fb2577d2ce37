"""tools/command_paths.py's contract, tested directly: Where (abspath, cd, outside, scratch, lost),
home_dotfile, GIT_DIR and target_reason on paths inside a real git project, scratch paths below the
temp dirs, $HOME dot-files, system dirs, raw disks and .git internals."""

import os

import pytest

from tiny_models import commit_all
from tools.command_paths import GIT_DIR, Where, home_dotfile, target_reason
from tools.destructive import destructive

UP_TO_SLASH = "../" * 40  # from the project (below pytest's temp dir, itself below /tmp) up to /


@pytest.fixture
def where(tmp_path, monkeypatch):
    """A Where for a committed project (a.py, sub/b.py tracked; build/ and *.log ignored, with
    build/out.o and run.log on disk) and an empty $HOME beside it; no $TMPDIR."""
    monkeypatch.delenv("TMPDIR", raising=False)
    root, home = tmp_path / "proj", tmp_path / "home"
    (root / "sub").mkdir(parents=True)
    home.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "sub" / "b.py").write_text("y = 2\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    commit_all(root)
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\x7fELF")
    (root / "run.log").write_text("log\n")
    return Where(str(home), str(root))


def test_root_is_real_and_abspath_expands_home_and_the_current_directory(where, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(where.root)
    assert Where(where.home, str(link)).root == where.root == os.path.realpath(tmp_path / "proj")
    for spelled in ("~/notes", "$HOME/notes", "${HOME}/notes"):
        assert where.abspath(spelled) == os.path.join(where.home, "notes")
    assert where.abspath("~") == where.home
    assert where.abspath("sub/../a.py") == os.path.join(where.root, "a.py")
    assert where.abspath("/etc//hosts") == "/etc/hosts"


def test_cd_moves_the_current_directory(where):
    where.cd(["sub"])
    assert where.abspath("b.py") == os.path.join(where.root, "sub", "b.py")
    assert not where.outside("b.py") and where.outside(UP_TO_SLASH + "opt/x")
    where.cd([])
    assert where.cwd == where.home and where.outside("file")
    where.cd(["-P", where.root])
    assert where.cwd == where.root


def test_cd_dash_makes_the_current_directory_unknown(where):
    where.cd(["/opt"])
    where.cd(["-"])
    assert where.cwd is None and where.abspath("a.py") is None
    assert where.outside("a.py")  # relative to an unknown directory: could be anywhere


def test_cd_dash_does_not_hide_a_delete_outside_the_project(tmp_path):
    """The attack the defect allowed: with the project at $HOME, `cd -` was taken as `cd ~`, so a
    delete in the directory it really returns to (/opt) was judged harmless."""
    home = tmp_path / "home"
    home.mkdir()
    assert destructive("cd /opt && rm data", home=str(home), root=str(home))  # the control
    assert destructive("cd /opt && cd / && cd - && rm data", home=str(home), root=str(home))


def test_outside_the_project(where, tmp_path):
    for inside in ("a.py", "sub/new.py", os.path.join(where.root, "sub"), where.root,"."):
        assert not where.outside(inside), inside
    for out in ("/etc/passwd", UP_TO_SLASH + "opt/x", "~/notes", str(tmp_path), "/"):
        assert where.outside(out), out
    for computed in ("$VAR/x", "${DIR}/x", "$(pwd)/x", "`pwd`/x"):
        assert not where.outside(computed), computed  # decided at run time, not here
    assert not Where(where.home, None).outside("/etc/passwd")  # root unknown


def test_scratch_is_a_literal_path_below_a_temp_dir(where, tmp_path):
    assert where.scratch("/tmp/nanocode-scratch-file") and where.scratch("/var/tmp/x/y")
    assert not where.outside("/tmp/nanocode-scratch-file")
    for not_scratch in ("/tmp", "/var/tmp", "/tmp/*.txt", "/tmp/$X", "~/x", "/opt/x",
                        str(tmp_path),  # a folder holding the project
                        os.path.join(where.root, "a.py"),  # inside the project (itself below /tmp)
                        os.path.join(where.home, "x")):  # under $HOME (itself below /tmp)
        assert not where.scratch(not_scratch), not_scratch
    assert not Where(where.home, None).scratch("/tmp/x")  # root unknown


def test_tmpdir_counts_as_scratch_unless_it_is_slash_or_holds_home(where, monkeypatch):
    monkeypatch.setenv("TMPDIR", "/nanocode-own-tmp")  # never created: only the text is judged
    assert Where(where.home, where.root).scratch("/nanocode-own-tmp/f")
    assert not where.scratch("/nanocode-own-tmp/f")  # made before TMPDIR was set
    monkeypatch.setenv("TMPDIR", "/")
    assert not Where(where.home, where.root).scratch("/opt/f")
    monkeypatch.setenv("TMPDIR", "/nanocode-homes")
    assert not Where("/nanocode-homes/u", where.root).scratch("/nanocode-homes/f")  # holds $HOME
    assert Where("/nanocode-elsewhere/u", where.root).scratch("/nanocode-homes/f")


def test_lost_names_existing_project_paths_undo_could_not_restore(where):
    assert where.lost(["a.py", "sub/b.py", "new.py"]) is None  # tracked or absent
    assert where.lost(["a.py", "build/out.o"]) == "build/out.o"  # ignored
    assert where.lost(["build"]) == "build"  # a directory holding ignored files
    assert where.lost(["*.log"]) == "*.log"  # a glob, expanded to run.log
    assert where.lost([".git/config"]) == ".git/config"
    assert where.lost(["build/never-made.o", "/etc/passwd", where.root]) is None
    assert where.lost(["$OUT"]) is None
    assert where.lost(["$OUT"], computed=True) == "$OUT"
    assert where.lost(["$HOME/x"], computed=True) is None  # computed, yet outside the project
    assert Where(where.home, None).lost(["build/out.o"]) is None


@pytest.mark.parametrize("path,dotfile", [
    ("~/.bashrc", True), ("$HOME/.profile", True), ("${HOME}/.ssh/authorized_keys", True),
    ("~alice/.bashrc", True), ("/home/bob/.zshrc", True), ("/Users/eve/.gitconfig", True),
    ("/root/.bashrc", True), ("~//.vimrc", True),
    ("~/notes.txt", False), ("~/dir/.hidden", False), ("/tmp/.x", False), (".bashrc", False),
    ("/home/bob/src/.env", False),
])
def test_home_dotfile_is_a_dot_entry_directly_in_a_home(path, dotfile, tmp_path):
    assert home_dotfile(path, tmp_path) is dotfile


def test_home_dotfile_knows_this_home_by_its_real_path(tmp_path):
    real = tmp_path / "real-home"
    real.mkdir()
    (tmp_path / "home-link").symlink_to(real)
    assert home_dotfile(f"{real}/.gitconfig", tmp_path / "home-link")
    assert not home_dotfile(f"{real}/gitconfig", tmp_path / "home-link")


@pytest.mark.parametrize("path,git", [
    (".git/config", True), ("sub/.git", True), ("x/.GIT/hooks/pre-commit", True), (".git", True),
    (".gitignore", False), ("my.git/x", False), (".github/workflows/ci.yml", False), ("a.git", False),
])
def test_git_dir_matches_a_git_component(path, git):
    assert bool(GIT_DIR.search(path)) is git


def test_target_reason_names_why_a_write_needs_a_person(where):
    cases = {
        "~/.bashrc": "writes to a dot-file in $HOME (~/.bashrc)",
        "~/.git/config": "writes to a dot-file in $HOME (~/.git/config)",  # the first reason counts
        "/dev/sda": "writes to a raw disk device (/dev/sda)",
        "/dev/nvme0n1p1": "writes to a raw disk device (/dev/nvme0n1p1)",
        "/etc/hosts": "writes to a system path (/etc/hosts)",
        "/usr/local/bin/tool": "writes to a system path (/usr/local/bin/tool)",
        ".git/hooks/pre-commit": "writes to git internals (.git/hooks/pre-commit)",
        "/opt/data": "writes outside the project (/opt/data)",
        UP_TO_SLASH + "opt": f"writes outside the project ({UP_TO_SLASH}opt)",
        "build/out.o": "overwrites build/out.o, which undo cannot restore (ignored by git or not snapshotted)",
    }
    for path, reason in cases.items():
        assert target_reason(path, where) == reason, path
    for fine in ("a.py", "sub/new.py", "/dev/null", "/tmp/nanocode-scratch-out", "$OUT"):
        assert target_reason(fine, where) is None, fine
