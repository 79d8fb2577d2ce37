"""nanochat interop: a random nanochat-format state dict, a reference forward in torch written here
with nanochat's math, and our forward on the converted parameters must agree (max |diff| < 1e-4)."""

import json
import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from nanocode.gpt import forward  # noqa: E402
from train.import_nanochat import convert_state_dict, main  # noqa: E402

MODEL_CONFIG = dict(sequence_len=512, vocab_size=250, n_layer=4, n_head=4, n_kv_head=2, n_embd=64,
                    window_pattern="SSSL")


def has_ve(i, n_layer):
    return i % 2 == (n_layer - 1) % 2


def nanochat_state_dict(mc, seed=0, features=True):
    """Random weights in nanochat's names and (out, in) layout; padded vocab as nanochat pads it."""
    g = torch.Generator().manual_seed(seed)
    C, L, H, K = mc["n_embd"], mc["n_layer"], mc["n_head"], mc["n_kv_head"]
    D, V = C // H, -(-mc["vocab_size"] // 64) * 64
    s = 3 ** 0.5 * C ** -0.5

    def u(*shape, scale=s):
        return (torch.rand(*shape, generator=g) * 2 - 1) * scale

    sd = {"transformer.wte.weight": torch.randn(V, C, generator=g) * 0.8,
          "lm_head.weight": torch.randn(V, C, generator=g) * 0.05}
    for i in range(L):
        h = f"transformer.h.{i}."
        sd[h + "attn.c_q.weight"] = u(H * D, C)
        sd[h + "attn.c_k.weight"] = u(K * D, C)
        sd[h + "attn.c_v.weight"] = u(K * D, C)
        sd[h + "attn.c_proj.weight"] = u(C, H * D)
        sd[h + "mlp.c_fc.weight"] = u(4 * C, C)
        sd[h + "mlp.c_proj.weight"] = u(C, 4 * C, scale=s / 2)
        if features and has_ve(i, L):
            sd[h + "attn.ve_gate.weight"] = u(K, 12, scale=0.5)
            sd[f"value_embeds.{i}.weight"] = u(V, K * D)
    if features:
        sd["resid_lambdas"] = 1.1 + 0.05 * torch.randn(L, generator=g)
        sd["x0_lambdas"] = 0.1 + 0.05 * torch.randn(L, generator=g)
        sd["smear_gate.weight"] = u(1, 24, scale=0.5)
        sd["smear_lambda"] = torch.tensor([0.7])
        sd["backout_lambda"] = torch.tensor([0.3])
    return sd


def nanochat_forward(sd, mc, idx):
    """nanochat's GPT.forward (2026), re-derived with torch ops: the reference."""
    C, L, H, K = mc["n_embd"], mc["n_layer"], mc["n_head"], mc["n_kv_head"]
    D, (B, T) = C // H, idx.shape
    norm = lambda x: F.rms_norm(x, (x.size(-1),))  # noqa: E731
    inv_freq = 1.0 / (100000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    cos, sin = freqs.cos()[None, :, None, :], freqs.sin()[None, :, None, :]

    def rotary(x):
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos], 3)

    long = mc["sequence_len"]
    short = -(-long // 4 // 128) * 128
    pattern = mc.get("window_pattern", "L")
    windows = [long if pattern[i % len(pattern)] == "L" else short for i in range(L)]
    windows[-1] = long
    row, col = torch.arange(T)[:, None], torch.arange(T)[None, :]
    smear, lambdas = "smear_gate.weight" in sd, "resid_lambdas" in sd

    x = norm(sd["transformer.wte.weight"][idx])
    if smear:
        gate = sd["smear_lambda"] * torch.sigmoid(F.linear(x[:, 1:, :24], sd["smear_gate.weight"]))
        x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], dim=1)
    x0, x_backout = x, None
    for i in range(L):
        p = f"transformer.h.{i}."
        if lambdas:
            x = sd["resid_lambdas"][i] * x + sd["x0_lambdas"][i] * x0
        h = norm(x)
        q = F.linear(h, sd[p + "attn.c_q.weight"]).view(B, T, H, D)
        k = F.linear(h, sd[p + "attn.c_k.weight"]).view(B, T, K, D)
        v = F.linear(h, sd[p + "attn.c_v.weight"]).view(B, T, K, D)
        if f"value_embeds.{i}.weight" in sd:
            ve = sd[f"value_embeds.{i}.weight"][idx].view(B, T, K, D)
            gate = 3 * torch.sigmoid(F.linear(h[..., :12], sd[p + "attn.ve_gate.weight"]))
            v = v + gate.unsqueeze(-1) * ve
        q, k = rotary(q), rotary(k)
        q, k = norm(q) * 1.2, norm(k) * 1.2
        mask = (col <= row) & (row - col <= windows[i])
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=mask, enable_gqa=True)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), sd[p + "attn.c_proj.weight"])
        m = F.relu(F.linear(norm(x), sd[p + "mlp.c_fc.weight"])).square()
        x = x + F.linear(m, sd[p + "mlp.c_proj.weight"])
        if i == L // 2:
            x_backout = x
    if "backout_lambda" in sd:
        x = x - sd["backout_lambda"] * x_backout
    logits = F.linear(norm(x), sd["lm_head.weight"])[..., : mc["vocab_size"]].float()
    return 15 * torch.tanh(logits / 15)


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
