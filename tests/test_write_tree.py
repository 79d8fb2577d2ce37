"""tools/write_tree.py on its own, in a real temporary git project with a folder outside it: best-of's
write_changes (files, modes and links written, deletions and the folders they emptied, links that
lead out refused, a folder link on the way refused with nothing written through it, a link at the
path replaced and never followed, ignored files never lost), and /undo's remove_created,
restore_file (modes, links, a directory outside or in the way) and blocked. Every attack checks
the outside folder byte for byte afterwards."""
import os
import stat
import subprocess

import pytest

from repo_state import tree_state
from tools.write_tree import UnsafeWrite, blocked, remove_created, restore_file, write_changes


@pytest.fixture
def world(tmp_path):
    """(project, outside folder, stash, copy): a committed git project with an ignored build/
    cache, a folder beside it that nothing may touch, and the empty stash and rollout copy that
    write_changes reads the after-states and the folder layout from."""
    top, outside, stash, copy = (tmp_path / n for n in ("proj", "outside", "stash", "copy"))
    for d in (top, outside, stash, copy):
        d.mkdir()
    (outside / "secret.txt").write_text("outside, never touched\n")
    (top / ".gitignore").write_text("build/cache.bin\n")
    (top / "a.py").write_text("a = 1\n")
    (top / "pkg").mkdir()
    (top / "pkg" / "old.py").write_text("old = 1\n")
    (top / "build").mkdir()
    (top / "build" / "gen.py").write_text("gen = 1\n")
    (top / "build" / "cache.bin").write_bytes(b"ignored, must not be lost")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(top)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(git + cmd, check=True)
    return top, outside, stash, copy


def stashed(stash, path, text=None, mode=0o644, link=None):
    """The after-state of `path` in the stash: a file with `text` and `mode`, or a link."""
    p = stash / path
    p.parent.mkdir(parents=True, exist_ok=True)
    if link is not None:
        os.symlink(link, p)
    else:
        p.write_text(text)
        p.chmod(mode)
    return path


def leftovers(top):
    return [os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs if f.startswith(".nanocode")]


# ---- write_changes -----------------------------------------------------------------------------

def test_writes_files_with_their_mode_and_links(world):
    top, outside, stash, copy = world
    changes = {stashed(stash, "a.py", "a = 2\n"): ("old", "new"),
               stashed(stash, "new/deep/run.sh", "#!/bin/sh\n", 0o755): (None, "new"),
               stashed(stash, "alias.py", link="a.py"): (None, "new"),
               stashed(stash, "new/up.py", link="../a.py"): (None, "new")}
    assert write_changes(str(top), changes, str(stash), str(copy)) == []
    assert (top / "a.py").read_text() == "a = 2\n"
    assert (top / "new/deep/run.sh").read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(os.lstat(top / "new/deep/run.sh").st_mode) == 0o755
    assert os.readlink(top / "alias.py") == "a.py" and os.readlink(top / "new/up.py") == "../a.py"
    assert leftovers(top) == []


def test_deletions_remove_the_folders_they_emptied_only_when_gone_in_the_copy(world):
    top, outside, stash, copy = world
    (top / "keep").mkdir()
    (top / "keep" / "gone.py").write_text("g = 1\n")
    (copy / "keep").mkdir()  # the rollout still has keep/ (empty); pkg/ is gone there
    changes = {"pkg/old.py": ("old", None), "keep/gone.py": ("old", None)}
    assert write_changes(str(top), changes, str(stash), str(copy)) == []
    assert not (top / "pkg").exists()
    assert (top / "keep").is_dir() and os.listdir(top / "keep") == []
    assert (top / "a.py").read_text() == "a = 1\n"


def test_a_folder_holding_an_ignored_file_is_kept(world):
    top, outside, stash, copy = world
    assert write_changes(str(top), {"build/gen.py": ("old", None)}, str(stash), str(copy)) == []
    assert not (top / "build" / "gen.py").exists()
    assert (top / "build" / "cache.bin").read_bytes() == b"ignored, must not be lost"


def test_links_that_lead_out_are_refused_and_not_made(world):
    top, outside, stash, copy = world
    os.symlink("..", top / "up")  # the user's own link out of the project, already there
    changes = {stashed(stash, "abs", link=str(outside / "secret.txt")): (None, "new"),
               stashed(stash, "rel", link="../outside/secret.txt"): (None, "new"),
               stashed(stash, "pkg/deep", link="../../outside"): (None, "new"),
               stashed(stash, "through", link="up/outside/secret.txt"): (None, "new"),
               stashed(stash, "abs_in", link=str(top / "a.py")): (None, "new"),  # absolute: out anywhere else
               stashed(stash, "fine", link="pkg/old.py"): (None, "new")}
    before = tree_state(outside)
    refused = write_changes(str(top), changes, str(stash), str(copy))
    assert sorted(refused) == sorted([f"abs -> {outside / 'secret.txt'}", "rel -> ../outside/secret.txt",
                                      "pkg/deep -> ../../outside", "through -> up/outside/secret.txt",
                                      f"abs_in -> {top / 'a.py'}"])
    assert not any(os.path.lexists(top / p) for p in ("abs", "rel", "pkg/deep", "through", "abs_in"))
    assert os.readlink(top / "fine") == "pkg/old.py"
    assert tree_state(outside) == before


def test_a_link_that_leads_out_only_through_a_later_link_is_removed_again(world):
    top, outside, stash, copy = world
    changes = {stashed(stash, "a", link="d/.."): (None, "new"),  # written first: d does not exist yet
               stashed(stash, "d", link="."): (None, "new")}
    assert write_changes(str(top), changes, str(stash), str(copy)) == ["a -> d/.."]
    assert not os.path.lexists(top / "a")
    assert os.readlink(top / "d") == "."


@pytest.mark.parametrize("link_to", ["outside", "inside"])
def test_a_folder_link_on_the_way_is_refused_and_nothing_goes_through_it(world, link_to):
    top, outside, stash, copy = world
    os.symlink(outside if link_to == "outside" else top / "pkg", top / "lib")
    (outside / "victim.py").write_text("victim\n")
    (top / "pkg" / "victim.py").write_text("victim\n")
    before_out, before_top = tree_state(outside), tree_state(top)
    with pytest.raises(UnsafeWrite, match="symlink"):
        write_changes(str(top), {stashed(stash, "lib/evil.py", "x = 1\n"): (None, "new")}, str(stash), str(copy))
    with pytest.raises(UnsafeWrite, match="symlink"):
        write_changes(str(top), {"lib/victim.py": ("old", None)}, str(stash), str(copy))
    assert tree_state(outside) == before_out and tree_state(top) == before_top


def test_a_link_at_the_path_is_replaced_never_followed(world):
    top, outside, stash, copy = world
    os.symlink(outside / "secret.txt", top / "config.py")
    os.symlink(outside / "created.txt", top / "dangling.py")
    before = tree_state(outside)
    changes = {stashed(stash, "config.py", "c = 1\n"): ("old", "new"),
               stashed(stash, "dangling.py", "d = 1\n"): ("old", "new")}
    assert write_changes(str(top), changes, str(stash), str(copy)) == []
    for name, text in (("config.py", "c = 1\n"), ("dangling.py", "d = 1\n")):
        assert not os.path.islink(top / name) and (top / name).read_text() == text
    assert tree_state(outside) == before


def test_a_link_raced_into_the_temp_name_is_never_written_through(world, monkeypatch):
    """Another process makes the temp name a link to a file outside between the leftover's removal
    and the create: the create fails (O_EXCL | O_NOFOLLOW) and the outside file keeps its bytes."""
    top, outside, stash, copy = world
    unlink = os.unlink

    def racing_unlink(path, *, dir_fd=None):
        try:
            unlink(path, dir_fd=dir_fd)
        finally:
            if str(path).startswith(".nanocode-best-of-"):
                os.symlink(outside / "secret.txt", path, dir_fd=dir_fd)
    monkeypatch.setattr(os, "unlink", racing_unlink)
    before = tree_state(outside)
    with pytest.raises(FileExistsError):
        write_changes(str(top), {stashed(stash, "a.py", "a = 3\n"): ("old", "new")}, str(stash), str(copy))
    monkeypatch.undo()
    assert tree_state(outside) == before and (top / "a.py").read_text() == "a = 1\n"


def test_a_crashed_runs_temp_name_is_never_written_through(world):
    top, outside, stash, copy = world
    os.symlink(outside / "secret.txt", top / f".nanocode-best-of-{os.getpid()}.tmp")
    before = tree_state(outside)
    assert write_changes(str(top), {stashed(stash, "a.py", "a = 3\n"): ("old", "new")}, str(stash), str(copy)) == []
    assert (top / "a.py").read_text() == "a = 3\n" and tree_state(outside) == before
    assert not os.path.lexists(top / f".nanocode-best-of-{os.getpid()}.tmp")


# ---- /undo: remove_created, restore_file, blocked ----------------------------------------------

def test_remove_created_takes_new_empty_folders_and_never_a_links_target(world):
    top, outside, stash, copy = world
    (top / "made" / "deeper").mkdir(parents=True)
    (top / "made" / "deeper" / "f.py").write_text("f = 1\n")
    remove_created(str(top), "made/deeper/f.py", before_dirs={"pkg", "build"})
    assert not (top / "made").exists()
    (top / "pkg" / "new.py").write_text("n = 1\n")
    remove_created(str(top), "pkg/new.py", before_dirs=set())  # pkg still holds old.py: it stays
    assert sorted(os.listdir(top / "pkg")) == ["old.py"]
    (top / "was_empty").mkdir()  # an empty folder before the turn stays, emptied again
    (top / "was_empty" / "n.py").write_text("n = 1\n")
    remove_created(str(top), "was_empty/n.py", before_dirs={"was_empty"})
    assert (top / "was_empty").is_dir()
    os.symlink(outside, top / "out")
    before = tree_state(outside)
    remove_created(str(top), "out", before_dirs=set())
    assert not os.path.lexists(top / "out") and tree_state(outside) == before
    (top / "adir").mkdir()
    (top / "adir" / "x").write_text("x")
    remove_created(str(top), "adir", before_dirs=set())  # a directory is no file the turn made
    assert (top / "adir" / "x").read_text() == "x"


def test_restore_file_modes_follow_only_the_exec_bit(world):
    top, outside, stash, copy = world
    old = os.umask(0o022)
    try:
        restore_file(str(top), "new/tool.sh", link=False, exe=True, read=lambda: b"#!/bin/sh\n")
        restore_file(str(top), "new/data.txt", link=False, exe=False, read=lambda: b"data\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(top / "new/tool.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(top / "new/data.txt").st_mode) == 0o644
    (top / "a.py").chmod(0o640)
    restore_file(str(top), "a.py", link=False, exe=True, read=lambda: b"a = 0\n")
    assert stat.S_IMODE(os.stat(top / "a.py").st_mode) == 0o750 and (top / "a.py").read_bytes() == b"a = 0\n"
    restore_file(str(top), "a.py", link=False, exe=False, read=lambda: b"a = 1\n")
    assert stat.S_IMODE(os.stat(top / "a.py").st_mode) == 0o640
    assert leftovers(top) == []


def test_restore_file_puts_a_link_back_and_replaces_a_link_without_following_it(world):
    top, outside, stash, copy = world
    restore_file(str(top), "a.py", link=True, exe=False, read=lambda: b"pkg/old.py")
    assert os.readlink(top / "a.py") == "pkg/old.py"
    os.symlink(outside / "secret.txt", top / "conf.py")
    before = tree_state(outside)
    restore_file(str(top), "conf.py", link=False, exe=False, read=lambda: b"c = 1\n")
    assert not os.path.islink(top / "conf.py") and (top / "conf.py").read_bytes() == b"c = 1\n"
    assert tree_state(outside) == before


def test_restore_file_refuses_a_folder_outside_or_a_directory_in_the_way(world):
    top, outside, stash, copy = world
    os.symlink(outside, top / "out")
    before = tree_state(outside)
    with pytest.raises(UnsafeWrite, match="resolves outside"):
        restore_file(str(top), "out/x.py", link=False, exe=False, read=lambda: b"x\n")
    assert tree_state(outside) == before
    (top / "pkg" / "sub").mkdir()
    with pytest.raises(UnsafeWrite, match="a directory is in the way"):
        restore_file(str(top), "pkg/sub", link=False, exe=False, read=lambda: b"x\n")
    assert (top / "pkg" / "sub").is_dir()


def test_restore_file_that_fails_leaves_no_temp_file_and_the_old_file(world):
    top, outside, stash, copy = world
    with pytest.raises(TypeError):
        restore_file(str(top), "a.py", link=False, exe=False, read=lambda: "not bytes")
    assert (top / "a.py").read_text() == "a = 1\n" and leftovers(top) == []


def test_blocked_names_what_is_in_the_way(world):
    top, outside, stash, copy = world
    os.symlink(outside, top / "link")
    (top / "afile").write_text("f")
    assert blocked(str(top), "link/x.py", set()) == "link is now a symlink or file"
    assert blocked(str(top), "afile/x.py", set()) == "afile is now a symlink or file"
    assert blocked(str(top), "link/x.py", {"link"}) is None  # the undo removes the link first
    assert blocked(str(top), "missing/x.py", set()) is None  # made afresh
    assert blocked(str(top), "a.py", set()) is None
    (top / "pkg" / "more").mkdir()
    (top / "pkg" / "more" / "m.py").write_text("m")
    assert blocked(str(top), "pkg", {"pkg/old.py"}) == "pkg is now a directory holding pkg/more/m.py"
    assert blocked(str(top), "pkg", {"pkg/more/m.py", "pkg/old.py"}) is None
    os.symlink(outside, top / "pkg" / "more" / "dirlink")
    assert blocked(str(top), "pkg", {"pkg/more/m.py", "pkg/old.py"}) == \
        "pkg is now a directory holding pkg/more/dirlink"


def test_restore_file_makes_no_folder_outside_before_it_refuses(world):
    """A folder link on the way (swapped in after /undo's plan was checked): the missing folders
    below it are not made in the folder outside either."""
    top, outside, stash, copy = world
    os.symlink(outside, top / "out")
    before = tree_state(outside)
    with pytest.raises(UnsafeWrite, match="resolves outside"):
        restore_file(str(top), "out/new/deeper/x.py", link=False, exe=False, read=lambda: b"x\n")
    assert tree_state(outside) == before and not (outside / "new").exists()
