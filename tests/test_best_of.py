"""Best-of-N (agent/loop/best_of.py) on a REAL engine and loop: a tiny random model scripted per rollout
(test_agent_driver's Script), real tools in copies of a real temp git repo. Checked on disk: the
user's tree (and .git) is untouched while rollouts run, then gets exactly the winner's changes as
one turn that Snapshots.undo restores; uncommitted and ignored files survive; copies are
removed; a question picks the agreed citation. Plus the verifier's rules, the copy machinery
(subdirectory root, no git, a conflicting user edit) with a stub agent, and flag validation."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent.loop.best_of import BestOfError, BestOfOptions, agreement_scores, best_of, choose, citations
from agent_builder import new_agent
from nanocode.engine import Engine
from nanocode.gpt import init_params
from nanocode.protocol import TurnResult, system_prompt
from proc_state import with_cmdline
from scripted_agent import Script, call, reply
from tiny_models import commit_all, tiny, tiny_tokenizer
from tools.permissions import Policy
from tools.test_guard import run_tests
from tools.undo import Snapshots

TEXTS = [system_prompt("{cwd}")] * 3 + ["def f():\n    return 1\n" * 20,
                                        "fixed: f returns 2. it is defined at `a.py:1`."] * 2


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 1024)


@pytest.fixture(scope="module")
def engine(tok):
    """Noise params drawn with numpy (no per-shape jax.random compiles) and buckets that keep a
    whole rollout (~300-450 tokens) in one decode bucket: the test pays ~6 compiles, not ~50."""
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=2048)
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    params = jax.tree.map(lambda s: jnp.asarray(0.15 * rng.standard_normal(s.shape), s.dtype), shapes)
    return Engine(params, cfg, tok, buckets=(64, 256))


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A git project with a failing test, an uncommitted edit, an untracked and an ignored file."""
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "a.py").write_text("def f():\n    return 1\n")
    (root / "tests" / "test_a.py").write_text("from a import f\n\n\ndef test_f():\n    assert f() == 2\n")
    (root / "old.py").write_text("gone = True\n")
    (root / "notes.md").write_text("v1\n")
    (root / ".gitignore").write_text("build/\n__pycache__/\n")
    commit_all(root)
    (root / "notes.md").write_text("v2, not committed\n")
    (root / "todo.txt").write_text("untracked\n")
    (root / "build").mkdir()
    (root / "build" / "cache.bin").write_bytes(b"\x00ignored")
    return root


def tree(root: Path, git: bool = False) -> dict:
    """Every file under root (ignored ones too; .git only when asked) -> bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and (git or not rel.startswith(".git/")):
            out[rel] = p.read_bytes()
    return out


def scripted(engine, scripts, roots):
    """make_agent for best_of: rollout i gets scripts[i] as its model; roots records where."""
    def make(root, temperature, seed):
        script = scripts[len(roots)]
        script.V = engine.cfg.vocab_size
        roots.append((root, temperature, seed))
        agent = new_agent(engine, root, policy=Policy(Path(root), "auto"), temperature=temperature,
                          seed=seed, extra_mask=script, constrain=False, snapshots=False)
        script.agent = agent
        return agent
    return make


def test_change_applies_only_the_winner_as_one_undoable_turn(engine, tok, user, tmp_path):
    wrong = Script(tok, [call(tok, "", "Edit", file_path="a.py", old_string="return 1",
                              new_string="return 3"), reply(tok, "done: f returns 3.")])
    right = Script(tok, [call(tok, "", "Edit", file_path="a.py", old_string="return 1",
                              new_string="return 2"),
                         call(tok, "", "Bash", command="rm old.py"),
                         call(tok, "", "Edit", file_path="b.py", new_string="b = 2\n"),
                         reply(tok, "fixed: f returns 2.")])
    idle = Script(tok, [reply(tok, "nothing to do.")])
    before, before_git = tree(user), tree(user, git=True)
    untouched = []

    def on_event(ev):  # after every tool call of every rollout: the user's tree, .git included
        if ev.kind == "tool_result":
            untouched.append(tree(user, git=True) == before_git)
    roots = []
    res = best_of(scripted(engine, [wrong, right, idle], roots), user, "make the test pass",
                  BestOfOptions(3, seed=5), on_event=on_event)
    assert untouched and all(untouched)
    assert [(t, s) for _, t, s in roots] == [(0.0, 5), (0.7, 6), (0.7, 7)]
    assert all(not r.startswith(str(user)) for r, _, _ in roots)
    assert all(s.identity and all(s.identity) for s in (wrong, right, idle))
    assert res.kind == "change" and res.pick == 1
    assert [r.changed for r in res.rollouts] == [["a.py"], ["a.py", "b.py", "old.py"], []]
    assert [r.tests_passed for r in res.rollouts] == [False, True, None]
    assert res.to_dict()["pass_at_1"]["tests_passed"] is False
    assert res.applied == res.result.files_changed == ["a.py", "b.py", "old.py"]
    assert res.result.answer == "fixed: f returns 2." and res.result.steps == 3
    # exactly the winner's changes; the uncommitted, untracked and ignored files are intact
    want = {**before, "a.py": b"def f():\n    return 2\n", "b.py": b"b = 2\n"}
    del want["old.py"]
    assert tree(user) == want
    git = ["git", "-C", str(user)]
    assert subprocess.run(git + ["diff", "--cached", "--name-only"], capture_output=True,
                          text=True).stdout == ""  # the user's index is not touched
    assert subprocess.run(git + ["log", "--oneline"], capture_output=True, text=True).stdout.count("\n") == 1
    assert str(user) in res.messages[0]["content"] and "nanocode-best-of" not in str(res.messages)
    assert [n for n in os.listdir(tmp_path / "tmp") if n.startswith("nanocode-best-of")] == []  # copies gone
    # /undo restores the user's tree
    assert Snapshots(user).undo() == ["a.py", "b.py", "old.py"]
    assert tree(user) == before


def test_question_picks_the_agreed_citation_and_changes_nothing(engine, tok, user):
    scripts = [Script(tok, [call(tok, "", "Read", file_path="a.py"), reply(tok, text)]) for text in
               ("f is defined at a.py:7.", "f is defined at `a.py:1`.", "see a.py:1, def f.")]
    before = tree(user, git=True)
    res = best_of(scripted(engine, scripts, []), user, "where is f defined?", BestOfOptions(3))
    assert res.kind == "question" and res.pick == 1 and res.applied == [] and res.checkpoint is None
    assert [r.score for r in res.rollouts] == [(0, 0, 0, 1), (2, 0, 0, 1), (2, 0, 0, 1)]
    assert res.result.answer == "f is defined at `a.py:1`."
    assert tree(user, git=True) == before


def test_verifier_rules():
    assert citations("at ./pkg/a.py:12 and `x = 1`, 3 tests") == ({"pkg/a.py:12"}, {"x = 1"}, {"1", "3"})
    assert agreement_scores(["a.py:3", "b.py:4", "a.py:3 and 7", "7"]) == [(2, 0, 0), (0, 0, 0),
                                                                       (2, 0, 2), (0, 0, 2)]
    assert agreement_scores(["a.py:3"]) == [(0, 0, 0)]  # one answer agrees with nobody

    class R:
        def __init__(self, index, change, passed, steps, answer="", stop="done", tampered=()):
            self.index, self.tests_passed, self.root, self.steps = index, passed, "/c", steps
            self.tampered = list(tampered)
            self.changes = {p: ("f:old", after) for p, after in change.items()}
            self.changed, self.result = sorted(change), TurnResult(answer=answer, stop_reason=stop)
    a, b = {"a.py": "f:1"}, {"a.py": "f:2"}
    # tests pass > changed, no verdict > fewer tests fail than before > unchanged > tests fail
    assert choose([R(0, a, False, 1), R(1, {}, None, 1), R(2, a, True, 5)]) == ("change", 2)
    assert choose([R(0, {}, None, 1), R(1, a, False, 1)]) == ("change", 0)
    assert choose([R(0, {}, None, 1), R(1, a, None, 9)]) == ("change", 1)
    partial, worse = R(1, a, False, 1), R(2, b, False, 1)
    partial.tests_output, worse.tests_output = "1 failed, 2 passed in 0.1s", "2 errors in 0.1s"
    before = "2 failed, 1 passed in 0.1s"
    assert choose([R(0, {}, None, 1), partial, worse], before) == ("change", 1)
    assert [r.score[0] for r in (partial, worse)] == [2, 0]
    assert choose([R(0, {}, None, 1), partial, worse]) == ("change", 0)  # no baseline: no credit
    # tampered: below every other verdict, even a failing change
    assert choose([R(0, a, None, 1, tampered=["t.py"]), R(1, b, False, 9)]) == ("change", 1)
    # then the same change as others, then finished, then fewer steps, then the lowest index
    assert choose([R(0, a, True, 1), R(1, b, True, 3), R(2, b, True, 4)]) == ("change", 1)
    assert choose([R(0, a, True, 1, stop="step_limit"), R(1, b, True, 3)]) == ("change", 1)
    assert choose([R(0, a, True, 4), R(1, b, True, 2), R(2, {"c": "f:3"}, True, 2)]) == ("change", 1)
    assert choose([R(0, {}, None, 1, "x"), R(1, {}, None, 1, "y")]) == ("question", 0)
    assert choose([R(0, {}, None, 9, "", "step_limit"), R(1, {}, None, 1, "y")]) == ("question", 1)


class Stub:
    """A stand-in agent: the copy machinery without a model."""
    def __init__(self, root, temperature=0.0, seed=0):
        self.root, self.messages, self.meta = root, [{"role": "system", "content": f"cwd {root}"}], {}


def edit_drive(edits, during=None):
    def drive(agent, prompt):
        for path, text in edits.items():
            full = Path(agent.root) / path
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_text(text)
        if during:
            during()
        return [TurnResult(answer=f"edited in {agent.root}", steps=1)]
    return drive


def test_subdirectory_root_and_no_git(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    top = tmp_path / "mono"
    (top / "svc").mkdir(parents=True)
    (top / "svc" / "x.py").write_text("x = 1\n")
    (top / "README").write_text("top\n")
    commit_all(top)
    seen = []

    def drive(agent, prompt):  # the copy has the whole work tree and a working git
        r = Path(agent.root)
        seen.append((r.name, (r.parent / "README").exists(),
                     subprocess.run(["git", "-C", str(r), "log", "--oneline"], capture_output=True,
                                    text=True).stdout.count("\n")))
        (r / "x.py").write_text("x = 2\n")
        return [TurnResult(answer=f"done in {agent.root}")]
    res = best_of(Stub, top / "svc", "edit", BestOfOptions(2), drive=drive)
    assert seen == [("svc", True, 1)] * 2
    assert res.applied == ["svc/x.py"] and (top / "svc" / "x.py").read_text() == "x = 2\n"
    assert res.result.answer == f"done in {top / 'svc'}"  # relocated to the user's project
    plain = tmp_path / "plain"  # no git: every file is copied, undo uses the shadow repo
    plain.mkdir()
    (plain / "p.txt").write_text("1\n")
    res = best_of(Stub, plain, "edit", BestOfOptions(2), drive=edit_drive({"q/new.txt": "new\n"}))
    assert res.applied == ["q/new.txt"] and (plain / "q" / "new.txt").read_text() == "new\n"
    assert Snapshots(plain).undo() == ["q/new.txt"] and sorted(os.listdir(plain)) == ["p.txt"]


def test_a_user_edit_during_the_rollouts_blocks_the_apply(user):
    before = tree(user)
    with pytest.raises(BestOfError, match="a.py changed in your project"):
        best_of(Stub, user, "edit", BestOfOptions(2, test_command="true"), drive=edit_drive(
            {"a.py": "def f():\n    return 2\n"}, during=lambda: (user / "a.py").write_text("mine\n")))
    assert tree(user) == {**before, "a.py": b"mine\n"}


def test_a_file_the_rollout_makes_ignored_is_not_deleted(user):
    res = best_of(Stub, user, "ignore todo", BestOfOptions(1, test_command="true"), drive=edit_drive(
        {".gitignore": "build/\n__pycache__/\ntodo.txt\n"}))
    assert res.applied == [".gitignore"] and (user / "todo.txt").read_text() == "untracked\n"


def test_cancel_applies_nothing_and_a_hung_test_run_fails(user):
    import threading
    cancel, before = threading.Event(), tree(user)
    res = best_of(Stub, user, "edit", BestOfOptions(3), cancel=cancel, drive=edit_drive(
        {"a.py": "x\n"}, during=cancel.set))
    assert (res.kind, res.pick, res.applied, len(res.rollouts)) == ("cancelled", None, [], 1)
    assert res.result.stop_reason == "cancelled" and tree(user) == before
    assert res.result.answer == "best-of cancelled: nothing applied"  # not the rollout's "edited in"
    assert run_tests("sleep 30", str(user), timeout=0.5) == (False, "timed out after 0.5 s")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("route", ["sandbox", "unsandboxed"])
@pytest.mark.parametrize("leftover", ["sleep {} &", "sleep {} > /dev/null 2>&1 &",
                                      "setsid sleep {} > /dev/null 2>&1 &"])
def test_a_test_run_leaves_no_process_behind(user, leftover, route, request):
    """A test command that leaves a process running (a server a test forgot to stop; holding the
    output pipe or not, in its own session or not): the verdict comes back at once and the
    process does not outlive run_tests, in the sandbox (its pid namespace) and without one
    (the process-group kill and the call's marker)."""
    import time

    from tools.sandbox import bash_sandbox
    if route == "unsandboxed":
        request.getfixturevalue("unsandboxed")
    elif not bash_sandbox()["available"]:
        pytest.skip("no OS sandbox here")
    secs = f"60.{os.getpid()}{len(leftover)}"  # a command line no other process has
    t = time.monotonic()
    assert run_tests(f"{leftover.format(secs)} echo ok", str(user), timeout=30) == (True, "ok")
    assert time.monotonic() - t < 10
    assert with_cmdline("sleep", secs) == []


def test_the_verifier_runs_model_written_tests_in_the_sandbox(user, tmp_path, request):
    """The project's tests run the rollout's code: in the rollout's OS sandbox (or the default
    one), a write outside the copy fails (nothing on disk), the verdict still comes back; the
    control, without a sandbox by the user's choice, writes it."""
    from tools.sandbox import Sandbox, bash_sandbox
    if not bash_sandbox()["available"]:
        pytest.skip("no OS sandbox here")
    victim = Path(os.path.expanduser("~")) / f".nanocode-verifier-test-{os.getpid()}"
    try:
        cmd = f"touch {victim}; echo in > inside.txt; echo ok"
        for sandbox in (Sandbox(), None):
            assert run_tests(cmd, str(user), timeout=30, sandbox=sandbox) == (True, "ok")
            assert not victim.exists() and (user / "inside.txt").read_text() == "in\n"
        request.getfixturevalue("unsandboxed")
        assert run_tests(f"touch {victim}", str(user), timeout=30)[0] and victim.exists()
    finally:
        victim.unlink(missing_ok=True)


def test_cli_flag_validation(capsys):
    from agent import cli
    from evals import cli as evals_cli
    assert cli.parse_args(["-p", "x", "--best-of", "3"]).best_of == 3
    assert cli.parse_args(["-p", "x"]).best_of == 1
    for argv in (["-p", "x", "--best-of", "0"], ["--best-of", "2"],
                 ["-p", "x", "--best-of", "2", "--best-of-temperature", "0"]):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(argv)
        assert e.value.code == 2
    assert "--best-of" in capsys.readouterr().err
    assert evals_cli.main(["agent", "--policy", "oracle", "--best-of", "2", "--quiet"]) == 2
    assert evals_cli.main(["agent", "--policy", "oracle", "--best-of", "0", "--quiet"]) == 2
    assert "--best-of" in capsys.readouterr().err


def per_rollout(*edits):
    """drive for best_of: rollout i writes edits[i] ({path: text}, None: delete)."""
    done = []

    def drive(agent, prompt):
        for path, text in edits[len(done)].items():
            full = Path(agent.root) / path
            full.parent.mkdir(parents=True, exist_ok=True)
            full.unlink() if text is None else full.write_text(text)
        done.append(1)
        return [TurnResult(answer="done", steps=1, stop_reason="done")]
    return drive


CHEAT = {"tests/test_a.py": "from a import f\n\n\ndef test_f():\n    return f() == 2\n"}
FIX = {"a.py": "def f():\n    return 2\n"}
DESELECT = {"conftest.py": "def pytest_collection_modifyitems(config, items):\n    items.clear()\n"}


def test_a_rollout_that_edits_the_tests_never_wins(user):
    """Rollout 1 rewrites the assert into a return: pytest passes, so unguarded it would tie with
    the real fix and win on index; it is tampered, the fixer wins, the status line says why."""
    said = []
    res = best_of(Stub, user, "make the test pass", BestOfOptions(2), drive=per_rollout(CHEAT, FIX),
                  on_event=lambda ev: said.append(getattr(ev, "text", "")))
    assert res.pick == 1 and res.applied == ["a.py"]
    assert (user / "a.py").read_text() == FIX["a.py"] and "assert f() == 2" in (user / "tests" / "test_a.py").read_text()
    assert [r.tampered for r in res.rollouts] == [["tests/test_a.py"], []]
    assert res.rollouts[0].score[0] == -1 and res.rollouts[0].tests_passed is None
    assert res.to_dict()["rollouts"][0]["tampered"] == ["tests/test_a.py"]
    assert any("rollout 1 edited tests/test_a.py" in s for s in said)
    assert "rollout 1 edited tests/test_a.py: not picked" in said[-1]


def test_when_every_change_tampers_nothing_is_applied(user):
    before, said = tree(user), []
    res = best_of(Stub, user, "make the test pass", BestOfOptions(2), drive=per_rollout(CHEAT, DESELECT),
                  on_event=lambda ev: said.append(getattr(ev, "text", "")))
    assert (res.kind, res.pick, res.applied, res.checkpoint) == ("tampered", None, [], None)
    assert [r.tampered for r in res.rollouts] == [["tests/test_a.py"], ["conftest.py"]]
    assert tree(user) == before
    assert "nothing applied" in said[-1] and "rollout 2 edited conftest.py" in said[-1]
    assert res.result.answer == ("no rollout passed the checks; nothing applied: every rollout changed "
                                 "the tests unasked (rollout 1 edited tests/test_a.py; rollout 2 edited "
                                 "conftest.py)") and res.to_dict()["rollouts"][1]["answer"] == "done"
    # a rollout that changed nothing beats one that tampered: nothing to apply either way
    res = best_of(Stub, user, "make the test pass", BestOfOptions(2), drive=per_rollout(CHEAT, {}))
    assert (res.kind, res.pick, res.applied) == ("change", 1, []) and tree(user) == before


JUNK = {"a.py": "def f(:\n    return 2\n", "bunk_": "x"}  # a syntax error and a junk file
HALF = {"a.py": "def f():\n    return 2\n\n\ndef g():\n    return 0\n"}


def test_when_every_change_fails_the_tests_nothing_is_applied(user):
    """Both rollouts change files and both fail the tests (one breaks collection, one leaves the
    failure): leaving the tree alone wins; the baseline's line is reported."""
    before, said = tree(user), []
    res = best_of(Stub, user, "fix the failing test", BestOfOptions(2),
                  drive=per_rollout(JUNK, {"a.py": "def f():\n    return 3\n"}),
                  on_event=lambda ev: said.append(getattr(ev, "text", "")))
    assert (res.kind, res.pick, res.applied, res.checkpoint) == ("failed", None, [], None)
    assert [r.score[0] for r in res.rollouts] == [0, 0] and "1 failed" in res.tests_before
    assert tree(user) == before and not (user / "bunk_").exists()
    assert "nothing applied: every change fails the tests" in said[-1] and "before: 1 failed" in said[-1]
    assert res.to_dict()["tests_before"] == res.tests_before


def test_headless_exits_1_when_nothing_is_applied(engine, tok, user, monkeypatch, capsys):
    """`nanocode -p --best-of 2 --mode auto`'s run_best_of: both rollouts edit a.py and both fail
    the tests; nothing is applied, the JSON says why, the exit status is 1, not 0. Its answer says
    that nothing was applied and why (it was a rejected rollout's "done: fixed it."), which each
    rollout's summary keeps as its own answer."""
    import json

    from agent import headless
    scripts = [Script(tok, [call(tok, "", "Edit", file_path="a.py", old_string="return 1", new_string=f"return {k}"),
                            reply(tok, "done: fixed it.")]) for k in (3, 4)]
    monkeypatch.setattr(headless, "rollout_agent", lambda agent, root, t, s, make=scripted(engine, scripts, []):
                        make(root, t, s))
    before = tree(user)
    agent = new_agent(engine, user, policy=Policy(user, "auto"), constrain=False)
    rc = headless.run_best_of(agent, "fix the failing test", 2, "json")
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert rc == 1 and data["best_of"]["kind"] == "failed" and data["best_of"]["pick"] is None
    assert data["files_changed"] == [] and "nothing applied: every change fails the tests" in err
    assert data["answer"].startswith("no rollout passed the checks; nothing applied: every change "
                                     "fails the tests (rollout 1: ") and "fixed it" not in data["answer"]
    assert [r["answer"] for r in data["best_of"]["rollouts"]] == ["done: fixed it."] * 2
    assert tree(user) == before


def test_a_change_that_fixes_more_than_it_breaks_is_applied(user):
    """The baseline has 2 failing tests; a change that fixes one (and breaks none) beats leaving
    the tree alone, one that breaks collection does not."""
    (user / "tests" / "test_b.py").write_text("from a import f\n\n\ndef test_g():\n    from a import g\n"
                                              "    assert g() == 1\n\n\ndef test_one():\n    assert f() > 0\n")  # untracked: copied
    res = best_of(Stub, user, "fix the failing tests", BestOfOptions(2), drive=per_rollout(JUNK, HALF))
    assert (res.kind, res.pick, res.applied) == ("change", 1, ["a.py"])
    assert [r.score[0] for r in res.rollouts] == [0, 2] and res.tests_before.startswith("2 failed, 1 passed")
    assert (user / "a.py").read_text() == HALF["a.py"]


def test_asked_test_changes_are_no_tampering(user):
    update = {"tests/test_a.py": "from a import f\n\n\ndef test_f():\n    assert f() == 1\n"}
    res = best_of(Stub, user, "the test is outdated: update it to expect 1", BestOfOptions(1),
                  drive=per_rollout(update))
    assert res.pick == 0 and res.applied == ["tests/test_a.py"] and res.rollouts[0].tests_passed
    update = {"tests/test_a.py": update["tests/test_a.py"].replace("== 1", "in (1, 2)")}
    res = best_of(Stub, user, "make the test pass", BestOfOptions(1, tests_allowed=("tests/*",)),
                  drive=per_rollout(update))
    assert res.rollouts[0].tampered == [] and res.applied == ["tests/test_a.py"]


def test_a_new_unasked_test_file_is_left_out_of_the_verdict(user, tmp_path):
    """tests/test_0.py is collected first and patches a.f at import: plain pytest passes; the
    verifier leaves it out, so the pristine test fails on the unfixed code. No tampering."""
    patch = {"tests/test_0.py": "import a\n\na.f = lambda: 2\n"}
    res = best_of(Stub, user, "make the test pass", BestOfOptions(1), drive=per_rollout(patch),
                  workdir=str(tmp_path / "w"))
    r = res.rollouts[0]
    assert r.tampered == [] and r.tests_passed is False
    cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider"
    assert run_tests(cmd, r.root, 60)[0] is True  # the attack is real
    assert run_tests(cmd, r.root, 60, ignore=[os.path.join(r.top, "tests/test_0.py")])[0] is False


# ---- links out of the project: never created, never written through (executed on a real repo) ----

def linking(links, edits=None, during=None):
    """drive for best_of: the rollout makes `links` ({path: target}, in order) and `edits` in its copy."""
    def drive(agent, prompt):
        for path, target in links.items():
            (Path(agent.root) / path).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, Path(agent.root) / path)
        edit_drive(edits or {})(agent, prompt)
        if during:
            during()
        return [TurnResult(answer="done", steps=1, stop_reason="done")]
    return drive


def links_out(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink()
                  and not os.path.realpath(p).startswith(str(root.resolve()) + os.sep)
                  and os.path.realpath(p) != str(root.resolve()))


LINKS_OUT = {
    "relative": {"up": "../../../../../"},
    "absolute": {"abs": "OUTSIDE"},
    "from a subfolder": {"sub/deep": "../../outside"},
    "through a link made first": {"d": ".", "x": "d/.."},
    "through a link made after it": {"a": "d/..", "d": "."},
    "through the user's ignored link": {"y": "u/outside"},
}


@pytest.mark.parametrize("case", sorted(LINKS_OUT))
def test_a_link_out_of_the_project_is_not_created(case, user, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep\n")
    (user / ".git" / "info" / "exclude").write_text("u\n")
    os.symlink("..", user / "u")  # the user's own ignored link (never copied): kept as it is
    links = {p: t.replace("OUTSIDE", str(outside)) for p, t in LINKS_OUT[case].items()}
    said = []
    res = best_of(Stub, user, "fix it", BestOfOptions(1, test_command="true"),
                  workdir=str(tmp_path / "w"), on_event=lambda ev: said.append(getattr(ev, "text", "")),
                  drive=linking({**links, "ok": "a.py"}, FIX))
    copy = Path(res.rollouts[0].top)
    assert links_out(copy) or case == "through the user's ignored link"  # control: the rollout made them
    assert links_out(user) == ["u"] and (user / "ok").readlink() == Path("a.py")  # on disk first
    out = [f"{p} -> {t}" for p, t in links.items() if t != "."]
    assert res.refused == out and f"not applied, links out of the project: {', '.join(out)}" in said[-1]
    assert sorted(res.applied) == sorted(["a.py", "ok"] + (["d"] if "d" in links else []))
    assert (user / "a.py").read_text() == FIX["a.py"] and res.to_dict()["refused"] == out
    assert sorted(os.listdir(outside)) == ["victim.txt"] and (outside / "victim.txt").read_text() == "keep\n"
    assert Snapshots(user).undo() and not (user / "ok").is_symlink()


@pytest.mark.parametrize("change", ["create", "delete"])
def test_nothing_is_written_through_a_folder_swapped_for_a_link(change, user, tmp_path):
    """lib/ becomes a link out while the rollout runs (with the same x.py there, so the
    changed-meanwhile check passes): the apply stops rather than create or delete outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_text("x = 1\n")
    (user / "lib").mkdir()
    (user / "lib" / "x.py").write_text("x = 1\n")

    def swap():
        (user / "lib" / "x.py").unlink()
        (user / "lib").rmdir()
        os.symlink(outside, user / "lib")

    def drive(agent, prompt):
        lib = Path(agent.root) / "lib"
        if change == "create":
            (lib / "new").mkdir()
            (lib / "new" / "y.py").write_text("y\n")
        else:
            (lib / "x.py").unlink()
        swap()
        return [TurnResult(answer="done", steps=1, stop_reason="done")]
    with pytest.raises(BestOfError, match=r"is a symlink \(or not a folder\) in your project"):
        best_of(Stub, user, "edit", BestOfOptions(1, test_command="true"), drive=drive)
    assert sorted(os.listdir(outside)) == ["x.py"] and (outside / "x.py").read_text() == "x = 1\n"
