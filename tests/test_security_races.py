"""Check = use through the agent: a Read or Grep runs on exactly what the permission check judged,
and a path that changes under a check never crashes the agent. Every case drives the real
driver (agent/loop/driver.Agent.run_turn with a scripted model, the real Policy and tools) while a
separate process swaps a directory or file of a real git repository for a symlink to an outside
secret with renameat2 in a loop; the damage checked is the secret's bytes in any result the
model would read, and any exception out of the agent."""
import os
import subprocess
import time

import pytest

from agent.loop.driver import Agent
from agent.settings import TurnSettings
from race_helpers import ScriptedModel, flipper, race_target  # noqa: F401 - flipper is a fixture
from tools.dispatch import run_tool
from tools.files import CHANGED
from tools.permissions import Policy
from tools.workspace import PathSwapped, resolve

SECRET = "TOP-SECRET-CONTENT"
TRIES = 300


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    proj, out = tmp_path / "proj", tmp_path / "outside"
    for d in (proj, out):
        d.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    (proj / "a.py").write_text("x = 1\n")
    (out / "secret.txt").write_text(SECRET + "\n")
    return proj


def drive(proj, calls, mode, approve=None):
    """Run `calls` through the agent, a new turn after each turn ends (a rejected ask ends one);
    returns (results, approvals, exceptions)."""
    model = ScriptedModel(calls)
    agent = Agent(model, proj, Policy.load(proj, mode=mode),
                  TurnSettings(retries=0, max_steps=len(calls) + 1, sandbox=False, snapshots=False, memory=False))
    results, approvals, crashes = [], [], []
    while model.calls:
        try:
            res = agent.run_turn("look", approve=approve)
        except Exception as e:  # noqa: BLE001 - counted: the test wants none
            crashes.append(e)
            continue
        results += [c["result"] for c in res.tool_calls]
        approvals += agent.meta["approvals"]
        agent.clear()
    return results, approvals, crashes


def reads(path):
    return [("Read", {"file_path": path, "limit": 1 + i % 7}) for i in range(TRIES)]  # never the same call 3 times


def greps(path):
    return [("Grep", {"pattern": f"safe|{SECRET}|n{i}", "path": path}) for i in range(TRIES)]


@pytest.mark.parametrize("tool", ["Read", "Grep"])
def test_control_checking_then_resolving_again_leaks(repo, flipper, tool):
    """What the driver did: the policy judged the path, then the tool resolved it again with
    allow_outside=True. A swap between the two reads the outside secret."""
    name, target, path = race_target(repo, "dir")
    flipper(name, target)
    policy = Policy(root=repo, mode="plan")
    args = {"file_path": path} if tool == "Read" else {"pattern": SECRET, "path": "d"}
    leaked = 0
    for _ in range(20 * TRIES):
        if policy.check(tool, args).action == "allow":
            leaked += SECRET in run_tool(repo, tool, args, allow_outside=True)
        if leaked:
            break
    assert leaked, "the race never hit: the tests below would prove nothing"


@pytest.mark.parametrize("mode", ["plan", "auto"])
@pytest.mark.parametrize("what", ["dir", "file"])
@pytest.mark.parametrize("tool", ["Read", "Grep"])
def test_agent_race_never_leaks_the_outside_secret(repo, flipper, mode, what, tool):
    name, target, path = race_target(repo, what)
    make = (lambda: reads(path)) if tool == "Read" else (lambda: greps(path.split("/")[0]))  # noqa: E731
    assert drive(repo, make()[:1], mode)[0][0].endswith("safe")  # the call works without the race
    flipper(name, target)
    results, approvals, crashes = drive(repo, make(), mode)
    assert not crashes
    assert not [r for r in results if SECRET in r]
    assert len(results) + len(crashes) >= TRIES // 2  # most calls ran (an ask ends its turn)
    assert all(a["answer"] == "no" for a in approvals)  # headless: outside reads were refused
    hit = [r for r in results if not r.endswith("safe")]  # refused, asked or failed: the swap was seen
    assert len(hit) >= TRIES // 10, "the race never hit: this test would prove nothing"


@pytest.mark.parametrize("tool", ["Read", "Grep"])
def test_approved_outside_read_uses_only_the_approved_file(repo, flipper, tool):
    """The user approves reading outside/pub/notes.txt (or searching outside/pub) and nothing
    else; pub/ is swapped for a link to a folder whose notes.txt is the secret. The call reads
    the approved file or fails, never the secret."""
    out = repo.parent / "outside"
    (out / "pub").mkdir()
    (out / "pub" / "notes.txt").write_text("public\n")
    (out / "hidden").mkdir()
    (out / "hidden" / "notes.txt").write_text(SECRET + "\n")
    approved = str(out / "pub" / ("notes.txt" if tool == "Read" else ""))

    def approve(name, args, decision):
        return "yes" if decision.reason == f"reads outside the project: {approved.rstrip('/')}" else "no"

    calls = (reads(approved) if tool == "Read" else
             [("Grep", {"pattern": f"public|{SECRET}|n{i}", "path": approved}) for i in range(TRIES)])
    assert "public" in drive(repo, calls[:1], "auto", approve)[0][0]  # approved reads work
    flipper(out / "pub", out / "hidden")
    results, approvals, crashes = drive(repo, calls, "auto", approve)
    assert not crashes
    assert not [r for r in results if SECRET in r]
    assert any(a["answer"] == "yes" for a in approvals)
    assert sum("public" not in r for r in results) >= TRIES // 10  # the race hit


@pytest.mark.parametrize("what", ["dir", "file"])
def test_policy_never_raises_under_the_race(repo, flipper, what):
    """check and always (the approval panel's preview) on a path being swapped: a decision or no
    rule, never an exception; the unguarded resolve is shown to raise in the same race (control)."""
    name, target, path = race_target(repo, what)
    flipper(name, target)
    policy = Policy(root=repo, mode="auto")
    crashes, raw = [], 0
    for _ in range(3 * TRIES):
        for tool, args in (("Read", {"file_path": path}), ("Grep", {"pattern": "x", "path": path})):
            try:
                assert policy.check(tool, args).action in ("allow", "ask", "deny")
                assert isinstance(policy.always(tool, args, store=False), str)
            except Exception as e:  # noqa: BLE001 - counted
                crashes.append(e)
        try:
            resolve(repo, path, write=False, allow_outside=True)
        except (OSError, PathSwapped):  # PathSwapped: realpath's EINVAL, named
            raw += 1
    assert not crashes, crashes[:3]
    assert raw  # the control: the same race makes the unguarded resolve raise


def test_a_path_changing_under_the_check_is_an_error_result(repo):
    """A call judged on one file whose path names another file when it runs: an `error:` result
    the model can act on, not the other file."""
    (repo / "one.txt").write_text("one\n")
    (repo / "two.txt").write_text("two\n")
    d = Policy(root=repo, mode="auto").check("Read", {"file_path": "one.txt"})
    os.replace(repo / "two.txt", repo / "one.txt")  # another inode now has the judged name
    use = lambda args, d: run_tool(repo, "Read", args, allow_outside=d.inside is False,  # noqa: E731
                                   same_as=d.identity)  # as agent/loop/driver.py runs a judged call
    result = use({"file_path": "one.txt"}, d)
    assert result.startswith("error: the path changed after it was checked") and "two" not in result
    missing = Policy(root=repo, mode="auto").check("Read", {"file_path": "new.txt"})
    (repo / "new.txt").write_text("late\n")
    assert use({"file_path": "new.txt"}, missing).startswith("error: the path changed")


@pytest.mark.parametrize("what", ["dir", "file"])
@pytest.mark.parametrize("tool", ["Grep", "Read"])
def test_a_swap_under_the_tool_is_said_in_words(repo, flipper, what, tool):
    """Grep and Read of a path a process keeps swapping for a link to the outside (renameat2):
    every result is the file's text, `path outside the project`, `file not found`, `no matches
    found` or the one-line CHANGED error, never a raw `OSError: [Errno 22]` (Python's realpath meets a link
    that is gone by the time it reads it) and never the secret. The race is shown to hit: calls
    go on (up to 20 s) until one met the swap mid-resolve (CHANGED), which a loaded machine may
    never give; then every call that saw the swap at all (any answer but the file's text) stands."""
    name, target, path = race_target(repo, what)
    flipper(name, target)
    grep_path = path.split("/")[0] if what == "dir" else path
    words = ("safe", "error: path outside the project", "error: file not found", "no matches found",
             "error: " + CHANGED)
    results, deadline, i = [], time.monotonic() + 20, 0
    while i < TRIES or (time.monotonic() < deadline and not any(CHANGED in r for r in results)):
        args = ({"pattern": f"safe|{SECRET}|n{i}", "path": (grep_path, ".")[i % 2]} if tool == "Grep"
                else {"file_path": path, "limit": 1 + i % 7})
        results.append(run_tool(repo, tool, args))
        i += 1
    odd = [r for r in results if SECRET in r or not any(w in r for w in words)]
    assert not odd, odd[:3]
    assert not [r for r in results if "Errno" in r or "OSError" in r]
    seen = [r for r in results if not r.rstrip().endswith("safe")]  # outside, missing or changed
    assert len(seen) >= TRIES // 10, "the swap was never seen: this proves nothing"
