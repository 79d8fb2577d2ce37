"""Model configuration: one frozen dataclass, presets by depth, and the arithmetic that scaling,
MFU and the KV cache budget need (parameter counts by group, FLOPs per token, KV bytes per token).

Everything is derived from one number, depth: model_dim = ceil(depth * aspect / head_dim) * head_dim.
nanochat's default (aspect 64, head_dim 128, vocab 32768, seq 2048) gives d12 = 286.3M parameters
(151.0M of them value embeddings, 110.1M "scaling" parameters, 7.6e8 FLOPs/token) and d24 = 1.384B.
The CPU presets (`cpu-d2` .. `cpu-d8`) use head_dim 64, vocab 8192 and seq 512 so a laptop can train
them; `nanocode-v1*` are the original nanocode models (no value embeddings, windows, lambdas, smear
or backout; head_dim 256). Counts are computed here from shapes alone, so they are free for d32.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

VE_GATE_CHANNELS = 12  # the value-embedding gate reads the first 12 channels of its input
SMEAR_CHANNELS = 24  # the smear gate reads the first 24 channels of the embedding
REMAT_POLICIES = ("none", "block", "dots")
VOCAB_PAD = 64  # vocab is padded to a multiple of this inside the model; logits are cropped back


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int = 12
    n_embd: int = 768
    n_head: int = 6
    n_kv_head: int = 6  # < n_head turns on grouped-query attention
    head_dim: int = 128
    vocab_size: int = 32768
    sequence_len: int = 2048
    mlp_ratio: int = 4
    # architecture switches (all on = nanochat 2026; all off = original nanocode)
    value_embeds: bool = True  # ResFormer value embeddings on alternate layers (last layer always)
    window_pattern: str = "SSSL"  # tiled over layers, last layer always L; "L" = full attention
    lambdas: bool = True  # per-layer resid/x0 scalars mixing the embedding back in
    smear: bool = True  # cheap bigram: mix the previous token's embedding into the current one
    backout: bool = True  # subtract the mid-network residual before the head
    rope_base: float = 100_000.0
    qk_scale: float = 1.2  # q and k are multiplied by this after QK-norm
    softcap: float = 15.0  # logits = softcap * tanh(logits / softcap)
    # numerics and kernels
    compute_dtype: str = "float32"  # "bfloat16" on accelerators
    embed_dtype: str = "float32"  # storage dtype of wte and value embeddings
    attn_impl: str = "auto"  # auto | xla | einsum | cudnn | splash
    remat: str = "none"  # none | block | dots: what the backward pass recomputes (see gpt.hidden)

    def __post_init__(self):
        problems = []
        if self.n_layer < 1:
            problems.append(f"n_layer={self.n_layer} must be >= 1")
        if self.n_head * self.head_dim != self.n_embd:
            problems.append(f"n_head*head_dim={self.n_head * self.head_dim} != n_embd={self.n_embd}")
        if self.n_kv_head < 1 or self.n_head % self.n_kv_head:
            problems.append(f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head}")
        if not self.window_pattern or set(self.window_pattern.upper()) - set("SL"):
            problems.append(f"window_pattern={self.window_pattern!r} may contain only S and L")
        if self.head_dim % 2:
            problems.append(f"head_dim={self.head_dim} must be even for rotary embeddings")
        if self.smear and self.n_embd < SMEAR_CHANNELS:
            problems.append(f"smear needs n_embd >= {SMEAR_CHANNELS}")
        if self.value_embeds and self.n_embd < VE_GATE_CHANNELS:
            problems.append(f"value embeddings need n_embd >= {VE_GATE_CHANNELS}")
        if self.attn_impl not in ("auto", "xla", "einsum", "cudnn", "splash"):
            problems.append(f"attn_impl={self.attn_impl!r} is not auto|xla|einsum|cudnn|splash")
        if self.remat not in REMAT_POLICIES:
            problems.append(f"remat={self.remat!r} is not {'|'.join(REMAT_POLICIES)}")
        if problems:
            raise ValueError("invalid GPTConfig: " + "; ".join(problems))

    # ---- derived shapes -------------------------------------------------------------------------
    @property
    def padded_vocab(self) -> int:
        return -(-self.vocab_size // VOCAB_PAD) * VOCAB_PAD

    @property
    def mlp_dim(self) -> int:
        return self.mlp_ratio * self.n_embd

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    def has_value_embed(self, layer: int) -> bool:
        """Alternate layers, counted back from the last one (which always has one)."""
        return self.value_embeds and layer % 2 == (self.n_layer - 1) % 2

    def window_sizes(self, seq_len: int | None = None) -> list[int]:
        """Per-layer attention window W (a query at i sees keys i-W .. i). L = seq_len,
        S = ceil(seq_len / 4 / 128) * 128 (a multiple of the flash-attention tile)."""
        long = seq_len or self.sequence_len
        short = -(-long // 4 // 128) * 128
        pattern = self.window_pattern.upper()
        sizes = [long if pattern[i % len(pattern)] == "L" else short for i in range(self.n_layer)]
        sizes[-1] = long
        return sizes

    def replace(self, **changes) -> GPTConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {unknown}: checkpoint from a newer nanocode?")
        return cls(**d)


# ---- presets --------------------------------------------------------------------------------------
def config_for_depth(depth: int, aspect: int = 64, head_dim: int = 128, vocab_size: int = 32768,
                     sequence_len: int = 2048, **overrides) -> GPTConfig:
    """nanochat's sizing rule: width from depth, rounded up to whole heads."""
    n_embd = math.ceil(depth * aspect / head_dim) * head_dim
    n_head = n_embd // head_dim
    return GPTConfig(n_layer=depth, n_embd=n_embd, n_head=n_head, n_kv_head=n_head, head_dim=head_dim,
                     vocab_size=vocab_size, sequence_len=sequence_len, **overrides)


_NANOCODE_V1 = dict(value_embeds=False, window_pattern="L", lambdas=False, smear=False, backout=False)


def _presets() -> dict:
    presets = {f"d{d}": dict(depth=d) for d in range(2, 33, 2)}
    for d in range(2, 9):
        presets[f"cpu-d{d}"] = dict(depth=d, head_dim=64, vocab_size=8192, sequence_len=512)
    # The original nanocode (v1) shapes: head_dim 256, seq 4096, and d24 at width 2048 (aspect 85,
    # 1.34B params), full attention and none of value embeddings, lambdas, smear or backout.
    presets["nanocode-v1-d12"] = dict(depth=12, head_dim=256, sequence_len=4096, **_NANOCODE_V1)
    presets["nanocode-v1-d20"] = dict(depth=20, head_dim=256, sequence_len=4096, **_NANOCODE_V1)
    presets["nanocode-v1"] = dict(depth=24, aspect=85, head_dim=256, sequence_len=4096,
                                  **_NANOCODE_V1)
    return presets


PRESETS = _presets()


def preset(name: str, **overrides) -> GPTConfig:
    """A named preset (see PRESETS), with any GPTConfig/config_for_depth field overridden."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return config_for_depth(**{**PRESETS[name], **overrides})


# ---- counting -------------------------------------------------------------------------------------
def param_counts(cfg: GPTConfig) -> dict[str, int]:
    """Parameters by group (the optimizer's groups), plus total and scaling (block matrices + lm_head).
    Counted from shapes, so it matches `init_params` exactly (tested) without allocating anything."""
    C, V = cfg.n_embd, cfg.padded_vocab
    per_block = C * cfg.n_head * cfg.head_dim + 2 * C * cfg.kv_dim + cfg.n_head * cfg.head_dim * C
    per_block += 2 * C * cfg.mlp_dim
    n_ve = sum(cfg.has_value_embed(i) for i in range(cfg.n_layer))
    counts = {
        "wte": V * C,
        "value_embeds": n_ve * V * cfg.kv_dim,
        "lm_head": C * V,
        "transformer_matrices": cfg.n_layer * per_block + n_ve * VE_GATE_CHANNELS * cfg.n_kv_head,
        "scalars": (2 * cfg.n_layer if cfg.lambdas else 0) + (SMEAR_CHANNELS + 1 if cfg.smear else 0)
        + (1 if cfg.backout else 0),
    }
    counts["total"] = sum(counts.values())
    counts["scaling"] = counts["transformer_matrices"] + counts["lm_head"]
    return counts


def flops_per_token(cfg: GPTConfig, seq_len: int | None = None) -> int:
    """Training FLOPs per token (forward + backward): 6 per matmul parameter (blocks, lm_head, smear
    gate) plus 12*H*D*min(W, T) per layer for attention scores and values."""
    T = seq_len or cfg.sequence_len
    matmul = param_counts(cfg)["scaling"] + (SMEAR_CHANNELS if cfg.smear else 0)
    attn = sum(12 * cfg.n_head * cfg.head_dim * min(w, T) for w in cfg.window_sizes(T))
    return 6 * matmul + attn


def kv_bytes_per_token(cfg: GPTConfig, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache one token occupies across all layers (bf16 by default)."""
    return cfg.n_layer * 2 * cfg.kv_dim * dtype_bytes
