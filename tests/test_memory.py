"""bench/memory.py: the accelerator presets' train steps fit their chips (XLA's compiled memory
analysis on fake CPU devices, flash-shaped attention stand-in), and the analysis can say no.

The analysis runs in a subprocess: it needs XLA_FLAGS=--xla_force_host_platform_device_count=8
before jax starts, and this process started jax already. On 2 cores a d12 compile took 20-40 s of
CPU (40-130 s wall on a busy machine), d20/d24 25-40 s of CPU each (up to 75 s wall) plus ~10 s of
start-up per run, so only d12's base step is in the fast suite; sft and d20/d24 are slow tests, and
so is the real XLA:TPU compiler (~5 min per compile), which also needs libtpu.

XLA:CPU overestimates what the TPU compiler needs (no bf16 matmuls, no rematerialisation under
memory pressure: docs/BENCHMARKS.md), so a fit here is a safe bound for the chip.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from train import speedrun

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "memory.py"
GiB = 2**30


def _standins_module():
    """bench/chip_standins.py (the patches bench/memory.py compiles under), loaded from its file."""
    spec = importlib.util.spec_from_file_location("bench_chip_standins", ROOT / "bench" / "chip_standins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_analysis(tmp_path, *args, python=sys.executable) -> list[dict]:
    out = tmp_path / "memory.json"
    proc = subprocess.run([python, str(SCRIPT), *args, "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())["rows"]


def stated_chip(preset: str) -> str:
    return speedrun.PRESETS[preset].get("chip", "v6e")


def assert_fits(rows: list[dict]) -> None:
    own = [r for r in rows if r["stated_chip"]]
    assert own, "no row for the preset's own chip"
    lines = [f"{r['preset']} {r['stage']} on {r['chip']} ({r['devices']} devices, device batch "
             f"{r['device_batch']} x {r['seq_len']}, accum {r['accum']}): peak {r['peak'] / GiB:.2f} GiB "
             f"per device (argument {r['argument'] / GiB:.2f}, output {r['output'] / GiB:.2f}, temp "
             f"{r['temp'] / GiB:.2f}, alias {r['alias'] / GiB:.2f}) of {r['chip_bytes'] / GiB:.2f} GiB: "
             f"{100 * r['headroom']:.0f}% headroom, needs >= 10%" for r in own]
    print("\n".join(lines))
    assert all(r["fits"] for r in own), "does not fit:\n" + "\n".join(
        ln for ln, r in zip(lines, own) if not r["fits"])


def test_d12_base_step_fits_its_chip(tmp_path):
    assert_fits(run_analysis(tmp_path, "--preset", "d12", "--chip", stated_chip("d12")))


@pytest.mark.slow
@pytest.mark.parametrize("preset,stage", [("d12", "sft"), ("d20", "both"), ("d24", "both")])
def test_preset_fits_its_chip(tmp_path, preset, stage):
    assert_fits(run_analysis(tmp_path, "--preset", preset, "--chip", stated_chip(preset), "--stage", stage))


# --compiler tpu: the real XLA:TPU compiler (needs libtpu, which the project's venv must not hold; see
# bench/memory.py): NANOCODE_TPU_PYTHON names an interpreter that has it, e.g. /tmp/tpuvenv/bin/python.
TPU_PYTHON = os.environ.get("NANOCODE_TPU_PYTHON") or (
    sys.executable if importlib.util.find_spec("libtpu") else None)


@pytest.mark.slow
@pytest.mark.skipif(TPU_PYTHON is None, reason="no libtpu: set NANOCODE_TPU_PYTHON")
@pytest.mark.parametrize("preset", ["d12", "d20", "d24"])
def test_preset_fits_its_tpu_by_the_tpu_compiler(tmp_path, preset):
    chip = stated_chip(preset)
    assert chip in ("v6e", "v5e"), f"{preset} is sized for {chip}, not a TPU"
    assert_fits(run_analysis(tmp_path, "--preset", preset, "--chip", chip, "--compiler", "tpu",
                             "--stage", "both", python=TPU_PYTHON))


def test_a_huge_device_batch_does_not_fit(tmp_path):
    """cpu-d4 (the cpu preset's model, quick to compile) at 1,024 rows of 512 tokens per device:
    ~8 GiB of fp32 logits per copy alone, on a 16 GiB v5e."""
    rows = run_analysis(tmp_path, "--preset", "cpu", "--chip", "v5e", "--device-batch", "1024")
    (r,) = rows
    assert r["device_batch"] == 1024 and r["devices"] == 8 and r["accum"] == 1
    assert r["peak"] == r["argument"] + r["output"] + r["temp"] - r["alias"]
    assert r["peak"] > r["chip_bytes"] and not r["fits"] and r["headroom"] < 0


def test_flash_standin_saves_what_a_flash_kernel_saves():
    """Residuals q, k, v, out and the (B, H, T) fp32 logsumexp; gradients shaped like q, k, v;
    the patch of nanocode.gpt.attend is undone on exit."""
    import nanocode.gpt as gpt
    standins = _standins_module()
    B, T, H, K, D = 2, 16, 4, 2, 8
    q = jax.random.normal(jax.random.PRNGKey(0), (B, T, H, D), jnp.bfloat16)
    k, v = (jax.random.normal(jax.random.PRNGKey(i), (B, T, K, D), jnp.bfloat16) for i in (1, 2))
    real = gpt.attend
    with standins.flash_standin_attention():
        assert gpt.attend is not real
        f = lambda q, k, v: gpt.attend(q, k, v, window=T, impl="splash")  # noqa: E731
        out, vjp = jax.vjp(f, q, k, v)
        grads = vjp(jnp.ones_like(out))
    assert gpt.attend is real
    assert out.shape == q.shape and out.dtype == q.dtype
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    _, saved = standins.make_flash_standin().fwd(q, k, v)  # the custom_vjp's residuals
    shapes = sorted((tuple(a.shape), str(a.dtype)) for a in saved)
    assert shapes == sorted([(q.shape, "bfloat16"), (k.shape, "bfloat16"), (v.shape, "bfloat16"),
                             (q.shape, "bfloat16"), ((B, H, T), "float32")])


def test_accelerator_backend_is_scoped():
    standins = _standins_module()
    before = jax.default_backend()
    with standins.accelerator_backend("tpu"):
        assert jax.default_backend() == "tpu"
    assert jax.default_backend() == before
