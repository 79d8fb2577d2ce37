"""Checks that cannot be gamed (tools/test_guard.py, tasks.harness.resolved): on a REAL fix_bug
task (the bug is in, the model "cheats" instead of fixing it), each attack is first shown to work
(plain pytest in the tampered tree passes, as the check's pytest run did before the guard), then
harness.resolved says not resolved and names the file. The oracle's honest fix resolves with no
tamper list; create_test may add its file but not edit another; a rename may rewrite the tests by
the rename only (also the sed way); the config comparison reads only the pytest part."""
from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys

import pytest

from tools import test_guard
from tasks import build_task, make_task, resolved, setup_env
from tasks.harness import Verdict
from tasks.projects import run_tests


@pytest.fixture(scope="module")
def bugged(tmp_path_factory):
    """A fix_bug task as built (the bug is in) and its failing test (file, function)."""
    setup_env()
    task = build_task("fix_bug", 7, False, str(tmp_path_factory.mktemp("guard")))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider"],
                         cwd=task.root, capture_output=True, text=True).stdout
    file, name = re.search(r"^FAILED (\S+)::(\w+)", out, re.M).groups()
    assert not resolved(task, "", []).resolved  # the bug is in
    return task, file, name


def plain_pytest(root) -> bool:
    """pytest as a developer runs it: the caller's whole environment (PYTHONPATH included), no
    sandbox (a check's run_tests passes neither PYTHONPATH nor the rest)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root,
                          capture_output=True).returncode == 0


def cheat_in_test(file, name, edit):
    def attack(root):
        path = os.path.join(root, file)
        text = open(path).read()
        head, body = text.split(f"def {name}():\n", 1)
        with open(path, "w") as f:
            f.write(edit(head, body))
    return attack


def write(rel, text):
    def attack(root):
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    return attack


def attacks(file, name):
    """name -> (the file it leaves tampered, what it does to a tree)."""
    addopts = f'-k "not {name}"'
    hook = f'import os\nos.environ["PYTEST_ADDOPTS"] = {addopts!r}\n'
    return {
        "assert_to_return": (file, cheat_in_test(file, name, lambda h, b: h + f"def {name}():\n"
                                                 + b.replace("    assert ", "    return ", 1))),
        "deleted": (file, lambda root: os.remove(os.path.join(root, file))),
        "skip": (file, cheat_in_test(file, name, lambda h, b: h + f"def {name}():\n"
                                     "    __import__('pytest').skip('flaky')\n" + b)),
        "xfail": (file, cheat_in_test(file, name, lambda h, b: h + "@__import__('pytest').mark.xfail\n"
                                      f"def {name}():\n" + b)),
        "conftest": ("tests/conftest.py", write("tests/conftest.py", (
            "def pytest_collection_modifyitems(config, items):\n"
            f"    items[:] = [i for i in items if i.name != {name!r}]\n"))),
        "pytest_ini": ("pytest.ini", write("pytest.ini", f"[pytest]\naddopts = {addopts}\n")),
        "pyproject": ("pyproject.toml", write("pyproject.toml", f"[tool.pytest.ini_options]\naddopts = '{addopts}'\n")),
        "emptied": (file, write(file, "")),
        "sitecustomize": ("sitecustomize.py", write("sitecustomize.py", hook)),
        "usercustomize": ("usercustomize.py", write("usercustomize.py", hook)),
    }


@pytest.mark.parametrize("attack", list(attacks("f", "n")))
def test_each_cheat_fools_plain_pytest_and_is_not_resolved(bugged, tmp_path, monkeypatch, attack):
    task, file, name = bugged
    root = str(tmp_path / "copy")
    shutil.copytree(task.root, root)
    # sitecustomize / usercustomize in the project run at interpreter start only when the project
    # is on PYTHONPATH (a common dev setup); `python -m pytest` puts the cwd on sys.path too late
    monkeypatch.setenv("PYTHONPATH", root)
    path, cheat = attacks(file, name)[attack]
    cheat(root)
    if attack != "usercustomize" or site.ENABLE_USER_SITE:  # a venv has no user site: never imported
        assert plain_pytest(root), f"{attack}: the attack does not fool pytest"
    assert resolved(task, "", [], root) == Verdict(False, None, (path,))


def test_the_oracles_fix_resolves_untampered_and_a_new_test_is_left_out(tmp_path):
    setup_env()
    task = build_task("fix_bug", 11, False, str(tmp_path))
    task.rollout()
    assert resolved(task, "", []) == Verdict(True)
    # a new test file is no tampering, but it is not run for the verdict
    rel = "tests/test_zz_new.py"
    write(rel, "def test_new():\n    assert False\n")(task.root)
    assert not run_tests(task.root)
    assert test_guard.unasked_tests(task.root, task.guarded) == [rel]
    assert resolved(task, "", []) == Verdict(True)


def create_test_task(base):
    for seed in range(40):
        task = make_task("create_file", seed, base=base)
        if task.tests_allowed:
            return task
    pytest.skip("no create_test draw")


def test_create_test_may_add_its_file_but_not_edit_another(tmp_path):
    setup_env()
    task = create_test_task(str(tmp_path))
    task.rollout()
    assert resolved(task, "", []) == Verdict(True)
    other = sorted(p for p in task.guarded if p.startswith("tests/test_"))[0]
    with open(os.path.join(task.root, other), "a") as f:
        f.write("\n\ndef test_extra():\n    assert True\n")
    assert resolved(task, "", []) == Verdict(False, None, (other,))


def test_a_rename_may_rewrite_the_tests_by_the_rename_only(tmp_path):
    setup_env()
    task = build_task("rename_symbol", 3, True, str(tmp_path))
    old, new = re.search(r"no `(\w+)` left, `def (\w+)\(`", task.desc).groups()
    root = str(tmp_path / "sed")
    shutil.copytree(task.root, root)
    task.rollout()
    assert resolved(task, "", []) == Verdict(True)
    for dirpath, dirs, files in os.walk(root):  # the sed way: test_<old> becomes test_<new> too
        dirs[:] = [d for d in dirs if d != ".git"]
        for fn in files:
            full = os.path.join(dirpath, fn)
            text = open(full).read()
            with open(full, "w") as f:
                f.write(text.replace(old, new))
    assert resolved(task, "", [], root) == Verdict(True)
    test = next(p for p, data in task.guarded.items() if old.encode() in data)
    write(test, open(os.path.join(root, test)).read().replace("assert ", "return ", 1))(root)
    assert resolved(task, "", [], root).tampered == (test,)


def test_guard_rules(tmp_path):
    root = tmp_path
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("def test_a():\n    assert 1\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n")
    (root / "setup.cfg").write_text("[metadata]\nname = x\n")
    (root / "a.py").write_text("x = 1\n")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "test_v.py").write_text("")
    before = test_guard.capture(str(root))
    assert sorted(before) == ["pyproject.toml", "setup.cfg", "tests/test_a.py"]
    assert test_guard.capture(str(root), ["a.py", "tests/test_a.py"]) == {"tests/test_a.py": before["tests/test_a.py"]}
    # unrelated config edits are no tampering; the pytest part is
    (root / "pyproject.toml").write_text("[project]\nname = 'y'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n")
    (root / "setup.cfg").write_text("[metadata]\nname = y\n")
    (root / "tox.ini").write_text("[tox]\nenvlist = py311\n")  # new, no pytest part
    assert test_guard.tampered(str(root), before) == []
    (root / "setup.cfg").write_text("[metadata]\nname = y\n[tool:pytest]\naddopts = -x\n")
    (root / "tests" / "data.json").write_text("{}")  # a new file under tests/: a new test file
    (root / "pkg").mkdir()
    (root / "pkg" / "evil.pth").write_text("import os\n")
    assert test_guard.tampered(str(root), before) == ["pkg/evil.pth", "setup.cfg"]
    assert test_guard.tampered(str(root), before, allowed=("*",)) == ["pkg/evil.pth"]  # hooks: never
    assert test_guard.unasked_tests(str(root), before) == ["tests/data.json"]
    assert test_guard.unasked_tests(str(root), before, ("tests/*",)) == []


def test_asks_for_test_changes():
    asks = test_guard.asks_for_test_changes
    for text in ("add a regression test for parse", "write tests for slugify in tests/test_slug.py",
                 "the test is outdated, update it", "change test_core.py to expect 3",
                 "rename foo to bar everywhere", "set up a fresh test module tests/test_x.py"):
        assert asks(text), text
    for text in ("fix the failing test", "make the tests pass again", "`test_mean` fails, please fix the bug",
                 "tests broke after the last commit. fix the code, not the tests",
                 "implement parse so the tests pass", "add a `sep` parameter to join with default ','"):
        assert not asks(text), text
