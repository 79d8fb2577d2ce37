"""Does a speedrun preset's train step fit its chip? XLA's compiled memory analysis of the real step,
compiled on this CPU over N fake devices, per preset and chip.

    python bench/memory.py --preset d12                  # every chip; the preset's own chip marked *
    python bench/memory.py --preset d20 --chip v6e --json out.json
    python bench/memory.py --all                         # d12, d20, d24 (base and sft) x every chip
    python bench/memory.py --preset d24 --base-args "--remat block"  # try a flag before a preset takes it
    python bench/memory.py --preset d12 --attn real      # the CPU einsum attention, for comparison

What is compiled is exactly what `train speedrun --preset NAME` would run on the accelerator:
- the preset's `base` argument list (train/speedrun.py PRESETS) parsed by the real `train` parser
  (train.cli.build_parser(), subcommand base), its model by `train.base.model_config` of those
  flags (vocab_size: the preset's tokenizer --vocab-size) with compute_dtype forced to bfloat16
  (what an accelerator runs; model_config picks float32 on a CPU);
- params built abstractly (jax.eval_shape of nanocode.gpt.init_params: no memory), the optimizer as
  train/base.py main builds it, and the step as train/loop.py `run` jits it: make_train_step over
  next_token_loss, state donated, params and optimizer state sharded by tree_shardings, the batch by
  batch_sharding, on make_mesh(--mesh) over the preset's devices (default 8);
- lowered inside `jax.set_mesh(mesh)` (train/loop.py runs the step there; the model's per-device
  code reads it) with ShapeDtypeStruct arguments, the batch int32 (accum, device_batch * N, T) with
  accum = total batch / (device_batch * N * T) (total batch from --total-batch or
  auto_total_batch), then `.compile().memory_analysis()`: per-device numbers (the SPMD program is
  the per-device program).
- `--stage sft` (and --all) also compiles the SFT step: the preset's sft args (train sft parser),
  the base model's config (seq len raised if sft asks for more; bf16), its optimizer
  (train.finetune.sft_optimizer) and batch geometry (train.finetune.batch_geometry), on the sft args' mesh.

Accelerator code paths and attention on a CPU (bench/chip_standins.py): while the optimizer is
built and the step traced, `jax.default_backend()` answers the chip's platform ("tpu" or "gpu"), so
the program analysed is the chip's (XLA still compiles for the CPU; chips of one platform and device
count share a compile); and by default nanocode.gpt.attend is a flash-shaped stand-in that saves
what a fused kernel keeps for its backward (the CPU cannot compile the splash or cuDNN kernels).
`--attn real` compiles the real attention instead (with --compiler tpu, the default: the splash
kernel itself).

Peak per device = argument + output + temp - alias, all from memory_analysis(), all printed:
argument (params and optimizer state shards, the batch shard, live all step), output (new params
and state, the loss), alias (the output reusing donated arguments, counted in both, subtracted
once), temp (XLA's one preallocated block for every intermediate, sized by its heap simulator at
the peak). Not counted: the runtime's reserved memory, fragmentation, the next batch, a
checkpoint save's copies, a TPU's tile padding (--compiler tpu counts it): hence the 10% headroom
for "fits" (XLA:TPU itself reports a v6e's usable HBM a little under 32 GiB; jax preallocates 75%
of a GPU unless XLA_PYTHON_CLIENT_MEM_FRACTION says more).

How far to trust XLA:CPU: it has no bf16 matmul (a bf16 dot's backward often keeps the fp32
product) and no TPU rematerialisation pass, so it OVERestimates (docs/BENCHMARKS.md compares it
with XLA:TPU): read a CPU "fits" as safe and a CPU "does not fit" as "ask the TPU compiler".
`--compiler tpu` compiles the same step with the real XLA:TPU compiler ahead of time for the
chip's topology (v6e:2x4, v5e:2x4: libtpu describes a topology without the hardware), with the
model's splash kernel by default. It needs libtpu in the version jax[tpu] pins for the installed
jax, in a venv of its own (an importable libtpu in the project's venv makes jax probe for a TPU at
every start-up), one libtpu process at a time:
    SP=$(python -c "import site; print(site.getsitepackages()[0])")  # the project's packages
    python -m venv /tmp/tpuvenv && echo "$SP" > /tmp/tpuvenv/lib/python3.11/site-packages/project.pth
    /tmp/tpuvenv/bin/pip install --no-deps "libtpu==0.0.42.*"
    /tmp/tpuvenv/bin/python bench/memory.py --preset d12 --chip v6e --compiler tpu

Chips: v6e 32 GiB, v5e 16 GiB, h100 80 GB (8 devices each), gpu80 80 GB and gpu24 24 GiB (one card,
the one-GPU presets'); every chip is analysed at the preset's device batch and mesh; the preset's
own chip and device count are its `chip` and `devices` keys (default v6e, 8).
XLA_FLAGS=--xla_force_host_platform_device_count=N and JAX_PLATFORMS=cpu are set in os.environ
before the first jax import (imported into a process that already started jax, it checks that enough
devices exist instead), plus FAST_CODEGEN (LLVM flags that cannot change buffer assignment). Compile
time is measured per compile (trace + lower, then XLA compile; wall and CPU seconds, the comparable
number on a busy machine).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform as _platform
import re
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from chip_standins import accelerator_backend, flash_standin_attention  # noqa: E402  (bench/chip_standins.py)
from nanocode.config import param_counts  # noqa: E402
from train.cli import build_parser  # noqa: E402
from train.speedrun import PRESETS  # noqa: E402

GiB = 2**30
HEADROOM = 0.10  # "fits" needs at least this share of the chip's memory left over
CHIPS = {  # per chip: memory in bytes, the unit the vendor states it in, devices, jax platform
    "v6e": dict(bytes=32 * GiB, unit="32 GiB", devices=8, platform="tpu", about="TPU v6e (Trillium)"),
    "v5e": dict(bytes=16 * GiB, unit="16 GiB", devices=8, platform="tpu", about="TPU v5e"),
    "h100": dict(bytes=80e9, unit="80 GB (80e9 bytes)", devices=8, platform="gpu",
                 about="NVIDIA H100 80GB"),
    # one card at home: the one-GPU presets' chips
    "gpu80": dict(bytes=80e9, unit="80 GB (80e9 bytes)", devices=1, platform="gpu",
                  about="one 80 GB GPU (H100, A100 80GB)"),
    "gpu24": dict(bytes=24 * GiB, unit="24 GiB", devices=1, platform="gpu",
                  about="one 24 GB GPU (RTX 4090, RTX 3090)"),
}
DEFAULT_CHIP, DEFAULT_DEVICES, DEFAULT_VOCAB = "v6e", 8, 32768
ACCELERATOR_PRESETS = ("d12", "d20", "d24", "d12-gpu80", "d12-gpu24")
# --compiler tpu: (chip, devices) -> the libtpu topology its program is compiled for
TPU_TOPOLOGIES = {("v6e", 8): "v6e:2x4", ("v5e", 8): "v5e:2x4"}
# LLVM code generation only (buffer assignment is decided on the HLO before it): d12's numbers were
# identical to the byte with and without these, for about a third less compile CPU time.
FAST_CODEGEN = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


# ---- the plan: what one preset's stage runs, from its argument lists (no jax) ----------------------
def _flag(argv: list[str], name: str, default=None):
    """The last value of --name in an argument list (as argparse would take it)."""
    value = default
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def preset_plan(name: str, device_batch: int | None = None, total_batch: int | None = None,
                base_args: str = "") -> dict:
    """The speedrun preset's base argument list (with overrides appended, so they win), its vocab,
    chip and device count."""
    if name not in PRESETS:
        raise SystemExit(f"unknown speedrun preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    p = PRESETS[name]
    extra = shlex.split(base_args)
    if device_batch is not None:
        extra += ["--device-batch", str(device_batch)]
    if total_batch is not None:
        extra += ["--total-batch", str(total_batch)]
    return dict(preset=name, base=list(p["base"]) + extra, sft=list(p.get("sft", [])),
                overrides=extra, chip=p.get("chip", DEFAULT_CHIP),
                devices=int(p.get("devices", DEFAULT_DEVICES)),
                vocab=int(_flag(p.get("tokenizer", []), "--vocab-size", DEFAULT_VOCAB)),
                device_batch_override=device_batch)


def devices_for(plan: dict, chip: str) -> int:
    """The preset's devices on its own chip; a chip's own count elsewhere."""
    return plan["devices"] if chip == plan["chip"] else CHIPS[chip]["devices"]


# ---- building and compiling one step ---------------------------------------------------------------
def _parse(stage: str, argv: list[str]):
    fixed = {"base": [], "sft": ["--from", "unused", "--data", "unused"]}[stage]
    return build_parser().parse_args([stage] + fixed + argv)


def build_step(plan: dict, stage: str, devices: list, attn: str, compiler: str = "cpu"):
    """(jitted step, abstract (state, batch) arguments, mesh, facts) for the plan's base or sft
    stage on `devices`. Call inside accelerator_backend (and flash_standin_attention for
    attn="standin"); attn="real" is the einsum attention for the cpu compiler, the config's own
    (auto: splash) for the tpu compiler."""
    import jax
    import jax.numpy as jnp

    from nanocode.gpt import init_params
    from nanocode.sharding import batch_sharding, make_mesh, tree_shardings
    from train.base import model_config, next_token_loss
    from train.loop import make_train_step
    from train.optim import ADAMW_GROUPS, auto_total_batch, build_optimizer, scaled_lrs

    n_dev = len(devices)
    base = _parse("base", plan["base"])
    cfg = model_config(base.preset, plan["vocab"], depth=base.depth, seq_len=base.seq_len, dtype=base.dtype,
                       attn=base.attn, remat=base.remat,
                       window_pattern=base.window_pattern).replace(compute_dtype="bfloat16")
    if stage == "base":
        args, T = base, cfg.sequence_len
        rows = args.device_batch * n_dev
        total_batch = args.total_batch or auto_total_batch(cfg, args.ratio)
        if plan["device_batch_override"] and total_batch % (rows * T):  # one micro-step of the override
            total_batch = rows * T
        if total_batch % (rows * T):
            raise ValueError(f"{plan['preset']}: total batch {total_batch:,} is not a multiple of device "
                             f"batch {args.device_batch} x {n_dev} devices x seq {T}")
        accum = total_batch // (rows * T)
        steps = args.steps or max(1, round(args.ratio * param_counts(cfg)["scaling"] / total_batch))
    else:
        from train.finetune import batch_geometry, sft_optimizer
        args = _parse("sft", plan["sft"] + ([] if plan["device_batch_override"] is None else
                                            ["--device-batch", str(plan["device_batch_override"])]))
        if args.seq_len and args.seq_len > cfg.sequence_len:  # as train.finetune.load_start
            cfg = cfg.replace(sequence_len=args.seq_len)
        if args.remat:
            cfg = cfg.replace(remat=args.remat)
        T = args.seq_len or cfg.sequence_len
        rows, accum = batch_geometry(T, n_dev, device_batch=args.device_batch, total_batch=args.total_batch)
        total_batch, steps = rows * accum * T, args.steps or 1000
    if attn == "real" and compiler == "cpu":
        cfg = cfg.replace(attn_impl="einsum")

    mesh = make_mesh(args.mesh, devices=devices)
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    if stage == "base":
        scaled = scaled_lrs(args.lr_scale, [g for g in ("matrix", *ADAMW_GROUPS) if g != "smear"])
        optimizer = build_optimizer(cfg, params, total_steps=steps, batch_tokens=total_batch,
                                    ratio=args.ratio, **scaled)
    else:
        optimizer = sft_optimizer(cfg, params, steps, total_batch, args.lr_scale, args.warmup_steps)
    opt_state = jax.eval_shape(optimizer.init, params)
    p_shard, o_shard = tree_shardings(params, mesh), tree_shardings(opt_state, mesh)
    step = jax.jit(make_train_step(next_token_loss(cfg), optimizer), donate_argnums=0,
                   in_shardings=((p_shard, o_shard), batch_sharding(mesh)),
                   out_shardings=((p_shard, o_shard), None))
    tokens = jax.ShapeDtypeStruct((accum, rows, T), jnp.int32)
    counts = param_counts(cfg)

    def shard_bytes(tree, shardings):  # per device
        return sum(math.prod(sh.shard_shape(x.shape)) * x.dtype.itemsize
                   for x, sh in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)))
    state_bytes = shard_bytes(params, p_shard) + shard_bytes(opt_state, o_shard)
    batch_bytes = 2 * shard_bytes([tokens], [batch_sharding(mesh)])
    facts = dict(model=base.preset, n_layer=cfg.n_layer, n_embd=cfg.n_embd, params=counts["total"],
                 seq_len=T, device_batch=args.device_batch, devices=n_dev, mesh=dict(mesh.shape),
                 accum=accum, total_batch=total_batch, remat=cfg.remat, attn=attn,
                 attn_impl=cfg.attn_impl, compute_dtype=cfg.compute_dtype, compiler=compiler,
                 state_bytes=state_bytes, batch_bytes=batch_bytes)
    return step, ((params, opt_state), {"inputs": tokens, "targets": tokens}), mesh, facts, cfg


def _mesh_context(mesh):
    import jax
    return jax.set_mesh(mesh) if hasattr(jax, "set_mesh") else contextlib.nullcontext()


def _prebuild_splash_kernels(cfg, T: int) -> None:
    """attention._splash_kernel builds its mask tables eagerly (ensure_compile_time_eval), which fails
    under a mesh of topology devices (nothing can run on them): build the cached kernels first,
    on the CPU. (A private helper of nanocode/attention.py: skipped if it is gone.)"""
    import jax

    import nanocode.attention as attention
    build = getattr(attention, "_splash_kernel", None)
    if build is None:
        return
    with jax.default_device(jax.devices("cpu")[0]):
        for window in sorted(set(cfg.window_sizes(T))):
            for interpret in (False, True):  # the Mosaic kernel and the interpreter's fallback
                build(T, window, cfg.n_head // cfg.n_kv_head, interpret)


def lower_step(plan: dict, stage: str, devices: list, platform: str, attn: str, compiler: str = "cpu"):
    """(lowered, facts, seconds): build and trace under the chip's code paths."""
    t0 = time.perf_counter()
    with accelerator_backend(platform), (flash_standin_attention() if attn == "standin"
                                         else contextlib.nullcontext()):
        step, (state, batch), mesh, facts, cfg = build_step(plan, stage, devices, attn, compiler)
        if compiler == "tpu" and attn == "real":
            _prebuild_splash_kernels(cfg, facts["seq_len"])
        with _mesh_context(mesh):  # as train/loop.py runs the step: attention.batch_axes reads it
            lowered = step.lower(state, batch)
    return lowered, facts, time.perf_counter() - t0


# XLA:TPU refuses to compile a program that cannot fit, naming its temporaries' size (binary units)
TPU_OOM = re.compile(r"memory required for HLO temporaries \(([\d.]+)([KMGT])\) exceeds available "
                     r"HBM \(([\d.]+)([KMGT])\)")


def compile_memory(lowered, facts: dict) -> tuple[dict, float, float]:
    """(memory parts in bytes, compile wall seconds, compile CPU seconds of this process). When the
    TPU compiler refuses (temporaries over the chip's usable HBM), the parts are rebuilt from its
    message: temp as it states it (rounded to its 2 decimals), argument/output/alias from the
    state's and batch's shard sizes (the state donated, so output = alias = state), and
    `estimated` is set, with the compiler's usable HBM in `usable_hbm`."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        m = lowered.compile().memory_analysis()
    except Exception as e:  # noqa: BLE001 - only the TPU compiler's out-of-memory is expected
        found = TPU_OOM.search(str(e))
        if not found:
            raise
        unit = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        temp = float(found.group(1)) * unit[found.group(2)]
        state, batch = facts["state_bytes"], facts["batch_bytes"]
        parts = dict(argument=state + batch, output=state, alias=state, temp=int(temp),
                     generated_code=0, estimated=True,
                     usable_hbm=int(float(found.group(3)) * unit[found.group(4)]))
    else:
        parts = {k: int(getattr(m, f"{k}_size_in_bytes")) for k in ("argument", "output", "alias", "temp")}
        parts["generated_code"] = int(m.generated_code_size_in_bytes)
        parts["estimated"] = False
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    parts["peak"] = parts["argument"] + parts["output"] + parts["temp"] - parts["alias"]
    return parts, seconds, cpu


def target_devices(chip: str, n_dev: int, compiler: str) -> list:
    """The devices a chip's program is compiled for: N fake CPU devices, or (tpu compiler) the
    chip's TPU topology, which libtpu describes without the hardware (AOT compilation)."""
    import jax
    if compiler == "cpu":
        return jax.devices()[:n_dev]
    topology = TPU_TOPOLOGIES.get((chip, n_dev))
    if topology is None:
        raise SystemExit(f"--compiler tpu: no TPU topology for {chip} x {n_dev} "
                         f"(known: {', '.join(f'{c} x {n}' for c, n in TPU_TOPOLOGIES)})")
    try:
        from jax.experimental import topologies
        return list(topologies.get_topology_desc(topology_name=topology, platform="tpu").devices)
    except Exception as e:  # no libtpu, or one that does not match jax
        raise SystemExit(f"--compiler tpu needs libtpu (the version jax[tpu] pins) importable, one "
                         f"process at a time: {e}\ninstall it in a separate venv, never the "
                         "project's (see the docstring)")


def analyse(plan: dict, stage: str, chips: list[str], attn: str, compiler: str = "cpu",
            log=print) -> list[dict]:
    """One row per chip for the plan's stage; one compile per distinct lowered program."""
    rows, compiled = [], {}  # text hash -> (memory parts, compile wall and CPU seconds)
    lowered_by = {}  # (platform or chip, devices) -> (text hash, facts, lower seconds)
    for chip in chips:
        spec, n_dev = CHIPS[chip], devices_for(plan, chip)
        key = (spec["platform"] if compiler == "cpu" else chip, n_dev)
        if key not in lowered_by:
            devices = target_devices(chip, n_dev, compiler)
            lowered, facts, lower_s = lower_step(plan, stage, devices, spec["platform"], attn, compiler)
            digest = hashlib.sha256(lowered.as_text().encode()).hexdigest()
            reused = digest in compiled
            if not reused:
                compiled[digest] = compile_memory(lowered, facts)
            del lowered
            lowered_by[key] = (digest, facts, lower_s)
            where = f"{spec['platform']} code on {n_dev} CPU devices" if compiler == "cpu" else \
                f"XLA:TPU for {TPU_TOPOLOGIES[(chip, n_dev)]}"
            log(f"{plan['preset']} {stage} [{where}]: trace+lower "
                f"{lower_s:.1f} s, XLA compile "
                + ("shared with an identical program" if reused else
                   f"{compiled[digest][1]:.1f} s ({compiled[digest][2]:.1f} s CPU)"))
        digest, facts, lower_s = lowered_by[key]
        parts, compile_s, compile_cpu_s = compiled[digest]
        free = spec["bytes"] - parts["peak"]
        rows.append(dict(preset=plan["preset"], stage=stage, chip=chip, stated_chip=chip == plan["chip"],
                         chip_bytes=spec["bytes"], chip_memory=spec["unit"], **facts, **parts,
                         headroom=free / spec["bytes"], fits=free >= HEADROOM * spec["bytes"],
                         overrides=plan["overrides"], lower_s=round(lower_s, 1),
                         compile_s=round(compile_s, 1),
                         compile_cpu_s=round(compile_cpu_s, 1)))
    return rows


# ---- output ----------------------------------------------------------------------------------------
def _gib(b) -> str:
    return f"{b / GiB:.2f}"


def table(rows: list[dict]) -> str:
    head = ("| preset | stage | chip | model | mesh | device batch x T (accum) | argument | output | alias "
            "| temp | peak / device | chip memory | headroom | fits (>= 10%) |")
    lines = [head, "|" + "---|" * 6 + "---:|" * 7 + "---|"]
    for r in rows:
        mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items())
        lines.append(
            f"| {r['preset']} | {r['stage']} | {r['chip']}{' *' if r['stated_chip'] else ''} | "
            f"{r['model']} ({r['params'] / 1e6:.0f}M, remat {r['remat']}) | {mesh} | "
            f"{r['device_batch']} x {r['seq_len']} ({r['accum']}) | {_gib(r['argument'])} | "
            f"{_gib(r['output'])} | {_gib(r['alias'])} | {_gib(r['temp'])} | "
            f"**{'~' if r.get('estimated') else ''}{_gib(r['peak'])}** | "
            f"{_gib(r['chip_bytes'])} | {100 * r['headroom']:.0f}% | {'yes' if r['fits'] else 'NO'} |")
    refused = sorted({(r["chip"], r["usable_hbm"]) for r in rows if r.get("estimated")})
    for chip, usable in refused:
        lines.append(f"\n~ XLA:TPU refused to compile ({chip}: temporaries over its usable HBM, "
                     f"{usable / GiB:.2f} GiB): temp as it stated it, the rest from the shard sizes")
    return "\n".join(lines)


def machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{_platform.processor() or _platform.machine()}, {os.cpu_count()} cores"


def _ensure_devices(n: int) -> None:
    """Before jax: N fake CPU devices. After: check there are enough."""
    if "jax" in sys.modules:
        import jax
        if len(jax.devices()) < n:
            raise SystemExit(f"jax was started with {len(jax.devices())} devices, the analysis needs {n}: "
                             f"set XLA_FLAGS=--xla_force_host_platform_device_count={n} before jax starts")
        return
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", ""))
    flags += "".join(f" {f}" for f in FAST_CODEGEN if f.split("=")[0] not in flags)
    os.environ["XLA_FLAGS"] = f"{flags.strip()} --xla_force_host_platform_device_count={n}".strip()
    os.environ["JAX_PLATFORMS"] = "cpu"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--preset", help="speedrun preset (train/speedrun.py PRESETS), e.g. d12")
    which.add_argument("--all", action="store_true", help=f"{', '.join(ACCELERATOR_PRESETS)}, base and sft")
    ap.add_argument("--chip", choices=sorted(CHIPS), action="append",
                    help="chip(s) to report (repeatable; default: all; the preset's own chip is marked *)")
    ap.add_argument("--stage", choices=["base", "sft", "both"], help="default: base (both with --all)")
    ap.add_argument("--compiler", choices=["cpu", "tpu"], default="cpu",
                    help="cpu: XLA:CPU over fake devices (default); tpu: the real XLA:TPU compiler "
                    "for the chip's topology, ahead of time (needs libtpu; TPU chips only)")
    ap.add_argument("--attn", choices=["standin", "real"],
                    help="standin: the flash-shaped stand-in (default with --compiler cpu); real: the "
                    "model's own (CPU: the einsum path; TPU: the splash kernel, default there)")
    ap.add_argument("--device-batch", type=int, help="override the preset's device batch (base and sft); "
                    "the total batch becomes one micro-step when the preset's is not a multiple")
    ap.add_argument("--total-batch", type=int, help="override the preset's base total batch (tokens)")
    ap.add_argument("--base-args", default="", help="more `train base` flags appended to the preset's, "
                    "e.g. \"--remat block\"")
    ap.add_argument("--json", metavar="FILE", help="write every row (and the machine) as JSON")
    args = ap.parse_args(argv)

    presets = list(ACCELERATOR_PRESETS) if args.all else [args.preset]
    stages = {"base": ["base"], "sft": ["sft"], "both": ["base", "sft"], None: None}[args.stage] or (
        ["base", "sft"] if args.all else ["base"])
    plans = [preset_plan(p, args.device_batch, args.total_batch, args.base_args) for p in presets]
    chips = args.chip or [c for c in CHIPS if args.compiler == "cpu" or CHIPS[c]["platform"] == "tpu"]
    if args.compiler == "tpu" and any(CHIPS[c]["platform"] != "tpu" for c in chips):
        ap.error("--compiler tpu compiles for TPU chips only (v6e, v5e)")
    attn = args.attn or ("standin" if args.compiler == "cpu" else "real")
    _ensure_devices(max(devices_for(p, c) for p in plans for c in chips))

    import jax
    import nanocode.gpt
    real = "the CPU einsum path" if args.compiler == "cpu" else "the model's own (splash)"
    print(f"machine: {machine()}; jax {jax.__version__}; compiler: XLA:{args.compiler.upper()}"
          + (f" over {len(jax.devices())} fake CPU devices" if args.compiler == "cpu" else " (AOT)")
          + f"; attention: {'flash-shaped stand-in' if attn == 'standin' else real}; model code: "
          f"{nanocode.gpt.__file__}")
    rows = []
    for plan in plans:
        for stage in stages:
            if stage == "sft" and not plan["sft"]:
                continue
            rows += analyse(plan, stage, chips, attn, args.compiler)
    print("\nper device, GiB (2^30 bytes); peak = argument + output + temp - alias; * = the preset's "
          "own chip; every chip at the preset's device batch and mesh\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "jax": jax.__version__,
                                               "attn": attn, "compiler": args.compiler,
                                               "headroom_needed": HEADROOM,
                                               "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
