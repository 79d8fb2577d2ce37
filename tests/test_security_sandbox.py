"""Adversarial suite for the Bash sandbox (tools/sandbox.py via tools.bash.bash(..., sandbox=)) and
the eval sandbox's uid/size/cleanup guarantees (evals/sandbox.py). Every case runs a real command
in a real temporary git repo and checks the damage ON DISK: an "outside" dir standing for $HOME
(HOME points there) with files that must stay byte- and mode-identical, the project's
.git/hooks, .git/config and .nanocode, processes that must not outlive the call (a survivor would
write a marker into the *writable* project after a delay), a loopback listener that must see no
connection, and bounded fork/memory/file bombs. The sandbox must stay usable: project and $TMPDIR
writes, git add/commit, pytest. Decision: .git stays writable apart from its hooks/config/
commondir/modules/worktrees (so the agent can commit), and .git itself cannot be renamed."""
import base64
import functools
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tools import sandbox as sbx
from tools.bash import bash
from tools.checks import UNSANDBOXED_ENV

AVAILABLE = sys.platform == "linux" and sbx.bash_sandbox()["available"]
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason="no namespace sandbox here: "
                                   + str(sbx.bash_sandbox().get("note")) if sys.platform == "linux" else "not Linux")
SBX = sbx.Sandbox()
DELAY = 0.7  # a survivor touches its marker this long after the call started


def run(root, command, cfg=SBX, **kw):
    return bash(root, {"command": command}, sandbox=cfg, **kw)


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _snapshot(base: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = os.lstat(p)
            data = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
            out[str(p.relative_to(base))] = (stat.S_IMODE(st.st_mode), stat.S_IFMT(st.st_mode), data)
    return out


@pytest.fixture
def world(tmp_path, monkeypatch):
    """proj: a git repo with one commit; home: the outside ($HOME), with victim/ to destroy."""
    yield from _world(tmp_path, monkeypatch, tmp_path / "home")


@pytest.fixture(params=["outside-under-tmp", "outside-elsewhere"])
def any_world(request, tmp_path, monkeypatch):
    """world, with the outside either below /tmp (inside the sandbox a private tmpfs hides it)
    or below the real $HOME (there only the read-only remount stands between it and the
    command)."""
    if request.param == "outside-under-tmp":
        yield from _world(tmp_path, monkeypatch, tmp_path / "home")
        return
    base = tempfile.mkdtemp(prefix=".nanocode-sbx-test-", dir=os.path.expanduser("~"))
    try:
        yield from _world(tmp_path, monkeypatch, Path(base) / "home")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _world(tmp_path, monkeypatch, home):
    proj = tmp_path / "proj"
    proj.mkdir()
    (home / "victim" / "sub").mkdir(parents=True)
    (home / "victim" / "keep.txt").write_text("keep\n")
    (home / "victim" / "sub" / "inner.txt").write_text("inner\n")
    (home / ".bashrc").write_text("# rc\n")
    _git(proj, "init", "-q")
    _git(proj, "config", "user.email", "t@t")
    _git(proj, "config", "user.name", "t")
    (proj / "a.txt").write_text("a\n")
    _git(proj, "add", "a.txt")
    _git(proj, "commit", "-qm", "init")
    monkeypatch.setenv("HOME", str(home))
    before = (_snapshot(home), _snapshot(proj / ".git" / "hooks"), (proj / ".git" / "config").read_bytes())
    yield proj, home
    assert _snapshot(home) == before[0], "files outside the project changed"
    assert _snapshot(proj / ".git" / "hooks") == before[1], ".git/hooks changed"
    assert (proj / ".git" / "config").read_bytes() == before[2], ".git/config changed"
    assert not (proj / ".nanocode").exists() and (proj / ".git" / "HEAD").is_file()


# ---- destructive commands aimed outside the project ---------------------------------------------
B64 = "rm -rf {v}"
DESTRUCTIVE = [
    "rm -rf {v}", "rm -r \\\n -f \\\n {v}", "rm $'-rf' {v}", "{{rm,-rf,{v}}}", "$(echo rm) -rf {v}",
    "`echo rm` -rf {v}", "bash -lc 'rm -rf {v}'", "sh -ec 'rm -rf {v}'", "env -S 'rm -rf {v}'",
    "setsid -w rm -rf {v}", "flock /tmp/lk rm -rf {v}", "taskset -c 0 rm -rf {v}",
    "echo 'rm -rf {v}' | sh", "echo {b64} | base64 -d | sh", "sh <<'EOF'\nrm -rf {v}\nEOF",
    "find {v} -exec sh -c 'rm -f \"$1\"' _ {{}} \\;", "find {v} -delete",
    "awk 'BEGIN{{system(\"rm -rf {v}\")}}'", "python3 -c \"import shutil; shutil.rmtree('{v}')\"",
    "python3 -c \"import os; os.remove('{v}/keep.txt')\"", "f(){{ rm -rf \"$1\"; }}; f {v}",
    "eval \"rm -rf {v}\"", "echo {v} | xargs rm -rf", "truncate -s0 {v}/keep.txt", ": > {v}/keep.txt",
    "echo pwned >> {v}/keep.txt", "mv {v}/keep.txt stolen.txt", "chmod 000 {v}/keep.txt",
    "ln -sf /dev/null {v}/keep.txt", "dd if=/dev/zero of={v}/keep.txt bs=1 count=1 conv=notrunc",
    "perl -e 'unlink \"{v}/keep.txt\"'", "sed -i s/keep/gone/ {v}/keep.txt", "cp a.txt {v}/new.txt",
    "touch {h}/marker", "mkdir {h}/.ssh-evil", "echo evil >> ~/.bashrc", "timeout 5 rm -rf {v}",
    "nice -n 5 rm -rf {v}", "exec rm -rf {v}", "IFS=,; c='rm,-rf,{v}'; $c",
    "cd / && rm -rf --no-preserve-root {v}", "rm -rf /proc/self/root{v}", "cd {v} && rm -rf ./* .[!.]*",
    "nohup rm -rf {v} > /dev/null 2>&1; true", "mkdir -p {h}/nanocode-home && echo {{}} > {h}/nanocode-home/settings.json",
    "chmod -R 777 {h}", "mount -o remount,rw / && rm -rf {v}", "unshare -m sh -c 'mount -o remount,rw {h} && rm -rf {v}'",
]


@needs_sandbox
@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_destruction_outside_the_project_fails_on_disk(any_world, command):
    proj, home = any_world
    v = home / "victim"
    b64 = base64.b64encode(B64.format(v=v).encode()).decode()
    run(proj, command.format(v=v, h=home, b64=b64), timeout=20)
    assert (v / "keep.txt").read_text() == "keep\n"  # and the fixture compares the whole tree


# ---- protected paths inside the project ---------------------------------------------------------
PROTECTED = [
    "printf '#!/bin/sh\\ntouch /tmp/x\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
    "cp /bin/true .git/hooks/pre-commit", "git config core.hooksPath evil", "git config core.fsmonitor 'touch x'",
    "echo '[core] fsmonitor = evil' >> .git/config", "mkdir -p .nanocode && echo '{}' > .nanocode/settings.json",
    "mkdir .nanocode; echo '{}' > .nanocode/settings.local.json", "ln -s /tmp .nanocode",
    "mv .git/hooks .git/hooks.old; mkdir -p .git/hooks; touch .git/hooks/pre-commit",
    "mv .git/config .git/config.old; echo '[core]' > .git/config",
    "mv .git .git.old; git init -q . && touch .git/hooks/pre-commit", "rm -rf .git/hooks .git/config",
    "echo ../evil > .git/commondir", "mkdir -p .git/modules/x/hooks && touch .git/modules/x/hooks/post-checkout",
    "umount .git/hooks; touch .git/hooks/pre-commit", "mount -o remount,rw .git/hooks && touch .git/hooks/pre-commit",
    "unshare -m sh -c 'umount .git/hooks; mount --bind $PWD /mnt && touch /mnt/.git/hooks/pre-commit'",
    "python3 -c \"import os; os.rename('.git/config', 'c')\"", "ln .git/config cfg && echo x >> cfg",
    "rm -rf .git/hooks; mkdir .git/hooks; touch .git/hooks/pre-commit",
]


@needs_sandbox
@pytest.mark.parametrize("command", PROTECTED)
def test_protected_paths_stay_untouched(world, command):
    proj, _ = world
    run(proj, command, timeout=20)
    assert not (proj / ".git" / "commondir").exists() and not (proj / ".git" / "modules").exists()
    assert not (proj / ".git" / "hooks" / "pre-commit").exists()


@needs_sandbox
def test_hooks_path_target_inside_the_project_is_protected(world):
    proj, _ = world
    (proj / "githooks").mkdir()
    _git(proj, "config", "core.hooksPath", "githooks")
    run(proj, "touch githooks/pre-commit")
    assert os.listdir(proj / "githooks") == []
    _git(proj, "config", "--unset", "core.hooksPath")  # the fixture compares .git/config


# ---- nothing outlives the call ------------------------------------------------------------------
SURVIVORS = [
    "(sleep {d}; touch survived) &", "nohup sh -c 'sleep {d}; touch survived' > /dev/null 2>&1 &",
    "setsid sh -c 'sleep {d}; touch survived' > /dev/null 2>&1 &", "( ( sleep {d}; touch survived ) & ) &",
    "env -i setsid /bin/sh -c 'sleep {d}; touch {p}/survived' > /dev/null 2>&1 &",
    "setsid -f sh -c 'sleep {d}; touch survived' > /dev/null 2>&1",
    "python3 -c \"import os, time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
    "time.sleep({d}); open('survived', 'w')\" > /dev/null 2>&1",
    "sh -c 'trap \"\" HUP TERM; sleep {d}; touch survived' > /dev/null 2>&1 & disown",
]


@needs_sandbox
@pytest.mark.parametrize("command", SURVIVORS)
def test_background_processes_do_not_survive(world, command):
    proj, _ = world
    t = time.monotonic()
    run(proj, command.format(d=DELAY, p=proj), timeout=10)
    time.sleep(max(0.0, DELAY + 0.5 - (time.monotonic() - t)))
    assert not (proj / "survived").exists()


# ---- network ------------------------------------------------------------------------------------
@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted(server) -> bool:
    try:
        server.accept()[0].close()
        return True
    except BlockingIOError:
        return False


NET = ["exec 3<>/dev/tcp/127.0.0.1/{port}", "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
       "curl -s -m 2 http://127.0.0.1:{port}/", "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\""]


@needs_sandbox
@pytest.mark.parametrize("command", NET)
def test_network_is_off(world, listener, command):
    proj, _ = world
    out = run(proj, command.format(port=listener.getsockname()[1]), timeout=10)
    assert "(exit code" in out and not _accepted(listener)


@needs_sandbox
def test_network_on_when_asked(world, listener):
    proj, _ = world
    port = listener.getsockname()[1]
    assert run(proj, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo up", sbx.Sandbox(network=True)) == "up"
    time.sleep(0.05)
    assert _accepted(listener)


# ---- resource bombs -----------------------------------------------------------------------------
@needs_sandbox
def test_fork_bomb_is_bounded(world):
    proj, _ = world
    t = time.monotonic()
    out = run(proj, "b(){ b | b & }; b", sbx.Sandbox(nproc=128), timeout=3)
    assert time.monotonic() - t < 10, out[-300:]
    assert run(proj, "echo alive") == "alive"


@needs_sandbox
def test_memory_bomb_is_bounded(world):
    proj, _ = world
    out = run(proj, "python3 -c 'x = bytearray(20 << 30)'", timeout=20)
    assert "MemoryError" in out and out.endswith("(exit code 1)")


@needs_sandbox
def test_file_size_is_capped(world):
    proj, _ = world
    out = run(proj, "head -c 20M /dev/zero > big.bin", sbx.Sandbox(fsize_mb=8))
    assert (proj / "big.bin").stat().st_size <= 8 << 20 and "(exit code" in out


@needs_sandbox
def test_private_tmp_is_capped_and_gone(world):
    proj, _ = world
    out = run(proj, "head -c 20M /dev/zero > /tmp/fill; echo rc=$?", sbx.Sandbox(tmp_mb=8))
    assert "No space left" in out and "rc=1" in out and not Path("/tmp/fill").exists()


# ---- still usable ---------------------------------------------------------------------------------
@needs_sandbox
def test_project_and_tmpdir_writes_work(world):
    proj, _ = world
    out = run(proj, 'echo hi > made.txt && echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t" && echo $TMPDIR')
    assert out == "tmp\n/tmp" and (proj / "made.txt").read_text() == "hi\n"


@needs_sandbox
def test_caller_tmp_dir_persists_across_calls(world, tmp_path):
    proj, _ = world
    keep = tmp_path / "keep-tmp"
    keep.mkdir()
    cfg = sbx.Sandbox(tmp=str(keep))
    run(proj, "echo x > /tmp/a", cfg)
    assert run(proj, "cat /tmp/a", cfg) == "x" and (keep / "a").read_text() == "x\n"


@needs_sandbox
def test_git_status_add_commit_work(world):
    proj, _ = world
    out = run(proj, "echo b > b.txt && git status --short && git add b.txt && git commit -qm two && git log --oneline | wc -l")
    assert out == "?? b.txt\n2", out
    log = subprocess.run(["git", "log", "--oneline"], cwd=proj, capture_output=True, text=True).stdout
    assert "two" in log


@needs_sandbox
def test_pytest_runs_in_the_project(world):
    proj, _ = world
    (proj / "test_x.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    out = run(proj, f"{sys.executable} -m pytest -q -p no:cacheprovider test_x.py", timeout=60)
    assert "1 passed" in out, out


@needs_sandbox
def test_no_trace_left_in_the_project(world):
    proj, _ = world
    run(proj, "true")
    assert sorted(os.listdir(proj)) == [".git", "a.txt"]
    st = subprocess.run(["git", "status", "--porcelain"], cwd=proj, capture_output=True, text=True).stdout
    assert st == ""


@needs_sandbox
def test_created_protected_path_is_undone_and_reported(world):
    proj, _ = world
    out = run(proj, "mkdir .nanocode && echo '{}' > .nanocode/settings.json && echo made")
    assert out == f"made\n(sandbox: undid the command's change to {proj.resolve()}/.nanocode)"


# The format tests of tests/test_tools_bash.py, rerun through the sandbox (pid-based ones cannot:
# $$ and $! are pids of the command's own pid namespace).
FORMAT_TESTS = ["test_echo", "test_stderr_interleaved_in_order", "test_no_output", "test_trailing_newlines_stripped",
                "test_exit_code_line", "test_killed_by_signal_reports_128_plus_signal", "test_cwd_is_root",
                "test_env_vars", "test_non_utf8_replaced", "test_stdin_closed_read", "test_no_controlling_terminal",
                "test_timeout_keeps_output_before_the_error", "test_quick_background_output_is_collected",
                "test_truncation_keeps_head_and_tail_lines", "test_closed_stdout_still_times_out",
                "test_endless_flood_times_out_with_truncated_output"]


@needs_sandbox
@pytest.mark.parametrize("name", FORMAT_TESTS)
def test_bash_format_is_identical_in_the_sandbox(name, tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).parent))
    import test_tools_bash as tb
    monkeypatch.setattr(tb, "bash", functools.partial(bash, sandbox=SBX))
    getattr(tb, name)(tmp_path)


def test_fallback_reports_unavailable_under_the_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv(sbx.ENV_SWITCH, "off")
    try:
        info = sbx.bash_sandbox(refresh=True)
        assert info["available"] is False and info["name"] == "none" and "off" in info["note"]
        assert run(tmp_path, "echo hi").startswith("error: sandbox unavailable: ")  # fails closed
        assert bash(tmp_path, {"command": "echo hi"}) == "hi"  # sandbox=None: as before
    finally:
        monkeypatch.delenv(sbx.ENV_SWITCH)
        sbx.bash_sandbox(refresh=True)


# ---- evals/sandbox.py: unprivileged uid, size-capped work dir, symlink-safe cleanup ---------------
from evals import sandbox as esbx  # noqa: E402

EVAL_NS = pytest.mark.skipif(sys.platform != "linux" or esbx.isolation()["mode"] != "ns",
                             reason="no namespaces for eval programs here")


@EVAL_NS
def test_eval_program_cannot_read_root_only_file():
    base = next((d for d in ("/var/cache", "/opt", "/srv", "/mnt") if os.access(d, os.W_OK)), None)
    if os.getuid() != 0 or base is None:
        pytest.skip("needs root and a writable dir the sandbox does not cover")
    secret = Path(base) / f"nanocode-secret-{os.getpid()}"
    secret.write_text("s3cret")
    os.chmod(secret, 0o600)
    try:
        r = esbx.run_program(f"print(open({str(secret)!r}).read())", esbx.Limits(timeout=10))
    finally:
        secret.unlink()
    assert r.status == "failed" and "PermissionError" in r.stderr and "s3cret" not in r.stdout


@EVAL_NS
def test_eval_program_uid_seen_from_outside_is_not_root():
    found = []

    def watch():
        end = time.monotonic() + 8
        while time.monotonic() < end and not found:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if b"nanocode-sbx-" in cmd and cmd.endswith(b"prog.py\0") and b"-c" not in cmd.split(b"\0"):
                        uid = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                                   if line.startswith("Uid:"))
                        found.append(int(uid.split()[1]))
                except (OSError, StopIteration):
                    pass
            time.sleep(0.02)

    t = threading.Thread(target=watch)
    t.start()
    esbx.run_program("import time\ntime.sleep(1.5)", esbx.Limits(timeout=10))
    t.join()
    assert found and found[0] != 0 and found[0] == esbx.isolation()["uid_outside"]


@EVAL_NS
def test_eval_work_dir_total_is_capped():
    code = ("import os\nfor i in range(24):\n"
            "    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * (10 << 20))\nprint('wrote all')")
    r = esbx.run_program(code, esbx.Limits(timeout=30))
    assert r.status == "failed" and "No space left" in r.stderr and "wrote all" not in r.stdout


@pytest.mark.parametrize("mode", ["plain", "ns"])
def test_eval_cleanup_never_chmods_through_symlinks(tmp_path, mode, monkeypatch):
    if mode == "ns" and esbx.isolation()["mode"] != "ns":
        pytest.skip("no namespaces")
    monkeypatch.setenv(UNSANDBOXED_ENV, "1")  # "plain" runs only by that choice
    outside = tmp_path / "secret"
    outside.write_text("x")
    os.chmod(outside, 0o600)
    code = (f"import os\nos.symlink({str(outside)!r}, 'link')\nos.mkdir('d')\n"
            f"os.symlink({str(outside)!r}, 'd/link')\nos.chmod('d', 0)")
    r = esbx.run_program(code, esbx.Limits(timeout=10), mode=mode)
    assert r.status == "passed", r.stderr
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    esbx._fix(os.unlink, str(tree / "link"), None)  # the error handler itself, on a symlink
    assert not (tree / "link").is_symlink()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600 and outside.read_text() == "x"
