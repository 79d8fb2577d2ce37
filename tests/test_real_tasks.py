"""The real-code task world: functions harvested from the standard library (recorded tests, bugs
the tests catch, nothing unsafe ever run), projects assembled from them, the split by source
package, and every real family's oracle resolving its task through the real tools."""
import ast
import os

import pytest

from tasks import WORLD_FAMILIES, make_task, snapshot
from tasks.harness import build_task, resolved
from tasks.real_projects import EVAL_PACKAGES, module_functions, real_modules, split_of, third_person
from tasks.real_source import candidates, harvest, stdlib_modules

SAMPLE = '''import os
import re


LIMIT = 3


def shout(text):
    """Return text in upper case with an exclamation mark."""
    return text.upper() + "!"


def clip(values, size):
    """Keep the first size values and drop the rest."""
    return values[:LIMIT if size > LIMIT else size]


def join_path(head, tail):
    return os.path.join(head, tail)


def save(text):
    """Write text to a file."""
    with open("out.txt", "w") as f:
        f.write(text)


def wipe(path):
    """Remove a file."""
    os.remove(path)


def spin(n):
    """Loop for a while."""
    while n > 0:
        n -= 1
    return n


def _pad(text):
    return "<" + text + ">"


def framed(text):
    """Return text padded with angle brackets, in square brackets."""
    return "[" + _pad(text) + "]"
'''


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "sample.py"
    path.write_text(SAMPLE)
    return str(path)


def test_only_functions_that_cannot_touch_the_disk_are_candidates(sample):
    names = [c.fn.name for c in candidates(sample)]
    assert names == ["shout", "clip", "join_path", "spin", "framed"]  # save (open), wipe (os.remove) never run


def test_harvest_records_asserts_that_hold_and_bugs_they_catch(sample, tmp_path):
    funcs = {f.name: f for f in harvest(sample)}
    clip = funcs["clip"]
    assert "LIMIT" in clip.deps and "LIMIT = 3" in clip.excerpt
    assert 2 <= len(clip.asserts) <= 4 and clip.bugs
    # the recorded asserts pass on the excerpt; each bug fails one of them (checked by running it)
    module = tmp_path / "mod.py"
    for excerpt, want in [(clip.excerpt, True)] + [(clip.excerpt.replace(good, bad, 1), False)
                                                   for good, bad, _ in clip.bugs]:
        module.write_text(excerpt)
        ns = {}
        exec(compile(module.read_text(), str(module), "exec"), ns)
        ok = True
        for line in clip.asserts:
            try:
                exec(line.format(name="clip"), ns)
            except Exception:  # noqa: BLE001 - a failing or crashing assert both catch the bug
                ok = False
        assert ok is want, excerpt
    assert all(desc for _, _, desc in clip.bugs)


def test_bugs_in_a_helper_are_recorded_when_the_callers_asserts_catch_them(sample):
    framed = next(f for f in harvest(sample) if f.name == "framed")
    assert framed.helper_bugs and {b[0] for b in framed.helper_bugs} == {"_pad"}
    for helper, imports, good, bad, desc in framed.helper_bugs:
        assert imports == () and good in framed.excerpt.split("def framed")[0] and desc
        ns = {}
        exec(framed.excerpt.replace(good, bad, 1), ns)
        outcomes = []
        for line in framed.asserts:
            try:
                exec(line.format(name="framed"), ns)
                outcomes.append(True)
            except Exception:  # noqa: BLE001 - a failing or crashing assert both catch the bug
                outcomes.append(False)
        assert not all(outcomes), (good, bad)
    assert not next(f for f in harvest(sample) if f.name == "clip").helper_bugs  # LIMIT is no function


@pytest.mark.parametrize("heldout", [False, True], ids=["train", "eval"])
def test_a_bug_across_files_is_in_a_helper_the_failing_function_imports(heldout, tmp_path):
    import subprocess
    task = build_task("fix_bug_across", 5, heldout, str(tmp_path), world="real")
    git = lambda *a: subprocess.run(["git", *a], cwd=task.root, capture_output=True, text=True).stdout  # noqa: E731
    last = git("show", "--name-only", "--format=", "HEAD").split()
    assert len(last) == 1 and last[0] in task.project.modules  # the last commit put the bug in one module
    util = last[0]
    failing = [f for f in task.project.functions.values() if f.name in task.prompt or f.test_name in task.prompt]
    importers = [f for f in task.project.functions.values()
                 if f"from {util[:-3].replace('/', '.')} import" in open(os.path.join(task.root, f.file)).read()]
    assert importers and all(f.file != util for f in importers) and util not in task.project.tests.values()
    assert all(f.file != util for f in failing)  # the function the user names lives elsewhere
    task.rollout()
    assert git("diff", "--name-only").split() == [util] and task.check(task.root)


def test_a_looping_mutant_is_caught_not_hung(sample):
    spin = next(f for f in harvest(sample) if f.name == "spin")
    assert any("n += 1" in bad or "n >= 0" in bad for _, bad, _ in spin.bugs)  # infinite loops: caught by the timer


def test_harvest_is_deterministic(sample):
    harvest.cache_clear()
    first = harvest(sample)
    harvest.cache_clear()
    assert harvest(sample) == first


@pytest.mark.slow  # the suite's time (docs/LOG.md, sixth session)
def test_the_split_is_by_package_and_disjoint():
    train, evals = set(real_modules("train")), set(real_modules("eval"))
    assert train and evals and not train & evals
    assert all(m.split(".")[0] in EVAL_PACKAGES for m in evals)
    assert all(split_of(m) == "train" for m in train)
    train_sources = {f.source for m in train for f in module_functions(m)}
    assert not train_sources & {f.source for m in evals for f in module_functions(m)}
    assert sum(len(module_functions(m)) for m in evals) >= 40  # enough real functions for a 200-task split


def test_third_person():
    assert third_person("Return the mean of values.") == "returns the mean of values."
    assert third_person("Split a path") == "splits a path."
    assert third_person("Apply a fix") == "applies a fix."


def test_real_projects_look_like_projects_and_are_deterministic(tmp_path):
    a = make_task("find_definition", 11, True, str(tmp_path / "a"), world="real")
    b = make_task("find_definition", 11, True, str(tmp_path / "b"), world="real")
    assert snapshot(a.root) == snapshot(b.root) and a.prompt == b.prompt
    files = snapshot(a.root)
    assert {"README.md", "pyproject.toml", ".gitignore"} <= set(files)
    assert any(f.startswith("tests/test_") for f in files)
    stdlib = {m.split(".")[-1] for m in stdlib_modules()}
    for mod in a.project.modules:
        ast.parse(files[mod])
        assert os.path.basename(mod)[:-3].lstrip("_") in stdlib | {m.replace(".", "_") for m in stdlib_modules()}
    for f in a.project.functions.values():
        assert f.template == "real" and f.spec["tests"] and f.source() in files[f.file]


@pytest.mark.parametrize("heldout", [False, True], ids=["train", "eval"])
@pytest.mark.parametrize("family", WORLD_FAMILIES["real"])
def test_every_real_family_is_solved_by_its_oracle(family, heldout, tmp_path):
    task = build_task(family, 3, heldout, str(tmp_path), world="real")
    assert not task.check(task.root, ""), "the check passes on the untouched task"
    functions = {f.name for m in real_modules("eval" if heldout else "train") for f in module_functions(m)}
    assert set(task.project.functions) <= functions  # the split's own functions only
    messages = task.rollout()["messages"]
    calls = [{"name": m["tool_call"]["name"], "args": m["tool_call"]["args"], "result": r["content"]}
             for m, r in zip(messages, messages[1:]) if m.get("tool_call")]
    verdict = resolved(task, messages[-1]["content"], calls)
    assert verdict.resolved and not verdict.tampered, (task.prompt, task.desc, messages[-1]["content"])


def test_synth_draws_real_tasks_from_training_modules_only(tmp_path):
    from train.synth import generate_one
    eval_names = {f.name for m in real_modules("eval") for f in module_functions(m)}
    train_names = {f.name for m in real_modules("train") for f in module_functions(m)} - eval_names
    rows = [generate_one((0, i, ["find_definition", "fix_bug"], 0.0, 0.0, str(tmp_path), 1.0))[0] for i in range(3)]
    assert {r["world"] for r in rows} == {"real"}
    text = "".join(m["content"] for r in rows for m in r["messages"])
    assert any(name in text for name in train_names)
    assert not any(f"def {name}(" in text for name in eval_names - train_names)
