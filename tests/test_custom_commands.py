"""agent/custom_commands.py alone, with real files in tmp_path: commands found in the project's
and the user's folders, the prompt `$ARGUMENTS` makes, front matter, and the odd or hostile
files a cloned repository can hold (a link out, a huge file, bad UTF-8, a FIFO, a folder named
like a command, a name that would shadow a built-in) skipped or read safely."""
import os

import pytest

from agent.commands import ALIASES, BY_NAME, custom
from agent.custom_commands import MAX_BYTES, CustomCommand, custom_commands


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """(project root, its commands folder, the user's commands folder), both folders made."""
    home = tmp_path / "home"
    monkeypatch.setenv("NANOCODE_HOME", str(home))
    root = tmp_path / "proj"
    project, user = root / ".nanocode" / "commands", home / "commands"
    project.mkdir(parents=True)
    user.mkdir(parents=True)
    return root, project, user


def test_project_and_user_commands_are_found_the_project_winning(dirs):
    root, project, user = dirs
    (user / "review.md").write_text("User review of $ARGUMENTS.\n")
    (user / "todo.md").write_text("List the TODOs.\n")
    (project / "review.md").write_text("Project review of $ARGUMENTS.\n")
    found = custom_commands(root, set())
    assert list(found) == ["/review", "/todo"]
    assert found["/review"].body == "Project review of $ARGUMENTS."
    assert found["/review"].source == str(project / "review.md")
    assert found["/todo"].source == str(user / "todo.md")


def test_arguments_fill_the_placeholder_or_follow_the_text():
    with_place = CustomCommand("/r", "", "Review $ARGUMENTS, then $ARGUMENTS again.", "f")
    assert with_place.prompt("a.py") == "Review a.py, then a.py again."
    assert with_place.prompt("") == "Review , then  again."
    plain = CustomCommand("/t", "", "List the TODOs.", "f")
    assert plain.prompt("in src/") == "List the TODOs.\n\nin src/"
    assert plain.prompt("") == "List the TODOs."


def test_front_matter_gives_the_description_else_the_first_line(dirs):
    root, project, _ = dirs
    (project / "review.md").write_text("---\ndescription: review a file for bugs\nother: x\n---\n"
                                       "Review $ARGUMENTS for bugs.\n")
    (project / "plain.md").write_text("\n\n" + "Say hello. " * 20 + "\nSecond line.\n")
    (project / "open.md").write_text("---\ndescription: never closed\nBody.\n")
    found = custom_commands(root, set())
    assert found["/review"].description == "review a file for bugs"
    assert found["/review"].body == "Review $ARGUMENTS for bugs."
    assert found["/plain"].description == ("Say hello. " * 20)[:70]
    assert found["/open"].body.startswith("---\ndescription")  # no closing line: all body


def test_names_and_built_ins(dirs):
    """Only NAME.md with a name of letters, digits, - and _ counts; no custom command takes a
    built-in's name or alias (agent/commands.custom passes them as reserved)."""
    root, project, _ = dirs
    for name in ["help.md", "exit.md", "ok-1_x.md", "-dash.md", "sp ace.md", "dot.x.md", "notes.txt",
                 ".hidden.md", "ünï.md"]:
        (project / name).write_text("Text.\n")
    assert sorted(custom_commands(root, set())) == ["/exit", "/help", "/ok-1_x"]
    assert list(custom(root)) == ["/ok-1_x"]
    assert "/help" in BY_NAME and "/exit" in BY_NAME.keys() | ALIASES.keys()


def test_hostile_and_odd_files_are_skipped_or_read_safely(dirs, tmp_path):
    root, project, _ = dirs
    secret = tmp_path / "secret.md"
    secret.write_text("the user's private notes\n")
    (project / "leak.md").symlink_to(secret)  # a link out of the project
    (project / "huge.md").write_bytes(b"x" * (MAX_BYTES + 1))
    (project / "edge.md").write_bytes(b"y" * MAX_BYTES)
    (project / "latin.md").write_bytes(b"caf\xe9 $ARGUMENTS\n")
    (project / "blank.md").write_text("  \n\n")
    (project / "dir.md").mkdir()  # git keeps a folder that holds a file: a clone can have this
    (project / "dir.md" / "x").write_text("x")
    os.mkfifo(project / "pipe.md")  # opened without blocking, then passed over
    inside = root / "inside.txt"
    inside.write_text("Shared text.\n")
    (project / "linked.md").symlink_to(inside)  # a link within the project is read
    fds = len(os.listdir("/proc/self/fd"))
    found = custom_commands(root, set())
    assert len(os.listdir("/proc/self/fd")) == fds  # every file opened was closed
    assert sorted(found) == ["/edge", "/latin", "/linked"]
    assert found["/latin"].prompt("x") == "caf\ufffd x"
    assert found["/linked"].body == "Shared text."


def test_a_commands_folder_linked_out_of_the_project_is_not_read(dirs, tmp_path):
    root, project, _ = dirs
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "steal.md").write_text("Outside.\n")
    project.rmdir()
    project.symlink_to(elsewhere)
    assert custom_commands(root, set()) == {}


def test_no_folders_no_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "nohome"))
    (tmp_path / "proj").mkdir()
    assert custom_commands(tmp_path / "proj", set()) == {}
    (tmp_path / "proj" / ".nanocode").mkdir()
    (tmp_path / "proj" / ".nanocode" / "commands").write_text("a file, not a folder")
    assert custom_commands(tmp_path / "proj", set()) == {}
