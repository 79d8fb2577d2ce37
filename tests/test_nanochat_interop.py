"""nanochat interop: a random nanochat-format state dict, a reference forward in torch written here
with nanochat's math, and our forward on the converted parameters must agree (max |diff| < 1e-4)."""

import json
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nanochat_reference import nanochat_forward, nanochat_state_dict  # noqa: E402
from nanocode.gpt import forward  # noqa: E402
from train.import_nanochat import convert_state_dict, main  # noqa: E402

MODEL_CONFIG = dict(sequence_len=512, vocab_size=250, n_layer=4, n_head=4, n_kv_head=2, n_embd=64,
                    window_pattern="SSSL")


@pytest.mark.parametrize("features", [True, False])
def test_converted_logits_match_nanochat(features):
    mc = MODEL_CONFIG if features else {**MODEL_CONFIG, "window_pattern": "L"}
    sd = nanochat_state_dict(mc, features=features)
    idx = torch.randint(0, mc["vocab_size"], (2, 256), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = nanochat_forward(sd, mc, idx).numpy()
    params, cfg = convert_state_dict({k: v.numpy() for k, v in sd.items()}, mc)
    assert (cfg.value_embeds, cfg.smear, cfg.lambdas, cfg.backout) == (features,) * 4
    ours, _ = jax.jit(forward, static_argnums=1)(params, cfg, jnp.asarray(idx.numpy()))
    assert ours.shape == ref.shape
    assert float(np.max(np.abs(np.asarray(ours) - ref))) < 1e-4
    assert float(np.std(ref)) > 0.1  # the comparison is not between two near-constant outputs


def test_unknown_parameter_is_an_error():
    sd = {k: v.numpy() for k, v in nanochat_state_dict(MODEL_CONFIG).items()}
    sd["mtp_heads.0.attn.c_q.weight"] = np.zeros((64, 64), np.float32)
    with pytest.raises(ValueError, match="does not know.*mtp_heads"):
        convert_state_dict(sd, MODEL_CONFIG)


def test_import_command_writes_a_loadable_checkpoint(tmp_path):
    from nanocode import checkpoint

    src = tmp_path / "nanochat" / "d4"
    src.mkdir(parents=True)
    sd = nanochat_state_dict(MODEL_CONFIG, seed=3)
    torch.save({"_orig_mod." + k: v for k, v in sd.items()}, src / "model_000040.pt")
    (src / "meta_000040.json").write_text(json.dumps({"step": 40, "model_config": MODEL_CONFIG}))
    out = tmp_path / "imported"
    args = SimpleNamespace(path=str(src), out=str(out), step=None, dtype="float32")
    assert main(args) == 0
    params, cfg, _, meta = checkpoint.load_params(out)
    assert meta["source"] == "nanochat" and cfg.n_layer == 4
    idx = torch.randint(0, 250, (1, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = nanochat_forward(sd, MODEL_CONFIG, idx).numpy()
    ours, _ = forward(params, cfg, jnp.asarray(idx.numpy()))
    assert float(np.max(np.abs(np.asarray(ours) - ref))) < 1e-4
    missing = SimpleNamespace(path=str(tmp_path / "nope"), out=None, step=None, dtype=None)
    assert main(missing) == 2


def test_import_command_reports_bad_meta(tmp_path, capsys):
    src = tmp_path / "ckpt"
    src.mkdir()
    torch.save(nanochat_state_dict(MODEL_CONFIG), src / "model_000001.pt")
    (src / "meta_000001.json").write_text(json.dumps({"step": 1}))
    args = SimpleNamespace(path=str(src), out=str(tmp_path / "out"), step=None, dtype=None)
    assert main(args) == 2
    assert "no model_config" in capsys.readouterr().err
    assert main(SimpleNamespace(path=str(src), out=None, step=7, dtype=None)) == 2
    assert "step 7" in capsys.readouterr().err
