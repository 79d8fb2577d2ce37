"""A nanochat GPT written with torch ops (nanochat's 2026 math), with nanochat's parameter names
and (out, in) layout: the reference that tests/test_nanochat_interop.py compares our logits with
and that bench/train_throughput.py times against in the same run. Needs torch."""

import torch

F = torch.nn.functional


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
        qkv = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if windows[i] >= T:  # nanochat's SDPA path: the causal kernel, no mask tensor
            y = F.scaled_dot_product_attention(*qkv, is_causal=True, enable_gqa=True)
        else:
            mask = (col <= row) & (row - col <= windows[i])
            y = F.scaled_dot_product_attention(*qkv, attn_mask=mask, enable_gqa=True)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), sd[p + "attn.c_proj.weight"])
        m = F.relu(F.linear(norm(x), sd[p + "mlp.c_fc.weight"])).square()
        x = x + F.linear(m, sd[p + "mlp.c_proj.weight"])
        if i == L // 2:
            x_backout = x
    if "backout_lambda" in sd:
        x = x - sd["backout_lambda"] * x_backout
    logits = F.linear(norm(x), sd["lm_head.weight"])[..., : mc["vocab_size"]].float()
    return 15 * torch.tanh(logits / 15)


