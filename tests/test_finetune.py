"""What sft and dpo share (train/finetune.py): the optimizer's warmup, checked alone. Loading the
start checkpoint and the data sources runs end to end in tests/test_sft.py and tests/test_dpo.py."""
import numpy as np

from tiny_models import random_params, tiny


def test_warmup_steps_scale_the_first_update():
    """--warmup-steps W: the first step moves every weight 1/W as far as with no warmup."""
    import jax
    import jax.numpy as jnp

    from train.finetune import sft_optimizer

    cfg = tiny(vocab_size=64, sequence_len=32)
    params = random_params(cfg, 0)
    grads = jax.tree.map(lambda p: jnp.asarray(np.random.default_rng(1).normal(size=p.shape), p.dtype),
                         params)

    def first_update(warmup: int):
        opt = sft_optimizer(cfg, params, steps=100, batch_tokens=1024, lr_scale=1.0, warmup_steps=warmup)
        return opt.update(grads, opt.init(params), params)[0]

    plain, warm = first_update(0), first_update(10)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(warm)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a) / 10, rtol=1e-4, atol=1e-9)
    assert any(float(jnp.abs(a).max()) > 0 for a in jax.tree.leaves(plain))
