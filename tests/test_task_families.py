"""tasks/families.py on its own: the family tables agree (every family in a world, train and
eval-only split, REAL_NEEDS), world_of picks a world the family has tasks in, make_task refuses a
family outside its world before building anything, and make_task is a pure function of (family,
seed, heldout, world) up to the base path — the same project bytes and git history, prompt,
check, guarded tests and oracle conversation from two bases, a stale project wiped first — whose
check fails on the state it leaves and passes once the oracle has run. (Every family's check and
oracle: tests/test_synth.py; the real world: tests/test_real_tasks.py.)"""
import subprocess

import pytest

from tasks.families import (
    EVAL_ONLY_FAMILIES, FAMILIES, REAL_NEEDS, TRAIN_FAMILIES, WORLD_FAMILIES, WORLDS, make_task, world_of)
from tasks.projects import snapshot
from tools.test_guard import capture
from tiny_models import untimed

CHEAP = ["find_definition", "user_rejects", "change_constant", "create_file"]  # quick to build and check


def test_the_family_tables_agree():
    assert set(TRAIN_FAMILIES) | set(EVAL_ONLY_FAMILIES) == set(FAMILIES)
    assert not set(TRAIN_FAMILIES) & set(EVAL_ONLY_FAMILIES)
    assert WORLDS == tuple(WORLD_FAMILIES) and set(REAL_NEEDS) <= set(WORLD_FAMILIES["real"])
    assert set().union(*WORLD_FAMILIES.values()) == set(FAMILIES)
    assert all(callable(f) for f in FAMILIES.values())
    # a real project has no template parameter to add; a bug across files needs real helpers
    assert set(FAMILIES) - set(WORLD_FAMILIES["real"]) == {"add_parameter"}
    assert set(FAMILIES) - set(WORLD_FAMILIES["generated"]) == {"fix_bug_across"}


def test_make_task_passes_the_familys_dict_on(tmp_path, monkeypatch):
    """A probe family: every field of its dict reaches the Task, its phrasing comes from the task's
    rng, and it gets the project make_task built for the seed."""
    from tasks import families
    seen = {}

    def view(data: bytes) -> bytes:
        return data

    def probe(p, rng, ph):
        seen["project"] = p
        return dict(prompt=ph("find_definition", fn="probe_fn"), check=lambda root, answer="": answer == "ok",
                    desc="answer is ok", policy=lambda r: r.done("ok"), flaws=["asks_more"], followup="and then?",
                    tests_allowed=("tests/*",), tests_view=view)
    monkeypatch.setitem(families.FAMILIES, "probe", probe)
    monkeypatch.setitem(families.WORLD_FAMILIES, "generated", [*WORLD_FAMILIES["generated"], "probe"])
    task = make_task("probe", 5, base=str(tmp_path))
    assert task.project is seen["project"] and task.root.startswith(f"{tmp_path}/5/")
    assert "probe_fn" in task.prompt and task.prompt == make_task("probe", 5, base=str(tmp_path)).prompt
    assert (task.desc, task.flaws, task.followup, task.tests_allowed, task.tests_view) == \
        ("answer is ok", ["asks_more"], "and then?", ("tests/*",), view)
    assert task.check(task.root, "ok") and task.rollout()["messages"][-1]["content"] == "ok"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_world_of_picks_a_world_the_family_has_tasks_in(family):
    for real in (False, True):
        assert family in WORLD_FAMILIES[world_of(family, real)]
    if family in WORLD_FAMILIES["real"]:
        assert world_of(family, True) == "real"
    if family in WORLD_FAMILIES["generated"]:
        assert world_of(family, False) == "generated"


@pytest.mark.parametrize("family, world", [("add_parameter", "real"), ("fix_bug_across", "generated")])
def test_a_family_outside_the_world_is_refused_before_anything_is_built(family, world, tmp_path):
    with pytest.raises(ValueError, match=f"family '{family}' has no tasks in the {world} world") as e:
        make_task(family, 0, base=str(tmp_path), world=world)
    assert all(f in str(e.value) for f in WORLD_FAMILIES[world])
    assert list(tmp_path.iterdir()) == []


def git_history(root):
    return subprocess.run(["git", "-C", root, "log", "--format=%H %s"], capture_output=True, text=True,
                          check=True).stdout


def rollout_text(task, base) -> str:
    return untimed(str(task.rollout()).replace(base, "<base>"))


@pytest.mark.parametrize("family", CHEAP)
def test_make_task_is_pure_up_to_the_base_path(family, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ta, tb = make_task(family, 7, base=a), make_task(family, 7, base=b)
    assert ta.root.startswith(f"{a}/7/") and ta.root.replace(a, b) == tb.root
    built = snapshot(ta.root)
    assert built == snapshot(tb.root) and git_history(ta.root) == git_history(tb.root)
    assert (ta.prompt, ta.desc, ta.flaws, ta.followup, ta.tests_allowed, ta.world) == \
        (tb.prompt, tb.desc, tb.flaws, tb.followup, tb.tests_allowed, tb.world)
    assert ta.guarded == tb.guarded == capture(ta.root)  # the tests as built
    assert (ta.family, ta.seed, ta.heldout, ta.world) == (family, 7, False, "generated")
    assert rollout_text(ta, a) == rollout_text(tb, b)
    (tmp_path / "a" / "7" / ta.project.name / "stray.py").write_text("left over\n")
    again = make_task(family, 7, base=a)  # the project is wiped first
    assert snapshot(again.root) == built
    assert snapshot(make_task(family, 8, base=a).root) != built  # the seed does matter


@pytest.mark.parametrize("family", CHEAP)
def test_the_check_fails_on_the_state_left_and_passes_after_the_oracle(family, tmp_path):
    task = make_task(family, 3, base=str(tmp_path))
    assert not task.check(task.root, "")
    answer = task.rollout()["messages"][-1]["content"]
    assert task.check(task.root, answer), (task.desc, answer)
