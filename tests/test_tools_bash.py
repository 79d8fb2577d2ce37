"""Tests for the Bash tool (tools/bash.py): result format, environment, and runaway commands.

Adversarial cases (runaway / stdin / output flood / escape) are marked with ``# adversarial``."""
import os
import re
import sys
import threading
import time
import tracemalloc

import pytest

from proc_state import alive, group_members, wait_dead
from tools.bash import MISSING, bash

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process checks read /proc")

MARKER = re.compile(r"^\.\.\. \[([\d,]+) bytes cut\] \.\.\.$", re.M)


def run(root, command, **kw):
    return bash(root, {"command": command}, **kw)


# ---------------------------------------------------------------- format


def test_echo(tmp_path):
    assert run(tmp_path, "echo hello") == "hello"


def test_stderr_interleaved_in_order(tmp_path):
    assert run(tmp_path, "echo a; echo b >&2; echo c; echo d >&2") == "a\nb\nc\nd"


def test_no_output(tmp_path):
    assert run(tmp_path, "true") == "(no output)"
    assert run(tmp_path, "echo") == "(no output)"


def test_trailing_newlines_stripped(tmp_path):
    assert run(tmp_path, "printf 'a\\n\\n'") == "a"
    assert run(tmp_path, "printf 'a'") == "a"
    assert run(tmp_path, "printf '\\n a'") == "\n a"


def test_exit_code_line(tmp_path):
    assert run(tmp_path, "exit 3") == "(no output)\n(exit code 3)"
    assert run(tmp_path, "echo oops >&2; exit 1") == "oops\n(exit code 1)"
    assert run(tmp_path, "ls /definitely/not/here").endswith("(exit code 2)")


def test_killed_by_signal_reports_128_plus_signal(tmp_path):
    assert run(tmp_path, "kill -9 $$") == "(no output)\n(exit code 137)"


def test_cwd_is_root(tmp_path):
    (tmp_path / "marker.txt").write_text("x")
    assert run(tmp_path, "pwd -P") == str(tmp_path.resolve())
    assert run(str(tmp_path), "ls") == "marker.txt"


def test_env_vars(tmp_path):
    out = run(tmp_path, 'echo "$PAGER|$GIT_PAGER|$NANOCODE|$TERM|${NANOCODE_CALL:+marked}"')
    assert out == "cat|cat|1|dumb|marked"


def test_non_utf8_replaced(tmp_path):
    assert run(tmp_path, "printf 'a\\xff\\xfeb'") == "a\ufffd\ufffdb"


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize("args", [{}, {"path": "x"}, {"command": None}, {"command": ""}, {"command": "  \n"}, None, "ls"])
def test_missing_argument(tmp_path, args):
    assert bash(tmp_path, args) == MISSING == "error: missing argument command"


@pytest.mark.parametrize("value", [5, ["ls"], b"ls"])
def test_wrong_typed_argument(tmp_path, value):
    out = bash(tmp_path, {"command": value})
    assert out.startswith("error: ") and "\n" not in out


def test_bad_root_is_an_error_line(tmp_path):
    out = run(tmp_path / "nope", "echo hi")
    assert out.startswith("error: ") and "\n" not in out


# ---------------------------------------------------------------- stdin (adversarial)


def test_stdin_closed_cat(tmp_path):  # adversarial
    t = time.monotonic()
    assert run(tmp_path, "cat", timeout=5) == "(no output)"
    assert time.monotonic() - t < 2


def test_stdin_closed_read(tmp_path):  # adversarial
    assert run(tmp_path, 'read x; echo "rc=$?"', timeout=5) == "rc=1"


def test_no_controlling_terminal(tmp_path):  # adversarial: prompts via /dev/tty fail instead of hanging
    out = run(tmp_path, "echo hi > /dev/tty", timeout=5)
    assert "(exit code 1)" in out


# ---------------------------------------------------------------- runaway commands (adversarial)


def test_timeout_kills_group(tmp_path):  # adversarial
    t = time.monotonic()
    out = run(tmp_path, "echo $$; sleep 1000", timeout=1)
    elapsed = time.monotonic() - t
    pid_line, err = out.split("\n")
    assert err == "error: timed out after 1 s"
    assert 0.9 < elapsed < 5  # the 1 s timeout, not the sleep; slack for a loaded machine
    pgid = int(pid_line)
    assert not alive(pgid) and group_members(pgid) == []


def test_timeout_keeps_output_before_the_error(tmp_path):
    out = run(tmp_path, "echo first; echo second >&2; sleep 1000", timeout=0.5)
    assert out == "first\nsecond\nerror: timed out after 0.5 s"


def test_timeout_with_term_ignored_escalates_to_kill(tmp_path):  # adversarial
    t = time.monotonic()
    out = run(tmp_path, "trap '' TERM; echo $$; sleep 1000; sleep 1000", timeout=0.5)
    assert time.monotonic() - t < 2.0
    pid_line, err = out.split("\n")
    assert err == "error: timed out after 0.5 s"
    assert group_members(int(pid_line)) == []


def test_background_child_outliving_parent(tmp_path):  # adversarial
    t = time.monotonic()
    out = run(tmp_path, "sleep 100 & echo $!; echo started", timeout=10)
    assert time.monotonic() - t < 2.0
    pid, started = out.split("\n")
    assert started == "started"
    assert wait_dead([int(pid)]) == []


def test_background_child_with_redirected_output_killed(tmp_path):  # adversarial: no pipe held
    out = run(tmp_path, "sleep 100 > /dev/null 2>&1 & echo $!", timeout=10)
    assert wait_dead([int(out)]) == []


def test_quick_background_output_is_collected(tmp_path):
    assert run(tmp_path, "(sleep 0.05; echo late) & echo early") == "early\nlate"


def test_nested_children_killed(tmp_path):  # adversarial: fork bomb-lite
    cmd = ("echo $$; for i in 1 2 3; do ( (sleep 1000 &) ; sleep 1000 & sleep 1000 ) & done; "
           "(sleep 1000 &); sleep 1000")
    t = time.monotonic()
    out = run(tmp_path, cmd, timeout=1)
    assert time.monotonic() - t < 2.5
    pgid = int(out.split("\n")[0])
    assert out.endswith("error: timed out after 1 s")
    assert group_members(pgid) == []


def test_fork_loop_killed(tmp_path):  # adversarial: keeps spawning while being killed
    cmd = "echo $$; while true; do sleep 1000 & done"
    t = time.monotonic()
    out = run(tmp_path, cmd, timeout=0.5)
    assert time.monotonic() - t < 3.0
    pgid = int(out.split("\n")[0])
    assert group_members(pgid) == []


def test_setsid_grandchild_killed_by_marker(tmp_path):  # adversarial: escapes the process group
    out = run(tmp_path, "setsid sleep 100 > /dev/null 2>&1 & echo $!", timeout=10)
    assert wait_dead([int(out)]) == []


def test_daemonized_grandchild_holding_pipe(tmp_path):  # adversarial: double fork + setsid, keeps stdout
    t = time.monotonic()
    out = run(tmp_path, "setsid bash -c 'sleep 100 & echo $!' & wait; echo done", timeout=10)
    assert time.monotonic() - t < 2.5
    pid, done = out.split("\n")
    assert done == "done"
    assert wait_dead([int(pid)]) == []


def test_scrubbed_setsid_escapee_does_not_hang_the_tool(tmp_path):  # adversarial: known escape
    # `setsid env -i` leaves both the group and the marker: it survives (documented), but holding
    # our pipe open must not keep the tool waiting.
    t = time.monotonic()
    out = run(tmp_path, "setsid env -i /bin/sleep 30 & echo $!", timeout=10)
    try:
        assert time.monotonic() - t < 2.5
    finally:
        for line in out.split("\n"):
            if line.isdigit():
                try:
                    os.kill(int(line), 9)
                except OSError:
                    pass


def test_cancel_stops_running_command(tmp_path):  # adversarial
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t = time.monotonic()
    out = run(tmp_path, "echo $$; sleep 1000", timeout=30, cancel=cancel)
    assert time.monotonic() - t < 1.5
    pid_line, err = out.split("\n")
    assert err == "error: cancelled"
    assert group_members(int(pid_line)) == []


def test_cancel_not_set_does_not_interfere(tmp_path):
    assert run(tmp_path, "echo ok", cancel=threading.Event()) == "ok"


# ---------------------------------------------------------------- output size (adversarial)


def test_output_flood_bounded(tmp_path):  # adversarial
    budget = 30_000
    tracemalloc.start()
    try:
        t = time.monotonic()
        out = run(tmp_path, "yes | head -c 1000000000", timeout=60, budget=budget)
        elapsed = time.monotonic() - t
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 15
    m = MARKER.search(out)
    assert m is not None
    assert len(out) <= budget + len(m.group(0)) + 2
    assert out.startswith("y\ny\n") and out.endswith("y\ny")
    kept = len(out) - len(m.group(0)) - 1 + 1  # -1 separator newline, +1 final newline stripped
    assert int(m.group(1).replace(",", "")) + kept == 1_000_000_000
    assert peak < 8 * 1024 * 1024


def test_endless_flood_times_out_with_truncated_output(tmp_path):  # adversarial
    t = time.monotonic()
    out = run(tmp_path, "yes", timeout=0.5, budget=1000)
    assert time.monotonic() - t < 2.0
    assert MARKER.search(out) and out.endswith("\nerror: timed out after 0.5 s")
    assert len(out) < 1200


def test_truncation_keeps_head_and_tail_lines(tmp_path):
    out = run(tmp_path, "seq 1 100000", budget=1000)
    total = len("".join(f"{i}\n" for i in range(1, 100001)))
    head, marker, tail = out.partition("\n... [")
    assert head.startswith("1\n2\n3\n") and tail.endswith("\n99999\n100000")
    lines = out.split("\n")
    assert all(re.fullmatch(r"\d+", line) or MARKER.fullmatch(line) for line in lines)
    m = MARKER.search(out)
    kept = len(out) - len(m.group(0)) + 1  # final newline stripped; marker line's own newline counted
    assert int(m.group(1).replace(",", "")) + kept - 1 == total
    assert len(out) <= 1000 + len(m.group(0)) + 1


def test_truncation_never_splits_utf8(tmp_path):
    out = run(tmp_path, "python3 -c \"print('é' * 100000, end='')\"", budget=1001)
    assert MARKER.search(out) and "\ufffd" not in out


def test_output_under_budget_not_truncated(tmp_path):
    out = run(tmp_path, "seq 1 100", budget=1000)
    assert out == "\n".join(str(i) for i in range(1, 101))


def test_closed_stdout_still_times_out(tmp_path):  # adversarial: EOF long before exit
    t = time.monotonic()
    out = run(tmp_path, "echo bye; exec >&- 2>&-; sleep 1000", timeout=0.5)
    assert time.monotonic() - t < 1.5
    assert out == "bye\nerror: timed out after 0.5 s"


def test_timeout_seconds_formatting():
    from tools.bash import _format_secs
    assert [_format_secs(t) for t in (30.0, 30, 1.5, 0.25, 2.0004)] == ["30", "30", "1.5", "0.25", "2"]


def test_bad_settings_do_not_raise(tmp_path):
    assert bash(tmp_path, {"command": "echo hi"}, timeout="soon").startswith("error: ")
    assert bash(tmp_path, {"command": "echo hi"}, budget="big").startswith("error: ")
