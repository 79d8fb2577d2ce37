"""Multi-host training, emulated: two real processes on this machine joined by jax.distributed over
CPU collectives (gloo on loopback), one CPU device each, so the mesh spans both "hosts" and every
cross-host path runs for real: sharded init and restore, per-process loader state, the coordinated
SIGTERM stop, evals and samples, base -> sft -> dpo on a data=2 and (slow: ~4 min more) an
fsdp=2 mesh."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_helpers import losses, make_conv, pair, wait_for_checkpoint, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
BASE = ["base", "--preset", "cpu-d2", "--seq-len", "64", "--device-batch", "2", "--total-batch", "256",
        "--log-every", "1", "--eval-batches", "1", "--code-ratio", "0.5", "--copy-share", "0.25"]
FINETUNE = ["--seq-len", "256", "--log-every", "1", "--eval-every", "2", "--save-every", "100"]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A NANOCODE_HOME with code and "text" shards (stdlib sources) in row groups small enough
    that each of two processes gets its own share of every split, and a 512-token tokenizer."""
    import sysconfig

    from train.cli import main
    home = tmp_path_factory.mktemp("home")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    (home / "data").mkdir()
    for kind, srcs in (("code", ["json", "email"]), ("text", ["idlelib"])):  # "text": more code
        assert main(["data", "local", "--kind", "code", "--src", *(str(stdlib / s) for s in srcs),
                     "--out", str(home / kind), "--docs-per-shard", "24", "--row-group", "4"]) == 0
        (home / kind / "code").rename(home / "data" / kind)
    assert main(["tokenizer", "--data", str(home / "data"), "--vocab-size", "512", "--max-chars",
                 "2000000", "--out", str(home / "tokenizer")]) == 0
    return home


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(home, args, port=None) -> list[subprocess.Popen]:
    """`train ARGS --multihost` as processes 0 and 1 of one jax.distributed job."""
    port = port or free_port()
    procs = []
    for pid in (0, 1):
        env = {**os.environ, "NANOCODE_HOME": str(home), "PYTHONPATH": str(ROOT),
               "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(pid)}
        procs.append(subprocess.Popen([sys.executable, "-m", "train.cli", *args, "--multihost"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def finish(procs, timeout=420) -> list[str]:
    """Both outputs; kills both and fails if either hangs past the timeout."""
    outs, deadline = [], time.time() + timeout
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1, deadline - time.time()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a process hung (deadlock?); output so far: {p.communicate()[0][-3000:]}")
    return outs


def run2(home, args) -> list[str]:
    procs = launch(home, args)
    outs = finish(procs)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    return outs


@pytest.mark.slow  # ~120 s idle per mesh; the default suite keeps tests/test_speedrun_multihost.py and test_multihost_vote.py
@pytest.mark.parametrize("mesh", ["data=2", "fsdp=2"])
def test_two_hosts_base_sft_dpo_with_sigterm_and_exact_resume(home, tmp_path, mesh):
    base = [*BASE, "--mesh", mesh, "--steps", "8", "--save-every", "2", "--eval-every", "4"]
    run2(home, [*base, "--run-dir", str(tmp_path / "straight")])

    # SIGTERM to process 1 alone: both stop at the same step boundary and save together
    procs = launch(home, [*base, "--run-dir", str(tmp_path / "stopped")])
    wait_for_checkpoint(tmp_path / "stopped", 2, procs[1])
    procs[1].send_signal(signal.SIGTERM)
    outs = finish(procs)
    assert [p.returncode for p in procs] == [1, 1], outs
    assert "stopped by SIGTERM" in outs[1] and "stopped by a signal to another process" in outs[0]
    from nanocode import checkpoint
    stopped_at = checkpoint.latest_step(tmp_path / "stopped" / "checkpoints")
    assert stopped_at < 8, "the run finished before the signal"
    saved = checkpoint.restore(tmp_path / "stopped" / "checkpoints", stopped_at, load_opt_state=False)
    per_process = saved["loader_state"]["per_process"]
    assert [s["process_index"] for s in per_process] == [0, 1]  # each host's own position

    outs = run2(home, [*base, "--run-dir", str(tmp_path / "stopped"), "--resume"])
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "stopped")
    assert sorted(straight) == list(range(1, 9))
    assert resumed == straight  # bitwise: the same floats at every step, across the stop
    evals = [json.loads(ln) for ln in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
             if "val_bpb_text" in ln]
    assert [e["step"] for e in evals] == [4, 8]  # written once, by process 0
    assert "sample:" in outs[0] and "sample:" not in outs[1]

    convs = write_jsonl(tmp_path / "convs.jsonl", [make_conv(i) for i in range(40)])
    outs = run2(home, ["sft", "--from", str(tmp_path / "straight"), "--data", str(convs), *FINETUNE,
                       "--mesh", mesh, "--device-batch", "2", "--steps", "4", "--val-convs", "8",
                       "--samples", "1", "--sample-tokens", "8", "--run-dir", str(tmp_path / "sft")])
    rows = [json.loads(ln) for ln in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val_loss" in r] == [0, 2, 4]
    assert "sample:" in outs[0]

    pairs = write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(24)])
    run2(home, ["dpo", "--from", str(tmp_path / "sft"), "--data", str(pairs), *FINETUNE, "--mesh", mesh,
                "--device-batch", "2", "--steps", "4", "--val-pairs", "4",
                "--run-dir", str(tmp_path / "dpo")])
    rows = [json.loads(ln) for ln in (tmp_path / "dpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val_acc" in r] == [0, 2, 4]
    assert checkpoint.latest_step(tmp_path / "dpo" / "checkpoints") == 4
