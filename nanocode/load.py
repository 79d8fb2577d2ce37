"""The one way a trained model is loaded: `--model PATH|TAG` (None: the model shipped in the
package) -> its newest complete checkpoint (or `step`), checked: a tokenizer saved with it whose
vocabulary fits the config's. Every failure is one line, a nanocode.common.ModelError. The agent,
serve, the evals, rollouts and bench load through here: `load_model` where the params are used
directly (scoring, batched generation), `load_engine` for the KV-cached engine (sampling).

The checkpoint, tokenizer and engine modules (jax, orbax, numpy) are imported inside the two
functions: the agent's and `evals`' entry points import this module before a model is needed."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from nanocode.common import ModelError, resolve_model


class LoadedModel(NamedTuple):
    params: dict
    cfg: object  # nanocode.config.GPTConfig
    tokenizer: object  # nanocode.tokenizer.Tokenizer
    meta: dict  # what the checkpoint says about itself (stage, step, ...)
    ckpt: Path  # the directory holding the step folders
    tag: str  # the run's name, for result paths
    step: int


def load_model(spec: str | Path | None, step: int | None = None, dtype=None) -> LoadedModel:
    """The checkpoint `spec` names (nanocode.common.resolve_model) at `step` (None: the newest
    complete one), params in `dtype` (None: as stored)."""
    from nanocode.checkpoint import latest_step, load_params
    from nanocode.tokenizer import Tokenizer
    ckpt, tag = resolve_model(None if spec is None else str(spec))
    step = latest_step(ckpt) if step is None else step
    if step is None:
        raise ModelError(f"no complete checkpoint in {ckpt}; train one with `train base`")
    try:
        params, cfg, tok, meta = load_params(ckpt, step, dtype=dtype)
    except Exception as e:  # noqa: BLE001 - orbax and friends raise many kinds
        text = " ".join(str(e).split()) or type(e).__name__
        raise ModelError(f"cannot load the model at {ckpt}/{step}: {text}") from e
    if not tok:
        raise ModelError(f"the checkpoint at {ckpt}/{step} has no tokenizer; save it with one "
                         "(nanocode.checkpoint.save(..., tokenizer=...))")
    tokenizer = Tokenizer.from_dict(tok)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ModelError(f"the checkpoint at {ckpt}/{step} has a tokenizer of {tokenizer.vocab_size} "
                         f"tokens for a model of {cfg.vocab_size}: they were not trained together")
    return LoadedModel(params, cfg, tokenizer, meta, ckpt, tag, step)


def load_engine(spec: str | Path | None, step: int | None = None, dtype=None, max_len: int | None = None,
                buckets=None):
    """nanocode.engine.Engine on `load_model(spec, step, dtype)`; max_len: its context (None: the
    config's sequence length); buckets: its prefill chunk sizes (None: the engine's default)."""
    from nanocode.engine import Engine
    m = load_model(spec, step, dtype)
    return Engine(m.params, m.cfg, m.tokenizer, dtype=dtype, max_len=max_len, buckets=buckets)
