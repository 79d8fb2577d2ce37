"""`train import-nanochat PATH`: turn a nanochat PyTorch checkpoint (model_<step>.pt + meta_<step>.json)
into a nanocode checkpoint. nanochat's GPT is our default architecture, so this is a renaming and a
transpose ((out, in) -> (in, out)) with no change of math: tests/test_nanochat_interop.py checks that
the logits of a converted model match a torch forward written with nanochat's math (< 1e-4, fp32).

Feature switches are read off the state dict (older nanochat checkpoints have no value embeddings,
lambdas, smear or backout) and the window pattern off meta's model_config ("L" when absent).
Rotary base 100000 and the 1.2 QK scale are nanochat-current; pass a different config to convert
older ones. torch is needed only here (`pip install nanocode[nanochat]`), and main imports it:
convert_state_dict works on numpy arrays without it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from nanocode import checkpoint
from nanocode.common import nanocode_home
from nanocode.config import GPTConfig


def config_from_nanochat(model_config: dict, keys) -> GPTConfig:
    """Our config for a nanochat model_config dict and the state-dict key names."""
    keys = set(keys)
    n_embd, n_head = model_config["n_embd"], model_config["n_head"]
    return GPTConfig(
        n_layer=model_config["n_layer"], n_embd=n_embd, n_head=n_head,
        n_kv_head=model_config.get("n_kv_head", n_head), head_dim=n_embd // n_head,
        vocab_size=model_config["vocab_size"], sequence_len=model_config["sequence_len"],
        window_pattern=model_config.get("window_pattern", "L"),
        value_embeds=any(k.startswith("value_embeds.") for k in keys),
        lambdas="resid_lambdas" in keys, smear="smear_gate.weight" in keys,
        backout="backout_lambda" in keys)


def convert_state_dict(state: dict, model_config: dict) -> tuple[dict, GPTConfig]:
    """nanochat state dict (name -> array-like, PyTorch (out, in) layout) -> (params, config)."""
    state = {re.sub(r"^_orig_mod\.", "", k): np.asarray(v, dtype=np.float32) for k, v in state.items()}
    cfg = config_from_nanochat(model_config, state)
    used = set()

    def take(name, transpose=False):
        if name not in state:
            raise ValueError(f"nanochat checkpoint lacks {name!r}: not a nanochat GPT state dict?")
        used.add(name)
        return state[name].T if transpose else state[name]

    blocks = []
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        attn = {n: take(h + f"attn.{n}.weight", True) for n in ("c_q", "c_k", "c_v", "c_proj")}
        if cfg.has_value_embed(i):
            attn["ve_gate"] = take(h + "attn.ve_gate.weight", True)
        mlp = {n: take(h + f"mlp.{n}.weight", True) for n in ("c_fc", "c_proj")}
        blocks.append({"attn": attn, "mlp": mlp})
    params = {"wte": take("transformer.wte.weight"), "blocks": blocks,
              "lm_head": take("lm_head.weight", True)}
    if cfg.value_embeds:
        params["value_embeds"] = {str(i): take(f"value_embeds.{i}.weight")
                                  for i in range(cfg.n_layer) if cfg.has_value_embed(i)}
    if cfg.lambdas:
        params["resid_lambdas"], params["x0_lambdas"] = take("resid_lambdas"), take("x0_lambdas")
    if cfg.smear:
        params["smear_gate"] = take("smear_gate.weight", True)  # (1, 24) -> (24, 1)
        params["smear_lambda"] = take("smear_lambda").reshape(())
    if cfg.backout:
        params["backout_lambda"] = take("backout_lambda").reshape(())
    unused = sorted(set(state) - used)
    if unused:  # e.g. multi-token-prediction heads of a nanochat fork: say so rather than drop silently
        raise ValueError(f"nanochat checkpoint has parameters nanocode does not know: {unused[:5]}"
                         f"{' ...' if len(unused) > 5 else ''}")
    want = {"wte": (cfg.padded_vocab, cfg.n_embd), "lm_head": (cfg.n_embd, cfg.padded_vocab)}
    for name, shape in want.items():
        if params[name].shape != shape:
            raise ValueError(f"{name}: checkpoint has {params[name].shape}, config implies {shape}")
    return params, cfg


def find_nanochat_files(path: Path, step: int | None) -> tuple[Path, Path]:
    """(model_<step>.pt, meta_<step>.json) in a nanochat checkpoint dir (latest step by default),
    or beside a model_*.pt given directly."""
    if path.is_file():
        model = path
    else:
        if not path.is_dir():
            raise FileNotFoundError(f"no nanochat checkpoint at {path}: pass the directory holding "
                                    "model_<step>.pt and meta_<step>.json")
        models = sorted(path.glob("model_*.pt"))
        if step is not None:
            models = [m for m in models if int(m.stem.split("_")[1]) == step]
        if not models:
            what = f"step {step}" if step is not None else "any step"
            raise FileNotFoundError(f"no model_*.pt for {what} in {path}")
        model = models[-1]
    meta = model.with_name(model.name.replace("model_", "meta_").replace(".pt", ".json"))
    if not meta.is_file():
        raise FileNotFoundError(f"{meta} is missing: nanochat writes it beside {model.name}")
    return model, meta


def main(args) -> int:
    """CLI entry: args.path, args.out (default: <NANOCODE_HOME>/base/nanochat-<tag>), args.step,
    args.dtype (float32 | bfloat16)."""
    try:
        import torch
    except ImportError:
        print("error: train import-nanochat needs torch: pip install 'nanocode[nanochat]'", file=sys.stderr)
        return 2
    try:
        model_path, meta_path = find_nanochat_files(Path(args.path).expanduser(), args.step)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        meta = json.loads(meta_path.read_text())
        if "model_config" not in meta:
            raise ValueError(f"{meta_path} has no model_config: not a nanochat meta file")
        state = torch.load(model_path, map_location="cpu", weights_only=True)
        state = {k: v.float().numpy() for k, v in state.items()}
        params, cfg = convert_state_dict(state, meta["model_config"])
    except (ValueError, KeyError, RuntimeError) as e:  # bad JSON, bad config, unreadable .pt
        print(f"error: cannot import {model_path}: {e}", file=sys.stderr)
        return 2
    dtype = jnp.dtype(args.dtype or "float32")
    params = jax.tree.map(lambda x: jnp.asarray(x, dtype), params)
    step = int(meta.get("step", model_path.stem.split("_")[1]))
    out = Path(args.out) if args.out else nanocode_home() / "base" / f"nanochat-{model_path.parent.name}"
    checkpoint.save(out, step, params, config=cfg,
                    metadata={"source": "nanochat", "from": str(model_path), "nanochat_meta": meta})
    print(f"imported {model_path} (step {step}, {cfg.n_layer} layers, width {cfg.n_embd}) -> {out}")
    return 0
