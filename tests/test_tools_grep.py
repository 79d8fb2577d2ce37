"""Golden and adversarial tests for tools/grep.py."""
import functools
import os
import shutil
import subprocess
import time

import pytest

from tools import closest
from tools import grep as grep_mod
from tools.grep import grep


@pytest.fixture
def proj(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("needle SECRET\n")
    return p


def make_tree(p):
    (p / "src").mkdir()
    (p / "src" / "a.py").write_text("import os\n\ndef needle():\n    return 1\n")
    (p / "notes.md").write_text("one\ntwo needle\nthree\nfour\nfive\nsix\nseven needle\n")
    (p / "data.bin").write_bytes(b"needle\x00\x01")
    (p / ".git").mkdir(exist_ok=True)
    (p / ".git" / "config").write_text("needle\n") if not (p / ".git" / "config").exists() else None


def git_init(p):
    subprocess.run(["git", "init", "-q", str(p)], check=True)


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def test_grep_golden_walk(proj):
    make_tree(proj)
    assert grep(proj, {"pattern": r"needle\b"}) == (
        "notes.md:2:two needle\n"
        "notes.md:7:seven needle\n"
        "src/a.py:3:def needle():")


def test_grep_context_golden(proj):
    make_tree(proj)
    assert grep(proj, {"pattern": "needle", "path": "notes.md", "-A": "1", "-B": 1}) == (
        "notes.md-1-one\n"
        "notes.md:2:two needle\n"
        "notes.md-3-three\n"
        "--\n"
        "notes.md-6-six\n"
        "notes.md:7:seven needle")
    # overlapping context windows merge without repeating lines
    assert grep(proj, {"pattern": "t", "path": "notes.md", "-A": 1}) == (
        "notes.md:2:two needle\n"
        "notes.md:3:three\n"
        "notes.md-4-four")


def test_grep_no_matches_and_subdir(proj):
    make_tree(proj)
    assert grep(proj, {"pattern": "zzz"}) == "no matches found"
    assert grep(proj, {"pattern": "return", "path": "src"}) == "src/a.py:4:    return 1"


@pytest.mark.parametrize("args,expected", [
    (None, "error: missing argument pattern"),
    ({}, "error: missing argument pattern"),
    ({"pattern": None}, "error: missing argument pattern"),
    ({"pattern": ["x"]}, "error: invalid argument pattern: expected a string"),
    ({"pattern": "x", "-A": "abc"}, "error: invalid argument -A: expected an integer"),
    ({"pattern": "x", "-B": -2}, "error: invalid argument -B: must be at least 0"),
    ({"pattern": "x", "path": 1.5}, "error: invalid argument path: expected a string"),
    ({"pattern": "x", "path": "nope"}, "error: file not found"),
    ({"pattern": "x", "path": "a\x00"}, "error: file not found"),
    ({"pattern": "(unclosed"}, "error: invalid regex: missing ), unterminated subpattern at position 0"),
])
def test_grep_bad_args(proj, args, expected):
    assert grep(proj, args) == expected


@needs_git
def test_grep_respects_gitignore_in_repo(proj):
    git_init(proj)
    make_tree(proj)
    (proj / ".gitignore").write_text("build/\n*.log\n")
    (proj / "build").mkdir()
    (proj / "build" / "out.py").write_text("needle\n")
    (proj / "run.log").write_text("needle\n")
    r = grep(proj, {"pattern": "needle"})
    assert r == ("notes.md:2:two needle\nnotes.md:7:seven needle\nsrc/a.py:3:def needle():")
    # searching from a subdirectory still gives root-relative paths
    assert grep(proj, {"pattern": "needle", "path": "src"}) == "src/a.py:3:def needle():"


@needs_git
def test_grep_git_mode_skips_tracked_symlink_outside(proj):
    git_init(proj)
    (proj / "a.txt").write_text("needle\n")
    os.symlink(proj.parent / "outside" / "secret.txt", proj / "s.txt")
    os.symlink(proj.parent / "outside", proj / "sdir")
    assert grep(proj, {"pattern": "needle"}) == "a.txt:1:needle"


def test_grep_gitignore_fallback_walk(proj, monkeypatch):
    monkeypatch.setattr(grep_mod, "_git_files", lambda d: None)
    make_tree(proj)
    (proj / ".gitignore").write_text("# c\nbuild/\n*.log\n/top.txt\n")
    (proj / "build").mkdir()
    (proj / "build" / "out.py").write_text("needle\n")
    (proj / "run.log").write_text("needle\n")
    (proj / "top.txt").write_text("needle\n")
    (proj / "node_modules").mkdir()
    (proj / "node_modules" / "m.js").write_text("needle\n")
    assert grep(proj, {"pattern": "needle"}) == (
        "notes.md:2:two needle\nnotes.md:7:seven needle\nsrc/a.py:3:def needle():")


def test_grep_cap(proj):
    (proj / "many.txt").write_text("hit\n" * 250)
    lines = grep(proj, {"pattern": "hit"}).split("\n")
    assert len(lines) == grep_mod.MAX_MATCHES + 1
    assert lines[0] == "many.txt:1:hit" and lines[-2] == "many.txt:200:hit"
    assert lines[-1] == "... (50 more matches not shown)"


def test_grep_non_utf8_content_and_names(proj):
    """Undecodable content shows as U+FFFD; a file whose name is not UTF-8 is not listed (Read
    could not be given that name back) and the output says one was skipped."""
    (proj / "latin.txt").write_bytes(b"caf\xe9 needle\n")
    with open(os.fsencode(str(proj)) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"needle\n")
    r = grep(proj, {"pattern": "needle"})
    assert r == "latin.txt:1:caf\ufffd needle\n(not searched: 1 file whose name is not UTF-8; " \
        "rename them to search them)"
    r.encode("utf-8")


# ------------------------------------------------------------------ adversarial
ADVERSARIAL = ["path ../ traversal", "absolute path outside", "symlinked file -> outside skipped",
               "symlinked dir -> outside not followed", "git mode symlinks -> outside skipped", "path through symlinked dir refused",
               "200 MB sparse file skipped", "binary file skipped", ".git skipped",
               "long-line regex scan not hanging", "FIFO skipped without blocking"]


def test_grep_outside_refused_and_symlinks(proj):
    make_tree(proj)
    out = proj.parent / "outside"
    os.symlink(out / "secret.txt", proj / "s.txt")
    os.symlink(out, proj / "sdir")
    assert grep(proj, {"pattern": "needle", "path": "../outside"}) == "error: path outside the project"
    assert grep(proj, {"pattern": "needle", "path": str(out)}) == "error: path outside the project"
    assert grep(proj, {"pattern": "needle", "path": "sdir"}) == "error: path outside the project"
    assert "SECRET" not in grep(proj, {"pattern": "needle"})
    assert grep(proj, {"pattern": "SECRET"}) == "no matches found"
    assert grep(proj, {"pattern": "SECRET", "path": str(out)}, allow_outside=True) == \
        f"{out / 'secret.txt'}:1:needle SECRET"
    assert (out / "secret.txt").read_text() == "needle SECRET\n"


def test_grep_skips_huge_binary_and_git(proj):
    make_tree(proj)
    with open(proj / "big.txt", "wb") as f:
        f.write(b"needle\n")
        f.truncate(200 * 1024 * 1024)
    (proj / "mid.txt").write_bytes(b"needle\n" + b"x" * (grep_mod.MAX_FILE_BYTES))
    r = grep(proj, {"pattern": "needle"})
    *matches, note = r.splitlines()  # the huge files are not searched, and the last line says so
    assert not any(n in m for m in matches for n in ("big.txt", "mid.txt", "data.bin", ".git"))
    assert note.startswith("(not searched, over the 5 MB limit: big.txt (200.0 MB), mid.txt")


def test_grep_regex_linear_enough(proj):
    (proj / "a.txt").write_text("a" * 5000 + "\n")
    assert grep(proj, {"pattern": "a+b"}) == "no matches found"


def test_grep_fifo_skipped(proj):
    (proj / "a.txt").write_text("needle\n")
    os.mkfifo(proj / "pipe")
    assert grep(proj, {"pattern": "needle"}) == "a.txt:1:needle"


def test_adversarial_count():
    assert len(ADVERSARIAL) == 11


# ripgrep and Python give the same bytes ------------------------------------------------------------
needs_rg = pytest.mark.skipif(grep_mod._rg_path() is None, reason="rg not installed")

PARITY = [
    {"pattern": "needle"},
    {"pattern": r"needle\b", "-A": 1},
    {"pattern": "t", "path": "notes.md", "-A": 1, "-B": 2},
    {"pattern": "^def ", "-B": 1},
    {"pattern": "(?i)NEEDLE$"},
    {"pattern": r"\d+"},
    {"pattern": "é"},
    {"pattern": ""},
    {"pattern": "crlf$"},
    {"pattern": "x", "-A": 5},
    {"pattern": "nomatch"},
    {"pattern": "[e&&d]"},  # a set operation to rg, three characters to Python: Python answers
]


def parity_tree(p):
    make_tree(p)
    (p / "crlf.txt").write_bytes(b"one crlf\r\ntwo\r\nthree crlf\r\n")
    (p / "bom.txt").write_bytes(b"\xef\xbb\xbfneedle first\nsecond 42\n")
    (p / "latin.txt").write_bytes(b"caf\xe9 needle\nx\n")
    (p / "uni.txt").write_text("résumé needle\n" + "x\n" * 3 + "x needle\n" * 300)
    (p / "long.txt").write_text("needle " + "y" * 5000 + "\n")
    (p / "noeol.txt").write_text("last needle")


@needs_rg
@pytest.mark.parametrize("args", PARITY, ids=[repr(a) for a in PARITY])
def test_grep_rg_matches_python_byte_for_byte(proj, args):
    parity_tree(proj)
    assert grep(proj, args, use_rg=True) == grep(proj, args, use_rg=False)


@needs_rg
def test_grep_rg_used_and_falls_back(proj):
    parity_tree(proj)
    notes = str(proj / "notes.md")
    fd = os.open(notes, os.O_RDONLY)
    try:
        rg = functools.partial(grep_mod._rg_search, fds={notes: fd}, before=0, after=0,
                               deadline=time.monotonic() + 20)
        hits = rg("needle")
        assert hits is not None and list(hits) == [notes]  # rg read /dev/fd/N, mapped back
        # rg has no lookbehind: the Python engine answers, with the same format
        assert rg("(?<=two )needle") is None
        assert rg("[e&&d]") is None
    finally:
        os.close(fd)
    assert grep(proj, {"pattern": "(?<=two )needle"}) == "notes.md:2:two needle"


# ------------------------------------------------------------------ no matches names what to copy
def names_tree(p):
    (p / "src").mkdir()
    (p / "src" / "merge.py").write_text("def merge_obsidian(x):\n    return x\n\n\ndef merge_all(xs):\n"
                                        "    return [merge_obsidian(x) for x in xs]\n")
    (p / "docs").mkdir()
    (p / "docs" / "notes.md").write_text("merge_everything later\n")


@pytest.mark.parametrize("use_rg", [True, False])
def test_grep_no_matches_names_closest_identifiers(proj, use_rg):
    names_tree(proj)
    both = "no matches found (closest names: merge_obsidian, merge_all)"
    assert grep(proj, {"pattern": r"def merge_obsidan\(", "path": "src"}, use_rg=use_rg) == both
    assert grep(proj, {"pattern": r"\bmerge_al\b", "path": "src"}, use_rg=use_rg) == \
        "no matches found (closest names: merge_all, merge_obsidian)"
    assert grep(proj, {"pattern": "(?i)MERGE_OBSIDIANS"}, use_rg=use_rg) == \
        "no matches found (closest names: merge_obsidian)"
    # only the searched files give names; every identifier present, or nothing close: unchanged
    assert grep(proj, {"pattern": r"merge_everythin\b"}, use_rg=use_rg) == \
        "no matches found (closest names: merge_everything)"
    assert grep(proj, {"pattern": r"merge_everythin\b", "path": "src"}, use_rg=use_rg) == "no matches found"
    assert grep(proj, {"pattern": "merge_all.*merge_everything"}, use_rg=use_rg) == "no matches found"
    assert grep(proj, {"pattern": "[a-z]+zzqqxx"}, use_rg=use_rg) == "no matches found"
    assert grep(proj, {"pattern": r"\d{3}"}, use_rg=use_rg) == "no matches found"


def test_grep_missing_path_names_closest(proj):
    names_tree(proj)
    assert grep(proj, {"pattern": "x", "path": "srcs"}) == "error: file not found: srcs (closest: src)"
    assert grep(proj, {"pattern": "x", "path": "src/merg.py"}) == \
        "error: file not found: src/merg.py (closest: src/merge.py)"
    assert grep(proj, {"pattern": "x", "path": "zzz"}) == "error: file not found"


def test_grep_names_deterministic_and_bounded(proj, monkeypatch):
    names_tree(proj)
    args = {"pattern": r"def merge_obsidan\("}
    assert grep(proj, args) == grep(proj, args)
    (proj / "zz.py").write_text("merge_obsidiam = 1\n")  # searched after src/: past a 2-file bound
    monkeypatch.setattr(closest, "SCAN_FILES", 2)
    assert grep(proj, args) == "no matches found (closest names: merge_obsidian, merge_all)"
    monkeypatch.setattr(closest, "SCAN_FILES", 3)
    assert grep(proj, args) == "no matches found (closest names: merge_obsidian, merge_obsidiam, merge_all)"


# output bounds: context arguments, bytes and lines ---------------------------------------------------
@pytest.mark.parametrize("use_rg", [True, False])
def test_grep_huge_context_is_capped(proj, use_rg):
    (proj / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)) + "needle\n"
                                  + "".join(f"tail {i}\n" for i in range(5000)))
    out = grep(proj, {"pattern": "needle", "-A": 10 ** 9, "-B": 10 ** 9}, use_rg=use_rg)
    lines = out.split("\n")
    assert len(lines) == 2 * grep_mod.MAX_CONTEXT + 1
    assert lines[0] == f"big.txt-{5000 - grep_mod.MAX_CONTEXT + 1}-line {5000 - grep_mod.MAX_CONTEXT}"
    assert lines[grep_mod.MAX_CONTEXT] == "big.txt:5001:needle"


@pytest.mark.parametrize("use_rg", [True, False])
def test_grep_output_bytes_capped_with_note(proj, use_rg):
    (proj / "wide.txt").write_text(("needle " + "w" * 1900 + "\n") * 150)
    out = grep(proj, {"pattern": "needle"}, use_rg=use_rg)
    body, note = out.rsplit("\n", 1)
    assert len(body.encode()) <= grep_mod.MAX_OUTPUT_BYTES
    shown = body.count("\n") + 1
    assert shown == grep_mod.MAX_OUTPUT_BYTES // 1921 and body.endswith("w" * 1900)
    assert note == f"... ({150 - shown} more matches not shown)"


@pytest.mark.parametrize("use_rg", [True, False])
def test_grep_output_lines_capped_with_context(proj, use_rg):
    (proj / "ctx.txt").write_text("".join(("hit\n" if i % 10 == 0 else "x\n") for i in range(1900)))
    out = grep(proj, {"pattern": "hit", "-A": 8}, use_rg=use_rg)
    lines = out.split("\n")
    # 50 groups of 9 lines + 49 `--` = 499 lines: the next `--` and its line would make 501
    assert len(lines) == grep_mod.MAX_OUTPUT_LINES
    shown = sum(1 for l in lines if l.startswith("ctx.txt:"))
    assert shown == 50 and lines[-2] == "ctx.txt-499-x"
    assert lines[-1] == f"... ({190 - shown} more matches not shown)"
    assert len(out) < grep_mod.MAX_OUTPUT_BYTES + 100


def test_grep_caps_are_named_once():
    src = open(grep_mod.__file__).read()
    for name in ("MAX_CONTEXT", "MAX_OUTPUT_BYTES", "MAX_OUTPUT_LINES"):
        assert src.count(f"{name} = ") == 1


@pytest.mark.parametrize("use_rg", [True, False])
def test_grep_says_which_files_were_too_big(proj, use_rg):
    """A file over the size cap is never a silent `no matches found`: the output names it and
    says how to search it; matches elsewhere are still shown."""
    (proj / "big.log").write_text("needle here\n" + ("x" * 80 + "\n") * (grep_mod.MAX_FILE_BYTES // 81 + 10))
    out = grep(proj, {"pattern": "needle"}, use_rg=use_rg)
    assert out.startswith("no matches found") and "big.log (5.0 MB)" in out, out
    assert "over the 5 MB limit" in out and "grep -n" in out
    (proj / "small.py").write_text("needle = 1\n")
    out = grep(proj, {"pattern": "needle"}, use_rg=use_rg)
    assert out.splitlines()[0] == "small.py:1:needle = 1" and "big.log" in out.splitlines()[-1]
    assert "not searched" not in grep(proj, {"pattern": "needle", "path": "small.py"}, use_rg=use_rg)
