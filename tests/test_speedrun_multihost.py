"""`train speedrun --multihost` coordination: two real speedrun drivers on this machine (JAX's
distributed runtime over loopback, CPU collectives) share one run dir. The probe is real; each
stage's commands are replaced (in the driver subprocess, by patching speedrun.stage_commands) with
a short `python -c` that appends "<stage> <process> <the .done markers it saw>" to <run>/stages.log.
"""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train import speedrun

ROOT = Path(__file__).resolve().parents[1]

# A fake stage: log what it is, which process runs it and which stages were done when it started;
# a single-writer stage takes a moment, so a waiter that did not wait would be seen starting early.
FAKE = r"""
import os, sys, time
from pathlib import Path
stage, run = sys.argv[1], Path(sys.argv[2])
done = ",".join(sorted(f.name.removesuffix(".done") for f in run.glob("*.done")))
with open(run / "stages.log", "a") as f:
    f.write(f"{stage} {os.environ['JAX_PROCESS_ID']} {done}\n")
if os.environ.get("FAKE_JAX") == stage:  # a real collective, as a training stage would run
    from train.loop import init_multihost
    init_multihost()
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(stage)
time.sleep(0.4 if stage not in ("base", "sft", "dpo") else 0.05)
sys.exit(3 if os.environ.get("FAKE_FAIL") == stage else 0)
"""
DRIVER = f"""
import sys
from train import speedrun
from train.cli import main
speedrun.WAIT_POLL_S, speedrun.WAIT_REPORT_S = 0.05, 0.2
speedrun.stage_commands = lambda stage, p, run, multihost=False: [
    [sys.executable, "-c", {FAKE!r}, stage, str(run)]]
raise SystemExit(main(sys.argv[1:]))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_drivers(run: Path, *flags: str, env: dict | None = None, timeout: float = 60) -> list[dict]:
    """Run the speedrun driver as process 0 and 1 together; each one's exit code, output and the
    time it exited. Both are killed (and the test fails) past `timeout`."""
    port, procs, outs = free_port(), [], []
    for i in (0, 1):
        out = {"stdout": run.parent / f"p{i}.out", "stderr": run.parent / f"p{i}.err"}
        e = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
             "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(i), **(env or {})}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", DRIVER, "speedrun", "--preset", "cpu", "--run-dir", str(run),
             "--multihost", *flags], cwd=ROOT, env=e, stdout=open(out["stdout"], "w"),
            stderr=open(out["stderr"], "w")))
        outs.append(out)
    deadline, ended = time.monotonic() + timeout, [None, None]
    while None in ended and time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if ended[i] is None and p.poll() is not None:
                ended[i] = time.monotonic()
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    results = [{"rc": p.returncode, "ended": t, "out": o["stdout"].read_text(), "err": o["stderr"].read_text()}
               for p, t, o in zip(procs, ended, outs)]
    assert None not in ended, f"a driver hung past {timeout} s: {results}"
    return results


def stage_log(run: Path) -> list[tuple[str, str, set]]:
    if not (run / "stages.log").exists():
        return []
    rows = [ln.split(" ") for ln in (run / "stages.log").read_text().splitlines()]
    return [(r[0], r[1], set(filter(None, r[2].split(",")))) for r in rows]


def check_plan(run: Path, single_writer=speedrun.SINGLE_WRITER, training=speedrun.TRAINING):
    rows = stage_log(run)
    for s in single_writer:
        assert [r[:2] for r in rows if r[0] == s] == [(s, "0")], rows  # once, on process 0
    for s in training:
        assert sorted(r[1] for r in rows if r[0] == s) == ["0", "1"], rows  # on both
    for s, proc, done in rows:
        if proc == "1":  # started only after process 0's .done of every single-writer stage before it
            before = set(speedrun.STAGES[:speedrun.STAGES.index(s)]) & set(single_writer)
            assert before <= done, (s, done)
    return rows


def test_multihost_single_writer_stages_run_once_on_process_0(tmp_path):
    run = tmp_path / "run"
    p0, p1 = two_drivers(run)
    assert (p0["rc"], p1["rc"]) == (0, 0), (p0, p1)
    check_plan(run)
    assert all((run / f"{s}.done").exists() for s in speedrun.STAGES)
    assert not list(run.glob("*.failed"))
    assert "process 0 of 2" in p0["out"] and "process 1 of 2" in p1["out"]
    assert "still waiting for process 0: stage" in p1["out"]  # progress while waiting
    assert (run / "logs" / "base.log").exists() and (run / "logs" / "base.process1.log").exists()
    assert not (run / "logs" / "data.process1.log").exists()


def test_multihost_failure_on_process_0_stops_the_waiters(tmp_path):
    run = tmp_path / "run"
    p0, p1 = two_drivers(run, env={"FAKE_FAIL": "synth"})
    assert p0["rc"] == 3 and p1["rc"] == 1, (p0, p1)
    assert p1["ended"] - p0["ended"] < 5  # promptly, not at --wait-timeout
    assert "process 0 failed stage synth" in p1["err"] and str(run / "logs" / "synth.log") in p1["err"]
    assert json.loads((run / "synth.failed").read_text())["failed"] == "exit 3"
    assert not (run / "synth.done").exists()
    assert [r[:2] for r in stage_log(run) if r[0] in ("sft", "dpo", "export")] == []


def test_multihost_stale_markers_abort_without_resume_and_are_ignored_with_it(tmp_path):
    """An earlier run got through data and failed at the tokenizer: without --resume both
    processes refuse it (nothing run, nothing deleted); with --resume the stale failure marker is
    gone before process 1 waits for the tokenizer (the stage right after the probe)."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "preset").write_text("cpu\n")
    (run / "data.done").write_text('{"commands": [], "seconds": 1}\n')
    speedrun.mark_failed(run, "tokenizer", "exit 1")

    p0, p1 = two_drivers(run)
    assert (p0["rc"], p1["rc"]) == (2, 2), (p0, p1)
    assert "already holds a run; add --resume" in p0["err"]
    assert "process 0 found that" in p1["err"] and "add --resume" in p1["err"]
    assert stage_log(run) == [] and (run / "tokenizer.failed").exists()

    p0, p1 = two_drivers(run, "--resume")
    assert (p0["rc"], p1["rc"]) == (0, 0), (p0, p1)
    check_plan(run, single_writer=[s for s in speedrun.SINGLE_WRITER if s != "data"])
    assert "data" not in {r[0] for r in stage_log(run)}  # done already: skipped on both
    assert not (run / "tokenizer.failed").exists()


@pytest.mark.slow
def test_multihost_training_stage_rejoins_right_after_the_probe(tmp_path):
    """The probe's coordinator is gone when the first training stage (here straight after the
    probe) starts its own on the same port: a real jax.distributed collective across both."""
    run = tmp_path / "run"
    p0, p1 = two_drivers(run, "--only", "base,synth,sft", env={"FAKE_JAX": "base"}, timeout=120)
    assert (p0["rc"], p1["rc"]) == (0, 0), (p0, p1)
    check_plan(run, single_writer=["synth"], training=["base", "sft"])


def test_wait_for_stage_shows_progress_and_times_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(speedrun, "WAIT_POLL_S", 0.01)
    monkeypatch.setattr(speedrun, "WAIT_REPORT_S", 0.05)
    t0 = time.time()
    assert speedrun.wait_for_stage(tmp_path, "synth", timeout_s=0.3) == 1
    assert time.time() - t0 < 5
    out, err = capsys.readouterr()
    assert "still waiting for process 0: stage synth, 0 min" in out
    assert "gave up waiting for process 0 to finish stage synth" in err and "--wait-timeout" in err


def test_wait_for_stage_ends_on_done_or_on_any_failure_marker(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(speedrun, "WAIT_POLL_S", 0.01)
    (tmp_path / "data.done").write_text("{}\n")
    assert speedrun.wait_for_stage(tmp_path, "data", timeout_s=5) == 0
    speedrun.mark_failed(tmp_path, "base", "exit 1")  # process 0 stopped at a training stage
    assert speedrun.wait_for_stage(tmp_path, "synth", timeout_s=5) == 1
    err = capsys.readouterr().err
    assert "process 0 failed stage base (exit 1)" in err and str(tmp_path / "logs" / "base.log") in err


def test_dry_run_shows_which_stages_run_on_process_0_only(tmp_path, capsys):
    from train.cli import main
    assert main(["speedrun", "--preset", "cpu", "--run-dir", str(tmp_path / "r"), "--dry-run", "--multihost"]) == 0
    lines = capsys.readouterr().out.splitlines()  # the cpu preset has every stage (rollouts, rft too)
    for s in speedrun.SINGLE_WRITER:
        assert any(ln.startswith(f"{s} (process 0 only): ") for ln in lines), s
    for s in speedrun.TRAINING:
        ln = next(ln for ln in lines if ln.startswith(f"{s} (every process): "))
        assert "--multihost" in ln
    assert not (tmp_path / "r").exists()
