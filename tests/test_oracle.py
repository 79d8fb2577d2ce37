"""tasks/oracle.py on its own, with hand-written policies on a small real project (no task family):
OracleRollout runs every call through the real tools and records it, a refused call runs nothing,
each flaw adds its one defect and keeps the prose choices, replays are deterministic, a subclass
replays a policy without any tool, Task.system carries the memory file, oracle_first_call stops
before the first tool runs, and shows_flaw tells each flaw from its absence."""
import os
import random
import subprocess

import pytest

from nanocode.protocol import REJECTED, system_prompt
from tasks.oracle import OracleRollout, Task, oracle_first_call, shows_flaw
from tasks.phrasing import ASKS_MORE, SYCOPHANTIC
from tasks.projects import Project, setup_env
from tools.dispatch import run_tool


@pytest.fixture
def project(tmp_path):
    setup_env()
    root = tmp_path / "demo"
    (root / "demo").mkdir(parents=True)
    (root / "demo" / "core.py").write_text('def double(x):\n    """Twice x."""\n    return 2 * x\n')
    (root / "NANOCODE.md").write_text("# notes\n\n- keep it small\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(git + cmd, check=True)
    return Project("demo", str(root), "demo", ["demo/core.py"], {}, {}, {})


def edit_policy(r: OracleRollout):
    """Read, grep, an unsafe command, an Edit, the answer: one of each kind of step."""
    r.call(r.pick("reading core.", "let me read it."), "Read", {"file_path": "demo/core.py"})
    r.call("where is it?", "Grep", {"pattern": "def double"})
    r.call("noting it.", "Bash", {"command": "echo seen >> log.txt"})
    r.call(r.pick("fixing.", "editing it."), "Edit", {"file_path": "demo/core.py", "old_string": "2 * x",
                                                      "new_string": "x + x"})
    r.done(r.pick("done: `double` adds x to itself.", "`double` now adds x to itself."))


def make(project, policy=edit_policy, family="demo_family", seed=3) -> Task:
    return Task(family, seed, False, project, "make double add", lambda root, answer="": "adds" in answer,
                "answer says adds", policy, ["no_read", "repeat", "off_style", "asks_more"])


def test_calls_run_the_real_tools_and_are_recorded(project):
    want = run_tool(project.root, "Read", {"file_path": "demo/core.py"})
    task = make(project)
    conv = task.rollout()["messages"]
    assert conv[0] == {"role": "system", "content": task.system}
    assert conv[1] == {"role": "user", "content": "make double add"}
    assert conv[2]["tool_call"] == {"name": "Read", "args": {"file_path": "demo/core.py"}}
    assert conv[3] == {"role": "tool_result", "content": want}  # byte for byte what the agent sees
    assert [m["role"] for m in conv[2:]] == ["assistant", "tool_result"] * 4 + ["assistant"]
    assert project.read("log.txt") == "seen\n"  # the command ran, in the project
    assert "x + x" in project.read("demo/core.py")  # the Edit happened, on disk
    assert task.check(project.root, conv[-1]["content"])


def test_a_refused_call_runs_nothing_and_the_user_speaks(project):
    def policy(r):
        r.reject("cleaning up.", "Bash", {"command": "rm -rf demo"})
        r.user("no, keep the package")
        r.done("ok, i left it.")
    conv = make(project, policy).rollout()["messages"]
    assert os.path.isfile(project.path("demo/core.py"))
    assert conv[2:] == [
        {"role": "assistant", "content": "cleaning up.",
         "tool_call": {"name": "Bash", "args": {"command": "rm -rf demo"}}},
        {"role": "tool_result", "content": REJECTED}, {"role": "user", "content": "no, keep the package"},
        {"role": "assistant", "content": "ok, i left it."}]


def test_the_system_prompt_carries_the_memory_file(project):
    task = make(project)
    assert "keep it small" in task.system
    assert task.system == system_prompt(project.root, ("NANOCODE.md", "# notes\n\n- keep it small"))
    os.remove(project.path("NANOCODE.md"))
    assert task.system == system_prompt(project.root, None)  # read from disk each time


def test_a_replay_is_deterministic_whatever_else_draws_random_numbers(project):
    random.seed(1)
    first = make(project).rollout()["messages"]
    fresh(project)
    random.seed(2)
    random.random()
    assert make(project).rollout()["messages"] == first


def fresh(project):
    """The project as built: a flawed replay needs the untouched project."""
    subprocess.run(["git", "-C", project.root, "checkout", "-q", "--", "."], check=True)
    if os.path.exists(project.path("log.txt")):
        os.remove(project.path("log.txt"))


def test_each_flaw_adds_its_one_defect(project):
    chosen = make(project).rollout()
    calls = lambda conv: [m["tool_call"] for m in conv["messages"] if m.get("tool_call")]
    fresh(project)
    no_read = make(project).rollout("no_read")
    assert [c["name"] for c in calls(no_read)] == ["Grep", "Bash", "Edit"]
    fresh(project)
    repeat = make(project).rollout("repeat")
    assert [c["name"] for c in calls(repeat)] == ["Read", "Read", "Grep", "Bash", "Edit"]  # once, a safe one
    assert repeat["messages"][4]["content"] == "let me check that again."
    assert repeat["messages"][5] == repeat["messages"][3]  # the same real result again
    fresh(project)
    off = make(project).rollout("off_style")
    for c, o in zip(chosen["messages"], off["messages"]):
        if c["role"] == "assistant":  # the same prose choice, dressed up
            assert o["content"].startswith(tuple(SYCOPHANTIC))
            assert c["content"][1:] in o["content"] and o["content"] != c["content"]
        else:
            assert o == c
    fresh(project)
    more = make(project).rollout("asks_more")
    assert more["messages"][:-1] == chosen["messages"][:-1]
    assert more["messages"][-1]["content"] in [chosen["messages"][-1]["content"] + a for a in ASKS_MORE]
    for flaw, rejected in (("no_read", no_read), ("repeat", repeat), ("off_style", off), ("asks_more", more)):
        assert shows_flaw(flaw, chosen, rejected), flaw
        assert not shows_flaw(flaw, chosen, chosen), flaw


def test_repeat_repeats_only_a_safe_call(project):
    def policy(r):
        r.call("noting.", "Bash", {"command": "echo seen >> log.txt"})
        r.call("fixing.", "Edit", {"file_path": "demo/core.py", "old_string": "2 * x", "new_string": "x + x"})
        r.call("checking.", "Bash", {"command": "git status --short"})
        r.done("done.")
    conv = make(project, policy).rollout("repeat")["messages"]
    calls = [m["tool_call"]["args"].get("command", "Edit") for m in conv if m.get("tool_call")]
    assert calls == ["echo seen >> log.txt", "Edit", "git status --short", "git status --short"]
    assert project.read("log.txt") == "seen\n"


def test_a_subclass_replays_a_policy_without_running_a_tool(project):
    class Replay(OracleRollout):
        def call(self, thought, name, args):
            self.messages.append({"role": "assistant", "content": thought, "tool_call": {"name": name, "args": args}})
            return "(not run)"
    before = project.read("demo/core.py")
    task = make(project)
    r = Replay(task)
    task.policy(r)
    assert [m["tool_call"]["name"] for m in r.messages if m.get("tool_call")] == ["Read", "Grep", "Bash", "Edit"]
    assert project.read("demo/core.py") == before and not os.path.exists(project.path("log.txt"))


def test_oracle_first_call_stops_before_any_tool_runs(project):
    def rm_first(r):
        r.call("clearing.", "Bash", {"command": "rm demo/core.py"})
        r.done("done.")

    def refuse_first(r):
        r.reject("clearing.", "Bash", {"command": "rm demo/core.py"})
    assert oracle_first_call(make(project, rm_first)) == {"name": "Bash", "args": {"command": "rm demo/core.py"}}
    assert oracle_first_call(make(project, refuse_first)) == {"name": "Bash", "args": {"command": "rm demo/core.py"}}
    assert os.path.isfile(project.path("demo/core.py"))
    assert oracle_first_call(make(project, lambda r: r.done("nothing to run."))) is None


def conv(*messages):
    return {"messages": [{"role": "user", "content": "q"}, *messages]}


def a(text, call=None):
    return {"role": "assistant", "content": text, **({"tool_call": call} if call else {})}


def test_shows_flaw_wrong_file_retry_and_unknown():
    read = {"name": "Read", "args": {"file_path": "x.py"}}
    chosen = conv(a("reading.", read), {"role": "tool_result", "content": "1\tx"}, a("it is in x.py."))
    wrong = conv(a("reading.", read), {"role": "tool_result", "content": "1\tx"}, a("it is in y.py."))
    assert shows_flaw("wrong_file", chosen, wrong) and not shows_flaw("wrong_file", chosen, chosen)
    once = conv(a("rm.", read), {"role": "tool_result", "content": REJECTED}, a("ok."))
    twice = conv(a("rm.", read), {"role": "tool_result", "content": REJECTED}, a("rm.", read),
                 {"role": "tool_result", "content": REJECTED}, a("ok."))
    assert shows_flaw("retry", once, twice) and not shows_flaw("retry", twice, once)
    assert not shows_flaw("no_such_flaw", chosen, wrong)
    capital = conv(a("Done: it is in x.py."))  # no flaw can show in a replay that equals the original
    assert not shows_flaw("off_style", capital, capital)
    no_edit = conv(a("answer."))  # fewer Reads but no Edit: not the no_read flaw
    assert not shows_flaw("no_read", chosen, no_edit)
