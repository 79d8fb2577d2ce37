"""The task families: the environment both training (`train synth`, `train rollouts`) and
evaluation (`evals agent`) run on. A task is a small throwaway Python project with a git history
built on disk (generated from templates, or assembled from real code: the standard library's,
and for training that of package roots), a user request, a scripted oracle that solves it through
the real tools and a hidden check of the final state.

Modules: names (word pools, training vs held-out), projects (the project generator, the tools'
environment, the checks' runners), real_source (functions harvested from the standard library
and packages with recorded tests and mutation bugs), real_packages (the modules of package roots:
training material only), mutations (those one-line bugs), real_projects (projects of real code,
the split by source package), requests (the grammar of user requests, training vs
held-out), phrasing (off-style prose, stdlib code conversations), oracle (Task, OracleRollout,
flaws), steps (the families' shared building blocks), questions and changes (the families),
families (the table and make_task), seeds (who owns which seeds and splits), harness (running
an agent on a task and checking it). Callers outside this package use only the names below.

Contracts: the same (family, seed, heldout, world, sources) give byte-identical projects,
prompts, oracle conversations and flawed replays (base path aside; the real world also depends on
the installed Python's sources and the package roots' files); held-out names, request words,
EVAL_ONLY_FAMILIES, the real world's eval-side source packages and seeds from EVAL_SEED0 up never
reach training data. Importing this package
is light (no jax; of the agent only its request classifier): `train` CLI commands import it to
build their parsers.
"""
from tasks.families import (
    EVAL_ONLY_FAMILIES, FAMILIES, TRAIN_FAMILIES, WORLD_FAMILIES, WORLDS, make_task, world_of)
from tasks.harness import build_task, drive, pattern_symbol, resolved, task_agent
from tasks.names import HELDOUT_WORDS
from tasks.oracle import OracleRollout, Task, oracle_first_call, shows_flaw
from tasks.phrasing import code_conversation
from tasks.projects import BASE, setup_env, snapshot
from tasks.real_projects import pool_stats
from tasks.seeds import ATTEMPT_STRIDE, ATTEMPTS, EVAL_SEED0, ROLLOUT_SEED0, SPLITS, attempt_seeds, eval_seed

__all__ = [
    # families and building tasks
    "FAMILIES",            # name -> family builder; every family
    "TRAIN_FAMILIES",      # the families training data may use
    "EVAL_ONLY_FAMILIES",  # families only evals run (never trained on)
    "WORLDS",              # where projects come from: "generated" (templates), "real" (stdlib code)
    "WORLD_FAMILIES",      # world -> the families that have tasks there
    "world_of",            # (family, real wanted) -> the world its task is built in
    "make_task",           # (family, seed, heldout, base, world, sources) -> Task, its project built on disk
    "pool_stats",          # package roots -> what they add to the real world's training side
    "Task",                # a task: project, prompt, hidden check, oracle policy, flaws, follow-up
    "BASE",                # default parent directory of task projects
    "setup_env",           # the process environment the tools expect (PATH, no git config)
    "snapshot",            # path -> text of a project's files (what a run left on disk)
    # seed ranges
    "EVAL_SEED0",          # eval task seeds start here; training never reaches it
    "ROLLOUT_SEED0",       # `train rollouts` task seeds start here (above synth's, below evals')
    "SPLITS",              # `evals agent --split` name -> (world, heldout)
    "ATTEMPTS",            # project seeds tried per task seed when a family cannot use one
    "ATTEMPT_STRIDE",      # distance between those project seeds
    "attempt_seeds",       # seed -> the project seeds tried for it, in order
    "eval_seed",           # (task index, family slot, --seed, heldout) -> an eval task's seed
    # the oracle
    "OracleRollout",       # the conversation a policy writes through the real tools (optionally flawed)
    "shows_flaw",          # whether a flawed replay visibly shows its flaw against the oracle's
    "oracle_first_call",   # the oracle's first tool call, without running any tool
    # an agent on a task
    "build_task",          # make_task, moving on to the next project seed when a family cannot apply
    "task_agent",          # the headless Agent for a task (mode, policy, no undo snapshots)
    "drive",               # run the task's turns (prompt, then user_rejects' follow-up)
    "resolved",            # the hidden check's verdict, why it raised, and the test files tampered with
    "pattern_symbol",      # a Grep pattern's symbol, to compare patterns by what they look for
    # training-data extras
    "HELDOUT_WORDS",       # held-out names: never in training data
    "code_conversation",   # a tool-free code-writing conversation from the standard library
]
