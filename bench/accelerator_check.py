"""The GPU proving run: one script, under 8 minutes on one H200, writing every number to one JSON.

Sections, each recorded with status "ok" | "error" | "skipped" (a failing section keeps its
error and traceback, and the script goes on to the next), in this order: jax (the version and
the jax functions the code relies on), train (below; with a 3-step jax.profiler trace
summarised), engine, numerics (these three: bench/accelerator_model.py), then the host side
(bench/accelerator_host.py): loader (tokens/s of one core against what the measured step
consumes), save (a d20-size state through the background checkpoint writer), and last, if time
remains, train_d20 (the d20 step, with the optimizer's share of a step timed apart: the same
step with optax.identity()).

1. train: the real train step, train.loop.make_train_step(train.base.next_token_loss(cfg),
   train.optim.build_optimizer(...)), jitted with donation and shardings exactly as
   train.loop.run does, on a 1-device mesh (make_mesh / tree_shardings / batch_sharding), for
   d12 (286M params) in bf16 with cuDNN attention at device batch 16 x 2048. Reports lower and
   compile time, median / min / mean step time over --steps timed steps after --warmup steps,
   tokens/s, MFU (nanocode.config.flops_per_token over train.loop.peak_flops()), peak memory
   (device.memory_stats()["peak_bytes_in_use"], plus the compiled step's memory_analysis()),
   and XLA's own flop count of the step as a cross-check of the formula. If cuDNN attention
   fails there, the same step is retried with XLA attention as section "train_xla".
2. engine: nanocode.engine.Engine in bf16: Engine.prefill of a --prefill-len prompt (tokens/s),
   and the decode that Engine.generate runs (Engine.decode, the fused lax.while_loop decoder) of
   --decode-tokens new tokens after that prompt at batch 1 and batch 8 (Engine has batched
   generate, so batch 8 is 8 equal-length prompts, not a hand-driven decode step). The prefill
   is timed separately from the decode; compiles are done by a warm-up round first.
3. numerics: nanocode.gpt.attend (jax.nn.dot_product_attention underneath) with impl "cudnn"
   and "xla" on the same bf16 q, k, v (d12's head shapes), causal and sliding window: max abs
   error of the output and of dq, dk, dv (vjp of a fixed random cotangent) against an f32 XLA
   reference at matmul precision "highest" on the same values.

Impls and dtypes follow jax.default_backend() and are recorded: gpu -> bf16 + cudnn (numerics:
cudnn and xla), tpu -> bf16 + splash, cpu -> float32 + the block-causal einsum (numerics: einsum
and xla, all in f32). --tiny runs the three sections at cpu-d2 / seq 128 in well under a minute
on a CPU (tests/test_accelerator_check.py does). A global budget (--budget-s, default 450 s)
skips a section when less time is left than it needs. The JSON is rewritten after every
section, so a run killed by a timeout still leaves what it had.

On the GPU machine (its own jax/optax; this project not installed), from the repository root:

    PYTHONPATH=. python bench/accelerator_check.py --out $OUT/accelerator_check.json

Imports: the model sections use only jax, numpy, optax and this repo's
nanocode.{config,gpt,engine,sharding} and train.{loop,base,optim} (train/loop.py imports
checkpointing, orbax, only inside `run`); the JSON lists which of textual, datasets, tiktoken,
orbax, tqdm were imported by the end of those sections (it should be none). The host sections
import what they test (orbax, pyarrow, the tokenizer's packages); where one is missing, that
section records the error.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

FORBIDDEN = ("textual", "datasets", "tiktoken", "orbax", "tqdm")  # (jax itself imports etils)

# Per-shape sizes. "need_s": the least time a section needs (compiles included) to be started.
SHAPES = {
    "d12": dict(preset="d12", seq_len=2048, rows=16, warmup=2, steps=10,
                prefill_len=1024, decode_tokens=256, prefill_repeats=3,
                attn_shape=(2, 2048, 6, 128), short_window=512,
                profile_steps=3, loader_s=10, save_preset="d20",
                big=dict(preset="d20", seq_len=2048, rows=8, warmup=2, steps=5),
                need_s={"jax": 1, "train": 150, "train_xla": 150, "engine": 90, "numerics": 30,
                        "loader": 45, "save": 60, "train_d20": 150}),
    # the v5e speedrun's shape (train/speedrun.py): d6 at vocab 8,192, 32 rows, no recomputation
    "v5e": dict(preset="d6", vocab_size=8192, seq_len=2048, rows=32, remat="none", warmup=2, steps=10,
                prefill_len=1024, decode_tokens=256, prefill_repeats=3,
                attn_shape=(2, 2048, 3, 128), short_window=512,
                profile_steps=3, loader_s=10, save_preset="d12",
                big=dict(preset="d12", seq_len=2048, rows=16, remat="block", warmup=2, steps=5),
                need_s={"jax": 1, "train": 90, "train_xla": 90, "engine": 60, "numerics": 30,
                        "loader": 45, "save": 40, "train_d20": 120}),
    "tiny": dict(preset="cpu-d2", seq_len=128, rows=4, warmup=1, steps=3,
                 prefill_len=64, decode_tokens=32, prefill_repeats=2,
                 attn_shape=(1, 256, 2, 64), short_window=64,
                 profile_steps=2, loader_s=2, save_preset="cpu-d2",
                 big=dict(preset="cpu-d2", seq_len=128, rows=2, warmup=2, steps=3),
                 need_s={"jax": 0, "train": 5, "train_xla": 5, "engine": 5, "numerics": 2,
                         "loader": 2, "save": 2, "train_d20": 5}),
}

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--shape", choices=sorted(SHAPES), default="d12")
ap.add_argument("--tiny", action="store_true", help="same as --shape tiny")
ap.add_argument("--out", default="accelerator_check.json")
ap.add_argument("--budget-s", type=float, default=470.0, help="whole-run time budget")
ap.add_argument("--rows", type=int, help="device batch rows (default by shape)")
ap.add_argument("--steps", type=int, help="timed train steps (default by shape)")
ap.add_argument("--remat", choices=["none", "block", "dots"], help="what the train sections' backward recomputes: none | block | dots "
                "(default: none, as config.preset builds it)")
ap.add_argument("--accum", type=int, default=1, help="micro-batches per update in the train section "
                "(the optimizer's share falls as a preset's accumulation has it; default 1)")
ap.add_argument("--opt-share", action="store_true", help="time the train section's optimizer apart too "
                "(the same step with optax.identity(); train_d20 always does)")
ap.add_argument("--big-rows", type=int, help="device batch rows of the d20 section (default by shape)")
ap.add_argument("--big-accum", type=int, default=1, help="micro-batches per update in the d20 section "
                "(the d20 preset's accumulation: 131,072 tokens / (rows x 2048); default 1)")
ap.add_argument("--dtype", help="compute dtype (default: float32 on CPU, else bfloat16)")
ap.add_argument("--attn", help="train attention impl (default: cudnn on GPU, splash on TPU, "
                "einsum on CPU)")
ap.add_argument("--sections", help="comma-separated sections to run (default: all; e.g. train,train_d20 "
                "for the steps alone)")
ap.add_argument("--lever", action="append", default=[], metavar="MODULE.NAME=VALUE",
                help="set a module constant before the run, to A/B a performance lever in one run "
                "(e.g. nanocode.kernels.HEAD_CHUNK_ROWS=8192); repeatable, recorded in the report")
args = ap.parse_args()
S = dict(SHAPES["tiny" if args.tiny else args.shape])
S["rows"] = args.rows or S["rows"]
S["steps"] = args.steps or S["steps"]
S["accum"] = args.accum
S["big"] = {**S["big"], "rows": args.big_rows or S["big"]["rows"], "accum": args.big_accum}
T0 = time.perf_counter()

import jax  # noqa: E402

import accelerator_host  # noqa: E402  (bench/accelerator_host.py: the host-side sections)
import accelerator_model  # noqa: E402  (bench/accelerator_model.py: the model sections)

from nanocode.config import preset  # noqa: E402
from nanocode.gpt import init_params  # noqa: E402
from train.optim import build_optimizer  # noqa: E402

LEVERS = {}
for lever in args.lever:
    target, _, value = lever.partition("=")
    module, _, name = target.rpartition(".")
    if not hasattr(importlib.import_module(module), name):
        sys.exit(f"--lever {lever}: {module} has no {name} (the lever must name an existing constant)")
    setattr(sys.modules[module], name, ast.literal_eval(value))
    LEVERS[target] = ast.literal_eval(value)

BACKEND = jax.default_backend()
DEVICE = jax.devices()[0]
DTYPE = args.dtype or ("float32" if BACKEND == "cpu" else "bfloat16")
ATTN = args.attn or {"gpu": "cudnn", "tpu": "splash"}.get(BACKEND, "einsum")
NUMERICS_IMPLS = {"gpu": ["cudnn", "xla"], "tpu": ["splash", "xla"]}.get(BACKEND, ["einsum", "xla"])

report = {
    "script": "bench/accelerator_check.py",
    "argv": sys.argv[1:],
    "shape_name": "tiny" if args.tiny else args.shape,
    "jax_version": jax.__version__,
    "python": platform.python_version(),
    "backend": BACKEND,
    "device_kind": DEVICE.device_kind,
    "device_count": jax.device_count(),
    "compute_dtype": DTYPE,
    "attn_impl": ATTN,
    "budget_s": args.budget_s,
    "levers": LEVERS,
    "sizes": {k: v for k, v in S.items() if k != "need_s"},
    "sections": {},
    "host_sections_started": False,
}


DEADLINE = T0 + args.budget_s - 10  # the train steps time fewer steps past it


def elapsed() -> float:
    return time.perf_counter() - T0


def write_report():
    report["elapsed_s"] = round(elapsed(), 2)
    if not report["host_sections_started"]:  # what the model sections imported (the host ones import more)
        report["forbidden_modules_imported"] = sorted(m for m in FORBIDDEN if m in sys.modules)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")


def section(name, fn, *fn_args):
    """Run one section under the budget; record its result dict, or its error, and go on."""
    need = S["need_s"][name]
    left = args.budget_s - elapsed()
    if args.sections and name.removesuffix("_xla") not in args.sections.split(","):
        rec = {"status": "skipped", "reason": "not in --sections"}
    elif left < need:
        rec = {"status": "skipped", "reason": f"{left:.0f} s of the budget left, needs ~{need} s"}
    else:
        t, cpu = time.perf_counter(), time.process_time()
        try:
            rec = {"status": "ok", **fn(*fn_args)}
        except Exception as e:  # noqa: BLE001 - the point is to record it and go on
            rec = {"status": "error", "error": f"{type(e).__name__}: {e}"[:4000],
                   "traceback": traceback.format_exc()[-6000:]}
        rec["section_s"] = round(time.perf_counter() - t, 2)
        rec["section_cpu_s"] = round(time.process_time() - cpu, 2)  # host CPU time, all threads
    report["sections"][name] = rec
    write_report()
    print(f"[{elapsed():6.1f} s] {name}: {rec['status']}"
          + (f" ({rec.get('error') or rec.get('reason')})" if rec["status"] != "ok" else ""),
          flush=True)
    return rec


# ---- 4. a d20-size state through the background checkpoint writer --------------------------------
def save_section() -> dict:
    cfg = preset(S["save_preset"], compute_dtype=DTYPE)
    params = init_params(cfg, jax.random.PRNGKey(2))
    optimizer = build_optimizer(cfg, params, total_steps=1000, batch_tokens=2048)
    return {"preset": S["save_preset"], **accelerator_host.save_rate(params, optimizer.init(params), cfg)}


# ---- run ----------------------------------------------------------------------------------------
print(f"accelerator check: {report['shape_name']} on {BACKEND} ({DEVICE.device_kind}), "
      f"jax {jax.__version__}, {DTYPE}, attention {ATTN}, budget {args.budget_s:.0f} s", flush=True)
section("jax", accelerator_host.jax_api)
train = section("train", accelerator_model.train_section, S, ATTN, DTYPE, args.remat, DEADLINE,
                S["profile_steps"], args.opt_share)
if train["status"] == "error" and ATTN != "xla" and BACKEND != "cpu":
    train = section("train_xla", accelerator_model.train_section, S, "xla", DTYPE, args.remat, DEADLINE,
                    S["profile_steps"])
section("engine", accelerator_model.engine_section, S, ATTN, DTYPE)
section("numerics", accelerator_model.numerics_section, S, DTYPE, NUMERICS_IMPLS)
report["host_sections_started"] = True
loader = section("loader", accelerator_host.loader_rate, S["seq_len"], S["loader_s"])
if loader["status"] == "ok" and train["status"] == "ok":
    loader["chips_fed_per_core"] = loader["tokens_per_cpu_s"] / train["tokens_per_s"]
section("save", save_section)
section("train_d20", accelerator_model.train_section, S["big"], ATTN, DTYPE, args.remat, DEADLINE, 0, True)
write_report()
for name, rec in report["sections"].items():
    if rec["status"] == "ok" and name.startswith("train"):
        print(f"  {name}: compile {rec['compile_s']:.1f} s, step {1000 * rec['step_s_median']:.1f} ms, "
              f"{rec['tokens_per_s']:,.0f} tok/s, MFU {rec['mfu']:.1%}, peak {rec['peak_memory_mib']} MiB")
    if rec["status"] == "ok" and name == "engine":
        for B in (1, 8):
            e = rec[f"batch{B}"]
            print(f"  engine batch {B}: prefill {e['prefill_tokens_per_s']:,.0f} tok/s, decode "
                  f"{e['decode_tokens_per_s']:,.0f} tok/s ({e['decode_ms_per_step']:.2f} ms/step)")
    if rec["status"] == "ok" and "profile" in rec:
        top = rec["profile"]["top"][:3]
        print(f"  profile of {rec['profile']['steps']} steps: busy {rec['profile']['busy_ms']:.1f} ms; top: "
              + ", ".join(f"{t['name'][:40]} {t['share']:.0%}" for t in top))
    if rec["status"] == "ok" and "optimizer_share" in rec:
        print(f"  {name}: the optimizer is {rec['optimizer_share']['share_of_step']:.0%} of a step")
    if rec["status"] == "ok" and name == "loader":
        print(f"  loader: {rec['tokens_per_cpu_s']:,.0f} tokens per CPU-second at seq {rec['seq_len']}")
    if rec["status"] == "ok" and name == "save":
        print(f"  save of {rec['state_gib']} GiB ({rec['preset']}): the loop waits {rec['blocked_s']:.1f} s, "
              f"the write takes {rec['write_s']:.1f} s ({rec['gib_per_s']} GiB/s)")
    if rec["status"] == "ok" and name == "numerics":
        print(f"  numerics: max abs error {rec['max_abs_err']:.3g} ({', '.join(rec['impls'])} vs the f32 reference)")
print(f"wrote {args.out} in {elapsed():.1f} s", flush=True)
