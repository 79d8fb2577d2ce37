"""The grounded tool-call grammar (agent/masks/grammar.py over agent/masks/grounding.py) with real tokenizers,
real git repos and the real tools: random walks through the mask (seeded numpy RNG, stop tokens
boosted) only ever write calls the project backs, checked by running them and looking at the disk;
every valid call is admitted whatever the tokenizer split (canonical, byte by byte, random)."""

import glob
import os
import re
import subprocess
import sysconfig
import time

import numpy as np
import pytest

import agent.masks.grounding as grounding
from agent.masks.grammar import PATTERN_BYTES, Grammar
from agent.masks.grounding import MAX_PATHS, NAME_BYTES, Grounding
from grammar_walks import admits, calls, ident_runs, prefix, sp, words_of, write_files
from nanocode.protocol import MODE_TOOLS, TOOLS
from nanocode.tokenizer import train_tokenizer
from tiny_models import commit_all, tiny_tokenizer
from tools.dispatch import run_tool
from tools.files import strip_prefixes

APP = "def main():\n    return add(1, 2)\n\n\ndef add(a, b):\n    return a + b\n\n\nprint(main())\n"
UTIL = ('"""Helpers."""\n\n\ndef clamp(value, low, high):\n    return max(low, min(high, value))\n\n\n'
        'def mean(values):\n    return sum(values) / len(values)\n')
FILES = {
    "src/app.py": APP,
    "src/util.py": UTIL,
    "docs/my notes.md": "# notes\nthe café opens at 9\nthe café closes at 5\n",
    "données/résumé.txt": "résumé: naïve façade\n",
    "a.b.c/x.y.z": "dots.in.names = True\n",
    "crlf.txt": "first line\r\nsecond line\r\n",
    "README.md": "# demo\nrun `python -m src.app`\n",
    "empty.txt": "",
    ".gitignore": "build/\n",
}
BINARY = {"logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"}
UNTRACKED = {"notes.txt": "todo: rename clamp\n"}
IGNORED = {"build/out.log": "built ok\n"}
TEXT_FILES = sorted(set(FILES) | set(UNTRACKED))  # what Read may name (binary files are left out)
EDITABLE = sorted(set(TEXT_FILES) - {"empty.txt"})
DIRS = ["a.b.c", "docs", "données", "src"]
TEXTS = list(FILES.values()) * 3 + [
    " ".join(FILES) + " " + " ".join(DIRS),
    "let me read the file. the tests pass. fixing the bug now. done: it works.",
    "file_path old_string new_string pattern command offset limit Read Edit Grep Bash",
    "python -m pytest -q src tests def main(): return add(a, b) résumé façade café",
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 1024)


@pytest.fixture(scope="module")
def g(tok):
    return Grammar(tok, tok.vocab_size + 53)  # a model pads its logits: padded ids never allowed


@pytest.fixture(scope="module")
def tok32k():
    stdlib = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    texts = [open(f, encoding="utf-8", errors="replace").read() for f in stdlib]
    tok = train_tokenizer(iter(texts + TEXTS), 32768)
    assert tok.vocab_size == 32768
    return tok


@pytest.fixture
def project(tmp_path):
    root = str(tmp_path / "proj")
    os.makedirs(root)
    write_files(root, {**FILES, **BINARY})
    commit_all(root)
    write_files(root, {**UNTRACKED, **IGNORED})
    return root


# ---- paths -------------------------------------------------------------------------------------
def test_read_samples_only_existing_text_files(g, tok, project):
    ground, rng, seen = Grounding(project), np.random.default_rng(0), set()
    for c, _ in calls(g, tok, ground, rng, 150, tools=("Read",)):
        path = c["args"]["file_path"]
        assert path in TEXT_FILES, path
        result = run_tool(project, "Read", c["args"])
        assert not re.match(r"error: (file not found|is a directory|binary file)", result), (c, result)
        seen.add(path)
    assert {"docs/my notes.md", "données/résumé.txt", "a.b.c/x.y.z"} <= seen, seen
    assert ground.notes == []


def test_every_valid_call_is_admitted_under_any_split(g, tok, project):
    """What `train synth` renders (tok.encode_tool_call of a valid call) must be admissible, and
    so must every other split of the same bytes."""
    ground, rng = Grounding(project), np.random.default_rng(1)
    ground.add_text("the build log is build/out.log")
    valid = [("Read", {"file_path": p}) for p in TEXT_FILES + ["build/out.log"]] + [
        ("Read", {"file_path": "src/app.py", "offset": 2, "limit": 10}),
        ("Read", {"file_path": "docs/my notes.md", "limit": 1}),
        ("Edit", {"file_path": "src/app.py", "old_string": "return a + b", "new_string": "return b + a"}),
        ("Edit", {"file_path": "docs/my notes.md", "old_string": "opens", "new_string": "opens daily"}),
        ("Edit", {"file_path": "données/résumé.txt", "old_string": "naïve", "new_string": "naive"}),
        ("Edit", {"file_path": "crlf.txt", "old_string": "first line\nsecond", "new_string": "1\n2"}),
        ("Edit", {"file_path": "a.b.c/x.y.z", "old_string": "dots.in.names = True\n", "new_string": ""}),
        ("Edit", {"file_path": "src/new_module.py", "new_string": "X = 1\n"}),
        ("Edit", {"file_path": "données/nouveau.txt", "new_string": "oui\n"}),
        ("Edit", {"file_path": "tests_new.py", "new_string": "def test():\n    pass\n"}),
        ("Edit", {"file_path": "src/" + "n" * (NAME_BYTES - 3) + ".py", "new_string": "x"}),
        ("Grep", {"pattern": "def main"}),
        ("Grep", {"pattern": r"def add\(", "path": "src"}),
        ("Grep", {"pattern": r"\bclamp\b", "path": "src/", "-A": 2, "-B": 0}),
        ("Grep", {"pattern": "caf", "path": "docs/my notes.md"}),
        ("Grep", {"pattern": r"[a-b]+\s*=\s*\d+", "path": "."}),  # runs close at whole words
        ("Grep", {"pattern": "build", "path": "build/out.log"}),
        ("Grep", {"pattern": "." * PATTERN_BYTES}),
        ("Bash", {"command": "ls src"}),
    ]
    for name, args in valid:
        assert admits(g, tok, ground, rng, name, **args), (name, args)
        result = run_tool(project, name, args)
        assert not result.startswith("error"), (name, args, result)
        if name in ("Edit", "Bash"):
            ground.refresh()


def test_invented_arguments_are_not_admitted(g, tok, project):
    ground, rng = Grounding(project), np.random.default_rng(2)
    invalid = [
        ("Read", {"file_path": "src/missing.py"}),
        ("Read", {"file_path": "src"}),  # a directory
        ("Read", {"file_path": "logo.png"}),  # binary
        ("Read", {"file_path": "build/out.log"}),  # ignored and never mentioned
        ("Read", {"file_path": "src/app.py", "limit": 0}),
        ("Edit", {"file_path": "logo.png", "old_string": "PNG", "new_string": "JPG"}),
        ("Edit", {"file_path": "empty.txt", "old_string": "x", "new_string": "y"}),
        ("Edit", {"file_path": "src/app.py", "old_string": "return a - b", "new_string": "x"}),
        ("Edit", {"file_path": "src/app.py", "old_string": "return", "new_string": "x"}),  # not unique
        ("Edit", {"file_path": "src/app.py", "old_string": "", "new_string": "x"}),
        ("Edit", {"file_path": "src/app.py", "new_string": "x"}),  # exists: old_string first
        ("Edit", {"file_path": "crlf.txt", "old_string": "first line\r\n", "new_string": "x"}),  # read as LF
        ("Edit", {"file_path": "nodir/new.py", "new_string": "x"}),  # no such directory
        ("Edit", {"file_path": "src/deep/new.py", "new_string": "x"}),
        ("Edit", {"file_path": "src", "new_string": "x"}),  # a directory
        ("Edit", {"file_path": "src/my file.py", "new_string": "x"}),  # new names: NAME_CHARS only
        ("Edit", {"file_path": "src/..", "new_string": "x"}),
        ("Edit", {"file_path": "build/new.txt", "new_string": "x"}),  # ignored directory, unseen
        ("Edit", {"file_path": "n" * (NAME_BYTES + 1), "new_string": "x"}),
        ("Grep", {"pattern": "qqqq"}),
        ("Grep", {"pattern": "def mane"}),
        ("Grep", {"pattern": ""}),
        ("Grep", {"pattern": "main\\"}),  # a dangling escape
        ("Grep", {"pattern": "." * (PATTERN_BYTES + 1)}),
        ("Grep", {"pattern": "main", "path": "lib"}),
        ("Bash", {"command": " "}),
    ]
    for name, args in invalid:
        assert not admits(g, tok, ground, rng, name, **args), (name, args)


def test_paths_seen_in_the_conversation(g, tok, project, tmp_path):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("far away\n")
    inside = os.path.join(project, "src", "app.py")
    ground, rng = Grounding(project), np.random.default_rng(3)
    assert not admits(g, tok, ground, rng, "Read", file_path="build/out.log")
    ground.add_text(f"see build/out.log, {outside} and {inside}; not build/gone.log or /nope/x.py.")
    for path in ("build/out.log", str(outside), inside):
        assert admits(g, tok, ground, rng, "Read", file_path=path), path
    for path in ("build/gone.log", "/nope/x.py"):
        assert not admits(g, tok, ground, rng, "Read", file_path=path), path
    assert admits(g, tok, ground, rng, "Grep", pattern="build", path="build")
    assert admits(g, tok, ground, rng, "Edit", file_path="build/out.log", old_string="ok", new_string="!")
    assert admits(g, tok, ground, rng, "Edit", file_path=inside, old_string="a + b", new_string="b + a")
    assert not admits(g, tok, ground, rng, "Edit", file_path=str(outside), old_string="far", new_string="near")


def test_refresh_follows_the_tree(g, tok, project):
    ground, rng = Grounding(project), np.random.default_rng(4)
    assert admits(g, tok, ground, rng, "Read", file_path="README.md")
    run_tool(project, "Bash", {"command": "rm README.md && mkdir lib && echo 'x = 1' > lib/x.py"})
    ground.refresh()
    assert not admits(g, tok, ground, rng, "Read", file_path="README.md")
    assert admits(g, tok, ground, rng, "Read", file_path="lib/x.py")
    assert admits(g, tok, ground, rng, "Edit", file_path="README.md", new_string="# back\n")  # free again
    assert admits(g, tok, ground, rng, "Edit", file_path="lib/y.py", new_string="y = 2\n")


# ---- Edit --------------------------------------------------------------------------------------
def test_grounded_edits_of_existing_files_always_apply(g, tok, project):
    """Random old_strings and new_strings for every editable file, run one after another (the
    file changes under the grammar, which follows it): each applies exactly once."""
    ground, rng = Grounding(project), np.random.default_rng(5)
    for i in range(60):
        texts = {p: open(os.path.join(project, p), "rb").read() for p in EDITABLE if p != ".gitignore"}
        texts = [p for p, b in texts.items() if b and b"\0" not in b]  # an edit may empty a file
        path = texts[i % len(texts)]
        full = os.path.join(project, path)
        before = open(full, "rb").read().decode()
        (c, raw), = calls(g, tok, ground, rng, 1, tools=("Edit",), prefix=prefix(tok, "Edit", file_path=path))
        old, new = raw["old_string"].decode(), raw["new_string"].decode("utf-8", "replace")
        assert list(c["args"]) == ["file_path", "old_string", "new_string"]
        result = run_tool(project, "Edit", c["args"])
        assert not result.startswith("error"), (c, result)
        after = open(full, "rb").read().decode()
        crlf = "\r\n" in before and before.count("\r\n") == before.count("\n")  # as Edit decides
        norm = (lambda s: s.replace("\r\n", "\n")) if crlf else (lambda s: s)  # noqa: E731
        work = norm(before)
        assert work.count(old) == 1, (path, old)
        want = {work.replace(old, norm(new)), work.replace(old, norm(strip_prefixes(new)))}
        assert norm(after) in want, (path, old, new)
        ground.refresh()


def test_new_files_only_inside_existing_directories(g, tok, project):
    ground, rng = Grounding(project), np.random.default_rng(6)
    made = set()
    for c, _ in calls(g, tok, ground, rng, 60, tools=("Edit",)):
        path = c["args"]["file_path"]
        existed = os.path.exists(os.path.join(project, path))
        parent = os.path.dirname(path)
        assert not existed or path in EDITABLE or path in made, path
        assert parent in [""] + DIRS or os.path.isdir(os.path.join(project, parent)), path
        assert ("old_string" in c["args"]) == existed, c
        assert not run_tool(project, "Edit", c["args"]).startswith("error"), c
        made |= {path} - set(EDITABLE)
        assert os.path.isfile(os.path.join(project, path))
        ground.refresh()
    assert len(made) >= 10


def test_edit_follows_a_file_changed_on_disk(g, tok, project):
    ground, rng = Grounding(project), np.random.default_rng(7)
    path = os.path.join(project, "src", "app.py")
    assert admits(g, tok, ground, rng, "Edit", file_path="src/app.py", old_string="add(1, 2)", new_string="x")
    with open(path, "w") as f:  # in place (same inode), another size
        f.write(APP.replace("add(1, 2)", "add(3, 4, 5)"))
    assert not admits(g, tok, ground, rng, "Edit", file_path="src/app.py", old_string="add(1, 2)", new_string="x")
    assert admits(g, tok, ground, rng, "Edit", file_path="src/app.py", old_string="add(3, 4, 5)", new_string="x")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:  # same size, a new inode (how editors and Edit itself write)
        f.write(APP.replace("add(1, 2)", "add(7, 8, 9)"))
    os.replace(tmp, path)
    assert admits(g, tok, ground, rng, "Edit", file_path="src/app.py", old_string="add(7, 8, 9)", new_string="x")
    (c, _), = calls(g, tok, ground, rng, 1, tools=("Edit",), prefix=prefix(tok, "Edit", file_path="src/app.py"))
    assert not run_tool(project, "Edit", c["args"]).startswith("error"), c


def test_large_and_non_utf8_files_leave_old_string_free(g, tok, project):
    big = "x = 1\n" * (grounding.ANCHOR_BYTES // 6 + 1)
    write_files(project, {"big.py": big, "latin1.txt": "caf\xe9\n".encode("latin-1")})
    ground, rng = Grounding(project), np.random.default_rng(8)
    for path in ("big.py", "latin1.txt"):
        assert admits(g, tok, ground, rng, "Edit", file_path=path, old_string="nowhere", new_string="x")
    assert any("big.py" in n for n in ground.notes) and any("latin1.txt" in n for n in ground.notes)


# ---- Grep --------------------------------------------------------------------------------------
def test_grep_identifiers_come_from_project_and_conversation_words(g, tok, project):
    ground, rng = Grounding(project, names=False), np.random.default_rng(9)  # on: test_whole_names
    talk = "please find where zorblax_total is computed"
    ground.add_text(talk)
    texts = [open(os.path.join(project, p), "rb").read() for p in TEXT_FILES] + [talk.encode()]
    words = words_of(texts)
    syntax = 0
    for c, raw in calls(g, tok, ground, rng, 150, tools=("Grep",)):
        pattern = raw["pattern"]
        assert 0 < len(pattern) <= PATTERN_BYTES
        for run in ident_runs(pattern):
            assert any(run in w for w in words), (pattern, run)
        syntax += bool(re.search(rb"[^A-Za-z0-9_]", pattern))
        if "path" in c["args"]:
            assert os.path.exists(os.path.join(project, c["args"]["path"])), c
        assert not run_tool(project, "Grep", c["args"]).startswith("error: file not found"), c
    assert syntax > 50  # regex syntax is free
    assert admits(g, tok, ground, rng, "Grep", pattern=r"zorblax_\w+\s*=")
    assert not admits(g, tok, ground, rng, "Grep", pattern="blaxzor")


# ---- tools, order, modes -----------------------------------------------------------------------
@pytest.mark.parametrize("grounded", [False, True])
def test_arguments_in_wire_order(g, tok, project, grounded):
    ground, rng = (Grounding(project) if grounded else None), np.random.default_rng(10)
    for c, _ in calls(g, tok, ground, rng, 80):
        order = TOOLS[c["name"]].args
        assert list(c["args"]) == [a for a in order if a in c["args"]], c
    assert admits(g, tok, ground, rng, "Grep", pattern="main", **{"-B": 1})  # optional ones skipped
    assert not admits(g, tok, ground, rng, "Grep", **{"-A": 1}, pattern="main")
    assert not admits(g, tok, ground, rng, "Read", offset=1, file_path="src/app.py")
    assert not admits(g, tok, ground, rng, "Read", file_path="src/app.py", limit=1, offset=1)
    assert not admits(g, tok, ground, rng, "Edit", file_path="src/app.py", old_string="add(a, b)")


def test_without_grounding_values_are_free(g, tok, project):
    rng = np.random.default_rng(11)
    assert admits(g, tok, None, rng, "Read", file_path="src/missing.py")
    assert admits(g, tok, None, rng, "Edit", file_path="src/app.py", old_string="nowhere", new_string="x")
    assert admits(g, tok, None, rng, "Edit", file_path="src/app.py", new_string="x")
    assert admits(g, tok, None, rng, "Grep", pattern="qqqq", path="lib")
    assert not admits(g, tok, None, rng, "Read", file_path="a.py", offset="x1")


def test_plan_mode_offers_only_its_tools(g, tok, project):
    ground, rng = Grounding(project), np.random.default_rng(12)
    plan = MODE_TOOLS["plan"]
    assert {c["name"] for c, _ in calls(g, tok, ground, rng, 40, tools=plan)} == set(plan)
    assert not admits(g, tok, ground, rng, "Edit", tools=plan, file_path="src/new.py", new_string="x")
    assert not admits(g, tok, ground, rng, "Bash", tools=plan, command="ls")
    assert admits(g, tok, ground, rng, "Read", tools=plan, file_path="src/app.py")
    none = g.state(tools=(), ground=ground).allowed([])
    assert not none[sp(tok, "tool_call_start")] and none[sp(tok, "assistant_end")]


def test_masks_are_memoised_and_nothing_is_scanned_early(g, tok, project, monkeypatch):
    runs = []
    real = grounding.git
    monkeypatch.setattr(grounding, "git", lambda *a, **k: runs.append(a) or real(*a, **k))
    ground = Grounding(project)
    ids = tok.encode("let me look.") + tok.encode_tool_call(
        {"name": "Read", "args": {"file_path": "src/app.py", "limit": 5}})
    a, b = g.state(ground=ground), g.state(ground=ground)
    first = [a.allowed(ids[:k]) for k in range(len(ids))]
    assert len(runs) == 1  # one listing, when the path value starts
    second = [b.allowed(ids[:k]) for k in range(len(ids))]
    assert all(x is y for x, y in zip(first, second))  # the same arrays: device copies stay valid
    st = g.state(ground=Grounding(project, names=False))
    for k in range(ids.index(sp(tok, "tool_val"))):  # names off: prose, name and key list nothing
        st.allowed(ids[:k])
    assert len(runs) == 1
    st = g.state(ground=Grounding(project))
    [st.allowed(ids[:k]) for k in range(len(ids))]  # names on: prose lists (its spans need it), once
    assert len(runs) == 2


# ---- scale -------------------------------------------------------------------------------------
def reply_cost(g, tok, ground, reply):
    """Seconds per token of mask work over one reply (every token checked admitted)."""
    st, t0 = g.state(ground=ground), time.perf_counter()
    for k in range(len(reply) + 1):
        m = st.allowed(reply[:k])
        assert k == len(reply) or m[reply[k]]
    return (time.perf_counter() - t0) / (len(reply) + 1)


def realistic_reply(tok):
    old = "def add(a, b):\n    return a + b\n"
    return tok.encode("the sum is computed in `add`; let me make it accept any number of values, "
                      "as the user asked, then run the tests.") + tok.encode_tool_call(
        {"name": "Edit", "args": {"file_path": "src/app.py", "old_string": old,
                                  "new_string": "def add(*values):\n    return sum(values)\n"}})


def test_32k_vocabulary(tok32k, project):
    g32 = Grammar(tok32k, 32768 + 64)
    ground, rng = Grounding(project), np.random.default_rng(13)
    for c, _ in calls(g32, tok32k, ground, rng, 20, tools=("Read", "Grep")):
        assert not run_tool(project, c["name"], c["args"]).startswith("error: file not found")
    for path in [p for p in EDITABLE if p != ".gitignore"][:4]:
        (c, _), = calls(g32, tok32k, ground, rng, 1, tools=("Edit",), prefix=prefix(tok32k, "Edit", file_path=path))
        assert not run_tool(project, "Edit", c["args"]).startswith("error"), c
        ground.refresh()
    write_files(project, {"src/app.py": APP})
    ground.refresh()
    reply = realistic_reply(tok32k)
    cold, warm = reply_cost(g32, tok32k, ground, reply), reply_cost(g32, tok32k, ground, reply)
    print(f"32k vocab mask: {cold * 1e6:.0f} us/token cold, {warm * 1e6:.0f} us/token warm")
    assert warm < 1e-3


def test_mask_cost_per_token(g, tok, project):
    ground = Grounding(project)
    reply = realistic_reply(tok)
    cold, warm = reply_cost(g, tok, ground, reply), reply_cost(g, tok, ground, reply)
    print(f"1k vocab mask: {cold * 1e6:.0f} us/token cold, {warm * 1e6:.0f} us/token warm")
    assert warm < 2e-4


def test_a_100k_file_project_falls_back_to_free_paths(g, tok, tmp_path):
    root = tmp_path / "huge"
    root.mkdir()
    subprocess.run("mkdir d{000..099}; for d in d*; do (cd $d && touch f{0000..0999}.txt); done",
                   shell=True, cwd=root, executable="/bin/bash", check=True)
    rng = np.random.default_rng(14)
    for git in (False, True):  # a walk, then git ls-files
        if git:
            subprocess.run(["git", "init", "-q", str(root)], check=True)
        t = time.perf_counter()
        g.state(ground=Grounding(root, names=False)).allowed([])
        assert time.perf_counter() - t < 0.05  # names off, prose lists nothing
        ground = Grounding(root)
        t = time.perf_counter()
        assert g.state(ground=ground).allowed([]) is g.content  # names on: listed, too large, free
        assert time.perf_counter() - t < 5 and any("prose is free text" in n for n in ground.notes)
        t = time.perf_counter()
        assert admits(g, tok, ground, rng, "Read", file_path="d000/nope.txt")  # free text
        assert time.perf_counter() - t < 5
        assert any(f"over {MAX_PATHS}" in n for n in ground.notes), ground.notes
        assert admits(g, tok, ground, rng, "Grep", pattern="anything at all")
