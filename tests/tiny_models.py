"""Tiny random models shared by the model and engine tests."""

import jax

from nanocode.config import GPTConfig
from nanocode.gpt import init_params


def tiny(**kw) -> GPTConfig:
    base = dict(n_layer=4, n_embd=64, n_head=4, n_kv_head=2, head_dim=16, vocab_size=300,
                sequence_len=256)
    return GPTConfig(**{**base, **kw})


def random_params(cfg, seed=0, scale=0.15):
    """Init, then overwrite every leaf with noise (std ~ 1/sqrt(fan_in), so activations have a
    realistic size) so no path is dead: output projections and smear/backout scalars start at
    zero, which would hide attention and cache bugs."""
    params = init_params(cfg, jax.random.PRNGKey(seed))
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    noisy = [(scale * jax.random.normal(k, x.shape)).astype(x.dtype) for k, x in zip(keys, leaves)]
    return jax.tree.unflatten(treedef, noisy)
