"""`train base` end to end on a tiny corpus: exact resume after SIGKILL, a checkpoint on SIGTERM,
data/FSDP parallel runs on 8 forced CPU devices matching one device, and clear errors."""

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from train_helpers import losses, wait_for_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "cpu-d2", "--seq-len", "64", "--log-every", "1", "--eval-every", "1000",
        "--eval-batches", "1", "--code-ratio", "0.5"]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A NANOCODE_HOME with code+text shards from a slice of the stdlib and a 512-token tokenizer."""
    from train.cli import main

    home = tmp_path_factory.mktemp("home")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    data = home / "data"
    assert main(["data", "local", "--kind", "code", "--src", str(stdlib / "json"), str(stdlib / "email"),
                 "--out", str(data), "--docs-per-shard", "20", "--row-group", "8"]) == 0
    assert main(["data", "local", "--kind", "text", "--src", str(stdlib / "email"), str(stdlib / "json"),
                 str(stdlib / "idlelib"), "--out", str(data)]) in (0, 2)
    if not list((data / "text").glob("shard_*.parquet")):  # no prose there: use code as "text" too
        assert main(["data", "local", "--kind", "code", "--src", str(stdlib / "idlelib"),
                     "--out", str(home / "prose")]) == 0
        (home / "prose" / "code").rename(data / "text")
    assert main(["tokenizer", "--data", str(data), "--vocab-size", "512", "--max-chars", "2000000",
                 "--out", str(home / "tokenizer")]) == 0
    return home


def train(home, *args, env_extra=None, wait=True):
    env = {**os.environ, "NANOCODE_HOME": str(home), "PYTHONPATH": str(ROOT), **(env_extra or {})}
    cmd = [sys.executable, "-m", "train.cli", "base", *TINY, *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_resume_after_sigkill_is_bitwise(home, tmp_path):
    """(with copy rows and scaled lrs, as the cpu speedrun preset trains)"""
    common = ["--steps", "12", "--device-batch", "4", "--total-batch", "512", "--save-every", "4",
              "--copy-share", "0.25", "--lr-scale", "2"]
    train(home, *common, "--run-dir", str(tmp_path / "straight"))
    proc = train(home, *common, "--run-dir", str(tmp_path / "killed"), wait=False)
    wait_for_checkpoint(tmp_path / "killed", 4, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = losses(tmp_path / "killed")
    assert max(before) < 12, "the run finished before it was killed"
    train(home, *common, "--run-dir", str(tmp_path / "killed"), "--resume")
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "killed")
    assert sorted(resumed) == list(range(1, 13))
    assert resumed == straight  # bitwise: same floats at every step
    assert straight[12] < straight[1]


@pytest.mark.slow  # tests/test_multihost.py stops two hosts with SIGTERM and resumes them exactly
def test_sigterm_saves_a_checkpoint(home, tmp_path):
    run_dir = tmp_path / "term"
    proc = train(home, "--steps", "200", "--device-batch", "2", "--total-batch", "128", "--save-every", "2",
                 "--run-dir", str(run_dir), wait=False)
    wait_for_checkpoint(run_dir, 2, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert "stopped by SIGTERM" in out and "--resume" in out
    from nanocode import checkpoint

    last = checkpoint.latest_step(run_dir / "checkpoints")
    assert last == max(losses(run_dir)) < 200  # saved at the step it stopped on


def test_save_minutes_checkpoints_by_wall_time_in_the_background(home, tmp_path):
    """--save-minutes: the wall-time vote cast after step 1 (compile included, far past 6 ms)
    lands at step 2, which saves in the background; the last step saves as always."""
    run_dir = tmp_path / "timed"
    out = train(home, "--steps", "4", "--device-batch", "2", "--total-batch", "128", "--save-every", "0",
                "--save-minutes", "0.0001", "--keep", "10", "--run-dir", str(run_dir)).stdout
    from nanocode import checkpoint
    steps = checkpoint.all_steps(run_dir / "checkpoints")
    assert steps[0] == 2 and steps[-1] == 4, steps
    assert "in the background" in out
    assert re.search(r"^devices: \d+ x cpu \(cpu\); MFU against [\d.]+ TFLOP/s each$", out, re.M), out[:2000]


def test_batch_that_does_not_divide_is_a_clear_error(home, tmp_path):
    env = {**os.environ, "NANOCODE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "train.cli", "base", *TINY, "--device-batch", "3",
                        "--total-batch", "1000", "--run-dir", str(tmp_path / "x")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "not a multiple of device batch 3" in r.stderr


@pytest.mark.parametrize("mesh", ["fsdp=8", pytest.param("data=8", marks=pytest.mark.slow)])
def test_data_and_fsdp_parallel_match_one_device(home, tmp_path, mesh):
    """8 forced CPU devices: data=8 and fsdp=8 give the single-device loss curve (float tolerance)
    for 10 steps, with the same global batch (data=8 is slow-marked: tests/test_multihost.py
    trains data-parallel across two hosts by default)."""
    common = ["--steps", "10", "--total-batch", "512", "--save-every", "100", "--peak-flops", "1e11"]
    train(home, *common, "--device-batch", "8", "--run-dir", str(tmp_path / "one"))
    train(home, *common, "--device-batch", "1", "--mesh", mesh, "--run-dir", str(tmp_path / "many"),
          env_extra={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    one, other = losses(tmp_path / "one"), losses(tmp_path / "many")
    assert sorted(one) == list(range(1, 11))
    for step in one:
        assert abs(other[step] - one[step]) < 1e-4 * max(1.0, one[step]), (mesh, step)


FSDP_CHECK = """
import jax, numpy as np
from nanocode.config import preset
from nanocode.gpt import init_params
from nanocode.sharding import make_mesh, tree_shardings
cfg = preset("cpu-d2", vocab_size=512)
params = init_params(cfg, jax.random.PRNGKey(0))
mesh = make_mesh("fsdp=8")
sharded = jax.device_put(params, tree_shardings(params, mesh))
total = sum(x.size for x in jax.tree.leaves(params))
per_device = [0] * 8
for x in jax.tree.leaves(sharded):
    for s in x.addressable_shards:
        per_device[s.device.id] += s.data.size
print(total, per_device)
"""


def test_fsdp_shards_parameters_eightfold(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    r = subprocess.run([sys.executable, "-c", FSDP_CHECK], env=env, capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    total, per_device = r.stdout.split(" ", 1)
    per_device = json.loads(per_device)
    assert len(set(per_device)) == 1
    # every matrix and embedding divides by 8; only the lambdas, scalars and the (12, 2) ve_gates
    # stay replicated: 210 extra elements per device here, 0.04% of the model
    assert int(total) / 8 <= per_device[0] < 1.001 * int(total) / 8


def test_missing_data_and_tokenizer_are_clear_errors(home, tmp_path):
    empty = tmp_path / "empty"
    (empty / "tokenizer").mkdir(parents=True)
    env = {**os.environ, "NANOCODE_HOME": str(empty), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "train.cli", "base", *TINY]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "train tokenizer" in r.stderr  # no tokenizer yet
    (empty / "tokenizer" / "tokenizer.json").write_bytes((home / "tokenizer" / "tokenizer.json").read_bytes())
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "train data local" in r.stderr and "Traceback" not in r.stderr


def test_accelerators_compute_in_bf16_by_default(monkeypatch, tmp_path):
    """train base, sft and dpo: bf16 compute on GPU/TPU unless --dtype says otherwise (fp32 on a
    CPU); a fine-tune of an fp32 checkpoint computes in bf16 there too."""
    import jax

    from nanocode import checkpoint
    from nanocode.config import GPTConfig
    from nanocode.gpt import init_params
    from tiny_models import tiny_tokenizer
    from train.base import model_config
    from train.cli import build_parser
    from train.finetune import load_start

    def dtype(*flags):
        args = build_parser().parse_args(["base", "--preset", "d12", *flags])
        return model_config(args.preset, 32768, dtype=args.dtype).compute_dtype

    tok = tiny_tokenizer(["def f(x):\n    return x + 1\n"] * 20, 300)
    cfg = GPTConfig(n_layer=2, n_embd=64, n_head=4, n_kv_head=4, head_dim=16, vocab_size=tok.vocab_size,
                    sequence_len=64)
    checkpoint.save(tmp_path / "ckpt", 0, init_params(cfg, jax.random.PRNGKey(0)), config=cfg, tokenizer=tok)
    assert dtype() == "float32" and load_start(str(tmp_path / "ckpt"))[1].compute_dtype == "float32"
    for backend in ("gpu", "tpu"):
        monkeypatch.setattr(jax, "default_backend", lambda: backend)
        assert dtype() == "bfloat16" and dtype("--dtype", "float32") == "float32"
        assert load_start(str(tmp_path / "ckpt"))[1].compute_dtype == "bfloat16"
        assert load_start(str(tmp_path / "ckpt"), dtype="float32")[1].compute_dtype == "float32"


@pytest.mark.slow  # the suite's time (docs/LOG.md, sixth session)
def test_continued_pretraining_at_a_longer_context(home, tmp_path):
    """`--from` starts from a base run's weights (its first loss far below a fresh model's) and
    trains them at a longer --seq-len with span rows; its checkpoint has the longer context. A
    missing --from is a clear error. (The first run also writes a --profile trace of steps 2..3.)"""
    from nanocode import checkpoint
    short, long = tmp_path / "short", tmp_path / "long"
    r = train(home, "--run-dir", str(short), "--steps", "12", "--device-batch", "4", "--total-batch", "256",
              "--lr-scale", "30", "--profile", "2:4")
    assert f"profile of steps 2..3 in {short / 'profile'}" in r.stdout
    assert list((short / "profile").glob("plugins/profile/*/*.xplane.pb"))
    r = train(home, "--run-dir", str(long), "--from", str(short), "--seq-len", "256", "--steps", "2",
              "--device-batch", "2", "--total-batch", "512", "--span-share", "1")
    assert "starting from" in r.stdout
    first_short, first_long = losses(short)[1], losses(long)[1]
    assert first_long < first_short - 0.3, (first_short, first_long)
    cfg = checkpoint.load_params(long / "checkpoints")[1]
    assert cfg.sequence_len == 256 and cfg.n_layer == 2
    env = {**os.environ, "NANOCODE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "train.cli", "base", *TINY, "--from", str(tmp_path / "nope"),
                        "--steps", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "train.cli", "base", *TINY, "--profile", "4:2"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "'4:2' is not START:STOP with START < STOP" in r.stderr, r.stderr[-2000:]


def test_the_eta_does_not_count_the_compile():
    """restart_rate after a stage's first step (which compiles): a 10 s first step followed by
    0.01 s steps gives an ETA from the fast steps (it used to be minutes at the first print)."""
    from tqdm import tqdm

    from train.loop import restart_rate
    clock = [0.0]
    bar = tqdm(total=100, initial=0, file=open(os.devnull, "w"), mininterval=0, smoothing=0)
    bar._time = lambda: clock[0]
    bar.start_t = bar.last_print_t = 0.0
    clock[0] = 10.0  # the compile
    bar.update(1)
    restart_rate(bar)
    for _ in range(5):
        clock[0] += 0.01
        bar.update(1)
    d = bar.format_dict
    assert bar.n == 6 and d["n"] == 6 and d["elapsed"] < 0.1
    rate = (d["n"] - d["initial"]) / d["elapsed"]
    assert 90 < rate < 110 and (100 - 6) / rate < 1.5  # ~0.94 s left, not ~15 min


def test_resume_frees_the_params_it_replaces_before_reading(tmp_path, monkeypatch):
    """On resume the checkpoint replaces the params the stage built: run() frees them before the
    read, so one state alone is on the device while it is restored (on a 16 GiB TPU v5e a d20
    state beside a second copy of it did not fit, and the resume died)."""
    import jax
    import numpy as np

    from nanocode import checkpoint
    from nanocode.config import preset
    from nanocode.gpt import init_params
    from nanocode.sharding import make_mesh
    from train import loop
    from train.base import next_token_loss
    from train.optim import build_optimizer

    cfg = preset("cpu-d2", vocab_size=256, sequence_len=16)
    mesh = make_mesh("")

    def batches(state):
        step = (state or {}).get("step", 0)
        while True:
            tokens = np.random.default_rng(step).integers(0, 256, (1, 2, 17), dtype=np.int32)
            step += 1
            yield {"inputs": tokens[..., :-1], "targets": tokens[..., 1:]}, {"step": step}

    def stage(total_steps, resume):
        params = init_params(cfg, jax.random.PRNGKey(0))
        optimizer = build_optimizer(cfg, params, total_steps=4, batch_tokens=32)
        lc = loop.LoopConfig(run_dir=str(tmp_path), total_steps=total_steps, tokens_per_step=32,
                             flops_per_token=1.0, log_every=0, eval_every=0, save_every=2, resume=resume,
                             peak_flops=1e12)
        return params, loop.run(lc, params=params, optimizer=optimizer, loss=next_token_loss(cfg), mesh=mesh,
                                batches=batches, config=cfg, log=lambda *a: None)

    stage(2, resume=False)
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(checkpoint.restore(tmp_path / "checkpoints")["params"]))
    live_at_read = []
    read = checkpoint.restore

    def live_bytes():  # other tests in this process may keep arrays alive: count from a baseline
        return sum(x.nbytes for x in jax.live_arrays() if not x.is_deleted())

    def restore(*args, **kw):
        live_at_read.append(live_bytes() - baseline)
        return read(*args, **kw)

    monkeypatch.setattr(checkpoint, "restore", restore)
    baseline = live_bytes()
    replaced, result = stage(4, resume=True)
    assert len(live_at_read) == 1 and live_at_read[0] < 0.1 * state_bytes, (live_at_read, state_bytes)
    assert all(x.is_deleted() for x in jax.tree.leaves(replaced))
    assert np.isfinite(result["loss"]) and checkpoint.latest_step(tmp_path / "checkpoints") == 4
