"""The real train step lowered for TPU and CUDA from this CPU with jax.export, on 8 (forced CPU)
devices: what fails here fails on the hardware before the first step. TPU: splash attention's
Mosaic kernels under shard_map (XLA cannot partition a Mosaic call); CUDA: cuDNN flash attention,
also per device (its own partitioning rule is a Python callback, which export cannot serialise);
both in bf16 with the chunked head + loss and remat, in the layouts each platform picks (on TPU
q, k, v head-major from their projections and rotary's swap as a matmul)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, re, sys
import jax, jax.numpy as jnp
from nanocode import gpt, sharding
from nanocode.config import GPTConfig
from nanocode.gpt import init_params
from train import loop
from train.base import next_token_loss
from train.optim import build_optimizer

# jax checks the installed cuDNN's version while tracing; a CPU machine has none, so state the
# version the jax[cuda13] wheels bring (9.10), as a GPU host would report it
import jax._src.cudnn.fused_attention_stablehlo as fused
fused.cuda_versions = type("CudnnOnTheGpuHost", (), {"cudnn_get_version": staticmethod(lambda: 91000)})

out = {}
# (name, platform, attention, mesh, whose layouts): each platform's own layouts (gpt's per-backend
# tables; the export runs on CPU), and the TPU step once more in the CPU's, to show the switch took
TABLES = (gpt.HEAD_MAJOR, gpt.ROTARY_MATMUL)
CPU_LAYOUTS = [table["cpu"] for table in TABLES]
for name, platform, impl, mesh_spec, backend in (("tpu", "tpu", "splash", "data=1,fsdp=8", "tpu"),
                                                 ("tpu_cpu_layouts", "tpu", "splash", "data=1,fsdp=8", None),
                                                 ("cuda", "cuda", "cudnn", "data=2,fsdp=4", "gpu")):
    for table, cpu_layout in zip(TABLES, CPU_LAYOUTS):
        table["cpu"] = table[backend] if backend else cpu_layout
    cfg = GPTConfig(n_layer=4, n_embd=256, n_head=2, n_kv_head=2, head_dim=128, vocab_size=512,
                    sequence_len=256, compute_dtype="bfloat16", attn_impl=impl, remat="block")
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    optimizer = build_optimizer(cfg, params, total_steps=10, batch_tokens=16 * 256)
    opt_state = jax.eval_shape(optimizer.init, params)
    mesh = sharding.make_mesh(mesh_spec)
    p_shard, o_shard = sharding.tree_shardings(params, mesh), sharding.tree_shardings(opt_state, mesh)
    step = jax.jit(loop.make_train_step(next_token_loss(cfg), optimizer), donate_argnums=0,
                   in_shardings=((p_shard, o_shard), sharding.batch_sharding(mesh)),
                   out_shardings=((p_shard, o_shard), None))
    tokens = jax.ShapeDtypeStruct((2, 16, 256), jnp.int32)  # (accum, rows, T)
    # cuDNN's custom calls carry no serialisation-stability guarantee, so export asks for consent
    unchecked = [jax.export.DisabledSafetyCheck.custom_call(f"__cudnn$fmhaSoftmax{s}")
                 for s in ("", "Backward")]
    with jax.set_mesh(mesh):
        exported = jax.export.export(step, platforms=[platform], disabled_checks=unchecked)(
            (params, opt_state), {"inputs": tokens, "targets": tokens})
    text = exported.mlir_module()
    calls = re.findall(r'stablehlo.custom_call @([\w$.]+)', text)
    out[name] = {"devices": exported.nr_devices, "calls": sorted(set(calls)), "dots": text.count("dot_general"),
                 "transposes": text.count("stablehlo.transpose"),
                 "n_calls": {c: calls.count(c) for c in set(calls)}, "bf16": "bf16" in text}
print(json.dumps(out))
"""


def test_train_step_lowers_for_tpu_with_splash_and_for_cuda_with_cudnn():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    tpu, cuda = out["tpu"], out["cuda"]
    assert tpu["devices"] == cuda["devices"] == 8
    # the TPU's own layouts lowered: rotary's swap as a matmul adds dots, q, k, v head-major from
    # their projections leaves out transposes
    cpu_layouts = out["tpu_cpu_layouts"]
    assert tpu["dots"] > cpu_layouts["dots"] and tpu["transposes"] < cpu_layouts["transposes"], (tpu, cpu_layouts)
    # splash: the forward and the fused backward kernel of every layer's scan body (4 layers of
    # one kind each, SSSL) are Mosaic calls; no automatic partitioning was needed
    assert "tpu_custom_call" in tpu["calls"], tpu
    assert tpu["n_calls"]["tpu_custom_call"] >= 4, tpu
    assert "CustomSPMDPartitioning" not in cuda["calls"], cuda
    assert {"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"} <= set(cuda["calls"]), cuda
    assert tpu["bf16"] and cuda["bf16"]
