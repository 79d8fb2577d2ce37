"""nanocode/sharding.py's PARAM_LAYOUT: every parameter of init_params (tiny and preset configs)
has an entry, params and optimizer state are laid out as the table says, and a parameter the table
does not know (or an axis that does not divide) is a clear error. The specs are checked on abstract
meshes in this process; the real placement on 4 forced CPU devices in a subprocess
(XLA_FLAGS=--xla_force_host_platform_device_count=4 must be set before jax starts)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P
from tiny_models import tiny

from nanocode.config import preset
from nanocode.gpt import init_params
from nanocode.sharding import PARAM_LAYOUT, layout_kind, leaf_spec, tree_shardings
from train.optim import build_optimizer

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "tiny": tiny(),
    "tiny-features-off": tiny(value_embeds=False, lambdas=False, smear=False, backout=False),
    "d12": preset("d12"),
    "nanocode-v1-d12": preset("nanocode-v1-d12"),
}


def abstract(cfg):
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    optimizer = build_optimizer(cfg, params, total_steps=10, batch_tokens=4096)
    return params, jax.eval_shape(optimizer.init, params)


def mesh(fsdp: int, data: int = 1):
    return AbstractMesh((data, fsdp), ("data", "fsdp"))


def expected(kind: str, ndim: int) -> P:
    """The table's entry on the trailing axes, P() when it shards nothing."""
    spec = (None,) * (ndim - len(PARAM_LAYOUT[kind])) + tuple(PARAM_LAYOUT[kind])
    return P(*spec) if any(spec) else P()


def flat(tree):
    return jax.tree_util.tree_flatten_with_path(tree)[0]


def test_every_parameter_has_an_entry_of_its_rank():
    seen = set()
    for name, cfg in CONFIGS.items():
        params, _ = abstract(cfg)
        for path, x in flat(params):
            kind, in_state = layout_kind(path)
            assert not in_state and kind in PARAM_LAYOUT, (name, jax.tree_util.keystr(path))
            assert x.ndim == len(PARAM_LAYOUT[kind]), (name, kind, x.shape)
            seen.add(kind)
    assert seen == set(PARAM_LAYOUT)  # and the table has no entry for a parameter that is gone


@pytest.mark.parametrize("name,fsdp", [("tiny", 2), ("tiny", 4), ("d12", 8),
                                       ("nanocode-v1-d12", 4)])
def test_params_and_optimizer_state_follow_the_table(name, fsdp):
    params, state = abstract(CONFIGS[name])
    m = mesh(fsdp)
    kinds = {}
    for path, x in flat(params):
        kind, _ = layout_kind(path)
        assert leaf_spec(path, x.shape, m) == expected(kind, x.ndim), (kind, x.shape)
        kinds[kind] = x.shape
    mirrored = set()
    for path, x in flat(state):
        kind, in_state = layout_kind(path)
        spec = leaf_spec(path, x.shape, m)
        assert in_state
        if kind not in PARAM_LAYOUT:  # the step counters
            assert kind == "" and x.shape == () and spec == P(), jax.tree_util.keystr(path)
        elif x.shape == kinds[kind]:  # a moment shaped like its parameter: the parameter's layout
            assert spec == expected(kind, x.ndim), jax.tree_util.keystr(path)
            mirrored.add(kind)
        else:  # Muon's NorMuon statistic (out, 1) / (1, in): never sharded on its size-1 axis
            assert all(s is None for s, d in zip(spec, x.shape) if d == 1), (kind, x.shape, spec)
    assert mirrored == set(kinds)
    # the big arrays are actually sharded on this mesh, and nothing on an fsdp=1 mesh
    wte = [(p, x) for p, x in flat(params) if layout_kind(p)[0] == "wte"]
    assert [leaf_spec(p, x.shape, m) for p, x in wte] == [P(None, "fsdp")]
    assert all(s == P() for s in jax.tree.leaves(
        jax.tree_util.tree_map_with_path(lambda p, x: leaf_spec(p, x.shape, mesh(1, 4)), params)))


def test_stacked_layers_keep_the_layout_on_their_trailing_axes():
    L, C = 4, 64
    sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    stacked = {"blocks": {"mlp": {"c_fc": sds(L, C, 4 * C), "c_proj": sds(L, 4 * C, C)}}}
    specs = {layout_kind(p)[0]: leaf_spec(p, x.shape, mesh(4)) for p, x in flat(stacked)}
    assert specs == {"blocks/mlp/c_fc": P(None, None, "fsdp"),
                     "blocks/mlp/c_proj": P(None, "fsdp", None)}


def test_a_parameter_missing_from_the_table_is_a_clear_error():
    cfg = CONFIGS["tiny"]
    params, _ = abstract(cfg)
    params["blocks"][1]["attn"]["c_gate"] = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    with pytest.raises(ValueError, match=r"parameter \['blocks'\]\[1\]\['attn'\]\['c_gate'\] "
                                         r"\(kind 'blocks/attn/c_gate'\) has no entry in "
                                         r"PARAM_LAYOUT \(nanocode/sharding.py; kinds: wte, "):
        tree_shardings(params, mesh(2))
    # its optimizer moments (Muon's, under the same path) are the same error, on any mesh
    state = jax.eval_shape(build_optimizer(cfg, params, total_steps=10, batch_tokens=4096).init,
                           params)
    with pytest.raises(ValueError, match=r"\.mu\['blocks'\]\[1\]\['attn'\]\['c_gate'\] "
                                         r"\(kind 'blocks/attn/c_gate'\)"):
        tree_shardings(state, mesh(1))
    # a new top-level parameter, too
    with pytest.raises(ValueError, match=r"\['rope_scale'\] \(kind 'rope_scale'\).*PARAM_LAYOUT"):
        tree_shardings({"wte": params["wte"], "rope_scale": jax.ShapeDtypeStruct((), jnp.float32)},
                       mesh(1))


def test_state_bookkeeping_outside_the_table_is_replicated():
    from typing import NamedTuple

    class Hyper(NamedTuple):
        count: jax.ShapeDtypeStruct
        hyperparams: dict
    state = Hyper(jax.ShapeDtypeStruct((), jnp.int32),
                  {"learning_rate": jax.ShapeDtypeStruct((8,), jnp.float32)})
    assert all(s.spec == P() for s in jax.tree.leaves(tree_shardings(state, mesh(4))))


def test_an_axis_that_does_not_divide_is_a_clear_error():
    params, _ = abstract(tiny(vocab_size=300))  # (320, 64): its width 64 does not divide by 3
    with pytest.raises(ValueError, match=r"parameter \['wte'\] of shape \(320, 64\): axis 1 "
                                         r"\(size 64\) is sharded over mesh axis 'fsdp' of size 3 "
                                         r".*divisible by 3, or a mesh"):
        tree_shardings({"wte": params["wte"]}, mesh(3))
    with pytest.raises(ValueError, match="not a multiple of 3"):  # the whole model: c_k's 64 first
        tree_shardings(params, mesh(3))


PLACEMENT = r"""
import json, jax
from nanocode.gpt import init_params
from tiny_models import tiny
from nanocode.sharding import PARAM_LAYOUT, layout_kind, make_mesh, tree_shardings
from train.loop import place
from train.optim import build_optimizer

out = {}
for spec in ("fsdp=4", "data=2,fsdp=2"):
    mesh = make_mesh(spec)
    cfg = tiny()
    params = init_params(cfg, jax.random.PRNGKey(0))
    optimizer = build_optimizer(cfg, params, total_steps=10, batch_tokens=4096)
    params = place(params, tree_shardings(params, mesh))  # as train/loop.py's run does
    o_shard = tree_shardings(jax.eval_shape(optimizer.init, params), mesh)
    state = jax.jit(optimizer.init, out_shardings=o_shard)(params)
    rows = []
    for tree in (params, state):
        for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
            kind, in_state = layout_kind(path)
            rows.append(dict(path=jax.tree_util.keystr(path), kind=kind, state=in_state,
                             shape=list(x.shape), shard=list(x.addressable_shards[0].data.shape),
                             pieces=len({str(s.index) for s in x.addressable_shards})))
    out[spec] = dict(fsdp=mesh.shape["fsdp"], rows=rows,
                     table={k: [a for a in v] for k, v in PARAM_LAYOUT.items()})
print(json.dumps(out))
"""


def test_placement_on_four_cpu_devices_shards_what_the_table_says():
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-c", PLACEMENT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for spec, got in out.items():
        n, table = got["fsdp"], got["table"]
        params = {row["kind"]: row["shape"] for row in got["rows"] if not row["state"]}
        sharded = 0
        for row in got["rows"]:
            if row["kind"] not in table:  # the optimizers' step counters: replicated
                assert row["state"] and row["shard"] == row["shape"] == [] and row["pieces"] == 1
                continue
            if row["shape"] != params[row["kind"]]:  # NorMuon's (out, 1) / (1, in) statistic
                assert all(s in (d, d // n) for s, d in zip(row["shard"], row["shape"])), row
                continue
            names = [None] * (len(row["shape"]) - len(table[row["kind"]])) + table[row["kind"]]
            want = [d // n if name == "fsdp" else d for d, name in zip(row["shape"], names)]
            assert row["shard"] == want, (spec, row)
            assert row["pieces"] == (n if want != row["shape"] else 1), (spec, row)  # data: copies
            sharded += want != row["shape"]
        assert sharded > 0, spec


LOSSES = r"""
import json, jax, jax.numpy as jnp, numpy as np
from nanocode.gpt import init_params, nll_sum, token_nll
from nanocode.sharding import batch_sharding, make_mesh, tree_shardings
from tiny_models import tiny

cfg = tiny()
params = init_params(cfg, jax.random.PRNGKey(0))
idx = jax.random.randint(jax.random.PRNGKey(1), (8, 32), 0, cfg.vocab_size)
targets = jnp.where(jnp.arange(32) % 5 == 0, -1, jnp.roll(idx, -1, axis=1))
losses = {"nll_sum": lambda p, i, t: nll_sum(p, cfg, i, t),
          "token_nll": lambda p, i, t: (token_nll(p, cfg, i, t) * jnp.arange(32)).sum()}  # weighted per row
out = {}
for name, f in losses.items():
    want, want_g = jax.jit(jax.value_and_grad(f))(params, idx, targets)  # one device, no mesh
    for spec in ("fsdp=4", "data=2,fsdp=2"):
        mesh = make_mesh(spec)
        shard = tree_shardings(params, mesh)
        rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(("data", "fsdp")))
        step = jax.jit(jax.value_and_grad(f), in_shardings=(shard, rows, rows), out_shardings=(None, shard))
        with jax.set_mesh(mesh):
            got, got_g = step(jax.device_put(params, shard), jax.device_put(idx, rows), jax.device_put(targets, rows))
        # relative to the largest gradient: the lambdas' are float noise (~1e-8) at init
        scale = max(float(jnp.max(jnp.abs(b))) for b in jax.tree.leaves(want_g))
        err = max(float(jnp.max(jnp.abs(a - b)))
                  for a, b in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g))) / scale
        out[f"{name} {spec}"] = {"loss": abs(float(got) - float(want)) / abs(float(want)), "grad": err,
                                 "lm_head_sharded": str(got_g["lm_head"].sharding.spec)}
print(json.dumps(out))
"""


@pytest.mark.slow  # the suite's time (docs/LOG.md, sixth session)
def test_losses_and_gradients_under_fsdp_match_one_device():
    """The width-split embedding lookups (gpt.own_rows) and the head's gathered lm_head shard
    (gpt._per_device_head: its gradient comes back reduce-scattered) give the one-device loss and
    gradient of every parameter, for the training sum and the per-token nats DPO weighs."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-c", LOSSES], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(out) == 4
    for case, got in out.items():
        assert got["loss"] < 1e-5 and got["grad"] < 1e-4, (case, got)
        assert "fsdp" in got["lm_head_sharded"], (case, got)


OPTIMIZER = r"""
import json, jax, jax.numpy as jnp
from nanocode.gpt import init_params
from nanocode.sharding import make_mesh, tree_shardings
from tiny_models import tiny
from train.optim import build_optimizer

cfg = tiny()
params = init_params(cfg, jax.random.PRNGKey(0))
leaves, treedef = jax.tree.flatten(params)
grads = treedef.unflatten([jax.random.normal(jax.random.PRNGKey(i), x.shape, x.dtype) for i, x in enumerate(leaves)])
optimizer = build_optimizer(cfg, params, total_steps=10, batch_tokens=4096)
state = optimizer.init(params)
want, want_state = jax.jit(optimizer.update)(grads, state, params)  # one device, no mesh
out = {}
for spec in ("fsdp=4", "data=2,fsdp=2"):
    mesh = make_mesh(spec)
    ps, ss = tree_shardings(params, mesh), tree_shardings(jax.eval_shape(optimizer.init, params), mesh)
    update = jax.jit(optimizer.update, in_shardings=(ps, ss, ps), out_shardings=(ps, ss))
    args = jax.device_put(grads, ps), jax.device_put(state, ss), jax.device_put(params, ps)
    with jax.set_mesh(mesh):
        got, got_state = update(*args)
    err = lambda a, b: max(float(jnp.max(jnp.abs(x.astype(jnp.float32) - y.astype(jnp.float32))))
                           / max(float(jnp.max(jnp.abs(y.astype(jnp.float32)))), 1e-30)
                           for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)) if y.size)
    out[spec] = {"update": err(got, want), "state": err(got_state, want_state),
                 "delta_sharded": str(got["blocks"][0]["mlp"]["c_fc"].sharding.spec)}
print(json.dumps(out))
"""


@pytest.mark.slow  # ~25 s; test_train_base's fsdp=8 step (optimizer included) matches one device in the default run
def test_the_optimizer_under_fsdp_matches_one_device():
    """One optimizer update (Muon for the block matrices, stacked and orthogonalised whole, AdamW
    for the rest) on fsdp=4 and data=2,fsdp=2 gives one device's update and state, laid out as
    the parameters are."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-c", OPTIMIZER], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for spec, got in out.items():
        assert got["update"] < 1e-4 and got["state"] < 1e-4, (spec, got)
        assert "fsdp" in got["delta_sharded"], (spec, got)
