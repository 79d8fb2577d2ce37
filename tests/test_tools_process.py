"""tools/process.py on its own: a command's process group is killed whole at a timeout, on
cancel and after a normal exit (a background child is dead when run returns), output is capped
head+tail, the escapee marker, the SIGTERM grace, files instead of the pipe, start errors."""
import os
import sys
import threading
import time

import pytest

from proc_state import alive, group_members
from tools.process import MARKER_NAME, Capture, Outcome, run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process checks read /proc")

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


def sh(command: str, tmp_path, **kw) -> Outcome:
    return run(["bash", "-c", command], cwd=str(tmp_path), env=ENV, **kw)


def pids_in(output: str) -> list[int]:
    return [int(line) for line in output.split() if line.isdigit()]


def test_normal_exit_output_and_code(tmp_path):
    r = sh("echo out; echo err >&2; exit 3", tmp_path)
    assert r == Outcome(3, "out\nerr\n", timed_out=False, cancelled=False)
    assert sh("kill -9 $$", tmp_path).returncode == -9


def test_timeout_kills_the_whole_group(tmp_path):
    t = time.monotonic()
    r = sh("echo $$; sleep 1000 & sleep 1000", tmp_path, timeout=0.5)
    assert time.monotonic() - t < 2.0
    assert r.timed_out and not r.cancelled
    [pgid] = pids_in(r.output)
    assert group_members(pgid) == []


def test_cancel_kills_the_whole_group(tmp_path):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t = time.monotonic()
    r = sh("echo $$; sleep 1000 & sleep 1000", tmp_path, timeout=30, cancel=cancel)
    assert time.monotonic() - t < 1.5
    assert r.cancelled and not r.timed_out
    [pgid] = pids_in(r.output)
    assert group_members(pgid) == []


@pytest.mark.parametrize("child", ["sleep 60 &", "sleep 60 > /dev/null 2>&1 &"])
def test_background_child_is_dead_after_a_normal_exit(tmp_path, child):
    """With the pipe held by the child and without: run returns at once, the child is gone."""
    t = time.monotonic()
    r = sh(f"{child} echo $!", tmp_path, timeout=30)
    assert time.monotonic() - t < 2.0
    assert (r.returncode, r.timed_out) == (0, False)
    [pid] = pids_in(r.output)
    assert not alive(pid)


def test_background_child_is_dead_with_output_to_files(tmp_path):
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as o, open(err, "wb") as e:
        r = sh("sleep 60 & echo $!; echo oops >&2", tmp_path, timeout=30, files=(o, e))
    assert r.output == "" and r.returncode == 0 and err.read_text() == "oops\n"
    [pid] = pids_in(out.read_text())
    assert not alive(pid)


def test_marker_reaches_an_escapee_that_left_the_group(tmp_path):
    command = "setsid sleep 60 > /dev/null 2>&1 & echo $!; echo ${%s:+marked}" % MARKER_NAME
    r = sh(command, tmp_path, mark=True)
    [pid] = pids_in(r.output)
    assert r.output.split()[-1] == "marked"
    deadline = time.monotonic() + 1.0
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)
    assert MARKER_NAME not in ENV  # the caller's env is not modified


@pytest.mark.slow
def test_marker_catches_an_escapee_caught_mid_exec_under_load(tmp_path):
    """The race behind a flaky CI run: the scan after the exit can meet the ``setsid``'d child in
    the middle of exec'ing ``sleep``, outside the group and with an empty environment for a
    moment. On 2 busy cores about 3 in 100 runs left a sleep behind before the re-read."""
    import subprocess
    from proc_state import with_cmdline
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        left = []
        for i in range(300):
            secs = f"61.{os.getpid()}{i}"
            sh(f"setsid sleep {secs} > /dev/null 2>&1 & echo ok", tmp_path, mark=True)
            left += with_cmdline("sleep", secs)
    finally:
        for p in load:
            p.kill()
            p.wait()
    for pid in left:
        os.kill(pid, 9)
    assert left == []


def test_grace_lets_a_term_handler_run_and_zero_grace_does_not(tmp_path):
    command = "trap 'echo got-term; exit 0' TERM; sleep 1000 & wait"
    assert "got-term" in sh(command, tmp_path, timeout=0.3, grace=1.0).output
    assert "got-term" not in sh(command, tmp_path, timeout=0.3, grace=0).output


def test_output_is_capped_head_and_tail(tmp_path):
    r = sh("seq 1 100000", tmp_path, budget=1000)
    head, marker, tail = r.output.partition("\n... [")
    assert head.startswith("1\n2\n3\n") and tail.endswith("\n99999\n100000\n")
    assert len(r.output) < 1100


def test_capture_counts_what_it_cut():
    c = Capture(10)
    for chunk in (b"abc", b"defghij", b"klmnopqrstuvwxyz"):
        c.add(chunk)
    assert (bytes(c.head), bytes(c.tail), c.total) == (b"abcde", b"vwxyz", 26)
    assert c.text() == "abcde\n... [16 bytes cut] ...\nvwxyz"


def test_start_error_raises_and_leaves_nothing(tmp_path):
    with pytest.raises(OSError):
        run([str(tmp_path / "no-such-program")], cwd=str(tmp_path), env=ENV)
    with pytest.raises(OSError):
        run(["true"], cwd=str(tmp_path / "no-such-dir"), env=ENV)
