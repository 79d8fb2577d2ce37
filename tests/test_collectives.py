"""bench/collectives.py on d12's real train step (8 fake CPU devices, fsdp=8, the TPU code paths):
the embedding tables never travel whole (their lookups move activations, their gradients stay
local), lm_head's weight gradient is reduce-scattered to its vocabulary shard, and the parser
reads collectives, loop trip counts and async pairs from HLO text.

At d12's shapes the vocabulary layout made XLA all-gather the whole wte and value-embedding tables
inside the step (f32 (32768, 768), per layer group for the value embeddings) and all-reduce
lm_head's whole gradient per micro-batch; that is what the first test rules out. The analysis
runs in a subprocess (XLA_FLAGS must be set before jax starts), ~10-20 s of CPU."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "collectives.py"


def _module():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_collectives", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_d12_tables_never_travel_whole_and_the_head_gradient_is_reduce_scattered(tmp_path):
    out = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--preset", "d12", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    row = json.loads(out.read_text())
    assert row["mesh"] == {"data": 1, "fsdp": 8}
    vocab = row["vocab_sized"]
    # the one vocabulary-sized collective: lm_head's weight gathered for the head (C, V), no table
    assert [(op["kind"], op["arrays"]) for op in vocab] == [("all-gather", ["f32[768, 32768]"])], vocab
    assert row["per_step"]["reduce-scatter"] > 0 and row["per_step"]["all-to-all"] > 0


HLO = """HloModule jit_step

%body.2 (p: f32[4]) -> f32[4] {
  %ag = f32[8,16]{1,0} all-gather(f32[1,16]{1,0} %x), dimensions={0}, metadata={op_name="jit(step)/while/body/closed_call/while/body/dot_general"}
  ROOT %r = f32[4] add(%p, %p)
}

%body.1 (p: f32[4]) -> f32[4] {
  %w = f32[4] while(%p), condition=%c2, body=%body.2, backend_config={"known_trip_count":{"n":"3"}}
  %ars = ((bf16[2,4]{1,0}), bf16[2,4]{1,0}) all-reduce-start(bf16[2,4]{1,0} %y), metadata={op_name="jit(step)/while/body/psum"}
  ROOT %r = f32[4] add(%w, %w)
}

ENTRY %main.9 (a: f32[4]) -> f32[4] {
  %w = f32[4] while(%a), condition=%c1, body=%body.1, backend_config={"known_trip_count":{"n":"2"}}
  %rs = f32[4,32]{1,0} reduce-scatter(f32[32,32]{1,0} %g), dimensions={0}, metadata={op_name="jit(step)/mul"}
  ROOT %r = f32[4] add(%w, %w)
}
"""


def test_collectives_count_loop_trips_and_async_results():
    c = _module()
    ops = {op["kind"]: op for op in c.collectives(HLO)}
    assert ops["all-gather"]["runs"] == 6 and ops["all-gather"]["bytes"] == 8 * 16 * 4  # 2 micro x 3 layers
    assert ops["all-gather"]["micro"] and ops["all-reduce"]["micro"] and not ops["reduce-scatter"]["micro"]
    assert ops["all-reduce"]["runs"] == 2 and ops["all-reduce"]["bytes"] == 2 * 4 * 2  # the result, not the operand
    assert ops["reduce-scatter"]["runs"] == 1
    s = c.summary(list(ops.values()), accum=2, vocab=32)
    assert s["per_micro_batch"] == {"all-gather": 3 * 512, "all-reduce": 16}
    assert s["per_step"]["reduce-scatter"] == 512
    assert [(op["kind"], op["arrays"]) for op in s["vocab_sized"]] == [("reduce-scatter", ["f32[4, 32]"])]
