"""tools/checks.py: how our checks run model-written code, and the commands that refuse to run any
where no OS sandbox starts unless the user passes --unsandboxed: evals agent, the code evals,
train synth, train rollouts and nanocode --best-of, each through its real CLI in a subprocess on
tiny inputs, the machine without a sandbox simulated with NANOCODE_SANDBOX=off. The attacks a
check contains are tests/test_security_checks.py's."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proc_state import with_cmdline
from tasks.projects import run_python
from test_evals_base_url import teacher
from tools import checks
from tools import sandbox as sbx

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = sys.platform == "linux" and sbx.bash_sandbox()["available"]
needs_sandbox = pytest.mark.skipif(not SANDBOX, reason="no OS sandbox here")
ASK = "pass --unsandboxed on a throwaway machine"


def cli(*argv, sandbox=False, cwd=ROOT) -> subprocess.CompletedProcess:
    """`python -m ...` from the worktree, on a machine with no sandbox unless `sandbox`; no
    choice to go on without one inherited."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(checks.UNSANDBOXED_ENV, None)
    if not sandbox:
        env[sbx.ENV_SWITCH] = "off"
    return subprocess.run([sys.executable, "-m", *map(str, argv)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def refused(r: subprocess.CompletedProcess, what: str) -> bool:
    """Exit status 2 and one line on stderr that names the problem and the way on."""
    lines = r.stderr.strip().splitlines()
    return (r.returncode == 2 and len(lines) == 1 and ASK in lines[0]
            and lines[0].startswith(f"error: no OS sandbox here ({sbx.ENV_SWITCH}=off): {what} runs"))


def warned(r: subprocess.CompletedProcess, what: str) -> bool:
    return f"warning: no OS sandbox here ({sbx.ENV_SWITCH}=off); --unsandboxed: {what} runs" in r.stderr


# ---- the routine ----------------------------------------------------------------------------------

@needs_sandbox
def test_a_check_runs_in_the_sandbox_without_the_callers_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-only")
    code = "import os; print(os.getpid(), os.environ.get('OPENAI_API_KEY'), os.environ['PYTHONDONTWRITEBYTECODE'])"
    ran = checks.run([sys.executable, "-c", code], str(tmp_path), 30)
    assert (ran.returncode, ran.output.split()) == (0, ["2", "None", "1"])  # pid 2: under the sandbox's init


def test_without_a_sandbox_a_check_is_refused_unless_chosen(tmp_path, monkeypatch, no_sandbox):
    with pytest.raises(checks.Refused, match="no OS sandbox here .*--unsandboxed"):
        run_python(str(tmp_path), "pass")
    monkeypatch.setenv(checks.UNSANDBOXED_ENV, "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-only")
    assert run_python(str(tmp_path), "import os, sys; sys.exit('OPENAI_API_KEY' in os.environ)")
    assert not run_python(str(tmp_path), "raise SystemExit(3)")


def test_a_check_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    secs = f"60.{os.getpid()}"  # a command line no other process has
    ran = checks.run(["bash", "-c", f"sleep {secs} & echo started; sleep {secs}"], str(tmp_path), 1)
    assert ran.timed_out and "started" in ran.output
    assert with_cmdline("sleep", secs) == []


def test_the_evals_unsandboxed_mode_needs_the_choice(monkeypatch):
    from evals import sandbox as esbx
    monkeypatch.setenv(checks.UNSANDBOXED_ENV, "0")
    r = esbx.run_program("print('ran')", esbx.Limits(timeout=10), mode="plain")
    assert r.status == "error" and ASK in r.stderr and r.stdout == ""
    monkeypatch.setenv(checks.UNSANDBOXED_ENV, "1")
    r = esbx.run_program("print('ran')", esbx.Limits(timeout=10), mode="plain")
    assert (r.status, r.stdout, r.isolation) == ("passed", "ran\n", "rlimits")


# ---- the commands -----------------------------------------------------------------------------------

def test_evals_agent_refuses_and_runs_by_choice_in_its_workers(tmp_path):
    argv = ("evals.cli", "agent", "--policy", "oracle", "--families", "fix_bug", "--limit", "2",
            "--workers", "2", "--quiet", "--out", tmp_path)
    assert refused(r := cli(*argv), "evals agent"), r.stderr
    assert not (tmp_path / "agent_oracle.json").exists()
    r = cli(*argv, "--unsandboxed")
    assert r.returncode == 0 and warned(r, "evals agent"), r.stderr
    s = json.loads((tmp_path / "agent_oracle.json").read_text())
    # the two spawned workers inherited the choice: their checks ran and the oracle resolved both
    assert s["unsandboxed"] is True and s["overall"]["resolved"] == 2, s["overall"]


@needs_sandbox
def test_evals_agent_with_a_sandbox_runs_its_checks_in_it(tmp_path):
    r = cli("evals.cli", "agent", "--policy", "oracle", "--families", "fix_bug,implement_stub", "--limit", "2",
            "--workers", "1", "--quiet", "--out", tmp_path, sandbox=True)
    assert r.returncode == 0 and "sandbox" not in r.stderr, r.stderr
    s = json.loads((tmp_path / "agent_oracle.json").read_text())
    assert s["unsandboxed"] is False and s["overall"]["resolved"] == 2, s["overall"]


def test_evals_humaneval_refuses_and_runs_by_choice(tmp_path):
    argv = ("evals.cli", "humaneval", "--canonical", "--limit", "2", "--quiet", "--out", tmp_path)
    assert refused(r := cli(*argv), "evals humaneval"), r.stderr
    r = cli(*argv, "--unsandboxed")
    assert r.returncode == 0 and warned(r, "evals humaneval"), r.stderr
    s = json.loads((tmp_path / "humaneval_canonical.json").read_text())
    assert s["unsandboxed"] is True and s["isolation"]["name"] == "rlimits" and s["statuses"] == {"passed": 2}


def test_train_synth_refuses_and_runs_by_choice(tmp_path):
    argv = ("train.cli", "synth", "--n", "3", "--n-eval", "1", "--workers", "1", "--out", tmp_path / "s",
            "--workdir", tmp_path / "work", "--families", "fix_bug")
    assert refused(r := cli(*argv), "train synth"), r.stderr
    r = cli(*argv, "--unsandboxed")
    assert r.returncode == 0 and warned(r, "train synth"), r.stderr
    assert json.loads((tmp_path / "s" / "stats.json").read_text())["unsandboxed"] is True


def test_train_rollouts_refuses_and_runs_by_choice(tmp_path):
    with teacher({}) as url:  # gives up on every task: no edit, the check runs on the tree as built
        argv = ("train.cli", "rollouts", "--base-url", url, "--n", "1", "--workers", "1", "--out", tmp_path / "r",
                "--workdir", tmp_path / "work")
        assert refused(r := cli(*argv), "train rollouts"), r.stderr
        r = cli(*argv, "--unsandboxed")
    assert r.returncode == 0 and warned(r, "train rollouts"), r.stderr
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["unsandboxed"] is True and (s["tasks"], s["errors"]) == (1, 0)


def test_best_of_refuses_and_runs_by_choice(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text("x = 1\n")
    with teacher({}) as url:
        argv = ("agent.cli", "-p", "what is x?", "--best-of", "2", "--base-url", url, "--trust", "--cwd", proj)
        assert refused(r := cli(*argv), "--best-of"), r.stderr
        r = cli(*argv, "--unsandboxed")
    assert r.returncode == 0 and warned(r, "--best-of"), r.stderr
