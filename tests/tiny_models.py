"""Tiny random models, tokenizers and git repos shared by the tests."""

import re

import jax

from nanocode.config import GPTConfig
from nanocode.gpt import init_params

# pytest's "1 passed in 0.03s": the only bytes two runs of the same synth task or rollout differ in
PYTEST_DURATION = re.compile(r"\d+\.\d+s\b")


def untimed(text: str) -> str:
    """`text` with every pytest duration pinned to 0.00s."""
    return PYTEST_DURATION.sub("0.00s", text)


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


def tiny_tokenizer(texts, vocab_size: int):
    """A real BPE tokenizer trained on a few texts (rustbpe warns about the tiny corpus: hushed)."""
    import warnings

    from nanocode.tokenizer import train_tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train_tokenizer(iter(texts), vocab_size)


def commit_all(root) -> None:
    """`git init` + commit everything in root, as a throwaway test identity."""
    import subprocess
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(git + cmd, check=True)


def next_token_mask(seq, out, vocab_size: int):
    """The mask that lets only the next token of `seq` through after `out`; None (free) once
    `seq` is written."""
    import numpy as np
    if len(out) >= len(seq):
        return None
    m = np.zeros(vocab_size, bool)
    m[seq[len(out)]] = True
    return m


def forced_replies(replies, vocab_size: int):
    """An EngineSampler extra_mask that lets only the next scripted token through: reply k (a
    token list) for the k-th generation, the last one repeated."""
    at = [-1]

    def mask(out):
        at[0] += not out
        return next_token_mask(replies[min(at[0], len(replies) - 1)], out, vocab_size)
    return mask
