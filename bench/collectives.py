"""What a speedrun preset's compiled train step sends between devices: every collective of the
step bench/memory.py builds (the preset's flags, mesh and device batch, bf16, the chip's code
paths), read from the compiled program's HLO, grouped by kind and by the jax operation it comes
from, with its buffer size per device and how often it runs per step.

    python bench/collectives.py --preset d20                  # XLA:CPU over 8 fake devices
    python bench/collectives.py --preset d20 --compiler tpu   # XLA:TPU's own program (libtpu as
                                                              # bench/memory.py's docstring says)
    python bench/collectives.py --preset d20 --json out.json --hlo step.hlo

How often: the product of the known trip counts of the `while` loops around it in the compiled
program (the accumulation scan, the layer loop nested in it, the head's chunk scan, however XLA
unrolled them); "per micro-batch" counts what jax traced inside the accumulation scan (op_name
`jit(step)/while/body...`) divided by the micro-batches; the rest runs once per step (the
optimizer). Bytes are the collective's result per device (an all-gather's
gathered array, a reduce-scatter's shard, an all-reduce's whole buffer, a tuple summed): a measure
of what is moved, not of wire traffic (a ring all-reduce sends about twice its buffer).

The vocabulary-sized collectives are what the embedding layout decides (nanocode/sharding.py
PARAM_LAYOUT); they are listed apart: any collective whose buffer has the padded vocabulary as a
dimension.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import memory  # noqa: E402  (bench/memory.py: the step, built as `train speedrun` runs it)

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_OP = re.compile(r"= (.*?) (" + "|".join(KINDS) + r")(-start)?\((.*)$")
_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_ARRAY = re.compile(r"\b(pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4,
          "f32": 4, "s64": 8, "u64": 8, "f64": 8}
ACCUM_LOOP = "jit(step)/while/body"  # op_name prefix of what the gradient-accumulation scan traced


def collectives(hlo: str) -> list[dict]:
    """Every collective of a compiled module's text: kind, the arrays of its result (dtype,
    shape), bytes, `runs` per step (the product of the known trip counts of the while loops around
    it), whether jax traced it inside the accumulation loop (`micro`), and the jax operation it
    comes from (its op_name's last part). An async -start's result tuple holds its operands and
    scalar contexts too: only the second half of its arrays (the results) counts."""
    ops, edges, entry, comp = [], {}, None, None
    for line in hlo.split("\n"):
        header = _HEADER.match(line) if line[:1] not in (" ", "}", "") else None
        if header:
            comp = header.group(1)
            entry = comp if line.startswith("ENTRY") else entry
            continue
        trips = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
        for key, callee in re.findall(r"\b(body|calls|to_apply)=%?([\w.\-]+)", line):
            edges.setdefault(comp, []).append((callee, int(trips.group(1)) if key == "body" and trips else 1))
        m = _OP.search(line)
        if m is None:
            continue
        result, kind, start, rest = m.groups()
        arrays = [(dt, tuple(int(d) for d in dims.split(",") if d)) for dt, dims in _ARRAY.findall(result)]
        if start:  # (operands, results, scalar contexts): the results
            arrays = [a for a in arrays if a[1]]
            arrays = arrays[len(arrays) // 2:]
        name = re.search(r'op_name="([^"]*)"', rest)
        op = name.group(1) if name else ""
        ops.append(dict(kind=kind, arrays=arrays, bytes=sum(_BYTES[dt] * math.prod(sh) for dt, sh in arrays),
                        comp=comp, micro=op.startswith(ACCUM_LOOP), source=op.rsplit("/", 1)[-1]))
    runs, todo = {entry: 1}, [entry]
    while todo:  # executions per step of every computation reachable from the entry
        comp = todo.pop()
        for callee, n in edges.get(comp, []):
            if callee not in runs:
                runs[callee] = runs[comp] * n
                todo.append(callee)
    for op in ops:
        op["runs"] = runs.get(op.pop("comp"), 1)
    return ops


def summary(ops: list[dict], accum: int, vocab: int) -> dict:
    """Bytes per step and per micro-batch by kind, and the vocabulary-sized collectives."""
    per_step, per_micro = {}, {}
    for op in ops:
        per_step[op["kind"]] = per_step.get(op["kind"], 0) + op["bytes"] * op["runs"]
        if op["micro"]:
            per_micro[op["kind"]] = per_micro.get(op["kind"], 0) + op["bytes"] * op["runs"] // accum
    vocab_ops = [dict(kind=op["kind"], arrays=[f"{dt}{list(sh)}" for dt, sh in op["arrays"] if vocab in sh],
                      source=op["source"], runs=op["runs"], micro=op["micro"])
                 for op in ops if any(vocab in sh for _, sh in op["arrays"])]
    return dict(per_step=per_step, per_micro_batch=per_micro, vocab_sized=vocab_ops)


def analyse(plan: dict, chip: str, compiler: str, attn: str, hlo_path: str | None = None) -> dict:
    """The preset's base step compiled for `chip`, its collectives summarised (`summary`)."""
    spec = memory.CHIPS[chip]
    devices = memory.target_devices(chip, memory.devices_for(plan, chip), compiler)
    lowered, facts, _ = memory.lower_step(plan, "base", devices, spec["platform"], attn, compiler)
    hlo = lowered.compile().as_text()
    if hlo_path:
        Path(hlo_path).write_text(hlo)
    from train.base import model_config  # local: jax starts after memory._ensure_devices (main)
    base = memory._parse("base", plan["base"])
    vocab = model_config(base.preset, plan["vocab"], depth=base.depth).padded_vocab
    ops = collectives(hlo)
    return dict(preset=plan["preset"], chip=chip, compiler=compiler, mesh=facts["mesh"], accum=facts["accum"],
                device_batch=facts["device_batch"], collectives=len(ops), **summary(ops, facts["accum"], vocab))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", required=True, help="speedrun preset, e.g. d20")
    ap.add_argument("--chip", choices=sorted(memory.CHIPS), help="default: the preset's own")
    ap.add_argument("--compiler", choices=["cpu", "tpu"], default="cpu")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--hlo", metavar="FILE", help="also write the compiled program's text there")
    args = ap.parse_args(argv)
    plan = memory.preset_plan(args.preset)
    chip = args.chip or plan["chip"]
    memory._ensure_devices(memory.devices_for(plan, chip))
    row = analyse(plan, chip, args.compiler, "standin" if args.compiler == "cpu" else "real", args.hlo)
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    print(f"{row['preset']} on {chip} x {memory.devices_for(plan, chip)} (XLA:{args.compiler.upper()}), "
          f"mesh {row['mesh']}, {row['accum']} micro-batches of {row['device_batch']} rows per device, "
          f"{row['collectives']} collectives in the program")
    for kind in KINDS:
        if kind in row["per_step"]:
            print(f"  {kind:18s} per micro-batch {mib(row['per_micro_batch'].get(kind, 0)):>14s}   "
                  f"per step {mib(row['per_step'][kind]):>14s}")
    print("vocabulary-sized collectives (what the embedding and head layout decide):")
    for op in row["vocab_sized"]:
        print(f"  {op['kind']:18s} {', '.join(op['arrays']):30s} {op['runs']:4d} per step   from {op['source']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": memory.machine(), **row}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
