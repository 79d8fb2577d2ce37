"""The one training loop every stage shares: a jitted step with gradient accumulation, logging
(loss, tokens/s, MFU, ETA), periodic eval and checkpoints, preemption-safe saves and exact resume.
A stage (base, sft, dpo) supplies only its batches and its loss.

Parallelism comes from JAX alone: the (data, fsdp) `Mesh` and how parameters, optimizer state and
batches are laid out on it are nanocode/sharding.py's (every device takes a slice of the batch;
parameters and optimizer state are sharded over `fsdp` by its table PARAM_LAYOUT); `run` places
the state and jits the step with those shardings. One step = `lax.scan` over `grad_accum`
micro-batches, then one optimizer update; the train state is donated so XLA updates it in place.
The step runs with the mesh in context (`jax.set_mesh`): the model's per-device code (fused
attention kernels, the chunked head + loss) reads the batch axes from it.

Multi-host: every process runs the same command after `init_multihost()` and feeds its share of
rows. What one process alone cannot do is coordinated here: a checkpoint restored on one device
is placed shard by shard (`place`); each process's loader state is gathered into the checkpoint
(orbax writes JSON from process 0 only) and each takes its own back on resume; a SIGTERM to any
process stops all of them at the same step boundary, and a wall-time save is taken by all at the
same step (`StepVote`: a tiny all-reduce a step, read one step late, so the host never waits on the
step it just queued); checkpoints are written in the background (`checkpoint.AsyncSaver`: the loop
waits only for the copy to host memory, and for the whole write on a SIGTERM);
samples run on process 0 over a gathered copy (`on_one_process`); metrics and logs are written
once, by process 0.

A loss takes (params, micro_batch) and returns (sum of token losses, number of tokens), so
accumulated micro-batches weigh every token equally whatever the masks do.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nanocode.sharding import batch_sharding, tree_shardings

# Dense bf16 peak FLOP/s per chip, by a substring of jax's device_kind (first match wins).
PEAK_FLOPS = [("v6", 918e12), ("v5p", 459e12), ("v5 lite", 197e12), ("v5e", 197e12),
              ("v5", 459e12), ("v4", 275e12), ("H200", 989e12), ("H100", 989e12),
              ("A100", 312e12), ("RTX 4090", 165e12)]  # bf16 dense, fp32 accumulation


# ---- processes ---------------------------------------------------------------------------------
def init_multihost() -> None:
    """`jax.distributed.initialize()` for --multihost. On Cloud TPU, SLURM, Open MPI and k8s JAX
    finds the coordinator, process count and index itself; elsewhere (e.g. several processes on
    one machine over CPU collectives) set JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES
    and JAX_PROCESS_ID on every process."""
    count, index = os.environ.get("JAX_NUM_PROCESSES"), os.environ.get("JAX_PROCESS_ID")
    if (count is None) != (index is None):
        raise ValueError("set both JAX_NUM_PROCESSES and JAX_PROCESS_ID (or neither, to let JAX "
                         "detect the cluster)")
    jax.distributed.initialize(num_processes=None if count is None else int(count),
                               process_id=None if index is None else int(index))


def place(tree, shardings):
    """`jax.device_put(tree, shardings)` that also works across hosts. A checkpoint restored for
    inference sits on each process's first local device; device_put cannot send it to devices of
    other hosts, so with several processes every process builds its own shards from its full copy
    (every process holds the same values)."""
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def one(x, sharding):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
    return jax.tree.map(one, tree, shardings)


def local_copy(tree):
    """The full values of a (possibly multi-host) sharded tree on this process, for work one
    process does alone (the Engine's samples): a no-op with one process; with several it is a
    collective (every process must call it) that gathers every array to host memory."""
    if jax.process_count() == 1:
        return tree
    return jax.device_put(multihost_utils.process_allgather(tree, tiled=True), jax.local_devices()[0])


def on_one_process(params, fn) -> None:
    """fn(params) on process 0 alone, over a local copy of the (possibly multi-host) params and
    with no mesh in context, so the Engine runs its single-device programs; the other processes
    only join the gather (`local_copy`). The evals' samples."""
    params = local_copy(params)
    if jax.process_index() == 0:
        with jax.set_mesh(None):
            fn(params)


def restart_rate(bar) -> None:
    """Forget the time a tqdm bar has counted so far (its rate and ETA start from the next
    update) but keep its count: the first step of a stage includes the compile."""
    n = bar.n
    bar.reset()
    bar.initial = bar.n = bar.last_print_n = n
    bar.refresh()


class Profile:
    """jax.profiler tracing of steps [start, stop) into `directory` (off when `steps` is None):
    `at(step, state)` before each step is dispatched; the trace ends once step stop - 1 has
    finished (`stop(state)` waits for it)."""

    def __init__(self, steps: tuple[int, int] | None, directory: Path, say: Callable):
        self.steps, self.directory, self.say, self.on = steps, directory, say, False

    def at(self, step: int, state) -> None:
        if self.steps is None:
            return
        if step == self.steps[0] and not self.on:
            jax.profiler.start_trace(str(self.directory))
            self.on = True
        elif step == self.steps[1] and self.on:
            self.stop(state)

    def stop(self, state) -> None:
        if self.on:
            jax.block_until_ready(state)  # the traced steps have run
            jax.profiler.stop_trace()
            self.on = False
            self.say(f"profile of steps {self.steps[0]}..{self.steps[1] - 1} in {self.directory} "
                     "(tensorboard --logdir, or its trace.json.gz in ui.perfetto.dev)")


class StepVote:
    """What every process does after a step, decided together: stop (a SIGTERM reached any
    process: one signal stops every host at the same step) and save (any process's wall-time
    cadence is due: the clocks of hosts differ, the save must not).

    `cast(stop, save)` after queueing step s, `read()` after queueing step s + 1: with one process
    the flags themselves; with several, the max over every device of each process's flags, an
    all-reduce queued behind step s and read only once step s + 1 is queued, so the host blocks on
    a step that is already followed by the next one (the chips never idle for the vote) and every
    process reads the same answer at the same step. The price: a stop or a timed save lands one
    step later, with one process too (one code path)."""

    def __init__(self):
        self.vote, self.many = (False, False), jax.process_count() > 1
        if self.many:
            devices = Mesh(np.array(jax.devices()), ("all",))
            self.sharding = NamedSharding(devices, PartitionSpec("all"))
            self.any = jax.jit(lambda flags: jnp.max(flags, axis=0))

    def cast(self, stop: bool, save: bool = False) -> None:
        if not self.many:
            self.vote = (stop, save)
            return
        local = np.tile(np.array([stop, save], np.int32), (jax.local_device_count(), 1))  # (local devices, 2)
        self.vote = self.any(jax.make_array_from_process_local_data(self.sharding, local))

    def read(self) -> tuple[bool, bool]:
        """(stop, save) of the last cast vote ((False, False) before the first)."""
        stop, save = (bool(v) for v in np.asarray(self.vote))
        return stop, save


def gather_loader_states(state):
    """Every process's loader state, for the checkpoint (orbax writes JSON items from process 0
    only): the state itself with one process, else {"per_process": [state of process 0, ...]}."""
    if jax.process_count() == 1:
        return state
    raw = np.frombuffer(json.dumps(state).encode(), np.uint8)
    longest = int(np.max(multihost_utils.process_allgather(np.int32(raw.size))))
    rows = multihost_utils.process_allgather(np.pad(raw, (0, longest - raw.size), constant_values=32))
    return {"per_process": [json.loads(bytes(r).decode()) for r in rows]}


def own_loader_state(saved):
    """This process's loader state from a checkpoint's (see gather_loader_states)."""
    if saved is None:
        return None
    n, i = jax.process_count(), jax.process_index()
    if isinstance(saved, dict) and "per_process" in saved:
        if len(saved["per_process"]) != n:
            raise ValueError(f"the checkpoint's loader state is from {len(saved['per_process'])} "
                             f"processes, this run has {n}: resume with the same process count")
        return saved["per_process"][i]
    if n > 1:
        raise ValueError(f"the checkpoint's loader state is from one process, this run has {n}: "
                         "resume with one process")
    return saved


# ---- the step ----------------------------------------------------------------------------------
def make_train_step(loss: Callable, optimizer: optax.GradientTransformation):
    """step((params, opt_state), batch) -> ((params, opt_state), metrics). batch leaves are
    (accum, rows, ...); gradients are summed over micro-batches and divided by the token count."""

    def step(state, batch):
        params, opt_state = state

        def micro(carry, mb):
            grads, total, count = carry
            (s, n), g = jax.value_and_grad(loss, has_aux=True)(params, mb)
            return (jax.tree.map(jnp.add, grads, g), total + s, count + n), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        init = (zeros, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
        (grads, total, count), _ = jax.lax.scan(micro, init, batch)
        grads = jax.tree.map(lambda g, p: (g / count).astype(p.dtype), grads, params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), {"loss": total / count}

    return step


# ---- MFU ---------------------------------------------------------------------------------------
def peak_flops(device=None) -> float:
    """Peak FLOP/s of one device: the table for TPUs/GPUs; on CPU a measured f32 matmul rate
    for the whole machine (all forced CPU devices share the same cores)."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        for key, value in PEAK_FLOPS:
            if key.lower() in device.device_kind.lower():
                return value
        return float("nan")
    n = 1024
    a = jax.device_put(jnp.ones((n, n), jnp.float32), device)
    mm = jax.jit(lambda a: a @ a)
    mm(a).block_until_ready()
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        mm(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / len(jax.devices())  # per device, so MFU = rate / (peak * n_devices)


# ---- the loop ----------------------------------------------------------------------------------
@dataclass
class LoopConfig:
    run_dir: Path
    total_steps: int
    tokens_per_step: int
    flops_per_token: float
    log_every: int = 10  # each of these three: 0 = only at the end
    eval_every: int = 250
    save_every: int = 500
    save_minutes: float = 0  # also save once this much wall time has passed since the last (0: off)
    keep: int = 3
    resume: bool = False
    peak_flops: float | None = None  # per device; measured/looked up when None
    eval_at_start: bool = False  # evaluate the starting params as step 0 (fine-tuning baselines)
    prefetch: int = 2  # batches built ahead on a background thread (0: in the training thread)
    profile: tuple[int, int] | None = None  # steps [start, stop) traced to <run_dir>/profile
    extra_metadata: dict = field(default_factory=dict)


def stage_loop_config(args, **kw) -> LoopConfig:
    """A training stage's LoopConfig: the flags every stage shares (train/cli._add_run_args) and
    the stage's own fields in `kw`."""
    return LoopConfig(log_every=args.log_every, eval_every=args.eval_every, save_every=args.save_every,
                      save_minutes=args.save_minutes, keep=args.keep, resume=args.resume,
                      peak_flops=args.peak_flops, profile=args.profile, **kw)


def prefetched(items: Iterator, depth: int) -> Iterator:
    """`items` run ahead on a background thread, at most `depth` items ahead, so batches are read,
    tokenized and packed while the device runs the step (the host's wait for a step releases
    the GIL). Order and each batch's loader state are unchanged; an exception in `items` is
    raised here, at the item where it happened. depth 0: `items` itself. The thread is a daemon
    blocked on a full queue once the consumer stops: it holds `depth` batches, no more."""
    if depth <= 0:
        return items
    ahead: queue.Queue = queue.Queue(maxsize=depth)
    end = object()

    def produce():
        try:
            for item in items:
                ahead.put((item, None))
            ahead.put((end, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            ahead.put((end, e))

    threading.Thread(target=produce, daemon=True, name="nanocode-batches").start()

    def consume():
        while True:
            item, error = ahead.get()
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    return consume()


class _StopFlag:
    """SIGTERM/SIGINT set a flag; the loop saves a checkpoint at the next step boundary."""

    def __init__(self):
        self.signal = None
        self._old = {}

    def __enter__(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signal is not None:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def every(step: int, period: int, total: int) -> bool:
    """Whether step `step` (counted from 1) logs / evaluates / saves: each `period` steps and at
    the last; period 0 (or less) means at the last only."""
    return step == total or (period > 0 and step % period == 0)


def _restore_targets(params, p_shard, o_shapes, o_shard) -> dict:
    """checkpoint.restore's params_like / opt_state_like (shapes and shardings) for resuming over
    `params`. The checkpoint replaces `params`: their buffers are freed here, before the read, so
    the restored state is the only one on the devices (a d20 state and a second copy of it do not
    fit a 16 GiB chip). The step donates `params` anyway: the caller never gets them back."""
    like = lambda t, s: jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), t, s)  # noqa: E731
    targets = {"params_like": like(params, p_shard), "opt_state_like": like(o_shapes, o_shard)}
    for x in jax.tree.leaves(params):
        if isinstance(x, jax.Array) and not x.is_deleted():
            x.delete()
    return targets


class _Report:
    """What the loop tells: metrics.jsonl rows and log lines (written once, by process 0), the
    progress bar, and the latest metrics (`last`, what `run` returns). Step losses stay on the
    device until a log step (`progress`) reads them, so logging never waits on every step."""

    def __init__(self, lc: LoopConfig, start: int, peak: float, bar, log: Callable):
        self.lc, self.peak, self.bar, self.log = lc, peak, bar, log
        self.metrics_path, self.primary = Path(lc.run_dir) / "metrics.jsonl", jax.process_index() == 0
        self.pending, self.t_last, self.step_last, self.last = [], time.perf_counter(), start, {}

    def record(self, row: dict) -> None:  # metrics are the same on every process: written once
        if self.primary:
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(row) + "\n")

    def say(self, line: str) -> None:
        if self.primary:
            self.log(line)

    def stepped(self, done: int, loss, first: bool) -> None:
        """Step `done` (counted from 1) was queued with this (device) loss."""
        self.pending.append((done, loss))
        self.bar.update(1)
        if first:  # it compiled the step: its time is no rate to count the ETA from
            restart_rate(self.bar)

    def progress(self, done: int) -> None:
        """Log the losses since the last log step and the rate since then (tokens/s, MFU, ETA)."""
        lc = self.lc
        losses = [(s, float(l)) for s, l in self.pending]  # syncs with the device
        dt = time.perf_counter() - self.t_last
        tok_s = lc.tokens_per_step * (done - self.step_last) / dt
        mfu = tok_s * lc.flops_per_token / (self.peak * jax.device_count())
        eta = (lc.total_steps - done) * dt / (done - self.step_last)
        for s, l in losses:
            self.record({"step": s, "loss": l})
        self.last = {"step": done, "loss": losses[-1][1], "tok_per_s": tok_s, "mfu": mfu}
        self.record({**self.last, "eta_s": eta})
        self.bar.set_postfix_str(f"loss {losses[-1][1]:.4f} | {tok_s:,.0f} tok/s | MFU {mfu:.1%}")
        self.pending, self.t_last, self.step_last = [], time.perf_counter(), done

    def evaluated(self, step: int, metrics: dict) -> None:
        self.record({"step": step, **metrics})
        self.last.update(metrics)
        self.say(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))

    def restart_clock(self) -> None:
        """Count the rate from now (eval time is not training time)."""
        self.t_last = time.perf_counter()


class _Saves:
    """The loop's checkpoints: `save` hands a state to the background saver (checkpoint.AsyncSaver);
    `due` says whether lc.save_minutes have passed since the last save."""

    def __init__(self, saver, ckpt_dir: Path, lc: LoopConfig, config, tokenizer, say: Callable):
        self.saver, self.ckpt_dir, self.lc, self.config, self.tokenizer = saver, ckpt_dir, lc, config, tokenizer
        self.say, self.last_save = say, time.monotonic()

    def save(self, step: int, state, loader_state, why: str = "") -> None:
        """Write step `step` in the background (the loop waits for the copy to host memory only);
        `why` (a signal's name) waits for the whole write, the process exits next."""
        t0 = time.perf_counter()
        meta = {"step": step, **self.lc.extra_metadata}
        self.saver.save(step, state[0], config=self.config, opt_state=state[1], metadata=meta,
                        loader_state=gather_loader_states(loader_state), tokenizer=self.tokenizer)
        if why:
            self.saver.wait()
        self.last_save = time.monotonic()
        took = time.perf_counter() - t0
        where = f"{self.ckpt_dir}/{step}"
        self.say(f"saved checkpoint {where} ({why}, {took:.1f} s)" if why else
                 f"saving checkpoint {where} in the background (the loop waited {took:.1f} s)")

    def due(self) -> bool:
        return self.lc.save_minutes > 0 and time.monotonic() - self.last_save >= self.lc.save_minutes * 60


def _step_loop(lc: LoopConfig, state, start: int, data: Iterator, step_fn, mesh: Mesh,
               evaluate: Callable | None, report: _Report, saves: _Saves):
    """Steps start .. lc.total_steps over `data`, with their logging, evals (`evaluate`, with the
    mesh in context) and saves; a stop signal (any process's, `StepVote`) saves and raises
    SystemExit. Returns the final state."""
    bs = batch_sharding(mesh)
    vote, profile = StepVote(), Profile(lc.profile, Path(lc.run_dir) / "profile", report.say)
    with saves.saver, _StopFlag() as stop:
        for step in range(start, lc.total_steps):
            host_batch, loader_state = next(data)
            profile.at(step, state)
            batch = jax.tree.map(lambda x: jax.make_array_from_process_local_data(bs, x), host_batch)
            with jax.set_mesh(mesh):  # the model's per-device kernels read the mesh (attention.batch_axes)
                state, m = step_fn(state, batch)
            done = step + 1
            report.stepped(done, m["loss"], first=step == start)
            stopping, timed_save = vote.read()  # cast after the step before, which has run or is running
            if every(done, lc.log_every, lc.total_steps) or stopping:
                report.progress(done)
            if evaluate and every(done, lc.eval_every, lc.total_steps):
                with jax.set_mesh(mesh):
                    metrics = evaluate(state[0], done)
                report.evaluated(done, metrics)
                report.restart_clock()
            if stopping:
                profile.stop(state)
                why = signal.Signals(stop.signal).name if stop.signal else "a signal to another process"
                saves.save(done, state, loader_state, why)
                report.bar.close()
                raise SystemExit(f"stopped by {why} after step {done}; continue with --resume")
            if every(done, lc.save_every, lc.total_steps) or timed_save:
                saves.save(done, state, loader_state)
            vote.cast(stop.signal is not None, saves.due())  # after this step's save: a save resets the clock
    profile.stop(state)
    return state


def run(lc: LoopConfig, *, params, optimizer, loss, mesh: Mesh, batches: Callable[[dict | None], Iterator],
        config, tokenizer=None, evaluate: Callable | None = None, log: Callable = print) -> dict:
    """Train `params` for lc.total_steps (or continue the run in lc.run_dir with lc.resume).

    batches(loader_state) -> iterator of (host numpy batch dict with leaves (accum, local_rows, ...),
    loader_state after it). evaluate(params, step) -> dict of metrics (e.g. val bpb), run every
    eval_every steps and at the end. Returns the final metrics dict.
    """
    from nanocode import checkpoint  # here: the step and its helpers need no orbax (bench/)
    from tqdm import tqdm  # here: bench/accelerator_check runs the step where only jax, numpy, optax are
    ckpt_dir = Path(lc.run_dir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    p_shard = tree_shardings(params, mesh)
    o_shapes = jax.eval_shape(optimizer.init, params)
    o_shard = tree_shardings(o_shapes, mesh)  # moments follow params
    start, loader_state = 0, None
    if lc.resume and checkpoint.latest_step(ckpt_dir) is not None:
        r = checkpoint.restore(ckpt_dir, **_restore_targets(params, p_shard, o_shapes, o_shard))
        params, opt_state, start = r["params"], r["opt_state"], r["step"]
        loader_state = own_loader_state(r["loader_state"])
        if jax.process_index() == 0:
            log(f"resumed from {ckpt_dir}/{start}")
    else:
        params = place(params, p_shard)
        opt_state = jax.jit(optimizer.init, out_shardings=o_shard)(params)

    step_fn = jax.jit(make_train_step(loss, optimizer), donate_argnums=0,
                      in_shardings=((p_shard, o_shard), batch_sharding(mesh)),
                      out_shardings=((p_shard, o_shard), None))
    peak = lc.peak_flops or peak_flops()
    if jax.process_index() == 0:  # where it trains: a chip's machine whose jax fell back to its CPU shows here
        d = jax.devices()[0]
        log(f"devices: {jax.device_count()} x {d.device_kind} ({d.platform}); MFU against "
            f"{peak / 1e12:.3g} TFLOP/s each")
    data = prefetched(batches(loader_state), lc.prefetch)
    saver = checkpoint.AsyncSaver(ckpt_dir, lc.keep)
    bar = tqdm(total=lc.total_steps, initial=start, unit="step", dynamic_ncols=True,
               disable=jax.process_index() != 0)
    report = _Report(lc, start, peak, bar, log)
    saves = _Saves(saver, ckpt_dir, lc, config, tokenizer, report.say)
    if evaluate and lc.eval_at_start and start == 0:
        with jax.set_mesh(mesh):
            metrics = evaluate(params, 0)
        report.evaluated(0, metrics)
    state = _step_loop(lc, (params, opt_state), start, data, step_fn, mesh, evaluate, report, saves)
    bar.close()
    return {**report.last, "params": state[0]}
