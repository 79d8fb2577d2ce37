"""The stop/save vote of two emulated hosts does not make the host wait on the step it just queued.

Two real processes joined by jax.distributed (gloo on loopback), one CPU device each, run the
training loop's rhythm: dispatch a step over both devices (matmuls), then vote. With
`train.loop.StepVote` (cast after step s, read after step s + 1 is queued) the read returns while
step s + 1 is still running, so the host can build the next batch meanwhile; the vote read at once
after its cast (what the loop did before: an all-reduce queued behind the step just dispatched)
returns only once that step is done. The test asks the step's output whether it is ready when the
read returns (no wall-clock ratios: those belong to benchmarks and vary with the machine's load),
and checks that a stop cast by one host is read by both at the same step."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS, STOP_AFTER = 6, 3  # process 1 votes stop after step STOP_AFTER


def worker() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from train.loop import StepVote, init_multihost

    init_multihost()
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("all",)), PartitionSpec("all"))

    @jax.jit
    def step(x):  # (2, 640, 640): one matrix per device, far longer than the vote's all-reduce
        for _ in range(16):
            x = jnp.tanh(x @ x)
        return x

    x = jax.make_array_from_process_local_data(sharding, np.full((1, 640, 640), 1 / 640, np.float32))
    x = step(x).block_until_ready()  # compiled
    me = jax.process_index()

    def loop(read_late: bool):
        """(the step at which the stop was read, how many reads returned before the step just queued was done)"""
        vote, stopped_at, running, x_ = StepVote(), None, 0, x
        vote.cast(False)
        vote.read()  # the vote's own program compiled
        for s in range(STEPS):
            x_ = step(x_)
            if read_late:  # the loop's order: read the vote cast after the step before
                stop, _ = vote.read()
                running += not x_.is_ready()
                vote.cast(me == 1 and s + 1 == STOP_AFTER)
            else:  # cast and read at once: the host waits for the step it just queued
                vote.cast(me == 1 and s + 1 == STOP_AFTER)
                stop, _ = vote.read()
                running += not x_.is_ready()
            if stop and stopped_at is None:
                stopped_at = s + 1
        jax.block_until_ready(x_)
        return stopped_at, running

    late_stop, late_running = loop(True)
    eager_stop, eager_running = loop(False)
    print(json.dumps({"late_stop": late_stop, "late_running": late_running,
                      "eager_stop": eager_stop, "eager_running": eager_running}), flush=True)


def test_the_vote_lets_the_host_build_the_next_batch_while_the_step_runs():
    from test_multihost import free_port

    port = free_port()
    procs = [subprocess.Popen(
        [sys.executable, __file__], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
             "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
             "JAX_PROCESS_ID": str(pid)}) for pid in (0, 1)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a process hung: {p.communicate()[0][-3000:]}")
        assert p.returncode == 0, outs[-1][-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    for r in results:
        # a stop cast by process 1 after step 3 is read by both hosts one step later, at the same step
        assert r["late_stop"] == STOP_AFTER + 1 and r["eager_stop"] == STOP_AFTER, results
        # read one step late, the vote returns while the step just queued still runs ...
        assert r["late_running"] == STEPS, results
        # ... read at once, the host waits for that step to finish
        assert r["eager_running"] == 0, results

if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    worker()
