"""`train speedrun --preset NAME`: data -> tokenizer -> base -> synth -> sft -> (rollouts -> rft) ->
dpo -> export -> evals -> report in one command, each stage a plain `train ...` / `evals ...`
command a reader could type (printed before it runs; rollouts and rft where the preset has them).
PRESETS holds each preset's commands, with the reasons for its sizes; a run lives in
$NANOCODE_HOME/speedrun/<preset> (data/ tokenizer/ base/ synth/ sft/ dpo/ model/ report/ logs/),
and shipping a model is copying model/ to nanocode/default_model/.

Trade-offs:
- Every stage runs as its own subprocess: the commands are exactly what a user would run by hand,
  memory is returned between stages, and each stage sets up its own devices. The price is ~5-10 s
  of imports per stage.
- Progress is a file per stage: `<run>/<stage>.done` is written when the stage exits 0 and a
  rerun skips it; an interrupted training stage restarts with `--resume` from its newest
  checkpoint. A stage whose inputs changed is not detected: delete its .done to redo it.
- A SIGTERM or SIGINT to the driver is passed to the running stage once (a training stage saves
  and exits), so `timeout` around `train speedrun` cuts a run into chunks of lent chip time that
  lose nothing (train/v5e.sh). A preset's `beside` runs a CPU stage alongside a chip stage.
- Multi-host (`--multihost`): process 0 alone runs the single-writer stages while the others wait
  for its `.done` (or `.failed`); the training stages run on every process. The driver never
  imports jax (nor does `train --help`, which reads PRESETS): a probe subprocess learns the
  process index (probe_processes; `probe` imports jax and numpy inside), at the price of one more
  jax start-up and rendezvous per run.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from nanocode.common import nanocode_home
from tasks.real_projects import EVAL_PACKAGES

STAGES = ("data", "tokenizer", "base", "synth", "sft", "rollouts", "rft", "dpo", "export", "evals", "report")
TRAINING = ("base", "sft", "rft", "dpo")  # with --multihost: every process runs these together
OPTIONAL = ("rollouts", "rft", "dpo")  # stages a preset may leave out (no commands, done at once)
SINGLE_WRITER = tuple(s for s in STAGES if s not in TRAINING)  # with --multihost: process 0 only
WAIT_POLL_S = 2.0  # how often a waiting process looks for process 0's marker files
WAIT_REPORT_S = 60.0  # how often it says that it is still waiting
PROBE_PREFIX = "speedrun-probe "

# Flags that matter on TPU (overlap of collectives with compute; from MaxText's v6e recipes) and
# GPU (latency-hiding scheduler). Set only when the variable is not already set by the user.
TPU_ENV = {"LIBTPU_INIT_ARGS": " ".join([
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
])}
GPU_ENV = {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"}

EVAL_EXCLUDE = sorted(g for p in EVAL_PACKAGES for g in (f"{p}/*", f"{p}.py"))  # out of pretraining
PRESETS = {
    "cpu": dict(
        about="tiny model on this CPU (~2 h on 2 cores); the shipped default model (v5: sft 700 steps)",
        # the packages the real-code eval split draws from stay out of pretraining too
        data=[["data", "local", "--exclude", *EVAL_EXCLUDE]],
        # a name is the same tokens after a space, a backtick or a quote (copying from the request)
        tokenizer=["--vocab-size", "4096", "--max-chars", "20000000", "--split", "compound"],
        # depth 4, width 256 (7.3M params), sized for one sitting (<= ~150 min on 2 cores). Copy
        # rows: a model that cannot copy cannot use names from its context; induction (copying
        # from the context) forms late in this schedule: a shorter one can end before it does
        base=["--preset", "cpu-d4", "--steps", "1200", "--total-batch", "4096", "--device-batch", "8",
              "--lr-scale", "6", "--copy-share", "0.5", "--span-share", "0.5", "--eval-every", "300",
              "--eval-batches", "4", "--save-every", "300"],
        # the last quarter at the agent's 2,048 context, names planted up to ~1,800 tokens apart:
        # a model pretrained at 512 never saw the distances the agent works at
        base_long=["--seq-len", "2048", "--steps", "300", "--total-batch", "4096", "--device-batch", "2",
                   "--lr-scale", "6", "--copy-share", "0.25", "--span-share", "0.75", "--eval-every", "150",
                   "--eval-batches", "2", "--save-every", "100"],
        synth=["--n", "3000", "--n-eval", "100", "--code-ratio", "0.1", "--real-ratio", "0.5", "--workers", "2"],
        # 1,400 steps (~2 epochs of synth): twice v5's 700 resolved 144 of 272 training-split tasks
        # against 109, where twice the base's steps for the same minutes gave 118 (docs/LOG.md)
        sft=["--seq-len", "2048", "--device-batch", "2", "--steps", "1400", "--lr-scale", "5",
             "--eval-every", "400", "--save-every", "400", "--sample-tokens", "0"],
        # on-policy round: the sft model on 160 fresh training tasks; its resolved rollouts, 10x,
        # beside the synth data for a short second sft; its departures as pairs for dpo
        rollouts=["--n", "160", "--max-steps", "10", "--real-ratio", "0.5", "--workers", "2"],
        rft=["--seq-len", "2048", "--device-batch", "2", "--steps", "150", "--lr-scale", "2",
             "--eval-every", "75", "--save-every", "75", "--sample-tokens", "0"],
        on_policy_weight=10,
        dpo=["--device-batch", "4", "--steps", "30", "--eval-every", "15", "--save-every", "30"],
        evals=[["bpb", "--batches", "4"],
               ["humaneval", "--n", "10", "--temperature", "0.8", "--max-tokens", "256"],
               # the agent's 1024-token replies; generated projects, then real code (both held out)
               ["agent", "--per-family", "13", "--max-steps", "10"],
               ["agent", "--split", "real", "--per-family", "14", "--max-steps", "10"]],
    ),
}
PRESETS["v5e"] = dict(
    about="the default model on one TPU v5e chip (train/v5e.sh drives it in chunks of chip time): d6, "
          "vocab 8192, pretrained on real Python (--src: wheels, sdists, trees) in ~8 min",
    chip="v5e", devices=1,
    # real code and the English around it, the eval split's packages left out; on the host's cores
    data=[["data", "local", "--kind", "code", "--exclude", *EVAL_EXCLUDE, "--workers", "12"],
          ["data", "local", "--kind", "text", "--exclude", *EVAL_EXCLUDE, "--workers", "12"]],
    tokenizer=["--vocab-size", "8192", "--max-chars", "100000000", "--code-ratio", "0.7", "--split", "compound"],
    # d6 (26.3M params, 13.8M scaling, a 53 MB bf16 checkpoint), 32 rows of 2,048 with no
    # recomputation; 4,300 steps of 65,536 tokens = 282M tokens, ~20 per scaling parameter
    # (bench/shape_sweep.py measured the shape against its neighbours on the chip)
    base=["--preset", "d6", "--seq-len", "2048", "--device-batch", "32", "--total-batch", "65536",
          "--steps", "4300", "--lr-scale", "2", "--code-ratio", "0.7", "--span-share", "0.2",
          "--eval-every", "1000", "--eval-batches", "8", "--save-every", "1000", "--save-minutes", "3"],
    # on the host's CPU cores while base trains on the chip (`beside`); resumable, so conversations
    # made ahead (on the VM, same settings) are carried into synth/ and the host adds to them
    synth=["--n", "30000", "--n-eval", "100", "--code-ratio", "0.1", "--real-ratio", "0.5", "--workers", "10",
           "--minutes", "7"],
    beside={"base": "synth"},
    # one epoch at 2 rows per update, lr-scale 2, and no dpo: chosen on held-out real-code tasks
    # of other seeds than the reported ones (docs/LOG.md, 2026-12-06): 2 epochs at lr-scale 5
    # memorised the synth phrasings (val loss 0.015) and lost on held-out ones; 30 dpo steps
    # changed no verdict of the training split. sft unpins the chat tokens' head logits that
    # pretraining pushed to the softcap's floor (finetune.unpin_special_heads)
    sft=["--seq-len", "2048", "--device-batch", "2", "--epochs", "1", "--lr-scale", "2",
         "--eval-every", "500", "--save-every", "1000", "--save-minutes", "3", "--sample-tokens", "0"],
    evals=PRESETS["cpu"]["evals"],
)
# FineWeb-Edu shards hold ~250M chars (~53M tokens at 32k vocab): enough for 80% of ratio 12 x the
# scaling params (d12 1.3B tokens, d20 5.2B, d24 8.8B) plus ~20%; code gets a quarter as many shards.
for _depth, _shards, _hours in ((12, 24, "0.1"), (20, 96, "1.4"), (24, 160, "4.3")):  # README's estimates
    PRESETS[f"d{_depth}"] = dict(
        about=f"d{_depth} on a TPU v6e-8 (pretraining ~{_hours} h estimated at 40%% MFU; GPUs: same command)",
        # sized as nanochat/nanocode size them; bench/memory.py checks the step fits the chip
        chip="v6e", devices=8,  # what the preset is sized for
        data=[["data", "download", "--kind", "fineweb", "--shards", str(_shards)],
              ["data", "download", "--kind", "stack", "--shards", str(max(8, _shards // 4))]],
        tokenizer=["--vocab-size", "32768", "--max-chars", "2000000000"],
        # per-chip memory by bench/memory.py (docs/BENCHMARKS.md): d12 keeps matmul outputs for
        # the backward (remat dots), d20/d24 only each layer's input (remat block); sft and dpo
        # inherit the remat policy with the checkpoint's config
        base=["--preset", f"d{_depth}", "--device-batch", "16" if _depth < 24 else "8",
              "--remat", "dots" if _depth == 12 else "block",
              "--mesh", "data=1,fsdp=-1", "--save-every", "1000", "--save-minutes", "10"]
        + (["--seq-len", "4096"] if _depth == 24 else []),
        synth=["--n", "100000", "--n-eval", "300"],
        sft=["--device-batch", "8", "--epochs", "2", "--mesh", "data=1,fsdp=-1", "--save-every", "1000",
             "--save-minutes", "10"],
        dpo=["--device-batch", "8", "--epochs", "1", "--mesh", "data=1,fsdp=-1"],
        evals=[["bpb"], ["core"], ["humaneval", "--n", "100", "--temperature", "0.8"],
               ["mbpp", "--n", "10", "--temperature", "0.8"],
               ["agent", "--per-family", "30", "--max-steps", "25"]],
    )


# One GPU at home, d12 on one card (the device batch and remat sized by bench/memory.py's analysis
# for the card's memory, docs/BENCHMARKS.md); on more cards the same flags shard over all of them.
for _name, _chip, _base_batch, _remat, _sft_batch, _card in (
        ("d12-gpu80", "gpu80", "32", "dots", "16", "one 80 GB GPU (H100, A100 80GB)"),
        ("d12-gpu24", "gpu24", "16", "block", "8", "one 24 GB GPU (RTX 4090, RTX 3090)")):
    PRESETS[_name] = dict(
        PRESETS["d12"], about=f"d12 on {_card} (README: estimated times)", chip=_chip, devices=1,
        base=["--preset", "d12", "--device-batch", _base_batch, "--remat", _remat, "--mesh", "data=1,fsdp=-1",
              "--save-every", "1000", "--save-minutes", "10"],
        sft=["--device-batch", _sft_batch, "--epochs", "2", "--mesh", "data=1,fsdp=-1", "--save-every", "1000",
             "--save-minutes", "10"],
        dpo=["--device-batch", _sft_batch, "--epochs", "1", "--mesh", "data=1,fsdp=-1"])


def _tool(name: str) -> list[str]:
    """`train ...` or `evals ...` through this interpreter (works without the scripts on PATH)."""
    return [sys.executable, "-m", f"{name}.cli"]


def synth_files(run: Path, name: str) -> list[str]:
    """<run>/synth/<name> and the same file of every <run>/synth-*/ (conversations made ahead on
    other machines, other seeds or package roots: synth resumes only on its own settings, so each
    set keeps its own directory and the training stages read them all)."""
    return [str(run / "synth" / name)] + [str(f) for f in sorted(run.glob(f"synth-*/{name}"))]


def stage_commands(stage: str, p: dict, run: Path, multihost: bool = False) -> list[list[str]]:
    """The command lines of one stage (most stages have one; data and evals may have several)."""
    R, host = str(run), ["--multihost"] if multihost else []
    train, evals = _tool("train"), _tool("evals")
    resume = lambda d: ["--resume"] if any((run / d / "checkpoints").glob("[0-9]*")) else []  # noqa: E731
    model = str(run / "model")
    if stage == "data":  # with --src: the sources of every `data local`
        src = ["--src", *p["src"]] if p.get("src") else []
        return [train + c + (src if c[:2] == ["data", "local"] else []) + ["--out", f"{R}/data"]
                for c in p["data"]]
    if stage == "tokenizer":
        return [train + ["tokenizer", "--data", f"{R}/data", "--out", f"{R}/tokenizer"] + p["tokenizer"]]
    if stage == "base":  # with base_long: a last phase at the agent's context, from the first
        cmds = [train + ["base", "--tokenizer", f"{R}/tokenizer", "--data", f"{R}/data", "--run-dir",
                         f"{R}/base"] + p["base"] + host + resume("base")]
        if "base_long" in p:
            cmds.append(train + ["base", "--from", f"{R}/base", "--data", f"{R}/data", "--run-dir",
                                 f"{R}/base_long"] + p["base_long"] + host + resume("base_long"))
        return cmds
    if stage == "synth":
        return [train + ["synth", "--out", f"{R}/synth"] + p["synth"]]
    if stage == "sft":
        base = "base_long" if "base_long" in p else "base"
        return [train + ["sft", "--from", f"{R}/{base}", "--data", *synth_files(run, "train.jsonl"), "--val",
                         f"{R}/synth/val.jsonl", "--run-dir", f"{R}/sft"] + p["sft"] + host + resume("sft")]
    if stage in OPTIONAL and stage not in p:
        return []
    if stage == "rollouts":  # the sft model on fresh training tasks (train/rollouts.py)
        return [train + ["rollouts", "--model", f"{R}/sft", "--out", f"{R}/rollouts"] + p["rollouts"]]
    if stage == "rft":  # sft again on the synth data plus the model's own resolved rollouts
        return [train + ["sft", "--from", f"{R}/sft", "--data", *synth_files(run, "train.jsonl"),
                         f"{R}/rollouts/sft.jsonl*{p['on_policy_weight']}", "--val", f"{R}/synth/val.jsonl",
                         "--run-dir", f"{R}/rft"] + p["rft"] + host + resume("rft")]
    if stage == "dpo":  # the synth pairs, plus the on-policy ones where the model departed
        on_policy = "rollouts" in p
        return [train + ["dpo", "--from", f"{R}/{'rft' if on_policy else 'sft'}", "--data",
                         *synth_files(run, "preference_train.jsonl")]
                + ([f"{R}/rollouts/preference.jsonl*{p['on_policy_weight']}"] if on_policy else [])
                + ["--val", f"{R}/synth/preference_val.jsonl", "--run-dir", f"{R}/dpo"]
                + p["dpo"] + host + resume("dpo")]
    if stage == "export":  # the preset's last post-training stage
        last = next(s for s in ("dpo", "rft", "sft") if s in p)
        return [train + ["export", "--from", f"{R}/{last}", "--out", model]]
    if stage == "evals":
        extra = {"bpb": ["--data", f"{R}/data"]}
        return [evals + [c[0], "--model", model, "--out", f"{model}/evals"] + c[1:] + extra.get(c[0], [])
                for c in p["evals"]]
    if stage == "report":
        return [evals + ["report", "--model", model, "--out", f"{R}/report"],
                [sys.executable, "-m", "evals.model_card", R]]
    raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")


def shown_command(cmd: list[str]) -> str:
    """`python -m train.cli base ...` as the user would type it: `train base ...`."""
    if cmd[:2] == [sys.executable, "-m"]:
        cmd = [cmd[2].removesuffix(".cli")] + cmd[3:] if cmd[2].endswith(".cli") else ["python"] + cmd[1:]
    return shlex.join(cmd)


def _write_marker(path: Path, data: dict) -> None:
    """A marker file, written whole or not at all (another process may be polling for it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


LIVE: list[subprocess.Popen] = []  # the stage processes now running (their own sessions)
STOP: list[int] = []  # the signals the driver got: a command started after one gets it at once


def _pass_signal(signum, frame) -> None:
    """SIGTERM/SIGINT to the driver reach each running stage process once: a training stage
    saves a checkpoint and exits (train/loop.py), and the driver waits for it, so a `timeout`
    around `train speedrun` ends a chunk of chip time with the work kept. The stages run in
    their own sessions so that a signal to the driver's process group is not delivered twice
    (a second signal stops a training stage without its save)."""
    STOP.append(signum)
    for proc in LIVE:
        if proc.poll() is None:
            proc.send_signal(signum)


def run_stage(stage: str, cmds: list[list[str]], run: Path, env: dict, process: int = 0,
              write_done: bool = True, echo: bool = True) -> int:
    """Run a stage's commands, output to the terminal (when echo) and logs/<stage>.log (process 0)
    or logs/<stage>.process<i>.log; .done on success (unless write_done is False)."""
    (run / "logs").mkdir(parents=True, exist_ok=True)
    log_path = run / "logs" / (f"{stage}.log" if process == 0 else f"{stage}.process{process}.log")
    t0 = time.time()
    with open(log_path, "a") as log:
        for cmd in cmds:
            if STOP:
                print(f"speedrun: stopped by {signal.Signals(STOP[-1]).name} before stage {stage}; "
                      "rerun with --resume", file=sys.stderr)
                return 128 + STOP[-1]
            shown = shown_command(cmd)
            print(f"\n=== {stage}: {shown}" + ("" if echo else f" (output: {log_path})"), flush=True)
            log.write(f"\n$ {shown}\n")
            log.flush()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env={**os.environ, **env}, bufsize=0, start_new_session=True)
            LIVE.append(proc)
            if STOP:  # it came while the process was being started
                proc.send_signal(STOP[-1])
            try:
                for chunk in iter(lambda: proc.stdout.read(4096), b""):
                    if echo:
                        sys.stdout.buffer.write(chunk)
                        sys.stdout.flush()
                    log.write(chunk.decode("utf-8", "replace"))
                    log.flush()
                rc = proc.wait()
            finally:
                LIVE.remove(proc)
            if rc != 0:
                print(f"\nspeedrun: stage {stage} failed (exit {rc}); log: {log_path}; "
                      "fix it and rerun with --resume", file=sys.stderr)
                return rc or 1
    seconds = time.time() - t0
    if write_done:
        _write_marker(run / f"{stage}.done", {"commands": [shown_command(c) for c in cmds],
                                              "seconds": round(seconds, 1)})
    print(f"=== {stage} done in {seconds / 60:.1f} min", flush=True)
    return 0


def run_beside(stage: str, other: str, p: dict, run: Path, env: dict) -> int:
    """`stage` on the accelerator with `other` (a CPU stage, e.g. synth beside base) in a thread
    alongside, its output to its log only; both must succeed. A signal reaches both."""
    rcs = {}
    side = threading.Thread(target=lambda: rcs.setdefault(other, run_stage(
        other, stage_commands(other, p, run), run, env, echo=False)))
    side.start()
    rc = run_stage(stage, stage_commands(stage, p, run), run, env)
    side.join()
    return rc or rcs.get(other, 1)


# ---- --multihost: who runs what -------------------------------------------------------------------
def probe_processes(run: Path, fresh: bool, env: dict) -> tuple[int, int, bool] | None:
    """(process index, process count, refused) from the probe subprocess (probe); refused: process
    0 found `run` holding a run and `fresh` (no --resume) was asked. None (after saying why) when
    the probe failed. The driver itself never imports jax, so it never holds the coordinator's
    port that each training stage binds again. The price: one more jax start-up per run (seconds;
    on a pod the probe initializes the accelerator too, a preflight check of the devices and
    network the training stages use), and a second rendezvous, so every worker must start within
    JAX's initialization timeout (5 min). Reading the index from the environment alone would be
    free but would not work with JAX's auto-detection (Cloud TPU, SLURM, ...)."""
    cmd = [sys.executable, "-m", "train.speedrun", "probe", str(run)] + (["--fresh"] if fresh else [])
    print(f"=== multihost: {shown_command(cmd)}", flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, env={**os.environ, **env}, text=True)
    lines = proc.stdout.splitlines()
    found = [json.loads(ln.removeprefix(PROBE_PREFIX)) for ln in lines if ln.startswith(PROBE_PREFIX)]
    other = "\n".join(ln for ln in lines if not ln.startswith(PROBE_PREFIX))
    if other:
        print(other, flush=True)
    if proc.returncode or not found:
        print(f"speedrun: the multihost probe failed (exit {proc.returncode}): every worker must run the "
              "same command at about the same time; outside JAX's cluster detection (Cloud TPU, SLURM, "
              "...) set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID", file=sys.stderr)
        return None
    d = found[-1]
    return d["process_index"], d["process_count"], d["refused"]


def probe(run: str, fresh: bool) -> int:
    """`python -m train.speedrun probe RUN [--fresh]`: join the other processes, and print this
    one's index and count. Process 0 first checks the run dir (with --fresh: refuse one that holds
    a run) and deletes stale failure markers; the broadcast of its verdict is the barrier, so a
    refused run stops every process, later workers never trip over the files process 0 creates,
    and a failure marker from an earlier run cannot release a waiter. `.done` markers are kept:
    with --resume they mean "done" on every process alike."""
    from train.loop import init_multihost
    init_multihost()
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    index, count = jax.process_index(), jax.process_count()
    refused = False
    if index == 0:
        run_dir = Path(run)
        refused = fresh and run_dir.exists() and any(run_dir.iterdir())
        if not refused:
            for f in run_dir.glob("*.failed"):
                f.unlink()
    refused = bool(multihost_utils.broadcast_one_to_all(np.int32(refused)))
    print(PROBE_PREFIX + json.dumps({"process_index": index, "process_count": count, "refused": refused}),
          flush=True)
    return 0


def mark_failed(run: Path, stage: str, why: str) -> None:
    """Process 0's `<stage>.failed`: what makes the waiting processes stop (see wait_for_stage)."""
    _write_marker(run / f"{stage}.failed", {"stage": stage, "process": 0, "failed": why,
                                            "log": str(run / "logs" / f"{stage}.log")})


def wait_for_stage(run: Path, stage: str, timeout_s: float) -> int:
    """On a process other than 0: wait for process 0's `<stage>.done` (0), or any `.failed` marker
    it writes, or the timeout (1, after saying why). A line every WAIT_REPORT_S while waiting."""
    log = run / "logs" / f"{stage}.log"
    print(f"\n=== {stage}: runs on process 0 (log: {log}); waiting for {run / (stage + '.done')}", flush=True)
    t0 = time.time()
    report = t0 + WAIT_REPORT_S
    while True:
        if (run / f"{stage}.done").exists():
            print(f"=== {stage}: done on process 0 (waited {(time.time() - t0) / 60:.1f} min)", flush=True)
            return 0
        failed = sorted(run.glob("*.failed"))
        if failed:
            try:
                d = json.loads(failed[0].read_text())
            except (OSError, ValueError):
                d = {}
            name = d.get("stage", failed[0].name.removesuffix(".failed"))
            print(f"speedrun: process 0 failed stage {name} ({d.get('failed', 'see its log')}); its log: "
                  f"{d.get('log', run / 'logs' / (name + '.log'))}; fix it and rerun the same command with "
                  "--resume on every worker", file=sys.stderr)
            return 1
        waited = time.time() - t0
        if waited > timeout_s:
            print(f"speedrun: gave up waiting for process 0 to finish stage {stage} after "
                  f"{waited / 60:.1f} min (--wait-timeout); its log: {log}", file=sys.stderr)
            return 1
        if time.time() >= report:
            print(f"speedrun: still waiting for process 0: stage {stage}, {waited / 60:.0f} min", flush=True)
            report += WAIT_REPORT_S
        time.sleep(WAIT_POLL_S)


def with_extra(p: dict, extra: list[str]) -> dict:
    """The preset with each `STAGE=ARGS` of --extra appended to that stage's arguments (argparse
    keeps the last value of a flag, so an appended flag overrides the preset's)."""
    p = dict(p)
    takes = sorted(s for s in (*STAGES, "base_long") if s in p and all(isinstance(a, str) for a in p[s]))
    for item in extra:
        stage, sep, args = item.partition("=")
        if not sep or stage not in takes:
            raise ValueError(f"--extra {item!r}: expected STAGE=ARGS with STAGE one of {', '.join(takes)} "
                             "(this preset's stages that take one argument list)")
        p[stage] = p[stage] + shlex.split(args)
    return p


def main(args) -> int:
    p = with_extra({**PRESETS[args.preset], "src": [str(Path(x).resolve()) for x in args.src or ()]}, args.extra)
    run = (Path(args.run_dir).expanduser() if args.run_dir else nanocode_home() / "speedrun" / args.preset).resolve()
    stages = STAGES
    if args.only:
        stages = tuple(s.strip() for s in args.only.split(","))
        bad = [s for s in stages if s not in STAGES]
        if bad:
            raise ValueError(f"--only: unknown stage(s) {', '.join(bad)}; stages: {', '.join(STAGES)}")
    if args.dry_run:
        for s in stages:
            where = "" if not args.multihost else " (process 0 only)" if s in SINGLE_WRITER else \
                " (every process)"
            for c in stage_commands(s, p, run, args.multihost):
                print(f"{s}{where}: {shown_command(c)}")
        return 0
    held = (f"{run} already holds a run; add --resume to continue it (done stages are skipped), or pass "
            "another --run-dir")
    env = {k: v for k, v in _platform_env().items() if k not in os.environ}
    index, count = 0, 1
    if args.multihost:
        probed = probe_processes(run, fresh=not args.resume, env=env)
        if probed is None:
            return 1
        index, count, refused = probed
        print(f"=== multihost: process {index} of {count}", flush=True)
        if refused:
            raise ValueError(held if index == 0 else f"process 0 found that {held}")
    elif run.exists() and any(run.iterdir()) and not args.resume:
        raise ValueError(held)
    run.mkdir(parents=True, exist_ok=True)
    if index == 0:
        (run / "preset").write_text(args.preset + "\n")  # for the model card's recipe line
    t0 = time.time()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _pass_signal)
    for s in stages:
        if (run / f"{s}.done").exists():
            print(f"=== {s}: done already (delete {run / (s + '.done')} to redo it)")
            continue
        other = p.get("beside", {}).get(s)
        if index != 0 and s in SINGLE_WRITER:
            rc = wait_for_stage(run, s, args.wait_timeout * 60)
        elif other in stages and not args.multihost and not (run / f"{other}.done").exists():
            rc = run_beside(s, other, p, run, env)
        else:
            try:
                rc = run_stage(s, stage_commands(s, p, run, args.multihost), run, env, process=index,
                               write_done=index == 0)
            except BaseException as e:  # interrupted: the waiters must not wait for it
                if args.multihost and index == 0:
                    mark_failed(run, s, f"interrupted: {e!r}")
                raise
            if rc and args.multihost and index == 0:
                mark_failed(run, s, f"exit {rc}")
        if rc:
            return rc
    if args.only:
        print(f"\nspeedrun {args.preset}: {', '.join(stages)} done in {(time.time() - t0) / 60:.1f} min")
        return 0
    if index != 0:
        print(f"\nspeedrun {args.preset}: process {index} of {count} finished in "
              f"{(time.time() - t0) / 60:.1f} min; process 0 wrote the model: {run / 'model'}")
        return 0
    print(f"\nspeedrun {args.preset}: finished in {(time.time() - t0) / 60:.1f} min; model: "
          f"{run / 'model'}; report: {run / 'report' / 'report.md'}\n"
          f"try it: nanocode --model {run / 'model'}")
    return 0


def _platform_env() -> dict:
    """TPU or GPU flags by what is installed (no jax import: just look for the runtime packages)."""
    if importlib.util.find_spec("libtpu"):
        return TPU_ENV
    if importlib.util.find_spec("jax_cuda13_plugin") or importlib.util.find_spec("jax_cuda12_plugin"):
        return GPU_ENV
    return {}


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or [""]
    if command == "probe" and len(rest) in (1, 2) and rest[1:] in ([], ["--fresh"]):
        raise SystemExit(probe(rest[0], fresh=rest[1:] == ["--fresh"]))
    raise SystemExit("usage: python -m train.speedrun probe RUN_DIR [--fresh]")
