"""How the model's arrays are laid out on the device mesh: the (data, fsdp) mesh, the table that
places every parameter of nanocode/gpt.py (and every optimizer-state leaf that mirrors one), and
the training batch's rows.

The mesh has two axes. Every device takes a slice of the batch (`batch_sharding` splits rows over
both axes); parameters and optimizer state are sharded over `fsdp` as PARAM_LAYOUT declares per
parameter kind (ZeRO-3 style: XLA all-gathers weights for the matmuls and reduce-scatters
gradients) and replicated over `data`. The table sits beside the model because it is keyed by the
model's parameter paths: a new parameter in `init_params` needs its line here, and a missing one is
an error (`leaf_spec`), never a silently replicated array.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA, FSDP = "data", "fsdp"  # the mesh axes, in mesh order


def make_mesh(spec: str = "", devices=None) -> Mesh:
    """A (data, fsdp) mesh from "data=2,fsdp=4"; an omitted or -1 size takes the remaining devices.
    The default puts every device on `data` (pure data parallel)."""
    devices = np.asarray(devices if devices is not None else jax.devices())
    sizes = {DATA: -1, FSDP: 1}
    for part in filter(None, spec.replace(" ", "").split(",")):
        name, _, value = part.partition("=")
        if name not in sizes or not value.lstrip("-").isdigit():
            raise ValueError(f"bad mesh spec {spec!r}: use e.g. 'data=2,fsdp=4' (axes data, fsdp)")
        sizes[name] = int(value)
    fixed = math.prod(v for v in sizes.values() if v != -1)
    for name, v in sizes.items():
        if v == -1:
            sizes[name] = devices.size // fixed
    if sizes[DATA] * sizes[FSDP] != devices.size:
        raise ValueError(f"mesh {sizes} needs {sizes[DATA] * sizes[FSDP]} devices, "
                         f"there are {devices.size}")
    return Mesh(devices.reshape(sizes[DATA], sizes[FSDP]), (DATA, FSDP))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """(accum, rows, T) batches: rows split over every device of the mesh."""
    return NamedSharding(mesh, P(None, (DATA, FSDP)))


# How every parameter of nanocode/gpt.py's `init_params` is laid out on the mesh, by kind (the tree
# path without layer numbers: `blocks/3/attn/c_q` is "blocks/attn/c_q", `value_embeds/11` is
# "value_embeds"): a PartitionSpec, one mesh axis (or None) per array axis. The one definition:
# params and optimizer state are all placed from it by `tree_shardings` (see `leaf_spec`), and over
# `data` everything is replicated. The big matrices are sharded on their longest axis: the MLP's
# hidden width, the attention kernels' input axis (C, or H*D for the output projection: longest,
# or tied where square as in every preset), lm_head's vocabulary. The embedding tables are split
# over their width instead: a row lookup then reads local columns for the rows of every device on
# the axis (an all-to-all of activations, never the table), and each device scatter-adds its
# columns' gradient itself, with no table-sized reduction over `fsdp` (bench/collectives.py shows
# the compiled step's collectives). lm_head's weight gradient is reduce-scattered to its vocabulary
# shard by the head's own code (gpt._per_device_head). The gates, per-layer lambdas and
# scalars (a few dozen floats each) are replicated: sharding them would save nothing and cost a
# collective each. A parameter whose kind is missing here is an error, so a new one cannot go
# unsharded by accident.
PARAM_LAYOUT: dict[str, P] = {
    "wte": P(None, FSDP),                  # (V, C) over the width
    "value_embeds": P(None, FSDP),         # (V, K*D) per value-embedding layer, over the width
    "lm_head": P(None, FSDP),              # (C, V) over the vocabulary
    "blocks/attn/c_q": P(FSDP, None),      # (C, H*D)
    "blocks/attn/c_k": P(FSDP, None),      # (C, K*D)
    "blocks/attn/c_v": P(FSDP, None),      # (C, K*D)
    "blocks/attn/c_proj": P(FSDP, None),   # (H*D, C)
    "blocks/attn/ve_gate": P(None, None),  # (12, K) replicated
    "blocks/mlp/c_fc": P(None, FSDP),      # (C, 4C) over the hidden width
    "blocks/mlp/c_proj": P(FSDP, None),    # (4C, C) over the hidden width
    "resid_lambdas": P(None),              # (L,) replicated
    "x0_lambdas": P(None),                 # (L,) replicated
    "smear_gate": P(None, None),           # (24, 1) replicated
    "smear_lambda": P(),                   # () replicated
    "backout_lambda": P(),                 # () replicated
}
_LAYOUT_ROOTS = frozenset(kind.split("/")[0] for kind in PARAM_LAYOUT)


def layout_kind(path) -> tuple[str, bool]:
    """(kind, in_state) of a leaf's tree path. A parameter tree is dicts and lists; an optimizer
    state keeps mirrors of it under NamedTuple fields
    (`.inner_states['matrix'].inner_state.mu['blocks'][0]['attn']['c_q']`). So the kind is read
    from the path's trailing run of dict keys and list indices, list indices and digit keys
    (layer numbers) dropped; in_state: something else (a state's field) comes before that run."""
    tail = []
    for key in reversed(path):
        if not isinstance(key, (jax.tree_util.DictKey, jax.tree_util.SequenceKey)):
            break
        tail.append(key)
    names = [str(k.key) for k in reversed(tail)
             if isinstance(k, jax.tree_util.DictKey) and not str(k.key).isdigit()]
    return "/".join(names), len(tail) < len(path)


def leaf_spec(path, shape, mesh: Mesh) -> P:
    """The PartitionSpec of one leaf, a parameter or an optimizer-state leaf, from PARAM_LAYOUT.

    - A parameter (a leaf reached through dict keys and list indices only) must have an entry,
      and every array axis its entry shards must divide by that mesh axis' size: otherwise a
      ValueError names the path, the shape, the axis, the mesh size and the fix.
    - A state leaf whose path ends in a parameter's (Adam's and Muon's moments) gets that
      parameter's entry. Where an axis does not divide, that axis is replicated: a reduced
      statistic such as Muon's NorMuon second moment ((out, 1) or (1, in)) has a size-1 axis where
      the parameter may have a sharded one; a state leaf with fewer axes than its entry (a
      factored statistic) is replicated whole. A state leaf under a parameter's root name with
      no entry (the moments of a new `blocks/...` matrix) is the same error as its parameter.
    - Any other state leaf (step counters, schedule hyperparameters) is replicated.
    A leaf with more axes than its entry (stacked layers or groups) has the entry on its trailing
    axes, the leading ones replicated. Mesh axes of size 1, or not in the mesh, shard nothing, and
    a leaf that ends up unsharded is P()."""
    kind, in_state = layout_kind(path)
    where = jax.tree_util.keystr(path)
    if kind not in PARAM_LAYOUT:
        if kind and (not in_state or kind.split("/")[0] in _LAYOUT_ROOTS):
            raise ValueError(f"parameter {where} (kind {kind!r}) has no entry in PARAM_LAYOUT "
                             f"(nanocode/sharding.py; kinds: {', '.join(PARAM_LAYOUT)}): add its "
                             "layout there")
        return P()
    spec = tuple(PARAM_LAYOUT[kind])
    if len(shape) < len(spec):
        if in_state:
            return P()
        raise ValueError(f"parameter {where} has shape {tuple(shape)}, fewer axes than "
                         f"PARAM_LAYOUT[{kind!r}] = {PARAM_LAYOUT[kind]} (nanocode/sharding.py) "
                         "lays out")
    spec = (None,) * (len(shape) - len(spec)) + spec
    out = []
    for axis, (dim, name) in enumerate(zip(shape, spec)):
        axes = (name,) if isinstance(name, str) else tuple(name or ())
        n = math.prod(mesh.shape.get(a, 1) for a in axes)
        if n > 1 and dim % n:
            if not in_state:
                raise ValueError(
                    f"parameter {where} of shape {tuple(shape)}: axis {axis} (size {dim}) is "
                    f"sharded over mesh axis {name!r} of size {n} by PARAM_LAYOUT[{kind!r}] "
                    f"(nanocode/sharding.py), and {dim} is not a multiple of {n}: choose model "
                    f"sizes (n_embd, heads, head_dim, vocab) divisible by {n}, or a mesh whose "
                    f"{name!r} size divides {dim}")
            n = 1
        out.append(name if n > 1 else None)
    return P(*out) if any(out) else P()


def tree_shardings(tree, mesh: Mesh):
    """NamedShardings, from PARAM_LAYOUT, for a parameter tree or an optimizer state (leaf_spec)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: NamedSharding(mesh, leaf_spec(path, x.shape, mesh)), tree)
