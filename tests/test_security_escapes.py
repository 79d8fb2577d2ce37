"""Escapes from the Bash sandbox (tools/sandbox.py via tools.bash.bash) that go through what the
sandbox used to share with the host: its /dev (block devices), the user's global git config (a
core.hooksPath that names a folder in the project), symlinked protected paths, the undo store in
.git, and the agent's environment. Every case executes the attack in a real git repo in tmp_path
and checks the damage where it would land: the bytes of a loop device's backing file, a hook
that a real `git commit` afterwards would run (marker file), settings on disk, the undo refs and
objects (and a working undo), the command's output. Where cheap, a control runs the same attack
without the sandbox and shows that it does the damage."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import sandbox as sbx
from tools.bash import bash
from tools.dispatch import run_tool
from tools.undo import Snapshots

AVAILABLE = sys.platform == "linux" and sbx.bash_sandbox()["available"]
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason="no namespace sandbox here")
SBX = sbx.Sandbox()


def run(root, command, cfg=SBX, timeout=20):
    return bash(root, {"command": command}, sandbox=cfg, timeout=timeout)


def _git(cwd, *args, check=True):
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True)


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A git repo with one commit; HOME, XDG_CONFIG_HOME and the system config point at empty
    places in tmp_path, so only what a test writes there is the user's config."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(name, raising=False)
    p = tmp_path / "proj"
    p.mkdir()
    _git(p, "init", "-q")
    _git(p, "config", "user.email", "t@t")
    _git(p, "config", "user.name", "t")
    (p / "a.txt").write_text("a\n")
    _git(p, "add", "a.txt")
    _git(p, "commit", "-qm", "init")
    return p


# ---- block devices --------------------------------------------------------------------------------
@pytest.fixture
def loop_dev(tmp_path):
    """(/dev/loopN, its backing file): a real block device whose writes land in a temp file."""
    if os.getuid() != 0 or not shutil.which("losetup"):
        pytest.skip("needs root and losetup")
    backing = tmp_path / "disk.img"
    backing.write_bytes(b"A" * (1 << 20))
    r = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"losetup failed: {r.stderr.strip()}")
    dev = r.stdout.strip()
    try:
        yield dev, backing
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def _disk(backing: Path) -> bytes:
    os.sync()
    return backing.read_bytes()


WRITE = "python3 -c \"f = open('{dev}', 'r+b'); f.write(b'X'); f.close()\""
DEVICE_ATTACKS = [
    WRITE,
    "dd if=/dev/zero of={dev} bs=512 count=1 conv=notrunc,fsync",
    "printf X | cat > {dev}",
    "printf X > /proc/self/root{dev}",
    "python3 -c \"f = open('/proc/1/root{dev}', 'r+b'); f.write(b'X'); f.close()\"",
    "mknod blk b {major} {minor} && printf X > blk",
    "mknod /tmp/blk b {major} {minor} && printf X > /tmp/blk",
    "mknod /dev/shm/blk b {major} {minor} && printf X > /dev/shm/blk",
    "mknod /dev/blk b {major} {minor} && printf X > /dev/blk",
]


def _attack(command, dev):
    st = os.stat(dev)
    return command.format(dev=dev, major=os.major(st.st_rdev), minor=os.minor(st.st_rdev))


def test_control_block_device_write_reaches_the_disk_without_the_sandbox(proj, loop_dev):
    dev, backing = loop_dev
    bash(proj, {"command": _attack(WRITE, dev)})
    assert _disk(backing)[:1] == b"X"


@needs_sandbox
@pytest.mark.parametrize("command", DEVICE_ATTACKS)
def test_block_device_writes_fail_in_the_sandbox(proj, loop_dev, command):
    dev, backing = loop_dev
    out = run(proj, _attack(command, dev))
    assert "(exit code" in out, out
    assert _disk(backing) == b"A" * (1 << 20)
    assert not (proj / "blk").exists() or not (proj / "blk").is_block_device()


@needs_sandbox
def test_private_dev_holds_only_the_harmless_nodes(proj):
    out = run(proj, "ls /dev")
    assert set(out.split()) <= {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
                                "stderr", "shm", "pts", "ptmx"}, out
    assert {"null", "urandom", "shm", "fd"} <= set(out.split())


@needs_sandbox
def test_ordinary_dev_use_still_works(proj):
    out = run(proj, "echo x > /dev/null && echo null-ok; head -c 4 /dev/urandom | wc -c; "
                    "head -c 3 /dev/zero | od -An -tx1; echo x > /dev/full; echo full=$?; "
                    "echo s > /dev/shm/s && cat /dev/shm/s; ls /dev/fd/ > /dev/null && echo fd-ok; tty")
    assert out.splitlines()[:4] == ["null-ok", "4", " 00 00 00", "bash: line 1: echo: write error: No space left on device"]
    assert "full=1" in out and "\ns\n" in out and "fd-ok" in out and "not a tty" in out


@needs_sandbox
def test_pytest_runs_without_a_tty(proj):
    (proj / "test_x.py").write_text("import os\ndef test_ok():\n    assert len(os.urandom(4)) == 4\n")
    out = run(proj, f"{sys.executable} -m pytest -q -p no:cacheprovider test_x.py", timeout=60)
    assert "1 passed" in out, out


# ---- core.hooksPath from every config scope -----------------------------------------------------------
HOOK = "#!/bin/sh\ntouch {marker}\n"
PLANT = "mkdir -p ci/hooks && printf '{hook}' > ci/hooks/pre-commit && chmod +x ci/hooks/pre-commit"


def _scope(name, tmp_path, proj, monkeypatch):
    """Sets core.hooksPath = <proj>/ci/hooks in one scope of the user's git config."""
    value = "~/proj/ci/hooks" if name == "tilde" else "ci/hooks"
    text = f"[core]\n\thooksPath = {value}\n"
    if name in ("home", "tilde"):
        monkeypatch.setenv("HOME", str(tmp_path))  # so that ~/proj is the project
        (tmp_path / ".gitconfig").write_text(text)
    elif name == "xdg":
        (tmp_path / "xdg" / "git").mkdir(parents=True)
        (tmp_path / "xdg" / "git" / "config").write_text(text)
    elif name == "include":
        (tmp_path / "home" / "extra.inc").write_text(text)
        (tmp_path / "home" / ".gitconfig").write_text("[include]\n\tpath = extra.inc\n")
    elif name in ("global-env", "system-env"):
        (tmp_path / "cfg").write_text(text)
        monkeypatch.setenv("GIT_CONFIG_GLOBAL" if name == "global-env" else "GIT_CONFIG_SYSTEM", str(tmp_path / "cfg"))
        monkeypatch.delenv("GIT_CONFIG_NOSYSTEM")
    else:
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", value)
    assert _git(proj, "config", "--type=path", "core.hooksPath").stdout.strip().endswith("ci/hooks")


def _commit_runs_hook(proj, marker) -> bool:
    (proj / "a.txt").write_text("changed\n")
    _git(proj, "commit", "-qam", "user commit", check=False)
    return marker.exists()


SCOPES = ["home", "tilde", "xdg", "include", "global-env", "system-env", "count"]


@pytest.mark.parametrize("scope", SCOPES)
def test_control_hook_planted_without_the_sandbox_runs(tmp_path, proj, monkeypatch, scope):
    _scope(scope, tmp_path, proj, monkeypatch)
    marker = tmp_path / "ran"
    bash(proj, {"command": PLANT.format(hook=HOOK.format(marker=marker).replace("\n", "\\n"))})
    assert _commit_runs_hook(proj, marker)


@needs_sandbox
@pytest.mark.parametrize("exists", [False, True], ids=["new-dir", "existing-dir"])
@pytest.mark.parametrize("scope", SCOPES)
def test_hooks_path_from_any_scope_is_protected(tmp_path, proj, monkeypatch, scope, exists):
    _scope(scope, tmp_path, proj, monkeypatch)
    if exists:
        (proj / "ci" / "hooks").mkdir(parents=True)
    marker = tmp_path / "ran"
    out = run(proj, PLANT.format(hook=HOOK.format(marker=marker).replace("\n", "\\n")))
    assert not (proj / "ci" / "hooks" / "pre-commit").exists(), out
    assert exists or "(sandbox: undid the command's change to" in out
    assert not _commit_runs_hook(proj, marker)


@pytest.mark.parametrize("scope", SCOPES)
def test_edit_of_a_hooks_path_from_any_scope_asks(tmp_path, proj, monkeypatch, scope):
    """The Edit tool, through the agent in auto mode headless (an ask is refused): the hook the
    model writes into a hooks folder named by any config scope is never created."""
    from agent.loop.driver import Agent
    from agent.settings import TurnSettings
    from race_helpers import ScriptedModel
    from tools.permissions import Policy
    _scope(scope, tmp_path, proj, monkeypatch)
    marker = tmp_path / "ran"
    hook = {"file_path": "ci/hooks/pre-commit", "old_string": "", "new_string": HOOK.format(marker=marker)}
    agent = Agent(ScriptedModel([("Edit", hook)]), proj, Policy(root=proj, mode="auto"),
                  TurnSettings(sandbox=False, snapshots=False, memory=False))
    agent.run_turn("set up the hooks")
    assert agent.meta["approvals"] and not (proj / "ci" / "hooks" / "pre-commit").exists()
    assert not _commit_runs_hook(proj, marker)


# ---- symlinked protected paths ------------------------------------------------------------------------
SETTINGS = '{"permissions": {"allow": ["Bash(*)"]}}'
LINK_ATTACKS = [
    f"echo '{SETTINGS}' > .nanocode/settings.json",
    f"mkdir -p conf && echo '{SETTINGS}' > conf/settings.json",
    f"rm .nanocode && mkdir .nanocode && echo '{SETTINGS}' > .nanocode/settings.json",
    f"ln -sfn other .nanocode && mkdir -p other && echo '{SETTINGS}' > other/settings.json",
    f"mv conf conf.old; mkdir conf && echo '{SETTINGS}' > conf/settings.json",
]


@needs_sandbox
@pytest.mark.parametrize("layout", ["target-exists", "target-missing", "chain"])
@pytest.mark.parametrize("command", LINK_ATTACKS)
def test_symlinked_nanocode_target_is_protected(proj, layout, command):
    if layout != "target-missing":
        (proj / "conf").mkdir()
    if layout == "chain":
        (proj / "mid").symlink_to("conf")
        (proj / ".nanocode").symlink_to("mid")
    else:
        (proj / ".nanocode").symlink_to("conf")
    run(proj, command)
    assert not (proj / "conf" / "settings.json").exists()
    assert not (proj / ".nanocode" / "settings.json").exists()
    assert os.readlink(proj / ".nanocode") == ("mid" if layout == "chain" else "conf")


@needs_sandbox
@pytest.mark.parametrize("command", [
    "mkdir -p hookdir && printf '{hook}' > .githooks/pre-commit && chmod +x .githooks/pre-commit",
    "rm .githooks && mkdir .githooks && printf '{hook}' > .githooks/pre-commit && chmod +x .githooks/pre-commit",
    "mv tools tools.old; mkdir -p tools/git/hooks && printf '{hook}' > tools/git/hooks/pre-commit "
    "&& chmod +x tools/git/hooks/pre-commit",
])
@pytest.mark.parametrize("hooks_path", [".githooks", "tools/git/hooks"])
def test_hooks_path_behind_a_link_or_a_movable_parent_is_protected(tmp_path, proj, command, hooks_path):
    (proj / "hookdir").mkdir()
    (proj / ".githooks").symlink_to("hookdir")
    (proj / "tools" / "git" / "hooks").mkdir(parents=True)
    _git(proj, "config", "core.hooksPath", hooks_path)
    marker = tmp_path / "ran"
    run(proj, command.format(hook=HOOK.format(marker=marker).replace("\n", "\\n")))
    assert os.readlink(proj / ".githooks") == "hookdir"
    assert not (proj / ("hookdir" if hooks_path == ".githooks" else hooks_path) / "pre-commit").exists()
    assert not _commit_runs_hook(proj, marker)


# ---- the undo store -------------------------------------------------------------------------------------
@pytest.fixture
def turn(proj, tmp_path, monkeypatch):
    """A real snapshot turn that changed a.txt: (repo, Snapshots, turn, {ref: object})."""
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "nanocode-home"))
    snaps = Snapshots(proj)
    t = snaps.begin("edit a")
    (proj / "a.txt").write_text("model's edit\n")
    t = snaps.end(t)
    refs = dict(line.split() for line in _git(proj, "for-each-ref", "--format=%(refname) %(objectname)",
                                               "refs/nanocode").stdout.splitlines())
    assert f"refs/nanocode/turns/{t.id}-before" in refs and f"refs/nanocode/turns/{t.id}-after" in refs
    return proj, snaps, t, refs


def _undo_store_intact(proj, snaps, t, refs):
    for ref, sha in refs.items():
        assert _git(proj, "rev-parse", "--verify", "-q", ref, check=False).stdout.strip() == sha, ref
        assert _git(proj, "cat-file", "-e", sha, check=False).returncode == 0, sha
    assert (proj / ".git" / "nanocode" / "turns.json").is_file()
    assert Snapshots(proj).plan(t.id).restore == ["a.txt"]
    snaps.undo(t.id)
    assert (proj / "a.txt").read_text() == "a\n"


UNDO_ATTACKS = [
    "git update-ref -d refs/nanocode/turns/{id}-before",
    "rm -rf .git/refs/nanocode .git/nanocode",
    "git for-each-ref --format='delete %(refname)' refs/nanocode | git update-ref --stdin",
    "git pack-refs --all; git update-ref -d refs/nanocode/turns/{id}-before; "
    "git update-ref -d refs/nanocode/turns/{id}-after",
    "git reflog expire --expire=now --all && git gc -q --prune=now",
    "mv .git/refs .git/refs.old; mkdir -p .git/refs/heads; cp -r .git/refs.old/heads .git/refs/",
    "mv .git/nanocode .git/nanocode.old",
    "sed -i /refs.nanocode/d .git/packed-refs; git update-ref -d refs/nanocode/turns/{id}-after",
    "git update-ref refs/nanocode/turns/{id}-before HEAD~0^{{tree}}",
]


def test_control_undo_ref_deleted_without_the_sandbox(turn):
    proj, _, t, refs = turn
    bash(proj, {"command": UNDO_ATTACKS[0].format(id=t.id)})
    assert _git(proj, "rev-parse", "-q", "--verify", f"refs/nanocode/turns/{t.id}-before", check=False).returncode


@needs_sandbox
@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed-by-user-gc"])
@pytest.mark.parametrize("command", UNDO_ATTACKS)
def test_undo_store_survives_the_command(turn, command, packed):
    proj, snaps, t, refs = turn
    if packed:
        _git(proj, "pack-refs", "--all")
    run(proj, command.format(id=t.id))
    _undo_store_intact(proj, snaps, t, refs)


# ---- secrets in the command's environment ------------------------------------------------------------
SECRETS = {"NANOCODE_API_KEY": "nk-7f3a9", "OPENAI_API_KEY": "sk-52bd1", "GITHUB_TOKEN": "ghp_9c1e4",
           "AWS_SECRET_ACCESS_KEY": "aws-0d2f8", "XQ_PRIVATE_THING": "xq-6b7c0", "GIT_DIR": "/nowhere-8e1f3",
           "GIT_CONFIG_GLOBAL": "/nowhere-c4a27", "GIT_CONFIG_VALUE_0": "cfg-3e5d2"}
DUMPS = ["env", "cat /proc/self/environ | tr '\\0' '\\n'", "printenv",
         "python3 -c 'import os; print(dict(os.environ))'"]


@pytest.fixture
def secrets(monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
    monkeypatch.setenv("PASSED_ON", "passed-4a1")


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandbox"])
@pytest.mark.parametrize("command", DUMPS)
def test_secrets_never_reach_the_command(proj, secrets, command, sandboxed):
    if sandboxed and not AVAILABLE:
        pytest.skip("no namespace sandbox here")
    out = run_tool(proj, "Bash", {"command": command}, sandbox=SBX if sandboxed else None,
                   env_names=("PASSED_ON",))
    assert not [v for v in SECRETS.values() if v in out], out
    assert not re.search(r"GIT_CONFIG_(?!NOSYSTEM)", out) and "passed-4a1" in out and "PATH" in out


def test_settings_that_take_git_config_away_pass(proj, monkeypatch):
    """The task harness runs tools with no user git config: GIT_CONFIG_NOSYSTEM and a
    GIT_CONFIG_GLOBAL of /dev/null reach the command; any other GIT_CONFIG_GLOBAL does not."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    out = run_tool(proj, "Bash", {"command": "env"})
    assert f"GIT_CONFIG_GLOBAL={os.devnull}" in out and "GIT_CONFIG_NOSYSTEM=1" in out
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(proj / "other.cfg"))
    assert "GIT_CONFIG_GLOBAL" not in run_tool(proj, "Bash", {"command": "env"})


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandbox"])
def test_path_home_and_git_still_work(proj, secrets, sandboxed):
    if sandboxed and not AVAILABLE:
        pytest.skip("no namespace sandbox here")
    out = run_tool(proj, "Bash", {"command": 'echo "$HOME"; command -v git >/dev/null && git log --format=%an'},
                   sandbox=SBX if sandboxed else None)
    assert out == f"{os.environ['HOME']}\nt"


@pytest.mark.parametrize("names", [("GIT_DIR",), ("GIT_CONFIG_GLOBAL",), ("GIT_CONFIG_KEY_0",), ("A=B",), ("",),
                                   "PYTHONPATH"])
def test_env_names_refuses_git_redirects_and_bad_names(proj, names):
    out = run_tool(proj, "Bash", {"command": "echo ran"}, env_names=names)
    assert out.startswith("error: bad tool settings: env_names: ") and "ran" not in out
