"""The task families (the questions in tasks/questions.py, the changes in tasks/changes.py): each
builds a task on a project, generated from templates (tasks/projects.py) or assembled from real
standard-library code (tasks/real_projects.py), setting up a bug, a stub, an uncommitted change,
..., and a scripted ORACLE policy that solves it with the real tools.

Trade-offs: the oracle is a script that already knows the answer from the project's metadata, so
it never explores; it still calls the real tools (tasks/oracle.py, OracleRollout), so every
tool_result is byte-for-byte what the agent will see, and the hidden `check(root, answer)`
verifies the work the same way an eval would. A policy is replayed with a `flaw` to get the
rejected side of a preference pair (same task, same prose choices, one deliberate defect, real
tool output again). Families are a plain dict FAMILIES of name -> function(project, rng, ph) ->
dict(prompt, check, desc, policy, flaws[, followup, tests_allowed, tests_view]); `make_task` turns
one into a Task. A check that runs the tests runs the project's own test files (Project.test_files),
so a test file the model added is never part of a verdict; that the tests themselves are the ones
built here is harness.resolved's job (tools/test_guard.py): create_test allows its new file, and
rename_symbol compares the tests modulo the rename.
TRAIN_FAMILIES are the ones training data may use; EVAL_ONLY_FAMILIES are never trained on.
WORLD_FAMILIES says which families have tasks in each world (a real project has no template
parameter to add).

Contracts: `make_task(family, seed, heldout, base, world)` is a pure function of (family, seed,
heldout, world) up to the base path (and, for the real world, the installed Python's sources):
the same arguments give byte-identical projects, prompts and (through `task.rollout()`)
conversations. The check fails on the state make_task leaves. A family that
cannot use a project (no bug the tests catch, ...) raises; callers retry with the next project
seed (tasks/seeds.py, ATTEMPTS). Policies draw prose only from `r.rng`, never from the task's
rng, so replaying them is deterministic.
"""
from __future__ import annotations

import os
import random

from tools.test_guard import capture
from tasks.changes import (
    add_docstring, add_parameter, change_constant, create_file, fix_bug, fix_bug_across, implement_stub,
    remove_function, rename_symbol, user_rejects)
from tasks.oracle import Task
from tasks.requests import phrase
from tasks.projects import BASE, generate_project, setup_env
from tasks.questions import (
    explain, explain_file, find_callers, find_definition, find_importers, git_inspect, recover_error, run_command)
from tasks.real_projects import generate_real_project


FAMILIES = {
    "find_definition": find_definition, "explain": explain, "fix_bug": fix_bug,
    "implement_stub": implement_stub, "create_file": create_file, "run_command": run_command,
    "git_inspect": git_inspect, "recover_error": recover_error, "user_rejects": user_rejects,
    "find_callers": find_callers, "find_importers": find_importers, "explain_file": explain_file,
    "change_constant": change_constant, "add_docstring": add_docstring, "remove_function": remove_function,
    "rename_symbol": rename_symbol, "add_parameter": add_parameter, "fix_bug_across": fix_bug_across,
}
EVAL_ONLY_FAMILIES = ["rename_symbol", "add_parameter"]
TRAIN_FAMILIES = [f for f in FAMILIES if f not in EVAL_ONLY_FAMILIES]
# the world a project comes from: the template generator, or real standard-library code
WORLDS = ("generated", "real")
WORLD_FAMILIES = {"generated": [f for f in FAMILIES if f != "fix_bug_across"],
                  "real": [f for f in FAMILIES if f != "add_parameter"]}
# what a real project must hold for a family that few projects can serve (passed to the generator)
REAL_NEEDS = {"fix_bug_across": lambda f: bool(f.helper_bugs)}


def world_of(family: str, real: bool) -> str:
    """The world a task of `family` is built in when `real` is wanted or not: a family with tasks in
    one world only always gets that one."""
    if family not in WORLD_FAMILIES["generated"]:
        return "real"
    return "real" if real and family in WORLD_FAMILIES["real"] else "generated"


def make_task(family: str, seed: int, heldout: bool = False, base: str = BASE, world: str | None = None,
              sources: tuple[str, ...] = ()) -> Task:
    """Build `family`'s project for `seed` at base/<seed>/<name> (wiped first) and its task, in
    `world` (WORLDS; default: generated where the family has such tasks, else real; a real
    training project also draws from the package roots `sources`, tasks/real_packages.py). The check
    fails on the state left here; `task.rollout()` runs the oracle. task.guarded is the tests as
    built here (tools.test_guard.capture), what harness.resolved judges a change with."""
    world = world or world_of(family, False)
    if family not in WORLD_FAMILIES[world]:
        raise ValueError(f"family {family!r} has no tasks in the {world} world (it has: {', '.join(WORLD_FAMILIES[world])})")
    setup_env()
    if world == "real":
        rng = random.Random(f"real:{family}:{seed}:{heldout}")
        p = generate_real_project(rng, os.path.join(base, str(seed)), heldout, REAL_NEEDS.get(family), sources)
    else:
        rng = random.Random(f"{family}:{seed}:{heldout}")
        p = generate_project(rng, os.path.join(base, str(seed)), heldout)
    d = FAMILIES[family](p, rng, lambda key, **kw: phrase(key, rng, heldout, **kw))
    return Task(family, seed, heldout, p, d["prompt"], d["check"], d["desc"], d["policy"], d["flaws"],
                d.get("followup"), capture(p.root), d.get("tests_allowed", ()), d.get("tests_view"), world)
