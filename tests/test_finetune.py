"""What sft and dpo share (train/finetune.py): the optimizer's warmup, checked alone. Loading the
start checkpoint and the data sources runs end to end in tests/test_sft.py and tests/test_dpo.py."""
import numpy as np
import pytest

from tiny_models import random_params, tiny


@pytest.mark.slow  # the suite's time (docs/LOG.md, sixth session)
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


def test_special_tokens_pinned_at_the_softcap_floor_are_unpinned_and_trained_ones_kept():
    """A base pushes the chat tokens' head logits to the softcap's floor, where fine-tuning cannot
    lift them; sft starts those columns from the ordinary tokens' mean. A token whose logit is in
    the live range (a trained one), and every ordinary column, are left as they were."""
    import jax.numpy as jnp

    from nanocode.gpt import forward, hidden
    from tiny_models import tiny_tokenizer
    from train.finetune import PINNED, unpin_special_heads

    tok = tiny_tokenizer(["def add(a, b):\n    return a + b\n" * 20, "the tests pass now\n" * 20], 300)
    cfg = tiny(vocab_size=tok.vocab_size)
    params = random_params(cfg)
    tcs, end = tok.encode_special("<|tool_call_start|>"), tok.encode_special("<|assistant_end|>")
    inputs = np.array(tok.encode("def add(a, b): the tests pass now " * 6)[:64], np.int32)
    targets = np.full(len(inputs), -1, np.int32)
    targets[10::7], targets[13::7] = tcs, end
    h = np.asarray(hidden(params, cfg, jnp.asarray(inputs)[None])[0][0], np.float32)  # (T, C)
    direction = h.mean(0) / np.linalg.norm(h.mean(0))
    head = np.array(params["lm_head"], np.float32)
    head[:, tcs] = -1000 * direction  # pinned: its logit at the floor wherever the trunk points that way
    params = {**params, "lm_head": jnp.asarray(head)}

    def logit(p, i):
        return np.median(np.asarray(forward(p, cfg, jnp.asarray(inputs)[None])[0][0])[targets == i, i])

    assert logit(params, tcs) < -PINNED * cfg.softcap < logit(params, end)
    said = []
    out = unpin_special_heads(params, cfg, tok, [(inputs, targets)], log=said.append)
    assert logit(out, tcs) > -PINNED * cfg.softcap and "<|tool_call_start|>" in said[0]
    new, old = np.asarray(out["lm_head"]), np.asarray(params["lm_head"])
    changed = np.flatnonzero(np.any(new != old, axis=0))
    assert list(changed) == [tcs]  # <|assistant_end|> (live) and every ordinary column untouched
    assert unpin_special_heads(out, cfg, tok, [(inputs, targets)]) is out  # nothing pinned: unchanged
