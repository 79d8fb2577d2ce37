"""Which model the agent runs: `--model PATH|TAG`, else the default model embedded in the package.

PATH: a checkpoint directory (step folders inside, as `train` writes them). TAG: a run name under
$NANOCODE_HOME/runs/<tag>/checkpoints (`train base --run TAG` etc.). No --model: the package's
`nanocode/default_model/`: the v5e speedrun's model (checkpoints/<step>: bf16 params +
tokenizer, ~41 MB; MODEL_CARD.md; evals/), shipped inside the package.
Resolving a model imports nothing heavy; loading it (build_agent, nanocode/load.py) imports jax. `--base-url URL`
runs a model behind any OpenAI-compatible server instead (agent/samplers/remote.py); --model then names
the server's model.
Every failure is a nanocode.common.ModelError (the evals' too) whose message is one line; the CLI
prints it after `error: `, no traceback.
"""
from __future__ import annotations

from dataclasses import dataclass

from agent.loop.driver import Agent
from agent.mcp_hub import McpHub
from agent.samplers.sampler import SamplerError
from agent.sessions import SessionStore
from agent.settings import SamplerSettings, TurnSettings
from nanocode.common import ModelError, enable_compilation_cache, resolve_model
from nanocode.load import load_engine
from tools.permissions import Policy, SettingsError


@dataclass(frozen=True)
class AgentOptions:
    """What the command line chooses for an agent (agent/cli.agent_options reads the flags).
    model: a checkpoint directory or run tag (None: the default model), or with base_url the
    server's model name (None: the first it lists); context: the server's context when it does
    not say it; mode None: the settings files decide (ask when none does); trust_settings: the
    project's .nanocode settings apply even if the user never accepted them (--trust-settings);
    sampling and turn: the agent's settings (agent/settings.py)."""
    model: str | None = None
    base_url: str | None = None
    context: int | None = None
    mode: str | None = None
    trust_settings: bool = False
    sampling: SamplerSettings = SamplerSettings()
    turn: TurnSettings = TurnSettings()


def load_sampler(o: AgentOptions, root, model_dir):
    """The agent's model: our engine from `model_dir` (imports jax; the compilation cache is
    enabled first), or with base_url a RemoteSampler, asked for its models first so a wrong URL
    or model name is a one-line ModelError at start-up, not a failed first turn. Returns
    (sampler, the name the session records)."""
    if o.base_url:
        from agent.samplers.remote import RemoteSampler
        try:
            sampler = RemoteSampler(o.base_url, o.model, o.sampling, context=o.context)
        except SamplerError as e:  # the model server failed: exit status 6, as for a turn
            raise ModelError(str(e), code=6) from None
        return sampler, f"{o.base_url} {sampler.model}"
    from agent.samplers.engine import EngineSampler
    enable_compilation_cache()
    return EngineSampler(load_engine(model_dir), root, o.sampling), str(model_dir)


@dataclass
class PoolModel:
    """A pool worker's model (evals agent, train rollouts), loaded once per process by the pool's
    initializer: our engine on a checkpoint, a RemoteSampler on a server (forked per run), or
    neither (an oracle policy). `error` keeps the ModelError that stopped the load for the task
    runner to raise (`check`), so the parent says it: an initializer that raises would have the
    pool start workers forever."""
    engine: object = None
    remote: object = None
    error: ModelError | None = None

    @classmethod
    def load(cls, model: str | None, step: int | None = None, server: AgentOptions | None = None):
        """With `server` (AgentOptions naming base_url and the model) its RemoteSampler, else with
        `model` our engine on that checkpoint at `step`, else nothing."""
        try:
            if server is not None:
                return cls(remote=load_sampler(server, None, None)[0])
            if model is None:
                return cls()
            enable_compilation_cache()
            return cls(engine=load_engine(model, step))
        except ModelError as e:
            return cls(error=e)

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def sampler(self, root, sampling: SamplerSettings):
        """The model for one run in `root` at these settings."""
        if self.remote is not None:
            return self.remote.fork(root, sampling)
        from agent.samplers.engine import EngineSampler  # jax: only where our engine runs
        return EngineSampler(self.engine, root, sampling)


def build_agent(o: AgentOptions, root, model_dir, messages=None, meta=None, store=None):
    """The Agent for these options (load_sampler), with the MCP servers its settings name
    (agent/mcp_hub.py). Every failure is a one-line ModelError; the TUI calls this on its loader
    thread."""
    try:  # project settings apply once accepted (tools/workspace.project_settings) or trusted
        policy = Policy.load(root, mode=o.mode, trust_settings=o.trust_settings)
    except SettingsError as e:
        raise ModelError(str(e), 2) from None
    mcp = McpHub(root, policy.mcp_servers, policy.mcp_ignored) if policy.mcp_servers or policy.mcp_ignored \
        else None  # its servers start while the model loads
    try:
        sampler, name = load_sampler(o, root, model_dir)
        agent = Agent(sampler, root, policy, o.turn, messages, meta, mcp=mcp)
    except BaseException:
        if mcp is not None:
            mcp.close()
        raise
    agent.refresh_system_prompt()  # a resumed session: today's AGENTS.md, folder and mode
    if messages:
        agent.load_context()
    agent.meta["model"] = name
    agent.conv.store = store or SessionStore(root, agent.meta["id"])
    return agent


def switch_model(agent, name: str) -> str:
    """/model NAME: the agent goes on with another model: a checkpoint directory or run tag for
    our engine, or with a server (--base-url) another model it serves; its sampling settings
    stay. A ModelError (one line) leaves the agent as it was. Returns the name the session
    records."""
    old = agent.sampler
    base_url = getattr(old, "base_url", None)
    model_dir = None if base_url else resolve_model(name)[0]
    options = AgentOptions(model=name, base_url=base_url, sampling=old.settings,
                           context=old.max_len if base_url else None)
    sampler, label = load_sampler(options, agent.root, model_dir)
    agent.use_sampler(sampler, label)
    return label
