"""Model arithmetic (nanocode/config.py): parameter counts against nanochat's numbers, FLOPs and KV
bytes per token, the presets' shapes and errors, and counts that equal an initialised model's."""
import jax
import pytest

from nanocode.config import flops_per_token, kv_bytes_per_token, param_counts, preset
from nanocode.gpt import init_params
from tiny_models import tiny


def test_param_counts_match_nanochat_d12():
    c = param_counts(preset("d12"))
    assert c["wte"] == 25_165_824
    assert c["value_embeds"] == 150_994_944
    assert c["lm_head"] == 25_165_824
    assert c["transformer_matrices"] == 84_935_088
    assert c["scalars"] == 50
    assert c["total"] == 286_261_730
    assert c["scaling"] == 110_100_912


def test_d24_and_flops_and_kv_bytes():
    d24 = preset("d24")
    assert abs(param_counts(d24)["total"] / 1.384e9 - 1) < 1e-3
    assert abs(param_counts(d24)["scaling"] / 729.8e6 - 1) < 1e-3
    assert abs(flops_per_token(preset("d12")) / 7.6e8 - 1) < 0.01
    assert abs(flops_per_token(d24) / 4.8e9 - 1) < 0.01
    assert kv_bytes_per_token(d24) == 144 * 1024
    assert preset("d12").window_sizes() == [512, 512, 512, 2048] * 3


def test_presets_shapes():
    assert (preset("cpu-d4").n_embd, preset("cpu-d4").head_dim, preset("cpu-d4").padded_vocab) == (256, 64, 8192)
    v1 = preset("nanocode-v1")
    assert (v1.n_embd, v1.head_dim, v1.value_embeds, v1.smear, v1.backout, v1.lambdas) == (2048, 256, False, False, False, False)
    assert set(v1.window_sizes()) == {v1.sequence_len}
    assert abs(param_counts(preset("nanocode-v1-d20"))["total"] / 477e6 - 1) < 0.01
    with pytest.raises(ValueError, match="unknown preset"):
        preset("d13")
    with pytest.raises(ValueError, match="n_kv_head"):
        tiny(n_kv_head=3)


@pytest.mark.parametrize("kw", [{}, dict(n_layer=3, n_kv_head=4, vocab_size=250),
                                dict(value_embeds=False, lambdas=False, smear=False, backout=False)])
def test_counted_params_equal_initialised(kw):
    cfg = tiny(**kw)
    params = init_params(cfg, jax.random.PRNGKey(0))
    assert sum(x.size for x in jax.tree.leaves(params)) == param_counts(cfg)["total"]
    assert params["wte"].shape == (cfg.padded_vocab, cfg.n_embd)
