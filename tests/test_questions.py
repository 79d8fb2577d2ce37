"""tasks/questions.py on its own: each question family, built straight on a generated project,
returns the family dict, its check reads the final answer (the oracle's passes, an empty or a
wrong_file one fails), and its oracle only reads — the project, its index and its history are as
they were. Then what the answers rest on: find_definition's location is the real def line, the
recover_error oracle meets a real failure first, git_inspect's uncommitted change is really
there, and _calls_of finds the callers a reader would (top-level functions, first call each,
not the function itself, not methods or attribute calls)."""
import ast
import os
import random
import re
import subprocess

import pytest

from tasks import questions
from tasks.oracle import Task
from tasks.projects import Project, generate_project, setup_env, snapshot
from tasks.requests import phrase

QUESTIONS = ["find_definition", "explain", "run_command", "git_inspect", "recover_error", "find_callers",
             "find_importers", "explain_file"]


def build(family, seed, base):
    """The project (built afresh under base) and its question, as make_task wires them."""
    setup_env()
    rng = random.Random(f"{family}:{seed}:False")
    p = generate_project(rng, str(base))
    d = getattr(questions, family)(p, rng, lambda key, **kw: phrase(key, rng, False, **kw))
    return p, d, Task(family, seed, False, p, d["prompt"], d["check"], d["desc"], d["policy"], d["flaws"])


def git(root, *args):
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True).stdout


def state(root):
    return snapshot(root), git(root, "status", "--porcelain"), git(root, "log", "--format=%H")


def answered_read_only(p, d, task) -> list[dict]:
    """The oracle's conversation, after checking the family's contract on it: the check fails on
    an empty answer and passes on the oracle's, the oracle only reads, and the project, its index
    and its history are as they were. A test count in the answer is the one pytest printed."""
    assert set(d) >= {"prompt", "check", "desc", "policy", "flaws"} and d["prompt"].strip()
    before = state(p.root)
    assert not d["check"](p.root, "")
    conv = task.rollout()["messages"]
    answer = conv[-1]["content"]
    assert conv[-1]["role"] == "assistant" and d["check"](p.root, answer), (d["desc"], answer)
    assert {m["tool_call"]["name"] for m in conv if m.get("tool_call")} <= {"Read", "Grep", "Bash"}
    assert state(p.root) == before
    if m := re.fullmatch(r"answer says (\d+) pass", d["desc"]):
        assert f"{m.group(1)} passed" in conv[-2]["content"]
    return conv


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("family", [q for q in QUESTIONS if q != "git_inspect"])
def test_the_oracle_answers_and_leaves_the_project_as_it_was(family, seed, tmp_path):
    answered_read_only(*build(family, seed, tmp_path))


def test_git_inspect_answers_what_git_says(tmp_path):
    """One task of each kind (the seeds that draw them now): the answer's fact is git's."""
    kinds = set()
    for seed in (0, 1, 5, 18):
        p, d, task = build("git_inspect", seed, tmp_path / str(seed))
        uncommitted = git(p.root, "status", "--porcelain").split()
        answer = answered_read_only(p, d, task)[-1]["content"]
        if uncommitted:
            kinds.add("changes")
            assert uncommitted == ["M", d["desc"].removeprefix("answer names ")] and uncommitted[1] in answer
            assert git(p.root, "diff", "--cached") == ""  # nothing staged, as the answer says
        elif d["desc"].startswith("answer quotes"):
            kinds.add("last")
            assert f'"{git(p.root, "log", "-1", "--format=%s").strip()}"' in answer
        elif d["desc"].startswith("answer says"):
            kinds.add("count")
            assert answer.startswith(f"{len(git(p.root, 'log', '--format=%H').split())} commits")
        else:
            kinds.add("last_files")
            files = git(p.root, "show", "--name-only", "--format=", "HEAD").split()
            assert all(f"`{f}`" in answer for f in files)
    assert kinds == {"changes", "last", "count", "last_files"}


def test_explain_file_counts_the_modules_functions_and_needs_two(tmp_path):
    p, d, task = build("explain_file", 1, tmp_path)
    mod = task.rollout()["messages"][2]["tool_call"]["args"]["file_path"]
    names = [n.name for n in ast.parse(p.read(mod)).body if isinstance(n, ast.FunctionDef)]
    answer = task.rollout()["messages"][-1]["content"]
    assert len(names) >= 2 and answer.startswith(f"`{mod}` holds {len(names)} functions: ")
    assert not d["check"](p.root, f"`{mod}` holds `{names[0]}`")  # one name is not enough
    assert d["check"](p.root, f"`{names[0]}` and `{names[-1]}`")


def test_find_definition_names_the_real_def_line(tmp_path):
    for seed in range(4):
        p, d, task = build("find_definition", seed, tmp_path / str(seed))
        answer = task.rollout()["messages"][-1]["content"]
        loc = d["desc"].removeprefix("answer contains ")
        file, line = loc.rsplit(":", 1)
        assert loc in answer
        assert p.read(file).splitlines()[int(line) - 1].startswith(("def ", "class "))


def test_recover_error_meets_a_real_failure_first(tmp_path):
    kinds = set()
    for seed in (0, 6):  # one of each kind, as the generator draws them now
        p, d, task = build("recover_error", seed, tmp_path / str(seed))
        conv = task.rollout()["messages"]
        calls = [m["tool_call"] for m in conv if m.get("tool_call")]
        if calls[0]["name"] == "Bash":  # a test file name that does not exist: the command fails
            kinds.add("command")
            assert "not found" in conv[3]["content"] and conv[3]["content"].endswith("(exit code 4)")
            test = calls[-1]["args"]["command"].split()[-1]  # looked, then retried with the real name
            assert calls[1]["args"]["command"] == "ls tests" and os.path.basename(test) in conv[5]["content"]
            assert " passed" in conv[-2]["content"] and os.path.isfile(os.path.join(p.root, test))
        else:  # a wrong file name: the oracle searches instead of reading a path that is not there
            kinds.add("path")
            wrong = re.search(r"there's no `([^`]+)` at the root", conv[2]["content"]).group(1)
            assert wrong in d["prompt"] and not os.path.exists(os.path.join(p.root, wrong))
            assert [c["name"] for c in calls] == ["Grep", "Read"] and calls[1]["args"]["file_path"] != wrong
    assert kinds == {"command", "path"}


def test_calls_of_finds_top_level_callers(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "a.py").write_text(
        "def helper():\n    return 1\n\n\n"
        "def user():\n    x = helper()\n    return helper() + x\n\n\n"
        "def rec(n):\n    return rec(n - 1) if n else helper()\n\n\n"
        "class K:\n    def m(self):\n        return helper()\n\n\n"
        "def attr(obj):\n    return obj.helper()\n")
    (root / "tests" / "test_a.py").write_text("from pkg.a import helper\n\n\ndef test_h():\n    assert helper() == 1\n")
    (root / "README.md").write_text("helper() is called\n")
    p = Project("proj", str(root), "pkg", ["pkg/a.py"], {}, {}, {})
    assert questions._calls_of(p, "helper") == [("pkg/a.py", "user", 6), ("pkg/a.py", "rec", 11),
                                                ("tests/test_a.py", "test_h", 5)]
    assert questions._calls_of(p, "rec") == []  # its own recursion is no caller


@pytest.mark.parametrize("family", ["find_definition", "explain"])
def test_a_wrong_file_answer_fails_the_check(family, tmp_path):
    """The wrong_file replay is the rejected side of a preference pair: its answer must be wrong by
    the check too. explain's borrowed another function's explanation, which could say one of the
    function's keywords ("... instead of dividing by zero" for safe_divide_x: it passed)."""
    for seed in range(4):
        p, d, task = build(family, seed, tmp_path / str(seed))
        wrong = task.rollout("wrong_file")["messages"][-1]["content"]
        assert not d["check"](p.root, wrong), (seed, wrong)
