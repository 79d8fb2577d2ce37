"""The model's commands run in the project's Python environment, never nanocode's own
(tools/project_env.py). Every case builds real virtualenvs (`python -m venv --without-pip`) with a
module only that venv has (a file in its site-packages), a real git project, and runs the real
Bash tool (and the checks, the hooks, the sandbox): which `python` a command finds and what it
can import is the thing checked. nanocode's own venv is a real one too: a venv whose python
imports this worktree, running the Bash tool in a child process."""
import json
import os
import subprocess
import sys

import pytest

from agent.loop.hooks import run_hook
from agent.tui.app import NanocodeApp
from agent_builder import new_agent
from tools import checks, project_env, sandbox as sbx
from tools.bash import bash
from tools.permissions import Hook
from tools.project_env import OVERRIDE, choose
from tui_pilot import drive, engine, submit, tok, until  # noqa: F401 - fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANDBOX = sys.platform == "linux" and sbx.bash_sandbox()["available"]
needs_sandbox = pytest.mark.skipif(not SANDBOX, reason="no namespace sandbox here")
WHERE = "python -c 'import sys; print(sys.prefix)'; command -v python; echo VIRTUAL_ENV=$VIRTUAL_ENV"


def make_venv(path, module=None):
    """A real venv at `path` (no pip); `module`: a module only this venv has."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    if module:
        site = next(path.glob("lib/python*/site-packages"))
        (site / f"{module}.py").write_text(f"WHERE = {str(path)!r}\n")
    return path


@pytest.fixture
def proj(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "a.py").write_text("x = 1\n")
    return root


@pytest.fixture
def outside_env(monkeypatch):
    """No active venv and a PATH without this interpreter's own bin dir (the user's shell)."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.delenv(OVERRIDE, raising=False)
    own = os.path.join(sys.prefix, "bin")
    monkeypatch.setenv("PATH", os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                                               if os.path.realpath(d) != os.path.realpath(own)))


def run(root, command, **kw):
    return bash(root, {"command": command}, timeout=60, **kw)


def test_the_projects_venv_runs_the_commands(proj, outside_env):
    venv = make_venv(proj / ".venv", "onlyhere")
    out = run(proj, "python -c 'import onlyhere; print(onlyhere.WHERE)'; " + WHERE)
    assert out.splitlines() == [str(venv), str(venv), str(venv / "bin" / "python"), f"VIRTUAL_ENV={venv}"]
    assert choose(proj).label == f"project .venv (Python {sys.version.split()[0]})"


def test_venv_folder_is_used_when_there_is_no_dot_venv(proj, outside_env):
    venv = make_venv(proj / "venv", "onlyhere")
    assert run(proj, "python -c 'import onlyhere; print(onlyhere.WHERE)'") == str(venv)


def test_an_active_foreign_venv_wins_over_the_projects(proj, tmp_path, outside_env, monkeypatch):
    make_venv(proj / ".venv", "onlyhere")
    other = make_venv(tmp_path / "other", "onlyother")
    monkeypatch.setenv("VIRTUAL_ENV", str(other))
    out = run(proj, "python -c 'import onlyother'; python -c 'import onlyhere' 2>&1 | tail -1; " + WHERE)
    assert out.splitlines() == ["ModuleNotFoundError: No module named 'onlyhere'", str(other),
                                str(other / "bin" / "python"), f"VIRTUAL_ENV={other}"]
    version = sys.version.split()[0]
    assert (choose(proj).label, choose(proj).short) == (f"active venv {other} (Python {version})",
                                                        f"python venv other {version}")


CHILD = """
import json, sys
from tools.bash import bash
from tools.project_env import choose
print(json.dumps([bash(sys.argv[1], {"command": 'echo "$PATH"; echo "VIRTUAL_ENV=$VIRTUAL_ENV"'}),
                  choose(sys.argv[1]).label]))
"""


def nanocode_in_a_venv(tmp_path):
    """A venv standing for nanocode's own (pipx's, or one the user made and activated): its
    python imports this interpreter's packages (and, with PYTHONPATH, this worktree)."""
    own = make_venv(tmp_path / "nanocode-venv")
    site = next(own.glob("lib/python*/site-packages"))
    paths = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (site / "packages.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in paths))
    return own


@pytest.mark.parametrize("with_project_venv", [False, True])
def test_nanocodes_own_venv_never_leads_the_path(proj, tmp_path, with_project_venv):
    own = nanocode_in_a_venv(tmp_path)
    if with_project_venv:
        make_venv(proj / ".venv")
    env = {"HOME": os.environ.get("HOME", "/"), "VIRTUAL_ENV": str(own), "PYTHONPATH": ROOT,  # activated
           "PATH": os.pathsep.join([str(own / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])}
    r = subprocess.run([str(own / "bin" / "python"), "-c", CHILD, str(proj)], env=env, capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out, label = json.loads(r.stdout)
    path, virtual_env = out.splitlines()
    assert str(own / "bin") not in path.split(os.pathsep)
    if with_project_venv:
        assert path.split(os.pathsep)[0] == str(proj / ".venv" / "bin")
        assert virtual_env == f"VIRTUAL_ENV={proj / '.venv'}" and label.startswith("project .venv (Python ")
    else:
        assert path == "/usr/local/bin:/usr/bin:/bin" and virtual_env == "VIRTUAL_ENV="
        assert label.startswith("system python") or label == "no python on PATH"


def test_the_fallback_takes_nanocodes_bin_dir_out_of_path(tmp_path):
    own = make_venv(tmp_path / "own")
    env = choose(tmp_path, {"PATH": f"{own}/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(own)}, own=str(own))
    assert env.path == "/usr/bin:/bin" and env.virtual_env is None
    assert env.apply({"PATH": "x", "VIRTUAL_ENV": str(own)}) == {"PATH": "/usr/bin:/bin"}


PLAIN = {"PATH": "/usr/bin:/bin"}  # no active venv; own="": nanocode runs in no venv


def test_a_broken_venv_is_passed_over_with_a_note(proj):
    broken = make_venv(proj / ".venv")
    (broken / "bin" / "python").unlink()
    (broken / "bin" / "python").symlink_to("/nonexistent/python3.9")
    env = choose(proj, PLAIN, own="")
    assert env.path == "/usr/bin:/bin" and env.virtual_env is None and env.short.endswith("(.venv not used)")
    assert env.label.startswith("system python")
    assert env.label.endswith(" [not used: project .venv is broken: bin/python points to '/nonexistent/"
                              f"python3.9', which is gone; recreate it (python3 -m venv --clear {broken})]")


def test_a_foreign_or_unfinished_venv_is_passed_over_with_a_note(proj, tmp_path):
    (proj / ".venv" / "Scripts").mkdir(parents=True)
    no_cfg = make_venv(proj / "venv")
    (no_cfg / "pyvenv.cfg").unlink()
    label = choose(proj, {**PLAIN, "VIRTUAL_ENV": str(tmp_path / "gone")}, own="").label
    assert label.split(" [not used: ")[1:] == [
        f"active venv {tmp_path / 'gone'} is not a folder]",
        "project .venv was made on Windows (Scripts, no bin/python); recreate it here]",
        "project venv is not a virtualenv (no pyvenv.cfg)]"]


def test_a_venv_git_tracks_is_not_used(proj, outside_env):
    """A repository that ships `.venv/bin/git` (or any command) must not replace the user's."""
    venv = make_venv(proj / ".venv")
    (venv / "bin" / "git").write_text("#!/bin/sh\necho planted\n")
    (venv / "bin" / "git").chmod(0o755)
    subprocess.run(["git", "add", "-f", ".venv/bin/git"], cwd=proj, check=True)
    assert "planted" not in run(proj, "git --version")
    assert "not used: project .venv is tracked by git" in choose(proj).label


def test_checks_and_hooks_use_the_projects_venv(proj, outside_env):
    make_venv(proj / ".venv", "onlyhere")
    ran = checks.run(["bash", "-c", "python -c 'import onlyhere'"], str(proj), 60)
    assert ran.returncode == 0, ran.output
    hook = Hook("PostToolUse", "python -c 'import onlyhere' || exit 3")
    sandbox = sbx.Sandbox() if SANDBOX else None
    assert run_hook(proj, hook, {}, sandbox).code == 0


def test_the_task_harness_chooses_its_own_interpreter(proj, monkeypatch):
    """... and its commands load no installed pytest plugin (the switch reaches the Bash tool)."""
    from tasks.projects import setup_env
    for name in ("PATH", "PYTHONDONTWRITEBYTECODE", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", OVERRIDE,
                 "PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    setup_env()
    code = "import os, sys; print(sys.prefix, os.environ.get('PYTEST_DISABLE_PLUGIN_AUTOLOAD'))"
    assert run(proj, f'python -c "{code}"') == f"{sys.prefix} 1"


@needs_sandbox
def test_sandboxed_commands_run_the_projects_venv_and_a_venv_under_tmp(proj, tmp_path, outside_env, monkeypatch):
    """The project's .venv (read-only inside) and an active venv outside the project under /tmp,
    which the sandbox covers with a private tmpfs: its whole folder is carried, not only bin/."""
    make_venv(proj / ".venv", "onlyhere")
    out = run(proj, "python -c 'import onlyhere; print(onlyhere.WHERE)'; touch .venv/x 2>&1 | tail -1",
              sandbox=sbx.Sandbox())
    assert out.splitlines()[0] == str(proj / ".venv") and "Read-only file system" in out
    assert str(tmp_path).startswith("/tmp/"), "the second case needs a venv under /tmp"
    other = make_venv(tmp_path / "other", "onlyother")
    monkeypatch.setenv("VIRTUAL_ENV", str(other))
    assert run(proj, "python -c 'import onlyother; print(onlyother.WHERE)'", sandbox=sbx.Sandbox()) == str(other)


def test_status_line_and_settings_name_the_environment(engine, proj, outside_env):
    """The real TUI: its status line and /settings (the plain and headless faces share the
    /settings command, agent/commands.py)."""
    make_venv(proj / ".venv")
    version = sys.version.split()[0]
    app = NanocodeApp(agent=new_agent(engine, proj), model_name="tiny")

    async def body(pilot):
        await until(pilot, lambda: f"python .venv {version}" in str(app.query_one("#status").content))
        await submit(pilot, "/settings")
        await until(pilot, lambda: "python for commands:" in app.transcript_text())
        assert f"python for commands: project .venv (Python {version})" in app.transcript_text()
    drive(app, body, size=(160, 40))


def test_best_of_tests_its_copies_with_the_projects_venv(proj, outside_env):
    """--best-of's copies leave the (ignored) in-project .venv out; the rollouts' test runs still
    use it: its python runs pytest and imports what only it has."""
    from agent.loop.best_of import BestOfOptions, best_of
    from nanocode.protocol import TurnResult
    from tiny_models import commit_all
    venv = make_venv(proj / ".venv", module="onlyhere")
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "outer.pth").write_text(next(p for p in sys.path if p.endswith("site-packages")) + "\n")
    (proj / ".gitignore").write_text(".venv/\n")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_a.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nimport onlyhere\n\n\ndef test_x():\n"
        "    from a import x\n    assert x == 2\n")
    commit_all(proj)

    class Stub:
        def __init__(self, root, temperature=0.0, seed=0):
            self.root, self.messages, self.meta = root, [{"role": "system", "content": "s"}], {}

    def drive(agent, prompt):
        (proj.parent / agent.root / "a.py").write_text("x = 2\n")
        return [TurnResult(answer="set", steps=1)]
    res = best_of(Stub, proj, "set x to 2", BestOfOptions(1), drive=drive)
    assert res.test_command.startswith("python ")  # the copies' PATH finds the project's python
    assert res.rollouts[0].tests_passed is True, res.rollouts[0].tests_output
    assert res.applied == ["a.py"] and (proj / "a.py").read_text() == "x = 2\n"
    assert OVERRIDE not in os.environ  # put back after the rollouts


def test_a_long_venv_name_is_cut_on_the_status_line(proj, tmp_path, monkeypatch, outside_env):
    """The status line names a venv in at most SHORT_NAME characters (its end kept); the full
    path stays in the label /settings prints."""
    long = make_venv(tmp_path / "tmp.qnfsCD7rHF" / "venv")
    monkeypatch.setenv("VIRTUAL_ENV", str(long))
    env = choose(proj)
    name = env.short.split()[2]
    assert len(name) == project_env.SHORT_NAME and name == "…" + "tmp.qnfsCD7rHF/venv"[-13:]
    assert str(long) in env.label
