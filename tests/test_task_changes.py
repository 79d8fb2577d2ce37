"""The newer families' hidden checks cannot be gamed: each is solved by its oracle through the real
tools, and a change that goes beyond the request (another line, the code around a docstring,
another test) or falls short of it fails, judged on the files on disk."""
import ast
import re

import pytest

from tasks import make_task, resolved
from tasks.changes import _constants


def solve(task):
    messages = task.rollout()["messages"]
    calls = [{"name": m["tool_call"]["name"], "args": m["tool_call"]["args"], "result": r["content"]}
             for m, r in zip(messages, messages[1:]) if m.get("tool_call")]
    return resolved(task, messages[-1]["content"], calls)


@pytest.mark.parametrize("world", ["generated", "real"])
def test_change_constant_allows_that_line_only(world, tmp_path):
    task = make_task("change_constant", 5, False, str(tmp_path / "a"), world)
    assert solve(task).resolved
    task = make_task("change_constant", 5, False, str(tmp_path / "b"), world)
    mod, line, name, value = next(c for c in _constants(task.project) if c[2] in task.prompt)
    new = re.search(r"\b(\d+)\b", task.prompt.replace(name, "")).group(1)
    path = task.project.path(mod)
    text = open(path).read().replace(line, f"{name} = {new}", 1)
    open(path, "w").write(text + "\nEXTRA = 1\n")  # the asked change, and one more line
    assert not task.check(task.root)
    open(path, "w").write(text)
    assert task.check(task.root)


def test_add_docstring_must_leave_the_code_alone(tmp_path):
    task = make_task("add_docstring", 3, False, str(tmp_path / "a"))
    assert solve(task).resolved
    task = make_task("add_docstring", 3, False, str(tmp_path / "b"))
    f = next(f for f in task.project.functions.values() if f.name in task.prompt)
    path = task.project.path(f.file)
    text = open(path).read()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == f.name)
    assert ast.get_docstring(fn) is None  # the task removed it
    lines = text.split("\n")
    lines.insert(fn.lineno, '    """Does what it says."""')
    open(path, "w").write("\n".join(lines))
    assert task.check(task.root)
    lines.insert(fn.lineno + 1, "    pass")  # a docstring and a change to the code
    open(path, "w").write("\n".join(lines))
    assert not task.check(task.root)


def test_remove_function_keeps_every_other_test(tmp_path):
    task = make_task("remove_function", 4, False, str(tmp_path / "a"))
    assert solve(task).resolved
    task = make_task("remove_function", 4, False, str(tmp_path / "b"))
    solve(task)  # the oracle's change, then one more test deleted from the same (allowed) file
    f = next(f for f in task.project.functions.values() if f.name in task.prompt)
    test_path = task.project.path(f.test_file)
    segments = open(test_path).read().split("\n\n\n")
    assert len(segments) >= 2
    open(test_path, "w").write("\n\n\n".join(segments[:-1]) + "\n")
    verdict = resolved(task, "done", [])
    assert not verdict.resolved and not verdict.tampered  # the file may change; the check catches it


def test_find_callers_names_the_callers_on_real_code(tmp_path):
    task = make_task("find_callers", 8, True, str(tmp_path), "real")
    assert solve(task).resolved
    assert not task.check(task.root, "it is called somewhere in the package.")
