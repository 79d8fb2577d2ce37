"""bench/accelerator_check.py, run as the GPU machine runs it (a subprocess from the source tree with
PYTHONPATH=.), at --tiny on this CPU: every section ok (the host ones too: jax API, profile,
loader, background save, optimizer share), real numbers in the JSON, CPU numerics tight, none of
the heavy optional packages imported by the model sections, and the time guard skipping sections.

The full --tiny run compiles the train step, the engine's prefill/decode at batch 1 and 8 and six
attention fwd+bwd functions: ~45 s of CPU time, 70-150 s wall on the shared 2 cores, so those
tests are `slow` (pytest -m slow tests/test_accelerator_check.py). The budget-guard test runs the
script's imports and JSON writing with every section skipped (~5 s) and stays in the default run."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "accelerator_check.py"


def run_check(out: Path, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(out), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


slow = pytest.mark.slow
SECTIONS = ["jax", "train", "engine", "numerics", "loader", "save", "train_d20"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_check(tmp_path_factory.mktemp("accel") / "x.json")


@slow
def test_every_section_ok_on_cpu(report):
    sections = report["sections"]
    assert list(sections) == SECTIONS  # no xla fallback on CPU
    for name, rec in sections.items():
        assert rec["status"] == "ok", (name, rec.get("error"), rec.get("traceback"))
    assert report["backend"] == "cpu" and report["compute_dtype"] == "float32"
    assert report["attn_impl"] == "einsum"
    assert report["jax_version"] and report["device_kind"]
    assert report["forbidden_modules_imported"] == []  # no orbax, tqdm, tiktoken, textual, datasets


@slow
def test_train_numbers(report):
    from nanocode.config import param_counts, preset

    t = report["sections"]["train"]
    assert t["attn_impl_resolved"] == "einsum"
    assert t["params"] == param_counts(preset("cpu-d2"))["total"]
    assert t["batch_shape"] == [1, 4, 128] and t["tokens_per_step"] == 512
    assert t["compile_s"] > 0 and t["timed_steps"] == 3 and len(t["step_s_all"]) == 3
    assert 0 < t["step_s_min"] <= t["step_s_median"]
    assert t["tokens_per_s"] == pytest.approx(512 / t["step_s_median"])
    assert t["flops_per_token"] > 0 and t["peak_flops"] > 0 and 0 < t["mfu"] < 1.5
    # 1 first step + 3 timed steps; at init the loss is ~ln(vocab) and finite
    assert len(t["losses"]) == 4 and t["loss_finite"]
    assert abs(t["losses"][0] - math.log(8192)) < 0.5
    assert t["peak_memory_mib"] > 0
    assert "memory_analysis" in t["peak_memory_source"]  # CPU has no peak_bytes_in_use


@slow
def test_engine_numbers(report):
    e = report["sections"]["engine"]
    assert e["prefill_len"] == 64 and e["decode_tokens"] == 32
    for b in (1, 8):
        r = e[f"batch{b}"]
        assert r["prefill_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0
        assert r["decode_tokens_per_s"] == pytest.approx(b * 32 / r["decode_s"])


@slow
def test_attention_numerics_tight_in_f32(report):
    n = report["sections"]["numerics"]
    assert n["impls"] == ["einsum", "xla"] and n["dtype"] == "float32"
    windows = {"causal": n["shape_BTHD"][1], "sliding": 64}
    for case, window in windows.items():
        rec = n[case]
        assert rec["window"] == window
        assert all(v > 0.1 for v in rec["ref_max_abs"].values())  # a non-trivial reference
        for impl in ("einsum", "xla"):
            for name in ("out", "dq", "dk", "dv"):
                assert rec[impl][name] < 1e-4, (case, impl, name, rec[impl][name])
    assert n["max_abs_err"] < 1e-4


@slow
def test_host_sections_profile_and_optimizer_share(report):
    s = report["sections"]
    assert s["jax"]["jax_version"] and "shard_map" in s["jax"]["checked"]
    prof = s["train"]["profile"]
    assert prof["steps"] == 2 and prof["busy_ms"] > 0 and prof["top"] and prof["top"][0]["ms"] > 0
    share = s["train_d20"]["optimizer_share"]
    assert share["step_s_without_optimizer"] > 0 and math.isfinite(share["share_of_step"])
    assert s["train_d20"]["batch_shape"] == [1, 2, 128]
    assert s["loader"]["tokens_per_cpu_s"] > 0 and s["loader"]["chips_fed_per_core"] > 0
    save = s["save"]
    assert save["state_gib"] > 0 and 0 < save["blocked_s"] <= save["write_s"] and save["gib_per_s"] > 0


@slow
def test_d20_section_accumulates_micro_batches(tmp_path):
    """--big-accum: one update of several micro-batches, as the d20 preset's total batch runs."""
    d20 = run_check(tmp_path / "accum.json", "--sections", "train_d20", "--big-accum", "2")["sections"]["train_d20"]
    assert d20["status"] == "ok", d20.get("error")
    assert d20["batch_shape"] == [2, 2, 128] and d20["tokens_per_step"] == 512
    assert d20["loss_finite"] and math.isfinite(d20["optimizer_share"]["share_of_step"])


def test_budget_guard_skips_sections(tmp_path):
    r = run_check(tmp_path / "skip.json", "--budget-s", "0")
    assert list(r["sections"]) == SECTIONS
    assert [s["status"] for s in r["sections"].values()] == ["skipped"] * len(SECTIONS)
    assert all("budget" in s["reason"] for s in r["sections"].values())
    # the imports alone (train.loop included) pull none of the heavy optional packages
    assert r["forbidden_modules_imported"] == []
    assert r["backend"] == "cpu" and r["jax_version"] and r["sizes"]["preset"] == "cpu-d2"


def test_sections_flag_runs_only_those(tmp_path):
    r = run_check(tmp_path / "only.json", "--sections", "jax")
    assert [s["status"] for s in r["sections"].values()] == ["ok"] + ["skipped"] * (len(SECTIONS) - 1)
    assert all(s["reason"] == "not in --sections" for s in list(r["sections"].values())[1:])


def test_profile_summary_counts_the_op_lane_of_a_tpu_trace(tmp_path):
    """A TPU trace has step and module lanes spanning the op lane, and loops holding their
    body's ops inside that lane: only the "XLA Ops" lane counts, each event by its self time, so
    the shares add up to the device's busy time once."""
    import gzip
    sys.path.insert(0, str(ROOT / "bench"))
    from accelerator_host import profile_summary

    meta = [("process_name", 1, 0, "/device:TPU:0"), ("process_name", 2, 0, "/host:CPU"),
            ("thread_name", 1, 1, "Steps"), ("thread_name", 1, 2, "XLA Modules"),
            ("thread_name", 1, 3, "XLA Ops"), ("thread_name", 2, 9, "python")]
    events = [{"ph": "M", "name": n, "pid": pid, "tid": tid, "args": {"name": a}} for n, pid, tid, a in meta]
    events += [{"ph": "X", "pid": 1, "tid": 1, "name": "0", "ts": 0, "dur": 100},
               {"ph": "X", "pid": 1, "tid": 2, "name": "jit_step(1)", "ts": 0, "dur": 100},
               {"ph": "X", "pid": 1, "tid": 3, "name": "while.5", "ts": 0, "dur": 80},
               {"ph": "X", "pid": 1, "tid": 3, "name": "fusion.1", "ts": 0, "dur": 50},
               {"ph": "X", "pid": 1, "tid": 3, "name": "fusion.1", "ts": 55, "dur": 20},
               {"ph": "X", "pid": 1, "tid": 3, "name": "convolution.2", "ts": 80, "dur": 15},
               {"ph": "X", "pid": 2, "tid": 9, "name": "block_until_ready", "ts": 0, "dur": 500}]
    (tmp_path / "x").mkdir()
    with gzip.open(tmp_path / "x" / "t.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    s = profile_summary(str(tmp_path))
    assert s["lanes"] == "device ops" and s["busy_ms"] == 0.095
    assert [(t["name"], t["share"]) for t in s["top"]] == [("fusion.1", 0.7368), ("convolution.2", 0.1579),
                                                        ("while.5", 0.1053)]
    kinds = profile_summary(str(tmp_path), kinds={"fusion.1": "element-wise/reduce", "convolution.2": "matmul"})
    assert kinds["by_kind"] == {"element-wise/reduce": {"ms": 0.07, "share": 0.7368},
                                "matmul": {"ms": 0.015, "share": 0.1579},
                                "unmapped": {"ms": 0.01, "share": 0.1053}}
    labelled = profile_summary(str(tmp_path), kinds={"fusion.1": "element-wise/reduce"},
                               labels={"fusion.1": "bf16[8,128]{1,0}  jit(step)/tanh"})
    assert labelled["top_by_kind"]["element-wise/reduce"] == [
        {"name": "fusion.1", "label": "bf16[8,128]{1,0}  jit(step)/tanh", "ms": 0.07, "share": 0.7368}]
    assert [t["name"] for t in labelled["top_by_kind"]["unmapped"]] == ["convolution.2", "while.5"]


def test_hlo_op_kinds_of_a_real_compiled_step():
    """The op kinds of a real compiled gradient (matmuls in and outside a loop, element-wise work):
    every dot is "matmul", whether bare or inside a fusion, the loop is "control", and the fusions
    without a dot are "element-wise/reduce"."""
    import re

    import jax
    import jax.numpy as jnp
    sys.path.insert(0, str(ROOT / "bench"))
    from accelerator_host import hlo_op_kinds, hlo_op_labels

    def f(x, w):
        y = jax.nn.relu(x @ w)
        y = jax.lax.fori_loop(0, 3, lambda i, c: c + jnp.tanh(c @ w), y)
        return (y * 2).sum()

    text = jax.jit(jax.grad(f)).lower(jnp.ones((64, 64)), jnp.ones((64, 64))).compile().as_text()
    kinds = hlo_op_kinds(text)
    dots = re.findall(r"%?([\w.\-]+) = \S+ (?:dot|convolution)\(", text)
    assert dots and all(kinds[d] == "matmul" for d in dots)
    labels = hlo_op_labels(text)  # each op's output shape, then its jax op
    assert all(labels[d].startswith("f32[64,64]") and "dot_general" in labels[d] for d in dots)
    fusions = re.findall(r"%?([\w.\-]+) = \S+ fusion\(", text)
    assert fusions and {kinds[n] for n in fusions} <= {"matmul", "element-wise/reduce"}
    assert "element-wise/reduce" in {kinds[n] for n in fusions}
    loops = re.findall(r"%?([\w.\-]+) = \S+ while\(", text) + re.findall(r"%?([\w.\-]+) = \([^=]*?\) while\(", text)
    assert loops and all(kinds[n] == "control" for n in loops)


@slow
def test_a_lever_changes_the_speed_not_the_math(report, tmp_path):
    """--lever sets a module constant for one run (an A/B of a performance lever): it is recorded
    in the report, and the head chunked 8 times finer gives the default run's losses."""
    r = run_check(tmp_path / "lever.json", "--sections", "train",
                  "--lever", "nanocode.kernels.HEAD_CHUNK_ROWS={'cpu': 64}")
    assert r["levers"] == {"nanocode.kernels.HEAD_CHUNK_ROWS": {"cpu": 64}}
    assert report["levers"] == {}
    assert r["sections"]["train"]["losses"] == pytest.approx(report["sections"]["train"]["losses"], rel=1e-5)


def test_a_lever_that_names_no_constant_is_refused(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(tmp_path / "x.json"),
                           "--lever", "nanocode.kernels.HEAD_CHUNK_ROWZ=1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "nanocode.kernels has no HEAD_CHUNK_ROWZ" in proc.stderr
    assert not (tmp_path / "x.json").exists()
