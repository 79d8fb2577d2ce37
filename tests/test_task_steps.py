"""tasks/steps.py on its own, on a generated project built on disk: picking a function (only from
the rng given, whatever the dict order), the Grep and Read arguments a model could copy (an
offset only after a Grep showed the line), unique old_strings, edits confined to one function, the
test count, the answer checks, and the setups that change a project before a task — the first
variant the real test suite catches (or the file put back), a committed bug the tests catch, a
committed stub — each undoable with the strings it returns."""
import ast
import random
import subprocess
from dataclasses import replace

import pytest

from tasks.oracle import OracleRollout, Task
from tasks.projects import generate_project, run_tests, setup_env
from tasks.steps import (
    documented, explain_check, first_caught, inject_bug, locate, mentions, n_tests, pick_func, read_args,
    replace_in_func, stub_out, unique_line)
from tools.dispatch import run_tool


@pytest.fixture
def p(tmp_path):
    setup_env()
    return generate_project(random.Random(5), str(tmp_path))


def rollout(p) -> OracleRollout:
    return OracleRollout(Task("steps", 0, False, p, "q", lambda root, answer="": True, "", lambda r: None, []))


def git_log(p) -> list[str]:
    return subprocess.run(["git", "-C", p.root, "log", "--format=%s"], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_pick_func_draws_only_from_the_rng_it_is_given(p):
    picks = [pick_func(p, random.Random(s)).name for s in range(12)]
    reordered = replace(p, functions=dict(reversed(list(p.functions.items()))))
    random.seed(99)
    assert [pick_func(reordered, random.Random(s)).name for s in range(12)] == picks
    assert len(set(picks)) > 1 and set(picks) <= set(p.functions)
    one = sorted(p.functions)[3]
    assert {pick_func(p, random.Random(s), lambda f: f.name == one).name for s in range(5)} == {one}


def test_locate_shows_the_line_and_read_args_copy_only_what_was_shown(p):
    f = p.functions[sorted(p.functions)[0]]
    r = rollout(p)
    locate(r, f, "finding it.")
    assert r.messages[-2]["tool_call"] == {"name": "Grep", "args": {"pattern": f"def {f.name}\\("}}
    assert f"{f.file}:{f.line}:def {f.name}(" in r.messages[-1]["content"]
    assert all(read_args(f, r, located=False) == {"file_path": f.file} for _ in range(10))
    kinds = {tuple(read_args(f, r, located=True)) for _ in range(20)}
    assert kinds == {("file_path",), ("file_path", "offset", "limit")}
    args = {"file_path": f.file, "offset": f.line - 1, "limit": len(f.source().splitlines()) + 1}
    assert args in [read_args(f, r, located=True) for _ in range(20)]
    shown = run_tool(p.root, "Read", args)
    assert all(line.strip() in shown for line in f.source().splitlines())


def test_unique_line_widens_until_it_occurs_once():
    text = "a = 1\nx = 0\nb = 2\nx = 0\n"
    assert unique_line(text, "a = 1") == "a = 1"
    assert unique_line(text, "x = 0") == "a = 1\nx = 0"
    assert text.count(unique_line(text, "x = 0")) == 1


def test_replace_in_func_edits_that_function_only(p):
    f = p.functions[sorted(p.functions)[0]]
    head = f"# {f.doc}\n"
    p.write(f.file, head + p.read(f.file))  # the same text outside the function, before it
    replace_in_func(p, f, f.doc, "Changed.")
    text = p.read(f.file)
    assert text.count("Changed.") == 1 and text.startswith(head)
    with pytest.raises(AssertionError):
        replace_in_func(p, f, "text that is not in the function", "x")


def test_n_tests_counts_the_projects_test_functions(p):
    want = sum(isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
               for t in p.test_files for n in ast.parse(p.read(t)).body)
    assert n_tests(p) == want > 0


def test_answer_checks(p):
    assert mentions("The `Mean` and the COUNT", "mean", "count") and not mentions("mean only", "mean", "count")
    f = next(f for f in p.functions.values() if not any(k in f.name for k in f.spec["keywords"]))
    check = explain_check(f)
    assert check(p.root, f"`{f.name}` " + f.spec["explain"])
    assert not check(p.root, f.spec["explain"]) and not check(p.root, f"`{f.name}` is a function")
    assert documented(f) and not documented(replace(f, doc="", doc_block=""))


def test_first_caught_keeps_the_first_caught_variant_or_puts_the_file_back(p):
    f = p.functions[sorted(p.functions)[0]]
    good = p.read(f.file)
    harmless = good + "\n# a comment\n"
    old, new, _ = f.spec["bugs"][0]
    buggy = good.replace(f.source(), f.source().replace(old, new, 1), 1)
    assert first_caught(p, f.file, [(harmless, "harmless"), (buggy, "bug", 1)], f.name) == ("bug", 1)
    assert p.read(f.file) == buggy
    p.write(f.file, good)
    with pytest.raises(ValueError, match=f"no bug in {f.name} fails a test"):
        first_caught(p, f.file, [(harmless, "harmless")], f.name)
    assert p.read(f.file) == good


def test_inject_bug_commits_a_bug_the_tests_catch(p):
    f = p.functions[sorted(p.functions)[0]]
    good_text, commits = p.read(f.file), git_log(p)
    bad, good, desc = inject_bug(p, f, random.Random(1))
    text = p.read(f.file)
    assert text.count(bad) == 1 and text.replace(bad, good) == good_text  # the pair undoes it
    assert desc in [d for _, _, d in f.spec["bugs"]]
    assert not run_tests(p.root)
    assert len(git_log(p)) == len(commits) + 1 and git_log(p)[0] == p.commits[-1]
    assert subprocess.run(["git", "-C", p.root, "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""


def test_stub_out_commits_a_stub_its_pair_undoes(p):
    f = p.functions[sorted(p.functions)[0]]
    good_text, commits = p.read(f.file), git_log(p)
    old, new = stub_out(p, f, random.Random(1))
    text = p.read(f.file)
    assert f"{f.head}\n{f.doc_block}\n    raise NotImplementedError\n" in text
    assert text.count(old) == 1 and text.replace(old, new) == good_text
    assert len(git_log(p)) == len(commits) + 1


def test_explain_check_needs_a_keyword_beyond_the_functions_name(tmp_path):
    """Many names hold a keyword (mean_x, count_x, flatten_x, safe_divide_x): naming the function
    alone passed the check ("`mean_kid` is a function"); the keyword must be in the explanation."""
    setup_env()
    named = 0
    for seed in range(3):
        p = generate_project(random.Random(seed), str(tmp_path / str(seed)))
        for f in p.functions.values():
            check = explain_check(f)
            named += any(k in f.name for k in f.spec["keywords"])
            assert not check(p.root, f"`{f.name}` is a function."), f.name
            assert check(p.root, f"`{f.name}` {f.spec['explain']}"), f.name
    assert named  # the case is there
