"""Which model the agent runs: `--model PATH|TAG`, else the default model embedded in the package.

PATH: a checkpoint directory (step folders inside, as `train` writes them). TAG: a run name under
$NANOCODE_HOME/runs/<tag>/checkpoints (`train base --run TAG` etc.). No --model: the package's
`nanocode/default_model/`: the cpu speedrun's final model (checkpoints/<step>: bf16 params +
tokenizer, ~15 MB; MODEL_CARD.md; evals/), shipped inside the package.
Resolving a model imports nothing heavy; loading it (build_agent) imports jax.
Every failure is a ModelError whose message is one line; the CLI prints it, no traceback.
"""
from __future__ import annotations

from pathlib import Path


class ModelError(Exception):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def default_model_dir() -> Path:
    from nanocode.common import DEFAULT_MODEL
    return DEFAULT_MODEL


NO_DEFAULT = (
    "error: this nanocode install has no default model (nothing at {path}); train one with "
    "`train speedrun --preset cpu` (data to agent-ready checkpoint in one command) or "
    "`train base` then `train sft`, then run `nanocode --model <run tag or checkpoint dir>`"
)


def resolve_model(spec: str | None) -> Path:
    """The checkpoint directory for --model (None: the embedded default)."""
    from nanocode.common import find_checkpoints
    if spec is None:
        path = default_model_dir()
        if not (path / "checkpoints").is_dir():
            raise ModelError(NO_DEFAULT.format(path=path), code=2)
        spec = str(path)
    try:
        return find_checkpoints(spec)[0]
    except FileNotFoundError as e:
        raise ModelError(f"error: {e}", code=2) from None


def load_engine(path, dtype=None, max_len: int | None = None):
    """Engine.from_checkpoint with every failure as a one-line ModelError."""
    from nanocode.engine import Engine
    try:
        engine = Engine.from_checkpoint(path, dtype=dtype, max_len=max_len)
    except Exception as e:  # noqa: BLE001 - orbax and friends raise many kinds
        text = " ".join(str(e).split()) or type(e).__name__
        raise ModelError(f"error: cannot load the model at {path}: {text}") from e
    if engine.tokenizer is None:
        raise ModelError(f"error: the checkpoint at {path} has no tokenizer; save it with one "
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
        raise ModelError(f"error: {e}", 2) from None
    agent.refresh_system_prompt()  # a resumed session: today's AGENTS.md, folder and mode
    agent.meta["model"] = str(model_dir)
    agent.store = store or SessionStore(root, agent.meta["id"])
    return agent
