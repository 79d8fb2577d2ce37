"""Which model the agent runs: `--model PATH|TAG`, else the default model embedded in the package.

PATH: a checkpoint directory (step folders inside, as `train` writes them). TAG: a run name under
$NANOCODE_HOME/runs/<tag>/checkpoints (`train base --run TAG` etc.). No --model: the package's
`nanocode/default_model/`: the cpu speedrun's final model (checkpoints/<step>: bf16 params +
tokenizer, ~15 MB; MODEL_CARD.md; evals/), shipped inside the package.
Resolving a model imports nothing heavy; loading it (build_agent) imports jax. `--base-url URL`
runs a model behind any OpenAI-compatible server instead (agent/remote.py); --model then names
the server's model.
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


def remote_sampler(args):
    """The sampler for `--base-url`: the server is asked for its models first, so a wrong URL or
    model name is a one-line ModelError at start-up, not a failed first turn."""
    from agent.remote import RemoteSampler
    from agent.sampler import SamplerError
    try:
        return RemoteSampler(args.base_url, args.model, temperature=args.temperature, seed=args.seed,
                             max_tokens=args.max_tokens, context=args.context)
    except SamplerError as e:
        raise ModelError(str(e)) from None


def build_agent(args, root, model_dir, messages=None, meta=None, store=None):
    """The Agent for the CLI's flags: our engine from `model_dir` (imports jax; the compilation
    cache is enabled first), or with --base-url a RemoteSampler. Every failure is a one-line
    ModelError; the TUI calls this on its loader thread."""
    if args.base_url:
        model, name = remote_sampler(args), f"{args.base_url} {args.model or ''}".strip()
    else:
        from nanocode.common import enable_compilation_cache
        enable_compilation_cache()
        model, name = load_engine(model_dir), str(model_dir)
    from agent.driver import Agent
    from agent.sessions import SessionStore
    from tools.permissions import SettingsError
    try:
        agent = Agent(model, root, mode=args.mode, messages=messages, meta=meta,
                      temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                      max_tokens=args.max_tokens, max_steps=args.max_steps,
                      sandbox=args.sandbox, network=args.network)
    except SettingsError as e:
        raise ModelError(str(e), 2) from None
    agent.refresh_system_prompt()  # a resumed session: today's AGENTS.md, folder and mode
    agent.meta["model"] = name if not args.base_url else f"{args.base_url} {agent.sampler.model}"
    agent.conv.store = store or SessionStore(root, agent.meta["id"])
    return agent
