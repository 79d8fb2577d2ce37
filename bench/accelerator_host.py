"""The host side of bench/accelerator_check.py's proving run: what keeps a chip fed and safe
besides the model's math. Each function is one section of that run, returns its JSON record and
raises on failure (the runner records the error and goes on):

- `jax_api`: the jax version and whether every jax function this code relies on exists there (a
  release that renames one shows up here, not as a crash mid-run).
- `profile_summary`: the device time of a jax.profiler trace, grouped by op name, top ones first,
  and by op kind (`hlo_op_kinds`: matmul, attention kernel, element-wise, copy, ...) when given
  the compiled step's HLO: a step of many small fusions has a flat by-name profile whose kinds
  still say where the time goes.
- `loader_rate`: train/loader.py's packed batches from code shards built from the standard
  library on the spot (no network) with a tokenizer trained on them: tokens emitted per
  CPU-second of one core, against what the measured train step consumes.
- `save_rate`: nanocode.checkpoint.AsyncSaver on a given state (the d20-size one): how long the
  loop waits (the copy to host memory) and how long the whole write takes, GiB/s.

These import what the model sections must not (orbax, pyarrow, the tokenizer's packages), so the
runner calls them after those, and a machine without one records that section's error only.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sysconfig
import tempfile
import time
from pathlib import Path

import jax

# the jax functions this code calls whose absence (a rename) would stop a run
JAX_API = ("shard_map", "set_mesh", "sharding.get_abstract_mesh", "make_array_from_process_local_data",
           "lax.full_like", "lax.all_gather", "lax.psum", "lax.with_sharding_constraint",
           "nn.dot_product_attention", "profiler.start_trace", "profiler.trace", "distributed.initialize",
           "export.export", "tree_util.tree_flatten_with_path")


STDLIB_CODE = ("email", "json", "http", "xml", "asyncio", "unittest", "importlib", "logging")  # ~4 MB of code


def jax_api() -> dict:
    missing = []
    for dotted in JAX_API:
        obj = jax
        for part in dotted.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                missing.append(dotted)
                break
    if missing:
        raise RuntimeError(f"jax {jax.__version__} lacks {', '.join(missing)}")
    return {"jax_version": jax.__version__, "checked": list(JAX_API)}


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\([^=]*?\)|\S+)\s+([a-z][\w\-]*)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)")
_KINDS = {"convolution": "matmul", "dot": "matmul", "custom-call": "kernel (custom call)",
          "copy": "copy/layout", "transpose": "copy/layout", "copy-start": "copy/layout",
          "copy-done": "copy/layout", "bitcast": "copy/layout", "reshape": "copy/layout",
          "all-reduce": "collective", "all-gather": "collective", "reduce-scatter": "collective",
          "all-to-all": "collective", "collective-permute": "collective", "while": "control",
          "conditional": "control", "call": "control"}


def hlo_op_kinds(hlo_text: str) -> dict[str, str]:
    """Instruction name -> kind, from a compiled module's HLO text (`compiled.as_text()`): a fusion
    whose computation (or one it calls) holds a convolution or dot is "matmul", one with a custom
    call "kernel (custom call)", any other "element-wise/reduce"; bare ops by opcode (_KINDS),
    the rest "other (<opcode>)". The names are the ones a device trace's op lane shows."""
    ops: dict[str, list[tuple[str, str, list[str]]]] = {}  # computation -> [(name, opcode, callees)]
    current = None
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            ops[current].append((m.group(1), m.group(3), _CALLS.findall(line)))
        elif (c := _COMPUTATION.match(line)) and "=" not in line.split("{")[0]:
            current = c.group(1)
            ops.setdefault(current, [])

    def holds(comp: str, opcodes: tuple[str, ...], seen: set) -> bool:
        if comp in seen:
            return False
        seen.add(comp)
        return any(op in opcodes or any(holds(c, opcodes, seen) for c in callees)
                   for _, op, callees in ops.get(comp, ()))

    kinds = {}
    for comp_ops in ops.values():
        for name, op, callees in comp_ops:
            if op == "fusion":
                kinds[name] = ("matmul" if any(holds(c, ("convolution", "dot"), set()) for c in callees)
                               else "kernel (custom call)" if any(holds(c, ("custom-call",), set()) for c in callees)
                               else "element-wise/reduce")
            else:
                kinds[name] = _KINDS.get(op, f"other ({op})")
    return kinds


def hlo_op_labels(hlo_text: str) -> dict[str, str]:
    """Instruction name -> "shape  jax op" (its output shape and the op_name of its metadata, the
    tail of the traced function's path): what tells two fusions of one kind apart in a profile."""
    labels = {}
    for line in hlo_text.splitlines():
        if m := _INSTRUCTION.match(line):
            op = _OP_NAME.search(line)
            labels[m.group(1)] = f"{m.group(2)[:60]}  {op.group(1)[-90:] if op else ''}".rstrip()
    return labels


# Ops listed per kind in a profile summary (a lever for a closer look: --lever accelerator_host.TOP_PER_KIND=40).
TOP_PER_KIND = 6


def profile_summary(trace_dir: str, top: int = 12, kinds: dict[str, str] | None = None,
                    labels: dict[str, str] | None = None) -> dict:
    """Self time per event name in the newest *.trace.json.gz under trace_dir (Perfetto JSON,
    microseconds), top `top` names. Device lanes only when the trace has any (process names with
    "/device:"), and of those the op lane alone where there is one (thread "XLA Ops"): a TPU trace
    also has step and module lanes whose events span the ops. Within a lane events nest (a while
    loop holds the ops of its body), so each event counts only the time none of its children
    cover, and the shares add up to the busy time once. With `kinds` (hlo_op_kinds) the time is
    also summed by kind, and with `labels` (hlo_op_labels) each kind's top ops are listed by shape
    and jax op."""
    traces = sorted(Path(trace_dir).rglob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise FileNotFoundError(f"no *.trace.json.gz under {trace_dir}")
    with gzip.open(traces[-1], "rt") as f:
        events = json.load(f).get("traceEvents", [])
    names = {e["pid"]: e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    device = {pid for pid, name in names.items() if "/device:" in name}
    threads = {(e["pid"], e["tid"]): e.get("args", {}).get("name", "") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") in device}
    ops = {key for key, name in threads.items() if name == "XLA Ops"}
    lanes: dict[tuple, list] = {}
    for e in events:
        lane = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "X" and (not device or lane[0] in device) and (not ops or lane in ops):
            lanes.setdefault(lane, []).append((float(e.get("ts", 0)), float(e.get("dur", 0)), e["name"]))
    totals: dict[str, float] = {}
    for spans in lanes.values():
        stack: list[list] = []  # [end, name, self time] of the open events enclosing this one
        for ts, dur, name in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][0] <= ts:
                _, done, own = stack.pop()
                totals[done] = totals.get(done, 0.0) + own
            if stack:
                stack[-1][2] -= dur
            stack.append([ts + dur, name, dur])
        for _, done, own in stack:
            totals[done] = totals.get(done, 0.0) + own
    busy = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    kind = "device ops" if ops else "device" if device else "host"
    by_kind: dict[str, float] = {}
    for name, own in totals.items():
        k = (kinds or {}).get(name.split(":")[0].lstrip("%"), "unmapped")
        by_kind[k] = by_kind.get(k, 0.0) + own
    kind_shares = {k: {"ms": round(v / 1000, 3), "share": round(v / busy, 4) if busy else None}
                   for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])} if kinds is not None else None
    by_kind_top: dict[str, list] = {}
    for name, own in sorted(totals.items(), key=lambda kv: -kv[1]):
        key = name.split(":")[0].lstrip("%")
        ranked_kind = by_kind_top.setdefault((kinds or {}).get(key, "unmapped"), [])
        if labels is not None and len(ranked_kind) < TOP_PER_KIND:
            ranked_kind.append({"name": key, "label": labels.get(key, ""), "ms": round(own / 1000, 3),
                                "share": round(own / busy, 4) if busy else None})
    return {"trace": str(traces[-1].relative_to(trace_dir)), "lanes": kind, "by_kind": kind_shares,
            "top_by_kind": by_kind_top if labels is not None else None,
            "device_threads": sorted(set(threads.values())),
            "events": len(events), "busy_ms": round(busy / 1000, 3),
            "top": [{"name": n[:120], "ms": round(d / 1000, 3), "share": round(d / busy, 4) if busy else None}
                    for n, d in ranked]}


def loader_rate(seq_len: int, seconds: float, rows: int = 8) -> dict:
    """Tokens per CPU-second (one core) that the loader emits at seq_len from stdlib code shards,
    built and tokenized here: `train data local` over the standard library and a 4,096-token
    `train tokenizer` on them (both in a temp dir, removed after); a few packages of it
    (STDLIB_CODE), so the set-up stays well under a minute."""
    from nanocode.tokenizer import Tokenizer
    from train.cli import main as train_main  # local: see KEEP_LOCAL (tests/test_local_imports.py)
    from train.loader import data_sources, packed_batches

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    src = [str(stdlib / d) for d in STDLIB_CODE if (stdlib / d).exists()]
    work = Path(tempfile.mkdtemp(prefix="nanocode-loader-"))
    try:
        t = time.perf_counter()
        if train_main(["data", "local", "--kind", "code", "--src", *src, "--out", str(work / "data")]):
            raise RuntimeError("train data local failed")
        (work / "data" / "text").symlink_to(work / "data" / "code")  # code only: text is the same code
        if train_main(["tokenizer", "--data", str(work / "data"), "--vocab-size", "4096",
                       "--max-chars", "5000000", "--out", str(work / "tok")]):
            raise RuntimeError("train tokenizer failed")
        setup_s = time.perf_counter() - t
        tok = Tokenizer.load(str(work / "tok"))
        sources, weights = data_sources(str(work / "data"), 1.0)
        it = packed_batches(tok, sources, weights, rows, seq_len, buffer_docs=1000)
        next(it)  # the first buffer fill is start-up
        emitted, c0 = 0, time.process_time()
        while time.process_time() - c0 < seconds:
            x, _, _ = next(it)
            emitted += x.size
        cpu = time.process_time() - c0
        return {"seq_len": seq_len, "setup_s": round(setup_s, 1), "cpu_s": round(cpu, 2),
                "tokens_per_cpu_s": emitted / cpu, "cpus": os.cpu_count()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def save_rate(params, opt_state, cfg, directory: str | None = None) -> dict:
    """AsyncSaver.save of (params, opt_state): the loop's wait and the whole write, once."""
    from nanocode.checkpoint import AsyncSaver
    nbytes = sum(x.nbytes for x in jax.tree.leaves((params, opt_state)))
    root = Path(directory or tempfile.mkdtemp(prefix="nanocode-save-"))
    try:
        with AsyncSaver(root / "checkpoints") as saver:
            t = time.perf_counter()
            saver.save(1, params, config=cfg, opt_state=opt_state)
            blocked = time.perf_counter() - t
            saver.wait()
            whole = time.perf_counter() - t
        return {"state_gib": round(nbytes / 2**30, 3), "blocked_s": round(blocked, 3),
                "write_s": round(whole, 3), "gib_per_s": round(nbytes / 2**30 / whole, 3),
                "dir": str(root)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
