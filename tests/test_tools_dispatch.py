"""run_tool: the one entry point; malformed calls become exact `error:` lines, never exceptions."""
import random

import pytest

from nanocode.protocol import TOOL_ARGS, check_call
from tools.dispatch import run_tool


@pytest.fixture
def proj(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    return tmp_path


@pytest.mark.parametrize("name,args,expected", [
    ("Write", {"file_path": "a.py"}, "error: unknown tool"),
    ("read", {"file_path": "a.py"}, "error: unknown tool"),
    ("", {}, "error: unknown tool"),
    (None, {}, "error: unknown tool"),
    ("Read", {}, "error: missing argument file_path"),
    ("Read", {"file_path": None}, "error: missing argument file_path"),
    ("Edit", {"file_path": "a.py"}, "error: missing argument new_string"),
    ("Grep", {"path": "."}, "error: missing argument pattern"),
    ("Bash", {}, "error: missing argument command"),
    ("Read", {"path": "a.py"}, "error: unknown argument path for Read (valid: file_path, offset, limit)"),
    ("Bash", {"command": "ls", "timeout": "5"}, "error: unknown argument timeout for Bash (valid: command)"),
    ("Read", ["a.py"], "error: arguments must be a mapping of names to values"),
    ("Read", {"file_path": "a.py", "offset": "two"}, "error: invalid argument offset: expected an integer"),
])
def test_malformed_calls(proj, name, args, expected):
    assert run_tool(proj, name, args) == expected


def test_each_tool_through_the_dispatcher(proj):
    assert run_tool(proj, "Read", {"file_path": "a.py", "offset": "1"}) == "    2→y = 2"
    assert run_tool(proj, "Grep", {"pattern": "y"}) == "a.py:2:y = 2"
    assert run_tool(proj, "Edit", {"file_path": "a.py", "old_string": "y = 2", "new_string": "y = 3"}) == (
        "a.py\n    1→x = 1\n    2→y = 3")
    assert run_tool(proj, "Bash", {"command": "cat a.py; exit 3"}) == "x = 1\ny = 3\n(exit code 3)"
    assert run_tool(proj, "Bash", {"command": "sleep 5"}, timeout=0.2) == "error: timed out after 0.2 s"
    assert run_tool(proj, "Read", {"file_path": "../x"}) == "error: path outside the project"


def test_tool_args_table_matches_spec():
    assert {n: r + o for n, (r, o) in TOOL_ARGS.items()} == {
        "Read": ("file_path", "offset", "limit"),
        "Edit": ("file_path", "new_string", "old_string"),
        "Grep": ("pattern", "path", "-A", "-B"),
        "Bash": ("command",)}
    assert check_call("Edit", {"file_path": "a", "new_string": ""}) is None


def test_random_junk_never_raises(proj):
    rng = random.Random(0)
    values = [None, "", "a.py", "../../etc/passwd", "\x00", -1, 0, 10**30, 3.5, True, [], {}, "é" * 5000,
              "(", "rm -rf /", b"bytes"]
    keys = [k for r, o in TOOL_ARGS.values() for k in r + o] + ["junk"]
    for _ in range(400):
        name = rng.choice(list(TOOL_ARGS) + ["Nope", 3])
        if name == "Bash":
            continue  # running random shell commands is not the point here
        args = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, 4))}
        out = run_tool(proj, name, args)
        assert isinstance(out, str) and out
    assert (proj / "a.py").exists()
