"""Best-of-N for one request: N rollouts of the agent, each in its own copy of the project, a
verifier that needs no hidden answer picks one, and only the winner's changes reach the user's
tree, as one turn that /undo restores.

Rollout 0 runs as the user configured it (greedy stays greedy, the user's seed); rollout i > 0
samples at `sample_temperature` with seed + i. They run one after another on one engine; every
copy is made before the first, so all start from the same state, and the user's tree is only read
until the pick is applied. A copy (agent/loop/project_copy.py) holds the work tree's listed files and a .git that
borrows the user's objects, so git works there and can never write to the user's repository.

The verifier is never a hidden check: for a change, the project's tests as they were
(change_scores); for a question, agreement between the answers (agreement_scores). Leaving the
tree alone is always an option: a change the tests reject, or one that tampered with them, is
never applied. Ties go to the lowest index: with nothing to tell rollouts apart the pick is
rollout 0, what a plain run would have done.

Trade-off (apply_changes): a symlink that leads out of the project is skipped, not the whole
rollout, because the pick was verified on its tests and such a link is never part of a fix the
user should get; the cost is a partial change when a test needed that link.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from agent.loop.project_copy import BestOfError, copy_file, digest, make_copy, manifest, probe, project_files
from nanocode.protocol import Status, TurnResult
from tools import project_env, test_guard
from tools.undo import Snapshots
from tools.write_tree import UnsafeWrite, write_changes

SAMPLE_TEMPERATURE = 0.7
TEST_TIMEOUT = 120.0
_CITE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]*\w\.\w+):(\d+)\b")
_SPAN = re.compile(r"`([^`\n]+)`")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")


@dataclass
class Rollout:
    """One rollout: its sampling, its copy and what the verifier made of it."""
    index: int
    seed: int
    temperature: float
    root: str                      # the agent's root in the copy (gone once best_of cleaned up)
    top: str                       # the copy's work tree top (root, or a parent of it)
    turns: list[TurnResult]
    messages: list[dict]
    meta: dict
    changed: list[str]             # work-tree-relative paths it created, modified or deleted
    tests_passed: bool | None = None  # None: not run (nothing changed, or no test command)
    tests_output: str = ""         # the test run's last line ("2 passed in 0.05s")
    score: tuple = ()
    seconds: float = 0.0
    changes: dict = field(default_factory=dict, repr=False)  # path -> (before, after) digests
    stash: str = ""                # the after-state of the changed files, saved before verifying
    tampered: list[str] = field(default_factory=list)  # guarded files it changed unasked
    sandbox: object = field(default=None, repr=False)  # the rollout agent's OS sandbox, for test runs
    answer: str = ""               # its last answer, the copy's path replaced by the project's

    @property
    def result(self) -> TurnResult:
        return self.turns[-1]

    @property
    def steps(self) -> int:
        return sum(t.steps for t in self.turns)

    def summary(self) -> dict:
        return {"index": self.index, "seed": self.seed, "temperature": self.temperature,
                "stop_reason": self.result.stop_reason, "stop_reasons": [t.stop_reason for t in self.turns],
                "steps": self.steps, "changed": self.changed, "tests_passed": self.tests_passed,
                "tests_output": self.tests_output, "tampered": self.tampered, "score": list(self.score),
                "seconds": self.seconds, "answer": self.answer}


@dataclass
class BestOf:
    """best_of's answer: the pick (None when nothing was applied), the winner's last turn (answer
    and calls relocated to the user's root, files_changed = what was applied), its conversation
    and every rollout. pass@1 is rollout 0's outcome, reported beside the pick. With no pick the
    answer says that nothing was applied and why; each rollout's own is in its summary."""
    kind: str                      # "change" | "question"; nothing picked: "cancelled", "tampered"
                                   # (every change edited the tests), "failed" (every change fails them)
    pick: int | None
    result: TurnResult
    messages: list[dict]
    meta: dict
    rollouts: list[Rollout]
    applied: list[str]
    checkpoint: int | None         # the snapshot turn id that /undo restores; named like the saved
                                   # session's meta["turns"][i]["checkpoint"] and the JSON key (compat)
    test_command: str | None
    refused: list[str] = field(default_factory=list)  # "path -> target": links out, not created
    tests_before: str | None = None  # the baseline's summary line, when it ran

    def to_dict(self) -> dict:
        rolls = [r.summary() for r in self.rollouts]
        return {"n": len(rolls), "kind": self.kind, "pick": self.pick, "applied": self.applied,
                "refused": self.refused, "tests_before": self.tests_before,
                "checkpoint": self.checkpoint, "test_command": self.test_command,
                "pass_at_1": rolls[0] if rolls else None, "rollouts": rolls}


# ---- verification ---------------------------------------------------------------------------------

def detect_tests(files: list[str], search_path: str | None = None) -> str | None:
    """The default test command when the file list looks like it has Python tests, else None:
    pytest under the `python` (else `python3`) of `search_path`, the commands' PATH (the
    project's environment, tools/project_env.py); this interpreter when neither is there."""
    for p in files:
        name = p.rsplit("/", 1)[-1]
        if "tests" in p.split("/")[:-1] or (name.endswith(".py") and
                                             (name.startswith("test_") or name.endswith("_test.py"))):
            python = next((n for n in ("python", "python3") if shutil.which(n, path=search_path)),
                          sys.executable)
            return f"{python} -m pytest -q -p no:cacheprovider"
    return None


def citations(answer: str) -> tuple[set, set, set]:
    """(path:line citations, backticked spans, numbers) in an answer; paths lose a leading ./"""
    cites = {f"{os.path.normpath(m.group(1))}:{m.group(2)}" for m in _CITE.finditer(answer)}
    spans = {s.strip() for s in _SPAN.findall(answer) if s.strip()}
    numbers = {n for n in _NUMBER.findall(_CITE.sub(" ", answer))}
    return cites, spans, numbers


def _finished(r: Rollout) -> int:
    return int(r.result.stop_reason == "done")


def _verdict(r: Rollout, before: str | None) -> int:
    """4 changed and the tests pass; 3 changed with no verdict (no test command, or pytest
    collected nothing); 2 changed and the tests fail, but fewer than before and more pass
    (test_guard.fewer_failures); 1 changed nothing; 0 changed and the tests fail no less than
    before; -1 tampered. A pick at 0 or -1 is not applied (kind "failed" or "tampered")."""
    if r.tampered:
        return -1
    if not r.changed:
        return 1
    if r.tests_passed is False:
        return 2 if before is not None and test_guard.fewer_failures(before, r.tests_output) else 0
    return 4 if r.tests_passed else 3


def change_scores(rollouts: list[Rollout], before: str | None = None) -> list[tuple]:
    """(verdict, agreement, finished, -steps) per rollout; `before` is the baseline's test summary
    line, when it ran (the tests run once more in a copy of the tree as it was when a change fails
    them). The tests are `test_command`, else detect_tests's pytest line, in the OS sandbox within
    `test_timeout` (past it: failed). A rollout that changed tests, conftest.py, pytest config or
    interpreter hooks unasked (tools/test_guard.py) is tampered: not tested, never picked; a new
    unasked test file is left out of the run. Agreement: how many other rollouts made the
    identical change (self-consistency, for when tests cannot tell). Finished: the turn ended
    "done" (not at the step limit, a repeat, a cut reply)."""
    keys = [frozenset((p, after) for p, (_, after) in r.changes.items()) for r in rollouts]
    same = Counter(keys)
    scores = []
    for r, key in zip(rollouts, keys):
        verdict = _verdict(r, before)
        scores.append((verdict, same[key] - 1 if r.changed else 0, _finished(r), -r.steps))
    return scores


def agreement_scores(answers: list[str]) -> list[tuple]:
    """Per answer (the copy's path stripped): the votes of its most-agreed `path:line`, of its
    most-agreed `backticked` span and of its most-agreed number. Each citation gets one vote per
    answer that has it, and only agreement (2+ votes) counts: specific citations outrank numbers,
    which every answer has; choose() adds finished last, so with no agreement a finished answer
    beats an unfinished one."""
    found = [citations(a) for a in answers]
    scores = []
    for own in found:
        row = []
        for k in range(3):
            votes = Counter(c for other in found for c in other[k])
            row.append(max((votes[c] for c in own[k] if votes[c] >= 2), default=0))
        scores.append(tuple(row))
    return scores


def choose(rollouts: list[Rollout], before: str | None = None) -> tuple[str, int]:
    """Score every rollout (sets .score) and return (kind, index of the best); `before`: the
    baseline's test summary line."""
    if any(r.changed or r.tampered for r in rollouts):
        kind, scores = "change", change_scores(rollouts, before)
    else:
        answers = [relocate(r.result.answer, r.root + os.sep, "") for r in rollouts]
        kind = "question"
        scores = [s + (_finished(r),) for r, s in zip(rollouts, agreement_scores(answers))]
    for r, s in zip(rollouts, scores):
        r.score = s
    best = max(rollouts, key=lambda r: (r.score, -r.index))
    return kind, best.index


# ---- applying the pick -----------------------------------------------------------------------------

def relocate(obj, old: str, new: str):
    """`obj` (str, list, dict, TurnResult) with every `old` in its strings replaced by `new`."""
    if isinstance(obj, str):
        return obj.replace(old, new)
    if isinstance(obj, list):
        return [relocate(x, old, new) for x in obj]
    if isinstance(obj, dict):
        return {k: relocate(v, old, new) for k, v in obj.items()}
    if isinstance(obj, TurnResult):
        return replace(obj, answer=relocate(obj.answer, old, new),
                       tool_calls=relocate(obj.tool_calls, old, new))
    return obj


def apply_changes(root: str, top: str, rollout: Rollout, message: str, emit):
    """Apply one rollout's changes to the user's tree as one undoable turn: (paths, turn id,
    the links left out because they lead out of the project). The changed paths must still be as
    they were when the copies were made, else BestOfError names them and nothing is written; one
    tools.undo.Snapshots turn wraps the writes, and the user's other uncommitted and ignored
    files, index and HEAD are never touched. Nothing is written through a symlink
    (tools/write_tree.py: a folder on the way that is a link is a BestOfError)."""
    moved = [p for p, (before, _) in rollout.changes.items() if digest(os.path.join(top, p)) != before]
    if moved:
        raise BestOfError(f"not applied: {', '.join(sorted(moved))} changed in your project while the "
                          "rollouts ran; commit or discard your edits and rerun")
    try:  # as in the loop: no change that /undo could not restore
        ck = Snapshots(root)
        turn = ck.begin(message[:200], session=rollout.meta.get("id"))
    except Exception as e:  # noqa: BLE001
        raise BestOfError(f"not applied: the project could not be snapshotted for /undo ({e}); "
                          "nothing was changed") from e
    try:
        refused = write_changes(top, rollout.changes, rollout.stash, rollout.top)
    except UnsafeWrite as e:
        raise BestOfError(str(e)) from e
    finally:
        turn = ck.end(turn)
    return turn.changed, turn.id, refused


# ---- the whole thing ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BestOfOptions:
    """How best_of samples and verifies: `n` rollouts, rollout i seeded `seed + i`, the first at
    `temperature` (greedy by default), the others at `sample_temperature`; a change is verified by
    `test_command` (None: detect_tests's pytest line) within `test_timeout` s, and applied to the
    user's tree when `apply`. tests_allowed, tests_view: as in test_guard.tampered (None: ("*",)
    when test_guard.asks_for_test_changes(prompt), else ())."""
    n: int
    seed: int = 0
    temperature: float = 0.0
    sample_temperature: float = SAMPLE_TEMPERATURE
    test_command: str | None = None
    test_timeout: float = TEST_TIMEOUT
    apply: bool = True
    tests_allowed: tuple[str, ...] | None = None
    tests_view: object = None

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"best_of needs n >= 1, got {self.n}")


def best_of(make_agent, root, prompt: str, opts: BestOfOptions, *, drive=None, on_event=None,
            cancel=None, workdir: str | None = None) -> BestOf:
    """Run `prompt` n times, pick one, apply it (module docstring). Copies go under
    <workdir>/<i>/<project dir name>, each agent at the user's subdirectory of it, and each agent
    (its KV cache) is dropped when its rollout ends. `cancel` set: stop after the current rollout
    and apply nothing. The winner's conversation, answer and calls have the copy's path replaced
    by the user's root, so a saved session continues in the user's project.

    make_agent(root, temperature, seed) -> a fresh Agent working in `root` (no undo snapshots
    needed: best_of takes its own). drive(agent, prompt) -> [TurnResult] runs one rollout (default:
    one headless turn, events to on_event, honouring cancel). on_event(event) also gets a Status
    before and after each rollout and for the pick. opts.apply False leaves the user's tree alone
    (the eval scores copies). workdir: where the copies go, left for the caller to remove (default:
    a temp dir removed on return, so Rollout.root is gone by then)."""
    n, seed, apply = opts.n, opts.seed, opts.apply
    emit = on_event or (lambda event: None)
    root = os.path.realpath(os.fspath(root))
    if drive is None:
        def drive(agent, text):
            return [agent.run_turn(text, approve=None, on_event=emit, cancel=cancel)]
    top, git = probe(root)
    rel = os.path.relpath(root, top)
    files = project_files(top, git is not None)
    env = project_env.choose(root)
    command = opts.test_command or detect_tests(files, env.path)
    # the copies leave an in-project venv out: their commands keep the project's environment
    chosen = env.virtual_env if env.virtual_env and not os.environ.get(project_env.OVERRIDE) else None
    allowed = ("*",) if opts.tests_allowed is None and test_guard.asks_for_test_changes(prompt) \
        else opts.tests_allowed
    guard = (test_guard.capture(top, files), tuple(allowed or ()), opts.tests_view)
    base = os.path.realpath(workdir or tempfile.mkdtemp(prefix="nanocode-best-of-"))
    name = os.path.basename(top) or "project"
    try:
        if chosen:
            os.environ[project_env.OVERRIDE] = chosen
        tops = [os.path.join(base, str(i), name) for i in range(n)]
        baseline = os.path.join(base, "before", name) if command else None  # the tree as it was
        for t in tops + ([baseline] if baseline else []):
            make_copy(top, git, files, t)
        rollouts = []
        for i, t in enumerate(tops):
            if cancel is not None and cancel.is_set():
                break
            rollouts.append(_rollout(i, t, rel, git is not None, make_agent, drive, prompt, emit,
                                     seed, opts.temperature if i == 0 else opts.sample_temperature,
                                     command, opts.test_timeout, n, guard))
        before = None
        if baseline and any(r.changed and not r.tampered and r.tests_passed is False for r in rollouts):
            emit(Status("running the tests on the tree as it was, to compare"))
            before = test_guard.run_tests(command, os.path.normpath(os.path.join(baseline, rel)),
                                          opts.test_timeout, rollouts[0].sandbox)[1]
        return _finish(rollouts, root, top, prompt, command, apply, cancel, emit, before)
    finally:
        if chosen:
            os.environ.pop(project_env.OVERRIDE, None)
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def _rollout(i, top, rel, git, make_agent, drive, prompt, emit, seed, temp, command, timeout, n, guard):
    """Rollout i in its copy. Its changes are the listed files whose content, exec bit or symlink
    target differ before and after (a file it only made ignored is still compared, never
    "deleted"), saved aside before the verifier runs anything there, so a test run that writes
    files cannot leak into what is applied; commits or staging in a copy are not carried over."""
    how = "greedy" if temp == 0 else f"temperature {temp:g}"
    emit(Status(f"rollout {i + 1}/{n}: seed {seed + i}, {how}"))
    t0 = time.perf_counter()
    root = os.path.normpath(os.path.join(top, rel))
    before = manifest(top, git)
    agent = make_agent(root, temp, seed + i)
    turns = list(drive(agent, prompt))
    messages, meta, sandbox = agent.messages, agent.meta, getattr(agent, "sandbox", None)
    del agent  # its KV cache goes with it
    after = manifest(top, git)
    for p in set(before) - set(after):  # one the rollout made ignored is still there, unchanged
        if (d := digest(os.path.join(top, p))) is not None:
            after[p] = d
    changes = {p: (before.get(p), after.get(p)) for p in sorted(set(before) | set(after))
               if before.get(p) != after.get(p)}
    stash = os.path.dirname(top) + ".changes"  # <base>/<i>.changes: beside the copy, never in it
    for p, (_, d) in changes.items():
        if d is not None:
            copy_file(os.path.join(top, p), os.path.join(stash, p))
    guarded, allowed, view = guard
    r = Rollout(i, seed + i, temp, root, top, turns, messages, meta, sorted(changes),
                changes=changes, stash=stash, tampered=test_guard.tampered(top, guarded, allowed, view),
                sandbox=sandbox)
    if changes and command and not r.tampered:
        unasked = [os.path.join(top, p) for p in test_guard.unasked_tests(top, guarded, allowed)]
        r.tests_passed, r.tests_output = test_guard.run_tests(command, root, timeout, sandbox, unasked)
    r.seconds = round(time.perf_counter() - t0, 2)
    tests = {True: "; tests pass", False: "; tests fail", None: ""}[r.tests_passed]
    what = f"changed {', '.join(r.changed)}" if r.changed else "changed nothing"
    what += f"; rollout {i + 1} edited {', '.join(r.tampered)} unasked: never picked" if r.tampered else ""
    emit(Status(f"rollout {i + 1}/{n}: {r.result.stop_reason}, {r.steps} steps, {what}{tests}"))
    return r


NOTHING_APPLIED = "no rollout passed the checks; nothing applied"  # a failed best-of's answer opens so


def _finish(rollouts, root, top, prompt, command, apply, cancel, emit, before=None) -> BestOf:
    for r in rollouts:
        r.answer = relocate(r.result.answer, r.top, top)
    if not rollouts or (cancel is not None and cancel.is_set()):
        result = relocate(rollouts[-1].result, rollouts[-1].top, top) if rollouts else TurnResult()
        result = replace(result, answer="best-of cancelled: nothing applied", stop_reason="cancelled",
                         files_changed=[])
        emit(Status(result.answer))
        return BestOf("cancelled", None, result, [], {}, rollouts, [], None, command)
    kind, pick = choose(rollouts, before)
    win = rollouts[pick]
    edited = "; ".join(f"rollout {r.index + 1} edited {', '.join(r.tampered)}" for r in rollouts if r.tampered)
    if win.tampered:  # every rollout did: none is picked
        why = f"every rollout changed the tests unasked ({edited})"
        return _nothing_applied("tampered", why, win, rollouts, top, command, before, emit)
    if kind == "change" and win.score[0] == 0:  # leaving the tree alone beats every change
        fails = "; ".join(f"rollout {r.index + 1}: {r.tests_output or 'tests fail'}" for r in rollouts
                          if r.changed and r.tests_passed is False)
        why = (f"every change fails the tests ({fails}; before: {before or 'not run'})"
               + (f"; {edited}: not picked" if edited else ""))
        return _nothing_applied("failed", why, win, rollouts, top, command, before, emit)
    applied, ck_id, refused = [], None, []
    if apply and win.changes:
        applied, ck_id, refused = apply_changes(root, top, win, prompt, emit)
    why = ({4: "tests pass", 3: "changed, no test verdict", 2: f"fewer tests fail than before: {win.tests_output}",
            1: "changed nothing"}[win.score[0]] if kind == "change" else f"agreement {list(win.score[:3])}")
    emit(Status(f"best of {len(rollouts)}: rollout {pick + 1} ({why}, {win.steps} steps)"
                + (f"; applied {', '.join(applied)} (/undo restores)" if applied else "")
                + (f"; not applied, links out of the project: {', '.join(refused)}" if refused else "")
                + (f"; {edited}: not picked" if edited else "")))
    result = replace(relocate(win.result, win.top, top), files_changed=applied)
    return BestOf(kind, pick, result, relocate(win.messages, win.top, top),
                  relocate(win.meta, win.top, top), rollouts, applied, ck_id, command, refused, before)


def _nothing_applied(kind, why, best, rollouts, top, command, before, emit) -> BestOf:
    """No pick: the answer (stdout, the JSON's) says why, not a rejected rollout's "done"."""
    emit(Status(f"best of {len(rollouts)}: nothing applied: {why}"))
    result = replace(relocate(best.result, best.top, top), answer=f"{NOTHING_APPLIED}: {why}",
                     files_changed=[])
    return BestOf(kind, None, result, [], {}, rollouts, [], None, command, tests_before=before)
