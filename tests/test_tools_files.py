"""Golden and adversarial tests for tools/workspace.py and tools/files.py (Read, Edit)."""
import os
import shutil
import subprocess
import time

import pytest

from tools import files
from tools.files import edit, read
from tools.workspace import PathOutside, is_inside, resolve


@pytest.fixture
def proj(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("SECRET\n")
    return p


def sentinel_ok(proj):
    out = proj.parent / "outside"
    assert (out / "secret.txt").read_bytes() == b"SECRET\n"
    assert sorted(os.listdir(out)) == ["secret.txt"]


# ------------------------------------------------------------------ Read golden

def test_read_golden(proj):
    (proj / "a.py").write_text("def f():\n    return 1\n")
    assert read(proj, {"file_path": "a.py"}) == "    1→def f():\n    2→    return 1"


def test_read_offset_limit_real_numbers(proj):
    (proj / "n.txt").write_text("".join(f"line{i}\n" for i in range(1, 251)))
    r = read(proj, {"file_path": "n.txt"})
    assert r.split("\n")[0] == "    1→line1" and r.split("\n")[-1] == "  100→line100"
    assert len(r.split("\n")) == 100
    assert read(proj, {"file_path": "n.txt", "offset": "10", "limit": "3"}) == \
        "   11→line11\n   12→line12\n   13→line13"
    assert read(proj, {"file_path": "n.txt", "offset": 248, "limit": 10}) == "  249→line249\n  250→line250"
    assert read(proj, {"file_path": "n.txt", "offset": 250}) == \
        "error: offset 250 is past the end of the file (250 lines)"


def test_read_wide_line_numbers(proj):
    (proj / "w.txt").write_text("x\n" * 123456)
    assert read(proj, {"file_path": "w.txt", "offset": 123455}) == "123456→x"


def test_read_crlf_bom_and_no_trailing_newline(proj):
    (proj / "c.txt").write_bytes(b"\xef\xbb\xbfa\r\nb\r\nc")
    assert read(proj, {"file_path": "c.txt"}) == "    1→a\n    2→b\n    3→c"


def test_read_empty(proj):
    (proj / "e.txt").write_bytes(b"")
    assert read(proj, {"file_path": "e.txt"}) == "(empty file)"


def test_read_errors_golden(proj):
    (proj / "d").mkdir()
    (proj / "bin.dat").write_bytes(b"abc\x00def")
    assert read(proj, {"file_path": "nope.txt"}) == "error: file not found"
    assert read(proj, {"file_path": "d"}) == "error: is a directory"
    assert read(proj, {"file_path": "bin.dat"}) == "error: binary file"
    assert read(proj, {}) == "error: missing argument file_path"


def test_read_non_utf8_replaced(proj):
    (proj / "l.txt").write_bytes(b"caf\xe9\nok\n")
    assert read(proj, {"file_path": "l.txt"}) == "    1→caf\ufffd\n    2→ok"


def test_read_non_utf8_filename(proj):
    name = os.fsencode(str(proj)) + b"/caf\xe9.txt"
    with open(name, "wb") as f:
        f.write(b"hi\n")
    weird = os.fsdecode(b"caf\xe9.txt")
    assert read(proj, {"file_path": weird}) == "    1→hi"
    r = edit(proj, {"file_path": weird, "old_string": "hi", "new_string": "yo"})
    assert r.startswith("caf\ufffd.txt\n")
    r.encode("utf-8")  # no surrogates leak into results


def test_read_long_line_truncated(proj):
    (proj / "long.txt").write_text("a" * 300_000 + "\nb\n")
    r = read(proj, {"file_path": "long.txt"}).split("\n")
    assert r[0] == "    1→" + "a" * files.MAX_LINE_CHARS + " … (line truncated)"
    assert r[1] == "    2→b"


def test_read_huge_sparse_file_pages(proj):
    big = proj / "big.log"
    with open(big, "wb") as f:
        f.write(b"".join(b"row %d\n" % i for i in range(1, 3001)))
        f.truncate(200 * 1024 * 1024)
    assert read(proj, {"file_path": "big.log", "offset": 500, "limit": 2}) == "  501→row 501\n  502→row 502"
    # the 200 MB tail is one NUL-filled "line": streamed in chunks, shown cut
    tail = read(proj, {"file_path": "big.log", "offset": 3000})
    assert tail.startswith(" 3001→\x00") and tail.endswith(" … (line truncated)")


# ------------------------------------------------------------------ bad args never raise

@pytest.mark.parametrize("args,expected", [
    (None, "error: missing argument file_path"),
    ("a.txt", "error: missing argument file_path"),
    ({"file_path": None}, "error: missing argument file_path"),
    ({"file_path": ["a.txt"]}, "error: invalid argument file_path: expected a string"),
    ({"file_path": "a.txt", "offset": "abc"}, "error: invalid argument offset: expected an integer"),
    ({"file_path": "a.txt", "offset": -1}, "error: invalid argument offset: must be at least 0"),
    ({"file_path": "a.txt", "limit": 0}, "error: invalid argument limit: must be at least 1"),
    ({"file_path": "a.txt", "limit": 1.5}, "error: invalid argument limit: expected an integer"),
    ({"file_path": "a.txt", "offset": True}, "error: invalid argument offset: expected an integer"),
    ({"file_path": "a\x00b"}, "error: file not found"),
])
def test_read_bad_args(proj, args, expected):
    (proj / "a.txt").write_text("x\n")
    assert read(proj, args) == expected


@pytest.mark.parametrize("args,expected", [
    (None, "error: missing argument file_path"),
    ({"file_path": "a.txt"}, "error: missing argument new_string"),
    ({"file_path": "a.txt", "old_string": "x", "new_string": None}, "error: missing argument new_string"),
    ({"file_path": 3.0, "new_string": "x"}, "error: invalid argument file_path: expected a string"),
    ({"file_path": "a.txt", "old_string": {"a": 1}, "new_string": "y"},
     "error: invalid argument old_string: expected a string"),
    ({"file_path": "a\x00b", "new_string": "y"}, "error: file not found"),
])
def test_edit_bad_args(proj, args, expected):
    (proj / "a.txt").write_text("x\n")
    assert edit(proj, args) == expected
    assert (proj / "a.txt").read_text() == "x\n"


def test_edit_int_values_accepted(proj):
    (proj / "a.txt").write_text("v = 1\n")
    assert edit(proj, {"file_path": "a.txt", "old_string": 1, "new_string": 2}) == "a.txt\n    1→v = 2"


# ------------------------------------------------------------------ Edit golden

def test_edit_golden_short_file(proj):
    (proj / "a.py").write_text("def f():\n    return 1\n")
    r = edit(proj, {"file_path": "a.py", "old_string": "return 1", "new_string": "return 2"})
    assert r == "a.py\n    1→def f():\n    2→    return 2"
    assert (proj / "a.py").read_text() == "def f():\n    return 2\n"


def test_edit_long_file_shows_region_with_context(proj):
    (proj / "m.txt").write_text("".join(f"l{i}\n" for i in range(1, 101)))
    r = edit(proj, {"file_path": "m.txt", "old_string": "l50\n", "new_string": "A\nB\n"})
    assert r == "m.txt\n" + "\n".join([
        "   46→l46", "   47→l47", "   48→l48", "   49→l49", "   50→A", "   51→B",
        "   52→l51", "   53→l52", "   54→l53", "   55→l54"])


def test_edit_errors_golden(proj):
    (proj / "a.txt").write_text("x x\ny\n")
    (proj / "d").mkdir()
    (proj / "b.bin").write_bytes(b"\x00\x01x")
    assert edit(proj, {"file_path": "a.txt", "old_string": "zz", "new_string": "q"}) == "error: old_string not found"
    assert edit(proj, {"file_path": "a.txt", "old_string": "x", "new_string": "q"}) == \
        "error: old_string is not unique (2 matches, line 1); include more surrounding lines"
    assert edit(proj, {"file_path": "nope.txt", "old_string": "x", "new_string": "q"}) == "error: file not found"
    assert edit(proj, {"file_path": "d", "old_string": "x", "new_string": "q"}) == "error: is a directory"
    assert edit(proj, {"file_path": "b.bin", "old_string": "x", "new_string": "q"}) == "error: binary file"
    assert edit(proj, {"file_path": "a.txt", "new_string": "q"}) == "error: file already exists, use old_string to edit"
    assert edit(proj, {"file_path": "a.txt", "old_string": "", "new_string": "q"}) == \
        "error: file already exists, use old_string to edit"
    assert (proj / "a.txt").read_text() == "x x\ny\n"
    assert (proj / "b.bin").read_bytes() == b"\x00\x01x"


def test_edit_create(proj):
    assert edit(proj, {"file_path": "pkg/new.py", "new_string": "a = 1\nb = 2\n"}) == \
        "pkg/new.py\n    1→a = 1\n    2→b = 2"
    assert (proj / "pkg" / "new.py").read_text() == "a = 1\nb = 2\n"
    assert edit(proj, {"file_path": "empty.txt", "new_string": ""}) == "empty.txt"
    assert (proj / "empty.txt").read_bytes() == b""
    assert not [n for n in os.listdir(proj) if n.startswith(".nanocode-edit-")]


def test_created_file_mode_follows_umask(proj):
    mask = os.umask(0o022)
    try:
        edit(proj, {"file_path": "m.txt", "new_string": "x"})
    finally:
        os.umask(mask)
    assert os.stat(proj / "m.txt").st_mode & 0o777 == 0o644


def test_fifo_not_opened(proj):
    os.mkfifo(proj / "pipe")
    assert read(proj, {"file_path": "pipe"}) == "error: not a regular file"
    assert edit(proj, {"file_path": "pipe", "old_string": "a", "new_string": "b"}) == "error: not a regular file"


def test_edit_preserves_crlf_and_bom(proj):
    (proj / "w.txt").write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree\r\n")
    r = edit(proj, {"file_path": "w.txt", "old_string": "two\nthree", "new_string": "2\n3"})
    assert r == "w.txt\n    1→one\n    2→2\n    3→3"
    assert (proj / "w.txt").read_bytes() == b"\xef\xbb\xbfone\r\n2\r\n3\r\n"


def test_edit_keeps_undecodable_bytes_and_mode(proj):
    f = proj / "l.txt"
    f.write_bytes(b"caf\xe9\nname = 1\n")
    os.chmod(f, 0o751)
    edit(proj, {"file_path": "l.txt", "old_string": "name = 1", "new_string": "name = 2"})
    assert f.read_bytes() == b"caf\xe9\nname = 2\n"
    assert os.stat(f).st_mode & 0o777 == 0o751


def test_edit_strips_line_number_prefixes(proj):
    (proj / "a.py").write_text("def f():\n    return 1\n")
    r = edit(proj, {"file_path": "a.py", "old_string": "    1→def f():\n    2→    return 1",
                    "new_string": "    1→def g():\n    2→    return 1"})
    assert r == "a.py\n    1→def g():\n    2→    return 1"
    assert (proj / "a.py").read_text() == "def g():\n    return 1\n"
    # not every line prefixed: left alone (so not found)
    assert edit(proj, {"file_path": "a.py", "old_string": "    1→def g():\n    return 1",
                       "new_string": "x"}) == \
        "error: old_string not found in a.py; closest lines 1-2, differing at line 1: def g():"
    assert files.strip_prefixes("12→a\n  3→b\n") == "a\nb\n"
    assert files.strip_prefixes("12→a\nb") == "12→a\nb"


def test_edit_literal_arrow_content_preferred(proj):
    (proj / "t.txt").write_text("    7→literal\n")
    edit(proj, {"file_path": "t.txt", "old_string": "    7→literal", "new_string": "    7→changed"})
    assert (proj / "t.txt").read_text() == "    7→changed\n"  # old matched literally: new kept literal


def test_edit_absolute_inside_path_shown_relative(proj):
    (proj / "a.txt").write_text("a\n")
    assert edit(proj, {"file_path": str(proj / "a.txt"), "old_string": "a", "new_string": "b"}) == "a.txt\n    1→b"


def test_edit_huge_sparse_refused_fast(proj):
    with open(proj / "big.txt", "wb") as f:
        f.write(b"x\n" * 5000)
        f.truncate(200 * 1024 * 1024)
    assert edit(proj, {"file_path": "big.txt", "old_string": "x", "new_string": "y"}) == \
        "error: file too large to edit (over 50 MB)"


def test_edit_through_inside_symlink_keeps_link(proj):
    (proj / "real.txt").write_text("a\n")
    os.symlink("real.txt", proj / "link.txt")
    assert edit(proj, {"file_path": "link.txt", "old_string": "a", "new_string": "b"}) == "real.txt\n    1→b"
    assert os.path.islink(proj / "link.txt") and (proj / "real.txt").read_text() == "b\n"


# ------------------------------------------------------------------ adversarial (workspace guard)
# Counted cases: ADVERSARIAL below lists each one.

ADVERSARIAL = [
    "read ../ traversal", "edit ../ traversal (create)", "edit ../ traversal (modify)",
    "read absolute outside", "edit absolute outside", "read via symlink file -> outside",
    "edit via symlink file -> outside", "read via symlinked dir -> outside",
    "create via symlinked dir -> outside", "edit via dangling symlink -> outside",
    "edit absolute path to /etc", "read ~ expansion outside", "root itself is a symlink",
    "read outside allowed with allow_outside", "prefix-sibling dir (project2) not inside",
    "200 MB sparse file paged", "200 MB sparse file edit refused", "FIFO read/edit does not block", "NUL byte in path", "non-UTF-8 file name",
]


def test_traversal_and_absolute(proj):
    out = proj.parent / "outside" / "secret.txt"
    assert read(proj, {"file_path": "../outside/secret.txt"}) == "error: path outside the project"
    assert edit(proj, {"file_path": "../outside/new.txt", "new_string": "x"}) == "error: path outside the project"
    assert edit(proj, {"file_path": "../outside/secret.txt", "old_string": "SECRET", "new_string": "x"}) == \
        "error: path outside the project"
    assert read(proj, {"file_path": str(out)}) == "error: path outside the project"
    assert edit(proj, {"file_path": str(out), "old_string": "SECRET", "new_string": "x"}) == \
        "error: path outside the project"
    assert edit(proj, {"file_path": "/etc/passwd", "old_string": "root", "new_string": "x"}) == \
        "error: path outside the project"
    assert read(proj, {"file_path": "~/.bashrc"}) == "error: path outside the project"
    assert read(proj, {"file_path": "sub/../../outside/secret.txt"}) == "error: path outside the project"
    sentinel_ok(proj)


def test_symlinks_pointing_outside(proj):
    out = proj.parent / "outside"
    os.symlink(out / "secret.txt", proj / "s.txt")
    os.symlink(out, proj / "sdir")
    os.symlink(out / "missing.txt", proj / "dangling.txt")
    assert read(proj, {"file_path": "s.txt"}) == "error: path outside the project"
    assert edit(proj, {"file_path": "s.txt", "old_string": "SECRET", "new_string": "x"}) == \
        "error: path outside the project"
    assert read(proj, {"file_path": "sdir/secret.txt"}) == "error: path outside the project"
    assert edit(proj, {"file_path": "sdir/new.txt", "new_string": "x"}) == "error: path outside the project"
    assert edit(proj, {"file_path": "sdir/deep/new.txt", "new_string": "x"}) == "error: path outside the project"
    assert edit(proj, {"file_path": "dangling.txt", "new_string": "x"}) == "error: path outside the project"
    sentinel_ok(proj)
    assert os.path.islink(proj / "s.txt")


def test_allow_outside_read_only(proj):
    out = proj.parent / "outside" / "secret.txt"
    assert read(proj, {"file_path": str(out)}, allow_outside=True) == "    1→SECRET"
    with pytest.raises(PathOutside):
        resolve(proj, str(out), write=True, allow_outside=True)
    sentinel_ok(proj)


def test_root_is_symlink_and_sibling_prefix(proj, tmp_path):
    os.symlink(proj, tmp_path / "alias")
    (proj / "a.txt").write_text("hi\n")
    assert read(tmp_path / "alias", {"file_path": "a.txt"}) == "    1→hi"
    assert edit(tmp_path / "alias", {"file_path": "a.txt", "old_string": "hi", "new_string": "yo"}) == "a.txt\n    1→yo"
    sib = tmp_path / "project2"
    sib.mkdir()
    (sib / "x.txt").write_text("x\n")
    assert not is_inside(proj, sib / "x.txt")
    assert read(proj, {"file_path": str(sib / "x.txt")}) == "error: path outside the project"
    assert resolve(proj, ".", write=True) == proj.resolve()


def test_adversarial_count():
    assert len(ADVERSARIAL) == 20


# ------------------------------------------------------------------ errors name what to copy
CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def calc_repo(p, git=True):
    if git:
        subprocess.run(["git", "init", "-q", str(p)], check=True)
    (p / "src").mkdir()
    (p / "tests").mkdir()
    (p / "src" / "calc.py").write_text(CALC)
    (p / "tests" / "test_calc.py").write_text("from src.calc import add\n")
    (p / "README.md").write_text("calc\n")
    return p


@needs_git
def test_missing_path_names_closest(proj):
    calc_repo(proj)
    (proj / ".gitignore").write_text("build/\n")
    (proj / "build").mkdir()
    (proj / "build" / "calc.py").write_text("x\n")  # ignored by git: never suggested
    both = " (closest: src/calc.py, tests/test_calc.py)"
    assert read(proj, {"file_path": "calc.py"}) == "error: file not found: calc.py" + both
    assert read(proj, {"file_path": "lib/calc.py"}) == "error: file not found: lib/calc.py" + both
    assert read(proj, {"file_path": str(proj / "src" / "calcs.py")}) == \
        "error: file not found: src/calcs.py (closest: src/calc.py)"
    assert read(proj, {"file_path": "src/Clac.py"}) == "error: file not found: src/Clac.py (closest: src/calc.py)"
    assert edit(proj, {"file_path": "calc.py", "old_string": "a", "new_string": "b"}) == \
        "error: file not found: calc.py" + both
    assert read(proj, {"file_path": "zzzz.txt"}) == "error: file not found"  # nothing close: unchanged
    assert read(proj, {"file_path": "a\x00b"}) == "error: file not found"


def test_missing_path_walk_without_git(proj):
    calc_repo(proj, git=False)
    (proj / "node_modules").mkdir()
    (proj / "node_modules" / "calc.py").write_text("x\n")  # skipped directory
    assert read(proj, {"file_path": "calc.py"}) == \
        "error: file not found: calc.py (closest: src/calc.py, tests/test_calc.py)"


def test_edit_old_string_not_found_names_closest_line(proj):
    calc_repo(proj, git=False)
    r = edit(proj, {"file_path": "src/calc.py", "old_string": "    return a-b", "new_string": "x"})
    assert r == "error: old_string not found in src/calc.py; closest line 6:     return a - b"
    r = edit(proj, {"file_path": "src/calc.py", "old_string": "def sub(a, b):\n    return a-b\n", "new_string": "x"})
    assert r == "error: old_string not found in src/calc.py; closest lines 5-6, differing at line 6:     return a - b"
    r = edit(proj, {"file_path": "src/calc.py", "old_string": "def sub(a,b):\n    return a-b", "new_string": "x"})
    assert r == ("error: old_string not found in src/calc.py; closest lines 5-6, differing at line 5: "
                 "def sub(a, b):; line 6:     return a - b")
    assert edit(proj, {"file_path": "src/calc.py", "old_string": "nothing like it at all", "new_string": "x"}) == \
        "error: old_string not found"
    assert (proj / "src" / "calc.py").read_text() == CALC


def test_edit_closest_line_crlf_and_long_lines_stay_one_short_line(proj):
    (proj / "w.txt").write_bytes(b"alpha = 1\r\nbeta = 2\r\n")
    assert edit(proj, {"file_path": "w.txt", "old_string": "beta = 3", "new_string": "x"}) == \
        "error: old_string not found in w.txt; closest line 2: beta = 2"
    (proj / "long.txt").write_text("y = " + "a" * 1000 + "\n")
    r = edit(proj, {"file_path": "long.txt", "old_string": "y = " + "a" * 999 + "b", "new_string": "x"})
    assert r.startswith("error: old_string not found in long.txt; closest line 1: y = aaa") and r.endswith(" …")
    assert "\n" not in r and len(r) < 400


def test_edit_not_unique_lists_lines(proj):
    calc_repo(proj, git=False)
    assert edit(proj, {"file_path": "src/calc.py", "old_string": "return", "new_string": "x"}) == \
        "error: old_string is not unique (2 matches, lines 2, 6); include more surrounding lines"
    (proj / "m.txt").write_text("k\n" * 8 + "k k\n")
    assert edit(proj, {"file_path": "m.txt", "old_string": "k", "new_string": "x"}) == \
        "error: old_string is not unique (10 matches, lines 1, 2, 3, 4, 5, ...); include more surrounding lines"


@needs_git
def test_hints_deterministic_and_root_relative(tmp_path):
    outs = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        p = calc_repo(tmp_path / name)
        calls = [read(p, {"file_path": "calc.py"}),
                 edit(p, {"file_path": "src/calc.py", "old_string": "return a-b", "new_string": "x"})]
        outs.append(calls + [read(p, {"file_path": "calc.py"})])
    assert outs[0] == outs[1] and outs[0][0] == outs[0][2]
    assert not any(str(tmp_path) in o for o in outs[0])


@needs_git
def test_missing_path_big_project_is_bounded(proj):
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    for i in range(5000):
        d = proj / f"pkg{i % 50}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod_{i}.py").write_text("x\n")
    t = time.perf_counter()
    r = read(proj, {"file_path": "mod_4321.py"})
    assert time.perf_counter() - t < 3.0
    assert r.startswith("error: file not found: mod_4321.py (closest: pkg21/sub2/mod_4321.py, ")


def test_edit_closest_line_huge_file_is_bounded(proj):
    (proj / "big.py").write_text("".join(f"    value_{i} = compute(a, b, {i})\n" for i in range(60000)))
    t = time.perf_counter()
    r = edit(proj, {"file_path": "big.py", "old_string": "    value_17 = compute(a,b, 17)", "new_string": "x"})
    assert time.perf_counter() - t < 3.0
    assert r == "error: old_string not found in big.py; closest line 18:     value_17 = compute(a, b, 17)"


# ------------------------------------------------------------------ caps and descriptor-relative writes

def test_read_is_capped_with_a_note(proj):
    (proj / "n.txt").write_text("".join(f"l{i}\n" for i in range(files.MAX_READ_LINES + 500)))
    r = read(proj, {"file_path": "n.txt", "limit": 10**12}).split("\n")
    assert len(r) == files.MAX_READ_LINES + 1 and r[-2] == f"{files.MAX_READ_LINES:>5}→l{files.MAX_READ_LINES - 1}"
    assert r[-1] == f"[truncated at {files.MAX_READ_LINES} lines: use offset/limit to read on]"
    more = read(proj, {"file_path": "n.txt", "offset": files.MAX_READ_LINES, "limit": 10**12})
    assert more.split("\n")[0] == f"{files.MAX_READ_LINES + 1:>5}→l{files.MAX_READ_LINES}" and "truncated" not in more


def test_edit_leaves_no_temp_files_and_create_never_replaces(proj):
    (proj / "a.txt").write_text("a\n")
    assert edit(proj, {"file_path": "a.txt", "old_string": "a", "new_string": "b"}) == "a.txt\n    1→b"
    assert edit(proj, {"file_path": "a.txt", "new_string": "c"}) == "error: file already exists, use old_string to edit"
    assert edit(proj, {"file_path": "deep/er/n.txt", "new_string": "n\n"}) == "deep/er/n.txt\n    1→n"
    assert (proj / "a.txt").read_text() == "b\n" and (proj / "deep" / "er" / "n.txt").read_text() == "n\n"
    assert not [p for p in proj.rglob(".nanocode-edit-*")]
    sentinel_ok(proj)
