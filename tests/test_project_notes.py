"""agent/project_notes.py (/init) on its own, on real project folders: the starter AGENTS.md read off
the project (name, README paragraph, layout without ignored files, test commands, languages), its
fallbacks and caps, hostile files that are never read (a README linked outside, a FIFO, a folder),
and write_starter_notes, which creates AGENTS.md once and never overwrites or writes through a
memory file that is there (a dangling link to outside included)."""
import json
import os
import subprocess

import pytest

from agent.project_notes import MAX_LISTED, starter_notes, write_starter_notes

README = "# Widgets\n\n[![ci](https://ci/badge.svg)](https://ci)\n\nWidgets   makes\nsmall things.\n\nMore.\n"


def git_init(root):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(git + cmd, check=True, capture_output=True)


def write(root, files: dict):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    write(root, {"pyproject.toml": '[project]\nname = "widgets"\n', "README.md": README,
                 "package.json": json.dumps({"name": "js-name", "scripts": {"test": "jest"}}),
                 "Makefile": "build:\n\techo\ntest:\n\tpytest\n", "src/app.py": "", "src/util.py": "",
                 "src/web.js": "", "tests/test_app.py": "", "docs/guide.md": "",
                 ".gitignore": "build/\n*.log\n", "build/out.py": "", "build/more.py": "", "debug.log": ""})
    git_init(root)
    return root


def test_starter_notes_are_read_off_the_project(project):
    assert starter_notes(project) == """# AGENTS.md

Notes for coding agents in this project (nanocode puts this file in its system prompt; edit it: \
conventions, what not to touch).

## widgets

Widgets makes small things.

## Layout
- src/ (3 files)
- docs/ (1 files)
- tests/ (1 files)
- .gitignore
- Makefile
- README.md
- package.json
- pyproject.toml

## Commands
- run the tests: `python -m pytest -q`
- run the tests: `npm test`
- run the tests: `make test`

## Languages
- Python (3 files), JavaScript (1 files)
"""  # build/ and debug.log are ignored: not listed, not counted


def test_the_name_falls_back_to_package_json_then_the_folder(tmp_path):
    root = tmp_path / "shop"
    write(root, {"package.json": json.dumps({"name": "shop-js", "scripts": {"build": "x"}})})
    notes = starter_notes(root)
    assert "## shop-js\n" in notes and "## Commands" not in notes  # no test script
    for bad in ("[1, 2]", "{not json", json.dumps({"name": None})):
        (root / "package.json").write_text(bad)
        assert "## shop\n" in starter_notes(root)


def test_the_readme_paragraph_is_the_first_prose_one_cut_at_300(tmp_path):
    root = tmp_path / "p"
    write(root, {"README.rst": "=====\nTitle\n=====\n\n" + "word " * 100 + "\n"})
    about = starter_notes(root).split("\n\n")[3]
    assert len(about) == 300 and about.endswith("...") and about.startswith("word word")
    (root / "README.rst").write_text("# only a heading\n\n<img src=x>\n")
    assert starter_notes(root).split("\n\n")[3] == "## Layout\n- README.rst\n"  # no paragraph


def test_the_layout_is_capped_and_a_walk_skips_caches(tmp_path):
    root = tmp_path / "big"  # no git: the walk lists it
    write(root, {f"d{i:02}/f.py": "" for i in range(MAX_LISTED + 3)})
    write(root, {f"t{i:02}.txt": "" for i in range(MAX_LISTED + 3)})
    write(root, {"node_modules/x/index.js": "", "d00/more.py": ""})
    notes = starter_notes(root)
    layout = notes.split("## Layout\n")[1].split("\n\n")[0].splitlines()
    assert layout[0] == "- d00/ (2 files)" and len(layout) == 2 * MAX_LISTED
    assert "node_modules" not in notes and "JavaScript" not in notes
    assert f"Python ({MAX_LISTED + 4} files)" in notes


def test_hostile_files_are_never_read(tmp_path):
    root, outside = tmp_path / "proj", tmp_path / "outside"
    write(outside, {"secret.md": "the outside secret paragraph\n"})
    root.mkdir()
    os.symlink(outside / "secret.md", root / "README.md")
    os.mkfifo(root / "pyproject.toml")  # opening it for reading would wait for a writer forever
    (root / "Makefile").write_bytes(b"\xff\xfe test:\n")
    notes = starter_notes(root)
    assert "secret" not in notes and "## proj\n" in notes and "make test" not in notes


def test_write_starter_notes_creates_agents_md_once(project):
    want = starter_notes(project)
    message = write_starter_notes(project)
    text = (project / "AGENTS.md").read_text()
    assert text == want
    assert message.startswith(f"wrote {project / 'AGENTS.md'} ({len(text.splitlines())} lines)")
    assert message.endswith("\n\n" + text)
    (project / "AGENTS.md").write_text("my own conventions\n")
    assert write_starter_notes(project) == \
        "AGENTS.md exists already: edit it (/init never overwrites a memory file)"
    assert (project / "AGENTS.md").read_text() == "my own conventions\n"


def test_write_starter_notes_leaves_any_memory_file_alone(tmp_path):
    root, outside = tmp_path / "proj", tmp_path / "outside"
    write(root, {"NANOCODE.md": "notes\n", "a.py": ""})
    outside.mkdir()
    assert write_starter_notes(root).startswith("NANOCODE.md exists already")
    assert not (root / "AGENTS.md").exists()
    (root / "NANOCODE.md").unlink()
    os.symlink(outside / "planted.md", root / "AGENTS.md")  # dangling, leading out
    assert write_starter_notes(root).startswith("AGENTS.md exists already")
    assert os.listdir(outside) == [] and os.path.islink(root / "AGENTS.md")


def test_an_agents_md_made_meanwhile_is_not_overwritten(project, monkeypatch):
    """The user (or another agent) writes AGENTS.md while /init reads the project: the create fails
    (O_EXCL) and says so; their file keeps its bytes."""
    from agent import project_notes

    def read_while_the_user_writes(root):
        (project / "AGENTS.md").write_text("written meanwhile\n")
        return "starter\n"
    monkeypatch.setattr(project_notes, "starter_notes", read_while_the_user_writes)
    assert write_starter_notes(project).startswith("could not create AGENTS.md: ")
    assert (project / "AGENTS.md").read_text() == "written meanwhile\n"


def test_a_folder_where_a_file_is_read_is_no_crash(tmp_path):
    """A project with a folder named README.md, package.json, pyproject.toml or Makefile: /init
    reads none of them and still writes its notes (it raised IsADirectoryError)."""
    root = tmp_path / "odd"
    write(root, {f"{name}/x.txt": "" for name in ("README.md", "package.json", "pyproject.toml", "Makefile")})
    notes = starter_notes(root)
    assert "## odd\n" in notes and "- README.md/ (1 files)" in notes and "## Commands" not in notes
    assert write_starter_notes(root).startswith("wrote ")


@pytest.mark.parametrize("readme", ["README.md", "README.rst"])
def test_an_underlined_title_is_no_paragraph(tmp_path, readme):
    """A setext (Markdown) or reStructuredText title, a line underlined with = or -, is a heading:
    the paragraph is the prose after it, not "Widgets =======" (as it was)."""
    root = tmp_path / "p"
    write(root, {readme: "Widgets\n=======\n\nSmall widgets.\n\nUsage\n-----\nmore\n"})
    assert starter_notes(root).split("\n\n")[3] == "Small widgets."
    (root / readme).write_text("Widgets\n-------\nSmall widgets, right below.\n")
    assert starter_notes(root).split("\n\n")[3] == "Small widgets, right below."
