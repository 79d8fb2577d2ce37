"""evals: pass@k, the sandbox (timeouts, fork bombs, memory, writes, stdin, network, parallel),
the task formats and HumanEval harness validity (canonical pass, stubs fail)."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals import sandbox, tasks
from evals.passk import mean_pass_at_k, pass_at_k

ROOT = Path(__file__).resolve().parents[1]
FAST = sandbox.Limits(timeout=5)


# ---- pass@k -------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, c, k, want", [
    (5, 2, 1, 0.4),  # c/n
    (10, 3, 10, 1.0),  # n - c < k: every 10-subset holds a pass
    (10, 0, 1, 0.0), (10, 0, 10, 0.0),
    (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (6, 2, 3, 0.8),  # 1 - C(4,3)/C(6,3) = 1 - 4/20
    (10, 10, 1, 1.0),
])
def test_pass_at_k_hand_computed(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_pass_at_k_large_n_is_stable_and_mean_skips_k_above_n():
    assert 0 < pass_at_k(2000, 3, 100) < 1  # C(2000, 100) overflows floats
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5)
    assert mean_pass_at_k([(5, 2), (5, 0)], (1, 10)) == {"pass@1": pytest.approx(0.2)}
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)


# ---- sandbox ------------------------------------------------------------------------------------
def test_pass_fail_and_scrubbed_env():
    ok = sandbox.run_program("import os, sys\nprint(os.getcwd() == os.environ['HOME'], sorted(os.environ))\n"
                             "open('scratch.txt', 'w').write('ok')", FAST)
    assert ok.status == "passed", ok.stderr
    assert ok.stdout.startswith("True") and "NANOCODE" not in ok.stdout and "PYTEST" not in ok.stdout
    bad = sandbox.run_program("assert 1 == 2, 'boom'", FAST)
    assert bad.status == "failed" and "boom" in bad.stderr


def test_infinite_loop_times_out():
    t = time.perf_counter()
    r = sandbox.run_program("while True: pass", sandbox.Limits(timeout=1.5))
    assert r.status == "timeout" and time.perf_counter() - t < 10


def _alive(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def test_fork_bomb_is_contained_and_every_process_is_gone():
    marker = f"forkbomb{os.getpid()}"
    code = (f"# {marker}\nimport os, time\nborn = 0\n"
            "print(os.getcwd(), flush=True)\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            f"    os.execv('/bin/sh', ['sh', '-c', 'sleep 30; : {marker}'])\n"
            "for _ in range(3000):\n"  # bounded: at most 3000 forks, each child sleeps then exits
            "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            "    if pid == 0:\n        time.sleep(20)\n        os._exit(0)\n    born += 1\n"
            "print('born', born, flush=True)\n"
            "time.sleep(30)\n")
    r = sandbox.run_program(code, sandbox.Limits(timeout=3, nproc=64))
    assert r.status == "timeout"
    iso = sandbox.isolation()
    if "pids" in iso["cgroups"] or iso["nproc"] == "enforced":
        assert int(r.stdout.split()[2]) < 64  # the process limit held
    work = r.stdout.split()[0]
    time.sleep(0.3)
    assert not _alive(marker) and not _alive(work), _alive(marker) + _alive(work)


def test_huge_allocation_is_oom_not_host_oom():
    r = sandbox.run_program("x = bytearray(10 * 1024**3)\nprint(len(x))", FAST)
    assert r.status == "oom", (r.status, r.stderr[-300:])


def test_stdin_is_eof():
    r = sandbox.run_program("import sys\nassert sys.stdin.read() == ''\nprint('eof')", FAST)
    assert r.status == "passed" and r.stdout == "eof\n", r.stderr


def test_writes_outside_the_temp_dir(tmp_path):
    """Outside the work dir: /tmp is a private tmpfs (the host's /tmp is out of sight) and every
    other mount is read-only (here: a file in your home directory, removed if it ever appears)."""
    hidden = tmp_path / "pwned.txt"
    readonly = Path.home() / f".nanocode-pwned-{os.getpid()}.txt"
    rs = [sandbox.run_program(f"open({str(t)!r}, 'w').write('x')", FAST) for t in (hidden, readonly)]
    if not sandbox.isolation()["readonly_fs"]:
        hidden.unlink(missing_ok=True)
        readonly.unlink(missing_ok=True)
        pytest.skip("no mount namespace here: rlimits alone cannot stop writes outside the temp dir")
    assert all(r.status == "failed" for r in rs) and not hidden.exists() and not readonly.exists()
    assert "No such file or directory" in rs[0].stderr, rs[0].stderr
    assert "Read-only file system" in rs[1].stderr or "Permission denied" in rs[1].stderr, rs[1].stderr
    # root inside the namespace cannot undo the read-only remount
    r = sandbox.run_program("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                            "assert libc.mount(b'none', b'/', None, 32 | 4096, None) != 0", FAST)
    assert r.status == "passed", r.stderr


def test_output_is_capped_and_temp_dir_removed():
    r = sandbox.run_program("import os, sys\nprint(os.getcwd(), flush=True)\n"
                            "while True: sys.stdout.write('x' * 65536)", FAST)
    assert r.status == "failed" and len(r.stdout) <= FAST.max_output
    work = sandbox.run_program("import os\nprint(os.getcwd())", FAST).stdout.strip()
    assert work and not os.path.exists(work)


def test_network_is_blocked():
    if not sandbox.isolation()["network_blocked"]:
        pytest.skip("no network namespace here (unshare -n unavailable)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = sandbox.run_program(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
                                FAST)
    finally:
        server.close()
    assert r.status == "failed" and ("unreachable" in r.stderr or "refused" in r.stderr), r.stderr


def test_host_unix_sockets_and_processes_are_hidden(tmp_path):
    """A read-only mount still lets connect() reach a socket file (docker.sock, ssh-agent): the
    sandbox covers /tmp, /run, /dev/shm with private tmpfs and mounts its own /proc."""
    if sandbox.isolation()["mode"] != "ns":
        pytest.skip("no namespaces here: host sockets and processes are visible (rlimits only)")
    path = f"/tmp/nanocode-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    try:
        r = sandbox.run_program(
            "import os, socket\n"
            f"socket.socket(socket.AF_UNIX).connect({path!r})\n", FAST)
        procs = sandbox.run_program(
            "import os\nassert sum(p.isdigit() for p in os.listdir('/proc')) < 5, os.listdir('/proc')", FAST)
    finally:
        server.close()
        os.remove(path)
    assert r.status == "failed" and "FileNotFoundError" in r.stderr, r.stderr
    assert procs.status == "passed", procs.stderr


def test_run_many_parallel_keeps_order():
    codes = [f"import time\ntime.sleep(0.3)\nassert {i} % 2 == 0" for i in range(6)]
    t = time.perf_counter()
    rs = sandbox.run_many(codes, FAST, workers=3)
    assert [r.status for r in rs] == ["passed", "failed"] * 3
    assert time.perf_counter() - t < 6 * 0.3  # serial would take 1.8 s plus start-up
    assert {r.isolation for r in rs} == {sandbox.isolation()["name"]}


# ---- tasks --------------------------------------------------------------------------------------
def test_truncate_and_extract():
    assert tasks.truncate("    return 1\n\ndef other():\n    pass") == "    return 1\n"
    assert tasks.truncate("    x = 1\nprint(x)\n") == "    x = 1"
    assert tasks.extract_code("Sure:\n```python\ndef f():\n    return 2\n```\nbye") == "def f():\n    return 2\n"
    assert tasks.extract_code("def f(): pass") == "def f(): pass"


def test_mbpp_format_from_local_jsonl(tmp_path):
    row = {"task_id": 2, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
           "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"], "test_setup_code": "",
           "challenge_test_list": []}
    data = tmp_path / "mbpp.jsonl"
    data.write_text(json.dumps(row) + "\n")
    (p,) = tasks.load_task("mbpp", str(data))
    assert p.entry_point == "add" and "assert add(1, 2) == 3" in tasks.completion_prompt(p)
    good, bad = (sandbox.run_program(tasks.program(p, tasks.reference(p, s)), FAST) for s in (False, True))
    assert (good.status, bad.status) == ("passed", "failed")
    sol = tasks.solution_from_completion(p, "def add(a, b):\n    return a + b\n\nprint(add(1, 2))", "completion")
    assert sol == "def add(a, b):\n    return a + b\n"


def test_hub_dataset_offline_is_a_clear_error(capsys, monkeypatch, tmp_path):
    """The real hub path, told the hub is unreachable: it fails fast with the fix, no retries."""
    import datasets
    monkeypatch.setattr(tasks, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no cached copy to fall back on
    from evals import cli
    assert cli.main(["mbppplus", "--canonical"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "mbppplus" in err and "--data" in err


# ---- HumanEval harness validity ----------------------------------------------------------------
def _validity(limit):
    problems = tasks.load_task("humaneval", limit=limit)
    out = {}
    for stubs in (False, True):
        rs = sandbox.run_many([tasks.program(p, tasks.reference(p, stubs)) for p in problems],
                              sandbox.Limits(timeout=15))
        out["stubs" if stubs else "canonical"] = sum(r.status == "passed" for r in rs)
    return len(problems), out


def test_humaneval_validity_first_10():
    n, out = _validity(10)
    assert n == 10 and out == {"canonical": 10, "stubs": 0}


@pytest.mark.slow
def test_humaneval_validity_all_164():  # ~33 s on the 2-core box
    n, out = _validity(None)
    assert n == 164 and out == {"canonical": 164, "stubs": 0}


def test_cli_canonical_writes_summary(tmp_path):
    r = subprocess.run([sys.executable, "-m", "evals.cli", "humaneval", "--canonical", "--limit", "3",
                        "--out", str(tmp_path), "--quiet"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "humaneval_canonical.json").read_text())
    assert summary["pass@1"] == 1.0 and summary["problems"] == 3
    assert summary["isolation"]["name"] in ("namespaces", "rlimits")
    assert len((tmp_path / "humaneval_canonical.jsonl").read_text().splitlines()) == 3


def test_namespace_fallback_is_never_our_own_crash():
    """Where unshare exists, falling back to rlimits must have an outside cause (no user
    namespaces, a locked-down kernel), not the boot script failing, e.g. on a venv under /tmp."""
    info = sandbox.isolation()
    if info["mode"] != "ns":
        assert "Traceback" not in info["note"], info["note"]
