"""Which model the agent runs: `--model PATH|TAG`, else the default model embedded in the package.

PATH: a checkpoint directory (step folders inside, as `train` writes them). TAG: a run name under
$NANOCODE_HOME/runs/<tag>/checkpoints (`train base --run TAG` etc.). No --model: the package's
`nanocode/default_model/`: the cpu speedrun's final model (checkpoints/<step>: bf16 params +
tokenizer, ~15 MB; MODEL_CARD.md; evals/), shipped inside the package.
Resolving a model imports nothing heavy; loading it (build_agent) imports jax.
Every failure is a nanocode.common.ModelError (the evals' too) whose message is one line; the CLI
prints it after `error: `, no traceback.
"""
from __future__ import annotations

from nanocode.common import ModelError, resolve_model  # noqa: F401 - the agent's names for them


def load_engine(path, dtype=None, max_len: int | None = None):
    """Engine.from_checkpoint with every failure as a one-line ModelError."""
    from nanocode.engine import Engine
    try:
        engine = Engine.from_checkpoint(path, dtype=dtype, max_len=max_len)
    except Exception as e:  # noqa: BLE001 - orbax and friends raise many kinds
        text = " ".join(str(e).split()) or type(e).__name__
        raise ModelError(f"cannot load the model at {path}: {text}") from e
    if engine.tokenizer is None:
        raise ModelError(f"the checkpoint at {path} has no tokenizer; save it with one "
                         "(nanocode.checkpoint.save(..., tokenizer=...))")
    return engine


def build_agent(args, root, model_dir, messages=None, meta=None, store=None):
    """The Agent for the CLI's flags (imports jax; the compilation cache is enabled first). Every
    failure is a one-line ModelError; the TUI calls this on its loader thread."""
    from nanocode.common import enable_compilation_cache
    enable_compilation_cache()
    engine = load_engine(model_dir)
    from agent.loop import Agent
    from agent.sessions import SessionStore
    from tools.permissions import SettingsError
    try:
        agent = Agent(engine, root, mode=args.mode if args.mode_given else None, messages=messages,
                      meta=meta, temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                      max_tokens=args.max_tokens, max_steps=args.max_steps,
                      sandbox=args.sandbox, network=args.network)
    except SettingsError as e:
        raise ModelError(str(e), 2) from None
    agent.refresh_system_prompt()  # a resumed session: today's AGENTS.md, folder and mode
    agent.meta["model"] = str(model_dir)
    agent.store = store or SessionStore(root, agent.meta["id"])
    return agent
